//! Who is calling. The API takes tokens only from `Authorization: Bearer` (never cookies or
//! query strings, SECURITY.md item 5); the portal takes an HttpOnly session cookie obtained by
//! signing in with a token, and its state-changing forms must carry the session's CSRF token
//! and a same-site `Origin`. A page asked for without a session is returned to after signing
//! in, when its address passes [`return_path`].

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, header};

use super::error::AppError;
use super::limits::InFlight;
use super::live::Holders;
use super::state::AppState;
use crate::actor::Actor;
use crate::app::tokens;
use crate::app::tokens::{Holder, Session, TokenRecord};
use crate::auth::{self, Scope};

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "gt_session";

/// A request authenticated with an API token.
#[derive(Clone, Debug)]
pub struct ApiToken(pub TokenRecord);

/// `token` as the actor of what a request does.
#[must_use]
pub fn token_actor(token: &TokenRecord) -> Actor {
    Actor::Token {
        id: token.id,
        name: token.name.clone(),
    }
}

impl ApiToken {
    /// The token as the actor of what the request does.
    #[must_use]
    pub fn actor(&self) -> Actor {
        token_actor(&self.0)
    }

    /// 403 unless the token holds one of `wanted` (or `admin`).
    pub fn require(&self, wanted: &[Scope]) -> Result<(), AppError> {
        if auth::allows(&self.0.scopes, wanted) {
            Ok(())
        } else {
            let names: Vec<&str> = wanted.iter().map(|s| s.as_str()).collect();
            Err(AppError::Forbidden(format!(
                "this token lacks the {} scope",
                names.join(" or ")
            )))
        }
    }
}

/// What the admission middleware found of a request's credentials, kept in the request's
/// extensions so that extractors never ask the database a second time (one credential check
/// per request).
#[derive(Clone, Debug)]
pub enum Checked {
    /// Both credentials could be checked; what is valid of them.
    Verified(Box<Verified>),
    /// The database could not say (an outage): the request was admitted as anonymous, and an
    /// extractor that needs its credentials answers 503 at once rather than waiting again.
    Unavailable,
}

/// The credentials the admission middleware found valid.
#[derive(Clone, Debug)]
pub struct Verified {
    /// The `Authorization: Bearer` token, when valid.
    pub token: Option<TokenRecord>,
    /// The portal session of the cookie, when valid.
    pub session: Option<Session>,
}

impl Verified {
    /// The budget whose rate and share of the in-flight slots the request counts against
    /// (`TokenRecord::budget_key`): the bearer token's, else the session's; `None` for a
    /// request with no valid credentials.
    pub fn budget_key(&self) -> Option<i64> {
        self.token
            .as_ref()
            .map(TokenRecord::budget_key)
            .or_else(|| self.session.as_ref().map(Session::budget_key))
    }

    /// Whose credentials the request carries, so revoking one of them ends it.
    pub fn holders(&self) -> Holders {
        let mut holders = Holders::default();
        let tokens =
            (self.token.iter()).chain(self.session.iter().filter_map(|s| match &s.holder {
                Holder::Token(t) => Some(t),
                Holder::Person(_) => None,
            }));
        for token in tokens {
            holders.tokens.push(token.id);
            holders
                .persons
                .extend(token.owner.as_ref().map(|o| o.person_id));
        }
        if let Some(Holder::Person(p)) = self.session.as_ref().map(|s| &s.holder) {
            holders.persons.push(p.id);
        }
        holders
    }

    /// Whether the request acts with the admin scope (its bearer token, else its session).
    pub fn is_admin(&self) -> bool {
        let scopes = match (&self.token, &self.session) {
            (Some(token), _) => &token.scopes[..],
            (None, Some(session)) => session.scopes(),
            (None, None) => return false,
        };
        auth::allows(scopes, &[Scope::Admin])
    }
}

/// Checks a request's credentials (bearer token and session cookie) before it is admitted
/// (SECURITY.md item 18): only what is valid counts, so a forged header cannot reach the
/// slots of token holders. [`Checked::Unavailable`] when the database could not say; the
/// request is then admitted as anonymous and its handler answers 503 if it needs credentials.
pub async fn verify(state: &AppState, headers: &HeaderMap) -> Checked {
    let checked = async {
        let token = match bearer(headers) {
            Ok(secret) => tokens::authenticate(&state.db, secret).await?,
            Err(_) => None,
        };
        let session = match cookie_value(headers, SESSION_COOKIE) {
            Some(cookie) => tokens::find_session(&state.db, cookie).await?,
            None => None,
        };
        Ok::<_, crate::app::Error>(Verified { token, session })
    };
    match checked.await {
        Ok(verified) => Checked::Verified(Box::new(verified)),
        Err(_) => Checked::Unavailable,
    }
}

