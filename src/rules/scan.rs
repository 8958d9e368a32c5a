//! The streaming pass: reads a log in bounded chunks, finds candidate lines with a few passes
//! over each whole chunk (a look-up per four bytes for the longer required literals, see
//! `grams`; SIMD literal searches for the others, see `keys`), and hands each candidate line with its original 1-based line number and two lines of lookahead (for
//! console-wrapped messages) to the classifier. Memory stays bounded whatever the input size.
//!
//! An input longer than one chunk is processed on two threads: the caller's thread reads every
//! chunk and queues it for a helper thread, processing it itself when the helper is behind; the
//! results are handed on in input order. Reading and the candidate callback stay on the caller's
//! thread, so neither the reader nor the callback need be `Send`.

mod chunks;
mod grams;
mod keys;
mod teddy;

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, Read};
use std::sync::mpsc;

use chunks::{Chunk, Chunks};

use super::literals::LiteralPlan;
use super::locator::{LINE_CAP, WINDOW};
use crate::ingest::MAX_MATCH_LINE;
use crate::ingest::normalize::strip_ansi_into;

/// New bytes read per chunk: small enough that a chunk stays in the core's cache across the
/// passes over it (strip, search, count), large enough that handing chunks between threads
/// costs little.
const CHUNK: usize = 512 << 10;
/// A line longer than this without a newline is processed in pieces.
const MAX_CARRY: usize = 4 << 20;
/// Chunks queued for the helper thread before this thread processes one itself.
const HELPER_QUEUE: usize = 2;
/// Most chunks processed but not yet handed on (bounds memory if the helper stalls).
const MAX_PENDING: usize = 16;
/// Lines of lookahead kept after a candidate.
const LOOKAHEAD: usize = 3;
/// Compiled size limit of one search regex.
const SEARCH_SIZE_LIMIT: usize = 256 << 20;
const ESC: u8 = 0x1b;

/// The candidate pass: finds the required literals (see `rules::literals`), the longer ones by
/// pieces (`grams`), the others by the fingerprints of keys (`keys`), and names the owners of
/// those found. An owner `K` is what the caller names a pattern by (the ruleset's `PatternId`);
/// the pass only sorts and hands them back.
#[derive(Debug)]
pub(super) struct Candidates<K> {
    /// The pass for the required literals long enough for it (see `grams`).
    grams: Option<grams::Grams>,
    /// Teddy's passes for the others.
    searches: Vec<Search>,
    /// The patterns without required literals, as one regex: its matches need no confirmation.
    whole: Option<regex::bytes::Regex>,
    required: Vec<Required<K>>,
    /// Patterns without required literals: always tried.
    ungated: Vec<K>,
}

/// One pass of Teddy over whole chunks, for up to 64 fingerprints of one length.
#[derive(Debug)]
struct Search {
    finder: Finder,
    /// For each fingerprint (by its index in the search), the required literals it starts a key
    /// of: (index in `required`, offset of the key in the literal).
    stands_for: Vec<Vec<(usize, usize)>>,
}

/// Teddy where the CPU has it, else an automaton of the same fingerprints.
#[derive(Debug)]
enum Finder {
    Teddy(aho_corasick::packed::Searcher),
    Automaton(aho_corasick::AhoCorasick),
}

impl Finder {
    fn new(fingerprints: &[&[u8]]) -> Result<Finder, String> {
        let mut teddy = aho_corasick::packed::Config::new().builder();
        if let Some(searcher) = teddy.extend(fingerprints).build() {
            return Ok(Finder::Teddy(searcher));
        }
        aho_corasick::AhoCorasick::builder()
            .match_kind(aho_corasick::MatchKind::LeftmostFirst)
            .build(fingerprints)
            .map(Finder::Automaton)
            .map_err(|e| e.to_string())
    }

