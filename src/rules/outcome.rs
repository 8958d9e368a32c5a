//! What a reproduction run showed about the reported failure (issue 30 item 1): it failed
//! (`reproduced`), ran to the end (`did_not_fail`), was stopped at its time limit
//! (`timed_out`), could not be started by the worker (`sandbox_error`), or stopped for a reason
//! of the worker's environment before it could say anything about the failure
//! (`environment_error`: a module or the interpreter missing, an attachment the worker's Python
//! cannot compile, a call the sandbox denied).
//!
//! Only a `reproduced` run may name a "true failing line" or change a report's category: a
//! `ModuleNotFoundError` raised at `import torch` is the worker's problem, not the user's. The
//! decision is one pure function ([`decide`]) of the exit, the timeout, the worker's own error
//! and the run's traceback (its exception type and whether its failing frame is the script's
//! code beyond imports), shared by the worker (each repeated run) and the server (the run it
//! stores, its CPU follow-up, and old rows stored before outcomes were).

use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::ingest::traceback::{self, Traceback};

/// What a reproduction run showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The script failed: its output is the synchronous account of the failure.
    Reproduced,
    /// The script ran to the end (exit 0): the failure did not recur there.
    DidNotFail,
    /// The run stopped for a reason of the worker's environment (a module or the interpreter
    /// missing, a syntax error in the attachment, a call the sandbox denied) before it could
    /// say anything about the reported failure.
    EnvironmentError,
    /// The run was stopped at its wall-clock limit.
    TimedOut,
    /// The worker could not start the script (its sandbox failed).
    SandboxError,
}

impl Outcome {
    /// Every outcome.
    pub const ALL: [Outcome; 5] = [
        Outcome::Reproduced,
        Outcome::DidNotFail,
        Outcome::EnvironmentError,
        Outcome::TimedOut,
        Outcome::SandboxError,
    ];

    /// The spelling on the wire and in the `reproductions.outcome` column.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Reproduced => "reproduced",
            Outcome::DidNotFail => "did_not_fail",
            Outcome::EnvironmentError => "environment_error",
            Outcome::TimedOut => "timed_out",
            Outcome::SandboxError => "sandbox_error",
        }
    }

    /// The outcome spelled `s`, if it is one.
    #[must_use]
    pub fn parse(s: &str) -> Option<Outcome> {
        Outcome::ALL.into_iter().find(|o| o.as_str() == s)
    }

    /// The outcome in a few words, for people.
    #[must_use]
    pub fn words(self) -> &'static str {
        match self {
            Outcome::Reproduced => "Reproduced",
            Outcome::DidNotFail => "Did not fail",
            Outcome::EnvironmentError => "Environment error",
            Outcome::TimedOut => "Timed out",
            Outcome::SandboxError => "Sandbox error",
        }
    }

    /// Whether the run says something about the reported failure (it reached the user's code
    /// and ended there or ran on): false for the worker's own problems.
    #[must_use]
    pub fn is_informative(self) -> bool {
        !matches!(self, Outcome::EnvironmentError | Outcome::SandboxError)
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An outcome and, for the worker's own problems, what went wrong and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub outcome: Outcome,
    /// For `environment_error` and `sandbox_error`: what went wrong, in one sentence ("the
    /// worker's Python has no module named 'torch'"); else empty.
    pub reason: String,
    /// For `environment_error` and `sandbox_error`: how to fix the worker (or the script) so
    /// a re-queued run reaches the failure; else empty.
    pub fix: String,
}

impl Decision {
    fn plain(outcome: Outcome) -> Decision {
        Decision {
            outcome,
            reason: String::new(),
            fix: String::new(),
        }
    }

    fn environment(reason: String, fix: String) -> Decision {
        Decision {
            outcome: Outcome::EnvironmentError,
            reason,
            fix,
        }
    }
}