/// The secret of the `Authorization: Bearer` header, or why there is none.
fn bearer(headers: &HeaderMap) -> Result<&str, AppError> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or(AppError::Unauthorized(
            "missing Authorization: Bearer token",
        ))?;
    value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or(AppError::Unauthorized(
            "the Authorization header must be `Bearer <token>`",
        ))
}

impl FromRequestParts<AppState> for ApiToken {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        let token = bearer(&parts.headers)?;
        let record = match parts.extensions.get::<Checked>() {
            Some(Checked::Verified(verified)) => verified.token.clone(),
            Some(Checked::Unavailable) => return Err(AppError::Unavailable),
            // Paths outside admission (the worker's long-poll claim) check here, once.
            None => tokens::authenticate(&state.db, token).await?,
        }
        .ok_or(AppError::Unauthorized("invalid or revoked token"))?;
        if let Err(secs) = state.rate.check(record.budget_key()) {
            state.metrics.request_rate_limited();
            return Err(AppError::RateLimited(secs));
        }
        take_token_share(parts, state, record.budget_key())?;
        Ok(ApiToken(record))
    }
}

/// A signed-in portal user.
#[derive(Clone, Debug)]
pub struct PortalUser(pub Session);

impl PortalUser {
    /// Checks a state-changing form post: the CSRF field must match the session's, and an
    /// `Origin` header, when the browser sends one, must be this site.
    pub fn check_form(&self, headers: &HeaderMap, csrf: &str) -> Result<(), AppError> {
        if !same_origin(headers) {
            return Err(AppError::Forbidden("cross-site form post refused".into()));
        }
        if csrf.is_empty() || !constant_time_eq(csrf.as_bytes(), self.0.csrf.as_bytes()) {
            return Err(AppError::Forbidden(
                "the form's CSRF token is missing or stale; reload the page and try again".into(),
            ));
        }
        Ok(())
    }

    /// 403 unless the session (its token, or its person's role) holds one of `wanted`.
    pub fn require(&self, wanted: &[Scope]) -> Result<(), AppError> {
        if auth::allows(self.0.scopes(), wanted) {
            return Ok(());
        }
        let names: Vec<&str> = wanted.iter().map(|s| s.as_str()).collect();
        Err(AppError::Forbidden(match &self.0.holder {
            Holder::Token(_) => format!("this token lacks the {} scope", names.join(" or ")),
            Holder::Person(p) => format!(
                "your role ({}) does not allow this: it needs the {} scope",
                p.role,
                names.join(" or ")
            ),
        }))
    }

    /// The name shown and recorded for what this session does: the person's, or the token's.
    #[must_use]
    pub fn name(&self) -> &str {
        self.0.name()
    }

    /// Who acts through this session: its person, or the token it signed in with. Use cases
    /// record it with what they do, and "mine" filters ask for it.
    #[must_use]
    pub fn actor(&self) -> Actor {
        match &self.0.holder {
            Holder::Token(t) => token_actor(t),
            Holder::Person(p) => Actor::Person {
                id: p.id,
                name: p.name.clone(),
            },
        }
    }
}

impl FromRequestParts<AppState> for PortalUser {
    type Rejection = super::error::PageError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, super::error::PageError> {
        let user = match OptionalUser::from_request_parts(parts, state).await?.0 {
            Some(user) => user,
            None => {
                // A page asked for by address is returned to after signing in; a form posted
                // without a session is not (its target is not a page).
                let next = matches!(parts.method, Method::GET | Method::HEAD)
                    .then(|| parts.uri.path_and_query().map(|p| p.as_str()))
                    .flatten()
                    .and_then(return_path)
                    .map(str::to_owned);
                return Err(AppError::SignInFirst { next }.into());
            }
        };
        // A portal action (upload, fix, re-queue, rule edit) is the signed-in token acting, so
        // it spends the same per-token budget as the API would (SECURITY.md, issue 16 item 5).
        // Reading pages does not.
        if !matches!(parts.method, Method::GET | Method::HEAD)
            && let Err(secs) = state.rate.check(user.0.budget_key())
        {
            state.metrics.request_rate_limited();
            return Err(AppError::RateLimited(secs).into());
        }
        take_token_share(parts, state, user.0.budget_key())?;
        Ok(user)
    }
}

/// Counts the request against its budget's share of the in-flight slots (a person's tokens and
/// sessions together, or a service token's calls), so one member's slow uploads cannot hold
/// the whole server however many tokens they make.
fn take_token_share(parts: &Parts, state: &AppState, key: i64) -> Result<(), AppError> {
    let Some(held) = parts.extensions.get::<InFlight>() else {
        return Ok(()); // Paths outside the cap (probes, the worker's long-poll claim).
    };
    state.shed.take_token_share(held, key).inspect_err(|_| {
        state.metrics.request_rate_limited();
    })
}

