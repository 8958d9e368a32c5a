//! Team rules (issue 8): written through the API and the portal, measured before saving (examples,
//! stored reports, a labelled corpus), swapped into the running server at once, followed by other
//! replicas, overriding built-in rules, reclassifying stored reports, exported and imported.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpu_triage::auth::Scope;
use gpu_triage::web::{self, AppState};
use serde_json::{Value, json};

use crate::support::{TestApp, TestResponse, binary, database_url, fresh_db};

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

#[tokio::test]
async fn another_replica_picks_up_a_saved_rule_without_a_restart() {
    let app = TestApp::spawn().await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let ruleset = std::sync::Arc::new(gpu_triage::rules::Ruleset::builtin().unwrap());
    let other = AppState::new(app.db.clone(), "http://replica.test", ruleset);
    let watcher = gpu_triage::team_rules::watch(app.db.clone(), other.ruleset.clone());
    let res = app.post_json(&admin, "/api/v1/rules", &kernel_rule()).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut category = String::new();
    while Instant::now() < deadline {
        let c = other.ruleset.current().classify_bytes("-", KERNEL_LOG);
        category = c.category.to_string();
        if category == "library_error" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    watcher.abort();
    assert_eq!(category, "library_error");
}

#[tokio::test]
async fn import_validates_everything_and_export_round_trips() {
    let app = TestApp::spawn().await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let res = app.post_json(&admin, "/api/v1/rules", &kernel_rule()).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let builtin_id = "cuda.assert.kernel";
    let res = send_json(
        &app,
        "PUT",
        &admin,
        &format!("/api/v1/rules/{builtin_id}"),
        &json!({"enabled": false}),
    )
    .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let name: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("team.toml");
    let out = binary()
        .args(["rules", "export", "--out"])
        .arg(&file)
        .env("DATABASE_URL", database_url(&name))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("[[rule]]") && text.contains("id = \"team.mykernel\""),
        "{text}"
    );
    assert!(
        text.contains("disabled = [\"cuda.assert.kernel\"]"),
        "{text}"
    );

    let (other_db, _) = fresh_db().await;
    let other: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(other_db.pool())
        .await
        .unwrap();
    // A broken file is refused whole: nothing is written.
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, format!("{text}\n[[rule]]\nid = \"team.bad\"\ncategory = \"unknown\"\ntitle = \"B\"\npattern = \"a{{1000}}{{1000}}\"\nexamples = [\"a\"]\n")).unwrap();
    let out = binary()
        .args(["rules", "import"])
        .arg(&bad)
        .env("DATABASE_URL", database_url(&other))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rule team.bad") && err.contains("size limit"),
        "{err}"
    );
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM team_rules")
        .fetch_one(other_db.pool())
        .await
        .unwrap();
    assert_eq!(stored, 0);

    let out = binary()
        .args(["rules", "import"])
        .arg(&file)
        .env("DATABASE_URL", database_url(&other))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = binary()
        .args(["rules", "export"])
        .env("DATABASE_URL", database_url(&other))
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), text);
    let rows: Vec<(String, bool)> =
        sqlx::query_as("SELECT rule_id, enabled FROM team_rules ORDER BY rule_id")
            .fetch_all(other_db.pool())
            .await
            .unwrap();
    assert_eq!(
        rows,
        [
            (builtin_id.to_owned(), false),
            ("team.mykernel".to_owned(), true)
        ]
    );
    let actions: Vec<String> = sqlx::query_scalar("SELECT action FROM rule_history")
        .fetch_all(other_db.pool())
        .await
        .unwrap();
    assert_eq!(actions, ["import", "import"]);
}

/// A signed-in browser: the session cookie and the page's CSRF token.
struct Browser {
    cookie: String,
    csrf: String,
}

async fn sign_in(app: &TestApp, token: &str) -> Browser {
    let req = Request::post("/login")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(format!("token={token}")))
        .unwrap();
    let res = app.send(req).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    let cookie = res.headers["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = page(app, &cookie, "/rules").await;
    let csrf = select(&page.body, "input[name=csrf]", Some("value")).remove(0);
    Browser { cookie, csrf }
}

async fn page(app: &TestApp, cookie: &str, path: &str) -> TestResponse {
    let req = Request::get(path)
        .header("cookie", cookie)
        .body(Body::empty())
        .unwrap();
    app.send(req).await
}

async fn post_form(
    app: &TestApp,
    b: &Browser,
    path: &str,
    fields: &[(&str, &str)],
) -> TestResponse {
    let mut pairs: Vec<(&str, &str)> = vec![("csrf", b.csrf.as_str())];
    pairs.extend_from_slice(fields);
    let body: String = pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&");
    let req = Request::post(path)
        .header("cookie", &b.cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(body))
        .unwrap();
    app.send(req).await
}

