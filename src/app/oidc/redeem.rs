//! The callback's provider I/O (blocking, run off the async threads): the code exchanged with
//! the PKCE verifier, the ID token verified, and, when the ID token has no `groups` claim, the
//! userinfo endpoint asked (the OpenID Connect spec lets a provider put claims there only, and
//! oidc-provider and others do by default). What comes back is cleaned into an [`Identity`].

use openidconnect::core::CoreGenderClaim;
use openidconnect::{
    AuthorizationCode, Nonce, OAuth2TokenResponse, PkceCodeVerifier, RequestTokenError,
    TokenResponse, UserInfoClaims,
};

use super::claims::{self, GroupsSource, Identity};
use super::{CLOCK_SKEW, GroupsClaim, Http, MAX_TOKEN_AGE, OidcError, OidcSettings};
use super::{discover, error_chain};

/// What the provider said, before cleaning.
#[derive(Default)]
struct Received {
    subject: String,
    email: Option<String>,
    email_verified: Option<bool>,
    name: Option<String>,
    preferred_username: Option<String>,
    groups: Option<Vec<String>>,
    groups_source: Option<GroupsSource>,
}

/// Exchanges the code, verifies the ID token and reads the person's claims (blocking I/O).
pub(super) fn redeem(
    settings: &OidcSettings,
    code: String,
    verifier: String,
    nonce: String,
) -> Result<Identity, OidcError> {
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
    let id_verifier = client
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
    let token = id_token
        .claims(&id_verifier, &Nonce::new(nonce))
        .map_err(|e| {
            OidcError::Refused(format!("the ID token was refused: {}", error_chain(&e)))
        })?;
    let groups = token
        .additional_claims()
        .groups
        .as_ref()
        .and_then(claims::groups_of);
    let mut received = Received {
        subject: token.subject().as_str().to_owned(),
        email: token.email().map(|e| e.as_str().to_owned()),
        email_verified: token.email_verified(),
        name: token
            .name()
            .and_then(|n| n.get(None))
            .map(|n| n.as_str().to_owned()),
        preferred_username: token.preferred_username().map(|u| u.as_str().to_owned()),
        groups_source: groups.is_some().then_some(GroupsSource::IdToken),
        groups,
    };
    if received.groups.is_none() && client.user_info_url().is_some() {
        let info = client
            .user_info(
                response.access_token().clone(),
                Some(token.subject().clone()),
            )
            .map_err(|e| OidcError::Internal(e.into()))?
            .request::<GroupsClaim, CoreGenderClaim, _>(&http)
            .map_err(|e| match e {
                openidconnect::UserInfoError::Request(e) => {
                    OidcError::Unavailable(format!("its userinfo endpoint: {}", error_chain(&e)))
                }
                other => OidcError::Refused(format!(
                    "the provider's userinfo answer was refused: {}",
                    error_chain(&other)
                )),
            })?;
        fill_from_user_info(&mut received, &info);
    }
    identity(received)
}

/// Takes from the userinfo answer what the ID token lacked.
fn fill_from_user_info(
    received: &mut Received,
    info: &UserInfoClaims<GroupsClaim, CoreGenderClaim>,
) {
    if let Some(groups) = info.additional_claims().groups.as_ref() {
        received.groups = claims::groups_of(groups);
        received.groups_source = received.groups.is_some().then_some(GroupsSource::UserInfo);
    }
    if received.email.is_none() {
        received.email = info.email().map(|e| e.as_str().to_owned());
        received.email_verified = info.email_verified();
    }
    if received.name.is_none() {
        received.name = info
            .name()
            .and_then(|n| n.get(None))
            .map(|n| n.as_str().to_owned());
    }
    if received.preferred_username.is_none() {
        received.preferred_username = info.preferred_username().map(|u| u.as_str().to_owned());
    }
}

/// The cleaned person: the name falls back to the preferred username, the email, then the
/// subject.
fn identity(received: Received) -> Result<Identity, OidcError> {
    let subject = claims::check_subject(&received.subject)
        .map_err(OidcError::Refused)?
        .to_owned();
    let email = received
        .email
        .as_deref()
        .and_then(claims::clean_email)
        .unwrap_or_default();
    let name = received
        .name
        .as_deref()
        .and_then(claims::clean_name)
        .or_else(|| {
            received
                .preferred_username
                .as_deref()
                .and_then(claims::clean_name)
        })
        .unwrap_or_else(|| {
            if email.is_empty() {
                subject.clone()
            } else {
                email.clone()
            }
        });
    let (groups, groups_ignored) = claims::clean_groups(received.groups.unwrap_or_default());
    Ok(Identity {
        subject,
        email_verified: received.email_verified == Some(true) && !email.is_empty(),
        email,
        name,
        groups,
        groups_source: received.groups_source.unwrap_or(GroupsSource::Absent),
        groups_ignored,
    })
}
