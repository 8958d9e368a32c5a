//! The JSON API v1 (DESIGN.md section 5): paths, methods, status codes and the error shape are
//! a contract. Every rejection, including malformed paths, queries and bodies, answers with the
//! JSON error body, never axum's plain-text defaults.

pub(crate) mod group_triage;
pub(crate) mod groups;
pub(crate) mod jobs;
pub(crate) mod reports;
pub(crate) mod rules;
pub(crate) mod webhooks;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

use super::AppState;

/// The `/api/v1` routes.
pub fn routes(state: &AppState) -> Router<AppState> {
    // Uploads are capped while streaming (413 before anything is stored), not by a buffer.
    let upload_cap = DefaultBodyLimit::disable();
    let classify_cap = DefaultBodyLimit::max(state.limits.max_classify_bytes);
    Router::new()
        .route(
            "/api/v1/classify",
            post(reports::classify_log).layer(classify_cap),
        )
        .route(
            "/api/v1/reports",
            post(reports::create_report).layer(upload_cap),
        )
        .route("/api/v1/reports/{id}", get(reports::show_report))
        .route("/api/v1/search", get(groups::search))
        .route("/api/v1/groups", get(group_triage::list_groups))
        .route(
            "/api/v1/groups/{id}",
            get(groups::show_group).patch(group_triage::update_group),
        )
        .route("/api/v1/groups/{id}/fixes", post(groups::create_fix))
        .route("/api/v1/jobs/claim", post(jobs::claim_job))
        .route("/api/v1/jobs/{id}/heartbeat", post(jobs::heartbeat_job))
        .route(
            "/api/v1/jobs/{id}/result",
            post(jobs::post_result).layer(DefaultBodyLimit::max(jobs::result_body_cap(state))),
        )
        .route(
            "/api/v1/rules",
            get(rules::list_rules).post(rules::create_rule),
        )
        .route("/api/v1/rules/preview", post(rules::preview_rule))
        .route(
            "/api/v1/rules/{id}",
            axum::routing::put(rules::update_rule).delete(rules::delete_rule),
        )
        .route(
            "/api/v1/webhooks",
            get(webhooks::list_webhooks).post(webhooks::create_webhook),
        )
        .route(
            "/api/v1/webhooks/{id}",
            get(webhooks::show_webhook)
                .patch(webhooks::update_webhook)
                .delete(webhooks::delete_webhook),
        )
        .route("/api/v1/webhooks/{id}/test", post(webhooks::test_webhook))
        .route(
            "/api/v1/webhooks/{id}/deliveries",
            get(webhooks::list_deliveries),
        )
}