    /// The first fingerprint found in `hay[from..]`: its index and where it starts. The
    /// fingerprints of one search have one length and differ, so at most one starts anywhere.
    fn find(&self, hay: &[u8], from: usize) -> Option<(usize, usize)> {
        let m = match self {
            Finder::Teddy(s) => s.find_in(hay, aho_corasick::Span::from(from..hay.len()))?,
            Finder::Automaton(a) => a.find(aho_corasick::Input::new(hay).range(from..))?,
        };
        Some((m.pattern().as_usize(), m.start()))
    }
}

/// A required literal and the patterns that require it.
#[derive(Debug)]
struct Required<K> {
    text: Box<[u8]>,
    owners: Vec<K>,
}

impl<K: Copy + Ord> Candidates<K> {
    /// The candidate pass for `patterns`, each with its owner and literal plan. A pattern
    /// without required literals joins a slow search of whole patterns (without capture names
    /// in `full`); `rules check` reports it, from the same plan.
    pub fn new(
        patterns: &[(K, &str, &LiteralPlan)],
        full: impl Fn(&str) -> String,
    ) -> Result<Candidates<K>, String> {
        let mut texts: Vec<String> = Vec::new();
        let mut owners: HashMap<String, Vec<K>> = HashMap::new();
        let (mut ungated, mut whole) = (Vec::new(), Vec::new());
        for &(owner, pattern, plan) in patterns {
            match plan.literals() {
                Some(lits) => {
                    for lit in lits {
                        owners.entry(lit.clone()).or_default().push(owner);
                        texts.push(lit.clone());
                    }
                }
                None => {
                    ungated.push(owner);
                    whole.push(format!("(?:{})", full(pattern)));
                }
            }
        }
        texts.sort();
        texts.dedup();
        let required: Vec<Required<K>> = texts
            .iter()
            .map(|t| Required {
                text: t.as_bytes().into(),
                owners: owners.remove(t).unwrap_or_default(),
            })
            .collect();
        let whole = match whole.is_empty() {
            true => None,
            false => Some(build(&whole)?),
        };
        // Every line with a required literal holds one that contains no other: the long ones
        // go to the gram pass, the short ones to Teddy; both confirm against every literal.
        let mut innermost = texts.clone();
        keys::minimal(&mut innermost);
        let (long, short): (Vec<&str>, Vec<&str>) = (innermost.iter())
            .map(String::as_str)
            .partition(|t| t.len() >= grams::MIN_LEN);
        Ok(Candidates {
            grams: grams::Grams::new(&long, &texts),
            searches: key_searches(&short, &texts)?,
            whole,
            required,
            ungated,
        })
    }

