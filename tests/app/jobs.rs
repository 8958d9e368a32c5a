//! The reproduction queue, driven exactly as a GPU worker drives it (claim → heartbeat →
//! result over the in-process router), plus what the report page and API show afterwards.
//! Leases are expired by moving `lease_expires_at` into the past in SQL, never by sleeping.

use std::collections::HashSet;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpu_triage::auth::Scope;
use serde_json::{Value, json};

use crate::browse::{attr, page, sign_in, texts as select};
use crate::support::{TestApp, TestResponse, wait_until_async};

/// What the user uploaded: the asynchronous report, pointing at an innocent `loss.item()`.
pub(crate) const ASYNC_LOG: &str = "\
2026-07-30 03:36:28 | epoch 3 step 120 | loss 2.3012
Traceback (most recent call last):
  File \"/home/alice/proj/train.py\", line 57, in <module>
    print(loss.item())
RuntimeError: CUDA error: device-side assert triggered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.
";

pub(crate) const SCRIPT: &str = "import torch\nemb = torch.nn.Embedding(10, 4).cuda()\nidx = torch.tensor([10]).cuda()\nout = emb(idx)\nprint(out.sum().item())\n";

/// What the worker saw with CUDA_LAUNCH_BLOCKING=1: the kernel assertion and the true line.
pub(crate) const SYNC_STDERR: &str = "\
/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1289: indexSelectLargeIndex: block: [0,0,0], thread: [0,0,0] Assertion `srcIndex < srcSelectDimSize` failed.
Traceback (most recent call last):
  File \"/tmp/job/train.py\", line 41, in <module>
    out = emb(idx)
  File \"/usr/local/lib/python3.11/dist-packages/torch/nn/modules/module.py\", line 1736, in _wrapped_call_impl
    return self._call_impl(*args, **kwargs)
  File \"/usr/local/lib/python3.11/dist-packages/torch/nn/functional.py\", line 2551, in embedding
    return torch.embedding(weight, input, padding_idx, scale_grad_by_freq, sparse)
RuntimeError: CUDA error: device-side assert triggered
Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.
";

const HF_SECRET: &str = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567";

fn gpu() -> Value {
    json!({"index": 0, "name": "NVIDIA H100 80GB HBM3", "driver_version": "12.4",
           "total_memory_bytes": 85045231616u64, "compute_capability": "9.0"})
}

fn claim_body(worker: &str, wait_secs: u64) -> Value {
    json!({"worker": worker, "wait_secs": wait_secs, "gpu": gpu(), "no_gpu": false, "sandbox": "bwrap"})
}

pub(crate) fn result_body(lease: &str, stdout: &str, stderr: &str) -> Value {
    json!({"lease_token": lease, "exit_code": 1, "signal": null, "timed_out": false,
           "duration_ms": 4210, "stdout": stdout, "stderr": stderr, "truncated": false,
           "gpu": gpu(), "no_gpu": false, "sandbox": "bwrap", "error": null})
}

/// Uploads `log` with the reproduction script: (report id, job id).
pub(crate) async fn report_with_script(app: &TestApp, token: &str, log: &str) -> (i64, i64) {
    let res = app
        .upload(
            token,
            &[
                ("log", Some("train.log"), log.as_bytes()),
                ("script", Some("repro.py"), SCRIPT.as_bytes()),
            ],
            None,
        )
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let body = res.json();
    assert_eq!(body["repro"]["state"], "queued");
    (
        body["id"].as_i64().unwrap(),
        body["repro"]["job_id"].as_i64().unwrap(),
    )
}

pub(crate) async fn claim(app: &TestApp, token: &str, worker: &str) -> TestResponse {
    app.post_json(token, "/api/v1/jobs/claim", &claim_body(worker, 0))
        .await
}

/// Claims and returns (job id, lease token, attempt).
pub(crate) async fn claim_ok(app: &TestApp, token: &str, worker: &str) -> (i64, String, i64) {
    let res = claim(app, token, worker).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let j = res.json();
    (
        j["job_id"].as_i64().unwrap(),
        j["lease_token"].as_str().unwrap().to_owned(),
        j["attempt"].as_i64().unwrap(),
    )
}

/// Moves a running job's lease into the past, as if its worker had died a while ago.
async fn expire_lease(app: &TestApp, job_id: i64) {
    let n = sqlx::query(
        "UPDATE jobs SET lease_expires_at = now() - interval '1 second' \
         WHERE id = $1 AND state = 'running'",
    )
    .bind(job_id)
    .execute(app.db.pool())
    .await
    .unwrap()
    .rows_affected();
    assert_eq!(n, 1, "job {job_id} was running");
}

async fn job_row(app: &TestApp, job_id: i64) -> (String, i32, String) {
    sqlx::query_as("SELECT state, attempts, dead_reason FROM jobs WHERE id = $1")
        .bind(job_id)
        .fetch_one(app.db.pool())
        .await
        .unwrap()
}

