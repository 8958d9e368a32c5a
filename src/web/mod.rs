//! HTTP in and out: the router, shared state, the error type every handler returns, and the
//! security headers every response carries. Handlers are thin: extract, call one domain
//! function, map the result.

pub mod auth;
mod error;
mod health;
mod html;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};

pub use error::{AppError, PageError};

use crate::storage::Db;

/// What every handler can reach.
#[derive(Clone, Debug)]
pub struct AppState {
    /// The database handle.
    pub db: Db,
    /// Where users reach this server, for links in API responses (no trailing slash).
    pub public_url: String,
    /// Whether cookies get the `Secure` attribute (the portal is served over TLS).
    pub secure_cookies: bool,
}

impl AppState {
    /// State for a server reached at `public_url` (e.g. `https://triage.example.com`).
    pub fn new(db: Db, public_url: &str) -> AppState {
        let public_url = public_url.trim_end_matches('/').to_string();
        AppState {
            db,
            secure_cookies: public_url.starts_with("https://"),
            public_url,
        }
    }
}

/// The whole application's routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/", get(html::home))
        .route("/static/app.css", get(html::stylesheet))
        .route(
            "/login",
            get(html::login::show_login).post(html::login::create_session),
        )
        .route("/logout", post(html::login::delete_session))
        .fallback(html::not_found)
        .layer(middleware::from_fn(security_headers))
        .with_state(state)
}

/// SECURITY.md item 4: a strict CSP (no inline script, no framing) and nosniff on everything.
async fn security_headers(req: axum::extract::Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    let headers = res.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    res
}
