//! Logs as operations teams see them: messages behind dmesg, container and compose prefixes,
//! wrapped NVRM blocks, info and warning lines next to the real failure, CI summaries after it,
//! and runtimes outside PyTorch. The root-cause line is always the physical input line.

use super::*;

/// One compiled ruleset for the module: its regexes compile lazily, once.
static RULES: std::sync::LazyLock<Ruleset> =
    std::sync::LazyLock::new(|| Ruleset::builtin().expect("builtin ruleset compiles"));

fn classify(text: &str) -> Classification {
    RULES.classify_bytes("-", text.as_bytes())
}

/// (log, expected category, expected root-cause rule, expected 1-based line).
const CASES: &[(&str, Category, &str, usize)] = &[
    // The container toolkit refuses an image that needs a newer driver; docker's wrapper first.
    (
        "Unable to find image 'nvcr.io/nvidia/pytorch:25.01-py3' locally\n\
         docker: Error response from daemon: failed to create task for container: OCI runtime create failed: error running prestart hook #0: exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'\n\
         nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8, please update your driver to a newer version, or use an earlier cuda container: unknown.\n",
        Category::DriverIssue,
        "container.cli_requirement",
        3,
    ),
    // nccl-tests puts the host name in front of its failure line.
    (
        "#  Rank  0 Group  0 Pid  100 on node-a device  0 [0x1b] NVIDIA H100 80GB HBM3\n\
         node-a: Test NCCL failure common.cu:1030 'remote process exited or there was a network error / '\n\
          .. node-a pid 100: Test failure common.cu:900\n",
        Category::NcclError,
        "nccl_tests.failure",
        2,
    ),
    // A ptxas error in a CUDA build; make's and the CI runner's summaries follow it.
    (
        "[ 12%] Building CUDA object CMakeFiles/kern.dir/kern.cu.o\n\
         ptxas error   : Entry function '_Z4stepPfS_i' uses too much shared data (0x18000 bytes, 0xc000 max)\n\
         make[2]: *** [CMakeFiles/kern.dir/kern.cu.o] Error 1\n\
         ##[error]Process completed with exit code 2.\n",
        Category::Unknown,
        "build.ptxas_error",
        2,
    ),
    // An LSF limit is the whole story of a short scheduler report.
    (
        "TERM_RUNLIMIT: job killed after reaching LSF run time limit.\n\
         Exited with exit code 140.\n",
        Category::Unknown,
        "lsf.limit",
        1,
    ),
    // compute-sanitizer's report: the out-of-bounds address outranks the access line.
    (
        "========= COMPUTE-SANITIZER\n\
         ========= Invalid __global__ write of size 4 bytes\n\
         =========     at scale(float *, int)+0x70 in kernels.cu:12\n\
         =========     by thread (255,0,0) in block (3,0,0)\n\
         =========     Address 0x7f0a2c000400 is out of bounds\n",
        Category::OutOfBounds,
        "sanitizer.out_of_bounds_address",
        5,
    ),
    // A Go device plugin's error behind the container log's timestamp and stream tag.
    (
        "2025-01-02T03:04:05.123456789Z stderr F I0102 03:04:05.123 1 main.go:100] Starting plugin\n\
         2025-01-02T03:04:05.223456789Z stderr F E0102 03:04:05.223 1 main.go:120] Failed to initialize NVML: could not load NVML library.\n",
        Category::DriverIssue,
        "nvml.library_not_found",
        2,
    ),
];

#[test]
fn operations_and_runtime_logs_name_their_failure_and_its_physical_line() {
    for (log, category, rule, line) in CASES {
        let c = classify(log);
        let root = c
            .root_cause
            .as_ref()
            .unwrap_or_else(|| panic!("no root: {log}"));
        assert_eq!(
            (c.category, root.rule.as_str(), root.line),
            (*category, *rule, *line),
            "{log}"
        );
    }
}

#[test]
fn an_info_level_allocation_retry_is_context_when_another_failure_killed_the_process() {
    let log = "2025-01-02 10:00:00.000001: I tensorflow/core/common_runtime/gpu/gpu_device.cc:1600] Created device /job:localhost/replica:0/task:0/device:GPU:0\n\
               2025-01-02 10:00:01.000001: I external/local_xla/xla/stream_executor/cuda/cuda_driver.cc:1000] failed to allocate 6.48G (6958349824 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory\n\
               Traceback (most recent call last):\n\
               \x20 File \"train.py\", line 3, in <module>\n\
               ModuleNotFoundError: No module named 'tensorflow_addons'\n";
    let c = classify(log);
    assert_eq!(c.category, Category::Unknown);
    assert_eq!(c.root_cause.map(|r| r.line), Some(5));
}

#[test]
fn a_warning_line_of_the_same_kind_as_the_error_still_states_the_request() {
    let log = "InternalError: Failed copying input tensor from CPU:0 to GPU:0 in order to run _EagerConst: Dst tensor is not initialized.\n\
               2025-01-02 10:00:01.000001: W tensorflow/core/common_runtime/bfc_allocator.cc:479] Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.50GiB (rounded to 1610612736)requested by op _EagerConst\n";
    let c = classify(log);
    assert_eq!(c.category, Category::OutOfMemory);
    assert_eq!(c.facts.memory.requested_bytes, Some(1_610_612_736));
}

