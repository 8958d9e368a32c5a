//! Prefixes that operations tooling puts in front of a message, and the log level a line
//! states.
//!
//! Containers, schedulers, kernels and multi-process servers each add their own head to a line:
//! dmesg's `[ 7386.259769] `, the container runtime's `2023-10-19T11:11:54.95+08:00 stderr F `,
//! Go's `2023/10/19 03:11:54 `, compose's `trainer-1  | `, vLLM's and Ray's `(EngineCore
//! pid=42) `, a launcher's `[task 3] `, pdsh's host label `worker-1: `. [`strip_operations_prefix`]
//! peels one of them so a finding shows the message (and one failure on two hosts has one
//! signature), as `normalize` does for CI timestamps and rank prefixes.
//!
//! [`level`] reads the level a line announces (glog/absl `I0617 ...`, TensorFlow's `W
//! tensorflow/...cc:12]`, `[W:onnxruntime:...]`, `[TRT] [W]`, `INFO`/`WARNING` words, Python
//! warnings). A rule hit on an info or warning line is context: TensorFlow logs and retries an
//! allocation it could not make, PyTorch warns about a setting; such a line names the root cause
//! only when the log holds no failure at a higher level.

/// The level a line announces, as far as its prefix says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Informational or warning: context, not a root cause while a real failure exists.
    Quiet,
    /// An error, or no level stated (most messages carry none).
    Other,
}

/// Peels one prefix of the kinds listed in the module doc from the start of `s`; returns `s`
/// unchanged when it has none.
pub fn strip_operations_prefix(s: &str) -> &str {
    strip_operations_prefix_with(s, true)
}

/// As [`strip_operations_prefix`], leaving a host label in place (see
/// `normalize::host_label_of`).
pub(crate) fn strip_operations_prefix_except_host(s: &str) -> &str {
    strip_operations_prefix_with(s, false)
}

fn strip_operations_prefix_with(s: &str, hosts: bool) -> &str {
    let b = s.as_bytes();
    // dmesg: `[ 7386.259769] ` (seconds since boot) or `[  +0.000316] ` (dmesg -H deltas).
    if b.first() == Some(&b'[')
        && let Some(close) = s.find(']')
    {
        let inner = s[1..close].trim_start().trim_start_matches('+');
        let is_uptime = inner.split_once('.').is_some_and(|(a, f)| {
            !a.is_empty()
                && !f.is_empty()
                && a.bytes().all(|c| c.is_ascii_digit())
                && f.bytes().all(|c| c.is_ascii_digit())
        });
        if is_uptime {
            return s[close + 1..].trim_start();
        }
    }
    // CRI container log after its timestamp: `stderr F ` / `stdout P `.
    for stream in ["stderr ", "stdout "] {
        if let Some(rest) = s.strip_prefix(stream)
            && let Some(rest) = rest.strip_prefix("F ").or_else(|| rest.strip_prefix("P "))
        {
            return rest;
        }
    }
    // Go's log package: `2023/10/19 03:11:54 `.
    if b.len() > 20
        && b[4] == b'/'
        && b[7] == b'/'
        && b[10] == b' '
        && b[13] == b':'
        && b[..4].iter().all(u8::is_ascii_digit)
    {
        let mut i = 11;
        while b
            .get(i)
            .is_some_and(|c| c.is_ascii_digit() || matches!(c, b':' | b'.'))
        {
            i += 1;
        }
        if b.get(i) == Some(&b' ') {
            return &s[i + 1..];
        }
    }
    // Multi-process servers: `(EngineCore pid=42) `, `(pid=42) `, `(RayWorker pid=1, ip=...) `.
    if b.first() == Some(&b'(')
        && let Some(close) = s.find(')')
        && s[1..close].contains("pid=")
        && !s[1..close].contains('(')
    {
        return s[close + 1..].trim_start();
    }
    // docker compose: `trainer-1  | ` (a service name, spaces, a bar).
    if let Some(bar) = s.find(" | ")
        && bar > 0
        && bar <= 64
        && s[..bar]
            .trim_end()
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && !s[..bar].trim_end().is_empty()
        && s[..bar].ends_with(' ')
    {
        return &s[bar + 3..];
    }
    // A launcher's task label: `[task 3] `, `[task 3]: ` (the parallel-task runners that tag
    // each task's output).
    if let Some(rest) = s.strip_prefix("[task ")
        && let Some(close) = rest.find(']')
        && close > 0
        && !rest[..close].contains(char::is_whitespace)
    {
        let tail = &rest[close + 1..];
        return tail.strip_prefix(':').unwrap_or(tail).trim_start();
    }
    if hosts && let Some(rest) = strip_host_label(s) {
        return rest;
    }
    strip_progress_bar(s)
}

