//! What the locator sees of a line: a few dozen numbers that carry across runtimes, read from
//! the line's words and shapes (severity words and level letters, exception-class and
//! status-code shapes, the words of dying processes) and from where it stands (before or after
//! a stack dump, at the end of the log, repeated, the first of its kind).
//!
//! Every feature is named, so the weights file reads as a table a person can review; a feature
//! added here needs a weight there (missing ones count as 0) and a retraining.

use super::shapes::{
    error_letter, exception_class, has_word, is_frame, repeat_key, status_constant, status_number,
};
use crate::ingest::normalize::clean_line;
use crate::ingest::prefix::{Level, is_summary, level};

/// One line of the window the locator reads.
#[derive(Debug, Clone)]
pub struct WindowLine {
    /// 1-based line number in the input as given.
    pub line: usize,
    /// The line without ANSI (prefixes kept: their level letters count).
    pub raw: String,
    /// The line as rules see it (prefixes and decoration removed).
    pub cleaned: String,
}

impl WindowLine {
    /// A window line from the raw bytes of input line `line`.
    #[must_use]
    pub fn new(line: usize, raw: &[u8]) -> WindowLine {
        let decoded = String::from_utf8_lossy(raw);
        let raw = crate::ingest::normalize::strip_ansi(&decoded).into_owned();
        let cleaned = clean_line(raw.as_bytes());
        WindowLine { line, raw, cleaned }
    }
}

/// The features, in the order of a feature vector; the names are the weights file's keys.
pub const NAMES: [&str; FEATURES] = [
    "word_error",
    "exception_class",
    "starts_with_exception",
    "error_colon",
    "upper_severity",
    "error_level_letter",
    "fatal",
    "failed",
    "killed",
    "aborted",
    "panic",
    "exit_code",
    "signal",
    "assertion",
    "denied",
    "cannot",
    "not_found",
    "invalid",
    "timeout",
    "memory",
    "exceeded",
    "status_constant",
    "status_number",
    "quiet_level",
    "warning_word",
    "info_word",
    "summary",
    "stack_frame",
    "trace_header",
    "after_frames",
    "before_frames",
    "code_echo",
    "indented",
    "command",
    "short",
    "long",
    "mostly_digits",
    "progress",
    "url",
    "advice",
    "position",
    "last_line",
    "near_end",
    "first_cue",
    "earlier_cues",
    "repeated",
    "limit",
    "gpu_word",
    "intro_colon",
    "markdown",
    "raise_statement",
    "what_line",
];

/// How many features a line has.
pub const FEATURES: usize = 52;

/// Feature indices the gate and the code below refer to by name.
mod at {
    pub const WORD_ERROR: usize = 0;
    pub const EXCEPTION_CLASS: usize = 1;
    pub const STARTS_WITH_EXCEPTION: usize = 2;
    pub const ERROR_COLON: usize = 3;
    pub const UPPER_SEVERITY: usize = 4;
    pub const ERROR_LEVEL_LETTER: usize = 5;
    pub const FATAL: usize = 6;
    pub const FAILED: usize = 7;
    pub const KILLED: usize = 8;
    pub const ABORTED: usize = 9;
    pub const PANIC: usize = 10;
    pub const EXIT_CODE: usize = 11;
    pub const SIGNAL: usize = 12;
    pub const ASSERTION: usize = 13;
    pub const DENIED: usize = 14;
    pub const CANNOT: usize = 15;
    pub const NOT_FOUND: usize = 16;
    pub const INVALID: usize = 17;
    pub const TIMEOUT: usize = 18;
    pub const MEMORY: usize = 19;
    pub const EXCEEDED: usize = 20;
    pub const STATUS_CONSTANT: usize = 21;
    pub const STATUS_NUMBER: usize = 22;
    pub const QUIET_LEVEL: usize = 23;
    pub const WARNING_WORD: usize = 24;
    pub const INFO_WORD: usize = 25;
    pub const SUMMARY: usize = 26;
    pub const STACK_FRAME: usize = 27;
    pub const TRACE_HEADER: usize = 28;
    pub const AFTER_FRAMES: usize = 29;
    pub const BEFORE_FRAMES: usize = 30;
    pub const CODE_ECHO: usize = 31;
    pub const INDENTED: usize = 32;
    pub const COMMAND: usize = 33;
    pub const SHORT: usize = 34;
    pub const LONG: usize = 35;
    pub const MOSTLY_DIGITS: usize = 36;
    pub const PROGRESS: usize = 37;
    pub const URL: usize = 38;
    pub const ADVICE: usize = 39;
    pub const POSITION: usize = 40;
    pub const LAST_LINE: usize = 41;
    pub const NEAR_END: usize = 42;
    pub const FIRST_CUE: usize = 43;
    pub const EARLIER_CUES: usize = 44;
    pub const REPEATED: usize = 45;
    pub const LIMIT: usize = 46;
    pub const GPU_WORD: usize = 47;
    pub const INTRO_COLON: usize = 48;
    pub const MARKDOWN: usize = 49;
    pub const RAISE_STATEMENT: usize = 50;
    pub const WHAT_LINE: usize = 51;
}

