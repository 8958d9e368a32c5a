//! Team rules (issue 8): written through the API and the portal, measured before saving (examples,
//! stored reports, a labelled corpus), swapped into the running server at once, followed by other
//! replicas, overriding built-in rules, reclassifying stored reports, exported and imported.

use std::path::PathBuf;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpu_triage::auth::Scope;
use gpu_triage::web::{self, AppState};
use serde_json::{Value, json};

use crate::support::{TestApp, TestResponse, fresh_db};

mod deploy;
mod editor;
mod portal;
mod races;

const KERNEL_LOG: &[u8] =
    b"step 10 loss 0.42\nMyKernel failed: code 7 (launch 2)\nTraceback (most recent call last):\n";
const ILLEGAL_LOG: &[u8] =
    b"epoch 1\nRuntimeError: CUDA error: an illegal memory access was encountered\n";

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/team_rules")
}

/// An app whose previews measure the fixture corpus.
async fn app_with_corpus() -> TestApp {
    let (db, _) = fresh_db().await;
    let ruleset = std::sync::Arc::new(gpu_triage::rules::Ruleset::builtin().unwrap());
    let state = AppState::new(db.clone(), "http://gpu-triage.test", ruleset);
    state.ruleset.set_corpus(Some(fixture()));
    TestApp {
        db,
        router: web::router(state),
    }
}

fn kernel_rule() -> Value {
    json!({
        "id": "team.mykernel",
        "category": "library_error",
        "title": "MyKernel failed",
        "pattern": r"MyKernel failed: code (?P<code>\d+)",
        "specificity": 90,
        "advice": ["MyKernel error code {code}: see the kernel's runbook."],
        "examples": ["MyKernel failed: code 3 (launch 17)"],
        "counter_examples": ["MyKernel started"],
    })
}

async fn send_json(
    app: &TestApp,
    method: &str,
    token: &str,
    path: &str,
    body: &Value,
) -> TestResponse {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    app.send(req).await
}

async fn classify(app: &TestApp, token: &str, log: &[u8]) -> Value {
    let req = Request::post("/api/v1/classify")
        .header("authorization", format!("Bearer {token}"))
        .body(Body::from(log.to_vec()))
        .unwrap();
    let res = app.send(req).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    res.json()
}

async fn upload(app: &TestApp, token: &str, log: &[u8]) -> Value {
    let res = app
        .upload(token, &[("log", Some("ci.log"), log)], None)
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    res.json()
}

#[tokio::test]
async fn writing_rules_needs_the_admin_scope() {
    let app = TestApp::spawn().await;
    let ingest = app.token("ci", &[Scope::Ingest]).await;
    let read = app.token("viewer", &[Scope::Read]).await;
    for token in [&ingest, &read] {
        let cases = [
            ("POST", "/api/v1/rules"),
            ("POST", "/api/v1/rules/preview"),
            ("PUT", "/api/v1/rules/team.mykernel"),
            ("DELETE", "/api/v1/rules/team.mykernel"),
        ];
        for (method, path) in cases {
            let res = send_json(&app, method, token, path, &kernel_rule()).await;
            assert_eq!(
                res.status,
                StatusCode::FORBIDDEN,
                "{method} {path}: {}",
                res.body
            );
            assert_eq!(res.error_code(), "forbidden");
        }
    }
    assert_eq!(
        app.get("/api/v1/rules").await.status,
        StatusCode::UNAUTHORIZED
    );
    let res = app.get_as(&read, "/api/v1/rules").await;
    assert_eq!(res.status, StatusCode::OK);
    let listed = res.json()["rules"].as_array().unwrap().len();
    let builtin = gpu_triage::rules::Ruleset::builtin().unwrap().rule_count();
    assert_eq!(listed, builtin);
    assert_eq!(app.count("team_rules").await, 0);
    assert_eq!(app.count("rule_history").await, 0);
}