/// Programs whose own messages start `name: ` with a name that looks like a host
/// (`python3: can't open file`, `gcc-12: fatal error`): never peeled.
const PROGRAM_NAMES: [&str; 10] = [
    "python", "gcc", "clang", "cc", "nvcc", "ptxas", "ld", "cuda", "sm", "gfx",
];

/// The host label that pdsh and the launchers built on it (DeepSpeed's multi-node runner,
/// clush) put before every line a remote host prints: `worker-1: `, `node017: `,
/// `ip-10-0-3-7: `. A host name here is lowercase letters, digits and dashes ending in a
/// digit; a program's name (`python3: `, `gcc-12: `) and anything with a dot or an underscore
/// (`libcudart.so.12: `, `fc6_1: `) are left alone, so a message that starts with its own
/// subject keeps it.
pub(crate) fn strip_host_label(s: &str) -> Option<&str> {
    let colon = s.find(": ")?;
    let name = &s[..colon];
    let host_like = (2..=63).contains(&name.len())
        && name.as_bytes()[0].is_ascii_lowercase()
        && name.as_bytes()[name.len() - 1].is_ascii_digit()
        && name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !PROGRAM_NAMES.iter().any(|p| name.starts_with(p));
    let rest = s[colon + 2..].trim_start();
    (host_like && !rest.is_empty()).then_some(rest)
}

/// A progress bar (tqdm and its look-alikes) that the failure's message was printed right
/// after, on the same line: `Epoch 1:  45%|████▌     | 45/100 [00:10<00:12, 4.5it/s]` then the
/// error. The message after the bar is what a finding shows; a line that is only a bar is kept.
fn strip_progress_bar(s: &str) -> &str {
    let Some(percent) = s.find("%|") else {
        return s;
    };
    // The bar's percentage is 1-3 digits right before `%|`.
    let digits = s[..percent]
        .bytes()
        .rev()
        .take_while(u8::is_ascii_digit)
        .count();
    if digits == 0 || digits > 3 {
        return s;
    }
    let Some(close) = s[percent + 2..].find('|').map(|i| percent + 2 + i) else {
        return s;
    };
    let is_bar = |c: char| {
        c.is_whitespace() || "#=>-.*━╸╺".contains(c) || ('\u{2580}'..='\u{259F}').contains(&c)
    };
    if !s[percent + 2..close].chars().all(is_bar) {
        return s;
    }
    let mut rest = &s[close + 1..];
    // ` 45/100` then ` [00:10<00:12, 4.5it/s]`, each optional.
    let counted = rest.trim_start();
    let count_len = counted
        .bytes()
        .take_while(|c| c.is_ascii_digit() || matches!(c, b'/' | b'.' | b'k' | b'M' | b'G'))
        .count();
    if count_len > 0 {
        rest = &counted[count_len..];
    }
    let timed = rest.trim_start();
    if timed.starts_with('[')
        && let Some(end) = timed.find(']')
    {
        rest = &timed[end + 1..];
    }
    let message = rest.trim_start();
    if message.is_empty() { s } else { message }
}

