use super::{Model, THRESHOLD};
use crate::rules::spec::{RuleFile, RuleSpec};
use crate::rules::{BUILTIN_RULES, Category, Confidence, Ruleset};

fn builtin_specs() -> Vec<RuleSpec> {
    toml::from_str::<RuleFile>(BUILTIN_RULES)
        .expect("builtin parses")
        .rule
}

fn builtin_model() -> Model {
    Model::train(&builtin_specs())
}

#[test]
fn the_vocabulary_file_parses_and_covers_every_category() {
    let v = super::vocabulary();
    assert!(v.len() > 50, "{}", v.len());
    for c in Category::ALL {
        assert!(v.iter().any(|(cat, _)| *cat == c), "no phrase for {c}");
    }
}

#[test]
fn the_same_ruleset_trains_the_same_model_and_gives_the_same_answer() {
    let (a, b) = (builtin_model(), builtin_model());
    assert_eq!(a.vocabulary_size(), b.vocabulary_size());
    let line =
        "ggml_backend_sycl_buffer_type_alloc_buffer: can't allocate 812.00 MiB of device memory";
    let (sa, sb) = (a.score(line, &[]), b.score(line, &[]));
    assert!(sa.is_some());
    assert_eq!(sa, sb);
    // Bit for bit, not just close: no hash order or clock leaks into the arithmetic.
    let (pa, pb) = (sa.map(|s| s.probability), sb.map(|s| s.probability));
    assert_eq!(pa.map(f64::to_bits), pb.map(f64::to_bits));
}

#[test]
fn unseen_wordings_of_known_families_get_their_category() {
    let model = builtin_model();
    let cases = [
        (
            "MTLAllocator: unable to allocate 3.2 GB for the KV cache buffer: insufficient GPU memory",
            Category::OutOfMemory,
        ),
        (
            "numba.cuda.cudadrv.driver.LinkerError: [222] Call to cuLinkAddData results in CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
            Category::DriverIssue,
        ),
        (
            "NCCL communicator aborted: ncclRemoteError while running all_reduce, remote process exited or there was a network error",
            Category::NcclError,
        ),
    ];
    for (line, want) in cases {
        let answer = model.propose(line, &[]);
        assert_eq!(answer.as_ref().map(|a| a.category), Some(want), "{line}");
        let answer = answer.expect("checked above");
        assert!(answer.probability >= THRESHOLD);
        assert!(
            !answer.basis.is_empty() && answer.basis.len() <= 3,
            "{answer:?}"
        );
        // The basis is words of the line itself, as it spells them.
        for w in &answer.basis {
            assert!(
                line.to_lowercase().contains(w.as_str()),
                "{w} not in {line}"
            );
        }
    }
}

#[test]
fn noise_and_failures_outside_the_taxonomy_get_no_answer() {
    let model = builtin_model();
    for line in [
        "Epoch 3/10 - loss: 0.2531 - acc: 0.9120 - lr: 0.001",
        "hello world",
        "Done.",
        "KeyError: 'attention_mask'",
        "FileNotFoundError: [Errno 2] No such file or directory: 'data/train.jsonl'",
        "AttributeError: 'NoneType' object has no attribute 'decode'",
        "",
    ] {
        assert_eq!(model.propose(line, &[]), None, "{line}");
    }
}

#[test]
fn a_teams_rules_teach_the_fallback_a_family_it_did_not_know() {
    let line = "zx9: the frobnicator quuxed its blorps";
    let before = Model::train(&builtin_specs());
    assert_eq!(before.propose(line, &[]), None);
    let mut specs = builtin_specs();
    specs.push(RuleSpec {
        id: "team.zx9.pool".into(),
        category: Category::OutOfMemory,
        title: "ZX9 pool exhausted".into(),
        source: String::new(),
        pattern: "frobnicator quuxed".into(),
        specificity: 60,
        consequence: false,
        kind: None,
        advice: Vec::new(),
        examples: vec![
            "ZX9 runtime: frobnicator quuxed all blorps".into(),
            "zx9: staging failed, the frobnicator quuxed".into(),
        ],
        counter_examples: Vec::new(),
    });
    let after = Model::train(&specs);
    assert_eq!(
        after.propose(line, &[]).map(|a| a.category),
        Some(Category::OutOfMemory)
    );
}

