//! Failures outside the GPU taxonomy: each still names its root-cause line, a title of its own
//! and advice, and the failing process's own exception wins over launcher summaries and stray
//! error lines printed before the first traceback.

use super::*;

/// One compiled ruleset for the module: its regexes compile lazily, once.
static RULES: std::sync::LazyLock<Ruleset> =
    std::sync::LazyLock::new(|| Ruleset::builtin().expect("builtin ruleset compiles"));

fn classify(text: &str) -> Classification {
    RULES.classify_bytes("-", text.as_bytes())
}

/// (log, expected root-cause rule, expected 1-based line).
const CASES: &[(&str, &str, usize)] = &[
    // The kernel's report: the preamble comes first, the kill line names the process.
    (
        "python invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0\n\
         Mem-Info:\n\
         [441280.839852] Out of memory: Killed process 698405 (python) total-vm:49978204kB\n",
        "host.oom_killer",
        3,
    ),
    // torchelastic's -9 line outranks the ChildFailedError summary that re-raises it.
    (
        "WARNING: Sending process 1 closing signal SIGTERM\n\
         ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 (pid: 812917) of binary: /usr/bin/python\n\
         Traceback (most recent call last):\n\
         torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n\
         \x20 exitcode  : -9 (pid: 812917)\n",
        "launcher.killed",
        2,
    ),
    (
        "E1223 05:18:02.971000 3304089 torch/distributed/elastic/multiprocessing/api.py:882] failed (exitcode: -11) local_rank: 0 (pid: 3304209) of binary: /usr/bin/python3\n",
        "launcher.segfault",
        1,
    ),
    // exitcode 1: the worker's own exception above is the cause, not the launcher's summary.
    (
        "[rank0]: Traceback (most recent call last):\n\
         [rank0]:   File \"train.py\", line 3, in <module>\n\
         [rank0]: KeyError: 'pixel_values'\n\
         ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 1) of binary: /usr/bin/python\n\
         torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n",
        "python.exception",
        3,
    ),
    (
        "WARNING:torch.distributed.elastic.agent.server.api:Received 1 death signal, shutting down workers\n\
         torch.distributed.elastic.multiprocessing.api.SignalException: Process 1234 got signal: 15\n",
        "job.terminated",
        1,
    ),
    (
        "saving checkpoint\nOSError: [Errno 28] No space left on device: '/ckpt/step_9.pt'\n",
        "os.disk_full",
        2,
    ),
    (
        "building 'fused' extension\n\
         /src/ln_utils.cuh(18): error: identifier \"stderr\" is undefined\n\
         /src/ln_utils.cuh(18): error: identifier \"fprintf\" is undefined\n\
         ninja: build stopped: subcommand failed.\n\
         RuntimeError: Error compiling objects for extension\n",
        "build.compile_error",
        2,
    ),
    // unittest: the FAIL header comes first, the assertion that ends the traceback is the cause.
    (
        "FAIL: test_forward (tests.test_model.ModelTest)\n\
         Traceback (most recent call last):\n\
         \x20 File \"tests/test_model.py\", line 9, in test_forward\n\
         AssertionError: \n\
         Not equal to tolerance rtol=0.001, atol=0.001\n",
        "python.exception",
        4,
    ),
    (
        "    def test_matmul():\n\
         >       assert out == ref\n\
         E       AssertionError: assert 3 == 4\n\
         FAILED tests/test_ops.py::test_matmul - AssertionError: assert 3 == 4\n",
        "test.pytest_failure",
        3,
    ),
    (
        "Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f (most recent call first):\n",
        "process.fatal_signal",
        1,
    ),
];

#[test]
fn failures_outside_the_taxonomy_name_their_root_cause_line() {
    for (log, rule, line) in CASES {
        let c = classify(log);
        let rc = c
            .root_cause
            .as_ref()
            .unwrap_or_else(|| panic!("no root cause for {log:?}"));
        assert_eq!((rc.rule.as_str(), rc.line), (*rule, *line), "{log:?}");
        assert_eq!(c.category, Category::Unknown, "{log:?}");
        assert_ne!(c.title, "No known failure pattern found", "{log:?}");
        assert!(!c.next_steps.is_empty(), "{log:?}");
    }
}