/// What is known of one run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Run<'a> {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// The worker's own failure to start the script, when it reported one instead of a run
    /// ("the sandbox could not start the script: bwrap: ...").
    pub worker_error: Option<&'a str>,
    /// The run's main traceback: the last one with frames in its output.
    pub traceback: Option<&'a Traceback>,
    /// The run's output (stderr, then stdout), for failures without a traceback.
    pub output: &'a str,
}

/// How a re-queued run can succeed once the worker's interpreter is right.
const REQUEUE: &str = "then re-queue this job";

/// What `run` showed. Pure.
///
/// In order: a worker error is a `sandbox_error` (an `environment_error` when it says the
/// interpreter is missing); the timeout is `timed_out`; exit 0 is `did_not_fail`; an uncaught
/// Python exception (exit 1) that is a missing or broken import, a syntax error, a call the
/// sandbox denied, or any exception whose failing frame in the user's code is an `import`
/// line is an `environment_error`; an interpreter that could not be executed (126/127 without a
/// traceback) is one too; any other failure is `reproduced`.
#[must_use]
pub fn decide(run: &Run<'_>) -> Decision {
    if let Some(error) = run.worker_error {
        return worker_error(error);
    }
    if run.timed_out {
        return Decision::plain(Outcome::TimedOut);
    }
    if run.exit_code == Some(0) && run.signal.is_none() {
        return Decision::plain(Outcome::DidNotFail);
    }
    if run.signal.is_none() {
        if run.exit_code == Some(1)
            && let Some(tb) = run.traceback
            && let Some(d) = environment(tb)
        {
            return d;
        }
        if matches!(run.exit_code, Some(126 | 127))
            && run.traceback.is_none()
            && let Some(line) = exec_failure(run.output)
        {
            return Decision::environment(
                format!("the worker's interpreter could not run the script: {line}"),
                format!(
                    "Start the worker with --python pointing at a Python interpreter (with \
                     torch for GPU scripts), {REQUEUE}."
                ),
            );
        }
    }
    Decision::plain(Outcome::Reproduced)
}

/// [`decide`] for a run's output as one text (stderr, then stdout): its main traceback is the
/// last one with frames. CPU work proportional to the output.
#[must_use]
pub fn of_output(
    exit_code: Option<i32>,
    signal: Option<i32>,
    timed_out: bool,
    output: &str,
) -> Decision {
    let tb = traceback::parse(output)
        .into_iter()
        .rev()
        .find(|tb| !tb.frames.is_empty());
    decide(&Run {
        exit_code,
        signal,
        timed_out,
        worker_error: None,
        traceback: tb.as_ref(),
        output,
    })
}

/// A worker's failure to start the script: the sandbox's, unless the interpreter is missing.
fn worker_error(error: &str) -> Decision {
    let missing = error.contains("No such file or directory")
        || error.contains("not found")
        || error.contains("not an executable file");
    let execs = error.contains("execvp") || error.contains("could not start");
    if missing && execs {
        return Decision::environment(
            format!(
                "the worker's interpreter could not be started: {}",
                first_line(error)
            ),
            format!(
                "Start the worker with --python pointing at an installed Python interpreter \
                 (with torch for GPU scripts), {REQUEUE}."
            ),
        );
    }
    let fix = if error.contains("abandoned") {
        format!("The worker was stopped during the run; {REQUEUE}.")
    } else {
        format!(
            "Check the worker's sandbox (bubblewrap installed and allowed to create namespaces; \
             the worker's log says more), {REQUEUE}."
        )
    };
    Decision {
        outcome: Outcome::SandboxError,
        reason: format!("the worker could not run the script: {}", first_line(error)),
        fix,
    }
}