/// SECURITY.md item 7: a pattern that backtracking engines take exponential time on is
/// accepted after its literal text and runs in linear time (the `regex` crate has no
/// backtracking): a 1 MiB line of `a` after it is classified, and the rule still works.
#[tokio::test]
async fn a_nested_quantifier_after_literal_text_runs_in_linear_time_over_a_mib_of_input() {
    let app = TestApp::spawn().await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let mut rule = kernel_rule();
    rule["pattern"] = json!("MyKernel (a*)*b");
    rule["examples"] = json!(["MyKernel aab"]);
    rule["counter_examples"] = json!(["MyKernel aaa"]);
    rule["advice"] = json!(["MyKernel failed."]);
    let res = app.post_json(&admin, "/api/v1/rules", &rule).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let hostile = format!("MyKernel {}\n", "a".repeat(1 << 20));
    let req = axum::http::Request::post("/api/v1/classify")
        .header("authorization", format!("Bearer {admin}"))
        .body(axum::body::Body::from(hostile))
        .unwrap();
    let res = app.send(req).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert_ne!(res.json()["category"], "library_error", "no `b`, no match");
    let req = axum::http::Request::post("/api/v1/classify")
        .header("authorization", format!("Bearer {admin}"))
        .body(axum::body::Body::from(format!(
            "MyKernel {}b\n",
            "a".repeat(1000)
        )))
        .unwrap();
    let res = app.send(req).await;
    assert_eq!(res.json()["category"], "library_error", "{}", res.body);
}

#[tokio::test]
async fn hostile_and_broken_patterns_get_422_with_the_reason_and_store_nothing() {
    let app = TestApp::spawn().await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let long = format!("MyKernel {}", "a".repeat(100 << 10));
    let cases: [(&str, &str); 5] = [
        ("(a*)*b", "does not start with literal text"),
        (&long, "at most 1024 are allowed"),
        ("a{1000}{1000}", "size limit"),
        ("MyKernel (unclosed", "unclosed group"),
        ("^MyKernel", "leading '^'"),
    ];
    for (pattern, reason) in cases {
        let mut rule = kernel_rule();
        rule["pattern"] = json!(pattern);
        rule["examples"] = json!(["aab"]);
        for path in ["/api/v1/rules", "/api/v1/rules/preview"] {
            let res = app.post_json(&admin, path, &rule).await;
            assert_eq!(
                res.status,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{path} {pattern:.40}: {}",
                res.body
            );
            assert_eq!(res.error_code(), "invalid_rule");
            let message = res.json()["error"]["message"].as_str().unwrap().to_owned();
            assert!(message.starts_with("rule team.mykernel: "), "{message}");
            assert!(
                message.contains(reason),
                "{pattern:.40}: want {reason:?} in {message}"
            );
        }
    }
    let mut failing = kernel_rule();
    failing["examples"] = json!(["MyKernel is fine"]);
    let res = app.post_json(&admin, "/api/v1/rules", &failing).await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(res.body.contains("example does not match"), "{}", res.body);
    assert_eq!(app.count("team_rules").await, 0);
    assert_eq!(app.count("rule_history").await, 0);
}

#[tokio::test]
async fn a_disabled_rule_is_validated_like_an_enabled_one() {
    let app = TestApp::spawn().await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    // Stored disabled, a broken rule would break export/import and enabling it later.
    let mut bad = kernel_rule();
    bad["pattern"] = json!("MyKernel (unclosed");
    bad["enabled"] = json!(false);
    let res = app.post_json(&admin, "/api/v1/rules", &bad).await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", res.body);
    assert!(res.body.contains("unclosed group"), "{}", res.body);
    let res = app.post_json(&admin, "/api/v1/rules", &kernel_rule()).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let mut failing = kernel_rule();
    failing["examples"] = json!(["MyKernel is fine"]);
    failing["enabled"] = json!(false);
    let res = send_json(&app, "PUT", &admin, "/api/v1/rules/team.mykernel", &failing).await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", res.body);
    assert!(res.body.contains("example does not match"), "{}", res.body);
    let stored: (bool, Value) =
        sqlx::query_as("SELECT enabled, spec FROM team_rules WHERE rule_id = 'team.mykernel'")
            .fetch_one(app.db.pool())
            .await
            .unwrap();
    assert!(stored.0, "the stored rule stays enabled");
    assert_eq!(stored.1["pattern"], kernel_rule()["pattern"]);
    assert_eq!(app.count("rule_history").await, 1);
}

