//! Signing people in through the team's OpenID Connect provider (issue 31): the authorization
//! code flow with PKCE, `state` and `nonce`, the ID token's signature checked against the
//! provider's published keys and its issuer, audience and times checked (openidconnect does
//! the protocol; nothing here parses JOSE). The person's role comes from the token's `groups`
//! claim through [`RoleMap`] at every sign-in; the person is stored and a portal session opened.
//!
//! The provider's discovery document and keys are fetched at each sign-in step rather than
//! cached: sign-ins are rare, key rotation needs no restart, and a provider that is down is
//! found (and named) at once.

mod http;

use std::sync::Arc;
use std::time::Duration;

use openidconnect::core::{
    CoreAuthDisplay, CoreAuthPrompt, CoreAuthenticationFlow, CoreErrorResponseType,
    CoreGenderClaim, CoreJsonWebKey, CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm,
    CoreProviderMetadata, CoreRevocableToken, CoreRevocationErrorResponse,
    CoreTokenIntrospectionResponse, CoreTokenType,
};
use openidconnect::{
    AdditionalClaims, AuthorizationCode, Client, ClientId, ClientSecret, CsrfToken,
    EmptyExtraTokenFields, EndpointMaybeSet, EndpointNotSet, EndpointSet, IdTokenFields, IssuerUrl,
    Nonce, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, RequestTokenError, Scope as OidcScope,
    StandardErrorResponse, StandardTokenResponse, TokenResponse,
};
use serde::{Deserialize, Serialize};

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
    /// Shown on the sign-in button: "Sign in with NAME".
    pub provider_name: String,
    /// `{public-url}/login/oidc/callback`.
    pub redirect_url: String,
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
    /// The person's groups map to no role (403).
    #[error("no role: your groups at the identity provider give none of the portal's roles")]
    NoRole,
    /// An admin disabled the person (403).
    #[error("your account is disabled in this portal; ask an admin")]
    Disabled,
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("internal error: {0}")]
    Internal(#[source] anyhow::Error),
}

/// The `groups` claim of the ID token (absent: no groups).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct GroupsClaim {
    #[serde(default)]
    pub groups: Vec<String>,
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
/// hash) until the callback.
#[tracing::instrument(name = "oidc::begin", skip_all, fields(issuer = %settings.issuer))]
pub async fn begin(
    db: &Db,
    settings: Arc<OidcSettings>,
    next_path: Option<String>,
) -> Result<Started, OidcError> {
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
    let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
    store::insert_pending(&mut conn, &cookie.hash, &pending, PENDING_MINUTES).await?;
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

/// What the provider's ID token says about the person.
struct Claims {
    subject: String,
    email: String,
    name: String,
    groups: Vec<String>,
}

/// Finishes a sign-in at the callback: the browser's pending sign-in (by its cookie) is taken
/// (so a code can be redeemed once), `state` compared, the code exchanged with the PKCE
/// verifier, the ID token verified, the role mapped from its groups, the person stored and a
/// session of `days` opened.
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
    let cookie = cookie.ok_or_else(expired)?;
    let pending = store::take_pending(db.pool(), &auth::hash(cookie))
        .await?
        .ok_or_else(expired)?;
    if !constant_time_eq(state.as_bytes(), pending.state.as_bytes()) {
        return Err(OidcError::Refused(
            "the provider's answer does not match this sign-in (state differs): start again".into(),
        ));
    }
    let claims = {
        let settings = settings.clone();
        blocking(move || redeem(&settings, code, pending.pkce_verifier, pending.nonce)).await?
    };
    let role = settings
        .roles
        .role_of(&claims.groups)
        .ok_or(OidcError::NoRole)?;
    let person = store::upsert_signed_in(
        db.pool(),
        SignedIn {
            issuer: &settings.issuer,
            subject: &claims.subject,
            email: &claims.email,
            name: &claims.name,
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
        next_path: pending.next_path,
    })
}

/// Exchanges the code and verifies the ID token (blocking I/O).
fn redeem(
    settings: &OidcSettings,
    code: String,
    verifier: String,
    nonce: String,
) -> Result<Claims, OidcError> {
    let http = Http::new();
    let client = discover(settings, &http)?;
    let response = client
        .exchange_code(AuthorizationCode::new(code))
        .map_err(|e| OidcError::Unavailable(format!("the provider has no token endpoint: {e}")))?
        .set_pkce_verifier(PkceCodeVerifier::new(verifier))
        .request(&http)
        .map_err(|e| match e {
            RequestTokenError::ServerResponse(r) => OidcError::Refused(format!(
                "the provider refused the sign-in code ({}{}): start again",
                r.error(),
                r.error_description()
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default()
            )),
            RequestTokenError::Request(e) => OidcError::Unavailable(error_chain(&e)),
            other => OidcError::Refused(format!(
                "the provider's token answer could not be read: {}",
                error_chain(&other)
            )),
        })?;
    let id_token = response.id_token().ok_or_else(|| {
        OidcError::Refused("the provider sent no ID token (is `openid` among the scopes?)".into())
    })?;
    let skew = chrono::Duration::from_std(CLOCK_SKEW).map_err(|e| OidcError::Internal(e.into()))?;
    let max_age =
        chrono::Duration::from_std(MAX_TOKEN_AGE).map_err(|e| OidcError::Internal(e.into()))?;
    let verifier = client
        .id_token_verifier()
        // Expiry is compared with a clock `skew` behind ours: at most that late is accepted.
        .set_time_fn(move || chrono::Utc::now() - skew)
        .set_issue_time_verifier_fn(move |iat| {
            let now = chrono::Utc::now();
            if iat > now + skew {
                Err(format!("issued in the future ({iat})"))
            } else if iat < now - max_age {
                Err(format!("issued too long ago ({iat})"))
            } else {
                Ok(())
            }
        });
    let claims = id_token
        .claims(&verifier, &Nonce::new(nonce))
        .map_err(|e| {
            OidcError::Refused(format!("the ID token was refused: {}", error_chain(&e)))
        })?;
    let email = claims
        .email()
        .map(|e| e.as_str().to_owned())
        .unwrap_or_default();
    let name = claims
        .name()
        .and_then(|n| n.get(None))
        .map(|n| n.as_str().to_owned())
        .or_else(|| claims.preferred_username().map(|u| u.as_str().to_owned()))
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| {
            if email.is_empty() {
                claims.subject().as_str().to_owned()
            } else {
                email.clone()
            }
        });
    Ok(Claims {
        subject: claims.subject().as_str().to_owned(),
        email,
        name,
        groups: claims.additional_claims().groups.clone(),
    })
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