/// `ModuleNotFoundError: No module named 'torch'` (also quoted with `"`).
static NO_MODULE: LazyLock<Regex> = LazyLock::new(|| re(r#"No module named ['"]([^'"]+)['"]"#));
/// `ImportError: cannot import name 'x' from 'y'`.
static CANNOT_IMPORT: LazyLock<Regex> =
    LazyLock::new(|| re(r#"cannot import name ['"]([^'"]+)['"] from ['"]([^'"]+)['"]"#));
/// What torch says when it has no GPU to run on: no driver, a CPU-only build, no device.
static NO_GPU: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Found no NVIDIA driver on your system|Torch not compiled with CUDA enabled|No CUDA GPUs are available",
    )
});
/// What a sandbox (no network, read-only system, its own uid) answers a script's call with.
static DENIED: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"\[Errno (?:1|13|30)\] (?:Operation not permitted|Permission denied|Read-only file system)|Network is unreachable|Temporary failure in name resolution|Name or service not known|No address associated with hostname",
    )
});

#[allow(
    clippy::expect_used,
    reason = "constant patterns; every one is exercised by the unit tests"
)]
fn re(pattern: &str) -> Regex {
    Regex::new(pattern).expect("constant outcome pattern compiles")
}

/// The environment problem a traceback shows, if it shows one.
fn environment(tb: &Traceback) -> Option<Decision> {
    let exception = tb.exception.as_deref()?.trim();
    let name = exception.split(':').next().unwrap_or_default().trim();
    let short = name.rsplit('.').next().unwrap_or(name);
    let frame = traceback::user_frame(tb);
    let at = frame.map(|f| {
        let file = f.file.rsplit(['/', '\\']).next().unwrap_or(&f.file);
        match &f.code {
            Some(code) => format!(" at {file}:{} `{code}`", f.line),
            None => format!(" at {file}:{}", f.line),
        }
    });
    let at = at.unwrap_or_default();
    if matches!(short, "ModuleNotFoundError" | "ImportError") {
        return Some(import_error(exception, short, &at));
    }
    if matches!(short, "SyntaxError" | "IndentationError" | "TabError") {
        return Some(Decision::environment(
            format!("the worker's Python cannot compile the script: {exception}{at}"),
            format!(
                "If the script needs a newer Python, start the worker with --python pointing at \
                 one and {REQUEUE}; otherwise fix the script and upload it again."
            ),
        ));
    }
    if NO_GPU.is_match(exception) {
        return Some(Decision::environment(
            format!("the worker's torch has no usable GPU: {exception}{at}"),
            format!(
                "Run this job on a worker with a GPU whose --python has a CUDA build of torch \
                 (a worker started with --no-gpu cannot run it; upload with needs=gpu), \
                 {REQUEUE}."
            ),
        ));
    }
    if short == "PermissionError" || DENIED.is_match(exception) {
        return Some(Decision::environment(
            format!("the sandbox denied a call the script made: {exception}{at}"),
            format!(
                "Reproduction runs have no network and a read-only system outside /tmp: make \
                 the script self-contained (no downloads, write under /tmp), or run a trusted \
                 worker with --unsafe-no-sandbox, {REQUEUE}."
            ),
        ));
    }
    let code = frame.and_then(|f| f.code.as_deref()).unwrap_or_default();
    if is_import(code) {
        return Some(Decision::environment(
            format!(
                "the script failed while importing, before reaching its own code: {exception}{at}"
            ),
            format!(
                "The worker's interpreter cannot import what the script imports: start the \
                 worker with --python pointing at one where `{code}` works, {REQUEUE}."
            ),
        ));
    }
    None
}

