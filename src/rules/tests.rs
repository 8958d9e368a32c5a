//! Behaviour of the whole engine on short, realistic excerpts: one case per rule family, the
//! cascade ranking, typed facts, fingerprints and odd inputs.

use super::*;

fn classify(text: &str) -> Classification {
    let rs = Ruleset::builtin().expect("builtin ruleset compiles");
    rs.classify_bytes("-", text.as_bytes())
}

#[test]
fn each_family_is_recognised_on_its_own_message() {
    let cases = [
        (
            "IndexError: Target 10 is out of bounds.",
            Category::OutOfBounds,
        ),
        (
            "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
            Category::DeviceMismatch,
        ),
        (
            "RuntimeError: expected scalar type Half but found Float",
            Category::DtypeMismatch,
        ),
        (
            "RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x512 and 256x10)",
            Category::ShapeMismatch,
        ),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.06 GiB is free.",
            Category::OutOfMemory,
        ),
        (
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            Category::IllegalMemoryAccess,
        ),
        (
            "RuntimeError: CUDA error: no kernel image is available for execution on the device",
            Category::DriverIssue,
        ),
        (
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
            Category::NcclError,
        ),
        (
            "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.",
            Category::LibraryError,
        ),
        (
            "ValueError: too many values to unpack (expected 2)",
            Category::Unknown,
        ),
        (
            "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
            Category::OutOfMemory,
        ),
        (
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus.",
            Category::DriverIssue,
        ),
        (
            "Duplicate GPU detected : rank 3 and rank 1 both on CUDA device 61000",
            Category::NcclError,
        ),
    ];
    for (text, want) in cases {
        let c = classify(text);
        assert_eq!(c.category, want, "{text}");
        assert_eq!(c.root_cause.as_ref().map(|r| r.line), Some(1), "{text}");
    }
}