    /// The patterns that may match `line`: owners of every required literal in it, ascending.
    pub fn patterns_for(&self, line: &[u8]) -> Vec<K> {
        let mut out = self.ungated.clone();
        let mut confirm = |places: &[(usize, usize)], at: usize| {
            for &(ri, off) in places {
                let r = &self.required[ri];
                if at >= off && line[at - off..].starts_with(&r.text) {
                    out.extend_from_slice(&r.owners);
                }
            }
        };
        if let Some(grams) = &self.grams {
            let mut pos = 0;
            while let Some(at) = grams.next_place(line, pos) {
                confirm(grams.places_at(line, at), at);
                pos = at + grams::STEP;
            }
        }
        for search in &self.searches {
            // Every fingerprint occurrence, overlapping ones included.
            let mut pos = 0;
            while let Some((fp, at)) = search.finder.find(line, pos) {
                confirm(&search.stands_for[fp], at);
                pos = at + 1;
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Whether any pattern may match somewhere in `hay`.
    pub fn is_match(&self, hay: &[u8]) -> bool {
        let mut hits = Vec::new();
        self.hits(hay, hay.len(), &mut hits);
        !hits.is_empty()
    }

    /// Offsets of confirmed hits in `hay[..end]`, ascending, at most one per line and search.
    fn hits(&self, hay: &[u8], end: usize, out: &mut Vec<usize>) {
        out.clear();
        let hay = &hay[..end];
        let next_line = |at: usize| memchr::memchr(b'\n', &hay[at..]).map_or(end, |p| at + p + 1);
        if let Some(grams) = &self.grams {
            let mut pos = 0;
            while let Some(at) = grams.next_place(hay, pos) {
                if self.confirmed(grams.places_at(hay, at), hay, at) {
                    out.push(at);
                    pos = next_line(at).next_multiple_of(grams::STEP);
                } else {
                    pos = at + grams::STEP;
                }
            }
        }
        for search in &self.searches {
            let mut pos = 0;
            while let Some((fp, at)) = search.finder.find(hay, pos) {
                if self.confirmed(&search.stands_for[fp], hay, at) {
                    out.push(at);
                    pos = next_line(at);
                } else {
                    pos = at + 1;
                }
            }
        }
        if let Some(whole) = &self.whole {
            let mut pos = 0;
            while let Some(m) = whole.find_at(hay, pos) {
                out.push(m.start());
                pos = next_line(m.start());
            }
        }
        let passes = usize::from(self.grams.is_some()) + self.searches.len();
        if passes + usize::from(self.whole.is_some()) > 1 {
            out.sort_unstable();
        }
    }

    /// Whether the fingerprint found at `at` starts a key inside one of the required literals
    /// it stands for.
    fn confirmed(&self, stands_for: &[(usize, usize)], hay: &[u8], at: usize) -> bool {
        (stands_for.iter())
            .any(|&(ri, off)| at >= off && hay[at - off..].starts_with(&self.required[ri].text))
    }
}

/// The searches for the keys of `short` (required literals): each key's fingerprint in a search
/// as Teddy takes them, knowing where the key lies in which of `texts` (all required literals).
fn key_searches(short: &[&str], texts: &[String]) -> Result<Vec<Search>, String> {
    let keys = keys::keys(short);
    // Every place each key lies in each literal.
    let mut places: Vec<Vec<(usize, usize)>> = vec![Vec::new(); keys.len()];
    keys::occurrences(&keys, texts, |ri, key, at| places[key].push((ri, at)));
    // Keys that share a fingerprint share its entry.
    let mut fingerprints: Vec<&[u8]> = Vec::new();
    let mut stands_for: HashMap<&[u8], Vec<(usize, usize)>> = HashMap::new();
    for (key, places) in keys.iter().zip(places) {
        let fp = &key.as_bytes()[..key.len().min(teddy::FINGERPRINT)];
        let entry = stands_for.entry(fp).or_insert_with(|| {
            fingerprints.push(fp);
            Vec::new()
        });
        entry.extend(places);
    }
    let mut searches = Vec::new();
    for group in teddy::arrange(fingerprints) {
        searches.push(Search {
            finder: Finder::new(&group)?,
            stands_for: (group.iter())
                .map(|fp| stands_for.remove(fp).unwrap_or_default())
                .collect(),
        });
    }
    Ok(searches)
}

fn build(alternatives: &[String]) -> Result<regex::bytes::Regex, String> {
    regex::bytes::RegexBuilder::new(&alternatives.join("|"))
        .size_limit(SEARCH_SIZE_LIMIT)
        .dfa_size_limit(SEARCH_SIZE_LIMIT)
        .build()
        .map_err(|e| e.to_string())
}

/// A map keyed by a few bytes of text packed in a word, for the look-ups of building and running
/// the pass: the default hasher would cost more than the look-up it serves.
type WordMap<K, V> = HashMap<K, V, BuildHasherDefault<WordHasher>>;

/// Multiplicative hashing of a word (its high bits are the well mixed ones, and the hash
/// table takes both ends).
#[derive(Default)]
struct WordHasher(u64);

impl Hasher for WordHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0.rotate_left(8) ^ u64::from(b));
        }
    }

    fn write_u32(&mut self, word: u32) {
        self.write_u64(u64::from(word));
    }

    fn write_u64(&mut self, word: u64) {
        let mixed = word.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = mixed ^ (mixed >> 32);
    }
}

/// One line a pattern may match, as raw bytes (ANSI already removed).
#[derive(Debug, Clone)]
pub(super) struct CandidateLine {
    /// 1-based line number in the input as given.
    pub line: usize,
    /// The line (capped around the hit for giant lines).
    pub raw: Vec<u8>,
    /// Up to three following lines, for messages a console wrapped or printed over lines.
    pub following: Vec<Vec<u8>>,
}

