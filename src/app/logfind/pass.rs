//! Finds running at once in one report's log share one reading of it, as PostgreSQL's
//! synchronised sequential scans do: the first find starts a pass that reads the log's chunks
//! in order, and a find that comes while it runs boards at the next chunk, rides to the end,
//! wraps round to the start and leaves at the chunk where it boarded. Each chunk is fetched
//! and inflated once for all its riders, so sixteen different finds in a 128 MiB log cost one
//! inflate and sixteen `memmem` scans instead of sixteen inflates (on two cores they did not
//! answer within a second). A pass ends when it has no riders; finds whose reader went away
//! leave at the next chunk. Lines found before and after the wrap are kept apart and joined in
//! log order, so a rider's answer is what a find from the first chunk would give.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

use super::{FoundLines, LogNeedle, LogSearch, find_many_in_chunk};
use crate::app::{Error, blocking};
use crate::storage::reports::{self as store, LogChunk};
use crate::storage::{Db, DbError};

/// The passes running, by (report, line cut), each with the finds waiting to board it.
#[derive(Clone, Default)]
pub(super) struct Passes(Arc<Mutex<HashMap<PassKey, Vec<Rider>>>>);

/// Finds that cut lines alike can share a reading (long lines are skipped alike).
type PassKey = (i64, usize);

impl fmt::Debug for Passes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Passes")
            .field("running", &self.lock().len())
            .finish()
    }
}