#[test]
fn the_first_specific_failure_of_a_cascade_is_the_root_cause() {
    let log = "\
Epoch 1: 10%
[rank1]: /pytorch/aten/src/ATen/native/cuda/Indexing.cu:1231: indexSelectSmallIndex: block: [3,0,0], thread: [1,0,0] Assertion `srcIndex < srcSelectDimSize` failed.
Traceback (most recent call last):
  File \"train.py\", line 57, in <module>
    loss.item()
RuntimeError: CUDA error: device-side assert triggered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle)`
[rank0]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.
";
    let c = classify(log);
    assert_eq!(c.category, Category::OutOfBounds);
    let root = c.root_cause.expect("a root cause");
    assert_eq!((root.line, root.rule.as_str()), (2, "cuda.assert.index"));
    assert!(root.text.starts_with("/pytorch/aten"), "{}", root.text);
    assert!(c.async_hint);
    assert_eq!(c.findings[0].role, Role::RootCause);
    let symptoms: Vec<(usize, &str)> = c.findings[1..]
        .iter()
        .map(|f| (f.line, f.rule.as_str()))
        .collect();
    assert_eq!(
        symptoms,
        vec![
            (6, "cuda.device_side_assert"),
            (8, "cublas.status"),
            (9, "nccl.watchdog_timeout")
        ]
    );
    assert_eq!(c.facts.ranks, vec![0, 1]);
    assert!(
        c.next_steps[0].contains("CUDA_LAUNCH_BLOCKING=1"),
        "{:?}",
        c.next_steps
    );
}

#[test]
fn facts_are_typed() {
    let c = classify(
        "RuntimeError: CUDA out of memory. Tried to allocate 86.00 MiB (GPU 0; 11.75 GiB total capacity; 10.1 GiB already allocated; 85.81 MiB free; 10.5 GiB reserved in total by PyTorch)",
    );
    assert_eq!(c.facts.memory.requested_bytes, Some(90_177_536));
    assert_eq!(c.facts.memory.total_bytes, Some(12_616_466_432));
    assert_eq!(c.facts.memory.free_bytes, Some(89_978_307));
    assert!(
        c.next_steps
            .iter()
            .any(|s| s.contains("asked for 86.00 MiB")),
        "{:?}",
        c.next_steps
    );

    let c = classify(
        "RuntimeError: Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same",
    );
    assert_eq!(c.facts.devices, vec!["cuda", "cpu"]);
    let c =
        classify("RuntimeError: result type Float can't be cast to the desired output type Long");
    assert_eq!(c.facts.dtypes, vec!["Long", "Float"], "expected first");
    let c = classify(
        "RuntimeError: Given groups=1, weight of size [64, 3, 3, 3], expected input[8, 1, 32, 32] to have 3 channels, but got 1 channels instead",
    );
    assert_eq!(c.facts.shapes, vec!["64x3x3x3", "8x1x32x32"]);
    let c = classify("IndexError: Target 10 is out of bounds.");
    assert!(c.next_steps[0].contains("Target 10"), "{:?}", c.next_steps);
}

#[test]
fn a_console_wrapped_message_still_gives_its_facts() {
    let log = "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total capa\ncity; 6.47 GiB already allocated; 5.06 MiB free; 6.60 GiB reserved in total by PyTorch)\n";
    let c = classify(log);
    assert_eq!(c.root_cause.map(|r| r.line), Some(1));
    assert_eq!(c.facts.memory.requested_bytes, Some(20 * 1024 * 1024));
    assert_eq!(c.facts.memory.free_bytes, Some(5_305_795));
}

#[test]
fn a_message_wrapped_at_a_space_the_console_dropped_still_gives_its_facts() {
    // A rich console wraps at a word boundary and drops the space; a hard cut would glue
    // "cpu" to "and" and name no second device.
    let log = " ERROR    Exception: Expected all tensors to be on the same device, but found at least two devices, cpu\n                         and cuda:0! (when checking argument for argument mat1 in method wrapper_CUDA_addmm)\n";
    let c = classify(log);
    assert_eq!(c.category, Category::DeviceMismatch);
    assert_eq!(c.facts.devices, vec!["cpu", "cuda:0"]);
    // PyTorch's allocator sentence quoted without its first words, re-wrapped by its author.
    let log = "    Tried to allocate 136.00 MiB. GPU 0 has a total capacity of 22.36 GiB of\n    which 120.88 MiB is free. ... If this problem persists, try again\n";
    let c = classify(log);
    assert_eq!(c.category, Category::OutOfMemory);
    assert_eq!(c.facts.memory.requested_bytes, Some(136 * 1024 * 1024));
    assert_eq!(c.facts.memory.free_bytes, facts::parse_bytes("120.88 MiB"));
}

#[test]
fn noise_from_ci_is_ignored_and_lines_keep_their_numbers() {
    let log = "\
2026-07-30T03:36:29.7333793Z \x1b[32mINFO\x1b[0m starting\r
2026-07-30T03:36:30.0000000Z Epoch 1:  45%|████▌     | 450/1000\r Epoch 1:  46%|████▋     | 460/1000\r
2026-07-30T03:36:31.0000000Z ```
2026-07-30T03:36:31.1000000Z \x1b[31m**RuntimeError: CUDA error: misaligned address**\x1b[0m\r
";
    let c = classify(log);
    assert_eq!(c.category, Category::IllegalMemoryAccess);
    let root = c.root_cause.expect("root");
    assert_eq!(root.line, 4);
    assert_eq!(root.text, "RuntimeError: CUDA error: misaligned address");
}

#[test]
fn fingerprints_ignore_what_varies_between_runs() {
    // Each run prints a line of its own before failing: a log that is the library's sentence
    // alone joins only copies of itself (grouping scheme 5, `tests_variants`).
    let run = |line: &str| classify(&format!("evaluating the tagger on dev.jsonl\n{line}"));
    let a = run(
        "2026-01-01T00:00:00Z /home/a/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1231: indexSelectSmallIndex: block: [31,0,0], thread: [29,0,0] Assertion `srcIndex < srcSelectDimSize` failed.",
    );
    let b = run(
        "[rank7]: /opt/conda/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1308: indexSelectSmallIndex: block: [2,0,0], thread: [96,0,0] Assertion `srcIndex < srcSelectDimSize` failed.",
    );
    let other = run(
        "../aten/src/ATen/native/cuda/Loss.cu:240: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [3,0,0] Assertion `t >= 0 && t < n_classes` failed.",
    );
    assert_eq!(a.fingerprint, b.fingerprint);
    assert_ne!(a.fingerprint, other.fingerprint);
    let oom1 = run(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.06 GiB is free.",
    );
    let oom2 = run(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 3 has a total capacity of 79.15 GiB of which 100.06 MiB is free.",
    );
    assert_eq!(oom1.fingerprint, oom2.fingerprint);
    assert_eq!(a.fingerprint.len(), 64);
}

#[test]
fn empty_binary_and_clean_inputs_are_unknown_with_a_note() {
    let empty = classify("");
    assert_eq!(empty.category, Category::Unknown);
    assert_eq!(empty.notes, vec!["the input is empty"]);
    let rs = Ruleset::builtin().expect("builtin");
    // An ELF header and section bytes (mostly non-text), then a string table entry.
    let mut elf = b"\x7fELF\x02\x01\x01\x00\x00\x00".to_vec();
    elf.extend((0u8..200).map(|i| i.wrapping_mul(37) | 0x80));
    elf.extend_from_slice(b"RuntimeError: CUDA error: out of memory");
    let binary = rs.classify_bytes("x", &elf);
    assert_eq!(binary.category, Category::Unknown);
    assert!(binary.notes[0].contains("binary"), "{:?}", binary.notes);
    let clean = classify("all good\nepoch 3 done\n");
    assert_eq!(clean.category, Category::Unknown);
    assert!(clean.root_cause.is_none());
    assert_eq!(clean.stats.lines, 2);
}

#[test]
fn json_output_has_the_contract_fields() {
    let c = classify("RuntimeError: expected scalar type Long but found Int");
    let v = serde_json::to_value(&c).expect("serializes");
    for key in [
        "source",
        "category",
        "title",
        "confidence",
        "root_cause",
        "findings",
        "facts",
        "async_hint",
        "next_steps",
        "fingerprint",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    assert_eq!(v["category"], "dtype_mismatch");
    assert_eq!(v["confidence"], "high");
    assert_eq!(v["root_cause"]["rule"], "torch.dtype.expected_scalar_type");
    assert_eq!(v["findings"][0]["role"], "root_cause");
    assert_eq!(v["facts"]["dtypes"], serde_json::json!(["Long", "Int"]));
    assert!(
        v["facts"].get("memory").is_none(),
        "absent facts are omitted"
    );
}

#[test]
fn logs_no_rule_matches_are_grouped_by_how_they_end() {
    let run = |last: &str| {
        classify(&format!(
            "epoch 1 loss 0.52\nepoch 2 loss 0.31\n{last}\n\n  \n"
        ))
    };
    let a = run("worker 3 stalled after 1200 s, giving up");
    let b = run("worker 7 stalled after 95 s, giving up");
    let finished = run("Training finished in 812 s");
    assert_eq!(a.category, Category::Unknown);
    assert!(a.root_cause.is_none(), "no rule names a failure here");
    assert_eq!(
        a.fingerprint, b.fingerprint,
        "the same ending, other numbers"
    );
    assert_ne!(a.fingerprint, finished.fingerprint);
    assert_eq!(a.signature, "worker # stalled after # s, giving up");
    // Only a log with no text at all has the one signature-less fingerprint.
    assert_ne!(a.fingerprint, classify("").fingerprint);
    assert!(classify("").signature.is_empty());
}

#[test]
fn a_signature_is_the_root_cause_shape_and_the_users_frames_before_it() {
    let log = "\
Traceback (most recent call last):
  File \"/home/u/proj/train.py\", line 57, in <module>
    main()
  File \"/home/u/proj/train.py\", line 41, in step
    out = model(x)
  File \"/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py\", line 1501, in _call_impl
    return forward_call(*args, **kwargs)
  File \"/home/u/proj/model.py\", line 23, in forward
    return self.emb(idx)
IndexError: index out of range in self
";
    let c = classify(log);
    assert_eq!(c.root_cause.as_ref().map(|r| r.line), Some(10));
    assert_eq!(
        c.signature,
        "IndexError: index out of range in self train.py:<module> train.py:step model.py:forward"
    );
    // Frames after the root cause, or from another program far above it, are not its stack.
    let later = format!("{log}  File \"/home/u/proj/eval.py\", line 3, in evaluate\n");
    assert_eq!(classify(&later).signature, c.signature);
}

#[test]
fn a_rules_advice_and_its_categorys_general_advice_are_not_both_listed_when_they_agree() {
    let c = classify(
        "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`",
    );
    let side_effect = c
        .next_steps
        .iter()
        .filter(|s| s.contains("side effect of an earlier failure"))
        .count();
    assert_eq!(side_effect, 1, "{:#?}", c.next_steps);
    assert!(c.next_steps.len() >= 3, "{:#?}", c.next_steps);
}
