//! The same failure re-run stays one group (issue 39, "Done when"): each failure below is
//! written once as a template and re-run in ten variants that change only what varies between
//! runs of one bug (timestamps, addresses, PIDs, ranks, hosts, temp paths, tensor values, batch
//! sizes, the line numbers of a function that moved); every variant must give the first one's
//! fingerprint. A different program (another file or function) must not.

use super::*;

static RULES: std::sync::LazyLock<Ruleset> =
    std::sync::LazyLock::new(|| Ruleset::builtin().expect("builtin ruleset compiles"));

/// What changes from one run of a failure to the next.
struct Run {
    /// A timestamp prefix.
    at: &'static str,
    /// A device or host memory address.
    addr: &'static str,
    pid: u32,
    rank: u32,
    host: &'static str,
    /// A temporary directory the run worked in.
    tmp: &'static str,
    /// A tensor value the failure prints.
    value: &'static str,
    batch: u32,
    /// The line the failing function is at (it moved between runs).
    line: u32,
}

const RUNS: [Run; 10] = [
    run(
        "2026-01-05T08:00:01Z",
        "0x7f3a2c000000",
        4242,
        0,
        "gpu-a01",
        "/tmp/tmpa1b2c3",
        "0.5",
        32,
        118,
    ),
    run(
        "2026-01-05 09:13:44",
        "0x7f00deadbeef",
        77,
        3,
        "gpu-a02",
        "/tmp/tmpzz9y8x",
        "-1.25",
        64,
        120,
    ),
    run(
        "[12:00:00.123]",
        "0x55d1c0ffee00",
        1,
        7,
        "node-17",
        "/var/tmp/job-88",
        "3",
        16,
        131,
    ),
    run(
        "Jan 06 10:11:12",
        "0x0000000000001",
        31337,
        1,
        "10.0.3.14",
        "/tmp/pymp-4xq1",
        "nan",
        8,
        97,
    ),
    run(
        "2026-02-01T00:00:00.000000Z",
        "0x7ffc1000",
        9,
        15,
        "ip-172-31-5-6",
        "/tmp/ray/session_1",
        "1e-05",
        128,
        118,
    ),
    run(
        "E0617 12:34:56.789012",
        "0xdeadbeef",
        120000,
        2,
        "dgx-b200-03",
        "/scratch/tmp/t3",
        "7.0",
        256,
        200,
    ),
    run(
        "2025-12-31 23:59:59,999",
        "0x1",
        5,
        31,
        "worker-0",
        "/tmp/torchelastic_abc",
        "inf",
        1,
        5,
    ),
    run(
        "t=1719999999",
        "0xffffffffffff",
        64000,
        4,
        "h100-pod-7",
        "/tmp/xyz/",
        "42",
        48,
        1118,
    ),
    run(
        "[2026-03-03 03:03:03]",
        "0x7f8f788e56bb",
        2,
        6,
        "a100-box",
        "/dev/shm/tmp9",
        "0.001",
        4,
        119,
    ),
    run(
        "06/01/2026 14:00",
        "0x10000",
        777,
        5,
        "cluster.local",
        "/tmp/tmp_q",
        "-0.0",
        512,
        64,
    ),
];

#[allow(clippy::too_many_arguments)]
const fn run(
    at: &'static str,
    addr: &'static str,
    pid: u32,
    rank: u32,
    host: &'static str,
    tmp: &'static str,
    value: &'static str,
    batch: u32,
    line: u32,
) -> Run {
    Run {
        at,
        addr,
        pid,
        rank,
        host,
        tmp,
        value,
        batch,
        line,
    }
}

/// An illegal memory access in the program's own `file`/`function`, with a traceback.
fn illegal_access(r: &Run, file: &str, function: &str) -> String {
    format!(
        "{at} INFO [pid {pid}] host {host} rank {rank}: step with batch_size={batch}, loss={value}\n\
         [rank{rank}]: Traceback (most recent call last):\n\
         [rank{rank}]:   File \"/home/ci/{tmp}/{file}\", line {top}, in <module>\n\
         [rank{rank}]:     main()\n\
         [rank{rank}]:   File \"/home/ci/{tmp}/{file}\", line {line}, in {function}\n\
         [rank{rank}]:     out = model(x)\n\
         [rank{rank}]: RuntimeError: CUDA error: an illegal memory access was encountered (address {addr})\n\
         [rank{rank}]: CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n",
        at = r.at,
        pid = r.pid,
        host = r.host,
        rank = r.rank,
        batch = r.batch,
        value = r.value,
        tmp = r.tmp,
        top = r.line + 40,
        line = r.line,
        addr = r.addr,
    )
}

