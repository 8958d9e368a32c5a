//! The server-rendered portal (askama templates in `templates/`, view structs prepared here so
//! templates hold no logic beyond loops and conditionals), its stylesheet and the report page's
//! and group list's small scripts.

pub mod group_bulk;
pub mod group_list;
pub mod group_triage;
pub mod groups;
pub mod login;
pub mod login_oidc;
pub mod logview;
pub mod people;
pub mod reports;
pub mod repro;
pub mod repro_outcome;
pub mod repro_status;
pub mod retention;
pub mod rules;
pub mod rules_disable;
pub mod rules_form;
pub mod search;
pub mod tokens;
pub mod trend;
pub mod webhooks;
pub mod when;

use axum::http::header;
use axum::response::IntoResponse;

use super::auth::PortalUser;

/// The stylesheet, embedded so the binary is self-contained.
const APP_CSS: &str = include_str!("../../../static/app.css");
/// The report page's one script (progressive enhancement: a pending reproduction updates in
/// place); same-origin, so the CSP's `default-src 'self'` allows it and inline script stays
/// forbidden.
const REPORT_JS: &str = include_str!("../../../static/report.js");
/// The group list's one script (progressive enhancement: a "select all" box for the bulk form).
const GROUPS_JS: &str = include_str!("../../../static/groups.js");

/// What every page's frame needs: version, who is signed in, the CSRF token for its forms.
#[derive(Clone, Debug)]
pub struct Layout {
    /// The program version, in the footer.
    pub version: &'static str,
    /// The signed-in token's name, if any.
    pub user: Option<String>,
    /// The session's CSRF token ("" when signed out).
    pub csrf: String,
    /// The signed-in token has the admin scope (admin-only links).
    pub admin: bool,
    /// The session manages API tokens (an admin, or a member's own): the Tokens link.
    pub tokens: bool,
    /// The signed-in token may submit reports and record fixes (ingest or admin): the paste
    /// form and fix links are shown only then.
    pub can_ingest: bool,
    /// When the page is drawn: the reference for relative times.
    pub now: crate::time::Timestamp,
}

impl Layout {
    /// The frame for a page seen by `user` (or nobody).
    pub fn for_user(user: Option<&PortalUser>) -> Layout {
        Layout {
            version: env!("CARGO_PKG_VERSION"),
            user: user.map(|u| u.name().to_owned()),
            csrf: user.map(|u| u.0.csrf.clone()).unwrap_or_default(),
            admin: user.is_some_and(|u| u.require(&[crate::auth::Scope::Admin]).is_ok()),
            tokens: user.is_some_and(|u| crate::app::tokens::Manager::of(&u.0).is_ok()),
            can_ingest: user.is_some_and(|u| u.require(&[crate::auth::Scope::Ingest]).is_ok()),
            now: crate::time::Timestamp::from_unix(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX)),
            ),
        }
    }

    /// `at` relative to when this page is drawn, the exact time on hover.
    #[must_use]
    pub fn when(&self, at: impl std::borrow::Borrow<crate::time::Timestamp>) -> when::When {
        when::When::new(*at.borrow(), self.now)
    }
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

/// `GET /static/report.js`.
pub async fn report_script() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        REPORT_JS,
    )
}

/// `GET /static/groups.js`.
pub async fn groups_script() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        GROUPS_JS,
    )
}