impl Passes {
    /// Runs `needle` over report `id`'s log, on the pass already reading it if there is one.
    /// `Error::NotFound` when the report has no stored log.
    pub(super) async fn find(
        &self,
        db: &Db,
        id: i64,
        needle: LogNeedle,
    ) -> Result<FoundLines, Error> {
        let key = (id, needle.max_line_bytes);
        let (rider, answer) = Rider::new(needle);
        let start = {
            // An entry exists exactly while its driver runs: the driver removes it, under this
            // lock, when it has no riders left.
            let mut passes = self.lock();
            let start = !passes.contains_key(&key);
            passes.entry(key).or_default().push(rider);
            start
        };
        if start {
            tokio::spawn(self.clone().drive(db.clone(), key));
        }
        answer.await.map_err(|_| {
            Error::Internal(anyhow::anyhow!(
                "the reading of report {id}'s log stopped before its end"
            ))
        })?
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PassKey, Vec<Rider>>> {
        // Every change is one call: a panic elsewhere cannot leave the map inconsistent.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the log round and round while anyone rides.
    async fn drive(self, db: Db, key: PassKey) {
        let (id, max_line_bytes) = key;
        let seqs = store::log_chunk_index(db.pool(), id)
            .await
            .map(|index| index.into_iter().map(|(seq, _, _)| seq).collect::<Vec<_>>());
        let mut riders: Vec<Rider> = Vec::new();
        let mut at = 0;
        loop {
            {
                let mut passes = self.lock();
                let boarding = passes.entry(key).or_default();
                let chunks = seqs.as_ref().map_or(0, Vec::len);
                riders.extend(boarding.drain(..).map(|r| r.board(at, chunks)));
                riders.retain(|r| !r.answer.is_closed());
                if riders.is_empty() {
                    passes.remove(&key);
                    return;
                }
            }
            let seqs = match &seqs {
                Ok(seqs) if !seqs.is_empty() => seqs,
                Ok(_) => {
                    for r in riders.drain(..) {
                        r.fail(Error::NotFound("report"));
                    }
                    continue;
                }
                Err(e) => {
                    for r in riders.drain(..) {
                        r.fail(copy_db_error(e));
                    }
                    continue;
                }
            };
            // A report deleted meanwhile reads as chunks with no lines.
            let chunk = match store::log_chunk(&db, id, seqs[at]).await {
                Ok(chunk) => chunk,
                Err(e) => {
                    for r in riders.drain(..) {
                        r.fail(copy_db_error(&e));
                    }
                    continue;
                }
            };
            let read = blocking(move || read_chunk(chunk.as_ref(), at, max_line_bytes, riders));
            riders = match read.await {
                Ok((riders, Ok(()))) => riders,
                Ok((riders, Err(e))) => {
                    for r in riders {
                        r.fail(Error::Internal(anyhow::anyhow!(
                            "report {id}'s log chunk {}: {e}",
                            seqs[at]
                        )));
                    }
                    Vec::new()
                }
                // The riders went with the panicked task: their finds answer an internal error.
                Err(_) => Vec::new(),
            };
            riders = riders
                .into_iter()
                .filter_map(|r| if r.left == 0 { r.arrive() } else { Some(r) })
                .collect();
            at = (at + 1) % seqs.len();
        }
    }
}

/// One find on a pass.
struct Rider {
    needle: LogNeedle,
    /// The chunk position where it boarded.
    boarded: usize,
    /// Chunks it has still to read.
    left: usize,
    /// Lines in the chunks from where it boarded to the end of the log.
    after_boarding: FoundLines,
    /// Lines in the chunks from the start of the log to where it boarded.
    before_boarding: FoundLines,
    answer: oneshot::Sender<Result<FoundLines, Error>>,
}

impl Rider {
    fn new(needle: LogNeedle) -> (Rider, oneshot::Receiver<Result<FoundLines, Error>>) {
        let (answer, receiver) = oneshot::channel();
        let rider = Rider {
            needle,
            boarded: 0,
            left: 0,
            after_boarding: FoundLines::default(),
            before_boarding: FoundLines::default(),
            answer,
        };
        (rider, receiver)
    }

    /// Boards at chunk position `at` of a log of `chunks` chunks.
    fn board(mut self, at: usize, chunks: usize) -> Rider {
        self.boarded = at;
        self.left = chunks;
        self
    }

    /// Gives the answer once every chunk was read: the lines in log order.
    fn arrive(self) -> Option<Rider> {
        let mut found = self.before_boarding;
        found.matched += self.after_boarding.matched;
        let room = self.needle.limit.saturating_sub(found.lines.len());
        found
            .lines
            .extend(self.after_boarding.lines.into_iter().take(room));
        // The reader may have gone: nothing to tell.
        let _ = self.answer.send(Ok(found));
        None
    }

    fn fail(self, error: Error) {
        // The reader may have gone: nothing to tell.
        let _ = self.answer.send(Err(error));
    }
}

/// Reads the chunk at position `at` for every rider (`None`: it is gone, read as empty).
fn read_chunk(
    chunk: Option<&LogChunk>,
    at: usize,
    max_line_bytes: usize,
    mut riders: Vec<Rider>,
) -> (Vec<Rider>, std::io::Result<()>) {
    let mut result = Ok(());
    if let Some(chunk) = chunk {
        let mut searches: Vec<LogSearch<'_>> = riders
            .iter_mut()
            .map(|r| LogSearch {
                needle: &r.needle,
                found: if at >= r.boarded {
                    &mut r.after_boarding
                } else {
                    &mut r.before_boarding
                },
            })
            .collect();
        result = find_many_in_chunk(chunk, max_line_bytes, &mut searches);
    }
    for r in &mut riders {
        r.left -= 1;
    }
    (riders, result)
}

/// One failure told to every rider: each gets its own error of the same kind (an unreachable
/// database stays a 503).
fn copy_db_error(e: &DbError) -> Error {
    match e {
        DbError::Unavailable(inner) => Error::Db(DbError::Unavailable(sqlx::Error::Protocol(
            inner.to_string(),
        ))),
        other => Error::Internal(anyhow::anyhow!("{other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::logfind::find_in_chunk;
    use crate::app::logstore::ChunkWriter;

    fn log_chunks() -> Vec<LogChunk> {
        let mut w = ChunkWriter::with_chunk_bytes(2000);
        for i in 1..=3000 {
            let line = match i % 500 {
                0 => format!("RuntimeError: CUDA error: an illegal memory access ({i})\n"),
                _ => format!("step {i} loss=0.{i} Tokens/s {}\n", i % 3),
            };
            w.write_all(line.as_bytes()).expect("write");
        }
        w.finish().expect("finish")
    }

    fn from_the_start(chunks: &[LogChunk], text: &str, limit: usize) -> FoundLines {
        let needle = LogNeedle::new(text, limit, 100);
        let mut found = FoundLines::default();
        for chunk in chunks {
            find_in_chunk(chunk, &needle, &mut found).expect("gzip");
        }
        found
    }

    /// A pass read without a database: finds board at the steps given (step `s` reads
    /// position `s % chunks`), and the pass reads until every rider has arrived.
    fn ride(chunks: &[LogChunk], boardings: &[(usize, &str, usize)]) -> Vec<FoundLines> {
        let mut answers = Vec::new();
        let mut waiting: Vec<(usize, Rider)> = Vec::new();
        for &(step, text, limit) in boardings {
            let (rider, answer) = Rider::new(LogNeedle::new(text, limit, 100));
            waiting.push((step, rider));
            answers.push(answer);
        }
        let mut riders: Vec<Rider> = Vec::new();
        let mut step = 0;
        while !(waiting.is_empty() && riders.is_empty()) {
            let at = step % chunks.len();
            let (now, later) = waiting.into_iter().partition(|(s, _)| *s == step);
            waiting = later;
            riders.extend(now.into_iter().map(|(_, r)| r.board(at, chunks.len())));
            let (read, result) = read_chunk(Some(&chunks[at]), at, 100, riders);
            result.expect("gzip");
            riders = read
                .into_iter()
                .filter_map(|r| if r.left == 0 { r.arrive() } else { Some(r) })
                .collect();
            step += 1;
        }
        answers
            .into_iter()
            .map(|mut a| a.try_recv().expect("answered").expect("found"))
            .collect()
    }

    #[test]
    fn a_find_that_boards_a_running_pass_answers_what_a_find_from_the_start_would() {
        let chunks = log_chunks();
        assert!(chunks.len() > 20, "{} chunks", chunks.len());
        let n = chunks.len();
        let boardings = [
            (0, "illegal memory", 400),
            (1, "ILLEGAL MEMORY", 2),
            (n / 2, "illegal memory", 3),
            (n / 2, "tokens/s 2", 400),
            (n / 2 + 1, "step 2999 ", 400),
            (n - 1, "tokens/S 1", 5),
            (n + 3, "nowhere", 400),
            (2 * n + 5, "loss=0.1", 7),
            (2 * n + 5, "", 0),
        ];
        let answers = ride(&chunks, &boardings);
        for ((step, text, limit), got) in boardings.iter().zip(answers) {
            let want = from_the_start(&chunks, text, *limit);
            assert!(
                want.matched > 0 || *text == "nowhere",
                "{text:?} finds nothing"
            );
            assert_eq!(
                got, want,
                "{text:?} (limit {limit}) boarding at step {step}"
            );
        }
    }
}