/// A shape mismatch printed without a stack: the failure line alone, with this run's sizes,
/// after a line naming the run's host and pid (a re-run keeps its log's format, not its values).
fn broadcast(r: &Run, dim: u32) -> String {
    format!(
        "{at} starting on {host} as pid {pid}\n\
         2026-01-{day:02}T{hour:02}:00:00Z RuntimeError: The size of tensor a ({a}) must match the size of tensor b ({b}) at non-singleton dimension {dim}\n",
        at = r.at,
        pid = r.pid,
        host = r.host,
        day = 1 + r.pid % 28,
        hour = r.rank % 24,
        a = r.batch * 3,
        b = r.batch * 2,
    )
}

/// An out-of-memory in `function`, its sizes from this run's batch.
fn out_of_memory(r: &Run, function: &str) -> String {
    format!(
        "{at} [{host}:{pid}] Traceback (most recent call last):\n  \
         File \"{tmp}/job/train.py\", line {line}, in {function}\n    \
         logits = model(batch)\n\
         torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {mib}.00 MiB. GPU {rank} has a total capacity of 79.15 GiB of which {free}.06 MiB is free. Process {pid} has 78.90 GiB memory in use.\n",
        at = r.at,
        host = r.host,
        pid = r.pid,
        tmp = r.tmp,
        line = r.line,
        mib = r.batch * 64,
        rank = r.rank,
        free = r.batch,
    )
}

/// A collective timeout on this run's rank and host, with the program's frame.
fn collective_timeout(r: &Run, function: &str) -> String {
    format!(
        "[{host}] [rank{rank}]: Traceback (most recent call last):\n\
         [rank{rank}]:   File \"/work/{tmp}/dist_train.py\", line {line}, in {function}\n\
         [rank{rank}]:     dist.all_reduce(grad)\n\
         [rank{rank}]: torch.distributed.DistBackendError: [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn={n}, NumelOut={n}, Timeout(ms)=600000) ran for 600{pid} milliseconds before timing out.\n",
        host = r.host,
        rank = r.rank,
        tmp = r.tmp,
        line = r.line,
        seq = r.pid,
        n = r.batch * 1024,
        pid = r.pid % 1000,
    )
}

/// A driver too old, found by whatever code ran on this host.
fn driver_too_old(r: &Run) -> String {
    format!(
        "{at} {host} pid {pid}: /opt/venv{rank}/lib/python3.11/site-packages/torch/cuda/__init__.py:{line}: UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found version {found}). Please update your GPU driver.\n",
        at = r.at,
        host = r.host,
        pid = r.pid,
        rank = r.rank,
        line = r.line,
        found = 10000 + r.batch,
    )
}

/// Every run of `make` has the first run's fingerprint.
fn one_group(name: &str, make: impl Fn(&Run) -> String) -> String {
    let first = RULES.classify_bytes("-", make(&RUNS[0]).as_bytes());
    assert!(first.root_cause.is_some(), "{name}: {}", make(&RUNS[0]));
    for r in &RUNS[1..] {
        let log = make(r);
        let c = RULES.classify_bytes("-", log.as_bytes());
        assert_eq!(
            (&c.category, &c.fingerprint),
            (&first.category, &first.fingerprint),
            "{name}: this run split from the first:\n{log}\nsignature {:?} vs {:?}",
            c.signature,
            first.signature
        );
    }
    first.fingerprint
}

#[test]
fn the_same_failure_rerun_in_ten_variants_is_one_group() {
    let ima = one_group("illegal access", |r| illegal_access(r, "train.py", "step"));
    let shape = one_group("broadcast", |r| broadcast(r, 1));
    let oom = one_group("out of memory", |r| out_of_memory(r, "train_epoch"));
    let nccl = one_group("collective timeout", |r| collective_timeout(r, "sync"));
    let driver = one_group("driver too old", driver_too_old);
    let all = [&ima, &shape, &oom, &nccl, &driver];
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            assert_ne!(a, b, "two failures share a group");
        }
    }
}

#[test]
fn another_program_with_the_same_error_is_another_group() {
    let fp = |log: String| RULES.classify_bytes("-", log.as_bytes()).fingerprint;
    let r = &RUNS[0];
    assert_ne!(
        fp(illegal_access(r, "train.py", "step")),
        fp(illegal_access(r, "serve.py", "step"))
    );
    assert_ne!(
        fp(illegal_access(r, "train.py", "step")),
        fp(illegal_access(r, "train.py", "evaluate"))
    );
    // Without a stack, the axis that disagrees tells two mismatches apart.
    assert_ne!(fp(broadcast(r, 1)), fp(broadcast(r, 0)));
    assert_ne!(
        fp(out_of_memory(r, "train_epoch")),
        fp(out_of_memory(r, "validate"))
    );
    assert_ne!(
        fp(collective_timeout(r, "sync")),
        fp(collective_timeout(r, "gather_metrics"))
    );
}

