//! Signing people in through the team's OpenID Connect provider (issue 31): the authorization
//! code flow with PKCE, `state` and `nonce`, the ID token's signature checked against the
//! provider's published keys and its issuer, audience and times checked (openidconnect does
//! the protocol; nothing here parses JOSE). The person's role comes from their `groups` claim
//! (the ID token's, else the userinfo answer's) through [`RoleMap`] at every sign-in, or from
//! the default role where it applies; the claims are cleaned first ([`claims`]: they are
//! untrusted input). The person is stored and a portal session opened.
//!
//! Starting a sign-in stores a pending row; there are at most [`OidcSettings::max_pending`]
//! live ones, and expired rows are removed at every start (the web layer limits how often an
//! address may start one). The callback compares `state` before it changes anything, so a
//! forged callback cannot spoil the real one.
//!
//! The provider's discovery document and keys are fetched at each sign-in step rather than
//! cached: sign-ins are rare, key rotation needs no restart, and a provider that is down is
//! found (and named) at once.

pub mod claims;
mod http;
mod redeem;

use std::sync::Arc;
use std::time::Duration;

use openidconnect::core::{
    CoreAuthDisplay, CoreAuthPrompt, CoreAuthenticationFlow, CoreErrorResponseType,
    CoreGenderClaim, CoreJsonWebKey, CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm,
    CoreProviderMetadata, CoreRevocableToken, CoreRevocationErrorResponse,
    CoreTokenIntrospectionResponse, CoreTokenType,
};
use openidconnect::{
    AdditionalClaims, Client, ClientId, ClientSecret, CsrfToken, EmptyExtraTokenFields,
    EndpointMaybeSet, EndpointNotSet, EndpointSet, IdTokenFields, IssuerUrl, Nonce,
    PkceCodeChallenge, RedirectUrl, Scope as OidcScope, StandardErrorResponse,
    StandardTokenResponse,
};
use serde::{Deserialize, Serialize};

pub use self::claims::{DefaultRole, Refusal};
pub use self::http::Http;
use super::tokens::NewSession;
use crate::auth;
use crate::roles::{PersonRole, RoleMap};
use crate::storage::people::{self as store, PendingLogin, SignedIn};
use crate::storage::{Db, DbError};

/// How far the provider's clock may be from ours: an ID token is taken this long after its
/// expiry, and refused when issued more than this far in the future.
pub const CLOCK_SKEW: Duration = Duration::from_secs(60);
/// The oldest ID token accepted (from its `iat`), skew included.
const MAX_TOKEN_AGE: Duration = Duration::from_secs(600);
/// How long a sign-in may stay at the provider before its callback is refused.
pub const PENDING_MINUTES: i32 = 10;
/// The most sign-ins under way kept at once (`OidcSettings::max_pending`'s default): a
/// few thousand rows at most, whoever starts them.
pub const MAX_PENDING: i64 = 3000;
/// What a browser refused because the pending sign-ins are full is told to wait, in seconds.
pub const FULL_RETRY_SECS: u64 = 60;

/// The provider and client settings (`--oidc-*`).
#[derive(Clone, Debug)]
pub struct OidcSettings {
    /// The issuer URL, exactly as the provider's discovery document spells it.
    pub issuer: String,
    pub client_id: String,
    pub client_secret: String,
    /// Scopes asked for besides `openid`.
    pub scopes: Vec<String>,
    /// Which groups give which role.
    pub roles: RoleMap,
    /// The role of people the groups give none (`--oidc-default-role`,
    /// `--oidc-allowed-domains`).
    pub default_role: DefaultRole,
    /// Shown on the sign-in button: "Sign in with NAME".
    pub provider_name: String,
    /// `{public-url}/login/oidc/callback`.
    pub redirect_url: String,
    /// The most sign-ins under way kept at once ([`MAX_PENDING`]); a start beyond it is
    /// refused as [`OidcError::Full`].
    pub max_pending: i64,
}

