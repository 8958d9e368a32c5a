//! The SQL side of logs in the object store (migration 0039): the sweep list that keeps the
//! store free of objects no report refers to (uploads that never committed, logs retention
//! removed), and the chunk-map updates of `gpu-triage db move-logs`, which moves logs between
//! PostgreSQL and the store one report at a time.

use std::time::Duration;

use sqlx::{PgConnection, PgExecutor};

use super::objects::StoreError;
use super::{Db, DbError};

/// Records that objects are about to be written under `prefix`; the sweeper removes them once
/// `grace` has passed unless a transaction that stores them deletes this row first.
pub async fn record_pending(
    ex: impl PgExecutor<'_>,
    prefix: &str,
    grace: Duration,
) -> Result<(), DbError> {
    // The milliseconds are sent as `int8`, as before, and multiply the interval from there.
    sqlx::query!(
        "INSERT INTO log_object_sweeps (prefix, due)
         VALUES ($1, now() + $2::int8 * interval '1 millisecond')
         ON CONFLICT (prefix) DO UPDATE SET due = excluded.due",
        prefix,
        i64::try_from(grace.as_millis()).unwrap_or(i64::MAX)
    )
    .execute(ex)
    .await?;
    Ok(())
}

/// Locks up to `limit` prefixes whose sweep is due, oldest first (those another replica's
/// sweeper holds are skipped).
pub async fn lock_due(tx: &mut PgConnection, limit: i64) -> Result<Vec<String>, DbError> {
    Ok(sqlx::query_scalar!(
        "SELECT prefix FROM log_object_sweeps WHERE due <= now()
         ORDER BY due LIMIT $1 FOR UPDATE SKIP LOCKED",
        limit
    )
    .fetch_all(&mut *tx)
    .await?)
}

/// Takes back the pending sweep of `prefix`: the objects written under it belong to what the
/// caller's transaction stores. A record the sweeper already took means it removed them (the
/// writer outlasted the grace period): [`StoreError::Expired`].
pub async fn claim_pending(tx: &mut PgConnection, prefix: &str) -> Result<(), DbError> {
    let claimed = sqlx::query!("DELETE FROM log_object_sweeps WHERE prefix = $1", prefix)
        .execute(&mut *tx)
        .await?;
    if claimed.rows_affected() != 1 {
        return Err(StoreError::Expired.into());
    }
    Ok(())
}