#[tokio::test]
async fn a_stored_disabled_rule_that_newer_limits_refuse_does_not_stop_loading() {
    let app = TestApp::spawn().await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let mut old = kernel_rule();
    old["id"] = json!("team.old");
    old["pattern"] = json!("(unclosed");
    sqlx::query("INSERT INTO team_rules (rule_id, spec, enabled) VALUES ('team.old', $1, false)")
        .bind(&old)
        .execute(app.db.pool())
        .await
        .unwrap();
    sqlx::query("UPDATE ruleset_version SET version = version + 1")
        .execute(app.db.pool())
        .await
        .unwrap();
    let handle = gpu_triage::app::team_rules::RulesetHandle::new(std::sync::Arc::new(
        gpu_triage::rules::Ruleset::builtin().unwrap(),
    ));
    let version = gpu_triage::app::team_rules::reload(&app.db, &handle).await;
    assert_eq!(
        version.unwrap(),
        1,
        "loaded despite the stored disabled rule"
    );
    // Other rules can still be saved; turning the broken one on is refused with its reason.
    let res = app.post_json(&admin, "/api/v1/rules", &kernel_rule()).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let res = send_json(
        &app,
        "PUT",
        &admin,
        "/api/v1/rules/team.old",
        &json!({"enabled": true}),
    )
    .await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", res.body);
    assert!(res.body.contains("team.old"), "{}", res.body);
}

#[tokio::test]
async fn concurrent_creates_of_one_id_store_it_once_and_the_other_gets_409() {
    let app = TestApp::spawn().await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    for round in 0..5 {
        let id = format!("team.race{round}");
        let mut rule = kernel_rule();
        rule["id"] = json!(id);
        let (a, b) = tokio::join!(
            app.post_json(&admin, "/api/v1/rules", &rule),
            app.post_json(&admin, "/api/v1/rules", &rule)
        );
        let mut statuses = [a.status.as_u16(), b.status.as_u16()];
        statuses.sort_unstable();
        assert_eq!(statuses, [201, 409], "{} / {}", a.body, b.body);
        let loser = if a.status == StatusCode::CONFLICT {
            &a
        } else {
            &b
        };
        assert_eq!(loser.error_code(), "rule_exists");
        let created: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM rule_history WHERE rule_id = $1 AND action = 'create'",
        )
        .bind(&id)
        .fetch_one(app.db.pool())
        .await
        .unwrap();
        assert_eq!(created, 1, "{id}");
    }
    // A body with nothing to create is refused, not stored as an empty entry.
    let res = app
        .post_json(
            &admin,
            "/api/v1/rules",
            &json!({"id": "cuda.assert.kernel"}),
        )
        .await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", res.body);
    assert_eq!(app.count("team_rules").await, 5);
}

