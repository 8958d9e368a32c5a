//! What the report page says while its reproduction waits or runs (issue 19): how long the job
//! has been queued, which workers were in touch lately (recorded from real claim polls,
//! heartbeats and results over the API), who runs it and which attempt, the self-refresh of
//! pending pages only, and the true failing line in the header card once a result is in.

use axum::http::StatusCode;
use gpu_triage::auth::Scope;
use serde_json::{Value, json};

use crate::browse::{attr, page, sign_in, texts};
use crate::support::TestApp;

/// The uploaded log: the device-side assert reported at an innocent line.
const ASYNC_LOG: &str = "\
Traceback (most recent call last):
  File \"/home/alice/proj/train.py\", line 57, in <module>
    print(loss.item())
RuntimeError: CUDA error: device-side assert triggered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
";

const SCRIPT: &str = "import torch\nemb = torch.nn.Embedding(10, 4).cuda()\nidx = torch.tensor([10]).cuda()\nout = emb(idx)\n";

/// The run with CUDA_LAUNCH_BLOCKING=1: the true line.
const SYNC_STDERR: &str = "\
/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1289: indexSelectLargeIndex: block: [0,0,0], thread: [0,0,0] Assertion `srcIndex < srcSelectDimSize` failed.
Traceback (most recent call last):
  File \"/tmp/job/train.py\", line 41, in <module>
    out = emb(idx)
RuntimeError: CUDA error: device-side assert triggered
";

