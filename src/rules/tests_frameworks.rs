//! One excerpt per framework family beyond PyTorch's core wordings, written from each library's
//! own message format: the category, the rule family that names it and the typed facts, so a
//! rule change that breaks a framework fails here and not only on the corpus.

use super::*;

/// One compiled ruleset for the module: its regexes compile lazily, once.
static RULES: std::sync::LazyLock<Ruleset> =
    std::sync::LazyLock::new(|| Ruleset::builtin().expect("builtin ruleset compiles"));

fn classify(text: &str) -> Classification {
    RULES.classify_bytes("-", text.as_bytes())
}

struct Case {
    log: &'static str,
    category: Category,
    /// The root-cause rule id starts with this (its family).
    family: &'static str,
    requested: Option<u64>,
    shapes: &'static [&'static str],
    dtypes: &'static [&'static str],
}

const fn case(log: &'static str, category: Category, family: &'static str) -> Case {
    Case {
        log,
        category,
        family,
        requested: None,
        shapes: &[],
        dtypes: &[],
    }
}

fn cases() -> Vec<Case> {
    use Category::*;
    vec![
        Case {
            requested: Some(1_342_177_280),
            ..case(
                "2024-03-01 10:00:00.123456: W tensorflow/core/common_runtime/bfc_allocator.cc:479] Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.25GiB (rounded to 1342177280)requested by op MatMul",
                OutOfMemory,
                "tf.",
            )
        },
        Case {
            shapes: &["32x784", "512x10"],
            ..case(
                "tensorflow.python.framework.errors_impl.InvalidArgumentError: Matrix size-incompatible: In[0]: [32,784], In[1]: [512,10] [Op:MatMul]",
                ShapeMismatch,
                "tf.",
            )
        },
        case(
            "tensorflow.python.framework.errors_impl.InvalidArgumentError: indices[5,2] = 10000 is not in [0, 10000) [Op:ResourceGather]",
            OutOfBounds,
            "tf.",
        ),
        Case {
            dtypes: &["int32", "float"],
            ..case(
                "tensorflow.python.framework.errors_impl.InvalidArgumentError: cannot compute Mul as input #1(zero-based) was expected to be a int32 tensor but is a float tensor [Op:Mul]",
                DtypeMismatch,
                "tf.",
            )
        },
        Case {
            requested: Some(17_179_869_184),
            ..case(
                "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.",
                OutOfMemory,
                "xla.",
            )
        },
        case(
            "ValueError: Received incompatible devices for jitted computation. Got argument x of f with shape float32[8] and device ids [0] on platform GPU and argument y of f with shape float32[8] and device ids [0] on platform CPU",
            DeviceMismatch,
            "jax.",
        ),
        Case {
            shapes: &["3x4", "5x4"],
            ..case(
                "TypeError: add got incompatible shapes for broadcasting: (3, 4), (5, 4).",
                ShapeMismatch,
                "jax.",
            )
        },
        Case {
            dtypes: &["bfloat16", "float32"],
            ..case(
                "TypeError: lax.add requires arguments to have the same dtypes, got bfloat16, float32.",
                DtypeMismatch,
                "jax.",
            )
        },
        Case {
            shapes: &["2x24", "3x24"],
            ..case(
                "jaxlib.xla_extension.XlaRuntimeError: INVALID_ARGUMENT: Binary op add with incompatible shapes: f32[2,24] and f32[3,24].",
                ShapeMismatch,
                "xla.",
            )
        },
        Case {
            requested: Some(2 << 30),
            ..case(
                "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 63.98 GiB of which 1.25 GiB is free.",
                OutOfMemory,
                "cuda.oom",
            )
        },
        case(
            "MIOpen(HIP): Error [Compile] 'hiprtcCompileProgram(prog.get(), c_options.size(), c_options.data())' naive_conv.cpp: HIPRTC_ERROR_COMPILATION (6)",
            LibraryError,
            "miopen.",
        ),
        case(
            "RuntimeError: CUDA error: HIPBLAS_STATUS_NOT_SUPPORTED when calling `hipblasLtMatmul( ltHandle, computeDesc.descriptor(), &alpha_val)`",
            LibraryError,
            "hipblas.",
        ),
        case(
            "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV cache (18352). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
            OutOfMemory,
            "vllm.",
        ),
        case(
            "E0000 00:00:1712345678.123456 1234 cuda_dnn.cc:535] Loaded runtime CuDNN library: 8.6.0 but source was compiled with: 8.9.4.  CuDNN library needs to have matching major version and equal or higher minor version.",
            DriverIssue,
            "",
        ),
        case(
            "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory",
            DriverIssue,
            "",
        ),
        case(
            "[ 5123.456] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
            DriverIssue,
            "cuda.xid",
        ),
        Case {
            shapes: &["-1x768"],
            ..case(
                "RuntimeError: shape '[-1, 768]' is invalid for input of size 1000",
                ShapeMismatch,
                "torch.",
            )
        },
        Case {
            requested: Some(8_589_934_592),
            ..case(
                "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 8,589,934,592 bytes (allocated so far: 4,294,967,296 bytes).",
                OutOfMemory,
                "cuda.",
            )
        },
        // Triton Inference Server prints shapes as `N dimensions (shape [..])` and types as
        // its wire names.
        Case {
            shapes: &["1x1000x1x1", "1001"],
            ..case(
                "E0827 01:50:19.658470 459 backend_model.cc:635] ERROR: Failed to create instance: model 'densenet_onnx', tensor 'fc6_1': the model expects 4 dimensions (shape [1,1000,1,1]) but the model configuration specifies 1 dimensions (shape [1001])",
                ShapeMismatch,
                "triton_server.",
            )
        },
        Case {
            shapes: &["-1x3x224x224", "1x224x224x3"],
            ..case(
                "[StatusCode.INVALID_ARGUMENT] [request id: <id_unknown>] unexpected shape for input 'input__0' for model 'resnet'. Expected [-1,3,224,224], got [1,224,224,3]. ",
                ShapeMismatch,
                "triton_server.",
            )
        },
        Case {
            dtypes: &["FP32", "FP64"],
            ..case(
                "tritonclient.utils.InferenceServerException: [StatusCode.INVALID_ARGUMENT] inference input 'INPUT0' data-type is 'FP64', but model 'simple' expects 'FP32'",
                DtypeMismatch,
                "triton_server.",
            )
        },
        // ggml's backends other than CUDA: SYCL's allocator, a HIP build's error name, the
        // model loader's buffer.
        Case {
            requested: Some(8_493_465_600),
            ..case(
                "ggml_backend_sycl_buffer_type_alloc_buffer: can't allocate 8493465600 Bytes of memory on device\nllama_model_load: error loading model: unable to allocate SYCL0 buffer\n",
                OutOfMemory,
                "ggml.",
            )
        },
        case(
            "ggml_cuda_init: found 1 ROCm devices:\nROCm error: out of memory\n  current device: 0, in function ggml_cuda_pool_malloc_leg at /app/ggml/src/ggml-cuda/ggml-cuda.cu:330\n",
            OutOfMemory,
            "ggml.",
        ),
        case(
            "llama_model_load: error loading model: unable to allocate Vulkan0 buffer\n",
            OutOfMemory,
            "ggml.",
        ),
    ]
}

