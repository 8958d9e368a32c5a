//! The upload pipeline proper: a spooled log read and scrubbed block by block
//! (`ingest::stream`), hashed, compressed in chunks of whole lines (`app::logstore`) and
//! classified on its scrubbed text.
//! Blocking CPU and file work, with no database: [`super::upload`] runs it on a blocking thread.

use std::io::{self, Read};

use sha2::{Digest, Sha256};

use super::{Meta, Needs, UploadError, search_doc};
use crate::app::logstore::{self, ChunkWriter};
use crate::ingest;
use crate::ingest::stream::{Blocks, Scrubber};
use crate::rules::{Classification, Ruleset};
use crate::storage::reports::{Headline, LogChunk, NewReport};
use crate::storage::search::Document;

/// Scrubs, classifies and compresses a spooled log. Blocking (CPU and file I/O): call it from
/// a blocking thread. The classification runs on the scrubbed text, so no finding quotes a
/// secret.
#[tracing::instrument(name = "upload::prepare", skip_all)]
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
    let mut scrubber = Scrubber::default();
    let mut sha = Sha256::new();
    let mut gz = ChunkWriter::default();
    // What was written to `gz`, kept while small: classifying it needs no decompression.
    let mut stored = InMemoryLog::default();
    while let Some(block) = blocks.next_block()? {
        sha.update(block);
        scrubber.block(block, |kept| -> Result<(), UploadError> {
            gz.write_all(kept)?;
            stored.push(kept);
            Ok(())
        })?;
    }
    let total = scrubber.finish()?;
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
        log_place: crate::storage::reports::LogPlace::Database,
        script_place: crate::storage::reports::ScriptPlace::Database,
        script,
        search,
        search_words,
        classification,
    })
}

/// Largest scrubbed log kept in memory for classification; a larger one is read back from its
/// gzip stream instead.
const KEEP_IN_MEMORY: usize = 8 << 20;

/// The scrubbed log while it is under [`KEEP_IN_MEMORY`], `None` once it is not.
struct InMemoryLog(Option<Vec<u8>>);

impl Default for InMemoryLog {
    fn default() -> Self {
        InMemoryLog(Some(Vec::new()))
    }
}

impl InMemoryLog {
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
    use crate::ingest::Reject;
    use crate::ingest::stream::BLOCK;

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