/// The level `line` (already cleaned: no timestamp, no rank prefix) announces.
pub fn level(line: &str) -> Level {
    let b = line.as_bytes();
    let quiet = |c: u8| matches!(c, b'I' | b'W');
    // glog/absl/klog: `I0617 12:00:00.123456  1234 file.cc:12] `.
    if b.len() > 6 && quiet(b[0]) && b[1..5].iter().all(u8::is_ascii_digit) && b[5] == b' ' {
        return Level::Quiet;
    }
    // TensorFlow/XLA after its timestamp: `W tensorflow/core/...cc:12] `; PyTorch: `[W
    // socket.cpp:12] `, `[I1115 12:00:00.1 ProcessGroupNCCL.cpp:12] `.
    let head = line.strip_prefix('[').unwrap_or(line).as_bytes();
    if head.len() > 2 && quiet(head[0]) && (head[1] == b' ' || head[1].is_ascii_digit()) {
        let first_bracket = line.find(']');
        let first_space = line.find(' ');
        if first_bracket.is_some_and(|c| {
            let before = &line[..c];
            before.contains(":") && first_space.is_some_and(|sp| sp < c)
        }) {
            return Level::Quiet;
        }
    }
    const WORDS: [&str; 12] = [
        "INFO ",
        "INFO:",
        "INFO\t",
        "WARNING ",
        "WARNING:",
        "WARN ",
        "WARN:",
        "Warning:",
        "[INFO]",
        "[WARNING]",
        "[WARN]",
        "level=info",
    ];
    if WORDS.iter().any(|w| line.starts_with(w)) || line.starts_with("level=warn") {
        return Level::Quiet;
    }
    // ONNX Runtime `[W:onnxruntime:...]`, TensorRT `[TRT] [W]`, TensorRT-LLM `[TensorRT-LLM][WARNING]`.
    for marker in [
        "[W:onnxruntime",
        "[I:onnxruntime",
        "[V:onnxruntime",
        "] [W] ",
        "] [I] ",
        "][WARNING]",
        "][INFO]",
    ] {
        if line.find(marker).is_some_and(|at| at < 40) {
            return Level::Quiet;
        }
    }
    // Python warnings: `path.py:12: UserWarning: ...` or a bare `FutureWarning: ...`.
    let first_word = line.split_whitespace().next().unwrap_or("");
    if first_word.ends_with("Warning:") {
        return Level::Quiet;
    }
    if let Some(at) = line.find("Warning: ")
        && at < 400
    {
        let before = &line[..at];
        let word_start = before.rfind(' ').map_or(0, |i| i + 1);
        let word = &before[word_start..];
        if word.bytes().all(|c| c.is_ascii_alphanumeric()) && before[..word_start].contains(".py:")
        {
            return Level::Quiet;
        }
    }
    Level::Other
}

