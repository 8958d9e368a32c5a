use super::Catalog;
use crate::rules::{Category, Classification, Ruleset};

fn classify(log: &str) -> Classification {
    Ruleset::builtin()
        .expect("builtin")
        .classify_bytes("-", log.as_bytes())
}

fn pytorch_only_steps(c: &Classification) -> Vec<&String> {
    let catalog = Catalog::builtin();
    c.next_steps
        .iter()
        .filter(|s| catalog.is_pytorch_only(s))
        .collect()
}

#[test]
fn the_catalog_parses_and_names_the_frameworks_the_engine_chapter_lists() {
    let catalog = Catalog::builtin();
    let names = catalog.names();
    for want in [
        "pytorch",
        "tensorflow",
        "jax",
        "rocm",
        "llama.cpp",
        "onnxruntime",
        "tensorrt",
        "triton",
        "paddle",
        "rapids",
        "cupy",
        "mlx",
        "kubernetes",
        "slurm",
        "docker",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    // Every advice entry names a framework of the catalog.
    for (fw, _) in catalog.advice.keys() {
        assert!(
            names.contains(&fw.as_str()),
            "advice for unknown framework {fw}"
        );
    }
}

#[test]
fn a_tensorflow_oom_gets_tensorflow_advice_and_no_pytorch_step() {
    let log = "  File \"/usr/lib/python3/site-packages/tensorflow/python/eager/execute.py\", line 54, in quick_execute\n    tensors = pywrap_tfe.TFE_Py_Execute(ctx._handle, device_name, op_name,\ntensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[256,1024,1024] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc [Op:MatMul]\n";
    let c = classify(log);
    assert_eq!(c.category, Category::OutOfMemory);
    assert_eq!(c.framework.as_deref(), Some("tensorflow"));
    assert!(pytorch_only_steps(&c).is_empty(), "{:?}", c.next_steps);
    assert!(
        c.next_steps.iter().any(|s| s.contains("set_memory_growth")),
        "{:?}",
        c.next_steps
    );
}

#[test]
fn a_jax_oom_gets_the_xla_client_variables_and_no_pytorch_step() {
    let log = "Traceback (most recent call last):\n  File \"/opt/venv/lib/python3.11/site-packages/jax/_src/interpreters/pxla.py\", line 1229, in __call__\njaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.\n";
    let c = classify(log);
    assert_eq!(c.category, Category::OutOfMemory);
    assert_eq!(c.framework.as_deref(), Some("jax"));
    assert!(pytorch_only_steps(&c).is_empty(), "{:?}", c.next_steps);
    assert!(
        c.next_steps
            .iter()
            .any(|s| s.contains("XLA_PYTHON_CLIENT_PREALLOCATE"))
    );
}

#[test]
fn a_llama_cpp_oom_is_told_about_gpu_layers_and_context_size() {
    let log = "llm_load_tensors: offloading 32 repeating layers to GPU\nggml_backend_cuda_buffer_type_alloc_buffer: allocating 4096.00 MiB on device 0: cudaMalloc failed: out of memory\n";
    let c = classify(log);
    assert_eq!(c.framework.as_deref(), Some("llama.cpp"), "{c:?}");
    assert!(pytorch_only_steps(&c).is_empty(), "{:?}", c.next_steps);
    if c.category == Category::OutOfMemory {
        assert!(
            c.next_steps.iter().any(|s| s.contains("-ngl")),
            "{:?}",
            c.next_steps
        );
    }
}

#[test]
fn a_pytorch_oom_keeps_the_pytorch_advice() {
    let log = "  File \"/usr/lib/python3/site-packages/torch/nn/modules/module.py\", line 1501, in _call_impl\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 7.79 GiB of which 8.00 MiB is free.\n";
    let c = classify(log);
    assert_eq!(c.category, Category::OutOfMemory);
    assert_eq!(c.framework.as_deref(), Some("pytorch"));
    assert!(!pytorch_only_steps(&c).is_empty(), "{:?}", c.next_steps);
}

#[test]
fn a_container_runtime_failure_is_recognised_as_docker() {
    let log = "$ docker run --gpus all nvcr.io/nvidia/pytorch:24.01-py3 nvidia-smi\ndocker: Error response from daemon: could not select device driver \"\" with capabilities: [[gpu]].\n";
    let c = classify(log);
    assert_eq!(c.framework.as_deref(), Some("docker"), "{c:?}");
}

#[test]
fn a_log_that_shows_no_framework_names_none_and_keeps_its_advice() {
    let log = "RuntimeError: CUDA error: an illegal memory access was encountered\n";
    let c = classify(log);
    assert_eq!(c.framework, None);
    let json = serde_json::to_value(&c).expect("serializes");
    assert!(json.get("framework").is_none());
    assert!(!c.next_steps.is_empty());
}

#[test]
fn framework_steps_come_before_the_general_ones_and_pytorch_steps_go() {
    let catalog = Catalog::builtin();
    let general = vec![
        "Reduce the batch size.".to_owned(),
        "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.".to_owned(),
    ];
    let mut steps = vec!["The rule's own step.".to_owned()];
    steps.extend(general.iter().cloned());
    let fitted = catalog.fit_steps(
        Some("jax"),
        Category::OutOfMemory,
        steps.clone(),
        &general,
        8,
    );
    assert_eq!(fitted[0], "The rule's own step.");
    assert!(
        fitted[1].contains("XLA_PYTHON_CLIENT_PREALLOCATE"),
        "{fitted:?}"
    );
    assert!(fitted.iter().all(|s| !s.contains("PYTORCH_")), "{fitted:?}");
    assert!(fitted.contains(&"Reduce the batch size.".to_owned()));
    // No framework: the steps are left as they are.
    let same = catalog.fit_steps(None, Category::OutOfMemory, steps.clone(), &general, 8);
    assert_eq!(same, steps);
    // At most `max` steps.
    assert_eq!(
        catalog
            .fit_steps(Some("jax"), Category::OutOfMemory, steps, &general, 2)
            .len(),
        2
    );
}