/// What a scan saw.
#[derive(Debug, Default, Clone)]
pub(super) struct Scanned {
    pub bytes: u64,
    pub lines: u64,
    /// The last line that is not blank (ANSI removed, capped like a candidate), and its
    /// 1-based number: how a log with no failure line ends is its signature.
    pub last_line: Option<(usize, Vec<u8>)>,
    /// The last [`WINDOW`] lines (ANSI removed, each capped at [`LINE_CAP`] bytes) with their
    /// 1-based numbers: what the failure-line locator reads when no rule names a root cause.
    pub tail: VecDeque<(usize, Vec<u8>)>,
}

/// Streams `reader` and calls `on_candidate` for each candidate line, in order. `first_chunk`
/// is called once with the first bytes read (for binary detection); returning `false` stops.
pub(super) fn scan<R: Read, K: Copy + Ord + Sync>(
    candidates: &Candidates<K>,
    reader: R,
    mut first_chunk: impl FnMut(&[u8]) -> bool,
    mut on_candidate: impl FnMut(CandidateLine),
) -> io::Result<Scanned> {
    let mut chunks = Chunks::new(reader);
    let mut local = ScanBuffers::default();
    let mut chunk = Chunk::default();
    if !chunks.fill(&mut chunk)? {
        return Ok(chunks.scanned(0));
    }
    if !first_chunk(&chunk.data[..chunk.len]) {
        return Ok(Scanned {
            bytes: chunks.total,
            ..Scanned::default()
        });
    }
    let mut lines = 0;
    let mut last_line = None;
    let mut tail: VecDeque<(usize, Vec<u8>)> = VecDeque::new();
    let mut emit = |done: Processed, lines: &mut usize| {
        for mut c in done.candidates {
            c.line += *lines;
            on_candidate(c);
        }
        if let Some((n, text)) = done.last_line {
            last_line = Some((*lines + n, text));
        }
        for (n, text) in done.tail {
            if tail.len() == WINDOW {
                tail.pop_front();
            }
            tail.push_back((*lines + n, text));
        }
        *lines += done.newlines;
    };
    if chunks.eof {
        let done = local.process(candidates, &chunk);
        emit(done, &mut lines);
        return Ok(Scanned {
            last_line,
            tail,
            ..chunks.scanned(lines)
        });
    }
    let scanned = std::thread::scope(|scope| {
        // Chunks go to the helper while it keeps up; when its queue is full this thread
        // processes the chunk itself. Results are handed on in input order.
        let (to_helper, helper_in) = mpsc::sync_channel::<Chunk>(HELPER_QUEUE);
        let (helper_out, from_helper) = mpsc::channel::<(Chunk, Processed)>();
        scope.spawn(move || {
            let mut helper = ScanBuffers::default();
            for chunk in helper_in {
                let done = helper.process(candidates, &chunk);
                if helper_out.send((chunk, done)).is_err() {
                    break;
                }
            }
        });
        // In input order: `None` while the helper has the chunk.
        let mut pending: VecDeque<Option<Processed>> = VecDeque::new();
        let mut free: Vec<Chunk> = Vec::new();
        let mut next = Some(chunk);
        loop {
            if let Some(chunk) = next.take() {
                match to_helper.try_send(chunk) {
                    Ok(()) => pending.push_back(None),
                    Err(mpsc::TrySendError::Full(chunk)) => {
                        pending.push_back(Some(local.process(candidates, &chunk)));
                        free.push(chunk);
                    }
                    Err(mpsc::TrySendError::Disconnected(_)) => return Err(helper_gone()),
                }
            }
            let finished = chunks.eof;
            while let Some(front) = pending.front() {
                if front.is_none() {
                    let wait = finished || pending.len() > MAX_PENDING;
                    let back = if wait {
                        from_helper.recv().map_err(|_| helper_gone())?
                    } else {
                        match from_helper.try_recv() {
                            Ok(back) => back,
                            Err(mpsc::TryRecvError::Empty) => break,
                            Err(mpsc::TryRecvError::Disconnected) => return Err(helper_gone()),
                        }
                    };
                    free.push(back.0);
                    pending[0] = Some(back.1);
                }
                if let Some(done) = pending.pop_front().flatten() {
                    emit(done, &mut lines);
                }
            }
            if finished {
                return Ok(chunks.scanned(lines));
            }
            let mut chunk = free.pop().unwrap_or_default();
            if chunks.fill(&mut chunk)? {
                next = Some(chunk);
            }
        }
    })?;
    Ok(Scanned {
        last_line,
        tail,
        ..scanned
    })
}