pub(crate) async fn tokens(app: &TestApp) -> (String, String) {
    (
        app.token("ci", &[Scope::Ingest, Scope::Read]).await,
        app.token("gpu-host", &[Scope::Worker]).await,
    )
}

/// A job queued through another replica wakes the claims waiting on this one (issue 42 item
/// 4): the two share the database and nothing else, and this one's claims would look at the
/// queue again only after ten minutes.
#[tokio::test]
async fn a_job_queued_on_another_replica_wakes_the_claims_waiting_here() {
    let (db, _) = crate::support::fresh_db().await;
    let queued_on = TestApp::on(db.clone());
    let wake = std::sync::Arc::new(tokio::sync::Notify::new());
    let here = TestApp::on_with(db.clone(), |mut s| {
        s.queue.settings.poll = std::time::Duration::from_secs(600);
        s.queue.wake = wake.clone();
        s
    });
    let listener = gpu_triage::storage::jobs::listen_queued(&db)
        .await
        .expect("listen");
    let relay = tokio::spawn({
        let wake = wake.clone();
        async move { gpu_triage::app::reproduce::relay(listener, &wake).await }
    });
    let (ingest, worker) = tokens(&queued_on).await;
    let woken = wake.notified();
    tokio::pin!(woken);
    woken.as_mut().enable();
    let (_, job) = report_with_script(&queued_on, &ingest, ASYNC_LOG).await;
    tokio::time::timeout(std::time::Duration::from_secs(30), woken)
        .await
        .expect("the job queued on the other replica woke the claims waiting here");
    let res = here
        .post_json(&worker, "/api/v1/jobs/claim", &claim_body("host-1", 20))
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert_eq!(res.json()["job_id"], job);
    relay.abort();
}

#[tokio::test]
async fn an_empty_queue_answers_204_after_the_wait() {
    let app = TestApp::spawn().await;
    let (_, worker) = tokens(&app).await;
    for wait in [0, 1] {
        let res = app
            .post_json(&worker, "/api/v1/jobs/claim", &claim_body("host-1", wait))
            .await;
        assert_eq!(res.status, StatusCode::NO_CONTENT, "{}", res.body);
        assert!(res.body.is_empty());
    }
}

#[tokio::test]
async fn worker_endpoints_need_the_worker_scope_and_a_gpu_or_no_gpu() {
    let app = TestApp::spawn().await;
    let (ingest, worker) = tokens(&app).await;
    let (_, job) = report_with_script(&app, &ingest, ASYNC_LOG).await;
    let lease = json!({"lease_token": "00000000-0000-0000-0000-000000000000"});
    for (path, body) in [
        ("/api/v1/jobs/claim".to_owned(), claim_body("h", 0)),
        (format!("/api/v1/jobs/{job}/heartbeat"), lease.clone()),
        (
            format!("/api/v1/jobs/{job}/result"),
            result_body("x", "", ""),
        ),
    ] {
        let res = app.post_json(&ingest, &path, &body).await;
        assert_eq!(res.status, StatusCode::FORBIDDEN, "{path}: {}", res.body);
        assert_eq!(res.error_code(), "forbidden");
    }
    let res = app
        .post_json(
            &worker,
            "/api/v1/jobs/claim",
            &json!({"worker": "h", "wait_secs": 0, "gpu": null, "no_gpu": false, "sandbox": "bwrap"}),
        )
        .await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", res.body);
    let res = app
        .post_json(
            &worker,
            "/api/v1/jobs/claim",
            &json!({"worker": "h", "gpu": gpu(), "sandbox": "docker"}),
        )
        .await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", res.body);
    let res = app
        .post_json(
            &worker,
            &format!("/api/v1/jobs/{job}/heartbeat"),
            &json!({}),
        )
        .await;
    assert_eq!(res.status, StatusCode::BAD_REQUEST, "{}", res.body);
    // None of that claimed the job.
    assert_eq!(job_row(&app, job).await.0, "queued");
    let res = app
        .post_json(&worker, "/api/v1/jobs/999999/heartbeat", &lease)
        .await;
    assert_eq!(res.status, StatusCode::NOT_FOUND);
    // An admin token may act as a worker.
    let admin = app.token("root", &[Scope::Admin]).await;
    let (claimed, _, attempt) = claim_ok(&app, &admin, "admin-host").await;
    assert_eq!((claimed, attempt), (job, 1));
}

