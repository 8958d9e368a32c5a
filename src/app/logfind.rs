//! Find in a stored log (`?grep=` on the report page) without reading it line by line: each
//! chunk is inflated in blocks, a block's complete lines are lowercased in one pass and searched
//! with one `memmem` scan, and only a hit costs line work (its line found around it, copied while
//! the page still has room, counted after). Lines are numbered only while hits are still shown.
//! Memory stays near two blocks plus the lines shown, whatever the log's size or the length of
//! its lines. The scan is pure CPU work; [`FindCache`] lets concurrent readers of one find
//! share it.

use std::future::Future;
use std::io::{self, Read};
use std::sync::{Arc, Mutex};

use flate2::read::GzDecoder;
use memchr::memmem::Finder;
use tokio::sync::OnceCell;

use crate::storage::reports::LogChunk;

/// Bytes inflated at a time: as much as a page view's reader holds, so that concurrent finds
/// hold about what concurrent page views hold (with 256 KiB blocks, 16 finds grew the server
/// by 25 MiB against 5 MiB for 16 page views).
const BLOCK: usize = 64 << 10;

/// What a find asks for: the text (ASCII letters in any case), how many lines to keep and how
/// much of each line is searched and kept.
pub struct Needle {
    finder: Finder<'static>,
    len: usize,
    /// Whether the text has ASCII letters (else blocks are searched as they are).
    folds: bool,
    /// A text with a newline is in no line.
    impossible: bool,
    /// Lines kept.
    pub limit: usize,
    /// The part of each line searched and kept.
    pub max_line_bytes: usize,
}

impl Needle {
    /// A find for `text` keeping the first `limit` lines, each cut to `max_line_bytes`.
    #[must_use]
    pub fn new(text: &str, limit: usize, max_line_bytes: usize) -> Needle {
        let lower = text.to_ascii_lowercase().into_bytes();
        Needle {
            len: lower.len(),
            folds: lower.iter().any(u8::is_ascii_lowercase),
            impossible: lower.contains(&b'\n') || lower.len() > max_line_bytes,
            finder: Finder::new(&lower).into_owned(),
            limit,
            max_line_bytes,
        }
    }
}

/// Lines found: the first ones, and how many matched in all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Found {
    /// (1-based number, text cut to the asked length), in log order.
    pub lines: Vec<(usize, Vec<u8>)>,
    /// Lines that matched, including those past the limit.
    pub matched: usize,
}

impl Found {
    /// Memory the kept lines take, roughly.
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.lines
            .iter()
            .map(|(_, text)| text.len() + std::mem::size_of::<(usize, Vec<u8>)>())
            .sum()
    }
}

/// Adds the lines of `chunk` that contain `needle` to `found`.
pub fn find_in_chunk(chunk: &LogChunk, needle: &Needle, found: &mut Found) -> io::Result<()> {
    if needle.impossible {
        return Ok(());
    }
    let mut scan = Scan {
        needle,
        found,
        number: usize::try_from(chunk.first_line).unwrap_or(usize::MAX),
        lower: Vec::new(),
    };
    let mut gz = GzDecoder::new(&chunk.data[..]);
    // `data` holds the start of an unfinished line, then what was inflated after it.
    let mut data: Vec<u8> = Vec::with_capacity(BLOCK + needle.max_line_bytes);
    // Inside a line longer than `max_line_bytes` whose head was already searched.
    let mut skipping = false;
    loop {
        let kept = data.len();
        data.resize(kept + BLOCK, 0);
        let n = gz.read(&mut data[kept..])?;
        data.truncate(kept + n);
        let eof = n == 0;
        if skipping {
            match memchr::memchr(b'\n', &data) {
                Some(nl) => {
                    data.drain(..=nl);
                    scan.number += 1;
                    skipping = false;
                }
                None => {
                    data.clear();
                    if eof {
                        return Ok(());
                    }
                    continue;
                }
            }
        }
        let complete = if eof {
            data.len()
        } else {
            memchr::memrchr(b'\n', &data).map_or(0, |nl| nl + 1)
        };
        scan.lines(&data[..complete]);
        data.drain(..complete);
        if eof {
            return Ok(());
        }
        if data.len() > needle.max_line_bytes {
            // Only a line's head is searched: judge it now and drop the rest as it comes.
            scan.line(&data[..needle.max_line_bytes]);
            data.clear();
            skipping = true;
        }
    }
}

/// The state of one chunk's search.
struct Scan<'a> {
    needle: &'a Needle,
    found: &'a mut Found,
    /// The number of the first line not yet passed.
    number: usize,
    lower: Vec<u8>,
}

