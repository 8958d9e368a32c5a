//! The JSON API v1 against a real database: uploads, duplicates, idempotency, reads, search,
//! groups and fixes, and the refusals that must store nothing.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpu_triage::auth::Scope;

use crate::support::TestApp;

const OOB_LOG: &[u8] = b"epoch 1\n/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1231: indexSelectSmallIndex: block: [3,0,0], thread: [1,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\nRuntimeError: CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n";
const OOM_LOG: &[u8] = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.06 GiB is free.\n";

/// A multipart part: name, filename, bytes.
type Part<'a> = (&'a str, Option<&'a str>, &'a [u8]);

async fn stored_rows(app: &TestApp) -> (i64, i64, i64) {
    (
        app.count("reports").await,
        app.count("groups").await,
        app.count("jobs").await,
    )
}

#[tokio::test]
async fn an_upload_is_classified_stored_grouped_and_readable() {
    let app = TestApp::spawn().await;
    let ingest = app.token("ci", &[Scope::Ingest]).await;
    let read = app.token("reader", &[Scope::Read]).await;
    let meta = br#"{"project":"vision","branch":"main","commit":"abc123","job_url":"https://ci.example/1"}"#;
    let res = app
        .upload(
            &ingest,
            &[
                ("log", Some("train.log"), OOB_LOG),
                ("meta", None, meta),
                ("script", Some("repro.py"), b"import torch\n"),
            ],
            None,
        )
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let v = res.json();
    assert_eq!(v["duplicate"], false);
    assert_eq!(v["classification"]["category"], "out_of_bounds");
    assert_eq!(v["classification"]["root_cause"]["line"], 2);
    assert_eq!(v["repro"]["state"], "queued");
    let id = v["id"].as_i64().unwrap();
    assert_eq!(v["url"], format!("http://gpu-triage.test/reports/{id}"));

    let got = app.get_as(&read, &format!("/api/v1/reports/{id}")).await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
    let r = got.json();
    assert_eq!(r["project"], "vision");
    assert_eq!(r["commit"], "abc123");
    assert_eq!(r["classification"]["async_hint"], true);
    assert_eq!(r["group_id"], v["group_id"]);
    assert_eq!(r["reproductions"][0]["state"], "queued");
    assert_eq!(stored_rows(&app).await, (1, 1, 1));

    // The same failure from another run (different bytes) joins the group.
    let other = b"noise\n[rank3]: /opt/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1308: indexSelectSmallIndex: block: [9,0,0], thread: [7,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n";
    let second = app
        .upload(&ingest, &[("log", Some("b.log"), other)], None)
        .await
        .json();
    assert_eq!(second["group_id"], v["group_id"]);
    let group = app
        .get_as(&read, &format!("/api/v1/groups/{}", v["group_id"]))
        .await
        .json();
    assert_eq!(group["count"], 2);
    assert_eq!(group["reports"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn identical_bytes_for_a_project_are_one_report_marked_duplicate() {
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest]).await;
    let meta = br#"{"project":"nlp"}"#;
    let first = app
        .upload(
            &t,
            &[("log", Some("a.log"), OOM_LOG), ("meta", None, meta)],
            None,
        )
        .await
        .json();
    let again = app
        .upload(
            &t,
            &[("log", Some("a.log"), OOM_LOG), ("meta", None, meta)],
            None,
        )
        .await;
    assert_eq!(again.status, StatusCode::CREATED);
    let again = again.json();
    assert_eq!(again["duplicate"], true);
    assert_eq!(again["id"], first["id"]);
    assert_eq!(again["classification"]["category"], "out_of_memory");
    // Another project is another report.
    let elsewhere = app
        .upload(
            &t,
            &[
                ("log", Some("a.log"), OOM_LOG),
                ("meta", None, br#"{"project":"vision"}"#),
            ],
            None,
        )
        .await
        .json();
    assert_ne!(elsewhere["id"], first["id"]);
    assert_eq!(app.count("reports").await, 2);
}

#[tokio::test]
async fn an_idempotency_key_replays_the_first_answer_and_refuses_a_different_body() {
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest]).await;
    let first = app
        .upload(
            &t,
            &[("log", Some("a.log"), OOB_LOG)],
            Some("run-42-attempt"),
        )
        .await;
    assert_eq!(first.status, StatusCode::CREATED);
    let replay = app
        .upload(
            &t,
            &[("log", Some("a.log"), OOB_LOG)],
            Some("run-42-attempt"),
        )
        .await;
    assert_eq!(replay.status, StatusCode::CREATED);
    assert_eq!(replay.json()["id"], first.json()["id"]);
    let reused = app
        .upload(
            &t,
            &[("log", Some("a.log"), OOM_LOG)],
            Some("run-42-attempt"),
        )
        .await;
    assert_eq!(
        reused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reused.body
    );
    assert_eq!(reused.error_code(), "idempotency_key_reused");
    assert_eq!(app.count("reports").await, 1);
}

