//! The JSON API v1 (DESIGN.md section 5): paths, methods, status codes and the error shape are
//! a contract. Every rejection, including malformed paths, queries and bodies, answers with the
//! JSON error body, never axum's plain-text defaults.
//!
//! Routes are registered only through utoipa-axum's `routes!`, which reads each handler's path
//! and methods from its `#[utoipa::path]`: the router and the OpenAPI document served at
//! `/api/v1/openapi.json` come from this one list, so a route cannot be served undescribed.
//! The list also holds the probes DESIGN.md section 5 puts in the API's table (`/healthz`,
//! `/readyz`, `/metrics`): they are not under `/api/`, but monitoring is a client too.

mod constraints;
pub(crate) mod group_bulk;
pub(crate) mod group_triage;
pub(crate) mod groups;
pub(crate) mod jobs;
pub(crate) mod openapi;
pub(crate) mod people;
pub(crate) mod reports;
pub(crate) mod retention;
pub(crate) mod rules;
pub(crate) mod tokens;
pub(crate) mod webhooks;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use utoipa::OpenApi;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouterExt};
use utoipa_axum::routes;

use super::{AppState, health, metrics};

/// The `/api/v1` routes and the probes; also keeps their OpenAPI document for
/// `GET /api/v1/openapi.json`.
pub fn routes(state: &AppState) -> Router<AppState> {
    let (router, mut spec) = documented_routes(state).split_for_parts();
    openapi::add_common_errors(&mut spec);
    constraints::declare(&mut spec);
    openapi::publish(&spec);
    router
}

/// Every API route and probe with its description. Per-route layers (body caps) go on the
/// method router `routes!` returns; they change no path or method.
fn documented_routes(state: &AppState) -> OpenApiRouter<AppState> {
    // Uploads are capped while streaming (413 before anything is stored), not by a buffer.
    let upload_cap = DefaultBodyLimit::disable();
    let classify_cap = DefaultBodyLimit::max(state.limits.max_classify_bytes);
    let result_cap = DefaultBodyLimit::max(jobs::result_body_cap(state));
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(reports::classify_log).layer(classify_cap))
        .routes(routes!(reports::create_report).layer(upload_cap))
        .routes(routes!(reports::show_report))
        .routes(routes!(groups::search))
        .routes(routes!(group_triage::list_groups))
        .routes(routes!(groups::show_group, group_triage::update_group))
        .routes(routes!(groups::create_fix))
        .routes(routes!(group_triage::merge_group))
        .routes(routes!(group_triage::unmerge_group))
        .routes(routes!(group_bulk::bulk_change))
        .routes(routes!(group_bulk::merge_groups))
        .routes(routes!(group_bulk::undo_change))
        .routes(routes!(jobs::claim_job))
        .routes(routes!(jobs::heartbeat_job))
        .routes(routes!(jobs::post_result).layer(result_cap))
        .routes(routes!(rules::list_rules, rules::create_rule))
        .routes(routes!(rules::preview_rule))
        .routes(routes!(rules::update_rule, rules::delete_rule))
        .routes(routes!(tokens::list_tokens, tokens::create_token))
        .routes(routes!(tokens::revoke_token))
        .routes(routes!(people::list_people))
        .routes(routes!(people::disable_person))
        .routes(routes!(people::enable_person))
        .routes(routes!(people::end_sessions))
        .routes(routes!(webhooks::list_webhooks, webhooks::create_webhook))
        .routes(routes!(
            webhooks::show_webhook,
            webhooks::update_webhook,
            webhooks::delete_webhook
        ))
        .routes(routes!(webhooks::test_webhook))
        .routes(routes!(webhooks::list_deliveries))
        .routes(routes!(retention::show_retention))
        .routes(routes!(
            retention::show_project_retention,
            retention::update_project_retention,
            retention::delete_project_retention
        ))
        .routes(routes!(openapi::show_openapi))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(metrics::show_metrics))
}