/// Frames outside Python's own traceback format tell programs apart too: a Rich traceback's
/// boxed `file.py:line in function`, and the C++ site a c10 error was raised from (issue 39:
/// improve the signature of logs without a Python stack).
#[test]
fn rich_frames_and_cpp_raise_sites_are_part_of_the_signature() {
    let rich = |file: &str, line: u32| {
        format!(
            "│ /usr/local/lib/python3.10/dist-packages/peft/tuners/{file}:{line} in forward │\n\
             │ ❱ {line} │   result = F.linear(x, w) │\n\
             RuntimeError: mat1 and mat2 shapes cannot be multiplied (4096x4096 and 1x8388608)\n"
        )
    };
    let lora = RULES.classify_bytes("-", rich("lora.py", 565).as_bytes());
    assert!(
        lora.signature.ends_with(" lora.py:forward"),
        "{}",
        lora.signature
    );
    let moved = RULES.classify_bytes("-", rich("lora.py", 611).as_bytes());
    let other = RULES.classify_bytes("-", rich("ia3.py", 565).as_bytes());
    assert_eq!(lora.fingerprint, moved.fingerprint);
    assert_ne!(lora.fingerprint, other.fingerprint);

    let raised = |function: &str, file: &str| {
        format!(
            "terminate called after throwing an instance of 'c10::Error'\n  \
             what():  CUDA error: an illegal memory access was encountered\n\
             Exception raised from {function} at {file}:44 (most recent call first):\n"
        )
    };
    let check = RULES.classify_bytes(
        "-",
        raised(
            "c10_cuda_check_implementation",
            "../c10/cuda/CUDAException.cpp",
        )
        .as_bytes(),
    );
    let set_device = RULES.classify_bytes(
        "-",
        raised("SetDevice", "/pytorch/c10/hip/HIPFunctions.cpp").as_bytes(),
    );
    assert!(
        check
            .signature
            .ends_with(" CUDAException.cpp:c10_cuda_check_implementation"),
        "{}",
        check.signature
    );
    assert_ne!(check.fingerprint, set_device.fingerprint);
}

/// A cuDNN or cuBLAS status returned at run time is the program's failure: two programs'
/// `CUDNN_STATUS_EXECUTION_FAILED` are two groups, the same program's re-run one.
#[test]
fn library_statuses_at_run_time_group_by_the_programs_frames() {
    let cudnn = |file: &str, line: u32| {
        format!(
            "Traceback (most recent call last):\n  \
             File \"{file}\", line {line}, in forward\n    out, h = self.rnn(x)\n\
             RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED\n"
        )
    };
    let fp = |log: String| RULES.classify_bytes("-", log.as_bytes()).fingerprint;
    assert_eq!(fp(cudnn("dstp.py", 140)), fp(cudnn("dstp.py", 152)));
    assert_ne!(fp(cudnn("dstp.py", 140)), fp(cudnn("bilstm_crf.py", 31)));
    for id in ["cudnn.status", "cudnn.execution_failed", "cublas.status"] {
        let rule = RULES.rules.iter().find(|r| r.spec.id == id).expect(id);
        assert_eq!(rule.spec.failure_kind(), spec::FailureKind::Program, "{id}");
    }
}

