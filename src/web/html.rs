//! The server-rendered portal pages (askama templates in `templates/`) and the stylesheet.

use askama::Template;
use askama_web::WebTemplate;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;

/// The stylesheet, embedded so the binary is self-contained.
const APP_CSS: &str = include_str!("../../static/app.css");

/// `GET /`: what gpu-triage does and where to start.
#[derive(Template, WebTemplate)]
#[template(path = "home.html")]
pub struct HomePage {
    version: &'static str,
}

/// `GET /`.
pub async fn home() -> HomePage {
    HomePage {
        version: env!("CARGO_PKG_VERSION"),
    }
}

/// A page for paths that do not exist.
#[derive(Template, WebTemplate)]
#[template(path = "not_found.html")]
pub struct NotFoundPage {
    version: &'static str,
}

/// Any unknown path: 404 with a page.
pub async fn not_found() -> impl IntoResponse {
    (
        StatusCode::NOT_FOUND,
        NotFoundPage {
            version: env!("CARGO_PKG_VERSION"),
        },
    )
}

/// `GET /static/app.css`.
pub async fn stylesheet() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        APP_CSS,
    )
}