/// The words that say a process failed (the gate: a line without one is never located).
const CUES: [usize; 17] = [
    at::WORD_ERROR,
    at::EXCEPTION_CLASS,
    at::ERROR_COLON,
    at::UPPER_SEVERITY,
    at::ERROR_LEVEL_LETTER,
    at::FATAL,
    at::FAILED,
    at::KILLED,
    at::ABORTED,
    at::PANIC,
    at::EXIT_CODE,
    at::SIGNAL,
    at::ASSERTION,
    at::DENIED,
    at::CANNOT,
    at::NOT_FOUND,
    at::TIMEOUT,
];

/// A feature vector.
pub type Vector = [f64; FEATURES];

/// What one line says by itself, before its place in the window is known.
#[derive(Debug, Clone)]
struct Own {
    v: Vector,
    frame: bool,
    header: bool,
    python_frame: bool,
    blank: bool,
    key: String,
}

/// The feature vectors of every line of `window`, in order.
#[must_use]
pub fn vectors(window: &[WindowLine]) -> Vec<Vector> {
    let own: Vec<Own> = window.iter().map(own).collect();
    let n = window.len();
    let last = own.iter().rposition(|o| !o.blank);
    let mut counts: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for o in own.iter().filter(|o| !o.blank) {
        *counts.entry(o.key.as_str()).or_default() += 1;
    }
    let mut cues_before = 0usize;
    let mut out = Vec::with_capacity(n);
    for (i, o) in own.iter().enumerate() {
        let mut v = o.v;
        let prev = own[..i].iter().rev().find(|p| !p.blank);
        let next = own[i + 1..].iter().find(|p| !p.blank);
        let is_frame = o.frame || o.header;
        set(
            &mut v,
            at::AFTER_FRAMES,
            !is_frame && prev.is_some_and(|p| p.frame),
        );
        set(
            &mut v,
            at::BEFORE_FRAMES,
            !is_frame && next.is_some_and(|p| p.frame || p.header),
        );
        set(
            &mut v,
            at::CODE_ECHO,
            !is_frame && prev.is_some_and(|p| p.python_frame),
        );
        v[at::POSITION] = if n > 1 {
            i as f64 / (n - 1) as f64
        } else {
            1.0
        };
        set(&mut v, at::LAST_LINE, last == Some(i));
        set(
            &mut v,
            at::NEAR_END,
            last.is_some_and(|l| l >= i && l - i <= 3),
        );
        let cue = is_cue(&v);
        set(&mut v, at::FIRST_CUE, cue && cues_before == 0);
        v[at::EARLIER_CUES] = (1.0 + cues_before as f64).ln();
        if cue {
            cues_before += 1;
        }
        let repeats = if o.blank { 1 } else { counts[o.key.as_str()] };
        v[at::REPEATED] = (repeats as f64).ln();
        out.push(v);
    }
    out
}