#[test]
fn a_dmesg_prefix_is_set_aside_and_a_wrapped_nvrm_message_is_read_whole() {
    let log = "[ 4021.118811] NVRM: API mismatch: the client has the version 550.90.07, but\n\
               [ 4021.118811] NVRM: this kernel module has the version 535.183.01.  Please\n";
    let c = classify(log);
    let root = c.root_cause.expect("root cause");
    assert_eq!((c.category, root.line), (Category::DriverIssue, 1));
    assert!(root.text.starts_with("NVRM: API mismatch"), "{}", root.text);
    assert_eq!(c.facts.driver_version.as_deref(), Some("550.90.07"));
}

#[test]
fn a_compose_service_prefix_is_set_aside_from_the_finding_text() {
    let log = "trainer-1  | Loading model\n\
               trainer-1  | RuntimeError: CUDA error: an illegal memory access was encountered\n";
    let c = classify(log);
    let root = c.root_cause.expect("root cause");
    assert_eq!(c.category, Category::IllegalMemoryAccess);
    assert_eq!(root.line, 2);
    assert!(root.text.starts_with("RuntimeError:"), "{}", root.text);
}

#[test]
fn a_log_without_a_failure_has_no_root_cause_line() {
    let log = "INFO 01-02 10:00:00 [engine.py:100] model loaded in 12.3 s\n\
               epoch 1: loss 0.41 accuracy 0.88\n\
               saved checkpoint to /ckpt/epoch1.pt\n";
    let c = classify(log);
    assert_eq!(c.category, Category::Unknown);
    assert!(c.root_cause.is_none(), "{:?}", c.root_cause);
}

#[test]
fn onnx_runtime_dtypes_are_read_from_their_tensor_spelling() {
    let log = "onnxruntime.capi.onnxruntime_pybind11_state.InvalidArgument: [ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Unexpected input data type. Actual: (tensor(float16)) , expected: (tensor(float))\n";
    let c = classify(log);
    assert_eq!(c.category, Category::DtypeMismatch);
    assert_eq!(
        c.facts.dtypes,
        vec!["float".to_owned(), "float16".to_owned()]
    );
}

/// A failure printed right after a progress bar on the same line (issue 30 item 8): the
/// root-cause text is the message, without the bar.
#[test]
fn a_failure_printed_after_a_progress_bar_is_named_without_the_bar() {
    let c = classify(
        "Epoch 1:  45%|████▌     | 45/100 [00:10<00:12, 4.50it/s]torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.20 GiB is free.\n",
    );
    assert_eq!(c.category, Category::OutOfMemory, "{c:?}");
    let root = c.root_cause.expect("root cause");
    assert!(
        root.text
            .starts_with("torch.OutOfMemoryError: CUDA out of memory"),
        "{}",
        root.text
    );
}

/// pdsh (and DeepSpeed's multi-node runner) labels every line with its host; a launcher may
/// label them `[task N]`. The finding shows the message, and the same failure on two hosts has
/// one signature, so it lands in one group.
#[test]
fn host_and_task_labels_are_set_aside_and_do_not_split_a_failure_by_host() {
    let on = |host: &str| {
        format!(
            "{host}: Traceback (most recent call last):\n\
             {host}:   File \"/workspace/train.py\", line 88, in <module>\n\
             {host}:     loss = engine(batch)\n\
             {host}: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.15 GiB of which 1.02 GiB is free.\n"
        )
    };
    let (a, b) = (classify(&on("worker-1")), classify(&on("node017")));
    for c in [&a, &b] {
        assert_eq!(c.category, Category::OutOfMemory);
        let root = c.root_cause.as_ref().expect("root cause");
        assert_eq!(root.line, 4);
        assert!(
            root.text.starts_with("torch.OutOfMemoryError"),
            "{}",
            root.text
        );
        assert_eq!(c.facts.memory.requested_bytes, Some(2 << 30));
    }
    assert_eq!(a.signature, b.signature);
    assert_eq!(a.fingerprint, b.fingerprint);

    let task = classify(
        "[task 3] Traceback (most recent call last):\n\
         [task 3]   File \"/app/run.py\", line 12, in <module>\n\
         [task 3] RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!\n",
    );
    assert_eq!(task.category, Category::DeviceMismatch);
    let root = task.root_cause.expect("root cause");
    assert!(
        root.text.starts_with("RuntimeError: Expected all"),
        "{}",
        root.text
    );
    assert_eq!(task.facts.devices, ["cuda:0", "cpu"]);
}

/// `kubectl describe` prints a container's termination message under `Message:` as it was
/// written, so the runtime's error continues on the lines after the field; the event table
/// wraps a long event over an indented line. The failure is still named from those lines.
#[test]
fn a_kubectl_describe_message_and_its_continuation_lines_are_read() {
    let c = classify(
        "    Last State:     Terminated\n\
         \x20     Reason:       StartError\n\
         \x20     Message:      failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: error running\n\
         \x20hook #0: error running hook: exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'\n\
         nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown\n\
         \x20     Exit Code:    128\n",
    );
    assert_eq!(c.category, Category::DriverIssue);
    let root = c.root_cause.expect("root cause");
    assert_eq!(root.line, 5, "{}", root.text);

    let events = classify(
        "Events:\n\
         \x20 Type     Reason            Age   From               Message\n\
         \x20 Warning  FailedScheduling  12s   default-scheduler  0/4 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 3\n\
         \x20          Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: 3 No preemption victims found for incoming pod.\n",
    );
    let root = events.root_cause.expect("root cause");
    assert!(
        root.text.contains("Insufficient nvidia.com/gpu"),
        "{}",
        root.text
    );
    assert_eq!(events.framework.as_deref(), Some("kubernetes"));
}
