//! Issue 16, found by an attack pass on a running server. SECURITY.md item 15: NUL and other
//! control bytes are neutralized in every text stored (a crash log padded with NULs is still a
//! text log, a worker's output with a NUL is recorded, never lost as a 500 the worker retries, a
//! team rule with one is refused clearly; no route answers 500). Item 17: private responses are
//! `no-store`.

use axum::http::StatusCode;
use gpu_triage::auth::Scope;
use serde_json::json;

use crate::support::TestApp;

/// A log whose node died mid-write: the file system left NUL padding, and one line carries a
/// NUL and a bell inside the error message itself.
fn padded_log() -> Vec<u8> {
    let mut log = b"epoch 3 step 120 loss 0.41\n".to_vec();
    log.extend_from_slice(
        b"RuntimeError: CUDA error: an illegal memory access\x00 was\x07 encountered\n",
    );
    log.extend(std::iter::repeat_n(0u8, 6000));
    log.extend_from_slice(b"\nnode restarted\n");
    log
}

#[tokio::test]
async fn a_log_with_nul_padding_is_classified_and_its_pages_render() {
    let app = TestApp::spawn().await;
    let admin = app.token("ci", &[Scope::Admin]).await;
    let up = app
        .upload(&admin, &[("log", Some("padded.log"), &padded_log())], None)
        .await;
    assert_eq!(up.status, StatusCode::CREATED, "{}", up.body);
    let body = up.json();
    assert_eq!(body["classification"]["category"], "illegal_memory_access");
    let text = body["classification"]["root_cause"]["text"]
        .as_str()
        .unwrap();
    assert!(!text.contains(['\0', '\x07']), "{text:?}");
    assert_eq!(body["classification"]["root_cause"]["line"], 2);
    let id = body["id"].as_i64().unwrap();
    let got = app.get_as(&admin, &format!("/api/v1/reports/{id}")).await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
}

#[tokio::test]
async fn a_real_binary_file_is_still_refused() {
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest]).await;
    // A PNG header and chunk bytes: most bytes are not text.
    let png: Vec<u8> = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
        .iter()
        .copied()
        .chain((0..4000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8))
        .collect();
    let res = app
        .upload(&t, &[("log", Some("shot.png"), &png)], None)
        .await;
    assert_eq!(
        res.status,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "{}",
        res.body
    );
    assert_eq!(app.count("reports").await, 0);
}

#[tokio::test]
async fn metadata_with_nul_is_refused_never_a_500() {
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest]).await;
    let meta =
        json!({"project": "vision\u{0}x", "branch": "main\u{0}", "environment": "GPU 0\u{0}"})
            .to_string();
    // A plain file name, so that the metadata is what is judged (a NUL in the file name is
    // refused earlier, as a bad multipart part: security::sql).
    let res = app
        .upload(
            &t,
            &[
                (
                    "log",
                    Some("a.log"),
                    b"RuntimeError: CUDA error: misaligned address\n",
                ),
                ("meta", None, meta.as_bytes()),
            ],
            None,
        )
        .await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", res.body);
    assert_eq!(res.error_code(), "bad_meta");
    assert_eq!(app.count("reports").await, 0);
}

#[tokio::test]
async fn a_worker_result_with_nul_bytes_is_recorded_once() {
    let app = TestApp::spawn().await;
    let ingest = app.token("ci", &[Scope::Ingest]).await;
    let worker = app.token("gpu-1", &[Scope::Worker]).await;
    let up = app
        .upload(
            &ingest,
            &[
                (
                    "log",
                    Some("t.log"),
                    b"RuntimeError: CUDA error: device-side assert triggered\n",
                ),
                ("script", Some("r.py"), b"import torch\n"),
            ],
            None,
        )
        .await;
    assert_eq!(up.status, StatusCode::CREATED, "{}", up.body);
    let claim = app
        .post_json(
            &worker,
            "/api/v1/jobs/claim",
            &json!({"worker": "gpu-1", "wait_secs": 0,
            "gpu": {"name": "NVIDIA H100\u{0}", "driver_version": "550.54"}, "no_gpu": false, "sandbox": "bwrap"}),
        )
        .await;
    assert_eq!(claim.status, StatusCode::OK, "{}", claim.body);
    let claim = claim.json();
    let (job, lease) = (
        claim["job_id"].as_i64().unwrap(),
        claim["lease_token"].as_str().unwrap().to_owned(),
    );
    let result = json!({"lease_token": lease, "exit_code": 1, "signal": null, "timed_out": false,
        "duration_ms": 812, "truncated": false, "no_gpu": false, "sandbox": "bwrap", "error": null,
        "stdout": "step 1\u{0}\u{0}\n",
        "stderr": "Traceback (most recent call last):\n  File \"r.py\", line 3, in <module>\nIndexError: index out of range in self\u{0}\n",
        "gpu": {"name": "NVIDIA H100\u{0}", "driver_version": "550.54\u{0}"}});
    let path = format!("/api/v1/jobs/{job}/result");
    let first = app.post_json(&worker, &path, &result).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    let again = app.post_json(&worker, &path, &result).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    assert_eq!(app.count("reproductions").await, 1);
    let stderr: String = sqlx::query_scalar("SELECT stderr FROM reproductions")
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert!(
        stderr.contains("index out of range in self") && !stderr.contains('\0'),
        "{stderr:?}"
    );
}

