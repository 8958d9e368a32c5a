//! `/api/v1/people`: admins list the people who sign in through the identity provider, disable
//! one (signed out everywhere, their tokens revoked, sign-in refused), enable them again, and
//! end their sessions without disabling them; what the `/people` page does. Each handler
//! extracts, calls one `app::people` function and renders.

use axum::Json;
use axum::extract::State;

use crate::api_types::ErrorBody;
use crate::api_types::people::{PersonInfo, PersonList};
use crate::app::people;
use crate::web::error::AppError;
use crate::web::extract::PersonId;
use crate::web::live::EndRequests;
use crate::web::scope::{Admin, Scoped};
use crate::web::state::AppState;

/// `GET /api/v1/people`: everyone who has signed in, by name.
#[utoipa::path(
    get,
    path = "/api/v1/people",
    tag = "people",
    responses((status = 200, description = "Every person, by name, with their live sessions \
        and active tokens.", body = PersonList)),
    security(("bearer" = ["admin"])),
)]
pub async fn list_people(
    State(state): State<AppState>,
    _: Scoped<Admin>,
) -> Result<Json<PersonList>, AppError> {
    let listed = people::list(&state.db).await?;
    Ok(Json(PersonList {
        people: listed.iter().map(PersonInfo::from).collect(),
    }))
}

/// `POST /api/v1/people/{id}/disable`: their sessions end and their tokens are revoked at
/// once; their sign-in is refused until enabled. Disabling a disabled person is a no-op.
#[utoipa::path(
    post,
    path = "/api/v1/people/{id}/disable",
    tag = "people",
    params(("id" = i64, Path, description = "The person's id.")),
    responses(
        (status = 200, description = "The person, now disabled.", body = PersonInfo),
        (status = 404, description = "`not_found`: no such person.", body = ErrorBody),
        (status = 409, description = "`last_admin`: this is the last enabled admin person; \
            disabling them would leave the service without one.", body = ErrorBody),
        (status = 422, description = "`invalid_person`: the token belongs to this person \
            (an admin cannot disable themselves).", body = ErrorBody),
    ),
    security(("bearer" = ["admin"])),
)]
pub async fn disable_person(
    State(state): State<AppState>,
    token: Scoped<Admin>,
    PersonId(id): PersonId,
) -> Result<(EndRequests, Json<PersonInfo>), AppError> {
    let acting = token.owner.as_ref().map(|o| o.person_id);
    let done = people::disable(&state.db, id, acting).await?;
    tracing::info!(
        person = done.person.person.name.as_str(),
        by = token.name.as_str(),
        sessions = done.sessions_ended,
        tokens = done.tokens_revoked,
        "person disabled"
    );
    Ok((
        EndRequests::of_person(id),
        Json(PersonInfo::from(&done.person)),
    ))
}

/// `POST /api/v1/people/{id}/enable`: they may sign in again (their revoked tokens stay
/// revoked). Enabling an enabled person is a no-op.
#[utoipa::path(
    post,
    path = "/api/v1/people/{id}/enable",
    tag = "people",
    params(("id" = i64, Path, description = "The person's id.")),
    responses(
        (status = 200, description = "The person, now enabled.", body = PersonInfo),
        (status = 404, description = "`not_found`: no such person.", body = ErrorBody),
    ),
    security(("bearer" = ["admin"])),
)]
pub async fn enable_person(
    State(state): State<AppState>,
    _: Scoped<Admin>,
    PersonId(id): PersonId,
) -> Result<Json<PersonInfo>, AppError> {
    let person = people::enable(&state.db, id).await?;
    Ok(Json(PersonInfo::from(&person)))
}

/// `DELETE /api/v1/people/{id}/sessions`: signs them out everywhere without disabling them.
#[utoipa::path(
    delete,
    path = "/api/v1/people/{id}/sessions",
    tag = "people",
    params(("id" = i64, Path, description = "The person's id.")),
    responses(
        (status = 200, description = "The person, with no live session.", body = PersonInfo),
        (status = 404, description = "`not_found`: no such person.", body = ErrorBody),
    ),
    security(("bearer" = ["admin"])),
)]
pub async fn end_sessions(
    State(state): State<AppState>,
    _: Scoped<Admin>,
    PersonId(id): PersonId,
) -> Result<Json<PersonInfo>, AppError> {
    let (person, _) = people::end_sessions(&state.db, id).await?;
    Ok(Json(PersonInfo::from(&person)))
}