#[test]
fn a_rule_hit_is_never_overridden_by_the_fallback() {
    let rs = Ruleset::builtin().expect("builtin");
    // A specific rule names this line `unknown` (autograd misuse) although its words mention
    // CUDA tensors: the rule's answer stands.
    let log = "Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n    loss.backward()\nRuntimeError: one of the variables needed for gradient computation has been modified by an inplace operation: [torch.cuda.FloatTensor [27, 32]]\n";
    let c = rs.classify_bytes("-", log.as_bytes());
    assert_eq!(c.category, Category::Unknown);
    assert_ne!(c.confidence, Confidence::Likely);
    assert!(c.basis.is_empty());
    // A GPU rule's hit keeps its category and confidence.
    let log = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 7.79 GiB of which 8.00 MiB is free.\n";
    let c = rs.classify_bytes("-", log.as_bytes());
    assert_eq!(c.category, Category::OutOfMemory);
    assert!(matches!(
        c.confidence,
        Confidence::High | Confidence::Medium
    ));
    assert!(c.basis.is_empty());
}

#[test]
fn a_line_only_a_catch_all_rule_names_gets_a_likely_category_and_keeps_its_line() {
    let rs = Ruleset::builtin().expect("builtin");
    let log = "loading weights\nRuntimeError: MTLAllocator: unable to allocate 3.2 GB for the KV cache buffer: the heap is exhausted\n";
    let c = rs.classify_bytes("-", log.as_bytes());
    assert_eq!(c.category, Category::OutOfMemory, "{c:?}");
    assert_eq!(c.confidence, Confidence::Likely);
    assert!(!c.basis.is_empty());
    assert_eq!(c.root_cause.as_ref().map(|r| r.line), Some(2));
    assert!(c.title.starts_with("Likely out of memory: "), "{}", c.title);
    assert!(!c.next_steps.is_empty());
    let json = serde_json::to_value(&c).expect("serializes");
    assert_eq!(json["confidence"], "likely");
    assert_eq!(json["basis"].as_array().map(Vec::len), Some(c.basis.len()));
    // Below the threshold the report stays unknown, with its line and no basis.
    let log = "RuntimeError: the frobnicator refused the request\n";
    let c = rs.classify_bytes("-", log.as_bytes());
    assert_eq!(c.category, Category::Unknown);
    assert_eq!(c.confidence, Confidence::Low);
    assert!(c.root_cause.is_some() && c.basis.is_empty());
    assert!(
        serde_json::to_value(&c)
            .expect("serializes")
            .get("basis")
            .is_none()
    );
}

#[test]
fn the_code_an_assertion_prints_is_not_read_as_words_about_the_failure() {
    assert_eq!(
        super::without_asserted_code("x.c:9: GGML_ASSERT(f(a) <= alloc_size(b)) failed"),
        "x.c:9: GGML_ASSERT() failed"
    );
    assert_eq!(
        super::without_asserted_code("python3: a.c:4: run: Assertion `index < n' failed."),
        "python3: a.c:4: run: Assertion `' failed."
    );
    assert_eq!(super::without_asserted_code("no assertion"), "no assertion");
    // An assertion whose condition names memory or indices says nothing of which failure it
    // is: the fallback stays silent rather than call it an out-of-memory or an index error.
    let model = builtin_model();
    for line in [
        "/src/ggml-backend.cpp:1850: GGML_ASSERT((char *)addr + ggml_backend_buffer_get_alloc_size(buffer, tensor) <= (char *)base + size) failed",
        "/src/ggml-cpu.c:8456: GGML_ASSERT(i01 >= 0 && i01 < ne01) failed",
    ] {
        let answer = model.propose(line, &[]);
        assert!(
            answer
                .as_ref()
                .is_none_or(|l| l.category == Category::Unknown),
            "{line}: {answer:?}"
        );
    }
}
