//! Finds in flight and recently answered, so that the same find asked by many readers (a
//! search hit's link followed by a team, a reload) costs one reading of the log, and different
//! finds in one log at once share one reading ([`super::pass`]).

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

use super::pass::Passes;
use super::{FoundLines, LogNeedle};
use crate::app::Error;
use crate::storage::Db;

/// Finds in flight and recently answered, shared by one server's requests: concurrent finds
/// of the same text in the same report share one scan, and a find asked again soon (readers
/// following one search hit, a reload) is answered from memory. A stored log never changes
/// (retention removes it whole, and the page checks that first), so an answer stays true.
/// At most [`CACHE_ENTRIES`] answers of at most [`CACHE_BYTES`] together are kept: far less
/// than the 128 MiB a log can inflate to.
#[derive(Clone, Debug, Default)]
pub struct FindCache {
    answers: Arc<Mutex<Vec<Entry>>>,
    passes: Passes,
}

/// One find: (report, lowercased text, limit, line cut) and its answer once known.
type Entry = (Key, Arc<OnceCell<Arc<FoundLines>>>);
type Key = (i64, String, usize, usize);

/// Answers kept.
const CACHE_ENTRIES: usize = 32;
/// Bytes of kept lines at most.
const CACHE_BYTES: usize = 8 << 20;

impl FindCache {
    /// The lines of report `id`'s stored log that contain `text` (ASCII letters in any case),
    /// the first `limit` of them cut to `max_line_bytes`, and how many match in all.
    /// `Error::NotFound` when the report has no stored log.
    pub async fn find(
        &self,
        db: &Db,
        id: i64,
        text: &str,
        limit: usize,
        max_line_bytes: usize,
    ) -> Result<Arc<FoundLines>, Error> {
        let text = text.to_ascii_lowercase();
        let needle = LogNeedle::new(&text, limit, max_line_bytes);
        self.get_or_scan((id, text, limit, max_line_bytes), || {
            self.passes.find(db, id, needle)
        })
        .await
    }

    /// The answer for `key`, computed by `scan` unless it is known or being computed (then
    /// this waits for it). A failed scan is not kept: the next asker scans again.
    async fn get_or_scan<F, Fut, E>(&self, key: Key, scan: F) -> Result<Arc<FoundLines>, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<FoundLines, E>>,
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
        self.answers
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
                        Ok::<_, ()>(FoundLines {
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
                Err::<FoundLines, _>("db down")
            })
            .await;
        assert_eq!(other, Err("db down"));
        let again = cache
            .get_or_scan((7, "x".into(), 400, 100), || async {
                Ok::<_, ()>(FoundLines::default())
            })
            .await;
        assert_eq!(again.map(|f| f.matched), Ok(0));
    }
}
