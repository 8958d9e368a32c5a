//! Reproductions, between the web layer and storage: the queue's settings, what a worker's
//! result becomes before it is stored (secrets scrubbed, output classified by the same rule
//! engine as uploads), when a report's category follows its reproduction, where the reported and
//! the synchronous tracebacks put the failure, and the reaper that takes back expired leases.
//!
//! CUDA reports kernel errors asynchronously, so the traceback in an uploaded log often points
//! at a later, innocent line (`loss.item()`); the worker re-runs the script with
//! `CUDA_LAUNCH_BLOCKING=1` and the synchronous traceback names the real one (`emb(idx)`).

use std::time::Duration;

use crate::ingest::{scrub, traceback};
use crate::rules::{Category, Classification, Ruleset};
use crate::storage::jobs as store;
use crate::storage::reproductions::{self as reads, CategoryBasis, Followed};
use crate::storage::{Db, DbError};

/// Queue settings of the server (flags / `GPU_TRIAGE_JOB_*`).
#[derive(Clone, Copy, Debug)]
pub struct JobSettings {
    /// How long a lease lasts without a heartbeat.
    pub lease_secs: u32,
    /// How long the worker lets a script run (sent with each job).
    pub timeout_secs: u32,
    /// Largest stdout, and largest stderr, a result may carry (bytes).
    pub max_output_bytes: usize,
    /// Longest long-poll a claim may ask for.
    pub max_wait_secs: u64,
    /// How often a waiting claim looks at the queue again (a report queued on this server
    /// wakes it at once; this bounds the delay for reports queued on another replica).
    pub poll: Duration,
    /// How often the background reaper runs.
    pub reaper_interval: Duration,
}

impl Default for JobSettings {
    fn default() -> Self {
        JobSettings {
            lease_secs: 90,
            timeout_secs: 600,
            max_output_bytes: 2 << 20,
            max_wait_secs: 30,
            poll: Duration::from_secs(1),
            reaper_interval: Duration::from_secs(15),
        }
    }
}

/// The script's output as one log: stderr (where tracebacks go) then stdout. Line numbers in a
/// reproduction's classification are lines of this text.
#[must_use]
pub fn combined_output(stderr: &str, stdout: &str) -> String {
    let mut out = String::with_capacity(stderr.len() + stdout.len() + 1);
    out.push_str(stderr);
    if !stderr.is_empty() && !stderr.ends_with('\n') && !stdout.is_empty() {
        out.push('\n');
    }
    out.push_str(stdout);
    out
}

/// A result's outputs scrubbed of secrets, and their classification.
#[derive(Debug)]
pub struct Scrubbed {
    pub stdout: String,
    pub stderr: String,
    pub classification: Classification,
}

/// Scrubs both outputs (before storage and before classification, so no finding quotes a
/// secret) and classifies them. CPU work: call from a blocking thread.
#[must_use]
pub fn scrub_and_classify(ruleset: &Ruleset, stdout: &str, stderr: &str) -> Scrubbed {
    let stdout = scrub::scrub(&crate::ingest::neutralize_controls(stdout))
        .text
        .into_owned();
    let stderr = scrub::scrub(&crate::ingest::neutralize_controls(stderr))
        .text
        .into_owned();
    let combined = combined_output(&stderr, &stdout);
    let classification = ruleset.classify_bytes("reproduction", combined.as_bytes());
    Scrubbed {
        stdout,
        stderr,
        classification,
    }
}

/// How strongly a classification names its root cause: its rule's specificity, 0 without one.
/// A rule the ruleset no longer has (renamed, a team rule removed) ranks by its confidence.
fn strength(ruleset: &Ruleset, c: &Classification) -> u8 {
    let Some(root) = &c.root_cause else {
        return 0;
    };
    ruleset
        .specificity(&root.rule)
        .unwrap_or(match c.confidence {
            crate::rules::Confidence::High => 80,
            crate::rules::Confidence::Medium => 40,
            crate::rules::Confidence::Low => 10,
        })
}