#[test]
fn each_framework_family_is_classified_with_its_facts() {
    for case in cases() {
        let c = classify(case.log);
        let rule = c.root_cause.as_ref().map_or("", |r| r.rule.as_str());
        assert_eq!(c.category, case.category, "{rule}: {}", case.log);
        assert!(rule.starts_with(case.family), "{rule}: {}", case.log);
        if let Some(bytes) = case.requested {
            assert_eq!(c.facts.memory.requested_bytes, Some(bytes), "{}", case.log);
        }
        assert_eq!(c.facts.shapes, case.shapes, "{}", case.log);
        assert_eq!(c.facts.dtypes, case.dtypes, "{}", case.log);
    }
}

#[test]
fn jax_names_the_platforms_of_incompatible_devices() {
    let c = classify(cases()[5].log);
    assert_eq!(c.facts.devices, ["GPU", "CPU"]);
}

/// A runtime gets its own next steps and none written for PyTorch code (issue 29 item 4): no
/// `in_features` for a Triton configuration, no `PYTORCH_CUDA_ALLOC_CONF` for llama.cpp on ROCm.
#[test]
fn a_runtime_with_its_own_steps_gets_no_pytorch_training_advice() {
    for (log, framework) in [
        (cases()[cases().len() - 6].log, "triton"),
        (cases()[cases().len() - 2].log, "llama.cpp"),
    ] {
        let c = classify(log);
        assert_eq!(c.framework.as_deref(), Some(framework), "{log}");
        assert!(!c.next_steps.is_empty(), "{log}");
        for step in &c.next_steps {
            for pytorch in ["in_features", "PYTORCH_CUDA_ALLOC_CONF", "torch."] {
                assert!(!step.contains(pytorch), "{framework}: {step}");
            }
        }
    }
}

