//! The streaming pass: reads a log in bounded chunks, finds candidate lines with one combined
//! regex (its literal prefilter skips noise at memory speed), and hands each candidate line with
//! its original 1-based line number and two lines of lookahead (for console-wrapped messages) to
//! the classifier. Memory stays bounded whatever the input size.

use std::io::{self, Read};

use crate::ingest::MAX_MATCH_LINE;

/// Bytes read per step.
const CHUNK: usize = 1 << 20;
/// A line longer than this without a newline is processed in pieces.
const MAX_CARRY: usize = 4 * CHUNK;
/// Lines of lookahead kept after a candidate.
const LOOKAHEAD: usize = 2;

/// The candidate pass: literal-prefix regexes, each small enough for the SIMD (Teddy)
/// literal searcher; every chunk is searched with each, and the hits merged in line order.
#[derive(Debug)]
pub(super) struct Candidates {
    pub regexes: Vec<regex::bytes::Regex>,
    /// For each literal: the patterns (rules, then contexts) that start with it.
    pub owners: std::collections::HashMap<Vec<u8>, Vec<usize>>,
    /// Patterns without a literal prefix: always tried.
    pub ungated: Vec<usize>,
}

impl Candidates {
    /// The patterns that may match `line`: owners of every literal found in it, ascending.
    pub fn patterns_for(&self, line: &[u8]) -> Vec<usize> {
        let mut out = self.ungated.clone();
        for re in &self.regexes {
            for m in re.find_iter(line) {
                if let Some(idx) = self.owners.get(m.as_bytes()) {
                    out.extend_from_slice(idx);
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Whether any candidate regex matches.
    pub fn is_match(&self, hay: &[u8]) -> bool {
        self.regexes.iter().any(|r| r.is_match(hay))
    }

    /// Start offsets of candidate hits in `hay[..end]`, at most one per line, ascending.
    fn hits(&self, hay: &[u8], end: usize, out: &mut Vec<usize>) {
        out.clear();
        let hay = &hay[..end];
        for re in &self.regexes {
            let mut pos = 0;
            while pos < end {
                let Some(m) = re.find_at(hay, pos) else { break };
                out.push(m.start());
                pos = memchr::memchr(b'\n', &hay[m.start()..]).map_or(end, |p| m.start() + p + 1);
            }
        }
        if self.regexes.len() > 1 {
            out.sort_unstable();
        }
    }
}

/// One line a pattern may match, as raw bytes (ANSI already removed).
#[derive(Debug, Clone)]
pub(super) struct Candidate {
    /// 1-based line number in the input as given.
    pub line: usize,
    /// The line (capped around the hit for giant lines).
    pub raw: Vec<u8>,
    /// Up to two following lines, for messages a console wrapped.
    pub following: Vec<Vec<u8>>,
}

/// What a scan saw.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Scanned {
    pub bytes: u64,
    pub lines: u64,
}

/// Streams `reader` and calls `on_candidate` for each candidate line, in order. `first_chunk`
/// is called once with the first bytes read (for binary detection); returning `false` stops.
pub(super) fn scan<R: Read>(
    candidates: &Candidates,
    mut reader: R,
    mut first_chunk: impl FnMut(&[u8]) -> bool,
    mut on_candidate: impl FnMut(Candidate),
) -> io::Result<Scanned> {
    let mut buf: Vec<u8> = Vec::with_capacity(CHUNK + CHUNK / 4);
    let mut scratch: Vec<u8> = Vec::new();
    let mut hits: Vec<usize> = Vec::new();
    let mut line_base = 1usize; // line number of buf[0]
    let mut total = 0u64;
    let mut eof = false;
    let mut first = true;
    let mut last_byte = b'\n';
    while !eof {
        // Fill up to CHUNK new bytes.
        let target = buf.len() + CHUNK;
        while buf.len() < target {
            let start = buf.len();
            buf.resize(target, 0);
            match reader.read(&mut buf[start..]) {
                Ok(0) => {
                    buf.truncate(start);
                    eof = true;
                    break;
                }
                Ok(n) => {
                    buf.truncate(start + n);
                    total += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => buf.truncate(start),
                Err(e) => return Err(e),
            }
        }
        if let Some(&b) = buf.last() {
            last_byte = b;
        }
        if first {
            first = false;
            if !first_chunk(&buf) {
                return Ok(Scanned {
                    bytes: total,
                    lines: 0,
                });
            }
        }
        let hay: &[u8] = if memchr::memchr(0x1b, &buf).is_some() {
            scratch.clear();
            crate::ingest::normalize::strip_ansi_into(&buf, &mut scratch);
            &scratch
        } else {
            &buf
        };
        let end = if eof { hay.len() } else { cut_point(hay) };
        if end == 0 {
            continue; // no complete line yet: read more
        }
        candidates.hits(hay, end, &mut hits);
        find_candidates(&hits, hay, end, line_base, &mut on_candidate);
        let newlines = memchr::memchr_iter(b'\n', &hay[..end]).count();
        let raw_cut = if end == hay.len() {
            buf.len()
        } else {
            // The same number of newlines in the raw buffer: stripping never removes one.
            memchr::memchr_iter(b'\n', &buf)
                .nth(newlines - 1)
                .map_or(buf.len(), |p| p + 1)
        };
        line_base += newlines;
        buf.drain(..raw_cut);
    }
    Ok(Scanned {
        bytes: total,
        lines: (line_base - 1 + usize::from(last_byte != b'\n')) as u64,
    })
}

/// Where to stop processing a non-final buffer: after the newline that leaves `LOOKAHEAD` full
/// lines behind it, so every candidate sees its lookahead. With fewer lines, after the last
/// newline; with none, everything once the line is too long to carry, else nothing.
fn cut_point(hay: &[u8]) -> usize {
    let mut it = memchr::memrchr_iter(b'\n', hay);
    let positions: Vec<usize> = it.by_ref().take(LOOKAHEAD + 1).collect();
    match positions.len() {
        0 if hay.len() >= MAX_CARRY => hay.len(),
        0 => 0,
        n if n <= LOOKAHEAD => positions[n - 1] + 1,
        _ => positions[LOOKAHEAD] + 1,
    }
}

fn find_candidates(
    hits: &[usize],
    hay: &[u8],
    end: usize,
    line_base: usize,
    on_candidate: &mut impl FnMut(Candidate),
) {
    let mut pos = 0;
    let mut counted_to = 0;
    let mut line = line_base;
    for &at in hits {
        if at < pos {
            continue; // another hit on a line already handled
        }
        let start = memchr::memrchr(b'\n', &hay[..at]).map_or(0, |p| p + 1);
        let stop = memchr::memchr(b'\n', &hay[at..end]).map_or(end, |p| at + p);
        line += memchr::memchr_iter(b'\n', &hay[counted_to..start]).count();
        counted_to = start;
        let raw = window(&hay[start..stop], at - start);
        let mut following = Vec::with_capacity(LOOKAHEAD);
        let mut next = stop + 1;
        for _ in 0..LOOKAHEAD {
            if next >= hay.len() {
                break;
            }
            let e = memchr::memchr(b'\n', &hay[next..]).map_or(hay.len(), |p| next + p);
            following.push(hay[next..e.min(next + MAX_MATCH_LINE)].to_vec());
            next = e + 1;
        }
        on_candidate(Candidate {
            line,
            raw,
            following,
        });
        pos = stop + 1;
    }
}

/// The line, or for giant lines a window of `MAX_MATCH_LINE` bytes around the hit.
fn window(line: &[u8], hit: usize) -> Vec<u8> {
    if line.len() <= MAX_MATCH_LINE {
        return line.to_vec();
    }
    let from = hit.saturating_sub(MAX_MATCH_LINE / 4);
    let to = (from + MAX_MATCH_LINE).min(line.len());
    line[from..to].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(pattern: &str, input: &[u8]) -> (Vec<(usize, String, usize)>, u64) {
        let re = Candidates {
            regexes: vec![regex::bytes::Regex::new(pattern).expect("test pattern")],
            owners: Default::default(),
            ungated: Vec::new(),
        };
        let mut got = Vec::new();
        let scanned = scan(
            &re,
            input,
            |_| true,
            |c| {
                got.push((
                    c.line,
                    String::from_utf8_lossy(&c.raw).into_owned(),
                    c.following.len(),
                ))
            },
        )
        .expect("in-memory read");
        (got, scanned.lines)
    }

    #[test]
    fn candidates_carry_original_line_numbers() {
        let input = b"a\nboom one\nb\n\x1b[31mbo\x1b[0mom two\nc\nd\nboom three";
        let (got, lines) = run("boom", input);
        assert_eq!(
            got,
            vec![
                (2, "boom one".into(), 2),
                (4, "boom two".into(), 2),
                (7, "boom three".into(), 0)
            ]
        );
        assert_eq!(lines, 7);
    }

    #[test]
    fn line_numbers_survive_chunk_boundaries() {
        let mut input = Vec::new();
        let n = 300_000; // ~3.5 MB: several chunks
        for i in 1..=n {
            if i % 100_000 == 0 {
                input.extend_from_slice(format!("RuntimeError: hit {i}\n").as_bytes());
            } else {
                input.extend_from_slice(format!("noise line {i}\n").as_bytes());
            }
        }
        let (got, lines) = run("RuntimeError", &input);
        let at: Vec<usize> = got.iter().map(|g| g.0).collect();
        assert_eq!(at, vec![100_000, 200_000, 300_000]);
        assert_eq!(got[0].1, "RuntimeError: hit 100000");
        assert_eq!(lines, n as u64);
    }

    #[test]
    fn a_giant_line_is_windowed_not_held_whole() {
        let mut input = vec![b'x'; 10 * CHUNK];
        input.extend_from_slice(b" boom\nnext\n");
        let (got, lines) = run("boom", &input);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, 1);
        assert!(got[0].1.len() <= MAX_MATCH_LINE);
        assert!(got[0].1.ends_with("boom"));
        assert_eq!(lines, 2);
    }
}