/// Why a sign-in through the provider did not happen.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    /// The provider could not be reached or answered nonsense (503).
    #[error("the identity provider is unavailable: {0}")]
    Unavailable(String),
    /// The provider's answer, or the browser's, failed a check (400): tampered state, a code
    /// already used or issued to another client, an ID token for another audience.
    #[error("{0}")]
    Refused(String),
    /// The callback's `state` is not this browser's sign-in's (400): nothing was changed, and
    /// the sign-in under way can still finish.
    #[error("the provider's answer does not match this sign-in (state differs): start again")]
    StateDiffers,
    /// As many sign-ins are under way as the portal keeps (503).
    #[error("too many sign-ins are under way; retry in {FULL_RETRY_SECS} s")]
    Full,
    /// The person's groups map to no role and the default role does not apply (403); what was
    /// received, for the refusal page.
    #[error("no role: your groups at the identity provider give none of the portal's roles")]
    NoRole(Box<Refusal>),
    /// An admin disabled the person (403).
    #[error("your account is disabled in this portal; ask an admin")]
    Disabled,
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("internal error: {0}")]
    Internal(#[source] anyhow::Error),
}

/// The `groups` claim of the ID token or userinfo answer, as sent: absent (then userinfo is
/// asked), an array of names, or whatever else a provider sends ([`claims::groups_of`] reads
/// it; a value of another shape does not spoil the whole token).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct GroupsClaim {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<serde_json::Value>,
}
impl AdditionalClaims for GroupsClaim {}

type IdFields = IdTokenFields<
    GroupsClaim,
    EmptyExtraTokenFields,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm,
>;
type OidcClient = Client<
    GroupsClaim,
    CoreAuthDisplay,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJsonWebKey,
    CoreAuthPrompt,
    StandardErrorResponse<CoreErrorResponseType>,
    StandardTokenResponse<IdFields, CoreTokenType>,
    CoreTokenIntrospectionResponse,
    CoreRevocableToken,
    CoreRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// Runs blocking provider I/O off the async threads, in the caller's span.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, OidcError> + Send + 'static,
) -> Result<T, OidcError> {
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || span.in_scope(f))
        .await
        .map_err(|e| OidcError::Internal(e.into()))?
}

/// Fetches the discovery document and keys, and builds the client from them.
fn discover(settings: &OidcSettings, http: &Http) -> Result<OidcClient, OidcError> {
    let issuer = IssuerUrl::new(settings.issuer.clone())
        .map_err(|e| OidcError::Unavailable(format!("the issuer URL is not valid: {e}")))?;
    let metadata = CoreProviderMetadata::discover(&issuer, http)
        .map_err(|e| OidcError::Unavailable(error_chain(&e)))?;
    let redirect = RedirectUrl::new(settings.redirect_url.clone())
        .map_err(|e| OidcError::Internal(anyhow::anyhow!("the callback URL: {e}")))?;
    Ok(OidcClient::from_provider_metadata(
        metadata,
        ClientId::new(settings.client_id.clone()),
        Some(ClientSecret::new(settings.client_secret.clone())),
    )
    .set_redirect_uri(redirect))
}

/// An error and its sources, on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// Checks at `serve` start that the issuer answers with a discovery document that names it.
#[tracing::instrument(name = "oidc::check_issuer", skip_all, fields(issuer = %settings.issuer))]
pub async fn check_issuer(settings: Arc<OidcSettings>) -> Result<(), OidcError> {
    blocking(move || discover(&settings, &Http::new()).map(|_| ())).await
}

/// A sign-in sent to the provider: where to send the browser, and the cookie that ties the
/// callback to this browser.
#[derive(Debug)]
pub struct Started {
    pub authorize_url: String,
    pub cookie: String,
}

/// Starts a sign-in: a fresh state, nonce and PKCE verifier, kept (under the browser cookie's
/// hash) until the callback. Expired sign-ins are removed first; with
/// [`OidcSettings::max_pending`] live ones the start is refused ([`OidcError::Full`]) before
/// the provider is asked anything.
#[tracing::instrument(name = "oidc::begin", skip_all, fields(issuer = %settings.issuer))]
pub async fn begin(
    db: &Db,
    settings: Arc<OidcSettings>,
    next_path: Option<String>,
) -> Result<Started, OidcError> {
    let max_pending = settings.max_pending;
    // Checked again under the lock below; this spares the provider a request when full.
    if store::count_live_pending(db.pool()).await? >= max_pending {
        return Err(OidcError::Full);
    }
    let (authorize_url, pending) = blocking(move || {
        let client = discover(&settings, &Http::new())?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = client.authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        );
        for scope in &settings.scopes {
            request = request.add_scope(OidcScope::new(scope.clone()));
        }
        let (url, state, nonce) = request.set_pkce_challenge(challenge).url();
        Ok((
            url.to_string(),
            PendingLogin {
                state: state.secret().clone(),
                nonce: nonce.secret().clone(),
                pkce_verifier: verifier.secret().clone(),
                next_path,
            },
        ))
    })
    .await?;
    let cookie = auth::generate().map_err(|e| OidcError::Internal(e.into()))?;
    let mut tx = db.pool().begin().await.map_err(DbError::from)?;
    store::lock_pending(&mut tx).await?;
    let expired = store::delete_expired_pending(&mut *tx).await?;
    if expired > 0 {
        tracing::debug!(expired, "expired sign-ins removed");
    }
    let full = store::count_live_pending(&mut *tx).await? >= max_pending;
    if !full {
        store::insert_pending(&mut *tx, &cookie.hash, &pending, PENDING_MINUTES).await?;
    }
    // Committed either way: the expired rows stay removed.
    tx.commit().await.map_err(DbError::from)?;
    if full {
        return Err(OidcError::Full);
    }
    Ok(Started {
        authorize_url,
        cookie: cookie.token,
    })
}

