//! `/api/v1/webhooks`: admins register, list, change, delete and test webhook endpoints and read
//! their delivery log. Every route needs the admin scope; a created endpoint's secret is in the
//! creation answer only. Each handler extracts, calls one `app::webhooks` function and renders.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use crate::api_types::ErrorBody;
use crate::api_types::webhooks::{
    DeliveryLog, Endpoint, EndpointCreated, EndpointDeleted, EndpointList, EndpointRequest,
    TestQueued,
};
use crate::app::webhooks;
use crate::web::error::AppError;
use crate::web::extract::{JsonBody, WebhookId};
use crate::web::scope::{Admin, Scoped};
use crate::web::state::AppState;

/// `GET /api/v1/webhooks`: every endpoint, never its secret.
#[utoipa::path(
    get,
    path = "/api/v1/webhooks",
    tag = "webhooks",
    responses((status = 200, description = "Every endpoint (never its secret).",
        body = EndpointList)),
    security(("bearer" = ["admin"])),
)]
pub async fn list_webhooks(
    State(state): State<AppState>,
    _: Scoped<Admin>,
) -> Result<Json<EndpointList>, AppError> {
    let webhooks = webhooks::list(&state.db).await?;
    Ok(Json(EndpointList { webhooks }))
}

/// `POST /api/v1/webhooks`: 201 with the endpoint and its secret (shown this once).
#[utoipa::path(
    post,
    path = "/api/v1/webhooks",
    tag = "webhooks",
    request_body(content = EndpointRequest, content_type = "application/json",
        description = "`url` and `events` are required."),
    responses(
        (status = 201, description = "The endpoint and its signing secret, shown this once.",
            body = EndpointCreated),
        (status = 400, description = "`bad_json`: malformed JSON or an unknown field.",
            body = ErrorBody),
        (status = 422, description = "`invalid_webhook`: a bad field, named in the message.",
            body = ErrorBody),
    ),
    security(("bearer" = ["admin"])),
)]
pub async fn create_webhook(
    State(state): State<AppState>,
    token: Scoped<Admin>,
    JsonBody(req): JsonBody<EndpointRequest>,
) -> Result<(StatusCode, Json<EndpointCreated>), AppError> {
    let created = webhooks::create(&state.db, &state.webhooks, &req, &token.name).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// `GET /api/v1/webhooks/{id}`: one endpoint, never its secret.
#[utoipa::path(
    get,
    path = "/api/v1/webhooks/{id}",
    tag = "webhooks",
    params(("id" = i64, Path, description = "The endpoint's id.")),
    responses(
        (status = 200, description = "The endpoint (never its secret).", body = Endpoint),
        (status = 404, description = "`not_found`: no such endpoint.", body = ErrorBody),
    ),
    security(("bearer" = ["admin"])),
)]
pub async fn show_webhook(
    State(state): State<AppState>,
    _: Scoped<Admin>,
    WebhookId(id): WebhookId,
) -> Result<Json<Endpoint>, AppError> {
    Ok(Json(webhooks::get(&state.db, id).await?))
}

/// `PATCH /api/v1/webhooks/{id}`: only the fields given change.
#[utoipa::path(
    patch,
    path = "/api/v1/webhooks/{id}",
    tag = "webhooks",
    params(("id" = i64, Path, description = "The endpoint's id.")),
    request_body(content = EndpointRequest, content_type = "application/json",
        description = "Only the fields given change (a new `secret` too)."),
    responses(
        (status = 200, description = "The endpoint as changed.", body = Endpoint),
        (status = 400, description = "`bad_json`: malformed JSON or an unknown field.",
            body = ErrorBody),
        (status = 404, description = "`not_found`: no such endpoint.", body = ErrorBody),
        (status = 422, description = "`invalid_webhook`: a bad field, named in the message.",
            body = ErrorBody),
    ),
    security(("bearer" = ["admin"])),
)]
pub async fn update_webhook(
    State(state): State<AppState>,
    _: Scoped<Admin>,
    WebhookId(id): WebhookId,
    JsonBody(req): JsonBody<EndpointRequest>,
) -> Result<Json<Endpoint>, AppError> {
    Ok(Json(
        webhooks::update(&state.db, &state.webhooks, id, &req).await?,
    ))
}

/// `DELETE /api/v1/webhooks/{id}`: the endpoint and its deliveries.
#[utoipa::path(
    delete,
    path = "/api/v1/webhooks/{id}",
    tag = "webhooks",
    params(("id" = i64, Path, description = "The endpoint's id.")),
    responses(
        (status = 200, description = "The endpoint and its deliveries were deleted.",
            body = EndpointDeleted),
        (status = 404, description = "`not_found`: no such endpoint.", body = ErrorBody),
    ),
    security(("bearer" = ["admin"])),
)]
pub async fn delete_webhook(
    State(state): State<AppState>,
    _: Scoped<Admin>,
    WebhookId(id): WebhookId,
) -> Result<Json<EndpointDeleted>, AppError> {
    webhooks::delete(&state.db, id).await?;
    Ok(Json(EndpointDeleted { deleted: id }))
}

/// `POST /api/v1/webhooks/{id}/test`: 202 with the queued test delivery's id.
#[utoipa::path(
    post,
    path = "/api/v1/webhooks/{id}/test",
    tag = "webhooks",
    params(("id" = i64, Path, description = "The endpoint's id.")),
    responses(
        (status = 202, description = "A `test` delivery was queued, whatever the endpoint's \
            events and filters.", body = TestQueued),
        (status = 404, description = "`not_found`: no such endpoint.", body = ErrorBody),
    ),
    security(("bearer" = ["admin"])),
)]
pub async fn test_webhook(
    State(state): State<AppState>,
    _: Scoped<Admin>,
    WebhookId(id): WebhookId,
) -> Result<(StatusCode, Json<TestQueued>), AppError> {
    let delivery_id = webhooks::send_test(&state.db, id).await?;
    Ok((StatusCode::ACCEPTED, Json(TestQueued { delivery_id })))
}

/// `GET /api/v1/webhooks/{id}/deliveries`: the newest deliveries with every attempt.
#[utoipa::path(
    get,
    path = "/api/v1/webhooks/{id}/deliveries",
    tag = "webhooks",
    params(("id" = i64, Path, description = "The endpoint's id.")),
    responses(
        (status = 200, description = "The endpoint and its newest 50 deliveries, each with \
            every attempt.", body = DeliveryLog),
        (status = 404, description = "`not_found`: no such endpoint.", body = ErrorBody),
    ),
    security(("bearer" = ["admin"])),
)]
pub async fn list_deliveries(
    State(state): State<AppState>,
    _: Scoped<Admin>,
    WebhookId(id): WebhookId,
) -> Result<Json<DeliveryLog>, AppError> {
    let (webhook, deliveries) = webhooks::deliveries(&state.db, id).await?;
    Ok(Json(DeliveryLog {
        webhook,
        deliveries,
    }))
}