#[tokio::test]
async fn bad_uploads_get_clear_errors_and_store_nothing() {
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest]).await;
    let secret_script = b"import os\nos.environ['AWS_ACCESS_KEY_ID']='AKIAIOSFODNN7EXAMPLE'\n";
    let huge_script = vec![b'#'; 65 * 1024];
    let cases: Vec<(&str, Vec<Part>, StatusCode, &str)> = vec![
        (
            "empty log",
            vec![("log", Some("a.log"), b"")],
            StatusCode::UNPROCESSABLE_ENTITY,
            "empty_log",
        ),
        (
            "binary log",
            vec![("log", Some("a.bin"), b"\x7fELF\x02\x01\x01\x00\x00\x00")],
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        ),
        (
            "no log part",
            vec![("meta", None, br#"{"project":"p"}"#)],
            StatusCode::BAD_REQUEST,
            "missing_log",
        ),
        (
            "malformed meta",
            vec![
                ("log", Some("a.log"), OOM_LOG),
                ("meta", None, b"{not json"),
            ],
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_meta",
        ),
        (
            "unknown meta key",
            vec![
                ("log", Some("a.log"), OOM_LOG),
                ("meta", None, br#"{"owner":"x"}"#),
            ],
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_meta",
        ),
        (
            "secret in script",
            vec![
                ("log", Some("a.log"), OOM_LOG),
                ("script", Some("r.py"), secret_script),
            ],
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_script",
        ),
        (
            "script over its cap",
            vec![
                ("log", Some("a.log"), OOM_LOG),
                ("script", Some("r.py"), &huge_script),
            ],
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
        ),
        (
            "unexpected part",
            vec![("log", Some("a.log"), OOM_LOG), ("extra", None, b"x")],
            StatusCode::BAD_REQUEST,
            "unexpected_field",
        ),
    ];
    for (what, parts, status, code) in cases {
        let res = app.upload(&t, &parts, None).await;
        assert_eq!(res.status, status, "{what}: {}", res.body);
        assert_eq!(res.error_code(), code, "{what}");
        assert!(!res.json()["error"]["message"].as_str().unwrap().is_empty());
    }
    let not_multipart = Request::post("/api/v1/reports")
        .header("authorization", format!("Bearer {t}"))
        .header("content-type", "text/plain")
        .body(Body::from("RuntimeError: x"))
        .unwrap();
    assert_eq!(
        app.send(not_multipart).await.status,
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    assert_eq!(stored_rows(&app).await, (0, 0, 0));
}

#[tokio::test]
async fn an_oversize_log_is_refused_with_413_before_storing() {
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest]).await;
    let mut state_app = app;
    let cap = 64 * 1024;
    // A router with a small cap, on the same database.
    let ruleset = std::sync::Arc::new(gpu_triage::rules::Ruleset::builtin().unwrap());
    let mut state =
        gpu_triage::web::AppState::new(state_app.db.clone(), "http://gpu-triage.test", ruleset);
    state.limits.upload.max_log_bytes = cap;
    state_app.router = gpu_triage::web::router(state);
    let big = vec![b'x'; cap as usize + 1];
    let res = state_app
        .upload(&t, &[("log", Some("big.log"), &big)], None)
        .await;
    assert_eq!(res.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", res.body);
    assert_eq!(res.error_code(), "too_large");
    assert_eq!(state_app.count("reports").await, 0);
}

#[tokio::test]
async fn tokens_are_checked_for_presence_revocation_and_scope() {
    let app = TestApp::spawn().await;
    let read = app.token("reader", &[Scope::Read]).await;
    let ingest = app.token("ci", &[Scope::Ingest]).await;
    let admin = app.token("root", &[Scope::Admin]).await;
    let no_token = app.get("/api/v1/search?q=x").await;
    assert_eq!(no_token.status, StatusCode::UNAUTHORIZED);
    assert_eq!(no_token.error_code(), "unauthorized");
    assert!(no_token.headers.contains_key("www-authenticate"));
    assert_eq!(
        app.get_as("gtr_0000", "/api/v1/search?q=x").await.status,
        StatusCode::UNAUTHORIZED
    );
    // Wrong scope: 403 both ways.
    let res = app
        .upload(&read, &[("log", Some("a.log"), OOM_LOG)], None)
        .await;
    assert_eq!(res.status, StatusCode::FORBIDDEN);
    assert_eq!(
        app.get_as(&ingest, "/api/v1/search?q=x").await.status,
        StatusCode::FORBIDDEN
    );
    // Admin implies every scope.
    assert_eq!(
        app.get_as(&admin, "/api/v1/search?q=x").await.status,
        StatusCode::OK
    );
    // A token in the query string is not a credential.
    assert_eq!(
        app.get(&format!("/api/v1/search?q=x&token={read}"))
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    // Revoked: 401 at once.
    gpu_triage::storage::tokens::revoke_tokens(
        app.db.pool(),
        gpu_triage::storage::tokens::TokenSelector::Name("reader"),
    )
    .await
    .unwrap();
    assert_eq!(
        app.get_as(&read, "/api/v1/search?q=x").await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(app.count("reports").await, 0);
}

#[tokio::test]
async fn unknown_ids_and_garbage_parameters_get_json_errors() {
    let app = TestApp::spawn().await;
    let t = app.token("root", &[Scope::Admin]).await;
    for path in [
        "/api/v1/reports/999",
        "/api/v1/reports/abc",
        "/api/v1/reports/-1",
        "/api/v1/groups/12345",
        "/api/v1/nope",
    ] {
        let res = app.get_as(&t, path).await;
        assert_eq!(res.status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(res.error_code(), "not_found", "{path}");
    }
    for path in [
        "/api/v1/search",
        "/api/v1/search?q=",
        "/api/v1/search?q=x&category=bogus",
        "/api/v1/search?q=x&page=0",
        "/api/v1/search?q=x&per_page=5000",
        "/api/v1/search?q=x&page=abc",
        "/api/v1/search?q=x&colour=red",
        "/api/v1/search?q=%00",
    ] {
        let res = app.get_as(&t, path).await;
        assert_eq!(res.status, StatusCode::BAD_REQUEST, "{path}: {}", res.body);
        assert_eq!(res.error_code(), "bad_query", "{path}");
    }
}

#[tokio::test]
async fn search_finds_reports_groups_and_fixes_with_filters_and_literal_terms() {
    let app = TestApp::spawn().await;
    let t = app.token("root", &[Scope::Admin]).await;
    let oob = app
        .upload(
            &t,
            &[
                ("log", Some("a.log"), OOB_LOG),
                ("meta", None, br#"{"project":"vision"}"#),
            ],
            None,
        )
        .await
        .json();
    app.upload(
        &t,
        &[
            ("log", Some("b.log"), OOM_LOG),
            ("meta", None, br#"{"project":"nlp"}"#),
        ],
        None,
    )
    .await;
    let fix = app
        .post_json(&t, &format!("/api/v1/groups/{}/fixes", oob["group_id"]), &serde_json::json!({"summary": "labels started at 1; shift them to 0", "link": "https://wiki.example/labels"}))
        .await;
    assert_eq!(fix.status, StatusCode::CREATED, "{}", fix.body);

    let raw = app
        .get_as(&t, "/api/v1/search?q=indexSelectSmallIndex")
        .await;
    let res = raw.json();
    assert_eq!(raw.status, StatusCode::OK, "{}", raw.body);
    let kinds: Vec<&str> = res["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"report"), "{res}");
    let res = app
        .get_as(
            &t,
            "/api/v1/search?q=memory&category=out_of_memory&project=nlp",
        )
        .await
        .json();
    let results = res["results"].as_array().unwrap();
    assert!(!results.is_empty(), "{res}");
    assert!(results.iter().all(|r| r["category"] == "out_of_memory"));
    // The project filter ignores letter case (people type "NLP" for "nlp").
    let upper = app
        .get_as(
            &t,
            "/api/v1/search?q=memory&category=out_of_memory&project=NLP",
        )
        .await
        .json();
    assert_eq!(upper["results"], res["results"], "{upper}");
    let res = app.get_as(&t, "/api/v1/search?q=shift%20them").await.json();
    assert!(
        res["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["kind"] == "fix"),
        "{res}"
    );
    // Hostile terms match literally and change nothing.
    for q in ["%27%20OR%201%3D1%20--", "%25", "Ind_xSelect", "%5C"] {
        let res = app.get_as(&t, &format!("/api/v1/search?q={q}")).await;
        assert_eq!(res.status, StatusCode::OK, "{q}");
        assert_eq!(
            res.json()["results"].as_array().unwrap().len(),
            0,
            "{q}: {}",
            res.body
        );
    }
    assert_eq!(app.count("reports").await, 2);

    let report = app
        .get_as(&t, &format!("/api/v1/reports/{}", oob["id"]))
        .await
        .json();
    assert_eq!(
        report["fixes"][0]["summary"],
        "labels started at 1; shift them to 0"
    );
    assert_eq!(report["fixes"][0]["author"], "root");
}

#[tokio::test]
async fn fixes_are_validated() {
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest]).await;
    let read = app.token("reader", &[Scope::Read]).await;
    let g = app
        .upload(&t, &[("log", Some("a.log"), OOM_LOG)], None)
        .await
        .json()["group_id"]
        .clone();
    let path = format!("/api/v1/groups/{g}/fixes");
    for (body, status) in [
        (
            serde_json::json!({"summary": ""}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            serde_json::json!({"summary": "x", "link": "javascript:alert(1)"}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            serde_json::json!({"summary": "x", "extra": 1}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            serde_json::json!({"details": "no summary"}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ] {
        let res = app.post_json(&t, &path, &body).await;
        assert_eq!(res.status, status, "{body}: {}", res.body);
    }
    assert_eq!(
        app.post_json(&read, &path, &serde_json::json!({"summary": "x"}))
            .await
            .status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        app.post_json(
            &t,
            "/api/v1/groups/999/fixes",
            &serde_json::json!({"summary": "x"})
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(app.count("fixes").await, 0);
}

/// The classify endpoint refuses what an upload refuses, for the same reasons: a blank body is
/// 422 `empty_log` (it was classified as an empty log before), a binary one 415.
#[tokio::test]
async fn classify_refuses_blank_and_binary_bodies_as_an_upload_does() {
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest]).await;
    for (body, status, code) in [
        (
            &b" \n\t\r\n   \n"[..],
            StatusCode::UNPROCESSABLE_ENTITY,
            "empty_log",
        ),
        (
            &b"\x7fELF\x02\x01\x01\x00\x00\xff\xfe\xfd"[..],
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        ),
    ] {
        let classify = Request::post("/api/v1/classify")
            .header("authorization", format!("Bearer {t}"))
            .body(Body::from(body.to_vec()))
            .unwrap();
        let res = app.send(classify).await;
        assert_eq!(res.status, status, "{}", res.body);
        assert_eq!(res.json()["error"]["code"], code, "{}", res.body);
        let upload = app.upload(&t, &[("log", Some("a.log"), body)], None).await;
        assert_eq!(upload.status, status, "{}", upload.body);
    }
    assert_eq!(app.count("reports").await, 0);
}

#[tokio::test]
async fn classify_stores_nothing_and_metrics_count_ingested_reports() {
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest]).await;
    let req = Request::post("/api/v1/classify")
        .header("authorization", format!("Bearer {t}"))
        .body(Body::from(OOM_LOG))
        .unwrap();
    let res = app.send(req).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert_eq!(res.json()["category"], "out_of_memory");
    assert_eq!(
        res.json()["facts"]["memory"]["requested_bytes"],
        2_147_483_648u64
    );
    assert_eq!(app.count("reports").await, 0);
    let empty = Request::post("/api/v1/classify")
        .header("authorization", format!("Bearer {t}"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        app.send(empty).await.status,
        StatusCode::UNPROCESSABLE_ENTITY
    );

    // Retries with one Idempotency-Key are one report, counted once.
    for _ in 0..3 {
        let res = app
            .upload(&t, &[("log", Some("a.log"), OOM_LOG)], Some("ci-run-7"))
            .await;
        assert!(res.status.is_success(), "{}", res.body);
    }
    let metrics = app.get("/metrics").await;
    assert_eq!(metrics.status, StatusCode::OK);
    assert!(
        metrics
            .body
            .contains("gpu_triage_reports_ingested_total{category=\"out_of_memory\"} 1"),
        "{}",
        metrics.body
    );
    assert!(
        metrics
            .body
            .contains("gpu_triage_http_request_duration_seconds_count{route=\"api\"}")
    );
}

#[tokio::test]
async fn concurrent_uploads_of_one_failure_all_count_in_its_group() {
    let app = std::sync::Arc::new(TestApp::spawn().await);
    let ingest = app.token("ci", &[Scope::Ingest]).await;
    let read = app.token("reader", &[Scope::Read]).await;
    let mut tasks = Vec::new();
    for run in 0..12 {
        let (app, ingest) = (app.clone(), ingest.clone());
        tasks.push(tokio::spawn(async move {
            let log = format!("run {run}\n{}", String::from_utf8_lossy(OOM_LOG));
            let res = app
                .upload(&ingest, &[("log", Some("oom.log"), log.as_bytes())], None)
                .await;
            assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
            res.json()["group_id"].as_i64().unwrap()
        }));
    }
    let mut groups = Vec::new();
    for t in tasks {
        groups.push(t.await.unwrap());
    }
    groups.dedup();
    assert_eq!(groups.len(), 1, "one failure, one group: {groups:?}");
    assert_eq!(app.count("groups").await, 1);
    let group = app
        .get_as(&read, &format!("/api/v1/groups/{}", groups[0]))
        .await
        .json();
    assert_eq!(group["count"], 12);
    assert!(group["last_seen"].as_str().unwrap() >= group["first_seen"].as_str().unwrap());
}

#[tokio::test]
async fn groups_are_listed_newest_first_with_counts_from_their_reports() {
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest]).await;
    let oom = app
        .upload(&t, &[("log", Some("a.log"), OOM_LOG)], None)
        .await
        .json();
    let oob = app
        .upload(&t, &[("log", Some("b.log"), OOB_LOG)], None)
        .await
        .json();
    let groups = gpu_triage::storage::groups::recent_groups(app.db.pool(), 10)
        .await
        .unwrap();
    let ids: Vec<i64> = groups.iter().map(|g| g.id).collect();
    assert_eq!(
        ids,
        [
            oob["group_id"].as_i64().unwrap(),
            oom["group_id"].as_i64().unwrap()
        ]
    );
    assert!(groups.iter().all(|g| g.report_count == 1));
}

#[tokio::test]
async fn oversize_json_bodies_get_413_and_wrong_methods_get_a_json_405() {
    let app = TestApp::spawn().await;
    let admin = app.token("admin", &[Scope::Admin, Scope::Ingest]).await;
    let uploaded = app
        .upload(&admin, &[("log", Some("ci.log"), OOB_LOG)], None)
        .await;
    assert_eq!(uploaded.status, StatusCode::CREATED, "{}", uploaded.body);
    let group = uploaded.json()["group_id"].as_i64().unwrap();
    let huge = serde_json::json!({"summary": "x".repeat(3 << 20)});
    for path in [
        format!("/api/v1/groups/{group}/fixes"),
        "/api/v1/rules".to_owned(),
        "/api/v1/rules/preview".to_owned(),
    ] {
        let res = app.post_json(&admin, &path, &huge).await;
        assert_eq!(
            res.status,
            StatusCode::PAYLOAD_TOO_LARGE,
            "{path}: {}",
            res.body
        );
        assert_eq!(res.error_code(), "too_large", "{path}");
    }
    assert_eq!(app.count("fixes").await, 0);
    assert_eq!(app.count("team_rules").await, 0);
    for (method, path) in [("GET", "/api/v1/classify"), ("DELETE", "/api/v1/reports/1")] {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {admin}"))
            .body(Body::empty())
            .unwrap();
        let res = app.send(req).await;
        assert_eq!(
            res.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path}"
        );
        assert_eq!(
            res.error_code(),
            "method_not_allowed",
            "{method} {path}: {}",
            res.body
        );
    }
}

#[tokio::test]
async fn a_blank_log_is_refused_with_its_reason_and_nothing_is_stored() {
    let app = TestApp::spawn().await;
    let token = app.token("ci", &[Scope::Ingest]).await;
    let res = app
        .upload(
            &token,
            &[("log", Some("blank.log"), b"  \n\t\n\r\n   \n")],
            None,
        )
        .await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", res.body);
    assert_eq!(res.error_code(), "empty_log");
    assert!(res.body.contains("blank"), "{}", res.body);
    assert_eq!(app.count("reports").await, 0);
}