/// A finished sign-in: the new session, who it is, and where to go.
#[derive(Debug)]
pub struct Finished {
    pub session: NewSession,
    pub name: String,
    pub role: PersonRole,
    pub next_path: Option<String>,
}

/// Finishes a sign-in at the callback: the browser's pending sign-in (by its cookie) is read
/// and `state` compared in constant time before anything changes (a forged callback leaves the
/// real one able to finish), then the sign-in is taken (so a code is redeemed once), the code
/// exchanged with the PKCE verifier, the ID token verified, the role decided from the groups
/// (or the default role), the person stored and a session of `days` opened.
#[tracing::instrument(name = "oidc::finish", skip_all, fields(issuer = %settings.issuer, person_id = tracing::field::Empty))]
pub async fn finish(
    db: &Db,
    settings: Arc<OidcSettings>,
    cookie: Option<&str>,
    code: String,
    state: &str,
    days: i32,
) -> Result<Finished, OidcError> {
    let expired = || {
        OidcError::Refused(
            "this sign-in expired, was already finished, or was started in another browser: \
             start again"
                .into(),
        )
    };
    let cookie_hash = auth::hash(cookie.ok_or_else(expired)?);
    let found = store::find_pending(db.pool(), &cookie_hash)
        .await?
        .ok_or_else(expired)?;
    if !constant_time_eq(state.as_bytes(), found.login.state.as_bytes()) {
        return Err(OidcError::StateDiffers);
    }
    // Taken whether live or not (an expired one is only removed), and at most once.
    if !store::take_pending(db.pool(), &cookie_hash).await? || !found.live {
        return Err(expired());
    }
    let PendingLogin {
        nonce,
        pkce_verifier,
        next_path,
        ..
    } = found.login;
    let who = {
        let settings = settings.clone();
        blocking(move || redeem::redeem(&settings, code, pkce_verifier, nonce)).await?
    };
    if who.groups_ignored > 0 {
        tracing::warn!(
            subject = ?who.subject,
            ignored = who.groups_ignored,
            "groups ignored: unsafe characters, over {} characters, or over {} groups",
            claims::MAX_GROUP_CHARS,
            claims::MAX_GROUPS
        );
    }
    let role = match claims::decide_role(&settings.roles, &settings.default_role, &who) {
        Ok(role) => role,
        Err(refusal) => {
            tracing::warn!(
                subject = ?who.subject,
                email = ?who.email,
                email_verified = who.email_verified,
                groups = ?who.groups,
                groups_from = who.groups_source.as_str(),
                no_default = ?refusal.no_default,
                "sign-in refused: no role"
            );
            return Err(OidcError::NoRole(Box::new(refusal)));
        }
    };
    let person = store::upsert_signed_in(
        db.pool(),
        SignedIn {
            issuer: &settings.issuer,
            subject: &who.subject,
            email: &who.email,
            name: &who.name,
            role,
        },
    )
    .await?;
    tracing::Span::current().record("person_id", person.id);
    if person.disabled {
        return Err(OidcError::Disabled);
    }
    let session = auth::generate().map_err(|e| OidcError::Internal(e.into()))?;
    let csrf = auth::generate().map_err(|e| OidcError::Internal(e.into()))?;
    let csrf = csrf.token[auth::TOKEN_PREFIX.len()..].to_owned();
    store::create_session(db.pool(), &session.hash, person.id, &csrf, days).await?;
    Ok(Finished {
        session: NewSession {
            cookie: session.token,
            csrf,
        },
        name: person.name,
        role: person.role,
        next_path,
    })
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