#[tokio::test]
async fn a_saved_rule_classifies_the_very_next_report() {
    let app = TestApp::spawn().await;
    let admin = app.token("alice", &[Scope::Admin]).await;
    let ingest = app.token("ci", &[Scope::Ingest]).await;
    let before = upload(&app, &ingest, KERNEL_LOG).await;
    assert_eq!(before["classification"]["category"], "unknown");

    let res = app.post_json(&admin, "/api/v1/rules", &kernel_rule()).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let saved = res.json();
    assert_eq!(saved["rule"]["origin"], "team");
    assert_eq!(saved["rule"]["updated_by"], "alice");

    let mut next = KERNEL_LOG.to_vec();
    next.extend_from_slice(b"run 2\n");
    let after = upload(&app, &ingest, &next).await;
    let c = &after["classification"];
    assert_eq!(c["category"], "library_error");
    assert_eq!(c["root_cause"]["rule"], "team.mykernel");
    assert_eq!(c["root_cause"]["line"], 2);
    assert!(
        c["next_steps"]
            .to_string()
            .contains("MyKernel error code 7")
    );
    assert_ne!(after["group_id"], before["group_id"]);
    let c = classify(&app, &ingest, KERNEL_LOG).await;
    assert_eq!(c["category"], "library_error");

    // Posting the same id again is a conflict; PUT changes it, DELETE removes it.
    let res = app.post_json(&admin, "/api/v1/rules", &kernel_rule()).await;
    assert_eq!(res.status, StatusCode::CONFLICT);
    let mut changed = kernel_rule();
    changed["category"] = json!("nccl_error");
    let res = send_json(&app, "PUT", &admin, "/api/v1/rules/team.mykernel", &changed).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert_eq!(
        classify(&app, &ingest, KERNEL_LOG).await["category"],
        "nccl_error"
    );
    let res = send_json(
        &app,
        "PUT",
        &admin,
        "/api/v1/rules/team.mykernel",
        &json!({"enabled": false}),
    )
    .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert_eq!(res.json()["rule"]["enabled"], false);
    assert_eq!(
        classify(&app, &ingest, KERNEL_LOG).await["category"],
        "unknown"
    );
    let res = send_json(
        &app,
        "DELETE",
        &admin,
        "/api/v1/rules/team.mykernel",
        &json!({}),
    )
    .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert_eq!(app.count("team_rules").await, 0);
    let res = send_json(
        &app,
        "DELETE",
        &admin,
        "/api/v1/rules/team.mykernel",
        &json!({}),
    )
    .await;
    assert_eq!(res.status, StatusCode::NOT_FOUND);

    // Every change is in the history: who, what, old and new.
    let history: Vec<(String, String, Option<Value>, Option<Value>)> = sqlx::query_as(
        "SELECT action, actor, old, new FROM rule_history WHERE rule_id = 'team.mykernel' ORDER BY id",
    )
    .fetch_all(app.db.pool())
    .await
    .unwrap();
    let actions: Vec<&str> = history.iter().map(|h| h.0.as_str()).collect();
    assert_eq!(actions, ["create", "update", "update", "delete"]);
    assert!(history.iter().all(|h| h.1 == "alice"));
    assert_eq!(history[0].2, None);
    assert_eq!(
        history[1].2.as_ref().unwrap()["spec"]["category"],
        "library_error"
    );
    assert_eq!(
        history[1].3.as_ref().unwrap()["spec"]["category"],
        "nccl_error"
    );
    assert_eq!(history[2].3.as_ref().unwrap()["enabled"], false);
    assert_eq!(history[3].3, None);
    let version: i64 = sqlx::query_scalar("SELECT version FROM ruleset_version")
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert_eq!(version, 4);
}