/// Whether a report whose category currently rests on `current` should take `repro`'s: the
/// reproduction names a specific root cause and either the report had none (`unknown`), or only
/// a generic library failure, or the reproduction's root cause ranks strictly higher in the
/// rule engine's specificity order (a kernel assertion naming the index beats "device-side
/// assert triggered"). A run without a GPU that failed for lack of one proves nothing.
#[must_use]
pub fn should_follow(
    ruleset: &Ruleset,
    current: &Classification,
    repro: &Classification,
    no_gpu: bool,
) -> bool {
    if repro.root_cause.is_none() || repro.category == Category::Unknown {
        return false;
    }
    if no_gpu && repro.category == Category::DriverIssue {
        return false;
    }
    let generic = |c: Category| matches!(c, Category::Unknown | Category::LibraryError);
    if current.root_cause.is_none() || current.category == Category::Unknown {
        return true;
    }
    if current.category == Category::LibraryError && !generic(repro.category) {
        return true;
    }
    strength(ruleset, repro) > strength(ruleset, current)
}

/// The classification a report's category currently rests on: the followed reproduction's, else
/// the log's.
fn current_basis(basis: &CategoryBasis) -> Option<Classification> {
    let value = basis
        .reproduction_classification
        .as_ref()
        .unwrap_or(&basis.log_classification);
    serde_json::from_value(value.clone()).ok()
}

/// After a reproduction is recorded: when it is more specific than what the report's category
/// rests on, the report's category, title and confidence follow it (and the report records
/// that). Idempotent, so a replayed result may run it again. Returns whether it followed.
pub async fn follow_if_more_specific(
    db: &Db,
    ruleset: &Ruleset,
    report_id: i64,
    reproduction_id: i64,
    repro: &Classification,
    no_gpu: bool,
) -> Result<bool, DbError> {
    let Some(basis) = reads::category_basis(db, report_id).await? else {
        return Ok(false);
    };
    if basis.reproduction_id == Some(reproduction_id) {
        return Ok(false);
    }
    let Some(current) = current_basis(&basis) else {
        return Ok(false);
    };
    if !should_follow(ruleset, &current, repro, no_gpu) {
        return Ok(false);
    }
    let followed = Followed {
        reproduction_id,
        category: repro.category.as_str().to_owned(),
        title: repro.title.clone(),
        confidence: serde_json::to_value(repro.confidence)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        root_cause_text: repro
            .root_cause
            .as_ref()
            .map(|r| r.text.clone())
            .unwrap_or_default(),
    };
    reads::follow_reproduction(db, report_id, &followed).await?;
    Ok(true)
}

/// Where a traceback says the failure happened: the last frame in the user's own code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The file's name without its directories (`train.py`).
    pub file: String,
    pub line: u32,
    /// The source line Python printed, if any.
    pub code: Option<String>,
    /// 1-based line of the text where the frame is.
    pub log_line: usize,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)?;
        if let Some(code) = &self.code {
            write!(f, " {code}")?;
        }
        Ok(())
    }
}

/// The traceback of `text` that a person would read as "the" error: the last one with frames.
#[must_use]
pub fn main_traceback(text: &str) -> Option<traceback::Traceback> {
    traceback::parse(text)
        .into_iter()
        .rev()
        .find(|tb| !tb.frames.is_empty())
}

/// The user's failing line in a traceback.
#[must_use]
pub fn location(tb: &traceback::Traceback) -> Option<Location> {
    let frame = traceback::user_frame(tb)?;
    let file = frame
        .file
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or(&frame.file)
        .to_owned();
    Some(Location {
        file,
        line: frame.line,
        code: frame.code.clone(),
        log_line: frame.log_line,
    })
}

/// The plain sentence for the report page when the synchronous run moved the error, e.g.
/// "reported at train.py:57 loss.item(), actually raised at train.py:41 emb(idx)"; `None` when
/// both name the same line.
#[must_use]
pub fn moved_sentence(reported: &Location, actual: &Location) -> Option<String> {
    if reported.file == actual.file && reported.line == actual.line {
        return None;
    }
    Some(format!(
        "reported at {reported}, actually raised at {actual}"
    ))
}