fn helper_gone() -> io::Error {
    io::Error::other("the scan helper thread stopped")
}

/// What processing one chunk found.
struct Processed {
    /// Line numbers counted from the chunk's first line (1).
    candidates: Vec<CandidateLine>,
    /// Newlines in the processed part.
    newlines: usize,
    /// The part's last line that is not blank: its number from the chunk's first line (1)
    /// and its text.
    last_line: Option<(usize, Vec<u8>)>,
    /// The part's last lines, numbered from the chunk's first line (1), oldest first.
    tail: Vec<(usize, Vec<u8>)>,
}

/// Buffers reused from chunk to chunk by one thread.
#[derive(Default)]
struct ScanBuffers {
    stripped: Vec<u8>,
    hits: Vec<usize>,
}

impl ScanBuffers {
    fn process<K: Copy + Ord>(&mut self, candidates: &Candidates<K>, chunk: &Chunk) -> Processed {
        let raw = &chunk.data[..chunk.len];
        // ANSI sequences never span a newline, so the processed part and the lookahead are
        // stripped apart and `end` is where the processed part ends after stripping.
        let (hay, end) = if memchr::memchr(ESC, raw).is_some() {
            self.stripped.clear();
            strip_ansi_into(&raw[..chunk.cut], &mut self.stripped);
            let end = self.stripped.len();
            strip_ansi_into(&raw[chunk.cut..], &mut self.stripped);
            (&self.stripped[..], end)
        } else {
            (raw, chunk.cut)
        };
        candidates.hits(hay, end, &mut self.hits);
        let mut out = Vec::new();
        let newlines = find_candidates(&self.hits, hay, end, &mut |c| out.push(c));
        Processed {
            candidates: out,
            newlines,
            last_line: last_nonblank_line(&hay[..end], newlines),
            tail: tail_lines(&hay[..end], newlines),
        }
    }
}

/// Calls `on_candidate` for each line holding a hit (line numbers from 1 at `hay[0]`) and
/// returns the newlines in `hay[..end]`, counting each byte once.
fn find_candidates(
    hits: &[usize],
    hay: &[u8],
    end: usize,
    on_candidate: &mut impl FnMut(CandidateLine),
) -> usize {
    let mut pos = 0;
    let mut counted_to = 0;
    let mut line = 1;
    for &at in hits {
        if at < pos {
            continue; // another hit on a line already handled
        }
        let start =
            memchr::memrchr(b'\n', &hay[counted_to..at]).map_or(counted_to, |p| counted_to + p + 1);
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
        on_candidate(CandidateLine {
            line,
            raw,
            following,
        });
        pos = stop + 1;
    }
    line - 1 + memchr::memchr_iter(b'\n', &hay[counted_to..end]).count()
}

/// The last line of `hay` (which holds `newlines` newlines) that is more than whitespace,
/// numbered from 1 at `hay[0]`, and its text (the first `MAX_MATCH_LINE` bytes of a giant
/// line). Only the tail after that line is read.
fn last_nonblank_line(hay: &[u8], newlines: usize) -> Option<(usize, Vec<u8>)> {
    let mut stop = hay.len();
    loop {
        let start = memchr::memrchr(b'\n', &hay[..stop]).map_or(0, |p| p + 1);
        let line = &hay[start..stop];
        if line.iter().any(|b| !b.is_ascii_whitespace()) {
            let number = 1 + newlines - memchr::memchr_iter(b'\n', &hay[start..]).count();
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            return Some((number, line[..line.len().min(MAX_MATCH_LINE)].to_vec()));
        }
        if start == 0 {
            return None;
        }
        stop = start - 1;
    }
}