/// A missing or broken import: `exception` is the whole line, `name` its type.
fn import_error(exception: &str, name: &str, at: &str) -> Decision {
    if let Some(caps) = NO_MODULE.captures(exception) {
        let module = &caps[1];
        let top = module.split('.').next().unwrap_or(module);
        let fix = if top == "torch" {
            format!(
                "Start the worker with --python pointing at an interpreter that has torch (e.g. \
                 `gpu-triage worker --python /opt/venv/bin/python ...`), {REQUEUE}."
            )
        } else {
            format!(
                "Install `{top}` into the worker's interpreter, or start the worker with \
                 --python pointing at one that has it, {REQUEUE}. If `{top}` is your own code, \
                 put what the script needs into the script itself: only the attached file runs."
            )
        };
        return Decision::environment(
            format!("the worker's Python has no module named '{module}' ({name}{at})"),
            fix,
        );
    }
    if let Some(caps) = CANNOT_IMPORT.captures(exception) {
        let (item, from) = (&caps[1], &caps[2]);
        return Decision::environment(
            format!(
                "the worker's `{from}` has no `{item}` (another version than the script needs: {exception}{at})"
            ),
            format!(
                "Start the worker with --python pointing at an interpreter with the version of \
                 `{from}` the script was written for, {REQUEUE}."
            ),
        );
    }
    Decision::environment(
        format!("an import failed on the worker: {exception}{at}"),
        format!(
            "Start the worker with --python pointing at an interpreter where the script's \
             imports work (with torch for GPU scripts), {REQUEUE}."
        ),
    )
}

/// `import torch`, `import torch.nn as nn`, `from torch import nn`.
fn is_import(code: &str) -> bool {
    let code = code.trim();
    code.starts_with("import ") || (code.starts_with("from ") && code.contains(" import "))
}

/// The line of `output` saying the interpreter could not be executed, if one does.
fn exec_failure(output: &str) -> Option<String> {
    output
        .lines()
        .find(|l| {
            l.contains("not found")
                || l.contains("No such file or directory")
                || l.contains("cannot execute")
                || l.contains("Exec format error")
        })
        .map(|l| l.trim().chars().take(300).collect())
}

