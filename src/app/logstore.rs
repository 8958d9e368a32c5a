//! How a stored log is laid out, so that reading any part of it costs what that part costs: the
//! scrubbed log is cut after the first newline past every [`CHUNK_BYTES`] and each chunk is
//! gzip-compressed on its own, with its first line number and line count beside it (the line
//! index). A report page of 400 lines decompresses the one or two chunks that hold them, the raw
//! download streams chunk by chunk, and the whole log (for reclassification) is the chunks'
//! multi-member gzip stream. Pure CPU work: no database, no async.

use std::io::{self, Read, Write};

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;

use crate::storage::reports::LogChunk;

/// Uncompressed bytes per chunk before it is cut at the next newline. Large enough that gzip
/// compresses well and a 100 MB log is ~100 rows; small enough that a page view decompresses
/// about a megabyte.
pub const CHUNK_BYTES: usize = 1 << 20;

/// Cuts a log, written in pieces of any size, into compressed chunks of whole lines.
pub struct ChunkWriter {
    chunk_bytes: usize,
    done: Vec<LogChunk>,
    gz: GzEncoder<Vec<u8>>,
    /// Uncompressed bytes in the current chunk.
    raw: usize,
    /// Newlines in the current chunk.
    newlines: usize,
    /// Number of the current chunk's first line.
    first_line: usize,
    /// Whether the current chunk's last byte is a newline.
    ends_nl: bool,
}

impl Default for ChunkWriter {
    fn default() -> Self {
        ChunkWriter::with_chunk_bytes(CHUNK_BYTES)
    }
}

impl ChunkWriter {
    /// A writer that cuts after the first newline past every `chunk_bytes` (tests use small
    /// ones).
    #[must_use]
    pub fn with_chunk_bytes(chunk_bytes: usize) -> ChunkWriter {
        ChunkWriter {
            chunk_bytes: chunk_bytes.max(1),
            done: Vec::new(),
            gz: GzEncoder::new(Vec::new(), Compression::fast()),
            raw: 0,
            newlines: 0,
            first_line: 1,
            ends_nl: false,
        }
    }

    /// Appends `data` to the log.
    pub fn write_all(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let room = self.chunk_bytes.saturating_sub(self.raw);
            // The chunk ends at the first newline at or past its size.
            let from = room.saturating_sub(1).min(data.len());
            let Some(nl) = memchr::memchr(b'\n', &data[from..]).map(|i| from + i) else {
                return self.append(data);
            };
            self.append(&data[..=nl])?;
            self.cut()?;
            data = &data[nl + 1..];
        }
        Ok(())
    }

    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.gz.write_all(data)?;
        self.raw += data.len();
        self.newlines += memchr::memchr_iter(b'\n', data).count();
        if let Some(&last) = data.last() {
            self.ends_nl = last == b'\n';
        }
        Ok(())
    }

    /// Ends the current chunk (a final line without a newline counts as a line).
    fn cut(&mut self) -> io::Result<()> {
        if self.raw == 0 {
            return Ok(());
        }
        let gz = std::mem::replace(
            &mut self.gz,
            GzEncoder::new(Vec::new(), Compression::fast()),
        );
        let data = gz.finish()?;
        // Only the last chunk can end without a newline: `write_all` cuts after one.
        let lines = self.newlines + usize::from(!self.ends_nl);
        self.done.push(LogChunk {
            seq: i32::try_from(self.done.len()).unwrap_or(i32::MAX),
            first_line: as_i64(self.first_line),
            lines: as_i64(lines),
            data,
        });
        self.first_line += lines;
        self.raw = 0;
        self.newlines = 0;
        Ok(())
    }

    /// The chunks of the whole log.
    pub fn finish(mut self) -> io::Result<Vec<LogChunk>> {
        self.cut()?;
        Ok(self.done)
    }

    /// Lines written so far.
    #[must_use]
    pub fn lines(&self) -> usize {
        self.first_line - 1 + self.newlines + usize::from(self.raw > 0 && !self.ends_nl)
    }
}