fn enc(s: &str) -> String {
    s.bytes()
        .map(|c| match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (c as char).to_string()
            }
            _ => format!("%{c:02X}"),
        })
        .collect()
}

/// Texts (or an attribute's values) of the elements `css` selects.
fn select(html: &str, css: &str, attr: Option<&str>) -> Vec<String> {
    let doc = scraper::Html::parse_document(html);
    let sel = scraper::Selector::parse(css).unwrap();
    doc.select(&sel)
        .filter_map(|e| match attr {
            Some(a) => e.value().attr(a).map(str::to_owned),
            None => Some(e.text().collect::<String>().trim().to_owned()),
        })
        .collect()
}

const FORM: &[(&str, &str)] = &[
    ("id", "team.mykernel"),
    ("category", "library_error"),
    ("title", "MyKernel failed"),
    ("pattern", r"MyKernel failed: code (?P<code>\d+)"),
    ("specificity", "90"),
    ("advice", "MyKernel error code {code}: see the runbook."),
    (
        "examples",
        "MyKernel failed: code 3\nMyKernel failed: code 12 (launch 1)",
    ),
    ("counter_examples", "MyKernel started"),
    ("enabled", "on"),
];

#[tokio::test]
async fn the_portal_previews_before_saving_and_shows_hits_and_history() {
    let app = app_with_corpus().await;
    let admin = app.token("alice", &[Scope::Admin]).await;
    let ingest = app.token("ci", &[Scope::Ingest]).await;
    let stored = upload(&app, &ingest, KERNEL_LOG).await;
    let b = sign_in(&app, &admin).await;

    let mut fields = FORM.to_vec();
    fields.push(("action", "preview"));
    let res = post_form(&app, &b, "/rules", &fields).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert_eq!(select(&res.body, ".newly-matched", None), ["1"]);
    assert_eq!(select(&res.body, ".category-changed", None), ["1"]);
    assert_eq!(select(&res.body, ".scanned", None), ["1 of 1"]);
    assert_eq!(select(&res.body, ".accuracy", None), ["50.0% → 100.0%"]);
    assert_eq!(
        select(&res.body, ".precision", None),
        ["100.0% of 2 case(s)"]
    );
    assert_eq!(select(&res.body, ".examples td.ok", None).len(), 3);
    assert_eq!(
        select(&res.body, "input[name=pattern]", Some("value")),
        [FORM[3].1]
    );
    assert_eq!(app.count("team_rules").await, 0, "a preview stores nothing");

    // Without the CSRF token nothing is stored.
    let req = Request::post("/rules")
        .header("cookie", &b.cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(
            "id=team.x&category=unknown&title=X&pattern=X+failed&examples=X+failed&action=save",
        ))
        .unwrap();
    assert_eq!(app.send(req).await.status, StatusCode::FORBIDDEN);

    // A hostile pattern is refused with the reason, the form kept.
    let mut hostile = FORM.to_vec();
    hostile[3] = ("pattern", "a{1000}{1000}");
    hostile.push(("action", "save"));
    let res = post_form(&app, &b, "/rules", &hostile).await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY);
    let msg = select(&res.body, ".error-message", None).join("");
    assert!(
        msg.contains("rule team.mykernel") && msg.contains("size limit"),
        "{msg}"
    );
    assert_eq!(app.count("team_rules").await, 0);

    let mut save = FORM.to_vec();
    save.push(("action", "save"));
    let res = post_form(&app, &b, "/rules", &save).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    assert_eq!(res.headers["location"], "/rules/team.mykernel");

    // The stored report still carries its old classification: 0 hits until reclassified.
    let list = page(&app, &b.cookie, "/rules").await;
    assert_eq!(
        select(&list.body, ".rules-team tr.rule-row", Some("data-id")),
        ["team.mykernel"]
    );
    assert_eq!(select(&list.body, ".rules-team .hits", None), ["0"]);
    assert_eq!(select(&list.body, ".history .actor", None), ["alice"]);
    let next = upload(&app, &ingest, b"again\nMyKernel failed: code 5\n").await;
    assert_ne!(next["group_id"], stored["group_id"]);
    let list = page(&app, &b.cookie, "/rules").await;
    assert_eq!(select(&list.body, ".rules-team .hits", None), ["1"]);

    let rule = page(&app, &b.cookie, "/rules/team.mykernel").await;
    assert_eq!(rule.status, StatusCode::OK);
    let url = format!("/reports/{}", next["id"]);
    assert_eq!(select(&rule.body, ".matching a", Some("href")), [url]);
    let changes = select(&rule.body, ".history .change", None).join(" ");
    assert!(
        changes.contains("create") && changes.contains("pattern:"),
        "{changes}"
    );

    // Disable from the rule page, then override a built-in rule from its page.
    let res = post_form(
        &app,
        &b,
        "/rules/team.mykernel/enabled",
        &[("enabled", "false")],
    )
    .await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    let rule = page(&app, &b.cookie, "/rules/team.mykernel").await;
    assert_eq!(select(&rule.body, ".meta .state", None), ["disabled"]);
    let builtin = page(&app, &b.cookie, "/rules/cuda.assert.kernel").await;
    assert_eq!(select(&builtin.body, ".actions a", None), ["Override"]);
    let form = page(&app, &b.cookie, "/rules/new?edit=cuda.assert.kernel").await;
    assert_eq!(
        select(&form.body, "input[name=id]", Some("value")),
        ["cuda.assert.kernel"]
    );
}

