//! The group list's bulk form and its undo (issue 39 item 4): `POST /groups/bulk` (the ticked
//! groups, or a row's own one-click button) and `POST /groups/changes/{id}/undo`, CSRF-checked
//! like every portal form, `ingest` or `admin` scope like every triage change. Extract, call one
//! `app::group_triage` function, redirect: back to the list with `?change=N`, whose notice
//! offers the undo; a merge goes to the group merged into.

use std::collections::HashMap;

use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use crate::app::group_triage::{self, BulkFields, BulkResult};
use crate::web::error::PageError;
use crate::web::extract::{ChangeId, CsrfField, CsrfForm};
use crate::web::scope::IngestOrAdmin;
use crate::web::state::AppState;

/// The bulk form: what to do, its options, and one `pick-N=N` field per ticked group (a
/// checkbox each; the form's parser takes no repeated field, so each has its own name).
#[derive(Debug, Deserialize)]
pub struct BulkForm {
    // Missing is refused by the CSRF check (403), not by the form parser (400).
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    resolved_in: String,
    #[serde(default)]
    ignore_until: String,
    #[serde(default)]
    assignee: Option<String>,
    #[serde(default)]
    assignee_id: Option<String>,
    #[serde(default)]
    into: String,
    #[serde(default)]
    return_to: Option<String>,
    #[serde(flatten)]
    rest: HashMap<String, String>,
}

impl CsrfField for BulkForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

impl BulkForm {
    /// The ticked groups' ids, ascending; a `pick-` field that names no id counts as a group
    /// that does not exist (0), which the change refuses.
    fn picked(&self) -> Vec<i64> {
        let mut ids: Vec<i64> = (self.rest.iter())
            .filter(|(k, _)| k.starts_with("pick-"))
            .map(|(_, v)| crate::ids::parse(v.trim()).unwrap_or(0))
            .collect();
        ids.sort_unstable();
        ids
    }
}

/// The list to go back to (`return_to` when it is a group list), with `change=N` for its notice.
fn back_to_list(return_to: Option<&str>, change: Option<i64>) -> String {
    let list = return_to
        .and_then(crate::web::auth::return_path)
        .filter(|p| *p == "/groups" || p.starts_with("/groups?"))
        .unwrap_or("/groups");
    match change {
        Some(id) if list.contains('?') => format!("{list}&change={id}#change-notice"),
        Some(id) => format!("{list}?change={id}#change-notice"),
        None => list.to_owned(),
    }
}

/// `POST /groups/bulk`
pub async fn bulk_groups(
    State(state): State<AppState>,
    CsrfForm { user, form, .. }: CsrfForm<BulkForm, IngestOrAdmin>,
) -> Result<Response, PageError> {
    let fields = BulkFields {
        ids: form.picked(),
        action: form.action.trim().to_owned(),
        resolved_in: form.resolved_in.clone(),
        ignore_until: form.ignore_until.clone(),
        assignee: form.assignee.clone(),
        assignee_id: form.assignee_id.clone(),
        into: form.into.clone(),
    };
    let to = match group_triage::submit_bulk(&state.db, fields, &user.actor()).await? {
        BulkResult::Changed(outcome) => back_to_list(form.return_to.as_deref(), outcome.change),
        BulkResult::Merged(view) => format!("/groups/{}#history", view.group.id),
    };
    Ok(Redirect::to(&to).into_response())
}

/// The undo button of the list's notice.
#[derive(Debug, Deserialize)]
pub struct UndoForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    return_to: Option<String>,
}

impl CsrfField for UndoForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /groups/changes/{id}/undo`: back to the list, whose notice then says who undid it.
pub async fn undo_change(
    State(state): State<AppState>,
    ChangeId(id): ChangeId,
    CsrfForm { user, form, .. }: CsrfForm<UndoForm, IngestOrAdmin>,
) -> Result<Response, PageError> {
    group_triage::undo(&state.db, id, &user.actor()).await?;
    Ok(Redirect::to(&back_to_list(form.return_to.as_deref(), Some(id))).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_to_go_back_to_carries_the_change_for_its_notice() {
        assert_eq!(
            back_to_list(Some("/groups?state=any&page=2"), Some(7)),
            "/groups?state=any&page=2&change=7#change-notice"
        );
        assert_eq!(
            back_to_list(Some("/groups"), Some(7)),
            "/groups?change=7#change-notice"
        );
        assert_eq!(back_to_list(Some("https://evil.example/"), None), "/groups");
        assert_eq!(back_to_list(Some("/tokens"), None), "/groups");
    }
}
