//! The schemas written by hand for the rules engine's types (`api_types/schemas.rs`: `rules/`
//! stays free of utoipa) against real values: a classification with every optional part
//! present and one with none, strictly validated, and the enums against the types' own lists.

use gpu_triage::rules::facts::{Facts, Memory};
use gpu_triage::rules::{Category, Classification, Confidence, Finding, Role, RootCause, Stats};
use serde_json::json;

use super::Spec;
use super::schema::Validator;
use crate::support::TestApp;

/// A classification with every optional part present, and one with none.
fn classifications() -> [Classification; 2] {
    let full = Classification {
        source: "train.log".into(),
        category: Category::OutOfMemory,
        title: "CUDA out of memory".into(),
        confidence: Confidence::Likely,
        root_cause: Some(RootCause {
            line: 3,
            text: "torch.OutOfMemoryError: CUDA out of memory.".into(),
            rule: "cuda.oom".into(),
        }),
        findings: vec![Finding {
            rule: "cuda.oom".into(),
            category: Category::OutOfMemory,
            role: Role::RootCause,
            line: 3,
            text: "torch.OutOfMemoryError".into(),
        }],
        facts: Facts {
            memory: Memory {
                requested_bytes: Some(1),
                total_bytes: Some(2),
                free_bytes: Some(3),
                allocated_bytes: Some(4),
                reserved_bytes: Some(5),
            },
            devices: vec!["cuda:0".into(), "cpu".into()],
            dtypes: vec!["Half".into(), "Float".into()],
            shapes: vec!["1x2".into()],
            ranks: vec![0, 3],
            failing_rank: Some(3),
            failing_host: Some("node-7".into()),
            failing_gpu: Some("cuda:3".into()),
            gpu: Some("NVIDIA A100-SXM4-80GB".into()),
            arch: Some("sm_80".into()),
            torch_version: Some("2.3.1".into()),
            cuda_version: Some("12.1".into()),
            driver_version: Some("535.54".into()),
            nccl_version: Some("2.18.1".into()),
        },
        async_hint: true,
        next_steps: vec!["Lower the batch size.".into()],
        fingerprint: "ab".repeat(32),
        basis: vec!["allocation".into(), "memory".into()],
        framework: Some("pytorch".into()),
        signature: "torch.OutOfMemoryError train.py:step".into(),
        notes: vec!["the log was truncated".into()],
        stats: Stats {
            bytes: 10,
            lines: 3,
        },
    };
    let none = Classification {
        source: "-".into(),
        category: Category::Unknown,
        title: "Unknown failure".into(),
        confidence: Confidence::Low,
        root_cause: None,
        findings: Vec::new(),
        facts: Facts::default(),
        async_hint: false,
        next_steps: Vec::new(),
        fingerprint: "cd".repeat(32),
        basis: Vec::new(),
        framework: None,
        signature: String::new(),
        notes: Vec::new(),
        stats: Stats::default(),
    };
    [full, none]
}

#[tokio::test]
async fn the_engine_types_written_by_hand_match_full_and_empty_values() {
    // Constructing every field here means a field added to the engine's types fails to
    // compile until it is set, and then fails below until its schema describes it.
    let app = TestApp::spawn().await;
    let spec = Spec::of(&app).await;
    let v = Validator::new(&spec.doc);
    let schema = json!({"$ref": "#/components/schemas/Classification"});
    for c in classifications() {
        let value = serde_json::to_value(&c).unwrap();
        v.assert_valid(&schema, &value, "a classification");
    }
    // Every category, confidence, role and reproduction-outcome spelling is in its enum, and
    // nothing else is.
    for (name, values) in [
        (
            "Category",
            Category::ALL.iter().map(|c| json!(c)).collect::<Vec<_>>(),
        ),
        (
            "Confidence",
            Confidence::ALL.iter().map(|c| json!(c)).collect(),
        ),
        (
            "Role",
            [Role::RootCause, Role::Symptom]
                .iter()
                .map(|r| json!(r))
                .collect(),
        ),
        (
            "Outcome",
            gpu_triage::rules::outcome::Outcome::ALL
                .iter()
                .map(|o| json!(o))
                .collect(),
        ),
    ] {
        assert_eq!(
            spec.doc["components"]["schemas"][name]["enum"],
            json!(values),
            "{name}"
        );
    }
    // The classification is checked, not waved through: a stray or missing field fails.
    let mut stray = serde_json::to_value(&classifications()[1]).unwrap();
    stray["facts"]["colour"] = json!("red");
    assert!(!v.errors(&schema, &stray).is_empty());
    let mut missing = serde_json::to_value(&classifications()[1]).unwrap();
    missing.as_object_mut().unwrap().remove("stats");
    assert!(!v.errors(&schema, &missing).is_empty());
}