impl Scan<'_> {
    /// Searches `text`, whole lines (the last one may lack its newline at the end of a chunk).
    fn lines(&mut self, text: &[u8]) {
        let hay: &[u8] = if self.needle.folds {
            self.lower.clear();
            self.lower.extend_from_slice(text);
            self.lower.make_ascii_lowercase();
            &self.lower
        } else {
            text
        };
        let (max, len) = (self.needle.max_line_bytes, self.needle.len);
        let mut pos = 0;
        while pos < text.len() {
            let Some(at) = self.needle.finder.find(&hay[pos..]).map(|i| pos + i) else {
                break;
            };
            let start = memchr::memrchr(b'\n', &text[pos..at]).map_or(pos, |i| pos + i + 1);
            let end = memchr::memchr(b'\n', &text[at..]).map_or(text.len(), |i| at + i);
            let showing = self.found.lines.len() < self.needle.limit;
            if showing {
                self.number += memchr::memchr_iter(b'\n', &text[pos..start]).count();
            }
            // The first match in a line is the only one that can lie within its head.
            if at + len <= start + max {
                self.found.matched += 1;
                if showing {
                    let cut = end.min(start + max);
                    self.found
                        .lines
                        .push((self.number, text[start..cut].to_vec()));
                }
            }
            self.number += 1;
            pos = end + 1;
        }
        if self.found.lines.len() < self.needle.limit && pos < text.len() {
            self.number += memchr::memchr_iter(b'\n', &text[pos..]).count();
        }
    }

    /// Searches the head of one long line.
    fn line(&mut self, head: &[u8]) {
        let hit = if self.needle.folds {
            self.needle
                .finder
                .find(&head.to_ascii_lowercase())
                .is_some()
        } else {
            self.needle.finder.find(head).is_some()
        };
        if hit {
            self.found.matched += 1;
            if self.found.lines.len() < self.needle.limit {
                self.found.lines.push((self.number, head.to_vec()));
            }
        }
    }
}

/// Finds in flight and recently answered, shared by one server's requests: concurrent finds
/// of the same text in the same report share one scan, and a find asked again soon (readers
/// following one search hit, a reload) is answered from memory. A stored log never changes
/// (retention removes it whole, and the page checks that first), so an answer stays true.
/// At most [`CACHE_ENTRIES`] answers of at most [`CACHE_BYTES`] together are kept: far less
/// than the 128 MiB a log can inflate to.
#[derive(Clone, Debug, Default)]
pub struct FindCache(Arc<Mutex<Vec<Entry>>>);

/// One find: (report, lowercased text, limit, line cut) and its answer once known.
type Entry = (Key, Arc<OnceCell<Arc<Found>>>);
type Key = (i64, String, usize, usize);

/// Answers kept.
const CACHE_ENTRIES: usize = 32;
/// Bytes of kept lines at most.
const CACHE_BYTES: usize = 8 << 20;