fn as_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Lines `first..=last` (1-based, each followed by `\n`) out of `chunks`, which must be
/// consecutive and hold them, each cut to its first `max_line_bytes` bytes. Decompresses only
/// those chunks, as a stream: memory stays near `(last - first + 1) * max_line_bytes` however
/// long the lines are.
pub fn lines(
    chunks: &[LogChunk],
    first: usize,
    last: usize,
    max_line_bytes: usize,
) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    for chunk in chunks {
        let mut number = usize::try_from(chunk.first_line).unwrap_or(usize::MAX);
        // Bytes of the current line kept so far.
        let mut kept = 0;
        let mut open = false;
        let mut gz = GzDecoder::new(&chunk.data[..]);
        loop {
            let n = gz.read(&mut buf)?;
            if n == 0 {
                break;
            }
            for piece in buf[..n].split_inclusive(|&b| b == b'\n') {
                if number > last {
                    return Ok(out);
                }
                let (text, ends) = match piece.strip_suffix(b"\n") {
                    Some(text) => (text, true),
                    None => (piece, false),
                };
                if number >= first {
                    let take = text.len().min(max_line_bytes - kept.min(max_line_bytes));
                    out.extend_from_slice(&text[..take]);
                    kept += take;
                    open = true;
                    if ends {
                        out.push(b'\n');
                    }
                }
                if ends {
                    number += 1;
                    kept = 0;
                    open = false;
                }
            }
        }
        if open {
            out.push(b'\n'); // The log's last line, without its own newline.
        }
    }
    Ok(out)
}

/// Calls `on_line(number, text)` for every line of `chunk` in order (1-based numbers, text
/// without its `\n` and cut to its first `max_line_bytes` bytes), decompressing as it goes;
/// stops early when `on_line` returns `false`. Memory stays near `max_line_bytes`.
pub fn each_line(
    chunk: &LogChunk,
    max_line_bytes: usize,
    mut on_line: impl FnMut(usize, &[u8]) -> bool,
) -> io::Result<()> {
    let mut number = usize::try_from(chunk.first_line).unwrap_or(usize::MAX);
    let mut line: Vec<u8> = Vec::new();
    let mut open = false;
    let mut buf = vec![0u8; 64 << 10];
    let mut gz = GzDecoder::new(&chunk.data[..]);
    loop {
        let n = gz.read(&mut buf)?;
        if n == 0 {
            break;
        }
        for piece in buf[..n].split_inclusive(|&b| b == b'\n') {
            let (text, ends) = match piece.strip_suffix(b"\n") {
                Some(text) => (text, true),
                None => (piece, false),
            };
            let room = max_line_bytes.saturating_sub(line.len());
            line.extend_from_slice(&text[..text.len().min(room)]);
            open = true;
            if ends {
                if !on_line(number, &line) {
                    return Ok(());
                }
                number += 1;
                line.clear();
                open = false;
            }
        }
    }
    if open {
        on_line(number, &line);
    }
    Ok(())
}

/// The uncompressed bytes of one chunk.
pub fn decompress(chunk: &LogChunk) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    GzDecoder::new(&chunk.data[..]).read_to_end(&mut out)?;
    Ok(out)
}

/// The whole log of `chunks`, decompressed as it is read.
pub fn reader(chunks: &[LogChunk]) -> impl Read + '_ {
    flate2::read::MultiGzDecoder::new(ConcatReader {
        chunks,
        at: 0,
        offset: 0,
    })
}

/// The chunks' compressed bytes one after another.
struct ConcatReader<'a> {
    chunks: &'a [LogChunk],
    at: usize,
    offset: usize,
}