#[tokio::test]
async fn a_builtin_rule_can_be_overridden_disabled_and_restored() {
    let app = TestApp::spawn().await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let read = app.token("viewer", &[Scope::Read]).await;
    let c = classify(&app, &read, ILLEGAL_LOG).await;
    assert_eq!(c["category"], "illegal_memory_access");
    let id = c["root_cause"]["rule"].as_str().unwrap().to_owned();
    let listed = app.get_as(&read, "/api/v1/rules").await.json();
    let mut rule = listed["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id.as_str())
        .unwrap()
        .clone();
    assert_eq!(rule["origin"], "builtin");
    for k in [
        "origin",
        "enabled",
        "overridden",
        "updated_at",
        "updated_by",
        "hits",
    ] {
        rule.as_object_mut().unwrap().remove(k);
    }
    rule["category"] = json!("driver_issue");
    rule["title"] = json!("Our driver bug");
    let path = format!("/api/v1/rules/{id}");
    let res = send_json(&app, "PUT", &admin, &path, &rule).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert_eq!(res.json()["rule"]["overridden"], true);
    let c = classify(&app, &read, ILLEGAL_LOG).await;
    assert_eq!(
        (c["category"].as_str(), c["title"].as_str()),
        (Some("driver_issue"), Some("Our driver bug"))
    );

    let res = send_json(&app, "PUT", &admin, &path, &json!({"enabled": false})).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let c = classify(&app, &read, ILLEGAL_LOG).await;
    assert!(
        c["findings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["rule"] != id.as_str()),
        "{c}"
    );

    let res = send_json(&app, "DELETE", &admin, &path, &json!({})).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let c = classify(&app, &read, ILLEGAL_LOG).await;
    assert_eq!(c["category"], "illegal_memory_access");
    let res = send_json(&app, "DELETE", &admin, &path, &json!({})).await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", res.body);
    assert!(res.body.contains("cannot be deleted"));
}

#[tokio::test]
async fn the_preview_measures_stored_reports_and_the_labelled_corpus() {
    let app = app_with_corpus().await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let ingest = app.token("ci", &[Scope::Ingest]).await;
    upload(&app, &ingest, KERNEL_LOG).await;
    upload(&app, &ingest, b"x\nMyKernel failed: code 9\n").await;
    upload(&app, &ingest, ILLEGAL_LOG).await;

    let mut rule = kernel_rule();
    rule["examples"] = json!(["MyKernel failed: code 3", "MyKernel exploded"]);
    let res = app.post_json(&admin, "/api/v1/rules/preview", &rule).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let p = res.json();
    assert_eq!(p["ok"], false);
    assert_eq!(
        p["problems"],
        json!(["example does not match: \"MyKernel exploded\""])
    );
    let examples: Vec<(bool, bool)> = p["examples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["should_match"].as_bool().unwrap(),
                e["matched"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(examples, [(true, true), (true, false), (false, false)]);
    let r = &p["reports"];
    assert_eq!(
        (r["scanned"].as_i64(), r["stored"].as_i64()),
        (Some(3), Some(3))
    );
    assert_eq!(r["capped"], false);
    assert_eq!(r["newly_matched"], 2);
    assert_eq!(r["category_changed"], 2);
    let c = &p["corpus"];
    assert_eq!(c["cases"], 4);
    assert_eq!(
        (c["correct_before"].as_i64(), c["correct_after"].as_i64()),
        (Some(2), Some(4))
    );
    assert_eq!(c["precision"], 100.0);
    assert_eq!(c["lowers_accuracy"], false);
    assert_eq!(app.count("team_rules").await, 0, "a preview stores nothing");

    // A rule that takes the illegal-memory-access case away from its right category.
    let thief = json!({
        "id": "team.thief",
        "category": "out_of_memory",
        "title": "Not really OOM",
        "pattern": "illegal memory access",
        "specificity": 100,
        "examples": ["an illegal memory access was encountered"],
    });
    let p = app
        .post_json(&admin, "/api/v1/rules/preview", &thief)
        .await
        .json();
    assert_eq!(p["corpus"]["lowers_accuracy"], true);
    assert_eq!(p["corpus"]["precision"], 0.0);
    assert!(
        p["warnings"]
            .to_string()
            .contains("lowers corpus accuracy from 50.0% to 25.0%"),
        "{p}"
    );
    assert_eq!(
        (
            p["reports"]["matched"].as_i64(),
            p["reports"]["shadowed"].as_i64()
        ),
        (Some(1), Some(0))
    );
    // The same pattern below the built-in rule's specificity: found, but outranked.
    let mut meek = thief.clone();
    meek["specificity"] = json!(1);
    let p = app
        .post_json(&admin, "/api/v1/rules/preview", &meek)
        .await
        .json();
    assert_eq!(
        (
            p["reports"]["matched"].as_i64(),
            p["reports"]["shadowed"].as_i64()
        ),
        (Some(0), Some(1)),
        "{p}"
    );
    assert!(
        p["warnings"]
            .to_string()
            .contains("matches lines in 1 stored reports that more specific rules already name"),
        "{p}"
    );
    let res = app.post_json(&admin, "/api/v1/rules", &thief).await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", res.body);
    assert_eq!(res.error_code(), "lowers_accuracy");
    assert_eq!(app.count("team_rules").await, 0);
    let mut confirmed = thief.clone();
    confirmed["confirm"] = json!(true);
    let res = app.post_json(&admin, "/api/v1/rules", &confirmed).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    assert_eq!(res.json()["corpus"]["accuracy_after"], 25.0);
}
