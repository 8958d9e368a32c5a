//! `/api/v1/retention` and `/api/v1/projects/{project}/retention`: admins read the retention in
//! force (instance defaults, every project's days, what was removed, the latest passes) and set
//! or reset a project's own. Each handler extracts, calls one `app::retention` function and
//! renders.

use axum::Json;
use axum::extract::State;

use crate::api_types::ErrorBody;
use crate::api_types::retention::{ProjectRetention, RetentionOverview, RetentionRequest};
use crate::app::retention;
use crate::web::error::AppError;
use crate::web::extract::{JsonBody, ProjectName};
use crate::web::scope::{Admin, Scoped};
use crate::web::state::AppState;

/// `GET /api/v1/retention`: the defaults, every project's retention, the latest passes.
#[utoipa::path(
    get,
    path = "/api/v1/retention",
    tag = "retention",
    responses((status = 200, description = "The instance defaults, every project's retention \
        in force with what was removed from it, and the newest 10 passes.",
        body = RetentionOverview)),
    security(("bearer" = ["admin"])),
)]
pub async fn show_retention(
    State(state): State<AppState>,
    _: Scoped<Admin>,
) -> Result<Json<RetentionOverview>, AppError> {
    Ok(Json(
        retention::overview(&state.db, &state.retention).await?,
    ))
}

/// `GET /api/v1/projects/{project}/retention`: one project's retention.
#[utoipa::path(
    get,
    path = "/api/v1/projects/{project}/retention",
    tag = "retention",
    params(("project" = String, Path, max_length = 200, pattern = r"^[^\u0000]*[^\u0000\u0009-\u000d\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000]*$",
        description = "The project (any letter case; one path segment, `/` written `%2F`): \
        1-200 characters, not blank, no NUL.")),
    responses(
        (status = 200, description = "The retention in force (the project's own setting, else \
            the default) and what was removed.", body = ProjectRetention),
        (status = 404, description = "`not_found`: no project in the path (`/projects//retention`).",
            body = ErrorBody),
        (status = 422, description = "`invalid_retention`: an empty or too long project name.",
            body = ErrorBody),
    ),
    security(("bearer" = ["admin"])),
)]
pub async fn show_project_retention(
    State(state): State<AppState>,
    _: Scoped<Admin>,
    ProjectName(project): ProjectName,
) -> Result<Json<ProjectRetention>, AppError> {
    Ok(Json(
        retention::get(&state.db, &state.retention, &project).await?,
    ))
}

/// `PUT /api/v1/projects/{project}/retention`: `{"log_days", "report_days"}`, each a number of
/// days (0: forever) or null (the instance default); 422 `invalid_retention` otherwise.
#[utoipa::path(
    put,
    path = "/api/v1/projects/{project}/retention",
    tag = "retention",
    params(("project" = String, Path, max_length = 200, pattern = r"^[^\u0000]*[^\u0000\u0009-\u000d\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000]*$",
        description = "The project (any letter case; one path segment, `/` written `%2F`): \
        1-200 characters, not blank, no NUL.")),
    request_body(content = RetentionRequest, content_type = "application/json",
        description = "Each field a whole number of days from 0 (keep forever) to 36500, or \
            null/absent to follow the instance default."),
    responses(
        (status = 200, description = "The retention now in force.", body = ProjectRetention),
        (status = 404, description = "`not_found`: no project in the path (`/projects//retention`).",
            body = ErrorBody),
        (status = 400, description = "`bad_json`: malformed JSON or an unknown field.",
            body = ErrorBody),
        (status = 422, description = "`invalid_retention`: a value that is not a whole number \
            of days from 0 to 36500 (named in the message), or a bad project name.",
            body = ErrorBody),
    ),
    security(("bearer" = ["admin"])),
)]
pub async fn update_project_retention(
    State(state): State<AppState>,
    token: Scoped<Admin>,
    ProjectName(project): ProjectName,
    JsonBody(req): JsonBody<RetentionRequest>,
) -> Result<Json<ProjectRetention>, AppError> {
    Ok(Json(
        retention::set(&state.db, &state.retention, &project, &req, &token.actor()).await?,
    ))
}

/// `DELETE /api/v1/projects/{project}/retention`: the project follows the defaults again.
#[utoipa::path(
    delete,
    path = "/api/v1/projects/{project}/retention",
    tag = "retention",
    params(("project" = String, Path, max_length = 200, pattern = r"^[^\u0000]*[^\u0000\u0009-\u000d\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000]*$",
        description = "The project (any letter case; one path segment, `/` written `%2F`): \
        1-200 characters, not blank, no NUL.")),
    responses(
        (status = 200, description = "The retention now in force: the defaults.",
            body = ProjectRetention),
        (status = 404, description = "`not_found`: the project had no setting of its own, or no \
            project in the path (`/projects//retention`).",
            body = ErrorBody),
        (status = 404, description = "`not_found`: no project in the path (`/projects//retention`).",
            body = ErrorBody),
        (status = 422, description = "`invalid_retention`: an empty or too long project name.",
            body = ErrorBody),
    ),
    security(("bearer" = ["admin"])),
)]
pub async fn delete_project_retention(
    State(state): State<AppState>,
    _: Scoped<Admin>,
    ProjectName(project): ProjectName,
) -> Result<Json<ProjectRetention>, AppError> {
    Ok(Json(
        retention::reset(&state.db, &state.retention, &project).await?,
    ))
}
