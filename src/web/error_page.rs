//! HTML error pages: how a [`PageError`] looks on the portal (the error page in the portal's
//! frame, or a redirect to sign in), the 404 page, and the layer that draws an error page again
//! in the frame of the person signed in. Above the error type, the session and the page layout,
//! so that none of those depends back on the pages.

use askama::Template;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

use super::error::{AppError, PageError};
use crate::app;

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    layout: super::html::Layout,
    status: u16,
    reason: &'a str,
    message: &'a str,
}

/// What an HTML error response showed, kept on the response so [`error_page_layout`] can draw
/// it again in the signed-in frame: the error's own renderer does not know who is asking.
#[derive(Clone, Debug)]
struct ShownError {
    status: StatusCode,
    message: String,
}

/// The error page for `status` with `message`, in `layout`.
fn render_error_page(layout: super::html::Layout, status: StatusCode, message: &str) -> Response {
    let page = ErrorPage {
        layout,
        status: status.as_u16(),
        reason: &sentence_case(status.canonical_reason().unwrap_or("Error")),
        message,
    };
    let mut res = match page.render() {
        Ok(html) => (status, Html(html)).into_response(),
        Err(_) => (status, message.to_owned()).into_response(),
    };
    res.extensions_mut().insert(ShownError {
        status,
        message: message.to_owned(),
    });
    res
}

/// "Not Found" as a heading reads: "Not found".
fn sentence_case(reason: &str) -> String {
    let mut out = String::with_capacity(reason.len());
    for (i, c) in reason.chars().enumerate() {
        if i == 0 {
            out.extend(c.to_uppercase());
        } else {
            out.extend(c.to_lowercase());
        }
    }
    out
}

/// The 404 page for a path that does not exist.
pub(super) fn not_found_page() -> Response {
    render_error_page(
        super::html::Layout::for_user(None),
        StatusCode::NOT_FOUND,
        "There is nothing at this address.",
    )
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let err = self.0;
        err.log();
        let (status, _) = err.status_and_code();
        match &err {
            // A page that needs a session sends the person to sign in, and back afterwards.
            AppError::SignInFirst { next: Some(next) } => {
                let query = serde_urlencoded::to_string([("next", next)]).unwrap_or_default();
                return axum::response::Redirect::to(&format!("/login?{query}")).into_response();
            }
            AppError::Unauthorized(_) | AppError::SignInFirst { next: None } => {
                return axum::response::Redirect::to("/login").into_response();
            }
            _ => {}
        }
        if let AppError::Merged { group, into } = err {
            // The page of the group it went into, which says so.
            return axum::response::Redirect::to(&format!("/groups/{into}?merged_from={group}"))
                .into_response();
        }
        let mut res = render_error_page(
            super::html::Layout::for_user(None),
            status,
            &err.to_string(),
        );
        err.add_headers(&mut res);
        res
    }
}

/// Draws HTML error pages in the frame of the person signed in (their name, the navigation, the
/// way back), not the signed-out one. Shed (503) and rate-limited (429) pages are left as they
/// are, so an overloaded server does no extra database work for them: errors are rendered where the session is not known (an
/// extractor's rejection, the fallback), so the session is looked up here, only for them.
pub async fn error_page_layout(
    axum::extract::State(state): axum::extract::State<super::state::AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let cookie =
        super::auth::cookie_value(req.headers(), super::auth::SESSION_COOKIE).map(str::to_owned);
    let mut res = next.run(req).await;
    let (Some(cookie), Some(shown)) = (cookie, res.extensions().get::<ShownError>().cloned())
    else {
        return res;
    };
    if matches!(
        shown.status,
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS
    ) {
        return res; // Shedding load: no database work for the frame.
    }
    let Ok(Some(session)) = app::tokens::find_session(&state.db, &cookie).await else {
        return res;
    };
    let user = super::auth::PortalUser(session);
    let mut page = render_error_page(
        super::html::Layout::for_user(Some(&user)),
        shown.status,
        &shown.message,
    );
    // Keep what the first rendering set (Retry-After, WWW-Authenticate), not its body.
    for (name, value) in res.headers_mut().drain().filter_map(|(n, v)| Some((n?, v))) {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            page.headers_mut().insert(name, value);
        }
    }
    page
}