impl FindCache {
    /// The answer for `key`, computed by `scan` unless it is known or being computed (then
    /// this waits for it). A failed scan is not kept: the next asker scans again.
    pub async fn get_or_scan<F, Fut, E>(&self, key: Key, scan: F) -> Result<Arc<Found>, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Found, E>>,
    {
        let cell = {
            let mut entries = self.lock();
            let cell = match entries.iter().position(|(k, _)| *k == key) {
                // The most recently used answers are at the end.
                Some(at) => entries.remove(at).1,
                None => Arc::default(),
            };
            entries.push((key, Arc::clone(&cell)));
            cell
        };
        let found = cell
            .get_or_try_init(|| async { scan().await.map(Arc::new) })
            .await?
            .clone();
        self.trim();
        Ok(found)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        // A panic elsewhere cannot leave the list inconsistent: every change is one call.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Drops the least recently used answers past the caps (finds still in flight stay).
    fn trim(&self) {
        let mut entries = self.lock();
        let size = |e: &Entry| e.1.get().map_or(0, |f| f.bytes());
        let mut bytes: usize = entries.iter().map(size).sum();
        let mut at = 0;
        while (entries.len() > CACHE_ENTRIES || bytes > CACHE_BYTES) && at < entries.len() {
            if entries[at].1.initialized() {
                bytes -= size(&entries[at]);
                entries.remove(at);
            } else {
                at += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::logstore::ChunkWriter;

    fn chunked(log: &[u8], chunk_bytes: usize) -> Vec<LogChunk> {
        let mut w = ChunkWriter::with_chunk_bytes(chunk_bytes);
        for piece in log.chunks(977) {
            w.write_all(piece).expect("write");
        }
        w.finish().expect("finish")
    }

    /// What a find must answer: each line cut to `max`, searched in ASCII lower case.
    fn reference(log: &[u8], text: &str, limit: usize, max: usize) -> Found {
        let needle = text.to_ascii_lowercase().into_bytes();
        let mut found = Found::default();
        let body = log.strip_suffix(b"\n").unwrap_or(log);
        if log.is_empty() {
            return found;
        }
        for (i, line) in body.split(|&b| b == b'\n').enumerate() {
            let cut = &line[..line.len().min(max)];
            let hit = !needle.contains(&b'\n')
                && memchr::memmem::find(&cut.to_ascii_lowercase(), &needle).is_some();
            if hit {
                found.matched += 1;
                if found.lines.len() < limit {
                    found.lines.push((i + 1, cut.to_vec()));
                }
            }
        }
        found
    }

    fn find(chunks: &[LogChunk], text: &str, limit: usize, max: usize) -> Found {
        let needle = Needle::new(text, limit, max);
        let mut found = Found::default();
        for chunk in chunks {
            find_in_chunk(chunk, &needle, &mut found).expect("gzip");
        }
        found
    }

    fn sample_log() -> Vec<u8> {
        let mut log = Vec::new();
        for i in 1..=8_000 {
            match i {
                777 => {
                    log.extend_from_slice(b"RuntimeError: CUDA error: an Illegal Memory Access\n")
                }
                // Lines far longer than a block and than the searched head.
                5000 | 5001 => {
                    log.extend_from_slice(&vec![b'x'; 300_000]);
                    log.extend_from_slice(b" illegal memory access at the end\n");
                }
                6000 => {
                    log.extend_from_slice(b"illegal memory access first, then ");
                    log.extend_from_slice(&vec![b'y'; 600_000]);
                    log.push(b'\n');
                }
                _ => log.extend_from_slice(
                    format!("step {i} loss=0.{i} LOSS {}\r\n", i % 7).as_bytes(),
                ),
            }
        }
        log.extend_from_slice(b"last line without newline: illegal memory access");
        log
    }

    #[test]
    fn a_find_answers_what_a_line_by_line_search_would() {
        let log = sample_log();
        for chunk_bytes in [4096, 100_000, 1 << 20] {
            let chunks = chunked(&log, chunk_bytes);
            for (text, limit, max) in [
                ("illegal memory access", 400, 16 << 10),
                ("ILLEGAL MEMORY", 2, 16 << 10),
                ("illegal memory access", 400, 300_010),
                ("illegal memory access", 400, 300_030),
                ("loss 3", 400, 16 << 10),
                ("loss 3", 10, 16 << 10),
                ("step 1", 0, 16 << 10),
                ("step 7999 ", 5, 16 << 10),
                ("=0.1\r", 50, 16 << 10),
                ("42", 400, 12),
                ("nowhere", 400, 16 << 10),
                ("yyyy", 400, 16 << 10),
                ("0 l", 400, 16 << 10),
                ("a\nb", 400, 16 << 10),
            ] {
                assert_eq!(
                    find(&chunks, text, limit, max),
                    reference(&log, text, limit, max),
                    "{text:?} limit {limit} max {max} chunks of {chunk_bytes}"
                );
            }
        }
    }

    #[tokio::test]
    async fn concurrent_finds_of_the_same_text_share_one_scan() {
        let cache = FindCache::default();
        let scans = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Notify::new());
        let key = (7, "loss".to_owned(), 400, 100);
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (cache, scans, gate, key) =
                (cache.clone(), scans.clone(), gate.clone(), key.clone());
            tasks.push(tokio::spawn(async move {
                cache
                    .get_or_scan(key, || async move {
                        scans.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        gate.notified().await;
                        Ok::<_, ()>(Found {
                            lines: Vec::new(),
                            matched: 3,
                        })
                    })
                    .await
            }));
        }
        // Let every task reach the cache, then let the one scan finish.
        while cache.lock().len() != 1 || Arc::strong_count(&cache.lock()[0].1) < 9 {
            tokio::task::yield_now().await;
        }
        gate.notify_one();
        for t in tasks {
            assert_eq!(t.await.expect("task").expect("found").matched, 3);
        }
        assert_eq!(scans.load(std::sync::atomic::Ordering::SeqCst), 1);
        // Another text is another scan; a failed scan is not kept.
        let other = cache
            .get_or_scan((7, "x".into(), 400, 100), || async {
                Err::<Found, _>("db down")
            })
            .await;
        assert_eq!(other, Err("db down"));
        let again = cache
            .get_or_scan((7, "x".into(), 400, 100), || async {
                Ok::<_, ()>(Found::default())
            })
            .await;
        assert_eq!(again.map(|f| f.matched), Ok(0));
    }
}
