//! A failure no rule names: the learned fallback's `likely` category, the words that decided
//! it and the log's framework, through every door (classify API, stored report read back from
//! its jsonb column, report page).

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpu_triage::auth::Scope;

use crate::browse::{page as get, sign_in, texts as select_text};
use crate::support::TestApp;

/// An MLX log whose allocation failure no rule's pattern matches: only the catch-all exception
/// rule names its line.
const LIKELY_LOG: &[u8] = b"Traceback (most recent call last):\n  File \"/opt/venv/lib/python3.11/site-packages/mlx_lm/generate.py\", line 412, in generate\n    out = model(tokens)\nRuntimeError: MTLAllocator: unable to allocate 3.2 GB for the KV cache buffer: the heap is exhausted\n";

#[tokio::test]
async fn a_line_no_rule_names_gets_a_likely_category_its_words_and_its_framework_everywhere() {
    let app = TestApp::spawn().await;
    let token = app.token("alice", &[Scope::Ingest, Scope::Read]).await;

    let req = Request::post("/api/v1/classify")
        .header("authorization", format!("Bearer {token}"))
        .body(Body::from(LIKELY_LOG))
        .unwrap();
    let res = app.send(req).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let c = res.json();
    assert_eq!(c["category"], "out_of_memory", "{c}");
    assert_eq!(c["confidence"], "likely");
    assert_eq!(c["framework"], "mlx");
    assert_eq!(c["root_cause"]["line"], 4);
    let basis = c["basis"].as_array().expect("basis").clone();
    assert!(!basis.is_empty() && basis.len() <= 3, "{basis:?}");
    let steps = c["next_steps"].to_string();
    assert!(steps.contains("set_memory_limit"), "{steps}");
    assert!(!steps.contains("torch."), "{steps}");

    // Stored and read back: the jsonb column keeps the new fields.
    let up = app
        .upload(&token, &[("log", Some("mlx.log"), LIKELY_LOG)], None)
        .await;
    assert_eq!(up.status, StatusCode::CREATED, "{}", up.body);
    let id = up.json()["id"].as_i64().unwrap();
    let got = app.get_as(&token, &format!("/api/v1/reports/{id}")).await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
    let stored = &got.json()["classification"];
    assert_eq!(stored["confidence"], "likely");
    assert_eq!(stored["basis"], serde_json::Value::Array(basis.clone()));
    assert_eq!(stored["framework"], "mlx");

    // The report page says it is the fallback's guess, from which words, and the framework.
    let b = sign_in(&app, &token).await;
    let page = get(&app, &b.cookie, &format!("/reports/{id}")).await;
    assert_eq!(page.status, StatusCode::OK);
    let likely = select_text(&page.body, "#likely").join(" ");
    assert!(likely.contains("learned fallback"), "{likely}");
    for w in &basis {
        assert!(likely.contains(w.as_str().unwrap()), "{w} not in {likely}");
    }
    assert_eq!(select_text(&page.body, "#framework"), ["framework mlx"]);
    assert!(page.body.contains("confidence likely"));
}

#[tokio::test]
async fn a_rule_named_failure_shows_no_likely_note() {
    let app = TestApp::spawn().await;
    let token = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let log = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 7.79 GiB of which 8.00 MiB is free.\n";
    let up = app
        .upload(&token, &[("log", Some("a.log"), log)], None)
        .await;
    let id = up.json()["id"].as_i64().unwrap();
    let b = sign_in(&app, &token).await;
    let page = get(&app, &b.cookie, &format!("/reports/{id}")).await;
    assert!(select_text(&page.body, "#likely").is_empty());
    let got = app
        .get_as(&token, &format!("/api/v1/reports/{id}"))
        .await
        .json();
    assert!(got["classification"].get("basis").is_none());
}