/// A driver, architecture or library failure is told without naming PyTorch when the log comes
/// from another framework or runtime (issue 39 item 7): the rule names the failure, and the
/// failure is the same whichever library ran into it.
#[test]
fn titles_of_logs_from_other_frameworks_do_not_name_torch() {
    for (log, framework) in [
        (
            "E0506 10:59:05.932885 1 model_repository_manager.cc:1234] failed to load 'densenet_onnx' version 1: Internal: onnx runtime error 1: /workspace/onnxruntime/onnxruntime/core/providers/cuda/cuda_call.cc:122 bool onnxruntime::CudaCall(ERRTYPE, const char*, const char*, ERRTYPE, const char*) [with ERRTYPE = cudaError; bool THRW = true] CUDA failure 35: CUDA driver version is insufficient for CUDA runtime version",
            "onnxruntime",
        ),
        (
            "offload_ffn_split: applying augmentation to model - please wait ...\nCUDA error 222 at /home/test/PowerInfer/ggml-cuda.cu:9635: the provided PTX was compiled with an unsupported toolchain.\ncurrent device: 0\n",
            "llama.cpp",
        ),
        (
            "2019-11-13 15:03:24.658577: W tensorflow/stream_executor/platform/default/dso_loader.cc:55] Could not load dynamic library 'libcuda.so.1'; dlerror: libcuda.so.1: cannot open shared object file: No such file or directory\n2019-11-13 15:03:24.658655: E tensorflow/stream_executor/cuda/cuda_driver.cc:318] failed call to cuInit: UNKNOWN ERROR (303)\n",
            "tensorflow",
        ),
    ] {
        let c = classify(log);
        assert_eq!(c.framework.as_deref(), Some(framework), "{log}");
        assert!(c.root_cause.is_some(), "{log}");
        assert!(
            !c.title.to_ascii_lowercase().contains("torch"),
            "{framework}: {}",
            c.title
        );
    }
}

/// No built-in rule whose examples include another framework's or a bare CUDA wording names
/// torch in its title: such a title would be shown for TensorFlow, JAX or llama.cpp logs.
#[test]
fn rules_whose_wording_is_not_pytorchs_have_titles_without_torch() {
    let others = [
        "tensorflow",
        "jax",
        "xla",
        "ggml",
        "llama",
        "onnx",
        "paddle",
        "tensorrt",
    ];
    for rule in RULES.rules.iter().map(|r| &r.spec) {
        let foreign = (rule.examples.iter())
            .any(|e| others.iter().any(|o| e.to_ascii_lowercase().contains(o)));
        if foreign {
            assert!(
                !rule.title.to_ascii_lowercase().contains("torch"),
                "{}: {}",
                rule.id,
                rule.title
            );
        }
    }
}