/// The last [`WINDOW`] lines of `hay` (which holds `newlines` newlines), numbered from 1 at
/// `hay[0]`, oldest first, each capped at [`LINE_CAP`] bytes. Only the tail is read.
fn tail_lines(hay: &[u8], newlines: usize) -> Vec<(usize, Vec<u8>)> {
    let mut out = Vec::new();
    if hay.is_empty() {
        return out;
    }
    let (mut stop, mut number) = match hay.last() {
        Some(b'\n') => (hay.len() - 1, newlines),
        _ => (hay.len(), newlines + 1),
    };
    while out.len() < WINDOW && number > 0 {
        let start = memchr::memrchr(b'\n', &hay[..stop]).map_or(0, |p| p + 1);
        let line = &hay[start..stop];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        out.push((number, line[..line.len().min(LINE_CAP)].to_vec()));
        if start == 0 {
            break;
        }
        number -= 1;
        stop = start - 1;
    }
    out.reverse();
    out
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

    /// The candidate pass over `patterns`, each owned by its index.
    fn candidates(patterns: &[&str]) -> Candidates<usize> {
        let plans: Vec<LiteralPlan> = patterns.iter().map(|p| LiteralPlan::of(p)).collect();
        let owned: Vec<(usize, &str, &LiteralPlan)> = (patterns.iter().copied().enumerate())
            .zip(&plans)
            .map(|((i, p), plan)| (i, p, plan))
            .collect();
        Candidates::new(&owned, str::to_owned).expect("test patterns")
    }

    fn run(pattern: &str, input: &[u8]) -> (Vec<(usize, String, usize)>, u64) {
        let cands = candidates(&[pattern]);
        let mut got = Vec::new();
        let scanned = scan(
            &cands,
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
    fn the_last_line_that_is_not_blank_is_found_across_chunk_boundaries() {
        let mut input = Vec::new();
        for i in 0..200_000 {
            input.extend_from_slice(format!("step {i}\n").as_bytes());
        }
        input.extend_from_slice(b"the end\r\n\n   \n\t\n");
        assert!(input.len() > 2 * CHUNK, "the input spans chunks");
        let scanned = scan(
            &candidates(&["never matches"]),
            &input[..],
            |_| true,
            |_| {},
        )
        .expect("scan");
        assert_eq!(scanned.last_line, Some((200_001, b"the end".to_vec())));
        let blank = scan(&candidates(&["x"]), &b"\n \n"[..], |_| true, |_| {}).expect("scan");
        assert_eq!(blank.last_line, None);
        let one = scan(&candidates(&["x"]), &b"only"[..], |_| true, |_| {}).expect("scan");
        assert_eq!(one.last_line, Some((1, b"only".to_vec())));
    }

    #[test]
    fn the_tail_window_holds_the_last_lines_across_chunk_boundaries() {
        let mut input = Vec::new();
        for i in 1..=200_000 {
            input.extend_from_slice(format!("step {i}\r\n").as_bytes());
        }
        input.extend_from_slice(b"boom\n\n");
        let scanned = scan(&candidates(&["never"]), &input[..], |_| true, |_| {}).expect("scan");
        assert_eq!(scanned.tail.len(), WINDOW);
        let last: Vec<(usize, &[u8])> = (scanned.tail.iter().rev().take(3))
            .map(|(n, t)| (*n, t.as_slice()))
            .collect();
        assert_eq!(
            last,
            vec![
                (200_002, &b""[..]),
                (200_001, b"boom"),
                (200_000, b"step 200000")
            ]
        );
        let numbers: Vec<usize> = scanned.tail.iter().map(|(n, _)| *n).collect();
        assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "consecutive");
        let short = scan(&candidates(&["x"]), &b"a\nb"[..], |_| true, |_| {}).expect("scan");
        assert_eq!(
            short.tail,
            VecDeque::from(vec![(1, b"a".to_vec()), (2, b"b".to_vec())])
        );
    }

    #[test]
    fn candidates_carry_original_line_numbers() {
        let input = b"a\nboom one\nb\n\x1b[31mbo\x1b[0mom two\nc\nd\nboom three";
        let (got, lines) = run("boom", input);
        assert_eq!(
            got,
            vec![
                (2, "boom one".into(), 3),
                (4, "boom two".into(), 3),
                (7, "boom three".into(), 0)
            ]
        );
        assert_eq!(lines, 7);
    }

    #[test]
    fn line_numbers_survive_chunk_boundaries() {
        let mut input = Vec::new();
        let n = 300_000; // ~3.5 MB: several chunks, on both threads
        for i in 1..=n {
            if i % 100_000 == 0 || i == 44_444 {
                input.extend_from_slice(format!("RuntimeError: hit {i}\n").as_bytes());
            } else if i % 7 == 0 {
                input.extend_from_slice(format!("\x1b[32mnoise\x1b[0m line {i}\n").as_bytes());
            } else {
                input.extend_from_slice(format!("noise line {i}\n").as_bytes());
            }
        }
        let (got, lines) = run("RuntimeError", &input);
        let at: Vec<usize> = got.iter().map(|g| g.0).collect();
        assert_eq!(at, vec![44_444, 100_000, 200_000, 300_000]);
        assert_eq!(got[1].1, "RuntimeError: hit 100000");
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

    #[test]
    fn a_hit_becomes_a_candidate_only_inside_a_required_literal() {
        // The first two go to the gram pass, the last two share the Teddy key `cudaError`: noise
        // with a piece of them alone is no candidate.
        let c = candidates(&[
            "cudaErrorAssert",
            "cudaErrorUnknown",
            "cudaErrorX",
            "cudaErrorY",
        ]);
        let cases: &[(&[u8], Vec<usize>)] = &[
            (b"x cudaErrorAssert y", vec![0]),
            (b"cudaErrorUnknown", vec![1]),
            (b"cudaErrorNoDevice and cudaErrorAssert", vec![0]),
            (b"cudaError cudaErrorUnknown", vec![1]),
            (b"plain cudaError", vec![]),
            (b"cudaErrorAsser", vec![]),
            (b"cudaErrorY", vec![3]),
            (b"cudaErrorZ, cudaErrorX", vec![2]),
        ];
        for (line, want) in cases {
            assert_eq!(
                &c.patterns_for(line),
                want,
                "{}",
                String::from_utf8_lossy(line)
            );
            assert_eq!(c.is_match(line), !want.is_empty());
        }
    }

    #[test]
    fn a_line_is_a_candidate_exactly_when_it_holds_a_required_literal() {
        // Every required literal of the built-in rules, whole or a byte short at either end,
        // at offsets in every class the gram pass looks at, after and before pieces of other
        // literals: the scan flags exactly the lines that hold one, and names for each line
        // exactly the patterns whose literal it holds.
        let file: crate::rules::spec::RuleFile =
            toml::from_str(crate::rules::BUILTIN_RULES).expect("builtin ruleset parses");
        let patterns: Vec<&str> = (file.rule.iter().map(|r| r.pattern.as_str()))
            .chain(file.context.iter().map(|c| c.pattern.as_str()))
            .collect();
        let c = candidates(&patterns);
        let literals: Vec<(usize, Vec<u8>)> = (patterns.iter().enumerate())
            .flat_map(|(i, p)| {
                let plan = LiteralPlan::of(p);
                let texts: Vec<String> = plan.literals().unwrap_or_default().to_vec();
                texts.into_iter().map(move |t| (i, t.into_bytes()))
            })
            .collect();
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut below = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let mut lines: Vec<Vec<u8>> = Vec::new();
        for (k, (_, literal)) in literals.iter().enumerate() {
            let other = &literals[below(literals.len())].1;
            let text = match below(3) {
                0 => literal,
                1 => &literal[1..],
                _ => &literal[..literal.len() - 1],
            };
            let mut line = b"x".repeat(k % 9);
            line.extend_from_slice(text);
            line.push(b' ');
            line.extend_from_slice(&other[..other.len() / 2]);
            lines.push(line);
        }
        let holds = |line: &[u8]| -> Vec<usize> {
            let mut owners: Vec<usize> = (literals.iter())
                .filter(|(_, l)| memchr::memmem::find(line, l).is_some())
                .map(|(i, _)| *i)
                .collect();
            owners.sort_unstable();
            owners.dedup();
            owners
        };
        let mut want = Vec::new();
        for (n, line) in lines.iter().enumerate() {
            let owners = holds(line);
            assert_eq!(
                c.patterns_for(line),
                owners,
                "{}",
                String::from_utf8_lossy(line)
            );
            if !owners.is_empty() {
                want.push(n + 1);
            }
        }
        assert!(want.len() > literals.len() / 3 && want.len() < lines.len());
        let text = lines.join(&b"\n"[..]);
        let mut got = Vec::new();
        scan(&c, &text[..], |_| true, |cand| got.push(cand.line)).expect("in-memory read");
        assert_eq!(got, want);
    }

    #[test]
    fn the_automaton_finds_what_teddy_finds() {
        // Where the CPU has no Teddy the same fingerprints go to an automaton.
        let fingerprints: Vec<&[u8]> = vec![b"CUDA", b"NCCL", b"rror", b"torc", b".cu:"];
        let teddy = Finder::new(&fingerprints).expect("fingerprints");
        let automaton = Finder::Automaton(
            aho_corasick::AhoCorasick::builder()
                .match_kind(aho_corasick::MatchKind::LeftmostFirst)
                .build(&fingerprints)
                .expect("fingerprints"),
        );
        let hay = b"x CUDA error: NCCL torch Indexing.cu:12 CUDNCCL error rror".repeat(3);
        let all = |finder: &Finder| {
            let (mut out, mut pos) = (Vec::new(), 0);
            while let Some((fp, at)) = finder.find(&hay, pos) {
                out.push((fp, at));
                pos = at + 1;
            }
            out
        };
        assert_eq!(all(&teddy), all(&automaton));
        assert_eq!(all(&teddy).len(), 3 * 8);
    }

    #[test]
    fn patterns_without_literals_are_always_tried() {
        let c = candidates(&[r"\d+ms", "boom"]);
        assert_eq!(c.patterns_for(b"took 12ms"), vec![0]);
        assert_eq!(c.patterns_for(b"boom"), vec![0, 1]);
        assert!(c.is_match(b"took 12ms"));
    }

    #[test]
    fn every_builtin_example_stays_a_candidate_for_its_rule_even_with_colours_inside() {
        let file: crate::rules::spec::RuleFile =
            toml::from_str(crate::rules::BUILTIN_RULES).expect("builtin ruleset parses");
        let specs: Vec<(&str, &[String])> = file
            .rule
            .iter()
            .map(|r| (r.pattern.as_str(), &r.examples[..]))
            .chain(
                file.context
                    .iter()
                    .map(|c| (c.pattern.as_str(), &c.examples[..])),
            )
            .collect();
        let patterns: Vec<&str> = specs.iter().map(|s| s.0).collect();
        let c = candidates(&patterns);
        for (i, (_, examples)) in specs.iter().enumerate() {
            for ex in examples.iter() {
                // A handful of cut points per example keeps the test quick in debug builds.
                let step = (ex.len() / 6).max(1);
                for at in (0..=ex.len())
                    .step_by(step)
                    .filter(|&at| ex.is_char_boundary(at))
                {
                    let input =
                        format!("noise\n{}\x1b[1;31m{}\x1b[0m\nmore\n", &ex[..at], &ex[at..]);
                    let mut found = Vec::new();
                    scan(&c, input.as_bytes(), |_| true, |cand| found.push(cand)).expect("read");
                    let hit = found
                        .iter()
                        .any(|f| f.line == 2 && c.patterns_for(&f.raw).contains(&i));
                    assert!(hit, "pattern {i} misses {input:?}");
                }
            }
        }
    }
}