fn gpu_claim(worker: &str) -> Value {
    json!({"worker": worker, "wait_secs": 0, "no_gpu": false, "sandbox": "bwrap",
           "gpu": {"index": 0, "name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}})
}

fn cpu_claim(worker: &str) -> Value {
    json!({"worker": worker, "wait_secs": 0, "gpu": null, "no_gpu": true, "sandbox": "bwrap"})
}

/// Uploads the log and script with `meta`: (report id, job id).
async fn report_with_script(app: &TestApp, token: &str, meta: Value) -> (i64, i64) {
    let meta = meta.to_string();
    let res = app
        .upload(
            token,
            &[
                ("log", Some("train.log"), ASYNC_LOG.as_bytes()),
                ("script", Some("repro.py"), SCRIPT.as_bytes()),
                ("meta", None, meta.as_bytes()),
            ],
            None,
        )
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let body = res.json();
    (
        body["id"].as_i64().unwrap(),
        body["repro"]["job_id"].as_i64().unwrap(),
    )
}

/// Moves a timestamp column of job `id` `secs` seconds into the past.
async fn backdate_job(app: &TestApp, id: i64, column: &str, secs: i64) {
    let sql =
        format!("UPDATE jobs SET {column} = {column} - make_interval(secs => $2) WHERE id = $1");
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .bind(secs as f64)
        .execute(app.db.pool())
        .await
        .unwrap();
}

fn one(html: &str, css: &str) -> String {
    let found = texts(html, css);
    assert_eq!(found.len(), 1, "{css}: {found:?}");
    found[0].split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A pending page carries the self-refresh (script, and a meta refresh for pages without
/// JavaScript); a finished one carries neither.
fn refreshes(html: &str) -> bool {
    let section = attr(html, "section#reproduction", "data-pending").is_some();
    let script = attr(html, "script", "src").as_deref() == Some("/static/report.js");
    let meta = html.contains(r#"<noscript><meta http-equiv="refresh" content="10"></noscript>"#);
    assert!(
        section == script && script == meta,
        "all or none: {section} {script} {meta}"
    );
    section
}

#[tokio::test]
async fn a_queued_job_says_how_long_it_waited_and_which_workers_polled_then_who_runs_it() {
    let app = TestApp::spawn().await;
    let ingest = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let worker = app.token("fleet", &[Scope::Worker]).await;
    let (report, job) = report_with_script(&app, &ingest, json!({"needs": "gpu"})).await;
    backdate_job(&app, job, "updated_at", 185).await;
    let b = sign_in(&app, &ingest).await;
    let path = format!("/reports/{report}");

    // Nobody has polled: the page says so and how to start a worker against this server.
    let html = page(&app, &b.cookie, &path).await.body;
    let status = one(&html, ".job-status");
    assert!(
        status.starts_with("Queued 3 minutes ago · No worker has been seen in the last 5 minutes: start one with gpu-triage worker --server http://gpu-triage.test --token"),
        "{status}"
    );
    assert_eq!(
        attr(&html, ".job-status time", "datetime").map(|t| t.len()),
        Some(20),
        "an RFC 3339 time"
    );
    assert_eq!(
        one(&html, "#repro-headline"),
        "Reproduction queued 3 minutes ago; no worker seen in the last 5 minutes. Details"
    );
    assert_eq!(
        attr(&html, "#repro-headline a", "href").as_deref(),
        Some("#reproduction")
    );
    assert!(refreshes(&html));

    // A worker without a GPU polls (a real claim; the job needs a GPU, so it gets nothing).
    let res = app
        .post_json(&worker, "/api/v1/jobs/claim", &cpu_claim("cpu-box"))
        .await;
    assert_eq!(res.status, StatusCode::NO_CONTENT, "{}", res.body);
    let html = page(&app, &b.cookie, &path).await.body;
    let status = one(&html, ".job-status");
    assert!(
        status.contains(
            "1 worker seen in the last 5 minutes (cpu-box on no GPU), none with a GPU, which this job needs: start one with"
        ),
        "{status}"
    );
    assert_eq!(texts(&html, ".job-status .worker-name"), ["cpu-box"]);

    // A GPU worker polls and takes the job: the page names it, the attempt and the heartbeat.
    let res = app
        .post_json(&worker, "/api/v1/jobs/claim", &gpu_claim("gpu-box-1"))
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let lease = res.json()["lease_token"].as_str().unwrap().to_owned();
    backdate_job(&app, job, "claimed_at", 125).await;
    let html = page(&app, &b.cookie, &path).await.body;
    assert_eq!(texts(&html, ".job .state"), ["running"]);
    assert_eq!(
        one(&html, ".job-status"),
        "Running on worker gpu-box-1 for 2 minutes, attempt 1 of 3 · no heartbeat yet (overdue: if the worker is gone, the job is re-queued when its lease runs out)."
    );
    assert!(refreshes(&html));
    let hb = app
        .post_json(
            &worker,
            &format!("/api/v1/jobs/{job}/heartbeat"),
            &json!({"lease_token": lease}),
        )
        .await;
    assert_eq!(hb.status, StatusCode::OK, "{}", hb.body);
    let html = page(&app, &b.cookie, &path).await.body;
    assert_eq!(
        one(&html, ".job-status"),
        "Running on worker gpu-box-1 for 2 minutes, attempt 1 of 3 · last heartbeat just now."
    );
    assert_eq!(
        one(&html, "#repro-headline"),
        "Reproduction running on gpu-box-1 for 2 minutes (attempt 1 of 3). Details"
    );

    // The result: no status, no refresh, and the true line in the header card.
    let res = app
        .post_json(
            &worker,
            &format!("/api/v1/jobs/{job}/result"),
            &json!({"lease_token": lease, "exit_code": 1, "signal": null, "timed_out": false,
                    "duration_ms": 2100, "stdout": "", "stderr": SYNC_STDERR,
                    "truncated": false, "gpu": {"name": "NVIDIA H100 80GB HBM3"},
                    "no_gpu": false, "sandbox": "bwrap", "error": null}),
        )
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let html = page(&app, &b.cookie, &path).await.body;
    assert!(!refreshes(&html), "a finished page stays put");
    assert!(texts(&html, ".job-status").is_empty());
    assert!(texts(&html, "#repro-headline").is_empty());
    assert_eq!(
        one(&html, "#true-line"),
        "Reproduced with CUDA_LAUNCH_BLOCKING=1: actually raised at train.py:41 out = emb(idx)"
    );
    assert_eq!(
        attr(&html, "#true-line a", "href").as_deref(),
        Some("#reproduction")
    );
    // The header card is the first card, and the true line sits right under the root cause.
    let header = texts(&html, "section.card:first-of-type p");
    let root = header.iter().position(|p| p.starts_with("Root cause"));
    let truth = header.iter().position(|p| p.starts_with("Reproduced with"));
    assert_eq!(truth, root.map(|r| r + 1), "{header:?}");
}

#[tokio::test]
async fn workers_that_polled_before_the_upload_are_named_and_the_requeue_button_follows_the_result()
{
    let app = TestApp::spawn().await;
    let ingest = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let worker = app.token("fleet", &[Scope::Worker]).await;
    // Two idle workers long-poll an empty queue.
    for name in ["gpu-box-1", "gpu-box-2"] {
        let res = app
            .post_json(&worker, "/api/v1/jobs/claim", &gpu_claim(name))
            .await;
        assert_eq!(res.status, StatusCode::NO_CONTENT, "{}", res.body);
    }
    let (report, job) = report_with_script(&app, &ingest, json!({})).await;
    let b = sign_in(&app, &ingest).await;
    let path = format!("/reports/{report}");
    let html = page(&app, &b.cookie, &path).await.body;
    let status = one(&html, ".job-status");
    assert!(
        status.starts_with("Queued just now · 2 workers seen in the last 5 minutes ("),
        "{status}"
    );
    let mut named = texts(&html, ".job-status .worker-name");
    named.sort();
    assert_eq!(named, ["gpu-box-1", "gpu-box-2"]);
    assert!(
        status.contains("gpu-box-1 on NVIDIA H100 80GB HBM3"),
        "{status}"
    );
    assert!(!status.contains("start one"), "{status}");

    // A worker's error sends the job back to the queue: the page says which attempt failed.
    let res = app
        .post_json(&worker, "/api/v1/jobs/claim", &gpu_claim("gpu-box-2"))
        .await;
    let lease = res.json()["lease_token"].as_str().unwrap().to_owned();
    let res = app
        .post_json(
            &worker,
            &format!("/api/v1/jobs/{job}/result"),
            &json!({"lease_token": lease, "exit_code": null, "signal": null, "timed_out": false,
                    "duration_ms": 0, "stdout": "", "stderr": "", "truncated": false,
                    "gpu": null, "no_gpu": false, "sandbox": "bwrap",
                    "error": "sandbox failed to start"}),
        )
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let html = page(&app, &b.cookie, &path).await.body;
    let status = one(&html, ".job-status");
    assert!(
        status.starts_with("Back in the queue just now, after attempt 1 of 3 failed · 2 workers"),
        "{status}"
    );

    // The next attempt succeeds; the re-queue button comes after the result, not before it.
    let res = app
        .post_json(&worker, "/api/v1/jobs/claim", &gpu_claim("gpu-box-1"))
        .await;
    let lease = res.json()["lease_token"].as_str().unwrap().to_owned();
    let res = app
        .post_json(
            &worker,
            &format!("/api/v1/jobs/{job}/result"),
            &json!({"lease_token": lease, "exit_code": 1, "signal": null, "timed_out": false,
                    "duration_ms": 900, "stdout": "", "stderr": SYNC_STDERR,
                    "truncated": false, "gpu": null, "no_gpu": false, "sandbox": "bwrap",
                    "error": null}),
        )
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let html = page(&app, &b.cookie, &path).await.body;
    assert!(!refreshes(&html));
    let outcome = html.find("class=\"repro-outcome\"").expect("the result");
    let traces = html.find("class=\"columns traces\"").expect("the traces");
    let requeue = html.find("class=\"requeue\"").expect("the re-queue form");
    assert!(outcome < traces && traces < requeue, "result first");
    assert_eq!(
        one(&html, "form.requeue button"),
        format!("Re-queue job {job}")
    );
}

/// The `box` worker's row: (seconds since last seen, last contact, GPU, no GPU).
async fn box_row(app: &TestApp) -> (f64, String, Option<Value>, bool) {
    sqlx::query_as(
        "SELECT extract(epoch FROM now() - last_seen_at)::float8, last_contact, gpu, no_gpu \
         FROM workers WHERE name = 'box'",
    )
    .fetch_one(app.db.pool())
    .await
    .unwrap()
}

async fn backdate_workers(app: &TestApp, secs: i64) {
    sqlx::query("UPDATE workers SET last_seen_at = last_seen_at - make_interval(secs => $1)")
        .bind(secs as f64)
        .execute(app.db.pool())
        .await
        .unwrap();
}

async fn idle_poll(app: &TestApp, token: &str, body: Value) {
    let res = app.post_json(token, "/api/v1/jobs/claim", &body).await;
    assert_eq!(res.status, StatusCode::NO_CONTENT, "{}", res.body);
}

#[tokio::test]
async fn claims_heartbeats_and_results_note_the_worker_at_most_every_half_minute() {
    let app = TestApp::spawn().await;
    let worker = app.token("fleet", &[Scope::Worker]).await;
    let row = || box_row(&app);
    let backdate = |secs| backdate_workers(&app, secs);
    let poll = |body| idle_poll(&app, &worker, body);
    poll(gpu_claim("box")).await;
    let (age, contact, gpu, no_gpu) = row().await;
    assert!(
        age < 5.0 && contact == "claim" && !no_gpu,
        "{age} {contact}"
    );
    assert_eq!(gpu.unwrap()["name"], "NVIDIA H100 80GB HBM3");
    // Polled again 10 s later: not rewritten.
    backdate(10).await;
    poll(gpu_claim("box")).await;
    assert!(row().await.0 >= 10.0, "throttled");
    // 40 s later: rewritten.
    backdate(30).await;
    poll(gpu_claim("box")).await;
    assert!(row().await.0 < 5.0);
    // A worker that now says it has no GPU is rewritten at once.
    backdate(10).await;
    poll(cpu_claim("box")).await;
    let (age, _, gpu, no_gpu) = row().await;
    assert!(age < 5.0 && gpu.is_none() && no_gpu);
    // Refused claims record nothing.
    let res = app
        .post_json(
            &worker,
            "/api/v1/jobs/claim",
            &json!({"worker": "ghost", "gpu": null, "no_gpu": false, "sandbox": "bwrap"}),
        )
        .await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(app.count("workers").await, 1);

    // Heartbeats and results count as contact too (throttled the same way).
    let ingest = app.token("ci", &[Scope::Ingest]).await;
    let (_, job) = report_with_script(&app, &ingest, json!({})).await;
    let res = app
        .post_json(&worker, "/api/v1/jobs/claim", &gpu_claim("box"))
        .await;
    let lease = res.json()["lease_token"].as_str().unwrap().to_owned();
    backdate(40).await;
    let hb = app
        .post_json(
            &worker,
            &format!("/api/v1/jobs/{job}/heartbeat"),
            &json!({"lease_token": lease}),
        )
        .await;
    assert_eq!(hb.status, StatusCode::OK, "{}", hb.body);
    let (age, contact, ..) = row().await;
    assert!(age < 5.0 && contact == "heartbeat", "{age} {contact}");
    backdate(40).await;
    let res = app
        .post_json(
            &worker,
            &format!("/api/v1/jobs/{job}/result"),
            &json!({"lease_token": lease, "exit_code": 0, "signal": null, "timed_out": false,
                    "duration_ms": 5, "stdout": "ok", "stderr": "", "truncated": false,
                    "gpu": null, "no_gpu": false, "sandbox": "bwrap", "error": null}),
        )
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let (age, contact, ..) = row().await;
    assert!(age < 5.0 && contact == "result", "{age} {contact}");
}

#[tokio::test]
async fn the_report_script_is_served_same_origin_and_the_csp_still_forbids_inline_script() {
    let app = TestApp::spawn().await;
    let res = app.get("/static/report.js").await;
    assert_eq!(res.status, StatusCode::OK);
    assert_eq!(
        res.headers["content-type"],
        "text/javascript; charset=utf-8"
    );
    assert!(res.body.contains("data-pending"));
    let csp = res.headers["content-security-policy"].to_str().unwrap();
    assert!(csp.starts_with("default-src 'self';"), "{csp}");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
}