#[tokio::test]
async fn reclassify_moves_stored_reports_to_their_new_category_and_group() {
    let app = TestApp::spawn().await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let ingest = app.token("ci", &[Scope::Ingest]).await;
    let a = upload(&app, &ingest, KERNEL_LOG).await;
    let b2 = upload(
        &app,
        &ingest,
        b"other run\nMyKernel failed: code 99 (launch 5)\n",
    )
    .await;
    let other = upload(&app, &ingest, ILLEGAL_LOG).await;
    let unknown_group = a["group_id"].as_i64().unwrap();
    assert_eq!(b2["group_id"], a["group_id"]);
    let res = app.post_json(&admin, "/api/v1/rules", &kernel_rule()).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);

    let b = sign_in(&app, &admin).await;
    let res = post_form(&app, &b, "/rules/reclassify", &[]).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut state = String::new();
    while Instant::now() < deadline {
        state = sqlx::query_scalar("SELECT state FROM reclassify_runs ORDER BY id DESC LIMIT 1")
            .fetch_one(app.db.pool())
            .await
            .unwrap();
        if state != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(state, "done");
    let list = page(&app, &b.cookie, "/rules").await;
    assert_eq!(select(&list.body, ".runs .progress", None), ["3/3 (100%)"]);
    assert_eq!(select(&list.body, ".rules-team .hits", None), ["2"]);

    let rows: Vec<(i64, String, i64)> =
        sqlx::query_as("SELECT id, category, group_id FROM reports ORDER BY id")
            .fetch_all(app.db.pool())
            .await
            .unwrap();
    assert_eq!(rows.len(), 3, "no report lost");
    assert_eq!(rows[0].1, "library_error");
    assert_eq!(rows[1].1, "library_error");
    assert_eq!(rows[0].2, rows[1].2, "same failure, same new group");
    assert_ne!(rows[0].2, unknown_group);
    assert_eq!(rows[2].1, "illegal_memory_access");
    assert_eq!(rows[2].2, other["group_id"].as_i64().unwrap());
    // Every group's count equals its reports; the emptied group is gone.
    let wrong: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM groups g WHERE report_count <> (SELECT count(*) FROM reports r WHERE r.group_id = g.id)",
    )
    .fetch_one(app.db.pool())
    .await
    .unwrap();
    assert_eq!(wrong, 0);
    let old: i64 = sqlx::query_scalar("SELECT count(*) FROM groups WHERE id = $1")
        .bind(unknown_group)
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert_eq!(old, 0);
    let c: Value = sqlx::query_scalar("SELECT classification FROM reports WHERE id = $1")
        .bind(rows[0].0)
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert_eq!(c["root_cause"]["rule"], "team.mykernel");
    // A second run changes nothing.
    let res = post_form(&app, &b, "/rules/reclassify", &[]).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
}

/// A minimal HTTP/1.1 POST over a real socket: (status, body).
fn http_post(port: u16, path: &str, token: &str, body: &[u8]) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    stream.write_all(body).unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let status = raw.split(' ').nth(1).unwrap().parse().unwrap();
    (status, raw.split_once("\r\n\r\n").unwrap().1.to_owned())
}

#[tokio::test]
async fn serve_loads_the_stored_team_rules_at_start() {
    let app = TestApp::spawn().await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let res = app.post_json(&admin, "/api/v1/rules", &kernel_rule()).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let name: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    let url = database_url(&name);
    let (_server, port) = tokio::task::spawn_blocking(move || crate::support::spawn_server(&url))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut body = String::new();
    while Instant::now() < deadline {
        let admin = admin.clone();
        let (status, b) = tokio::task::spawn_blocking(move || {
            http_post(port, "/api/v1/classify", &admin, KERNEL_LOG)
        })
        .await
        .unwrap();
        assert_eq!(status, 200, "{b}");
        body = b;
        if body.contains("team.mykernel") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let c: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(c["category"], "library_error", "{body}");
    assert_eq!(c["root_cause"]["rule"], "team.mykernel");
}