/// The portal user when signed in, `None` otherwise (pages that work either way).
#[derive(Clone, Debug)]
pub struct OptionalUser(pub Option<PortalUser>);

impl FromRequestParts<AppState> for OptionalUser {
    type Rejection = super::error::PageError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, super::error::PageError> {
        let Some(cookie) = cookie_value(&parts.headers, SESSION_COOKIE) else {
            return Ok(OptionalUser(None));
        };
        let session = match parts.extensions.get::<Checked>() {
            Some(Checked::Verified(verified)) => verified.session.clone(),
            Some(Checked::Unavailable) => return Err(AppError::Unavailable.into()),
            None => tokens::find_session(&state.db, cookie).await?,
        };
        Ok(OptionalUser(session.map(PortalUser)))
    }
}

/// The longest return path kept across sign-in.
pub const RETURN_PATH_MAX_BYTES: usize = 1000;

/// `raw` when it is a path on this site to return to after signing in: it starts with one `/`
/// (not `//` or `/\`, which browsers read as another host), holds no control characters or
/// spaces, is at most [`RETURN_PATH_MAX_BYTES`], and is not the sign-in page itself. Anything
/// else (a full URL, `//evil.example`, `javascript:`) is no return path: no open redirect.
#[must_use]
pub fn return_path(raw: &str) -> Option<&str> {
    let rest = raw.strip_prefix('/')?;
    let sign_in = raw == "/login" || raw.starts_with("/login?") || raw.starts_with("/login/");
    let refused = raw.len() > RETURN_PATH_MAX_BYTES
        || rest.starts_with(['/', '\\'])
        || raw.chars().any(|c| c.is_control() || c.is_whitespace())
        || sign_in;
    (!refused).then_some(raw)
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// 403 when a browser says the request comes from another site: for forms that run before a
/// session (and its CSRF token) exists, such as signing in (login CSRF).
pub fn check_origin(headers: &HeaderMap) -> Result<(), AppError> {
    if same_origin(headers) {
        Ok(())
    } else {
        Err(AppError::Forbidden("cross-site form post refused".into()))
    }
}

/// Middleware: a portal form post whose `Origin` is not this site, scheme included, is refused
/// with 403 before its handler runs. The handlers' own check compares hosts only, as it has no
/// settings; here the scheme must be the public URL's too, so `https://host` is a foreign
/// origin to a plain-http server (and the other way round).
pub async fn refuse_cross_site_forms(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let is_form_post = !matches!(
        req.method(),
        &Method::GET | &Method::HEAD | &Method::OPTIONS
    ) && !req.uri().path().starts_with("/api/");
    let scheme = state
        .public_url
        .split_once("://")
        .map_or("http", |(s, _)| s);
    if is_form_post && !origin_matches(req.headers(), scheme) {
        return super::error::PageError(AppError::Forbidden("cross-site form post refused".into()))
            .into_response();
    }
    next.run(req).await
}

/// Whether the request's `Origin` (when present) is `scheme://` and its `Host`.
fn origin_matches(headers: &HeaderMap, scheme: &str) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let Some((origin_scheme, _)) = origin.split_once("://") else {
        return false; // `null` and other opaque origins.
    };
    origin_scheme.eq_ignore_ascii_case(scheme) && same_origin(headers)
}

/// Whether the request's `Origin` (when present) names the same host as its `Host` header.
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true; // Non-browser clients and same-origin GETs may omit it; CSRF still applies.
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let origin_host = origin
        .split_once("://")
        .map(|(_, rest)| rest.trim_end_matches('/'))
        .unwrap_or("");
    !host.is_empty() && origin_host.eq_ignore_ascii_case(host)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::return_path;

    #[test]
    fn only_a_path_on_this_site_is_returned_to_after_sign_in() {
        for ok in [
            "/",
            "/reports/72",
            "/reports/72?grep=illegal%20memory#L9",
            "/groups?state=open&page=2",
        ] {
            assert_eq!(return_path(ok), Some(ok), "{ok}");
        }
        for refused in [
            "",
            "reports/72",
            "https://evil.example/",
            "//evil.example/x",
            "/\\evil.example",
            "javascript:alert(1)",
            "/reports/72\r\nSet-Cookie: x=1",
            "/a b",
            "/login",
            "/login?next=/x",
            "/login/oidc",
        ] {
            assert_eq!(return_path(refused), None, "{refused:?}");
        }
        let long = format!("/search?q={}", "a".repeat(1000));
        assert_eq!(return_path(&long), None);
    }
}