/// Makes the pending sweep of `prefix` due now: what was written under it was not stored
/// after all (a duplicate, a replayed key).
pub async fn due_now(tx: &mut PgConnection, prefix: &str) -> Result<(), DbError> {
    sqlx::query!(
        "UPDATE log_object_sweeps SET due = now() WHERE prefix = $1",
        prefix
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Forgets the sweep of `prefix` (its objects are gone).
pub async fn swept(tx: &mut PgConnection, prefix: &str) -> Result<(), DbError> {
    sqlx::query!("DELETE FROM log_object_sweeps WHERE prefix = $1", prefix)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// Prefixes waiting for the sweeper, due or not.
pub async fn pending_count(ex: impl PgExecutor<'_>) -> Result<i64, DbError> {
    Ok(
        sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM log_object_sweeps"#)
            .fetch_one(ex)
            .await?,
    )
}

/// Where the chunks of a log are: `Database` ones carry their bytes in their rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// In `report_log_chunks.data`.
    Database,
    /// In the object store.
    Store,
}

/// Up to `limit` reports after `after_id`, in id order, that have chunks on `side`.
pub async fn reports_on(
    ex: impl PgExecutor<'_>,
    side: Side,
    after_id: i64,
    limit: i64,
) -> Result<Vec<i64>, DbError> {
    Ok(sqlx::query_scalar!(
        "SELECT DISTINCT report_id FROM report_log_chunks
         WHERE report_id > $1 AND (object_prefix IS NULL) = $2
         ORDER BY report_id LIMIT $3",
        after_id,
        side == Side::Database,
        limit
    )
    .fetch_all(ex)
    .await?)
}

/// One chunk of a log as `db move-logs` reads it: its bytes when they are in the row, else the
/// prefix of its object, and the hash recorded for it (none for chunks stored in rows before
/// migration 0039).
#[derive(Clone, Debug)]
pub struct ChunkPlace {
    pub seq: i32,
    pub data: Option<Vec<u8>>,
    pub object_prefix: Option<String>,
    pub sha256: Option<Vec<u8>>,
}

/// The chunks of report `id`'s log, in order.
pub async fn chunks_of(ex: impl PgExecutor<'_>, id: i64) -> Result<Vec<ChunkPlace>, DbError> {
    Ok(sqlx::query_as!(
        ChunkPlace,
        "SELECT seq, data, object_prefix, sha256 FROM report_log_chunks
         WHERE report_id = $1 ORDER BY seq",
        id
    )
    .fetch_all(ex)
    .await?)
}

/// Points report `id`'s chunks (all still in their rows) at the objects written under `prefix`
/// and empties their rows, with each chunk's (seq, SHA-256, size); claims the pending sweep of
/// `prefix`. Returns `false`, changing nothing, when the log is no longer the same (removed,
/// or moved by another run meanwhile): then the caller rolls back.
pub async fn point_to_objects(
    tx: &mut PgConnection,
    id: i64,
    prefix: &str,
    chunks: &[(i32, Vec<u8>, i64)],
) -> Result<bool, DbError> {
    claim_pending(&mut *tx, prefix).await?;
    let seq: Vec<i32> = chunks.iter().map(|c| c.0).collect();
    let sha: Vec<&[u8]> = chunks.iter().map(|c| &c.1[..]).collect();
    let size: Vec<i64> = chunks.iter().map(|c| c.2).collect();
    // The hashes are borrowed slices, which the macro would only take as owned `Vec<u8>`s:
    // `as _` passes them as they are (`bytea[]` either way).
    let moved = sqlx::query!(
        "UPDATE report_log_chunks c SET data = NULL, object_prefix = $2, sha256 = u.h,
             stored_bytes = u.b
         FROM UNNEST($3::int4[], $4::bytea[], $5::int8[]) AS u(s, h, b)
         WHERE c.report_id = $1 AND c.seq = u.s AND c.object_prefix IS NULL",
        id,
        prefix,
        &seq,
        &sha as _,
        &size
    )
    .execute(&mut *tx)
    .await?;
    let total = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM report_log_chunks WHERE report_id = $1"#,
        id
    )
    .fetch_one(&mut *tx)
    .await?;
    Ok(moved.rows_affected() == chunks.len() as u64 && total == chunks.len() as i64)
}

/// Puts the bytes of report `id`'s chunks (all in the object store under `prefix`) back in
/// their rows, as (seq, bytes), and queues the objects for the sweeper. Returns `false`,
/// changing nothing the caller keeps, when the log is no longer the same: then it rolls back.
pub async fn point_to_rows(
    tx: &mut PgConnection,
    id: i64,
    prefix: &str,
    chunks: &[(i32, Vec<u8>)],
) -> Result<bool, DbError> {
    let seq: Vec<i32> = chunks.iter().map(|c| c.0).collect();
    let data: Vec<&[u8]> = chunks.iter().map(|c| &c.1[..]).collect();
    // The chunks are borrowed, not copied: `as _` passes the slices to the `bytea[]` the
    // macro would only take as owned `Vec<u8>`s.
    let moved = sqlx::query!(
        "UPDATE report_log_chunks c SET data = u.d, object_prefix = NULL, stored_bytes = NULL
         FROM UNNEST($3::int4[], $4::bytea[]) AS u(s, d)
         WHERE c.report_id = $1 AND c.seq = u.s AND c.object_prefix = $2",
        id,
        prefix,
        &seq,
        &data as _
    )
    .execute(&mut *tx)
    .await?;
    record_pending(&mut *tx, prefix, Duration::ZERO).await?;
    let total = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM report_log_chunks WHERE report_id = $1"#,
        id
    )
    .fetch_one(&mut *tx)
    .await?;
    Ok(moved.rows_affected() == chunks.len() as u64 && total == chunks.len() as i64)
}

/// How many chunks are in rows and how many in the object store, all reports together.
pub async fn chunk_sides(db: &Db) -> Result<(i64, i64), DbError> {
    let sides = sqlx::query!(
        r#"SELECT count(*) FILTER (WHERE object_prefix IS NULL) AS "in_rows!",
                count(*) FILTER (WHERE object_prefix IS NOT NULL) AS "in_store!"
         FROM report_log_chunks"#
    )
    .fetch_one(db.pool())
    .await?;
    Ok((sides.in_rows, sides.in_store))
}