/// What an info or warning line must say to count as a failure: a process was killed or
/// aborted, died of a signal or a fatal error, or went over a limit (a supervisor's warning that
/// it restarts a worker over its memory budget is how such a failure is logged).
const LOUD_CUES: [usize; 6] = [
    at::FATAL,
    at::KILLED,
    at::ABORTED,
    at::PANIC,
    at::SIGNAL,
    at::EXCEEDED,
];

/// Whether a line says something failed: a word of [`CUES`] (or [`EXCEEDED`](at::EXCEEDED))
/// at a level above info and warning, or one of [`LOUD_CUES`] at any level.
#[must_use]
pub fn is_cue(v: &Vector) -> bool {
    let on = |c: &usize| v[*c] > 0.0;
    LOUD_CUES.iter().any(on) || (v[at::QUIET_LEVEL] == 0.0 && CUES.iter().any(on))
}

fn set(v: &mut Vector, i: usize, on: bool) {
    v[i] = if on { 1.0 } else { 0.0 };
}

fn own(w: &WindowLine) -> Own {
    let mut v = [0.0; FEATURES];
    let text = w.cleaned.as_str();
    let lower = text.to_lowercase();
    let has = |words: &[&str]| words.iter().any(|x| lower.contains(x));
    let blank = text.trim().is_empty();
    let python_frame = text.starts_with("File \"") && text.contains("\", line ");
    let frame = python_frame || is_frame(text, &w.raw);
    let header = has(&[
        "traceback (most recent call last)",
        "stack trace",
        "stacktrace",
        "backtrace",
        "goroutine ",
        "call stack",
        "exception in thread",
    ]) && !frame;
    set(
        &mut v,
        at::WORD_ERROR,
        has_word(&lower, "error") || has_word(&lower, "err"),
    );
    set(&mut v, at::EXCEPTION_CLASS, exception_class(text).is_some());
    set(
        &mut v,
        at::STARTS_WITH_EXCEPTION,
        exception_class(text).is_some_and(|at| at == 0),
    );
    set(
        &mut v,
        at::ERROR_COLON,
        has(&["error:", "error]", "error -", "err:", "error ("]),
    );
    set(
        &mut v,
        at::UPPER_SEVERITY,
        [
            "ERROR", "FATAL", "CRITICAL", "PANIC", "FAILED", "FAILURE", "FAIL",
        ]
        .iter()
        .any(|u| has_word(text, u)),
    );
    set(&mut v, at::ERROR_LEVEL_LETTER, error_letter(&w.raw));
    set(&mut v, at::FATAL, lower.contains("fatal"));
    set(&mut v, at::FAILED, lower.contains("fail"));
    set(
        &mut v,
        at::KILLED,
        has(&[
            "killed",
            "oom-kill",
            "oom_kill",
            "oomkilled",
            "sigkill",
            "evicted",
            "preempt",
        ]),
    );
    set(
        &mut v,
        at::ABORTED,
        has(&[
            "abort",
            "core dumped",
            "terminate called",
            "terminating",
            "crash",
        ]),
    );
    set(&mut v, at::PANIC, lower.contains("panic"));
    set(
        &mut v,
        at::EXIT_CODE,
        has(&[
            "exit code",
            "exit status",
            "exited with",
            "exitcode",
            "return code",
            "non-zero",
            "nonzero",
            "exit_code",
        ]),
    );
    set(
        &mut v,
        at::SIGNAL,
        has(&[
            "signal",
            "sigsegv",
            "sigabrt",
            "sigbus",
            "sigterm",
            "segmentation fault",
            "bus error",
            "segfault",
        ]),
    );
    set(
        &mut v,
        at::ASSERTION,
        has(&["assert", "check failed", "expect("]),
    );
    set(
        &mut v,
        at::DENIED,
        has(&[
            "denied",
            "permission",
            "forbidden",
            "unauthorized",
            "not permitted",
            "refused",
            "rejected",
        ]),
    );
    set(
        &mut v,
        at::CANNOT,
        has(&[
            "cannot",
            "can't",
            "unable",
            "could not",
            "couldn't",
            "failed to",
            "can not",
        ]),
    );
    set(
        &mut v,
        at::NOT_FOUND,
        has(&[
            "not found",
            "no such",
            "does not exist",
            "missing",
            "undefined",
            "unknown",
        ]),
    );
    set(
        &mut v,
        at::INVALID,
        has(&[
            "invalid",
            "illegal",
            "unexpected",
            "mismatch",
            "incompatible",
            "unsupported",
            "not supported",
            "expected",
        ]),
    );
    set(
        &mut v,
        at::TIMEOUT,
        has(&["timeout", "timed out", "deadline"]),
    );
    set(&mut v, at::MEMORY, has(&["memory", "oom", "alloc"]));
    set(
        &mut v,
        at::EXCEEDED,
        has(&["exceeded", "exhausted", "exceeds"]),
    );
    set(
        &mut v,
        at::LIMIT,
        has(&["limit", "too large", "too many", "budget"]),
    );
    set(
        &mut v,
        at::GPU_WORD,
        [
            "cuda", "nccl", "gpu", "cudnn", "cublas", "hip", "rocm", "device", "driver", "nvml",
            "xid", "kernel", "tensor",
        ]
        .iter()
        .any(|w| lower.contains(w)),
    );
    set(&mut v, at::STATUS_CONSTANT, status_constant(text));
    set(&mut v, at::STATUS_NUMBER, status_number(&lower));
    set(&mut v, at::QUIET_LEVEL, level(text) == Level::Quiet);
    set(&mut v, at::WARNING_WORD, has(&["warn", "deprecat"]));
    set(
        &mut v,
        at::INFO_WORD,
        has_word(&lower, "info") || has_word(&lower, "debug") || has_word(&lower, "notice"),
    );
    set(&mut v, at::SUMMARY, is_summary(text));
    set(&mut v, at::STACK_FRAME, frame);
    set(&mut v, at::TRACE_HEADER, header);
    set(
        &mut v,
        at::INDENTED,
        w.raw.starts_with("  ") || w.raw.starts_with('\t'),
    );
    set(
        &mut v,
        at::COMMAND,
        ["$ ", "+ ", "# ", ">>> ", "RUN ", "Run "]
            .iter()
            .any(|p| text.starts_with(p)),
    );
    let len = text.chars().count();
    set(&mut v, at::SHORT, len < 16);
    set(&mut v, at::LONG, len > 300);
    let digits = text.chars().filter(|c| c.is_ascii_digit()).count();
    set(&mut v, at::MOSTLY_DIGITS, len > 0 && digits * 5 > len * 2);
    set(
        &mut v,
        at::PROGRESS,
        has(&["%|", "it/s", "s/it", "━━", "epoch ", "step "]),
    );
    set(&mut v, at::URL, has(&["http://", "https://"]));
    set(
        &mut v,
        at::ADVICE,
        [
            "please", "try ", "hint", "note:", "you can", "you may", "consider", "to fix",
            "for more", "see ",
        ]
        .iter()
        .any(|p| lower.starts_with(p) || lower.contains(&format!(". {p}"))),
    );
    // Prose that introduces the message on the next lines: `the error message:`, `An error
    // occurred in a node:`, `Error:` alone.
    set(
        &mut v,
        at::INTRO_COLON,
        text.ends_with(':') && len < 60 && exception_class(text).is_none(),
    );
    set(
        &mut v,
        at::MARKDOWN,
        ["#", "- **", "**", "|"].iter().any(|p| text.starts_with(p)),
    );
    let code = text.trim_start();
    set(
        &mut v,
        at::RAISE_STATEMENT,
        ["raise ", "raise(", "return ", "throw "]
            .iter()
            .any(|p| code.starts_with(p)),
    );
    set(&mut v, at::WHAT_LINE, code.starts_with("what():"));
    Own {
        v,
        frame,
        header,
        python_frame,
        blank,
        key: repeat_key(&lower),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(lines: &[&str]) -> Vec<WindowLine> {
        (lines.iter().enumerate())
            .map(|(i, l)| WindowLine::new(i + 1, l.as_bytes()))
            .collect()
    }

    #[test]
    fn shapes_of_failures_are_read_across_languages() {
        assert_eq!(exception_class("RuntimeError: boom"), Some(0));
        assert_eq!(exception_class("raised torch.OutOfMemoryError: x"), Some(7));
        assert_eq!(exception_class("std::runtime_error caught"), None);
        assert_eq!(exception_class("java.lang.IllegalStateException"), Some(0));
        assert_eq!(exception_class("Error: bare"), None);
        assert!(status_constant("Status: RESOURCE_EXHAUSTED: out of memory"));
        assert!(!status_constant("set CUDA to 1"));
        assert!(status_number("process exited with code 137"));
        assert!(status_number("errno=12"));
        assert!(!status_number("status ok"));
        assert!(error_letter("E0617 12:00:00.1 123 file.cc:1] x"));
        assert!(error_letter("2024-01-01 [E:onnxruntime:, x] y"));
        assert!(!error_letter("Epoch 3"));
    }

    #[test]
    fn frames_of_several_runtimes_are_frames() {
        for (text, raw) in [
            (
                "File \"/a/b.py\", line 3, in f",
                "  File \"/a/b.py\", line 3, in f",
            ),
            ("at com.x.Y.run(Y.java:12)", "\tat com.x.Y.run(Y.java:12)"),
            (
                "/go/src/x/server.go:123 +0x1d",
                "\t/go/src/x/server.go:123 +0x1d",
            ),
            (
                "#3 0x00007f in foo () from /lib/x.so",
                "#3 0x00007f in foo () from /lib/x.so",
            ),
            (
                "frame #2: c10::Error::Error + 0x3e",
                "frame #2: c10::Error::Error + 0x3e",
            ),
        ] {
            let w = WindowLine::new(1, raw.as_bytes());
            assert!(is_frame(text, &w.raw) || text.starts_with("File"), "{text}");
        }
        assert!(!is_frame("RuntimeError: x", "RuntimeError: x"));
    }

    #[test]
    fn place_in_the_window_is_read() {
        let w = window(&[
            "loading",
            "panic: runtime error: index out of range [3] with length 3",
            "",
            "goroutine 1 [running]:",
            "main.main()",
            "\t/src/main.go:9 +0x1d",
            "exit status 2",
        ]);
        let v = vectors(&w);
        assert_eq!(v[1][at::BEFORE_FRAMES], 1.0);
        assert_eq!(v[1][at::FIRST_CUE], 1.0);
        assert_eq!(v[1][at::PANIC], 1.0);
        assert_eq!(v[3][at::TRACE_HEADER], 1.0);
        assert_eq!(v[5][at::STACK_FRAME], 1.0);
        assert_eq!(v[6][at::LAST_LINE], 1.0);
        assert_eq!(v[6][at::AFTER_FRAMES], 1.0);
        assert_eq!(v[6][at::FIRST_CUE], 0.0);
        assert!(is_cue(&v[1]) && !is_cue(&v[0]));
    }

    #[test]
    fn repeats_ignore_numbers() {
        let w = window(&["[rank0]: worker 0 died", "[rank1]: worker 1 died", "done"]);
        let v = vectors(&w);
        assert!(v[0][at::REPEATED] > 0.0);
        assert_eq!(v[2][at::REPEATED], 0.0);
    }

    #[test]
    fn names_and_indices_agree() {
        assert_eq!(NAMES[at::REPEATED], "repeated");
        assert_eq!(NAMES[at::STACK_FRAME], "stack_frame");
        assert_eq!(NAMES[at::QUIET_LEVEL], "quiet_level");
        let mut sorted = NAMES.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), FEATURES);
    }
}
