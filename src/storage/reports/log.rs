//! A report's stored log: its chunks (migration 0010), written with the report and read back
//! by line range, by position or whole, and whether retention removed it. A chunk's bytes are
//! in its row or, with `--log-store`, in the object store (migration 0039): the readers here
//! fetch what they return from wherever it is, checking each object against its recorded hash.

use sqlx::PgExecutor;

use crate::storage::objects::StoreError;
use crate::storage::{Db, DbError};
use crate::time::Timestamp;

/// One stored piece of a report's log: whole lines, gzip-compressed on their own (migration
/// 0010). Chunks concatenated in `seq` order are a multi-member gzip stream of the whole log.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct LogChunk {
    /// 0-based position in the log.
    pub seq: i32,
    /// 1-based number of the chunk's first line in the whole log.
    pub first_line: i64,
    /// Lines in the chunk (a final line without a newline counts).
    pub lines: i64,
    /// The chunk's bytes, gzip-compressed.
    pub data: Vec<u8>,
}

/// Where a new report's chunks are kept: in their rows, or already written to the object
/// store as `{prefix}{seq}`, with the SHA-256 of each chunk's bytes in `seq` order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum LogPlace {
    /// In `report_log_chunks.data`.
    #[default]
    Database,
    /// In the object store, under `prefix` (recorded in `log_object_sweeps` before the first
    /// object was written).
    Objects {
        prefix: String,
        sha256: Vec<Vec<u8>>,
    },
}

/// The object key of chunk `seq` of a log stored under `prefix`.
#[must_use]
pub fn object_key(prefix: &str, seq: i32) -> String {
    format!("{prefix}{seq}")
}

pub(super) async fn insert_log(
    tx: &mut sqlx::PgConnection,
    report_id: i64,
    chunks: &[LogChunk],
    place: &LogPlace,
) -> Result<(), DbError> {
    let (prefix, hashes) = match place {
        LogPlace::Database => (None, None),
        LogPlace::Objects { prefix, sha256 } => {
            // The objects are this report's now: no sweep for them.
            crate::storage::log_objects::claim_pending(&mut *tx, prefix).await?;
            (Some(prefix.as_str()), Some(sha256))
        }
    };
    // A batch of chunks per statement: one round trip for most logs, and a bounded parameter
    // size for the largest.
    for (n, batch) in chunks.chunks(32).enumerate() {
        let seq: Vec<i32> = batch.iter().map(|c| c.seq).collect();
        let first: Vec<i64> = batch.iter().map(|c| c.first_line).collect();
        let lines: Vec<i64> = batch.iter().map(|c| c.lines).collect();
        let size: Vec<i64> = batch
            .iter()
            .map(|c| i64::try_from(c.data.len()).unwrap_or(i64::MAX))
            .collect();
        let data: Vec<Option<&[u8]>> = batch
            .iter()
            .map(|c| prefix.is_none().then_some(&c.data[..]))
            .collect();
        let sha: Vec<Option<&[u8]>> = (0..batch.len())
            .map(|i| hashes.and_then(|h| h.get(n * 32 + i)).map(|h| &h[..]))
            .collect();
        sqlx::query!(
            "INSERT INTO report_log_chunks
                 (report_id, seq, first_line, lines, data, stored_bytes, sha256, object_prefix)
             SELECT $1, s, f, l, d, CASE WHEN $8::text IS NULL THEN NULL ELSE b END, h, $8
             FROM UNNEST($2::int4[], $3::int8[], $4::int8[], $5::bytea[], $6::int8[],
                         $7::bytea[]) AS u(s, f, l, d, b, h)",
            report_id,
            &seq[..],
            &first[..],
            &lines[..],
            // Arrays with NULL elements: the macro's `Vec<Vec<u8>>` for `bytea[]` has none, so
            // their type is given here (still `bytea[]` on the wire, as the SQL casts).
            &data[..] as &[Option<&[u8]>],
            &size[..],
            &sha[..] as &[Option<&[u8]>],
            prefix
        )
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

/// Objects written for a log that was not stored after all (the upload turned out to be a
/// duplicate, or replayed an idempotency key): the sweeper removes them at its next pass.
pub(super) async fn discard_objects(
    tx: &mut sqlx::PgConnection,
    place: &LogPlace,
) -> Result<(), DbError> {
    if let LogPlace::Objects { prefix, .. } = place {
        crate::storage::log_objects::due_now(&mut *tx, prefix).await?;
    }
    Ok(())
}

/// A chunk's row: its bytes, or where they are in the object store.
struct ChunkRow {
    seq: i32,
    first_line: i64,
    lines: i64,
    data: Option<Vec<u8>>,
    object_prefix: Option<String>,
    sha256: Option<Vec<u8>>,
}

/// The chunk of `row`, its bytes read from the object store when they are there (and checked
/// against the recorded hash).
async fn resolve(db: &Db, row: ChunkRow) -> Result<LogChunk, DbError> {
    let data = match (row.data, row.object_prefix) {
        (Some(data), _) => data,
        (None, Some(prefix)) => {
            let store = db.require_log_store()?;
            let key = object_key(&prefix, row.seq);
            let bytes = store.get(&key).await?;
            if row.sha256.as_deref() != Some(&sha2::Sha256::digest(&bytes)[..]) {
                return Err(StoreError::Corrupt {
                    url: store.url().to_owned(),
                    key,
                }
                .into());
            }
            bytes
        }
        (None, None) => Vec::new(),
    };
    Ok(LogChunk {
        seq: row.seq,
        first_line: row.first_line,
        lines: row.lines,
        data,
    })
}

async fn resolve_all(db: &Db, rows: Vec<ChunkRow>) -> Result<Vec<LogChunk>, DbError> {
    let mut chunks = Vec::with_capacity(rows.len());
    for row in rows {
        chunks.push(resolve(db, row).await?);
    }
    Ok(chunks)
}

use sha2::Digest as _;

/// The chunks of report `id`'s log that hold lines `first..=last` (1-based), in order; empty
/// when the report does not exist.
pub async fn log_chunks_for_lines(
    db: &Db,
    id: i64,
    first: i64,
    last: i64,
) -> Result<Vec<LogChunk>, DbError> {
    let rows = sqlx::query_as!(
        ChunkRow,
        "SELECT seq, first_line, lines, data, object_prefix, sha256 FROM report_log_chunks
         WHERE report_id = $1 AND first_line <= $3 AND first_line + lines > $2
         ORDER BY seq",
        id,
        first,
        last
    )
    .fetch_all(db.pool())
    .await?;
    resolve_all(db, rows).await
}

/// Chunk `seq` of report `id`'s log, if there is one.
pub async fn log_chunk(db: &Db, id: i64, seq: i32) -> Result<Option<LogChunk>, DbError> {
    let row = sqlx::query_as!(
        ChunkRow,
        "SELECT seq, first_line, lines, data, object_prefix, sha256 FROM report_log_chunks
         WHERE report_id = $1 AND seq = $2",
        id,
        seq
    )
    .fetch_optional(db.pool())
    .await?;
    match row {
        Some(row) => Ok(Some(resolve(db, row).await?)),
        None => Ok(None),
    }
}

/// Where each chunk of report `id`'s log starts and how many lines it holds, in order, as
/// (seq, first line, lines), without their data; empty when the report does not exist.
pub async fn log_chunk_index(
    ex: impl PgExecutor<'_>,
    id: i64,
) -> Result<Vec<(i32, i64, i64)>, DbError> {
    let rows = sqlx::query!(
        "SELECT seq, first_line, lines FROM report_log_chunks WHERE report_id = $1 ORDER BY seq",
        id
    )
    .fetch_all(ex)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.seq, r.first_line, r.lines))
        .collect())
}

