//! `/api/v1/tokens`: admins create, list and revoke API tokens (what `gpu-triage token` does
//! from the server's shell). A created token's secret is in the creation answer only; a
//! listing never shows a secret. Each handler extracts, calls one `app::tokens` function and
//! renders.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use crate::api_types::ErrorBody;
use crate::api_types::tokens::{TokenCreated, TokenInfo, TokenList, TokenRequest};
use crate::app::tokens;
use crate::web::error::AppError;
use crate::web::extract::{JsonBody, TokenId};
use crate::web::live::EndRequests;
use crate::web::scope::{Admin, Scoped};
use crate::web::state::AppState;

/// `GET /api/v1/tokens`: every token, newest first, never a secret.
#[utoipa::path(
    get,
    path = "/api/v1/tokens",
    tag = "tokens",
    responses((status = 200, description = "Every token (never its secret).", body = TokenList)),
    security(("bearer" = ["admin"])),
)]
pub async fn list_tokens(
    State(state): State<AppState>,
    _: Scoped<Admin>,
) -> Result<Json<TokenList>, AppError> {
    let tokens = tokens::list(&state.db).await?;
    Ok(Json(TokenList {
        tokens: tokens.iter().map(TokenInfo::from).collect(),
    }))
}

/// `POST /api/v1/tokens`: 201 with the token and its secret (shown this once).
#[utoipa::path(
    post,
    path = "/api/v1/tokens",
    tag = "tokens",
    request_body(content = TokenRequest, content_type = "application/json",
        description = "`name` and `scopes` are required."),
    responses(
        (status = 201, description = "The token and its secret, shown this once.",
            body = TokenCreated),
        (status = 400, description = "`bad_json`: malformed JSON or an unknown field.",
            body = ErrorBody),
        (status = 422, description = "`invalid_token`: a bad name, scope or expiry, named in \
            the message.", body = ErrorBody),
    ),
    security(("bearer" = ["admin"])),
)]
pub async fn create_token(
    State(state): State<AppState>,
    token: Scoped<Admin>,
    JsonBody(req): JsonBody<TokenRequest>,
) -> Result<(StatusCode, Json<TokenCreated>), AppError> {
    let (record, secret) = tokens::create_from_request(&state.db, req, &token.name).await?;
    Ok((
        StatusCode::CREATED,
        Json(TokenCreated {
            token: TokenInfo::from(&record),
            secret,
        }),
    ))
}

/// `DELETE /api/v1/tokens/{id}`: revokes the token; its portal sessions end with it.
#[utoipa::path(
    delete,
    path = "/api/v1/tokens/{id}",
    tag = "tokens",
    params(("id" = i64, Path, description = "The token's id.")),
    responses(
        (status = 200, description = "The token, now revoked.", body = TokenInfo),
        (status = 404, description = "`not_found`: no such active token.", body = ErrorBody),
    ),
    security(("bearer" = ["admin"])),
)]
pub async fn revoke_token(
    State(state): State<AppState>,
    _: Scoped<Admin>,
    TokenId(id): TokenId,
) -> Result<(EndRequests, Json<TokenInfo>), AppError> {
    let revoked = tokens::revoke_by_id(&state.db, id).await?;
    Ok((EndRequests::of_token(id), Json(TokenInfo::from(&revoked))))
}
