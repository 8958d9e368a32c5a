//! Real answers against their documented schemas: one story that drives every operation of
//! API v1 through successes and refusals (upload, reproduce, read, search, triage, fix, rules,
//! webhooks), each answer checked by `Checker` (a documented status, a body that matches its
//! schema with no undescribed field), then a check that every operation was seen succeeding
//! and refusing. The admins' part of the story (rules, webhooks, retention) is in
//! `admin_answers`.

use axum::http::StatusCode;
use gpu_triage::auth::Scope;
use gpu_triage::web::limits::LoadLimits;
use serde_json::{Value, json};

use super::admin_answers::{people, retention, rules, tokens, webhooks};
use super::{Checker, Spec};
use crate::support::{TestApp, TestResponse};

pub const OOM_LOG: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.06 GiB is free. Of the allocated memory 75.01 GiB is allocated by PyTorch, and 1.12 GiB is reserved by PyTorch but unallocated.\n";

const OOB_LOG: &str = "epoch 1\n/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1231: indexSelectSmallIndex: block: [3,0,0], thread: [1,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\nRuntimeError: CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n";

const DEVICE_LOG: &str = "Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\nRuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!\n";

const SCRIPT: &str =
    "import torch\nemb = torch.nn.Embedding(10, 4).cuda()\nprint(emb(torch.tensor([10]).cuda()))\n";

const SYNC_STDERR: &str = "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1289: indexSelectLargeIndex: block: [0,0,0], thread: [0,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\nTraceback (most recent call last):\n  File \"/tmp/job/repro.py\", line 3, in <module>\n    print(emb(torch.tensor([10]).cuda()))\nRuntimeError: CUDA error: device-side assert triggered\n";

const BOUNDARY: &str = "openapi-test-boundary-5d1c";