/// Whether report `id` exists and, when it does, when retention removed its log (`None` inside:
/// the log is stored).
pub async fn log_removed_at(
    ex: impl PgExecutor<'_>,
    id: i64,
) -> Result<Option<Option<crate::time::Timestamp>>, DbError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT log_removed_at AS "log_removed_at: Timestamp" FROM reports WHERE id = $1"#,
        id
    )
    .fetch_optional(ex)
    .await?)
}

/// How many chunks report `id`'s log has (0: no such report, or its log was removed).
pub async fn log_chunk_count(ex: impl PgExecutor<'_>, id: i64) -> Result<i32, DbError> {
    let n = sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM report_log_chunks WHERE report_id = $1"#,
        id
    )
    .fetch_one(ex)
    .await?;
    Ok(i32::try_from(n).unwrap_or(i32::MAX))
}

/// The whole compressed logs of those of reports `ids` whose chunks are in the object store, by
/// report id. The readers that need every line (reclassification, rule previews) read a
/// report's log as one multi-member gzip stream of its chunk rows, in SQL; chunks in the store
/// give nothing there, so this fills in the logs it left empty.
pub async fn logs_from_store(
    db: &Db,
    ids: &[i64],
) -> Result<std::collections::HashMap<i64, Vec<u8>>, DbError> {
    let mut logs = std::collections::HashMap::new();
    if ids.is_empty() {
        return Ok(logs);
    }
    let rows = sqlx::query!(
        "SELECT report_id, seq, first_line, lines, data, object_prefix, sha256
         FROM report_log_chunks
         WHERE report_id = ANY($1) AND object_prefix IS NOT NULL ORDER BY report_id, seq",
        ids
    )
    .fetch_all(db.pool())
    .await?;
    for row in rows {
        let chunk = ChunkRow {
            seq: row.seq,
            first_line: row.first_line,
            lines: row.lines,
            data: row.data,
            object_prefix: row.object_prefix,
            sha256: row.sha256,
        };
        let chunk = resolve(db, chunk).await?;
        logs.entry(row.report_id)
            .or_insert_with(Vec::new)
            .extend_from_slice(&chunk.data);
    }
    Ok(logs)
}