/// Runs the reaper every `interval` until the task is dropped; `on_reaped` counts what it did.
pub async fn run_reaper(db: Db, interval: Duration, on_reaped: impl Fn(&[store::Reaped])) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        match store::reap_expired(&db).await {
            Ok(reaped) if !reaped.is_empty() => {
                for r in &reaped {
                    tracing::info!(job = r.job_id, state = %r.state, "lease expired");
                }
                on_reaped(&reaped);
            }
            Ok(_) => {}
            Err(DbError::Unavailable(e)) => tracing::debug!(error = %e, "reaper: database down"),
            Err(e) => tracing::warn!(error = %e, "reaper pass failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ruleset() -> Ruleset {
        Ruleset::builtin().expect("builtin")
    }

    const ASYNC_LOG: &str = "epoch 3\nTraceback (most recent call last):\n  File \"/work/train.py\", line 57, in <module>\n    loss.item()\nRuntimeError: CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n";
    const SYNC_ERR: &str = "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1231: indexSelectSmallIndex: block: [3,0,0], thread: [1,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\nTraceback (most recent call last):\n  File \"/tmp/job/train.py\", line 41, in <module>\n    out = emb(idx)\n  File \"/usr/lib/python3/dist-packages/torch/nn/modules/module.py\", line 1532, in _wrapped_call_impl\n    return self._call_impl(*args, **kwargs)\nRuntimeError: CUDA error: device-side assert triggered\n";

    #[test]
    fn outputs_are_scrubbed_before_classification_and_storage() {
        let s = scrub_and_classify(
            &ruleset(),
            "HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567\n",
            SYNC_ERR,
        );
        assert!(!s.stdout.contains("hf_AbCdEf"), "{}", s.stdout);
        assert!(s.stdout.contains("[REDACTED:"), "{}", s.stdout);
        assert_eq!(s.classification.category, Category::OutOfBounds);
        let root = s.classification.root_cause.expect("root cause");
        assert_eq!((root.line, root.rule.as_str()), (1, "cuda.assert.index"));
    }

    #[test]
    fn combined_output_puts_stderr_first_on_its_own_lines() {
        assert_eq!(combined_output("a\nb", "c\n"), "a\nb\nc\n");
        assert_eq!(combined_output("a\n", "c"), "a\nc");
        assert_eq!(combined_output("", "c"), "c");
        assert_eq!(combined_output("a", ""), "a");
    }

    #[test]
    fn the_category_follows_only_a_more_specific_reproduction() {
        let rs = ruleset();
        let log = rs.classify_bytes("log", ASYNC_LOG.as_bytes());
        let sync = rs.classify_bytes("sync", SYNC_ERR.as_bytes());
        let unknown = rs.classify_bytes("x", b"all fine\n");
        let oom = rs.classify_bytes("x", b"RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)\n");
        let no_driver = rs.classify_bytes(
            "x",
            b"RuntimeError: Found no NVIDIA driver on your system.\n",
        );
        // A kernel assertion naming the index beats the generic device-side assert.
        assert!(should_follow(&rs, &log, &sync, false));
        // Never towards the generic one, nor towards nothing.
        assert!(!should_follow(&rs, &sync, &log, false));
        assert!(!should_follow(&rs, &log, &unknown, false));
        // Anything specific beats unknown.
        assert!(should_follow(&rs, &unknown, &oom, false));
        // Equal strength keeps the log's.
        assert!(!should_follow(&rs, &sync, &sync.clone(), false));
        // A worker without a GPU failing for lack of a driver proves nothing.
        if no_driver.category == Category::DriverIssue {
            assert!(!should_follow(&rs, &unknown, &no_driver, true));
            assert!(should_follow(&rs, &unknown, &no_driver, false));
        }
    }

    #[test]
    fn the_moved_line_is_named_plainly() {
        let reported = location(&main_traceback(ASYNC_LOG).expect("tb")).expect("frame");
        let actual = location(&main_traceback(SYNC_ERR).expect("tb")).expect("frame");
        assert_eq!(reported.log_line, 3);
        assert_eq!(actual.log_line, 3);
        assert_eq!(
            moved_sentence(&reported, &actual).as_deref(),
            Some(
                "reported at train.py:57 loss.item(), actually raised at train.py:41 out = emb(idx)"
            )
        );
        assert_eq!(moved_sentence(&actual, &actual), None);
    }
}
