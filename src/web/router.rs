//! The whole application's routes (portal pages, the JSON API and its probes, static files)
//! and the layers every request passes through (request id, security headers, error pages,
//! metrics, load shedding, body pacing and decoding, the multipart guard, the cross-site form
//! check), in the order they run.

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};

use super::error::{self, AppError};
use super::error_page;
use super::state::AppState;
use super::{admission, api, auth, html, limits, metrics, multipart_guard, request_id};

/// The whole application's routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(html::reports::home))
        .route(
            "/reports",
            get(html::reports::list_reports)
                .post(html::reports::create_report)
                .layer(DefaultBodyLimit::disable()),
        )
        .route("/reports/{id}", get(html::reports::show_report))
        .route("/reports/{id}/raw", get(html::reports::raw_log))
        .route("/jobs/{id}/requeue", post(html::repro::requeue_job))
        .route("/groups", get(html::group_list::list_groups))
        .route("/groups/{id}", get(html::groups::show_group))
        .route("/groups/{id}/fixes", post(html::groups::create_fix))
        .route("/groups/{id}/state", post(html::group_triage::update_state))
        .route("/groups/{id}/merge", post(html::groups::merge_group))
        .route("/groups/{id}/unmerge", post(html::groups::unmerge_group))
        .route("/groups/bulk", post(html::group_bulk::bulk_groups))
        .route(
            "/groups/changes/{id}/undo",
            post(html::group_bulk::undo_change),
        )
        .route("/search", get(html::search::search))
        .route(
            "/rules",
            get(html::rules::list_rules).post(html::rules_form::save_rule),
        )
        .route("/rules/new", get(html::rules_form::new_rule))
        .route("/rules/reclassify", post(html::rules::start_reclassify))
        .route("/rules/{id}", get(html::rules::show_rule))
        .route("/rules/{id}/enabled", post(html::rules::set_enabled))
        .route(
            "/rules/{id}/disable",
            get(html::rules_disable::show_disable),
        )
        .route("/rules/{id}/delete", post(html::rules::delete_rule))
        .route(
            "/tokens",
            get(html::tokens::list_tokens).post(html::tokens::create_token),
        )
        .route("/tokens/{id}/revoke", post(html::tokens::revoke_token))
        .route("/people", get(html::people::list_people))
        .route("/people/{id}/disable", post(html::people::disable_person))
        .route("/people/{id}/enable", post(html::people::enable_person))
        .route(
            "/people/{id}/sessions/revoke",
            post(html::people::end_sessions),
        )
        .route(
            "/webhooks",
            get(html::webhooks::list_webhooks).post(html::webhooks::create_webhook),
        )
        .route(
            "/webhooks/{id}",
            get(html::webhooks::show_webhook).post(html::webhooks::update_webhook),
        )
        .route("/webhooks/{id}/enabled", post(html::webhooks::set_enabled))
        .route("/webhooks/{id}/test", post(html::webhooks::test_webhook))
        .route(
            "/webhooks/{id}/delete",
            post(html::webhooks::delete_webhook),
        )
        .route(
            "/retention",
            get(html::retention::show_retention).post(html::retention::set_retention),
        )
        .route("/retention/reset", post(html::retention::reset_retention))
        .route("/static/app.css", get(html::stylesheet))
        .route("/static/report.js", get(html::report_script))
        .route("/static/groups.js", get(html::groups_script))
        .route(
            "/login",
            get(html::login::show_login).post(html::login::create_session),
        )
        .route("/login/oidc", get(html::login_oidc::start_sign_in))
        .route(
            "/login/oidc/callback",
            get(html::login_oidc::finish_sign_in),
        )
        .route("/logout", post(html::login::delete_session))
        // The JSON API and the probes (`/healthz`, `/readyz`, `/metrics`), registered with
        // their OpenAPI document in `api::routes`.
        .merge(api::routes(&state))
        .fallback(fallback)
        .method_not_allowed_fallback(method_not_allowed)
        // Layers run last-added first: the multipart guard sees the body gzip-decoded, so its
        // caps count decoded bytes like every other cap.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::refuse_cross_site_forms,
        ))
        .layer(middleware::from_fn(multipart_guard::guard_multipart_body))
        .layer(middleware::from_fn(limits::decode_request_body))
        .layer(middleware::from_fn_with_state(
            state.limits.body_rate,
            limits::pace_request_body,
        ))
        // Inside the shedder, which checks the credentials: the request's span names them.
        .layer(middleware::from_fn(request_id::name_actor))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            admission::shed_load,
        ))
        .layer(middleware::from_fn_with_state(
            state.metrics.clone(),
            metrics::track,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            error_page::error_page_layout,
        ))
        .layer(middleware::from_fn(security_headers))
        // Outermost: every layer above (the load limits and credential checks that refuse, the
        // error pages) and every handler runs in the request's span, and every answer carries
        // its `X-Request-Id`.
        .layer(middleware::from_fn(request_id::tag_request))
        .with_state(state)
}

/// Unknown paths: the JSON error under `/api/`, the HTML page elsewhere.
async fn fallback(uri: axum::http::Uri) -> Response {
    use axum::response::IntoResponse;
    if uri.path().starts_with("/api/") {
        AppError::NotFound("endpoint").into_response()
    } else {
        error_page::not_found_page()
    }
}

/// A known path with the wrong method: 405 with the JSON error (the HTML page elsewhere).
async fn method_not_allowed(uri: axum::http::Uri) -> Response {
    use axum::response::IntoResponse;
    if uri.path().starts_with("/api/") {
        AppError::MethodNotAllowed.into_response()
    } else {
        error::PageError(AppError::MethodNotAllowed).into_response()
    }
}

/// SECURITY.md item 4: a strict CSP (no inline script, no framing) and nosniff on everything;
/// item 17: `Cache-Control: no-store` unless a handler chose its own caching (only the static
/// stylesheet and script do), so reports, logs and API answers never sit in a shared cache.
async fn security_headers(req: axum::extract::Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    let headers = res.headers_mut();
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
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