#[tokio::test]
async fn a_team_rule_with_a_control_character_is_refused_with_its_reason() {
    let app = TestApp::spawn().await;
    let admin = app.token("alice", &[Scope::Admin]).await;
    let rule = json!({"id": "team.nul", "category": "library_error", "title": "My kernel\u{0} failed",
        "pattern": "MyKernel failed", "examples": ["MyKernel failed\u{0}"]});
    let res = app.post_json(&admin, "/api/v1/rules", &rule).await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", res.body);
    assert_eq!(res.error_code(), "invalid_rule");
    assert!(
        res.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("control character"),
        "{}",
        res.body
    );
    assert_eq!(app.count("team_rules").await, 0);
}

/// Issue 16 item 9: what a signed-in user or a token reads is never kept by a shared cache.
#[tokio::test]
async fn private_responses_carry_no_store_and_the_stylesheet_stays_cacheable() {
    let app = TestApp::spawn().await;
    let admin = app.token("alice", &[Scope::Admin]).await;
    let up = app
        .upload(
            &admin,
            &[(
                "log",
                Some("t.log"),
                b"RuntimeError: CUDA error: misaligned address\n",
            )],
            None,
        )
        .await;
    assert_eq!(up.status, StatusCode::CREATED, "{}", up.body);
    let id = up.json()["id"].as_i64().unwrap();
    let browser = super::sign_in(&app, &admin).await;
    let responses = [
        (
            "api report",
            app.get_as(&admin, &format!("/api/v1/reports/{id}")).await,
        ),
        (
            "api search",
            app.get_as(&admin, "/api/v1/search?q=misaligned").await,
        ),
        (
            "report page",
            super::page(&app, &browser.cookie, &format!("/reports/{id}")).await,
        ),
        (
            "raw log",
            super::page(&app, &browser.cookie, &format!("/reports/{id}/raw")).await,
        ),
        (
            "unauthorized",
            app.get(&format!("/api/v1/reports/{id}")).await,
        ),
    ];
    for (what, res) in responses {
        let cache = res
            .headers
            .get("cache-control")
            .map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(cache.as_deref(), Some("no-store"), "{what}: {}", res.status);
    }
    let css = app.get("/static/app.css").await;
    assert_eq!(css.headers["cache-control"], "public, max-age=3600");
}

/// Issue 16 item 9: the idempotency fingerprint covers the file name, so a second request that
/// differs only there is not answered with the first one's report.
#[tokio::test]
async fn an_idempotency_key_reused_with_another_file_name_is_refused() {
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest]).await;
    let log: &[u8] = b"RuntimeError: CUDA error: misaligned address\n";
    let first = app
        .upload(&t, &[("log", Some("rank0.log"), log)], Some("run-42"))
        .await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    let retry = app
        .upload(&t, &[("log", Some("rank0.log"), log)], Some("run-42"))
        .await;
    assert_eq!(retry.status, StatusCode::CREATED, "{}", retry.body);
    assert_eq!(retry.json()["id"], first.json()["id"]);
    let other = app
        .upload(&t, &[("log", Some("rank1.log"), log)], Some("run-42"))
        .await;
    assert_eq!(
        other.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        other.body
    );
    assert_eq!(other.error_code(), "idempotency_key_reused");
    assert_eq!(app.count("reports").await, 1);
}