impl Read for ConcatReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while let Some(chunk) = self.chunks.get(self.at) {
            let rest = &chunk.data[self.offset..];
            if rest.is_empty() {
                self.at += 1;
                self.offset = 0;
                continue;
            }
            let n = rest.len().min(buf.len());
            buf[..n].copy_from_slice(&rest[..n]);
            self.offset += n;
            return Ok(n);
        }
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunked(log: &[u8], chunk_bytes: usize, piece: usize) -> Vec<LogChunk> {
        let mut w = ChunkWriter::with_chunk_bytes(chunk_bytes);
        for p in log.chunks(piece.max(1)) {
            w.write_all(p).expect("write");
        }
        w.finish().expect("finish")
    }

    fn numbered(n: usize) -> Vec<u8> {
        (1..=n)
            .map(|i| format!("line {i}\n"))
            .collect::<String>()
            .into_bytes()
    }

    #[test]
    fn chunks_hold_whole_lines_and_index_them() {
        let log = numbered(1000);
        for piece in [1, 7, 100, 1 << 20] {
            let chunks = chunked(&log, 512, piece);
            assert!(chunks.len() > 10, "{}", chunks.len());
            let mut next = 1;
            for (i, c) in chunks.iter().enumerate() {
                assert_eq!(c.seq as usize, i);
                assert_eq!(c.first_line, next);
                let text = decompress(c).expect("gzip");
                assert!(text.ends_with(b"\n"));
                assert_eq!(c.lines as usize, memchr::memchr_iter(b'\n', &text).count());
                assert!(text.starts_with(format!("line {next}\n").as_bytes()));
                next += c.lines;
            }
            assert_eq!(next, 1001);
            let mut whole = Vec::new();
            reader(&chunks).read_to_end(&mut whole).expect("read");
            assert_eq!(whole, log, "piece {piece}");
        }
    }

    #[test]
    fn a_final_line_without_newline_counts_and_an_empty_log_has_no_chunk() {
        let mut w = ChunkWriter::with_chunk_bytes(8);
        w.write_all(b"aaaaaaaaaa\nbb").expect("write");
        assert_eq!(w.lines(), 2);
        let chunks = w.finish().expect("finish");
        assert_eq!(chunks.len(), 2);
        assert_eq!((chunks[1].first_line, chunks[1].lines), (2, 1));
        assert!(ChunkWriter::default().finish().expect("finish").is_empty());
        // A line longer than a chunk stays whole in one chunk.
        let long = [vec![b'x'; 5000], b"\nshort\n".to_vec()].concat();
        let chunks = chunked(&long, 64, 300);
        assert_eq!(decompress(&chunks[0]).expect("gzip").len(), 5001);
        assert_eq!((chunks[1].first_line, chunks[1].lines), (2, 1));
    }

    #[test]
    fn a_line_range_reads_only_the_chunks_given() {
        let log = numbered(1000);
        let chunks = chunked(&log, 512, 4096);
        let holding = |first: i64, last: i64| -> Vec<LogChunk> {
            chunks
                .iter()
                .filter(|c| c.first_line <= last && c.first_line + c.lines > first)
                .cloned()
                .collect()
        };
        for (first, last) in [(1, 1), (1, 400), (37, 436), (601, 1000), (999, 1000)] {
            let got =
                lines(&holding(first, last), first as usize, last as usize, 100).expect("lines");
            let want: String = (first..=last).map(|i| format!("line {i}\n")).collect();
            assert_eq!(
                String::from_utf8(got).expect("utf8"),
                want,
                "{first}..={last}"
            );
        }
        // Past the end: what there is.
        let got = lines(&holding(990, 1400), 990, 1400, 100).expect("lines");
        assert_eq!(memchr::memchr_iter(b'\n', &got).count(), 11);
    }

    #[test]
    fn each_line_numbers_cuts_and_stops_where_asked() {
        let log = b"alpha\nbravo bravo bravo\ncharlie\ndelta";
        let chunks = chunked(log, 12, 5);
        assert!(chunks.len() > 1, "more than one chunk");
        let mut seen = Vec::new();
        for chunk in &chunks {
            each_line(chunk, 5, |n, text| {
                seen.push((n, String::from_utf8_lossy(text).into_owned()));
                true
            })
            .expect("gzip");
        }
        assert_eq!(
            seen,
            [(1, "alpha"), (2, "bravo"), (3, "charl"), (4, "delta")]
                .map(|(n, t)| (n, t.to_owned()))
        );
        let mut first = Vec::new();
        each_line(&chunks[0], 100, |n, _| {
            first.push(n);
            false
        })
        .expect("gzip");
        assert_eq!(first, [1]);
    }

    #[test]
    fn long_lines_are_cut_and_an_open_last_line_is_ended() {
        let log = [b"short\n".as_slice(), &vec![b'x'; 300_000], b"\nlast"].concat();
        let chunks = chunked(&log, 1 << 20, 1000);
        let got = lines(&chunks, 1, 3, 10).expect("lines");
        assert_eq!(got, b"short\nxxxxxxxxxx\nlast\n");
        assert_eq!(lines(&chunks, 2, 2, 4).expect("lines"), b"xxxx\n");
    }
}