#[tokio::test]
async fn a_stale_lease_gets_409_and_the_second_worker_completes_the_job_once() {
    let app = TestApp::spawn().await;
    let (ingest, worker) = tokens(&app).await;
    let (_, job) = report_with_script(&app, &ingest, ASYNC_LOG).await;
    let (_, first, attempt) = claim_ok(&app, &worker, "host-a").await;
    assert_eq!(attempt, 1);
    let hb = app
        .post_json(
            &worker,
            &format!("/api/v1/jobs/{job}/heartbeat"),
            &json!({"lease_token": first}),
        )
        .await;
    assert_eq!(hb.status, StatusCode::OK, "{}", hb.body);
    assert_eq!(hb.json()["lease_secs"], 90);
    let wrong = app
        .post_json(
            &worker,
            &format!("/api/v1/jobs/{job}/heartbeat"),
            &json!({"lease_token": "not-a-uuid"}),
        )
        .await;
    assert_eq!(wrong.status, StatusCode::CONFLICT);

    expire_lease(&app, job).await;
    let hb = app
        .post_json(
            &worker,
            &format!("/api/v1/jobs/{job}/heartbeat"),
            &json!({"lease_token": first}),
        )
        .await;
    assert_eq!(hb.status, StatusCode::CONFLICT, "{}", hb.body);
    assert_eq!(hb.error_code(), "lease_lost");
    let late = app
        .post_json(
            &worker,
            &format!("/api/v1/jobs/{job}/result"),
            &result_body(&first, "", SYNC_STDERR),
        )
        .await;
    assert_eq!(late.status, StatusCode::CONFLICT, "{}", late.body);
    assert_eq!(app.count("reproductions").await, 0);

    // The next claim reaps the expired lease and hands the job out again.
    let (again, second, attempt) = claim_ok(&app, &worker, "host-b").await;
    assert_eq!((again, attempt), (job, 2));
    assert_ne!(first, second);
    let ok = app
        .post_json(
            &worker,
            &format!("/api/v1/jobs/{job}/result"),
            &result_body(&second, "", SYNC_STDERR),
        )
        .await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
    assert_eq!(ok.json()["state"], "done");
    // The first worker's result, arriving even later, is still refused.
    let later = app
        .post_json(
            &worker,
            &format!("/api/v1/jobs/{job}/result"),
            &result_body(&first, "", SYNC_STDERR),
        )
        .await;
    assert_eq!(later.status, StatusCode::CONFLICT, "{}", later.body);
    assert_eq!(app.count("reproductions").await, 1);
    let outcomes: Vec<String> =
        sqlx::query_scalar("SELECT outcome FROM job_attempts WHERE job_id = $1 ORDER BY attempt")
            .bind(job)
            .fetch_all(app.db.pool())
            .await
            .unwrap();
    assert_eq!(outcomes, vec!["expired", "result"]);
}

