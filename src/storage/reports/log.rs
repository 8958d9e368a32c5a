//! A report's stored log: its chunks (migration 0010), written with the report and read back
//! by line range, by position or whole, and whether retention removed it.

use sqlx::PgExecutor;

use super::rfc3339;
use crate::storage::DbError;

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

pub(super) async fn insert_log(
    tx: &mut sqlx::PgConnection,
    report_id: i64,
    chunks: &[LogChunk],
) -> Result<(), DbError> {
    // A batch of chunks per statement: one round trip for most logs, and a bounded parameter
    // size for the largest.
    for batch in chunks.chunks(32) {
        let seq: Vec<i32> = batch.iter().map(|c| c.seq).collect();
        let first: Vec<i64> = batch.iter().map(|c| c.first_line).collect();
        let lines: Vec<i64> = batch.iter().map(|c| c.lines).collect();
        let data: Vec<&[u8]> = batch.iter().map(|c| &c.data[..]).collect();
        sqlx::query(
            "INSERT INTO report_log_chunks (report_id, seq, first_line, lines, data) \
             SELECT $1, * FROM UNNEST($2::int4[], $3::int8[], $4::int8[], $5::bytea[])",
        )
        .bind(report_id)
        .bind(seq)
        .bind(first)
        .bind(lines)
        .bind(data)
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

/// The chunks of report `id`'s log that hold lines `first..=last` (1-based), in order; empty
/// when the report does not exist.
pub async fn log_chunks_for_lines(
    ex: impl PgExecutor<'_>,
    id: i64,
    first: i64,
    last: i64,
) -> Result<Vec<LogChunk>, DbError> {
    Ok(sqlx::query_as(
        "SELECT seq, first_line, lines, data FROM report_log_chunks \
         WHERE report_id = $1 AND first_line <= $3 AND first_line + lines > $2 \
         ORDER BY seq",
    )
    .bind(id)
    .bind(first)
    .bind(last)
    .fetch_all(ex)
    .await?)
}

/// Chunk `seq` of report `id`'s log, if there is one.
pub async fn log_chunk(
    ex: impl PgExecutor<'_>,
    id: i64,
    seq: i32,
) -> Result<Option<LogChunk>, DbError> {
    Ok(sqlx::query_as(
        "SELECT seq, first_line, lines, data FROM report_log_chunks \
         WHERE report_id = $1 AND seq = $2",
    )
    .bind(id)
    .bind(seq)
    .fetch_optional(ex)
    .await?)
}

/// Where each chunk of report `id`'s log starts and how many lines it holds, in order, as
/// (seq, first line, lines), without their data; empty when the report does not exist.
pub async fn log_chunk_index(
    ex: impl PgExecutor<'_>,
    id: i64,
) -> Result<Vec<(i32, i64, i64)>, DbError> {
    Ok(sqlx::query_as(
        "SELECT seq, first_line, lines FROM report_log_chunks WHERE report_id = $1 ORDER BY seq",
    )
    .bind(id)
    .fetch_all(ex)
    .await?)
}

/// Whether report `id` exists and, when it does, when retention removed its log (`None` inside:
/// the log is stored).
pub async fn log_removed_at(
    ex: impl PgExecutor<'_>,
    id: i64,
) -> Result<Option<Option<crate::time::Timestamp>>, DbError> {
    Ok(sqlx::query_scalar(concat!(
        "SELECT ",
        rfc3339!("log_removed_at"),
        " FROM reports WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(ex)
    .await?)
}

/// How many chunks report `id`'s log has (0: no such report, or its log was removed).
pub async fn log_chunk_count(ex: impl PgExecutor<'_>, id: i64) -> Result<i32, DbError> {
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM report_log_chunks WHERE report_id = $1")
        .bind(id)
        .fetch_one(ex)
        .await?;
    Ok(i32::try_from(n).unwrap_or(i32::MAX))
}

/// A column expression: a report's whole log as one multi-member gzip stream, for the few
/// readers that need every line (reclassification, rule previews). `reports` must be in scope.
macro_rules! whole_log_gz {
    () => {
        "coalesce((SELECT string_agg(c.data, ''::bytea ORDER BY c.seq) \
                   FROM report_log_chunks c WHERE c.report_id = reports.id), ''::bytea)"
    };
}
pub(crate) use whole_log_gz;
