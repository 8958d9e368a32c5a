//! Find in a stored log (`?grep=` on the report page) without reading it line by line: each
//! chunk is inflated in blocks, a block's complete lines are lowercased in one pass and searched
//! with one `memmem` scan per needle, and only a hit costs line work (its line found around it,
//! copied while the page still has room, counted after). Lines are numbered only while hits are
//! still shown. Memory stays near two blocks plus the lines shown, whatever the log's size or
//! the length of its lines. The scan is pure CPU work; [`FindCache`] answers repeated finds
//! from memory and lets the finds running at once in one log share one reading of it
//! ([`pass`]), so that their cost is one inflate plus one `memmem` each, not one inflate each.

mod cache;
mod pass;

use std::io::{self, Read};

use flate2::read::GzDecoder;
use memchr::memmem::Finder;

pub use cache::FindCache;

use crate::storage::reports::LogChunk;

/// Bytes inflated at a time: as much as a page view's reader holds, so that concurrent finds
/// hold about what concurrent page views hold (with 256 KiB blocks, 16 finds grew the server
/// by 25 MiB against 5 MiB for 16 page views).
const BLOCK: usize = 64 << 10;

/// What a find asks for: the text (ASCII letters in any case), how many lines to keep and how
/// much of each line is searched and kept.
pub struct LogNeedle {
    finder: Finder<'static>,
    len: usize,
    /// A text with a newline is in no line.
    impossible: bool,
    /// Lines kept.
    pub limit: usize,
    /// The part of each line searched and kept.
    pub max_line_bytes: usize,
}

impl LogNeedle {
    /// A find for `text` keeping the first `limit` lines, each cut to `max_line_bytes`.
    #[must_use]
    pub fn new(text: &str, limit: usize, max_line_bytes: usize) -> LogNeedle {
        let lower = text.to_ascii_lowercase().into_bytes();
        LogNeedle {
            len: lower.len(),
            impossible: lower.contains(&b'\n') || lower.len() > max_line_bytes,
            finder: Finder::new(&lower).into_owned(),
            limit,
            max_line_bytes,
        }
    }
}

/// Lines found: the first ones, and how many matched in all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FoundLines {
    /// (1-based number, text cut to the asked length), in log order.
    pub lines: Vec<(usize, Vec<u8>)>,
    /// Lines that matched, including those past the limit.
    pub matched: usize,
}

impl FoundLines {
    /// Memory the kept lines take, roughly.
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.lines
            .iter()
            .map(|(_, text)| text.len() + std::mem::size_of::<(usize, Vec<u8>)>())
            .sum()
    }
}

/// One find's share of a chunk's reading: its needle and what it has found so far.
pub struct LogSearch<'a> {
    pub needle: &'a LogNeedle,
    pub found: &'a mut FoundLines,
}

/// Adds the lines of `chunk` that contain `needle` to `found`.
pub fn find_in_chunk(
    chunk: &LogChunk,
    needle: &LogNeedle,
    found: &mut FoundLines,
) -> io::Result<()> {
    let max = needle.max_line_bytes;
    find_many_in_chunk(chunk, max, &mut [LogSearch { needle, found }])
}

/// Reads `chunk` once for several finds: each block is inflated and lowercased once and each
/// needle searched in it. Every needle must keep `max_line_bytes` of a line (the long-line
/// handling is shared).
pub fn find_many_in_chunk(
    chunk: &LogChunk,
    max_line_bytes: usize,
    searches: &mut [LogSearch<'_>],
) -> io::Result<()> {
    let first = usize::try_from(chunk.first_line).unwrap_or(usize::MAX);
    let mut scans: Vec<Scan<'_, '_>> = searches
        .iter_mut()
        .filter(|s| !s.needle.impossible)
        .map(|s| {
            debug_assert_eq!(s.needle.max_line_bytes, max_line_bytes);
            Scan {
                needle: s.needle,
                found: &mut *s.found,
                number: first,
            }
        })
        .collect();
    if scans.is_empty() {
        return Ok(());
    }
    let mut lower = Vec::new();
    let mut gz = GzDecoder::new(&chunk.data[..]);
    // `data` holds the start of an unfinished line, then what was inflated after it.
    let mut data: Vec<u8> = Vec::with_capacity(BLOCK + max_line_bytes);
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
                    for scan in &mut scans {
                        scan.number += 1;
                    }
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
        // Lowercased once for every needle: a needle without letters matches the same places
        // in the lowercased text as in the original.
        lower.clear();
        lower.extend_from_slice(&data[..complete]);
        lower.make_ascii_lowercase();
        for scan in &mut scans {
            scan.lines(&data[..complete], &lower);
        }
        data.drain(..complete);
        if eof {
            return Ok(());
        }
        if data.len() > max_line_bytes {
            // Only a line's head is searched: judge it now and drop the rest as it comes.
            let head = &data[..max_line_bytes];
            let lower_head = head.to_ascii_lowercase();
            for scan in &mut scans {
                scan.line(head, &lower_head);
            }
            data.clear();
            skipping = true;
        }
    }
}

/// The state of one needle's search of one chunk.
struct Scan<'n, 'f> {
    needle: &'n LogNeedle,
    found: &'f mut FoundLines,
    /// The number of the first line not yet passed.
    number: usize,
}

impl Scan<'_, '_> {
    /// Searches `text`, whole lines (the last one may lack its newline at the end of a chunk),
    /// in `hay`, its lowercased copy.
    fn lines(&mut self, text: &[u8], hay: &[u8]) {
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

    /// Searches the head of one long line (`lower` is its lowercased copy).
    fn line(&mut self, head: &[u8], lower: &[u8]) {
        if self.needle.finder.find(lower).is_some() {
            self.found.matched += 1;
            if self.found.lines.len() < self.needle.limit {
                self.found.lines.push((self.number, head.to_vec()));
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
    fn reference(log: &[u8], text: &str, limit: usize, max: usize) -> FoundLines {
        let needle = text.to_ascii_lowercase().into_bytes();
        let mut found = FoundLines::default();
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

    fn find(chunks: &[LogChunk], text: &str, limit: usize, max: usize) -> FoundLines {
        let needle = LogNeedle::new(text, limit, max);
        let mut found = FoundLines::default();
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

    #[test]
    fn one_reading_for_several_finds_answers_what_each_alone_would() {
        let log = sample_log();
        let texts = [
            "illegal memory access",
            "LOSS 3",
            "step 7999 ",
            "=0.1\r",
            "yyyy",
            "a\nb",
            "42",
        ];
        for (chunk_bytes, max) in [(4096, 16 << 10), (100_000, 300_030), (1 << 20, 12)] {
            let chunks = chunked(&log, chunk_bytes);
            let needles: Vec<LogNeedle> =
                texts.iter().map(|t| LogNeedle::new(t, 50, max)).collect();
            let mut founds = vec![FoundLines::default(); texts.len()];
            for chunk in &chunks {
                let mut searches: Vec<LogSearch<'_>> = needles
                    .iter()
                    .zip(founds.iter_mut())
                    .map(|(needle, found)| LogSearch { needle, found })
                    .collect();
                find_many_in_chunk(chunk, max, &mut searches).expect("gzip");
            }
            for (text, found) in texts.iter().zip(founds) {
                assert_eq!(found, reference(&log, text, 50, max), "{text:?} max {max}");
            }
        }
    }
}
