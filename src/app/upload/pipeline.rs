//! The upload pipeline proper: a spooled log read in blocks that end on line boundaries,
//! scrubbed of secrets (a private key block dropped whole, a huge line cut where no token can
//! be split from its keyword), hashed, compressed in chunks of whole lines (`app::logstore`)
//! and classified on its scrubbed text.
//! Blocking CPU and file work, with no database: [`super::upload`] runs it on a blocking thread.

use std::io::{self, Read};

use sha2::{Digest, Sha256};

use super::{Meta, Needs, UploadError, search_doc};
use crate::app::logstore::{self, ChunkWriter};
use crate::ingest::{self, Reject};
use crate::rules::{Classification, Ruleset};
use crate::storage::reports::{Headline, LogChunk, NewReport};
use crate::storage::search::Document;

/// Scrubs, classifies and compresses a spooled log. Blocking (CPU and file I/O): call it from
/// a blocking thread. The classification runs on the scrubbed text, so no finding quotes a
/// secret.
pub fn prepare(
    ruleset: &Ruleset,
    log: impl Read,
    filename: &str,
    meta: Meta,
    script: Option<String>,
) -> Result<NewReport, UploadError> {
    // Every stored and searchable field is scrubbed, not only the log.
    let meta = meta.scrubbed();
    let filename = &*ingest::scrub::scrub(filename).text;
    let mut blocks = Blocks::new(log);
    let mut sha = Sha256::new();
    let mut gz = ChunkWriter::default();
    let mut total: u64 = 0;
    // Whether any byte so far is not whitespace (a blank paste is refused).
    let mut nonblank = false;
    let mut in_key = false;
    // What was written to `gz`, kept while small: classifying it needs no decompression.
    let mut stored = Stored::default();
    while let Some(block) = blocks.next_block()? {
        if total == 0 && ingest::looks_binary(&block[..block.len().min(8192)]) {
            return Err(Reject::Binary.into());
        }
        total += block.len() as u64;
        nonblank = nonblank || block.iter().any(|b| !b.is_ascii_whitespace());
        sha.update(block);
        // Most blocks hold no secret at all: one pass of the secret patterns over the whole
        // block says so, and the block is stored as it came.
        if !in_key
            && memchr::memmem::find(block, b"PRIVATE KEY").is_none()
            && let Ok(text) = std::str::from_utf8(block)
            && !ingest::scrub::might_contain_secret(text)
        {
            gz.write_all(block)?;
            stored.push(block);
            continue;
        }
        for line in block.split_inclusive(|&b| b == b'\n') {
            let text = String::from_utf8_lossy(line);
            // A private key spans lines: drop the whole block, whatever the line-wise scrubber
            // sees. The block ends at its END line, or at the first line that cannot be part
            // of a key (a log that only mentions a BEGIN line keeps the rest of its text).
            if in_key && !pem_body_line(&text) {
                in_key = false;
            }
            if in_key || (text.contains("-----BEGIN") && text.contains("PRIVATE KEY")) {
                if !in_key {
                    gz.write_all(b"[REDACTED:private_key]\n")?;
                    stored.push(b"[REDACTED:private_key]\n");
                }
                in_key = !(text.contains("-----END") && text.contains("PRIVATE KEY"));
                continue;
            }
            let clean = ingest::scrub::scrub(&text);
            gz.write_all(clean.text.as_bytes())?;
            stored.push(clean.text.as_bytes());
        }
    }
    if total == 0 {
        return Err(Reject::Empty.into());
    }
    if !nonblank {
        return Err(Reject::Blank.into());
    }
    let log = gz.finish()?;
    let classification = match &stored.0 {
        Some(text) => ruleset.classify_bytes(filename, text),
        None => ruleset.classify_reader(filename, logstore::reader(&log))?,
    };
    let search = search_document(&classification, &meta, filename, stored.0.as_deref(), &log)?;
    let search_words = search_doc::words(&search);
    Ok(NewReport {
        token_id: None,
        project: meta.project,
        job_url: meta.job_url,
        commit_sha: meta.commit,
        branch: meta.branch,
        environment: meta.environment,
        version: meta.version,
        repeats: meta.repeats,
        needs: meta
            .needs
            .unwrap_or_else(|| Needs::for_category(classification.category)),
        filename: filename.to_owned(),
        headline: Headline::of(&classification),
        log_sha256: sha.finalize().to_vec(),
        log_bytes: i64::try_from(total).unwrap_or(i64::MAX),
        log_lines: i64::try_from(classification.stats.lines).unwrap_or(i64::MAX),
        log,
        script,
        search,
        search_words,
        classification,
    })
}