/// A log that is the library's sentence alone (no frame, no code line, nothing the program
/// printed) is no evidence of which program failed: it joins only copies of itself, not
/// another program's paste of the same sentence, while the same sentence after a line of the
/// program's own output is keyed by the sentence and stays one group over re-runs (the
/// broadcast variants above). Grouping scheme 5.
#[test]
fn a_log_that_is_the_library_sentence_alone_joins_only_its_copies() {
    let fp = |log: &str| RULES.classify_bytes("-", log.as_bytes()).fingerprint;
    let advice = "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n\
                  For debugging consider passing CUDA_LAUNCH_BLOCKING=1.\n";
    let bare =
        format!("RuntimeError: CUDA error: an illegal memory access was encountered\n{advice}");
    let pasted = format!(
        "```\nRuntimeError: CUDA error: an illegal memory access was encountered\n{advice}\
         Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n```\n"
    );
    let with_code = format!(
        "    grad = grads[rank].clone().detach()\n\
         RuntimeError: CUDA error: an illegal memory access was encountered\n{advice}"
    );
    assert_eq!(fp(&bare), fp(&bare.clone()));
    assert_ne!(
        fp(&bare),
        fp(&pasted),
        "two pastes of the bare sentence joined"
    );
    assert_ne!(fp(&bare), fp(&with_code));
    // The same sentence with a code line: keyed by the sentence and not by the log's text,
    // so a re-run with other numbers around it is the same group.
    let rerun = with_code.replace("grads[rank]", "grads[rank]   ");
    assert_eq!(
        RULES.classify_bytes("-", rerun.as_bytes()).signature,
        RULES.classify_bytes("-", with_code.as_bytes()).signature
    );
    // Repeated asserts of one kernel, every thread's line, are the library alone too.
    let asserts = |block: u32| {
        (0..4)
            .map(|t| format!("/opt/conda/aten/src/ATen/native/cuda/Indexing.cu:1231: indexSelectSmallIndex: block: [{block},0,0], thread: [{t},0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n"))
            .collect::<String>()
    };
    let c = RULES.classify_bytes("-", asserts(31).as_bytes());
    assert!(c.root_cause.is_some());
    assert_ne!(c.fingerprint, fp(&format!("```\n{}```\n", asserts(5))));
}

/// A matrix product's mismatch without a stack is keyed by the layer's sizes: another batch
/// is the same group, another layer another (`F.linear` is every program's code line).
#[test]
fn a_matmul_mismatch_keeps_the_layers_sizes_and_drops_the_batch() {
    let log = |rows: u32, inner: u32, out: u32| {
        format!(
            "step 3 of epoch 1\n    return F.linear(input, self.weight, self.bias)\n\
             RuntimeError: mat1 and mat2 shapes cannot be multiplied ({rows}x{inner} and {out}x{out})\n"
        )
    };
    let fp = |log: String| RULES.classify_bytes("-", log.as_bytes()).fingerprint;
    assert_eq!(fp(log(2112, 1000, 96)), fp(log(64, 1000, 96)));
    assert_ne!(fp(log(2112, 1000, 96)), fp(log(64, 768, 1152)));
}

/// A missing kernel image's fix depends on the GPU's architecture: named (`sm_86`), every
/// program that met it joins; not named, the code that met it keys it, so two programs on
/// unnamed GPUs are two groups and one program re-run is one.
#[test]
fn an_unnamed_architecture_is_no_reason_to_join() {
    let log = |file: &str, line: u32, arch: &str| {
        format!(
            "{arch}Traceback (most recent call last):\n  \
             File \"/srv/{file}\", line {line}, in train\n    model.cuda()\n\
             RuntimeError: CUDA error: no kernel image is available for execution on the device\n"
        )
    };
    let named = "UserWarning: NVIDIA A40 with CUDA capability sm_86 is not compatible with the current PyTorch installation.\n";
    let fp = |log: String| RULES.classify_bytes("-", log.as_bytes()).fingerprint;
    assert_eq!(
        fp(log("pretrain.py", 40, "")),
        fp(log("pretrain.py", 52, ""))
    );
    assert_ne!(fp(log("pretrain.py", 40, "")), fp(log("webui.py", 40, "")));
    let c = RULES.classify_bytes("-", log("pretrain.py", 40, named).as_bytes());
    assert_eq!(c.facts.arch.as_deref(), Some("sm_86"), "{:?}", c.facts);
    assert_eq!(
        fp(log("pretrain.py", 40, named)),
        fp(log("webui.py", 40, named))
    );
}

/// A library's failure is keyed by the source site that printed it where no version is
/// printed: one build's cuDNN handle failure re-run is one group, another build's another.
#[test]
fn a_library_failure_keeps_the_site_it_was_printed_from() {
    let log = |at: &str, site: &str| {
        format!(
            "{at}: E tensorflow/stream_executor/cuda/{site}] Could not create cudnn handle: CUDNN_STATUS_INTERNAL_ERROR\n"
        )
    };
    let fp = |log: String| RULES.classify_bytes("-", log.as_bytes()).fingerprint;
    assert_eq!(
        fp(log("2019-05-08 02:09:42.922192", "cuda_dnn.cc:334")),
        fp(log("2020-01-01 10:00:00.000001", "cuda_dnn.cc:334"))
    );
    assert_ne!(
        fp(log("2019-05-08 02:09:42.922192", "cuda_dnn.cc:334")),
        fp(log("2019-05-08 02:09:42.922192", "cuda_dnn.cc:535"))
    );
}
