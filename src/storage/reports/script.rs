//! A report's reproduction script in the object store (issue 42 item 2, migration 0050): an
//! object of its own, `{prefix}script`, under a prefix apart from the log's, so that retention
//! can remove a log and keep the script a job may still run. The row keeps the prefix and the
//! SHA-256 of the bytes; deleting the report queues the prefix for the sweeper (a trigger).
//! Moving scripts between rows and the store (`db move-logs`) is here too.

use sqlx::{PgConnection, PgExecutor};

use crate::storage::DbError;
use crate::storage::log_objects::{Side, claim_pending, due_now, record_pending};

/// Where a new report's script is kept: in its row, or already written to the object store
/// as [`script_key`] of `prefix`, whose bytes hash to `sha256`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ScriptPlace {
    /// In `reports.script` (or there is no script).
    #[default]
    Database,
    /// In the object store, under `prefix` (on the sweep list until the report is stored).
    Objects { prefix: String, sha256: Vec<u8> },
}

/// Where a stored report's script is, as its row says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoredScript {
    /// The text, kept in the row.
    Row(String),
    /// An object of the store, whose bytes must hash to `sha256`.
    Object { prefix: String, sha256: Vec<u8> },
}

impl StoredScript {
    /// The script as the row columns `script`, `script_prefix`, `script_sha256` say it is.
    pub(crate) fn from_columns(
        text: Option<String>,
        prefix: Option<String>,
        sha256: Option<Vec<u8>>,
    ) -> Option<StoredScript> {
        match (text, prefix, sha256) {
            (Some(text), _, _) => Some(StoredScript::Row(text)),
            (None, Some(prefix), Some(sha256)) => Some(StoredScript::Object { prefix, sha256 }),
            _ => None,
        }
    }
}

/// The object key of the script stored under `prefix`.
#[must_use]
pub fn script_key(prefix: &str) -> String {
    format!("{prefix}script")
}

/// Takes the sweep record of a script just written to the store: the object is the report's
/// now (an error if the sweeper already removed it).
pub(super) async fn claim_object(
    tx: &mut PgConnection,
    place: &ScriptPlace,
) -> Result<(), DbError> {
    if let ScriptPlace::Objects { prefix, .. } = place {
        claim_pending(&mut *tx, prefix).await?;
    }
    Ok(())
}

/// A script object written for a report that was not stored after all (a duplicate or a
/// replay): the sweeper removes it at its next pass.
pub(super) async fn discard_object(
    tx: &mut PgConnection,
    place: &ScriptPlace,
) -> Result<(), DbError> {
    if let ScriptPlace::Objects { prefix, .. } = place {
        due_now(&mut *tx, prefix).await?;
    }
    Ok(())
}

/// Up to `limit` reports after `after_id`, in id order, whose script is on `side`.
pub async fn scripts_on(
    ex: impl PgExecutor<'_>,
    side: Side,
    after_id: i64,
    limit: i64,
) -> Result<Vec<i64>, DbError> {
    Ok(match side {
        Side::Database => {
            sqlx::query_scalar!(
                "SELECT id FROM reports WHERE id > $1 AND script IS NOT NULL ORDER BY id LIMIT $2",
                after_id,
                limit
            )
            .fetch_all(ex)
            .await?
        }
        Side::Store => {
            sqlx::query_scalar!(
                "SELECT id FROM reports WHERE id > $1 AND script_prefix IS NOT NULL
                 ORDER BY id LIMIT $2",
                after_id,
                limit
            )
            .fetch_all(ex)
            .await?
        }
    })
}

/// The script columns of a report row: text, prefix, SHA-256.
struct ScriptColumns {
    script: Option<String>,
    script_prefix: Option<String>,
    script_sha256: Option<Vec<u8>>,
}

/// Report `id`'s script as its row says, if it has one.
pub async fn script_of(ex: impl PgExecutor<'_>, id: i64) -> Result<Option<StoredScript>, DbError> {
    let row = sqlx::query_as!(
        ScriptColumns,
        "SELECT script, script_prefix, script_sha256 FROM reports WHERE id = $1",
        id
    )
    .fetch_optional(ex)
    .await?;
    Ok(row.and_then(|c| StoredScript::from_columns(c.script, c.script_prefix, c.script_sha256)))
}

/// Points report `id`'s script (still `text` in its row) at the object written under `prefix`
/// and empties the row; claims the pending sweep of `prefix`. `false`, changing nothing: the
/// script is no longer that text (the report is gone, or another run moved it).
pub async fn script_to_object(
    tx: &mut PgConnection,
    id: i64,
    text: &str,
    prefix: &str,
    sha256: &[u8],
) -> Result<bool, DbError> {
    claim_pending(&mut *tx, prefix).await?;
    let moved = sqlx::query!(
        "UPDATE reports SET script = NULL, script_prefix = $3, script_sha256 = $4
         WHERE id = $1 AND script = $2",
        id,
        text,
        prefix,
        sha256
    )
    .execute(&mut *tx)
    .await?;
    Ok(moved.rows_affected() == 1)
}

/// Puts report `id`'s script (an object under `prefix`) back in its row as `text`, and queues
/// the object for the sweeper. `false`: the script is no longer there; the caller rolls back.
pub async fn script_to_row(
    tx: &mut PgConnection,
    id: i64,
    prefix: &str,
    text: &str,
) -> Result<bool, DbError> {
    let moved = sqlx::query!(
        "UPDATE reports SET script = $3, script_prefix = NULL, script_sha256 = NULL
         WHERE id = $1 AND script_prefix = $2",
        id,
        prefix,
        text
    )
    .execute(&mut *tx)
    .await?;
    record_pending(&mut *tx, prefix, std::time::Duration::ZERO).await?;
    Ok(moved.rows_affected() == 1)
}
