//! Logs no rule was written for (issue 40): the locator's root-cause line, the learned
//! fallback's category on it, the new families from their sources, and where the failure
//! happened (the failing rank, host and GPU).

use super::*;

/// One compiled ruleset for the module: its regexes compile lazily, once.
static RULES: std::sync::LazyLock<Ruleset> =
    std::sync::LazyLock::new(|| Ruleset::builtin().expect("builtin ruleset compiles"));

fn classify(text: &str) -> Classification {
    RULES.classify_bytes("-", text.as_bytes())
}

#[test]
fn a_failure_no_rule_knows_gets_the_located_line_and_groups_by_it() {
    let log = |n: u32| {
        format!(
            "step {n} loss 0.41\n\
             checkpoint writer: shard {n} upload refused by the object store (quota)\n\
             giving up after 3 retries\n"
        )
    };
    let (a, b) = (classify(&log(1)), classify(&log(2)));
    let root = a.root_cause.clone().expect("a located line");
    assert_eq!(root.rule, locator::LOCATOR_RULE);
    assert_eq!(root.line, 2, "{root:?}");
    assert_eq!(a.findings[0].role, Role::RootCause);
    assert_eq!(a.category, Category::Unknown);
    assert_eq!(
        a.fingerprint, b.fingerprint,
        "numbers do not split the group"
    );
    // Lines that say nothing of a failure are not located.
    let fine = classify("step 1 loss 0.41\nall shards uploaded\n");
    assert!(fine.root_cause.is_none(), "{:?}", fine.root_cause);
}

#[test]
fn the_fallback_reads_a_located_line_only_when_sure() {
    let oom = classify(
        "loading weights\n\
         vision.memory.BudgetExceeded: CUDA allocator could not allocate 2.00 GiB on GPU 0\n",
    );
    assert_eq!(oom.root_cause.as_ref().map(|r| r.line), Some(2));
    assert_eq!(oom.confidence, Confidence::Likely, "{oom:?}");
    assert_eq!(oom.category, Category::OutOfMemory);
    assert!(!oom.basis.is_empty());
    assert_eq!(oom.facts.failing_gpu.as_deref(), Some("cuda:0"));
    // A host-side failure that reads like a GPU one stays unknown.
    let killed = classify(
        "[ 14%] Building CUDA object x.cu.o\nsomething went wrong: worker died of signal 9\n",
    );
    assert_eq!(killed.category, Category::Unknown, "{killed:?}");
}

#[test]
fn new_families_name_their_failures() {
    let cases: &[(&str, &str, Category, usize)] = &[
        (
            "time=2025-08-18T10:11:30.205+02:00 level=INFO source=server.go:637 msg=\"llama runner started\"\n\
             SIGSEGV: segmentation violation\n\
             PC=0x10320b98c m=11 sigcode=2 addr=0xfffffffffffffff8\n\
             signal arrived during cgo execution\n\n\
             goroutine 66 gp=0x14000582c40 m=11 mp=0x140002a2808 [syscall]:\n",
            "go.runtime_signal",
            Category::Unknown,
            2,
        ),
        (
            "distributed.nanny - WARNING - Restarting worker\n\
             distributed.nanny - WARNING - Worker exceeded 95% memory budget. Restarting\n\
             ERROR:2020-11-20 04:09:51,165:jetstream.cli:('counts', <Worker 'tcp://127.0.0.1:34589'>)\n",
            "dask.worker_memory",
            Category::Unknown,
            2,
        ),
        (
            "gmake[2]: *** [x.dir/build.make:104: x.cc.o] Error 1\n\
             c++: fatal error: Killed signal terminated program cc1plus\n\
             compilation terminated.\n",
            "build.compiler_killed",
            Category::Unknown,
            2,
        ),
        (
            "onnxruntime.capi.onnxruntime_pybind11_state.Fail: [ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running BatchNormalization node. Name:'' Status Message: CUDNN error executing cudnnBatchNormalizationForwardInference( CudnnHandle(), mode, &alpha, &beta)\n",
            "onnxruntime.cudnn_error_executing",
            Category::LibraryError,
            1,
        ),
        (
            "mxnet.base.MXNetError: Error in operator fc1: Shape inconsistent, Provided = [128,784], inferred shape=[128,512]\n",
            "mxnet.incompatible_attr",
            Category::ShapeMismatch,
            1,
        ),
        (
            "2022-12-01T17:39:21.3663768Z make: *** [Makefile:22: test] Terminated\n\
             2022-12-01T17:39:21.5192954Z ##[error]The runner has received a shutdown signal. This can happen when the runner service is stopped, or a manually started runner is canceled.\n",
            "ci.runner_shutdown",
            Category::Unknown,
            2,
        ),
    ];
    for (log, rule, category, line) in cases {
        let c = classify(log);
        let root = c.root_cause.clone().expect("root cause");
        assert_eq!(
            (root.rule.as_str(), c.category, root.line),
            (*rule, *category, *line),
            "{log}"
        );
    }
    let mx = classify(
        "mxnet.base.MXNetError: Error in operator fc1: Shape inconsistent, Provided = [128,784], inferred shape=[128,512]\n",
    );
    assert_eq!(mx.facts.shapes, vec!["128x784", "128x512"]);
    assert_eq!(mx.framework.as_deref(), Some("mxnet"));
}

#[test]
fn the_failing_rank_host_and_gpu_are_facts_of_the_root_cause() {
    // Rank 3 on node-7 asserts; the other ranks' watchdogs time out after it.
    let log = "node-2: [rank0]:[E1120 10:00:00.1 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.\n\
               node-7: [rank3]: ../aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [0,0,0], thread: [0,0,0] Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of bounds\"` failed.\n\
               node-7: [rank3]: RuntimeError: CUDA error: device-side assert triggered\n\
               node-5: [rank1]:[E1120 10:00:00.2 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.\n";
    let c = classify(log);
    assert_eq!(c.category, Category::OutOfBounds, "{c:?}");
    assert_eq!(c.root_cause.as_ref().map(|r| r.line), Some(2));
    assert_eq!(c.facts.failing_rank, Some(3));
    assert_eq!(c.facts.failing_host.as_deref(), Some("node-7"));
    assert!(c.facts.ranks.contains(&0) && c.facts.ranks.contains(&3));
    let json = serde_json::to_value(&c.facts).expect("serializes");
    assert_eq!(json["failing_rank"], 3);
    // An NCCL warning names its host and CUDA device in its head.
    let nccl = classify(
        "gpu5:35917:35994 [1] transport/net_ib.cu:788 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<4711> with status=12 opcode=1 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.1 remoteGidsfe80::1\n",
    );
    assert_eq!(nccl.facts.failing_host.as_deref(), Some("gpu5"), "{nccl:?}");
    assert_eq!(nccl.facts.failing_gpu.as_deref(), Some("cuda:1"));
}
