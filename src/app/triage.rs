//! Triage the knowledge base: the groups seen lately, record a fix for a group, trends (a
//! group's page is read by `app::group_triage::view`; search is `app::search`; merging groups is
//! `app::group_merge`). Input is validated here (the same rules for the
//! API and the portal's forms), so both surfaces refuse the same things with the same words.

use serde::Deserialize;

pub use crate::storage::groups::{Fix, Group};

use super::Error;
use crate::actor::Actor;
use crate::api_types::ErrorCode;
use crate::storage::group_merge::{self as merges, Lock, Standing};
use crate::storage::groups::{self, NewFix};
use crate::storage::{Db, DbError};

/// The groups seen most recently.
#[tracing::instrument(name = "triage::recent_groups", skip_all, fields(limit = limit))]
pub async fn recent_groups(db: &Db, limit: i64) -> Result<Vec<Group>, Error> {
    Ok(groups::recent_groups(db.pool(), limit).await?)
}

/// A fix as submitted (`POST /api/v1/groups/{id}/fixes`, the portal's fix form).
#[derive(Clone, Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FixRequest {
    /// What fixed it, in a line (1-500 characters, not blank, no NUL).
    #[schema(
        max_length = 500,
        pattern = r"^[^\u0000]*[^\u0000\u0009-\u000d\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000]*$"
    )]
    pub summary: String,
    /// More about it (at most 20000 characters, no NUL).
    #[serde(default)]
    #[schema(max_length = 20000, pattern = r"^[^\u0000]*$")]
    pub details: String,
    /// A link to the change (commit, pull request): an http(s) URL of at most 2000
    /// characters without spaces or control characters, or empty.
    #[serde(default)]
    #[schema(
        max_length = 2000,
        pattern = r"^(https?://[^\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*)?$"
    )]
    pub link: String,
}

/// Checks a fix and scrubs it: it is searchable and shown to everyone, so a token pasted into
/// it is scrubbed like one in a log (SECURITY.md item 3).
fn validate_fix(body: FixRequest, author: &Actor) -> Result<NewFix, Error> {
    let bad = |m: &str| Error::Invalid(ErrorCode::BadFix, m.to_owned());
    // Lengths in characters, as the document states them (JSON Schema counts characters), and
    // of the text as sent, so that what the document refuses the server refuses too.
    let summary = body.summary.trim().to_owned();
    if summary.is_empty() || body.summary.chars().count() > 500 {
        return Err(bad("summary must be 1-500 characters"));
    }
    if body.details.chars().count() > 20_000 {
        return Err(bad("details must be at most 20000 characters"));
    }
    let link = body.link.trim().to_owned();
    let link_ok = link.is_empty()
        || ((link.starts_with("https://") || link.starts_with("http://"))
            && body.link.chars().count() <= 2000
            && !link.chars().any(|c| c.is_whitespace() || c.is_control()));
    if !link_ok {
        return Err(bad("link must be an http(s) URL"));
    }
    if [&summary, &body.details, &link]
        .iter()
        .any(|s| s.contains('\0'))
    {
        return Err(bad("fields must not contain NUL"));
    }
    let scrub = |s: &str| crate::ingest::scrub::scrub(s).text.into_owned();
    Ok(NewFix {
        summary: scrub(&summary),
        details: scrub(&body.details),
        link: scrub(&link),
        author: author.clone(),
    })
}

/// Records a fix for group `group_id` by `author` (a person or a token); 404 for an unknown group, 409
/// `group_merged` for a group merged into another (the fix belongs there). The group's row is
/// held while the fix is written, so a merge of it waits and then moves the fix along.
#[tracing::instrument(name = "triage::record_fix", skip_all, fields(group_id = group_id, actor = author.name(), fix_id = tracing::field::Empty))]
pub async fn record_fix(
    db: &Db,
    group_id: i64,
    request: FixRequest,
    author: &Actor,
) -> Result<Fix, Error> {
    let fix = validate_fix(request, author)?;
    let mut tx = db.pool().begin().await.map_err(DbError::from)?;
    match merges::standing(&mut *tx, group_id, Lock::KeyShare).await? {
        None => return Err(Error::NotFound("group")),
        Some(Standing::Merged(into)) => return Err(merged_away(group_id, into)),
        Some(Standing::Live) => {}
    }
    let stored = groups::insert_fix(&mut *tx, group_id, &fix)
        .await?
        .ok_or(Error::NotFound("group"))?;
    tx.commit().await.map_err(DbError::from)?;
    tracing::Span::current().record("fix_id", stored.id);
    Ok(stored)
}

/// The refusal of a change to group `group`, which was merged into group `into`: 409
/// `group_merged`, naming where to send it.
pub(crate) fn merged_away(group: i64, into: i64) -> Error {
    Error::Conflict(
        ErrorCode::GroupMerged,
        format!(
            "group {group} was merged into group {into}: its reports, fixes and history are there now; send this to group {into}"
        ),
    )
}

/// Days the portal's trend lines and charts cover.
pub const TREND_DAYS: usize = 30;

/// Reports per day: `(group, day, count)` rows, and today's date.
pub type Trends = (Vec<(i64, String, i64)>, String);

/// Reports per day of some groups over the last `days` days: `(group, day, count)` rows and
/// today's date, for the portal's trend lines.
#[tracing::instrument(name = "triage::trends", skip_all, fields(groups = ids.len(), days = days))]
pub async fn trends(db: &Db, ids: &[i64], days: i32) -> Result<Trends, Error> {
    Ok(groups::group_trends(db.pool(), ids, days).await?)
}

impl From<Fix> for crate::api_types::Fix {
    /// A stored fix as the API shows it.
    fn from(f: Fix) -> Self {
        crate::api_types::Fix {
            id: f.id,
            group_id: f.group_id,
            summary: f.summary,
            details: f.details,
            link: f.link,
            author: f.author,
            author_kind: f.author_kind,
            author_person_id: f.author_person_id,
            created_at: f.created_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::merged_away;

    #[test]
    fn a_merged_group_names_where_its_reports_went_in_one_plain_sentence() {
        assert_eq!(
            merged_away(3, 7).to_string(),
            "group 3 was merged into group 7: its reports, fixes and history are there now; \
             send this to group 7"
        );
    }
}