/// Whether `line` (cleaned) only summarises a failure printed elsewhere: a CI runner's exit
/// line, an `##[error]` echo, a launcher's `ChildFailedError` or `exitcode : 1` summary, an
/// `Error: ... exited with` wrapper. Such a line is context, as an info line is: it names the
/// root cause only when the log holds nothing better.
pub fn is_summary(line: &str) -> bool {
    const MARKERS: [&str; 9] = [
        "Process completed with exit code",
        "ChildFailedError",
        "exited with return code",
        "exited with exit code",
        "exited with code",
        "returned non-zero exit status",
        "Exited with exit code",
        "Error: Process completed",
        "Command exited with",
    ];
    line.starts_with("##[error]")
        || MARKERS.iter().any(|m| line.contains(m))
        || line
            .strip_prefix("exitcode")
            .is_some_and(|rest| rest.trim_start().starts_with(": ") && !rest.contains(": -"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_prefixes_are_peeled_to_the_message() {
        let cases = [
            (
                "[ 7386.259769] NVRM: Xid (PCI:0000:3b:00): 79, x",
                "NVRM: Xid (PCI:0000:3b:00): 79, x",
            ),
            (
                "[  +0.000316] pcieport 0000:00:03.0: AER",
                "pcieport 0000:00:03.0: AER",
            ),
            (
                "stderr F Failed to initialize NVML: x",
                "Failed to initialize NVML: x",
            ),
            (
                "2023/10/19 03:11:54 Failed to initialize NVML",
                "Failed to initialize NVML",
            ),
            ("(EngineCore pid=4242) ERROR boom", "ERROR boom"),
            (
                "(RayWorker pid=7, ip=10.0.0.2) RuntimeError: x",
                "RuntimeError: x",
            ),
            (
                "trainer-1  | RuntimeError: CUDA error",
                "RuntimeError: CUDA error",
            ),
            ("RuntimeError: a | b", "RuntimeError: a | b"),
            (
                "[task 3] RuntimeError: CUDA error",
                "RuntimeError: CUDA error",
            ),
            ("[task 0:1]: boom", "boom"),
            (
                "worker-1: torch.OutOfMemoryError: CUDA out of memory.",
                "torch.OutOfMemoryError: CUDA out of memory.",
            ),
            (
                "node017: Traceback (most recent call last):",
                "Traceback (most recent call last):",
            ),
            ("ip-10-0-3-7: NCCL WARN x", "NCCL WARN x"),
            (
                "python3: can't open file '/x.py'",
                "python3: can't open file '/x.py'",
            ),
            ("gcc-12: fatal error: Killed", "gcc-12: fatal error: Killed"),
            (
                "libcudart.so.12: cannot open shared object file",
                "libcudart.so.12: cannot open shared object file",
            ),
            (
                "nvidia-smi: command not found",
                "nvidia-smi: command not found",
            ),
            ("Error 1: x", "Error 1: x"),
            ("fc6_1: x", "fc6_1: x"),
            ("[rank0]: x", "[rank0]: x"),
            ("(most recent call last)", "(most recent call last)"),
        ];
        for (input, want) in cases {
            assert_eq!(strip_operations_prefix(input), want, "input {input:?}");
        }
    }

    #[test]
    fn launcher_and_ci_summaries_are_told_from_the_process_error() {
        for line in [
            "##[error]Process completed with exit code 1.",
            "Error: Process completed with exit code 2.",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
            "exitcode  : 1 (pid: 4242)",
            "Error: command python train.py exited with code 1",
        ] {
            assert!(is_summary(line), "{line:?}");
        }
        for line in [
            "RuntimeError: CUDA error: out of memory",
            "exitcode  : -9 (pid: 4242)",
            "error: Insufficient Memory",
        ] {
            assert!(!is_summary(line), "{line:?}");
        }
    }

    #[test]
    fn info_and_warning_lines_are_quiet_and_errors_are_not() {
        let quiet = [
            "I0617 12:00:00.123456  1234 gpu_device.cc:12] created device",
            "W tensorflow/core/common_runtime/bfc_allocator.cc:479] Allocator ran out of memory",
            "[W socket.cpp:663] [c10d] The client socket has failed to connect",
            "[W1115 10:00:00.1 ProcessGroupNCCL.cpp:1] Warning: something",
            "INFO 01-01 12:00:00 [worker.py:12] loading",
            "WARNING: the GPU is slow",
            "[W:onnxruntime:, session_state.cc:1162 VerifyEachNodeIsAssignedToAnEp] Some nodes were not assigned",
            "[07/06/2025-10:30:33] [TRT] [W] Tactic failed",
            "[TensorRT-LLM][WARNING] Fallback",
            "/usr/lib/python3/site-packages/torch/cuda/__init__.py:12: UserWarning: CUDA initialization",
            "FutureWarning: deprecated",
        ];
        for line in quiet {
            assert_eq!(level(line), Level::Quiet, "{line:?}");
        }
        let other = [
            "E0617 12:00:00.123456  1234 gpu_device.cc:12] failed",
            "E external/xla/xla/stream_executor/cuda/cuda_driver.cc:152] failed call to cuInit",
            "RuntimeError: CUDA error: out of memory",
            "Warning  Failed  2m17s  kubelet  Error: failed to start container",
            "NCCL WARN Duplicate GPU detected",
            "ERROR: failed",
            "Invalid argument: Incompatible shapes",
        ];
        for line in other {
            assert_eq!(level(line), Level::Other, "{line:?}");
        }
    }

    #[test]
    fn a_message_printed_right_after_a_progress_bar_is_peeled_from_it() {
        for (line, want) in [
            (
                "Epoch 1:  45%|████▌     | 45/100 [00:10<00:12, 4.50it/s]RuntimeError: CUDA error: out of memory",
                "RuntimeError: CUDA error: out of memory",
            ),
            (
                "100%|##########| 10/10 [00:01<00:00]  torch.OutOfMemoryError: CUDA out of memory.",
                "torch.OutOfMemoryError: CUDA out of memory.",
            ),
            (
                "  7%|▋         | 7/100 RuntimeError: boom",
                "RuntimeError: boom",
            ),
            // Only a bar, or no bar at all: unchanged.
            (
                "Epoch 1:  45%|████▌     | 45/100 [00:10<00:12, 4.50it/s]",
                "Epoch 1:  45%|████▌     | 45/100 [00:10<00:12, 4.50it/s]",
            ),
            ("load is 95%|high| CPU", "load is 95%|high| CPU"),
            ("ratio 1234%|x| y", "ratio 1234%|x| y"),
            (
                "RuntimeError: index 3 is out of bounds",
                "RuntimeError: index 3 is out of bounds",
            ),
        ] {
            assert_eq!(strip_progress_bar(line), want, "{line:?}");
        }
    }
}