#[tokio::test]
async fn a_replayed_result_gets_the_same_reproduction_and_stores_one_row() {
    let app = TestApp::spawn().await;
    let (ingest, worker) = tokens(&app).await;
    let (_, job) = report_with_script(&app, &ingest, ASYNC_LOG).await;
    let (_, lease, _) = claim_ok(&app, &worker, "host-a").await;
    let path = format!("/api/v1/jobs/{job}/result");
    let body = result_body(&lease, "step 1\n", SYNC_STDERR);
    let first = app.post_json(&worker, &path, &body).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    let second = app.post_json(&worker, &path, &body).await;
    assert_eq!(second.status, StatusCode::OK, "{}", second.body);
    let (a, b) = (first.json(), second.json());
    assert!(a["reproduction_id"].as_i64().is_some());
    assert_eq!(a["reproduction_id"], b["reproduction_id"]);
    assert_eq!(a["classification"], b["classification"]);
    assert_eq!(a["classification"]["category"], "out_of_bounds");
    assert_eq!(app.count("reproductions").await, 1);
    // The same lease with a different result is not a retry.
    let other = app
        .post_json(&worker, &path, &result_body(&lease, "other\n", ""))
        .await;
    assert_eq!(other.status, StatusCode::CONFLICT, "{}", other.body);
    assert_eq!(app.count("reproductions").await, 1);
    let metrics = app.get("/metrics").await.body;
    assert!(
        metrics.contains("gpu_triage_jobs_total{event=\"claimed\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("gpu_triage_jobs_total{event=\"completed\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn expired_leases_are_requeued_until_the_job_is_dead_with_its_reason() {
    let app = TestApp::spawn().await;
    let (ingest, worker) = tokens(&app).await;
    let (_, job) = report_with_script(&app, &ingest, ASYNC_LOG).await;
    for attempt in 1..=3 {
        let (id, _, n) = claim_ok(&app, &worker, &format!("host-{attempt}")).await;
        assert_eq!((id, n), (job, attempt));
        expire_lease(&app, job).await;
    }
    // The claim runs the reaper first: the job is dead, nothing is handed out.
    assert_eq!(
        claim(&app, &worker, "host-4").await.status,
        StatusCode::NO_CONTENT
    );
    let (state, attempts, reason) = job_row(&app, job).await;
    assert_eq!((state.as_str(), attempts), ("dead", 3));
    assert!(reason.contains("3 of 3 attempts"), "{reason}");
    assert!(reason.contains("lease expired"), "{reason}");
    assert!(reason.contains("host-3"), "{reason}");
}

#[tokio::test]
async fn a_worker_error_is_a_failed_attempt_and_the_poison_job_dies() {
    let app = TestApp::spawn().await;
    let (ingest, worker) = tokens(&app).await;
    let (report, job) = report_with_script(&app, &ingest, ASYNC_LOG).await;
    for attempt in 1..=3 {
        let (_, lease, n) = claim_ok(&app, &worker, "host-a").await;
        assert_eq!(n, attempt);
        let mut body = result_body(&lease, "", "");
        body["exit_code"] = Value::Null;
        body["error"] = json!("bwrap: setting up uid map: Permission denied");
        let path = format!("/api/v1/jobs/{job}/result");
        let res = app.post_json(&worker, &path, &body).await;
        assert_eq!(res.status, StatusCode::OK, "{}", res.body);
        let want = if attempt < 3 { "queued" } else { "dead" };
        assert_eq!(res.json()["state"], want);
        assert_eq!(res.json()["reproduction_id"], Value::Null);
        // A retry of the same post is answered, not counted twice.
        let again = app.post_json(&worker, &path, &body).await;
        assert_eq!(again.status, StatusCode::OK, "{}", again.body);
        assert_eq!(job_row(&app, job).await.1, attempt as i32);
    }
    let (state, _, reason) = job_row(&app, job).await;
    assert_eq!(state, "dead");
    assert!(reason.contains("Permission denied"), "{reason}");
    assert_eq!(app.count("reproductions").await, 0);
    let api = app
        .get_as(&ingest, &format!("/api/v1/reports/{report}"))
        .await
        .json();
    let r = &api["reproductions"][0];
    assert_eq!(
        (r["job_id"].as_i64(), r["state"].as_str()),
        (Some(job), Some("dead"))
    );
    assert!(r["dead_reason"].as_str().unwrap().contains("3 of 3"), "{r}");
    assert_eq!(r["exit_code"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_claimers_take_ten_jobs_each_exactly_once() {
    let app = TestApp::spawn().await;
    let (ingest, worker) = tokens(&app).await;
    let mut jobs = HashSet::new();
    for i in 0..10 {
        let log = format!("run {i}\n{ASYNC_LOG}");
        jobs.insert(report_with_script(&app, &ingest, &log).await.1);
    }
    let app = std::sync::Arc::new(app);
    let mut tasks = Vec::new();
    for i in 0..20 {
        let (app, worker) = (app.clone(), worker.clone());
        tasks.push(tokio::spawn(async move {
            let res = claim(&app, &worker, &format!("host-{i}")).await;
            match res.status {
                StatusCode::OK => Some(res.json()["job_id"].as_i64().unwrap()),
                StatusCode::NO_CONTENT => None,
                other => panic!("{other}: {}", res.body),
            }
        }));
    }
    let mut claimed = Vec::new();
    for t in tasks {
        if let Some(id) = t.await.unwrap() {
            claimed.push(id);
        }
    }
    let unique: HashSet<i64> = claimed.iter().copied().collect();
    assert_eq!(claimed.len(), 10, "{claimed:?}");
    assert_eq!(unique, jobs);
    let running: i64 =
        sqlx::query_scalar("SELECT count(*) FROM jobs WHERE state = 'running' AND attempts = 1")
            .fetch_one(app.db.pool())
            .await
            .unwrap();
    assert_eq!(running, 10);
}

#[tokio::test]
async fn outputs_over_the_cap_get_413_and_store_nothing() {
    let app = TestApp::spawn().await;
    let (ingest, worker) = tokens(&app).await;
    let (_, job) = report_with_script(&app, &ingest, ASYNC_LOG).await;
    let (_, lease, _) = claim_ok(&app, &worker, "host-a").await;
    let big = "x".repeat((2 << 20) + 1);
    let res = app
        .post_json(
            &worker,
            &format!("/api/v1/jobs/{job}/result"),
            &result_body(&lease, &big, ""),
        )
        .await;
    assert_eq!(
        res.status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "{}",
        &res.body[..200.min(res.body.len())]
    );
    assert_eq!(res.error_code(), "too_large");
    assert_eq!(app.count("reproductions").await, 0);
    assert_eq!(job_row(&app, job).await.0, "running");
}

// ───────────────────────── the report page and API after a reproduction ─────────────────────────

pub(crate) async fn post_form(
    app: &TestApp,
    cookie: &str,
    path: &str,
    body: String,
) -> TestResponse {
    let req = Request::post(path)
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(body))
        .unwrap();
    app.send(req).await
}

#[tokio::test]
async fn a_synchronous_reproduction_moves_the_error_and_the_report_follows_it() {
    let app = TestApp::spawn().await;
    let (ingest, worker) = tokens(&app).await;
    let (report, job) = report_with_script(&app, &ingest, ASYNC_LOG).await;
    let before = app
        .get_as(&ingest, &format!("/api/v1/reports/{report}"))
        .await
        .json();
    assert_eq!(
        before["classification"]["root_cause"]["rule"],
        "cuda.device_side_assert"
    );
    assert_eq!(before["reproductions"][0]["state"], "queued");
    assert_eq!(before["category_source"], "log");

    let (_, lease, _) = claim_ok(&app, &worker, "gpu-host-7").await;
    let stdout = format!("loading data\nHF_TOKEN={HF_SECRET}\n");
    let res = app
        .post_json(
            &worker,
            &format!("/api/v1/jobs/{job}/result"),
            &result_body(&lease, &stdout, SYNC_STDERR),
        )
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let root = &res.json()["classification"]["root_cause"];
    assert_eq!(root["rule"], "cuda.assert.index");
    assert_eq!(root["line"], 1);

    // Secrets never reach the database.
    let (out, err): (String, String) =
        sqlx::query_as("SELECT stdout, stderr FROM reproductions WHERE job_id = $1")
            .bind(job)
            .fetch_one(app.db.pool())
            .await
            .unwrap();
    assert!(!out.contains(HF_SECRET), "{out}");
    assert!(out.contains("[REDACTED:"), "{out}");
    assert_eq!(err, SYNC_STDERR);

    // The API lists the reproduction, and the report's headline follows the specific cause.
    let api = app
        .get_as(&ingest, &format!("/api/v1/reports/{report}"))
        .await
        .json();
    let r = &api["reproductions"][0];
    assert_eq!(r["job_id"], job);
    assert_eq!(r["state"], "done");
    assert_eq!(r["attempt"], 1);
    assert_eq!(r["exit_code"], 1);
    assert_eq!(r["duration_ms"], 4210);
    assert_eq!(r["gpu"]["name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(r["stderr"], SYNC_STDERR);
    assert!(!r["stdout"].as_str().unwrap().contains(HF_SECRET));
    assert_eq!(r["truncated"], false);
    assert_eq!(r["no_gpu"], false);
    assert_eq!(r["sandbox"], "bwrap");
    assert_eq!(
        r["classification"]["root_cause"]["rule"],
        "cuda.assert.index"
    );
    assert_eq!(api["category_source"], "reproduction");
    assert_eq!(api["category"], "out_of_bounds");
    assert_eq!(
        api["title"],
        "Index out of range in a CUDA kernel (device-side assert)"
    );
    // The log's own classification is kept as it was.
    assert_eq!(
        api["classification"]["root_cause"]["rule"],
        "cuda.device_side_assert"
    );

    // The page shows both traces with the failing lines marked, and says where it moved.
    let reader = app.token("reader", &[Scope::Read]).await;
    let b = sign_in(&app, &reader).await;
    let html = page(&app, &b.cookie, &format!("/reports/{report}")).await;
    assert_eq!(html.status, StatusCode::OK);
    let body = &html.body;
    // The true line is known now: no more "re-run with CUDA_LAUNCH_BLOCKING=1" (issue 39 item 7).
    assert!(select(body, "#async-warning").is_empty(), "{body}");
    assert!(
        select(body, "ol.steps li")
            .iter()
            .all(|s| !s.contains("CUDA_LAUNCH_BLOCKING")),
        "{:?}",
        select(body, "ol.steps li")
    );
    assert_eq!(
        select(body, ".moved"),
        vec![
            "reported at train.py:57 print(loss.item()), actually raised at train.py:41 out = emb(idx)"
        ]
    );
    let reported = select(body, ".trace-reported .user-line").join("\n");
    assert!(reported.contains("print(loss.item())"), "{reported}");
    let sync_user = select(body, ".trace-sync .true-line").join("\n");
    assert!(sync_user.contains("out = emb(idx)"), "{sync_user}");
    assert!(sync_user.contains("train.py\", line 41"), "{sync_user}");
    let sync_root = select(body, ".trace-sync .root-line").join("\n");
    assert!(
        sync_root.contains("Assertion `srcIndex < srcSelectDimSize` failed"),
        "{sync_root}"
    );
    let reported_root = select(body, ".trace-reported .root-line").join("\n");
    assert!(
        reported_root.contains("device-side assert triggered"),
        "{reported_root}"
    );
    let note = select(body, "#category-followed").join("");
    assert!(
        note.contains("follows the synchronous reproduction (job"),
        "{note}"
    );
    assert!(note.contains("Device-side assert triggered"), "{note}");
    assert_eq!(
        select(body, "h1").join(""),
        "Out of bounds Index out of range in a CUDA kernel (device-side assert)"
    );
    assert!(
        select(body, ".badge").is_empty(),
        "a sandboxed GPU run has no badges"
    );
    assert!(!body.contains(HF_SECRET));
    // A read-only user sees no re-queue button.
    assert!(select(body, "form.requeue").is_empty());
}

#[tokio::test]
async fn a_finished_job_is_requeued_from_the_report_page_once() {
    let app = TestApp::spawn().await;
    let (ingest, worker) = tokens(&app).await;
    let (report, job) = report_with_script(&app, &ingest, ASYNC_LOG).await;
    let (_, lease, _) = claim_ok(&app, &worker, "cpu-host").await;
    let hostile = format!("<script>alert(1)</script>\n{SYNC_STDERR}");
    let mut body = result_body(&lease, "<img src=x onerror=alert(2)>", &hostile);
    body["gpu"] = Value::Null;
    body["no_gpu"] = json!(true);
    body["sandbox"] = json!("none");
    let res = app
        .post_json(&worker, &format!("/api/v1/jobs/{job}/result"), &body)
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);

    let b = sign_in(&app, &ingest).await;
    let path = format!("/reports/{report}");
    let html = page(&app, &b.cookie, &path).await.body;
    assert!(!html.contains("<script>alert") && !html.contains("<img src=x"));
    assert!(
        select(&html, ".raw-stderr")
            .join("")
            .contains("<script>alert(1)</script>")
    );
    let badges = select(&html, ".badge");
    assert_eq!(badges, vec!["no GPU", "unsandboxed"]);
    let action = attr(&html, "form.requeue", "action").expect("re-queue button");
    assert_eq!(action, format!("/jobs/{job}/requeue"));

    // Without the CSRF token, refused and nothing queued.
    let res = post_form(&app, &b.cookie, &action, "csrf=wrong".into()).await;
    assert_eq!(res.status, StatusCode::FORBIDDEN);
    assert_eq!(app.count("jobs").await, 1);

    // What the job asked for (a GPU, three runs) is asked for again.
    sqlx::query("UPDATE jobs SET needs = 'gpu', repeats = 3 WHERE id = $1")
        .bind(job)
        .execute(app.db.pool())
        .await
        .unwrap();
    let res = post_form(&app, &b.cookie, &action, format!("csrf={}", b.csrf)).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    let copied: (String, i16) =
        sqlx::query_as("SELECT needs, repeats FROM jobs WHERE requeued_from = $1")
            .bind(job)
            .fetch_one(app.db.pool())
            .await
            .unwrap();
    assert_eq!(copied, ("gpu".to_owned(), 3));
    let location = res.headers["location"].to_str().unwrap().to_owned();
    assert!(
        location.starts_with(&format!("/reports/{report}#job-")),
        "{location}"
    );
    assert_eq!(app.count("jobs").await, 2);
    // A second click while the new job is pending does not queue a third.
    let res = post_form(&app, &b.cookie, &action, format!("csrf={}", b.csrf)).await;
    assert_eq!(res.status, StatusCode::CONFLICT);
    assert_eq!(app.count("jobs").await, 2);

    let html = page(&app, &b.cookie, &path).await.body;
    let states = select(&html, ".job .state");
    assert_eq!(states, vec!["done", "queued"]);
    assert!(
        select(&html, "form.requeue").is_empty(),
        "one pending job at a time"
    );
    assert!(
        select(&html, ".job-head")
            .join(" ")
            .contains(&format!("re-queued from job {job}"))
    );
    // The worker gets the new job.
    let (new_job, _, attempt) = claim_ok(&app, &worker, "gpu-host").await;
    assert_ne!(new_job, job);
    assert_eq!(attempt, 1);
}

// ───────────────────────── the real binary over real HTTP ─────────────────────────

/// A worker's HTTP calls, over a real socket: (status, body).
fn http_post(agent: &ureq::Agent, url: &str, token: &str, body: &Value) -> (u16, String) {
    let mut res = agent
        .post(url)
        .header("Authorization", format!("Bearer {token}"))
        .header("Content-Type", "application/json")
        .send(body.to_string())
        .unwrap();
    let status = res.status().as_u16();
    (status, res.body_mut().read_to_string().unwrap_or_default())
}

#[test]
fn the_served_binary_long_polls_reaps_in_the_background_and_records_results() {
    use crate::support::{KillOnDrop, binary, create_token, database_url, free_port, http_get};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (db, options) = rt.block_on(crate::support::fresh_db());
    let url = database_url(options.get_database().unwrap());
    let ingest = create_token(&url, "ingest", "ci");
    let worker = create_token(&url, "worker", "gpu-host");
    let port = free_port();
    let child = binary()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("DATABASE_URL", &url)
        .env("GPU_TRIAGE_JOB_LEASE_SECS", "5")
        .env("GPU_TRIAGE_JOB_REAPER_SECS", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _server = KillOnDrop(child);
    assert!(crate::support::wait_for_status(port, "/readyz", 200, 60));
    let base = format!("http://127.0.0.1:{port}");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let dir = tempfile::tempdir().unwrap();
    let upload = |name: &str, text: &str| {
        let log = dir.path().join(name);
        std::fs::write(&log, text).unwrap();
        let script = dir.path().join("repro.py");
        std::fs::write(&script, SCRIPT).unwrap();
        let out = binary()
            .args(["upload", "--server", &base, "--script"])
            .arg(&script)
            .arg(&log)
            .env("GPU_TRIAGE_TOKEN", &ingest)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };

    // A claim waiting on an empty queue is woken by an upload.
    let waiting = {
        let (agent, worker, base) = (agent.clone(), worker.clone(), base.clone());
        std::thread::spawn(move || {
            http_post(
                &agent,
                &format!("{base}/api/v1/jobs/claim"),
                &worker,
                &claim_body("host-a", 30),
            )
        })
    };
    upload("first.log", ASYNC_LOG);
    let (status, body) = waiting.join().unwrap();
    assert_eq!(status, 200, "{body}");
    let job: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(job["lease_secs"], 5);
    assert_eq!(job["script"], SCRIPT);
    assert_eq!(job["script_name"], "repro.py");
    assert_eq!(job["attempt"], 1);
    let job_id = job["job_id"].as_i64().unwrap();

    // The worker dies: its lease runs out and the background reaper requeues the job, with no
    // claim involved.
    rt.block_on(async {
        sqlx::query("UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1")
            .bind(job_id)
            .execute(db.pool())
            .await
            .unwrap();
        wait_until_async(
            std::time::Duration::from_secs(30),
            "the reaper to requeue the job",
            async || {
                let state: String = sqlx::query_scalar("SELECT state FROM jobs WHERE id = $1")
                    .bind(job_id)
                    .fetch_one(db.pool())
                    .await
                    .unwrap();
                state == "queued"
            },
        )
        .await;
    });

    let (status, body) = http_post(
        &agent,
        &format!("{base}/api/v1/jobs/claim"),
        &worker,
        &claim_body("host-b", 0),
    );
    assert_eq!(status, 200, "{body}");
    let job: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (job["job_id"].as_i64(), job["attempt"].as_i64()),
        (Some(job_id), Some(2))
    );
    let lease = job["lease_token"].as_str().unwrap();
    let hb = http_post(
        &agent,
        &format!("{base}/api/v1/jobs/{job_id}/heartbeat"),
        &worker,
        &json!({"lease_token": lease}),
    );
    assert_eq!(hb, (200, r#"{"lease_secs":5}"#.to_owned()));
    let (status, body) = http_post(
        &agent,
        &format!("{base}/api/v1/jobs/{job_id}/result"),
        &worker,
        &result_body(lease, "", SYNC_STDERR),
    );
    assert_eq!(status, 200, "{body}");
    let (_, metrics) = http_get(port, "/metrics").unwrap();
    for line in [
        "gpu_triage_jobs_total{event=\"claimed\"} 2",
        "gpu_triage_jobs_total{event=\"requeued\"} 1",
        "gpu_triage_jobs_total{event=\"completed\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
}

#[tokio::test]
async fn a_cpu_follow_up_run_is_classified_stored_scrubbed_and_shown_as_a_third_trace() {
    let app = TestApp::spawn().await;
    let (ingest, worker) = tokens(&app).await;
    let (report, job) = report_with_script(&app, &ingest, ASYNC_LOG).await;
    let (_, lease, _) = claim_ok(&app, &worker, "gpu-host-7").await;
    let cpu_stderr = format!(
        "Traceback (most recent call last):\n  File \"/tmp/repro.py\", line 13, in <module>\n    out = emb(idx)\nIndexError: index out of range in self\nHF_TOKEN={HF_SECRET}\u{0}\n"
    );
    let mut body = result_body(&lease, "", SYNC_STDERR);
    body["cpu"] = json!({"exit_code": 1, "timed_out": false, "duration_ms": 900,
                         "stdout": "", "stderr": cpu_stderr, "truncated": false});
    let res = app
        .post_json(&worker, &format!("/api/v1/jobs/{job}/result"), &body)
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);

    let api = app
        .get_as(&ingest, &format!("/api/v1/reports/{report}"))
        .await
        .json();
    let cpu = &api["reproductions"][0]["cpu_run"];
    assert_eq!(cpu["exit_code"], 1, "{api}");
    // The server classifies it, scrubbed of secrets and NUL bytes.
    assert_eq!(cpu["classification"]["category"], "out_of_bounds", "{cpu}");
    let stderr = cpu["stderr"].as_str().unwrap();
    assert!(
        !stderr.contains(HF_SECRET) && !stderr.contains('\u{0}'),
        "{stderr}"
    );

    let b = crate::browse::sign_in(&app, &ingest).await;
    let page = crate::browse::page(&app, &b.cookie, &format!("/reports/{report}")).await;
    let titles = crate::browse::texts(&page.body, ".trace h3");
    assert_eq!(titles.len(), 3, "{titles:?}");
    assert!(titles[2].contains("On the CPU"), "{titles:?}");
    let line = crate::browse::texts(&page.body, "p.cpu-line");
    assert_eq!(
        line,
        ["On the CPU: IndexError: index out of range in self at repro.py:13 out = emb(idx)"]
    );
}

#[tokio::test]
async fn repeated_runs_give_a_verdict_that_the_report_and_its_group_show() {
    let app = TestApp::spawn().await;
    let (ingest, worker) = tokens(&app).await;
    for bad in [
        json!({"repeats": 0}),
        json!({"repeats": 6}),
        json!({"repeats": "3"}),
    ] {
        let meta = bad.to_string();
        let res = app
            .upload(
                &ingest,
                &[
                    ("log", Some("train.log"), ASYNC_LOG.as_bytes()),
                    ("meta", None, meta.as_bytes()),
                ],
                None,
            )
            .await;
        assert_eq!(
            res.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{bad}: {}",
            res.body
        );
        assert_eq!(res.error_code(), "bad_meta");
    }
    let meta = json!({"repeats": 5}).to_string();
    let res = app
        .upload(
            &ingest,
            &[
                ("log", Some("train.log"), ASYNC_LOG.as_bytes()),
                ("script", Some("repro.py"), SCRIPT.as_bytes()),
                ("meta", None, meta.as_bytes()),
            ],
            None,
        )
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let (report, job) = (
        res.json()["id"].as_i64().unwrap(),
        res.json()["repro"]["job_id"].as_i64().unwrap(),
    );
    let claimed = claim(&app, &worker, "gpu-host-7").await.json();
    assert_eq!(claimed["repeats"], 5, "{claimed}");
    let lease = claimed["lease_token"].as_str().unwrap();
    let run = |exit: i32| {
        json!({"exit_code": exit, "duration_ms": 100,
               "failing_line": if exit == 0 { Value::Null } else { json!("repro.py:13") }})
    };
    let mut body = result_body(lease, "", SYNC_STDERR);
    // More runs than a job may ask for: refused.
    body["runs"] = json!([run(1), run(1), run(1), run(1), run(1), run(1)]);
    let res = app
        .post_json(&worker, &format!("/api/v1/jobs/{job}/result"), &body)
        .await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", res.body);
    body["runs"] = json!([run(0), run(1), run(0), run(1), run(0)]);
    let res = app
        .post_json(&worker, &format!("/api/v1/jobs/{job}/result"), &body)
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);

    let api = app
        .get_as(&ingest, &format!("/api/v1/reports/{report}"))
        .await
        .json();
    let r = &api["reproductions"][0];
    assert_eq!(r["verdict"], "flaky: fails 2/5", "{r}");
    assert_eq!(r["runs"].as_array().map(Vec::len), Some(5));
    let group = api["group_id"].as_i64().unwrap();
    let g = app
        .get_as(&ingest, &format!("/api/v1/groups/{group}"))
        .await
        .json();
    assert_eq!(g["verdict"], "flaky: fails 2/5", "{g}");

    let b = crate::browse::sign_in(&app, &ingest).await;
    let page = crate::browse::page(&app, &b.cookie, &format!("/reports/{report}")).await;
    assert_eq!(
        crate::browse::texts(&page.body, "p.verdict"),
        ["flaky: fails 2/5"]
    );
    let page = crate::browse::page(&app, &b.cookie, &format!("/groups/{group}")).await;
    assert_eq!(
        crate::browse::texts(&page.body, ".verdict"),
        ["flaky: fails 2/5"]
    );
}

#[tokio::test]
async fn a_worker_without_a_gpu_claims_only_jobs_that_may_run_anywhere() {
    let app = TestApp::spawn().await;
    let (ingest, worker) = tokens(&app).await;
    let upload = |log: &'static str, meta: Option<Value>| {
        let (app, ingest) = (&app, &ingest);
        async move {
            let meta = meta.map(|m| m.to_string()).unwrap_or_default();
            let mut parts: Vec<(&str, Option<&str>, &[u8])> = vec![
                ("log", Some("train.log"), log.as_bytes()),
                ("script", Some("repro.py"), SCRIPT.as_bytes()),
            ];
            if !meta.is_empty() {
                parts.push(("meta", None, meta.as_bytes()));
            }
            app.upload(ingest, &parts, None).await
        }
    };
    let oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n";
    let gpu_job = upload(oom, None).await.json()["repro"]["job_id"]
        .as_i64()
        .unwrap();
    let any_job = upload(ASYNC_LOG, None).await.json()["repro"]["job_id"]
        .as_i64()
        .unwrap();
    let bad = upload(ASYNC_LOG, Some(json!({"needs": "tpu"}))).await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.body);
    assert_eq!(bad.error_code(), "bad_meta");

    let cpu_claim = json!({"worker": "cpu-1", "wait_secs": 0, "gpu": null, "no_gpu": true,
                           "sandbox": "bwrap"});
    let first = app
        .post_json(&worker, "/api/v1/jobs/claim", &cpu_claim)
        .await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    assert_eq!(
        first.json()["job_id"],
        any_job,
        "the older OOM job needs a GPU"
    );
    let none = app
        .post_json(&worker, "/api/v1/jobs/claim", &cpu_claim)
        .await;
    assert_eq!(none.status, StatusCode::NO_CONTENT, "{}", none.body);
    let (claimed, _, _) = claim_ok(&app, &worker, "gpu-1").await;
    assert_eq!(claimed, gpu_job);
    // The uploader can say an OOM script may run anywhere.
    let forced = upload(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB.\n",
        Some(json!({"needs": "any"})),
    )
    .await
    .json()["repro"]["job_id"]
        .as_i64()
        .unwrap();
    let taken = app
        .post_json(&worker, "/api/v1/jobs/claim", &cpu_claim)
        .await;
    assert_eq!(taken.json()["job_id"], forced, "{}", taken.body);
}