/// Size of the blocks a log is read in: large enough that the per-block work (one pass of
/// the secret patterns, one gzip write) is cheap per byte, small enough to keep memory flat.
const BLOCK: usize = 256 << 10;

/// Reads a log in blocks that end after a newline (a line longer than 16 blocks is cut at a
/// UTF-8 boundary), so that line-wise scrubbing sees whole lines.
struct Blocks<R> {
    reader: R,
    buf: Vec<u8>,
    /// `buf[..start]` was handed out by the previous call.
    start: usize,
    eof: bool,
}

impl<R: Read> Blocks<R> {
    fn new(reader: R) -> Self {
        Blocks {
            reader,
            buf: Vec::with_capacity(2 * BLOCK),
            start: 0,
            eof: false,
        }
    }

    fn next_block(&mut self) -> io::Result<Option<&[u8]>> {
        self.buf.drain(..self.start);
        // `buf[..clean]` is known to hold no newline.
        let mut clean = 0;
        loop {
            if self.eof {
                self.start = self.buf.len();
                break;
            }
            if self.buf.len() >= BLOCK {
                if let Some(nl) = memchr::memrchr(b'\n', &self.buf[clean..]) {
                    self.start = clean + nl + 1;
                    break;
                }
                clean = self.buf.len();
                if self.buf.len() >= 16 * BLOCK {
                    self.start = long_line_cut(&self.buf);
                    break;
                }
            }
            // `read_to_end` appends without zeroing the spare capacity first.
            let n = (&mut self.reader)
                .take(BLOCK as u64)
                .read_to_end(&mut self.buf)?;
            self.eof = n == 0;
        }
        Ok((self.start > 0).then(|| &self.buf[..self.start]))
    }
}

/// Largest scrubbed log kept in memory for classification; a larger one is read back from its
/// gzip stream instead.
const KEEP_IN_MEMORY: usize = 8 << 20;

/// The scrubbed log while it is under [`KEEP_IN_MEMORY`], `None` once it is not.
struct Stored(Option<Vec<u8>>);

impl Default for Stored {
    fn default() -> Self {
        Stored(Some(Vec::new()))
    }
}

impl Stored {
    fn push(&mut self, bytes: &[u8]) {
        if let Some(text) = &mut self.0 {
            if text.len() + bytes.len() > KEEP_IN_MEMORY {
                self.0 = None;
            } else {
                text.extend_from_slice(bytes);
            }
        }
    }
}

/// Whether a line can sit inside a PEM block: base64 text, an encryption header
/// (`Proc-Type:`, `DEK-Info:`), the END line, or blank.
fn pem_body_line(line: &str) -> bool {
    let t = line.trim();
    t.is_empty()
        || t.contains("-----END")
        || t.starts_with("Proc-Type:")
        || t.starts_with("DEK-Info:")
        || t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
}

/// Words a secret's keyword may take before the secret itself (`Authorization: Basic <token>`):
/// a whitespace cut goes back this many more words, so keyword and secret are scrubbed together.
const KEYWORD_WORDS: usize = 2;

/// Where to cut a line too long for one block: after its last `\r` (a progress bar's redraw)
/// or, before its last [`KEYWORD_WORDS`] + 1 words, at a space in the final 64 KiB, so that no
/// token is split between two scrubbing passes and no token is parted from its keyword
/// (`Bearer`, `Authorization: Basic`, `PASSWORD:`), and never inside a PEM
/// `-----BEGIN ...-----` header; else at a UTF-8 boundary.
fn long_line_cut(buf: &[u8]) -> usize {
    let from = buf.len().saturating_sub(64 << 10);
    let tail = &buf[from..];
    let at = match memchr::memrchr(b'\r', tail) {
        Some(at) => Some(at),
        None => memchr::memrchr2(b' ', b'\t', tail).map(|mut at| {
            for _ in 0..KEYWORD_WORDS {
                // Skip the run of whitespace, then the word before it.
                let word_end = tail[..at].iter().rposition(|b| !matches!(b, b' ' | b'\t'));
                match word_end.and_then(|e| memchr::memrchr2(b' ', b'\t', &tail[..e])) {
                    Some(prev) => at = prev,
                    None => break,
                }
            }
            at
        }),
    };
    let Some(at) = at else {
        return utf8_boundary(buf);
    };
    let mut cut = from + at + 1;
    // A header's words are separated by spaces: cut before the header instead.
    let window = &buf[cut.saturating_sub(80)..cut];
    if let Some(begin) = memchr::memmem::rfind(window, b"-----BEGIN")
        && memchr::memmem::find(&window[begin + 10..], b"-----").is_none()
    {
        cut = cut.saturating_sub(80) + begin;
    }
    if cut == 0 { utf8_boundary(buf) } else { cut }
}