/// Schedulers, Ray and CI runners are frameworks of their own (issue 40 item 3): their logs are
/// named so, and get the scheduler's or runner's own next steps.
#[test]
fn schedulers_ray_and_buildkite_logs_get_their_own_steps() {
    for (log, framework, step) in [
        (
            "=>> PBS: job killed: walltime 3630 exceeded limit 3600\n",
            "pbs",
            "qstat -fx",
        ),
        (
            "TERM_RUNLIMIT: job killed after reaching LSF run time limit.\n",
            "lsf",
            "bjobs -l",
        ),
        (
            "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n",
            "ray",
            "ray logs",
        ),
        (
            "--- :python: run tests\nbuildkite-agent: starting\n🚨 Error: The command exited with status 137\n",
            "buildkite",
            "exit_status: -1",
        ),
    ] {
        let c = classify(log);
        assert_eq!(c.framework.as_deref(), Some(framework), "{log}");
        assert!(
            c.next_steps.iter().any(|s| s.contains(step)),
            "{framework}: {:?}",
            c.next_steps
        );
    }
}

/// Wordings of families the catalog gained from the libraries' own messages, and the facts they
/// carry in each runtime's spelling (issue 40 items 3 and 5).
#[test]
fn new_families_name_their_category_and_facts() {
    use Category::*;
    for (log, category, rule) in [
        (
            "RuntimeError: Executor creation failed due to insufficient GPU memory.\n",
            OutOfMemory,
            "runtime.insufficient_gpu_memory",
        ),
        (
            "[Mon Jan  5 10:00:00 2026] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:100\n",
            DriverIssue,
            "nvrm.gsp_rpc_failed",
        ),
        (
            "Failed to allocate device vector B (error code unknown error)!\n",
            DriverIssue,
            "driver.unknown_error",
        ),
        (
            "/usr/include/crt/host_config.h:132:2: error: #error -- unsupported GNU version! gcc versions later than 12 are not supported!\n",
            Unknown,
            "cuda.host_compiler_unsupported",
        ),
        (
            "error   : 'cicc' died with status 0xC0000005 (ACCESS_VIOLATION)\nninja: build stopped: subcommand failed.\n",
            Unknown,
            "build.nvcc_tool_killed",
        ),
        (
            "nvcc fatal   : Unsupported gpu architecture 'compute_30\n",
            DriverIssue,
            "torch.cpp_extension.nvcc_unsupported_arch",
        ),
    ] {
        let c = classify(log);
        let got = c.root_cause.as_ref().map_or("", |r| r.rule.as_str());
        assert_eq!((c.category, got), (category, rule), "{log}");
    }
    // ggml's abort ('%s:%d: %s') names the failure before the Go runtime's dump of the crash.
    let c = classify(
        "llama.cpp:9000: The current context does not support K-shift\nSIGSEGV: segmentation violation\nPC=0x7f0 m=0 sigcode=1\nsignal arrived during cgo execution\n",
    );
    assert_eq!(c.root_cause.map(|r| r.line), Some(1));
    // Paddle's OOM states what was left; MSVC's `struct c10::Half` and full-width parentheses
    // (retyped in CJK locales) still give the dtypes.
    let c = classify(
        "ResourceExhaustedError: Out of memory error on GPU 1. Cannot allocate 2.000000GB memory on GPU 1, available memory is only 512.000000MB.\n",
    );
    assert_eq!(c.facts.memory.requested_bytes, Some(2 << 30));
    assert_eq!(c.facts.memory.free_bytes, Some(512 << 20));
    let c = classify(
        "RuntimeError: Input type (float) and bias type (struct c10::Half) should be the same\n",
    );
    assert_eq!(c.facts.dtypes, ["float", "Half"]);
    let c = classify("Input type （Half） and weight type （float） Should be the same\n");
    assert_eq!(c.category, DtypeMismatch);
    assert_eq!(c.facts.dtypes, ["Half", "float"]);
}