/// A multipart body of (name, filename, bytes) parts: (content type, body).
pub fn multipart(parts: &[(&str, Option<&str>, &[u8])]) -> (&'static str, Vec<u8>) {
    let mut body = Vec::new();
    for (name, filename, bytes) in parts {
        body.extend_from_slice(format!("--{BOUNDARY}\r\n").as_bytes());
        let disposition = match filename {
            Some(f) => format!("form-data; name=\"{name}\"; filename=\"{f}\""),
            None => format!("form-data; name=\"{name}\""),
        };
        body.extend_from_slice(format!("Content-Disposition: {disposition}\r\n\r\n").as_bytes());
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    (
        "multipart/form-data; boundary=openapi-test-boundary-5d1c",
        body,
    )
}

/// The application with rate limits off (the story makes many requests on one token) and
/// webhook endpoints allowed on loopback (nothing is delivered: no delivery task runs).
pub async fn app() -> TestApp {
    TestApp::spawn_with(|mut state| {
        state.webhooks.allow_private = true;
        state.with_load_limits(&LoadLimits {
            per_token_per_minute: 0,
            ..LoadLimits::default()
        })
    })
    .await
}

fn gpu() -> Value {
    json!({"index": 0, "name": "NVIDIA H100 80GB HBM3", "driver_version": "12.4",
           "total_memory_bytes": 85045231616u64, "compute_capability": "9.0"})
}

pub(super) struct Tokens {
    pub admin: String,
    pub ingest: String,
    pub read: String,
    pub worker: String,
}

#[tokio::test]
async fn real_answers_of_every_operation_match_their_documented_schemas() {
    let app = app().await;
    let spec = Spec::of(&app).await;
    let t = Tokens {
        admin: app.token("root", &[Scope::Admin]).await,
        ingest: app.token("ci", &[Scope::Ingest]).await,
        read: app.token("reader", &[Scope::Read]).await,
        worker: app.token("gpu-host", &[Scope::Worker]).await,
    };
    let mut c = Checker::new(&app, &spec);

    for public in ["/api/v1/openapi.json", "/healthz", "/readyz", "/metrics"] {
        expect(&c.get("", public).await, StatusCode::OK);
    }
    classify(&mut c, &t).await;
    let report = reports_and_jobs(&mut c, &t).await;
    let group = search_and_groups(&mut c, &t, &report).await;
    fixes(&mut c, &t, group).await;
    merges(&mut c, &t, group).await;
    bulk(&mut c, &t, group).await;
    rules(&mut c, &t).await;
    webhooks(&mut c, &t).await;
    tokens(&mut c, &t).await;
    people(&mut c, &t).await;
    retention(&mut c, &t, report).await;

    // Every operation was seen succeeding, and every operation that takes input refusing.
    let mut missing = Vec::new();
    for (method, template, op) in spec.operations() {
        let saw = |ok: fn(u16) -> bool| {
            c.seen
                .iter()
                .any(|(m, p, s)| m == method && p == template && ok(*s))
        };
        if !saw(|s| (200..300).contains(&s)) {
            missing.push(format!("{method} {template}: no success"));
        }
        if op.get("security").is_some() && !saw(|s| (400..500).contains(&s)) {
            missing.push(format!("{method} {template}: no refusal"));
        }
    }
    assert!(missing.is_empty(), "not exercised: {missing:#?}");
    assert!(
        c.seen.len() > 60,
        "only {} answers were checked",
        c.seen.len()
    );
}

/// Asserts the status; the body as JSON (null when there is none or it is text).
pub(super) fn expect(res: &TestResponse, status: StatusCode) -> Value {
    assert_eq!(res.status, status, "{}", res.body);
    let json = (res.headers.get("content-type"))
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if json { res.json() } else { Value::Null }
}

async fn classify(c: &mut Checker<'_>, t: &Tokens) {
    for log in [OOM_LOG, OOB_LOG, DEVICE_LOG] {
        let res = c
            .raw(
                &t.read,
                "post",
                "/api/v1/classify",
                "text/plain",
                log.into(),
            )
            .await;
        expect(&res, StatusCode::OK);
    }
    let empty = c
        .raw(
            &t.ingest,
            "post",
            "/api/v1/classify",
            "text/plain",
            Vec::new(),
        )
        .await;
    expect(&empty, StatusCode::UNPROCESSABLE_ENTITY);
    let binary = c
        .raw(
            &t.ingest,
            "post",
            "/api/v1/classify",
            "text/plain",
            [0u8, 159, 146, 150, 0, 1, 2, 0].repeat(64),
        )
        .await;
    expect(&binary, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let anonymous = c
        .raw("", "post", "/api/v1/classify", "text/plain", OOM_LOG.into())
        .await;
    expect(&anonymous, StatusCode::UNAUTHORIZED);
    let worker = c
        .raw(
            &t.worker,
            "post",
            "/api/v1/classify",
            "text/plain",
            OOM_LOG.into(),
        )
        .await;
    expect(&worker, StatusCode::FORBIDDEN);
}

/// Uploads (with a script, a duplicate, an idempotent retry, refusals), then a worker claims,
/// heartbeats and answers the job: the report's id.
async fn reports_and_jobs(c: &mut Checker<'_>, t: &Tokens) -> i64 {
    let meta = json!({"project": "vision", "branch": "main", "commit": "0123abcd",
        "job_url": "https://ci.example/1", "environment": "torch 2.3", "version": "2.1.0",
        "repeats": 2, "needs": "any"})
    .to_string();
    let parts: [(&str, Option<&str>, &[u8]); 3] = [
        ("log", Some("train.log"), OOB_LOG.as_bytes()),
        ("script", Some("repro.py"), SCRIPT.as_bytes()),
        ("meta", None, meta.as_bytes()),
    ];
    let (ct, body) = multipart(&parts);
    let created = expect(
        &c.raw(&t.ingest, "post", "/api/v1/reports", ct, body.clone())
            .await,
        StatusCode::CREATED,
    );
    let report = created["id"].as_i64().unwrap();
    let job = created["repro"]["job_id"].as_i64().unwrap();
    // The same bytes for the same project: the same report, marked duplicate.
    let again = expect(
        &c.raw(&t.ingest, "post", "/api/v1/reports", ct, body).await,
        StatusCode::CREATED,
    );
    assert_eq!(again["duplicate"], true);
    // The report as read while its job is queued: the result's fields are null.
    let queued = expect(
        &c.get(&t.read, &format!("/api/v1/reports/{report}")).await,
        StatusCode::OK,
    );
    assert_eq!(queued["reproductions"][0]["exit_code"], Value::Null);

    // A run of files (issue 41): its files, first failure and action match the document too.
    let timeout = "[rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600037 milliseconds before timing out.\n";
    let (ct, body) = multipart(&[
        ("log", Some("node-7/rank0.log"), OOB_LOG.as_bytes()),
        ("log", Some("node-7/rank1.log"), timeout.as_bytes()),
        ("log", Some("node-7/stdout"), b"step 1\n"),
    ]);
    let run = expect(
        &c.raw(&t.ingest, "post", "/api/v1/reports", ct, body).await,
        StatusCode::CREATED,
    );
    assert_eq!(run["first_failure"]["file"], "node-7/rank0.log", "{run}");
    assert_eq!(
        run["files"][1]["consequence_of"], "node-7/rank0.log",
        "{run}"
    );
    let run_id = run["id"].as_i64().unwrap();
    let run_detail = expect(
        &c.get(&t.read, &format!("/api/v1/reports/{run_id}")).await,
        StatusCode::OK,
    );
    assert_eq!(run_detail["action"]["kind"], "fix_code", "{run_detail}");

    // An idempotent retry replays the first answer; the key with other bytes is refused.
    let (ct, body) = multipart(&[("log", Some("oom.log"), OOM_LOG.as_bytes())]);
    for _ in 0..2 {
        let req = axum::http::Request::post("/api/v1/reports")
            .header("authorization", format!("Bearer {}", t.ingest))
            .header("content-type", ct)
            .header("idempotency-key", "openapi-1")
            .body(axum::body::Body::from(body.clone()))
            .unwrap();
        expect(&c.send(req).await, StatusCode::CREATED);
    }
    let (ct2, other) = multipart(&[("log", Some("dev.log"), DEVICE_LOG.as_bytes())]);
    let req = axum::http::Request::post("/api/v1/reports")
        .header("authorization", format!("Bearer {}", t.ingest))
        .header("content-type", ct2)
        .header("idempotency-key", "openapi-1")
        .body(axum::body::Body::from(other))
        .unwrap();
    expect(&c.send(req).await, StatusCode::UNPROCESSABLE_ENTITY);
    // Refusals.
    let (ct, no_log) = multipart(&[("meta", None, b"{}")]);
    expect(
        &c.raw(&t.ingest, "post", "/api/v1/reports", ct, no_log)
            .await,
        StatusCode::BAD_REQUEST,
    );
    let (ct, bad_meta) = multipart(&[
        ("log", Some("a.log"), OOM_LOG.as_bytes()),
        ("meta", None, b"{\"colour\": 1}"),
    ]);
    expect(
        &c.raw(&t.ingest, "post", "/api/v1/reports", ct, bad_meta)
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    );
    expect(
        &c.raw(
            &t.ingest,
            "post",
            "/api/v1/reports",
            "text/plain",
            OOM_LOG.into(),
        )
        .await,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
    );
    expect(
        &c.get(&t.read, "/api/v1/reports/999999").await,
        StatusCode::NOT_FOUND,
    );
    expect(
        &c.get(&t.worker, &format!("/api/v1/reports/{report}")).await,
        StatusCode::FORBIDDEN,
    );

    run_job(c, t, job).await;
    // The report now shows a finished reproduction, every result field filled in.
    let done = expect(
        &c.get(&t.read, &format!("/api/v1/reports/{report}")).await,
        StatusCode::OK,
    );
    let repro = &done["reproductions"][0];
    assert_eq!(repro["state"], "done", "{repro}");
    assert!(
        repro["cpu_run"].is_object() && repro["environment"].is_object(),
        "{repro}"
    );
    report
}

async fn run_job(c: &mut Checker<'_>, t: &Tokens, job: i64) {
    let claim_body = json!({"worker": "gpu-host-1", "wait_secs": 0, "gpu": gpu(), "no_gpu": false,
        "sandbox": "bwrap"});
    let claimed = expect(
        &c.json(&t.worker, "post", "/api/v1/jobs/claim", &claim_body)
            .await,
        StatusCode::OK,
    );
    assert_eq!(claimed["job_id"], job);
    let lease = claimed["lease_token"].as_str().unwrap().to_owned();
    let beat = format!("/api/v1/jobs/{job}/heartbeat");
    expect(
        &c.json(&t.worker, "post", &beat, &json!({"lease_token": lease}))
            .await,
        StatusCode::OK,
    );
    let result = json!({"lease_token": lease, "exit_code": 1, "signal": null, "timed_out": false,
        "duration_ms": 4210, "stdout": "", "stderr": SYNC_STDERR, "truncated": false,
        "gpu": gpu(), "no_gpu": false, "cpu_translation": false, "sandbox": "bwrap", "error": null,
        "cpu": {"exit_code": 1, "signal": null, "timed_out": false, "duration_ms": 900,
                "stdout": "", "stderr": "IndexError: index out of range in self\n", "truncated": false},
        "runs": [
            {"exit_code": 1, "signal": null, "timed_out": false, "duration_ms": 4210, "failing_line": "repro.py:3"},
            {"exit_code": 1, "signal": null, "timed_out": false, "duration_ms": 4100, "failing_line": "repro.py:3"}
        ],
        "environment": {"python": "3.11.2", "torch": "2.3.1", "cuda_build": "12.1", "hip_build": null,
                        "device": "NVIDIA H100 80GB HBM3, sm 9.0"},
        "worker": "gpu-host-1"});
    let path = format!("/api/v1/jobs/{job}/result");
    let reply = expect(
        &c.json(&t.worker, "post", &path, &result).await,
        StatusCode::OK,
    );
    assert_eq!(reply["state"], "done");
    // The lease is spent: a heartbeat or another result with it is a conflict.
    expect(
        &c.json(&t.worker, "post", &beat, &json!({"lease_token": lease}))
            .await,
        StatusCode::CONFLICT,
    );
    let stale = json!({"lease_token": "00000000-0000-0000-0000-000000000000", "duration_ms": 1, "sandbox": "bwrap"});
    expect(
        &c.json(&t.worker, "post", &path, &stale).await,
        StatusCode::CONFLICT,
    );
    // Nothing is left: 204. Refusals.
    expect(
        &c.json(&t.worker, "post", "/api/v1/jobs/claim", &claim_body)
            .await,
        StatusCode::NO_CONTENT,
    );
    let no_gpu =
        json!({"worker": "h", "wait_secs": 0, "gpu": null, "no_gpu": false, "sandbox": "bwrap"});
    expect(
        &c.raw(
            &t.worker,
            "post",
            "/api/v1/jobs/claim",
            "application/json",
            no_gpu.to_string().into(),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    );
    expect(
        &c.raw(
            &t.worker,
            "post",
            "/api/v1/jobs/claim",
            "application/json",
            b"{".to_vec(),
        )
        .await,
        StatusCode::BAD_REQUEST,
    );
    expect(
        &c.json(
            &t.worker,
            "post",
            "/api/v1/jobs/999999/heartbeat",
            &json!({"lease_token": lease}),
        )
        .await,
        StatusCode::NOT_FOUND,
    );
    expect(
        &c.raw(&t.worker, "post", &path, "application/json", b"[]".to_vec())
            .await,
        StatusCode::BAD_REQUEST,
    );
    expect(
        &c.json(&t.ingest, "post", &beat, &json!({"lease_token": lease}))
            .await,
        StatusCode::FORBIDDEN,
    );
}

/// Search, the group list and a group read and triaged: the group's id.
async fn search_and_groups(c: &mut Checker<'_>, t: &Tokens, report: &i64) -> i64 {
    let found = expect(
        &c.get(&t.read, "/api/v1/search?q=srcIndex").await,
        StatusCode::OK,
    );
    assert!(!found["results"].as_array().unwrap().is_empty(), "{found}");
    expect(
        &c.get(&t.read, "/api/v1/search?q=srcIndx").await,
        StatusCode::OK,
    );
    expect(
        &c.get(&t.read, "/api/v1/search?q=cuda&colour=red").await,
        StatusCode::BAD_REQUEST,
    );
    expect(
        &c.get(
            &t.read,
            "/api/v1/search?q=cuda&category=Out_Of_Bounds&project=Vision&page=1&per_page=5",
        )
        .await,
        StatusCode::OK,
    );
    let list = expect(
        &c.get(&t.read, "/api/v1/groups?sort=count&per_page=2").await,
        StatusCode::OK,
    );
    assert!(list["total"].as_i64().unwrap() >= 2, "{list}");
    expect(
        &c.get(&t.read, "/api/v1/groups?sort=colour").await,
        StatusCode::BAD_REQUEST,
    );

    let detail = expect(
        &c.get(&t.read, &format!("/api/v1/reports/{report}")).await,
        StatusCode::OK,
    );
    let group = detail["group_id"].as_i64().unwrap();
    let path = format!("/api/v1/groups/{group}");
    expect(&c.get(&t.read, &path).await, StatusCode::OK);
    let patched = expect(
        &c.json(
            &t.ingest,
            "patch",
            &path,
            &json!({"state": "resolved", "resolved_in": "2.2", "assignee": "ci"}),
        )
        .await,
        StatusCode::OK,
    );
    assert!(
        !patched["history"].as_array().unwrap().is_empty(),
        "{patched}"
    );
    expect(
        &c.json(&t.ingest, "patch", &path, &json!({"state": "regressed"}))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    );
    expect(
        &c.raw(
            &t.ingest,
            "patch",
            &path,
            "application/json",
            b"{\"status\": \"open\"}".to_vec(),
        )
        .await,
        StatusCode::BAD_REQUEST,
    );
    expect(
        &c.json(&t.read, "patch", &path, &json!({"state": "open"}))
            .await,
        StatusCode::FORBIDDEN,
    );
    expect(
        &c.get(&t.read, "/api/v1/groups/999999").await,
        StatusCode::NOT_FOUND,
    );
    group
}

/// A fix recorded, then a new report of the same failure that names it.
async fn fixes(c: &mut Checker<'_>, t: &Tokens, group: i64) {
    let path = format!("/api/v1/groups/{group}/fixes");
    let fix = json!({"summary": "Clamp the token ids", "details": "The vocabulary grew.", "link": "https://git.example/pr/7"});
    expect(
        &c.json(&t.ingest, "post", &path, &fix).await,
        StatusCode::CREATED,
    );
    expect(
        // Refused by the document too: sent as it is, not checked against it first.
        &c.raw(
            &t.ingest,
            "post",
            &path,
            "application/json",
            br#"{"summary": ""}"#.to_vec(),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    );
    expect(
        &c.raw(&t.ingest, "post", &path, "text/plain", b"fixed".to_vec())
            .await,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
    );
    expect(
        &c.raw(&t.ingest, "post", &path, "application/json", b"{".to_vec())
            .await,
        StatusCode::BAD_REQUEST,
    );
    expect(
        &c.json(&t.ingest, "post", "/api/v1/groups/999999/fixes", &fix)
            .await,
        StatusCode::NOT_FOUND,
    );
    // Another run of the same failure, from a build that has the fix: it names the fix.
    let other = "noise\n[rank3]: /opt/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1308: indexSelectSmallIndex: block: [9,0,0], thread: [7,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n";
    let meta = br#"{"project": "vision", "version": "2.3.0"}"#;
    let (ct, body) = multipart(&[
        ("log", Some("b.log"), other.as_bytes()),
        ("meta", None, meta),
    ]);
    let created = expect(
        &c.raw(&t.ingest, "post", "/api/v1/reports", ct, body).await,
        StatusCode::CREATED,
    );
    assert_eq!(created["group_id"], group, "{created}");
    assert!(created["known_fix"].is_object(), "{created}");
    let id = created["id"].as_i64().unwrap();
    let detail = expect(
        &c.get(&t.read, &format!("/api/v1/reports/{id}")).await,
        StatusCode::OK,
    );
    assert!(!detail["fixes"].as_array().unwrap().is_empty(), "{detail}");
    // The group's page now has a fix, reports and a history with the regression.
    expect(
        &c.get(&t.read, &format!("/api/v1/groups/{group}")).await,
        StatusCode::OK,
    );
}

/// Another failure's group merged into `group`, then the refusals and the merged group's URL.
async fn merges(c: &mut Checker<'_>, t: &Tokens, group: i64) {
    let (ct, body) = multipart(&[("log", Some("device.log"), DEVICE_LOG.as_bytes())]);
    let created = expect(
        &c.raw(&t.ingest, "post", "/api/v1/reports", ct, body).await,
        StatusCode::CREATED,
    );
    let other = created["group_id"].as_i64().unwrap();
    assert_ne!(other, group);
    let path = format!("/api/v1/groups/{other}/merge");
    expect(
        &c.json(&t.read, "post", &path, &json!({"into": group}))
            .await,
        StatusCode::FORBIDDEN,
    );
    expect(
        &c.json(&t.ingest, "post", &path, &json!({"into": other}))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    );
    expect(
        &c.json(&t.ingest, "post", &path, &json!({"into": 999_999}))
            .await,
        StatusCode::NOT_FOUND,
    );
    expect(
        &c.raw(&t.ingest, "post", &path, "application/json", b"{}".to_vec())
            .await,
        StatusCode::BAD_REQUEST,
    );
    let merged = expect(
        &c.json(&t.ingest, "post", &path, &json!({"into": group}))
            .await,
        StatusCode::OK,
    );
    assert_eq!(merged["id"], group);
    assert_eq!(merged["merged_groups"], json!([other]));
    expect(
        &c.json(&t.ingest, "post", &path, &json!({"into": group}))
            .await,
        StatusCode::CONFLICT,
    );
    let moved = c.get(&t.read, &format!("/api/v1/groups/{other}")).await;
    expect(&moved, StatusCode::PERMANENT_REDIRECT);
    assert_eq!(
        moved.headers["location"],
        format!("/api/v1/groups/{group}").as_str()
    );
    expect(
        &c.json(
            &t.ingest,
            "patch",
            &format!("/api/v1/groups/{other}"),
            &json!({"state": "open"}),
        )
        .await,
        StatusCode::CONFLICT,
    );
    expect(
        &c.json(
            &t.ingest,
            "post",
            &format!("/api/v1/groups/{other}/fixes"),
            &json!({"summary": "late"}),
        )
        .await,
        StatusCode::CONFLICT,
    );
    // And split back out.
    let unmerge = format!("/api/v1/groups/{other}/unmerge");
    expect(
        &c.bodyless(&t.read, "post", &unmerge).await,
        StatusCode::FORBIDDEN,
    );
    let back = expect(
        &c.bodyless(&t.ingest, "post", &unmerge).await,
        StatusCode::OK,
    );
    assert_eq!(back["id"], other);
    expect(
        &c.bodyless(&t.ingest, "post", &unmerge).await,
        StatusCode::CONFLICT,
    );
    expect(
        &c.bodyless(&t.ingest, "post", "/api/v1/groups/999999/unmerge")
            .await,
        StatusCode::NOT_FOUND,
    );
}

/// A group of a failure raised in op `op` (letters only), uploaded as `t.ingest`.
async fn group_of(c: &mut Checker<'_>, t: &Tokens, op: &str) -> i64 {
    let log = format!(
        "RuntimeError: Expected all tensors to be on the same device, but found at least two \
         devices, cuda:0 and cpu! (when checking argument for argument index in method \
         wrapper_CUDA__{op})\n"
    );
    let (ct, body) = multipart(&[("log", Some("op.log"), log.as_bytes())]);
    let created = expect(
        &c.raw(&t.ingest, "post", "/api/v1/reports", ct, body).await,
        StatusCode::CREATED,
    );
    created["group_id"].as_i64().unwrap()
}

/// A bulk change of `group` and its undo, a merge of two groups into it, and their refusals.
async fn bulk(c: &mut Checker<'_>, t: &Tokens, group: i64) {
    let change = json!({"ids": [group], "change": {"state": "ignored", "ignore_until_reports": 2}});
    expect(
        &c.json(&t.read, "post", "/api/v1/groups/bulk", &change)
            .await,
        StatusCode::FORBIDDEN,
    );
    expect(
        &c.json(
            &t.ingest,
            "post",
            "/api/v1/groups/bulk",
            &json!({"ids": [999_999], "change": {"state": "open"}}),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    );
    let done = expect(
        &c.json(&t.ingest, "post", "/api/v1/groups/bulk", &change)
            .await,
        StatusCode::OK,
    );
    assert_eq!(done["groups"][0]["ignore_reports_left"], 2);
    let undo = format!("/api/v1/groups/changes/{}/undo", done["change_id"]);
    expect(
        &c.bodyless(&t.read, "post", &undo).await,
        StatusCode::FORBIDDEN,
    );
    expect(&c.bodyless(&t.ingest, "post", &undo).await, StatusCode::OK);
    expect(
        &c.bodyless(&t.ingest, "post", &undo).await,
        StatusCode::CONFLICT,
    );
    expect(
        &c.bodyless(&t.ingest, "post", "/api/v1/groups/changes/999999/undo")
            .await,
        StatusCode::NOT_FOUND,
    );

    let (x, y) = (group_of(c, t, "kilo").await, group_of(c, t, "lima").await);
    expect(
        &c.json(
            &t.ingest,
            "post",
            "/api/v1/groups/merge",
            &json!({"ids": [x]}),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    );
    expect(
        &c.json(
            &t.ingest,
            "post",
            "/api/v1/groups/merge",
            &json!({"ids": [x, y], "into": 999_999}),
        )
        .await,
        StatusCode::NOT_FOUND,
    );
    let merged = expect(
        &c.json(
            &t.ingest,
            "post",
            "/api/v1/groups/merge",
            &json!({"ids": [x, y], "into": group}),
        )
        .await,
        StatusCode::OK,
    );
    assert_eq!(merged["id"], group);
    expect(
        &c.json(
            &t.ingest,
            "post",
            "/api/v1/groups/merge",
            &json!({"ids": [x], "into": group}),
        )
        .await,
        StatusCode::CONFLICT,
    );
}