/// The longest prefix of `buf` that does not end inside a UTF-8 sequence.
fn utf8_boundary(buf: &[u8]) -> usize {
    let mut end = buf.len();
    while end > 0 && end > buf.len().saturating_sub(4) && (buf[end - 1] & 0xC0) == 0x80 {
        end -= 1;
    }
    // `end - 1` is now a lead or ASCII byte; cut before a lead byte whose sequence is cut.
    if end > 0 && buf[end - 1] >= 0xC0 {
        end -= 1;
    }
    if end == 0 { buf.len() } else { end }
}

/// The report's search document. Its lines come from the scrubbed log kept in memory, or, for a
/// log too large for that, from the compressed chunks that hold them (the head, the tail and
/// the surroundings of the findings: a few chunks, whatever the log's size).
fn search_document(
    c: &Classification,
    meta: &Meta,
    filename: &str,
    text: Option<&[u8]>,
    log: &[LogChunk],
) -> io::Result<Document> {
    let mut plan = search_doc::Plan::new(c);
    match text {
        Some(text) => plan.read(1, text),
        None => {
            let wanted = plan.ranges().to_vec();
            for chunk in log {
                let first = usize::try_from(chunk.first_line).unwrap_or(usize::MAX);
                let last = first.saturating_add(usize::try_from(chunk.lines).unwrap_or(0));
                if wanted
                    .iter()
                    .any(|r| *r.start() <= last && *r.end() >= first)
                {
                    plan.read(first, &logstore::decompress(chunk)?);
                }
            }
        }
    }
    Ok(plan.finish(c, &meta.origin(filename)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ruleset() -> Ruleset {
        Ruleset::builtin().expect("builtin")
    }

    /// The log as stored: the gzip stream decompressed.
    fn stored_log(p: &NewReport) -> String {
        let mut text = String::new();
        logstore::reader(&p.log)
            .read_to_string(&mut text)
            .expect("gzip");
        text
    }

    #[test]
    fn a_log_is_scrubbed_classified_and_compressed() {
        let log = b"step 1\nexport HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyzABCDEFGH\nRuntimeError: CUDA error: out of memory\n";
        let p =
            prepare(&ruleset(), &log[..], "train.log", Meta::default(), None).expect("accepted");
        assert_eq!(p.headline.category, crate::rules::Category::OutOfMemory);
        assert_eq!(p.headline.root_cause_line, Some(3));
        assert_eq!(p.log_bytes, log.len() as i64);
        let text = stored_log(&p);
        assert!(!text.contains("hf_abcdefghijklmnopqrstuvwxyz"), "{text}");
        assert!(text.contains("RuntimeError: CUDA error: out of memory"));
        assert_eq!(p.log_sha256, Sha256::digest(log).to_vec());
    }

    #[test]
    fn a_private_key_block_is_dropped_whole() {
        let log = b"before\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1234\nabcdefSECRETBODY\n-----END RSA PRIVATE KEY-----\nafter\n";
        let p = prepare(&ruleset(), &log[..], "k.log", Meta::default(), None).expect("accepted");
        let text = stored_log(&p);
        assert_eq!(text, "before\n[REDACTED:private_key]\nafter\n");
    }

    /// Yields at most `step` bytes per read, as a slow socket would.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.1.min(out.len()).min(self.0.len());
            out[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn blocks_scrub_like_lines_at_every_boundary() {
        let secret = "ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5";
        let mut log = String::new();
        let mut n = 0;
        while log.len() < 3 * BLOCK {
            n += 1;
            log.push_str(&format!("step {n} | loss 0.{n} | ü\n"));
            if n % 2000 == 0 || (log.len() > BLOCK - 200 && log.len() < BLOCK + 200) {
                log.push_str(&format!("git clone https://{secret}@github.com/x/y\n"));
            }
        }
        // A 5 MiB line with no newline (cut inside, at a UTF-8 boundary) holding a secret.
        let long = format!("{}{secret} {}", "é".repeat(600_000), "x".repeat(4 << 20));
        log.push_str(&long);
        for step in [usize::MAX, 7919] {
            let p = prepare(
                &ruleset(),
                Trickle(log.as_bytes(), step),
                "b.log",
                Meta::default(),
                None,
            )
            .expect("accepted");
            let text = stored_log(&p);
            assert!(!text.contains(secret), "a secret survived (step {step})");
            let expected: String = log
                .split_inclusive('\n')
                .map(|l| crate::ingest::scrub::scrub(l).text.into_owned())
                .collect();
            assert_eq!(text.len(), expected.len(), "step {step}");
            assert!(
                text == expected,
                "blocks differ from line-wise scrubbing (step {step})"
            );
            assert_eq!(p.log_bytes, log.len() as i64);
            assert_eq!(p.log_sha256, Sha256::digest(log.as_bytes()).to_vec());
        }
    }

    #[test]
    fn a_token_where_a_huge_line_is_cut_is_still_scrubbed() {
        let secret = "ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5";
        // The token straddles the 4 MiB cut of a line with no newline.
        let pad = "x ".repeat((16 * BLOCK - 20) / 2);
        let log = format!("{pad}{secret} tail\nRuntimeError: CUDA error: out of memory\n");
        let p =
            prepare(&ruleset(), log.as_bytes(), "l.log", Meta::default(), None).expect("accepted");
        let text = stored_log(&p);
        assert!(!text.contains(secret), "the token survived the cut");
        assert_eq!(
            text.len(),
            log.len() - secret.len() + "[REDACTED:github_token]".len()
        );
    }

    #[test]
    fn a_secret_whose_keyword_is_the_last_word_before_the_cut_is_still_scrubbed() {
        let cases = [
            (
                "Authorization: Bearer ",
                "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdefghij",
            ),
            ("authorization: Basic ", "dXNlcjpwYXNzd29yZDEyMzQ1Njc4OQ=="),
            ("DB_PASSWD: ", "correcthorsebatterystaple42"),
        ];
        for (keyword, secret) in cases {
            // The block boundary (16 blocks, no newline) falls inside the secret, so the last
            // space before it is the one right after the keyword.
            let mut log = "x ".repeat((16 * BLOCK - keyword.len() - 6) / 2);
            log.push_str(keyword);
            log.push_str(secret);
            log.push_str(" tail\nRuntimeError: CUDA error: out of memory\n");
            assert!(log.find(secret).unwrap() < 16 * BLOCK, "{keyword}");
            assert!(
                log.find(secret).unwrap() + secret.len() > 16 * BLOCK,
                "{keyword}"
            );
            let p = prepare(&ruleset(), log.as_bytes(), "l.log", Meta::default(), None)
                .expect("accepted");
            let text = stored_log(&p);
            assert!(!text.contains(secret), "{keyword}{secret} survived the cut");
        }
    }

    #[test]
    fn a_log_that_only_mentions_a_key_header_keeps_the_rest_of_its_text() {
        let log = b"config check: -----BEGIN PRIVATE KEY----- marker missing\nRuntimeError: CUDA error: out of memory\n";
        let p = prepare(&ruleset(), &log[..], "k.log", Meta::default(), None).expect("accepted");
        assert_eq!(p.headline.category, crate::rules::Category::OutOfMemory);
        let text = stored_log(&p);
        assert_eq!(
            text,
            "[REDACTED:private_key]\nRuntimeError: CUDA error: out of memory\n"
        );
    }

    #[test]
    fn empty_and_binary_logs_are_refused() {
        let rs = ruleset();
        assert!(matches!(
            prepare(&rs, &b""[..], "x", Meta::default(), None),
            Err(UploadError::Log(Reject::Empty))
        ));
        assert!(matches!(
            prepare(&rs, &b" \n\t\r\n\n   \n"[..], "x", Meta::default(), None),
            Err(UploadError::Log(Reject::Blank))
        ));
        assert!(matches!(
            prepare(&rs, &b"\x7fELF\x00\x00\x01"[..], "x", Meta::default(), None),
            Err(UploadError::Log(Reject::Binary))
        ));
    }
}