fn first_line(text: &str) -> String {
    text.lines()
        .next()
        .unwrap_or_default()
        .trim()
        .chars()
        .take(300)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decided(exit_code: Option<i32>, output: &str) -> Decision {
        of_output(exit_code, None, false, output)
    }

    const NO_TORCH: &str = "Traceback (most recent call last):\n  File \"/tmp/repro.py\", line 1, in <module>\n    import torch\nModuleNotFoundError: No module named 'torch'\n";
    const ASSERT: &str = "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1231: indexSelectSmallIndex: block: [3,0,0], thread: [1,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\nTraceback (most recent call last):\n  File \"/tmp/repro.py\", line 7, in <module>\n    out = emb(idx)\n  File \"/usr/lib/python3/dist-packages/torch/nn/modules/module.py\", line 1532, in _wrapped_call_impl\n    return self._call_impl(*args, **kwargs)\nRuntimeError: CUDA error: device-side assert triggered\n";

    #[test]
    fn a_missing_torch_at_import_is_the_workers_environment_with_the_python_fix() {
        let d = decided(Some(1), NO_TORCH);
        assert_eq!(d.outcome, Outcome::EnvironmentError);
        assert!(
            d.reason.contains("no module named 'torch'")
                && d.reason.contains("repro.py:1 `import torch`"),
            "{}",
            d.reason
        );
        assert!(
            d.fix.contains("--python") && d.fix.contains("torch"),
            "{}",
            d.fix
        );
        assert!(d.fix.contains("re-queue"), "{}", d.fix);
        // Under CPU translation the bootstrap's note comes first; the same rule holds.
        let cpu = format!(
            "gpu-triage: CPU translation run (CUDA redirected to the CPU); torch is not importable, the script runs unchanged\n{NO_TORCH}"
        );
        assert_eq!(decided(Some(1), &cpu).outcome, Outcome::EnvironmentError);
    }

    #[test]
    fn other_missing_modules_and_broken_imports_are_environment_errors_too() {
        let other = "Traceback (most recent call last):\n  File \"/tmp/repro.py\", line 2, in <module>\n    from transformers import AutoModel\nModuleNotFoundError: No module named 'transformers'\n";
        let d = decided(Some(1), other);
        assert_eq!(d.outcome, Outcome::EnvironmentError);
        assert!(d.fix.contains("Install `transformers`"), "{}", d.fix);
        // A missing module deep in the user's code (a lazy import) is the worker's too.
        let lazy = "Traceback (most recent call last):\n  File \"/tmp/repro.py\", line 9, in <module>\n    model = torch.compile(model)\n  File \"/usr/lib/python3/dist-packages/torch/_dynamo/eval_frame.py\", line 10, in compile\n    import triton\nModuleNotFoundError: No module named 'triton'\n";
        assert_eq!(decided(Some(1), lazy).outcome, Outcome::EnvironmentError);
        let version = "Traceback (most recent call last):\n  File \"/tmp/repro.py\", line 1, in <module>\n    from torch.nn.attention import sdpa_kernel\nImportError: cannot import name 'sdpa_kernel' from 'torch.nn.attention' (/venv/lib/python3.11/site-packages/torch/nn/attention/__init__.py)\n";
        let d = decided(Some(1), version);
        assert_eq!(d.outcome, Outcome::EnvironmentError);
        assert!(d.reason.contains("has no `sdpa_kernel`"), "{}", d.reason);
        // Any exception whose failing frame in the user's code is an import line: the script
        // never reached its own code (a CUDA library torch cannot load).
        let libs = "Traceback (most recent call last):\n  File \"/tmp/repro.py\", line 1, in <module>\n    import torch\n  File \"/venv/lib/python3.11/site-packages/torch/__init__.py\", line 290, in <module>\n    _load_global_deps()\nOSError: libcudnn.so.9: cannot open shared object file: No such file or directory\n";
        let d = decided(Some(1), libs);
        assert_eq!(d.outcome, Outcome::EnvironmentError);
        assert!(d.reason.contains("while importing"), "{}", d.reason);
        assert!(d.fix.contains("`import torch` works"), "{}", d.fix);
    }

    #[test]
    fn a_syntax_error_in_the_attachment_is_an_environment_error() {
        let py2 = "  File \"/tmp/repro.py\", line 3\n    print \"loss\", loss\n    ^^^^^^^^^^^^^^^^^^^\nSyntaxError: Missing parentheses in call to 'print'. Did you mean print(...)?\n";
        let d = decided(Some(1), py2);
        assert_eq!(d.outcome, Outcome::EnvironmentError, "{d:?}");
        assert!(
            d.reason.contains("cannot compile") && d.reason.contains("repro.py:3"),
            "{}",
            d.reason
        );
        let indent =
            "  File \"/tmp/repro.py\", line 5\n    y = x\nIndentationError: unexpected indent\n";
        assert_eq!(decided(Some(1), indent).outcome, Outcome::EnvironmentError);
    }

    #[test]
    fn a_call_the_sandbox_denied_is_an_environment_error() {
        let cases = [
            "Traceback (most recent call last):\n  File \"/tmp/repro.py\", line 4, in <module>\n    open(\"/data/cache.pt\", \"wb\")\nPermissionError: [Errno 13] Permission denied: '/data/cache.pt'\n",
            "Traceback (most recent call last):\n  File \"/tmp/repro.py\", line 4, in <module>\n    torch.save(x, \"/usr/x.pt\")\nOSError: [Errno 30] Read-only file system: '/usr/x.pt'\n",
            "Traceback (most recent call last):\n  File \"/tmp/repro.py\", line 3, in <module>\n    urllib.request.urlopen(url)\n  File \"/usr/lib/python3.11/urllib/request.py\", line 1351, in do_open\n    raise URLError(err)\nurllib.error.URLError: <urlopen error [Errno -3] Temporary failure in name resolution>\n",
        ];
        for case in cases {
            let d = decided(Some(1), case);
            assert_eq!(d.outcome, Outcome::EnvironmentError, "{case}");
            assert!(d.reason.contains("sandbox denied"), "{}", d.reason);
            assert!(d.fix.contains("--unsafe-no-sandbox"), "{}", d.fix);
        }
        // CUDA's own "operation not permitted" is a real failure, not the sandbox.
        let graph = "Traceback (most recent call last):\n  File \"/tmp/repro.py\", line 8, in <module>\n    y = model(x)\nRuntimeError: CUDA error: operation not permitted when stream is capturing\n";
        assert_eq!(decided(Some(1), graph).outcome, Outcome::Reproduced);
    }

    #[test]
    fn a_worker_whose_torch_has_no_gpu_is_an_environment_error() {
        for message in [
            "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx",
            "AssertionError: Torch not compiled with CUDA enabled",
            "RuntimeError: No CUDA GPUs are available",
        ] {
            let out = format!(
                "Traceback (most recent call last):\n  File \"/tmp/repro.py\", line 4, in <module>\n    free, total = torch.cuda.mem_get_info()\n{message}\n"
            );
            let d = decided(Some(1), &out);
            assert_eq!(d.outcome, Outcome::EnvironmentError, "{message}");
            assert!(d.fix.contains("worker with a GPU"), "{}", d.fix);
        }
    }

    #[test]
    fn a_failure_in_the_users_code_is_reproduced() {
        assert_eq!(decided(Some(1), ASSERT).outcome, Outcome::Reproduced);
        let d = decided(Some(1), ASSERT);
        assert!(d.reason.is_empty() && d.fix.is_empty());
        // A crash without a traceback, and a kill by a signal.
        assert_eq!(
            decided(
                Some(134),
                "terminate called after throwing an instance of 'c10::Error'\n"
            )
            .outcome,
            Outcome::Reproduced
        );
        assert_eq!(
            of_output(None, Some(11), false, "").outcome,
            Outcome::Reproduced
        );
        // A caught ImportError printed earlier does not make a later segfault environmental.
        let handled = format!("{NO_TORCH}Segmentation fault\n");
        assert_eq!(
            of_output(None, Some(11), false, &handled).outcome,
            Outcome::Reproduced
        );
    }

    #[test]
    fn exit_zero_did_not_fail_and_a_timeout_timed_out() {
        assert_eq!(decided(Some(0), "loss 2.3\n").outcome, Outcome::DidNotFail);
        // A script that catches its ImportError and exits 0 did not fail.
        assert_eq!(decided(Some(0), NO_TORCH).outcome, Outcome::DidNotFail);
        let d = of_output(None, Some(9), true, ASSERT);
        assert_eq!(d.outcome, Outcome::TimedOut);
        assert!(d.reason.is_empty());
    }

    #[test]
    fn an_interpreter_that_cannot_run_is_an_environment_error() {
        let d = decided(Some(127), "/bin/sh: 1: /opt/venv/bin/python: not found\n");
        assert_eq!(d.outcome, Outcome::EnvironmentError);
        assert!(
            d.reason.contains("not found") && d.fix.contains("--python"),
            "{d:?}"
        );
        let d = decide(&Run {
            worker_error: Some(
                "the sandbox could not start the script: bwrap: execvp /opt/venv/bin/python: No such file or directory",
            ),
            ..Run::default()
        });
        assert_eq!(d.outcome, Outcome::EnvironmentError);
        assert!(d.reason.contains("could not be started"), "{}", d.reason);
    }

    #[test]
    fn a_worker_that_could_not_start_the_script_is_a_sandbox_error() {
        let d = decide(&Run {
            worker_error: Some(
                "the sandbox could not start the script: bwrap: setting up uid map: Permission denied",
            ),
            ..Run::default()
        });
        assert_eq!(d.outcome, Outcome::SandboxError);
        assert!(d.reason.contains("setting up uid map"), "{}", d.reason);
        assert!(d.fix.contains("bubblewrap"), "{}", d.fix);
    }

    #[test]
    fn outcomes_round_trip_through_their_spelling() {
        for o in Outcome::ALL {
            assert_eq!(Outcome::parse(o.as_str()), Some(o));
            let json = serde_json::to_value(o).unwrap_or_default();
            assert_eq!(json.as_str(), Some(o.as_str()));
        }
        assert_eq!(Outcome::parse("Reproduced"), None);
        assert!(!Outcome::EnvironmentError.is_informative());
        assert!(Outcome::DidNotFail.is_informative());
    }
}
