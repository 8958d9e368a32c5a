//! A report's stored log, read back: a range of lines for a page (only the chunks that hold
//! them are read), the lines a find or the findings pick out, or the whole log as a stream for
//! a download. A log retention removed answers 410, an unknown report 404.

use tracing::Instrument;

use crate::app::logfind::FindCache;
use crate::app::logstore;
use crate::app::{Error, blocking};
use crate::storage::Db;
use crate::storage::reports as store;

/// Lines `first..=last` (1-based) of the report's stored (scrubbed) log, each followed by `\n`
/// and cut to its first `max_line_bytes` bytes: fewer past the end, 404 for an unknown report,
/// 410 when retention removed the log.
/// Reads and decompresses only the chunks that hold them.
#[tracing::instrument(name = "reports::log_lines", skip_all, fields(report_id = id, first = first, last = last))]
pub(super) async fn log_lines(
    db: &Db,
    id: i64,
    first: usize,
    last: usize,
    max_line_bytes: usize,
) -> Result<Vec<u8>, Error> {
    let (first, last) = (first.max(1), last.max(first.max(1)));
    let as_i64 = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let chunks = store::log_chunks_for_lines(db, id, as_i64(first), as_i64(last)).await?;
    if chunks.is_empty() && store::log_chunk_count(db.pool(), id).await? == 0 {
        return Err(no_log(db, id).await);
    }
    blocking(move || logstore::lines(&chunks, first, last, max_line_bytes))
        .await?
        .map_err(|e| Error::Internal(e.into()))
}

/// Why report `id` has no log to read: retention removed it (410, saying when), or there is no
/// such report (404).
async fn no_log(db: &Db, id: i64) -> Error {
    match store::log_removed_at(db.pool(), id).await {
        Ok(Some(Some(at))) => Error::Gone(format!("the log was removed by retention on {at}")),
        Ok(_) => Error::NotFound("report"),
        Err(e) => e.into(),
    }
}

/// The report's whole stored log, decompressed a chunk at a time as the receiver takes it
/// (at most two chunks in memory per download), or 404.
#[tracing::instrument(name = "reports::log_stream", skip_all, fields(report_id = id))]
pub async fn log_stream(
    db: &Db,
    id: i64,
) -> Result<tokio::sync::mpsc::Receiver<Result<Vec<u8>, Error>>, Error> {
    let count = store::log_chunk_count(db.pool(), id).await?;
    if count == 0 {
        return Err(no_log(db, id).await);
    }
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let db = db.clone();
    // The download goes on after the handler returned: it keeps the request's span.
    let read = async move {
        for seq in 0..count {
            let next = match store::log_chunk(&db, id, seq).await {
                // A report deleted meanwhile ends its download early.
                Ok(None) => break,
                Ok(Some(chunk)) => blocking(move || logstore::decompress(&chunk))
                    .await
                    .and_then(|r| r.map_err(|e| Error::Internal(e.into()))),
                Err(e) => Err(e.into()),
            };
            let failed = next.is_err();
            // The receiver is gone when the client went away: stop reading.
            if tx.send(next).await.is_err() || failed {
                break;
            }
        }
    };
    tokio::spawn(read.in_current_span());
    Ok(rx)
}

/// Lines picked out of a stored log: the first ones found, and how many matched in all.
#[derive(Clone, Debug, Default)]
pub struct PickedLines {
    /// (1-based number, text cut to the asked length), in log order.
    pub lines: Vec<(usize, Vec<u8>)>,
    /// Lines that matched, including those past the limit.
    pub matched: usize,
}

/// The lines of report `id`'s stored log that contain `needle` (ASCII letters in any case),
/// the first `limit` of them cut to `max_line_bytes` (the match is looked for in that part),
/// and the count of all matching lines; 404 for an unknown report, 410 for a log retention
/// removed. Reads every chunk, one at a time, scanning blocks rather than lines (see
/// [`crate::app::logfind`]): memory stays near `limit * max_line_bytes` for any size of log. Concurrent
/// finds share readings through `cache`.
#[tracing::instrument(name = "reports::grep", skip_all, fields(report_id = id, needle_bytes = needle.len(), limit = limit))]
pub(super) async fn grep(
    db: &Db,
    cache: &FindCache,
    id: i64,
    needle: &str,
    limit: usize,
    max_line_bytes: usize,
) -> Result<PickedLines, Error> {
    match cache.find(db, id, needle, limit, max_line_bytes).await {
        Ok(found) => Ok(PickedLines {
            lines: found.lines.clone(),
            matched: found.matched,
        }),
        // No chunks: say whether retention removed the log or the report never was.
        Err(Error::NotFound(_)) => Err(no_log(db, id).await),
        Err(e) => Err(e),
    }
}

/// Lines `wanted` (1-based numbers) of report `id`'s stored log, each cut to `max_line_bytes`;
/// only the chunks that hold one of them are read. 404 for an unknown report.
#[tracing::instrument(name = "reports::lines_at", skip_all, fields(report_id = id, lines = wanted.len()))]
pub(super) async fn lines_at(
    db: &Db,
    id: i64,
    mut wanted: Vec<usize>,
    max_line_bytes: usize,
) -> Result<PickedLines, Error> {
    wanted.sort_unstable();
    wanted.dedup();
    let limit = wanted.len();
    let holds = {
        let wanted = wanted.clone();
        move |(first, lines): (usize, usize)| {
            let at = wanted.partition_point(|&n| n < first);
            wanted.get(at).is_some_and(|&n| n < first + lines)
        }
    };
    pick_lines(
        db,
        id,
        holds,
        move |n, _| wanted.binary_search(&n).is_ok(),
        limit,
        max_line_bytes,
    )
    .await
}

/// The lines `keep` accepts, read from the chunks `holds` accepts by (first line, lines).
async fn pick_lines(
    db: &Db,
    id: i64,
    holds: impl Fn((usize, usize)) -> bool,
    keep: impl Fn(usize, &[u8]) -> bool + Send + Clone + 'static,
    limit: usize,
    max_line_bytes: usize,
) -> Result<PickedLines, Error> {
    let index = store::log_chunk_index(db.pool(), id).await?;
    if index.is_empty() {
        return Err(no_log(db, id).await);
    }
    let as_usize = |n: i64| usize::try_from(n).unwrap_or(usize::MAX);
    let mut picked = PickedLines::default();
    for (seq, first, lines) in index {
        if !holds((as_usize(first), as_usize(lines))) {
            continue;
        }
        // A report deleted meanwhile ends the reading early.
        let Some(chunk) = store::log_chunk(db, id, seq).await? else {
            break;
        };
        let keep = keep.clone();
        let mut part = std::mem::take(&mut picked);
        picked = blocking(move || {
            logstore::each_line(&chunk, max_line_bytes, |n, text| {
                if keep(n, text) {
                    part.matched += 1;
                    if part.lines.len() < limit {
                        part.lines.push((n, text.to_vec()));
                    }
                }
                true
            })
            .map(|()| part)
        })
        .await?
        .map_err(|e| Error::Internal(e.into()))?;
    }
    Ok(picked)
}