#[test]
fn the_exception_that_ends_the_first_traceback_beats_earlier_error_lines() {
    let log = "wandb: Network error: retrying\n\
               ValueError: could not parse config, using defaults\n\
               epoch 1\n\
               Traceback (most recent call last):\n\
               \x20 File \"train.py\", line 40, in <module>\n\
               RuntimeError: stack expects a non-empty TensorList\n\
               \n\
               During handling of the above exception, another exception occurred:\n\
               \n\
               Traceback (most recent call last):\n\
               SystemExit: 1\n";
    let c = classify(log);
    let rc = c.root_cause.expect("a root cause");
    assert_eq!(rc.line, 6);
    assert!(
        rc.text.starts_with("RuntimeError: stack expects"),
        "{}",
        rc.text
    );
}

#[test]
fn a_gpu_rule_still_outranks_every_fallback() {
    let log = "Traceback (most recent call last):\n\
               RuntimeError: CUDA error: an illegal memory access was encountered\n\
               ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -6) local_rank: 0 (pid: 1) of binary: python\n";
    let c = classify(log);
    assert_eq!(c.category, Category::IllegalMemoryAccess);
    assert_eq!(c.root_cause.map(|r| r.line), Some(2));
}

#[test]
fn recurring_non_gpu_failures_share_a_fingerprint() {
    // Each run's log holds a line of the job's own (a log that is the failure's sentence alone
    // joins only copies of itself: grouping scheme 5, `tests_variants`).
    let a = classify(
        "python train.py --config big.yaml\n[100.1] Out of memory: Killed process 698405 (python) total-vm:49978204kB, anon-rss:12918388kB\n",
    );
    let b = classify(
        "python train.py --config big.yaml\n[900.7] Out of memory: Killed process 1234 (python) total-vm:51234567kB, anon-rss:13000001kB\n",
    );
    let other = classify("OSError: [Errno 28] No space left on device: '/ckpt/a.pt'\n");
    assert_eq!(a.fingerprint, b.fingerprint);
    assert_ne!(a.fingerprint, other.fingerprint);
}

#[test]
fn every_builtin_rule_and_context_names_its_source_library_and_file() {
    let file: spec::RuleFile = toml::from_str(BUILTIN_RULES).expect("builtin.toml parses");
    let entries = file
        .rule
        .iter()
        .map(|r| (&r.id, &r.source))
        .chain(file.context.iter().map(|c| (&c.id, &c.source)));
    for (id, source) in entries {
        // `library: path`, e.g. `pytorch: aten/src/ATen/native/cuda/Indexing.cu`.
        let (library, file) = source
            .split_once(": ")
            .unwrap_or_else(|| panic!("{id}: source {source:?} is not `library: file`"));
        assert!(
            !library.trim().is_empty() && !file.trim().is_empty(),
            "{id}: {source:?}"
        );
    }
}

#[test]
fn the_first_failing_ranks_own_error_outranks_the_other_ranks_timeouts() {
    let log = "[rank1]: Traceback (most recent call last):\n\
               [rank1]:   File \"train.py\", line 88, in <module>\n\
               [rank1]: KeyError: 'labels'\n\
               [rank0]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.\n\
               [rank2]:[E626 06:24:45.1 ProcessGroupNCCL.cpp:1316] [PG 0 Rank 2] Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=3\n\
               E0626 06:25:01.000000 1 torch/distributed/elastic/multiprocessing/api.py:882] failed (exitcode: 1) local_rank: 1 (pid: 4242) of binary: /usr/bin/python\n";
    let c = classify(log);
    let rc = c.root_cause.as_ref().expect("a root cause");
    assert_eq!((rc.line, rc.rule.as_str()), (3, "python.exception"));
    assert_eq!(c.category, Category::Unknown);
    assert_eq!(c.facts.ranks, vec![0, 1, 2]);
    let symptoms: Vec<&str> = c.findings[1..]
        .iter()
        .map(|f| f.category.as_str())
        .collect();
    assert!(symptoms.contains(&"nccl_error"), "{symptoms:?}");
}

#[test]
fn a_timeout_with_no_earlier_exception_is_still_the_root_cause() {
    let alone = classify(
        "[rank0]:[E626 06:24:44.9 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.\n",
    );
    assert_eq!(alone.category, Category::NcclError);
    // The timeout first, then the traceback its own exception ends: still the timeout.
    let first = classify(
        "[rank0]:[E626 06:24:44.9 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.\n\
         Traceback (most recent call last):\n\
         ValueError: the trainer stopped\n",
    );
    assert_eq!(first.category, Category::NcclError);
    assert_eq!(first.root_cause.map(|r| r.line), Some(1));
}
