//! Webhooks end to end: a real HTTP receiver on loopback checks each delivery's HMAC signature
//! and timestamp, fails the first attempts, and records what it got; the delivery task posts
//! from the PostgreSQL outbox with retries, filters decide which endpoint gets what, Slack
//! endpoints get `text`/`blocks`, private destinations are refused without the allow flag, and
//! pending deliveries survive a restart. The portal pages need an admin session and CSRF.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use gpu_triage::app::webhooks::{WebhookSettings, deliver};
use gpu_triage::auth::Scope;
use hmac::{KeyInit, Mac};
use serde_json::{Value, json};

use crate::support::{TestApp, wait_until_async};

mod portal;
mod spellings;
mod ssrf;

const SECRET: &str = "whsec_test_0123456789abcdef";
const PUBLIC_URL: &str = "http://gpu-triage.test";

const OOB_LOG: &str = "step 9\nIndexError: Target 10 is out of bounds.\n";
const OOM_LOG: &str = "epoch 1\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.50 GiB is free.\n";

/// One request the receiver got.
#[derive(Clone, Debug)]
struct Received {
    event: String,
    delivery: i64,
    /// The signature matched `"{timestamp}.{body}"` under the secret, and the timestamp is
    /// within five minutes of now.
    verified: bool,
    status: u16,
    body: Value,
}

#[derive(Default)]
struct Inbox {
    got: Vec<Received>,
    tries: HashMap<i64, usize>,
}

struct ReceiverState {
    fail_first: usize,
    inbox: Mutex<Inbox>,
}

/// A webhook receiver on 127.0.0.1: answers 500 to the first `fail_first` attempts of each
/// delivery, then 200.
struct Receiver {
    url: String,
    state: Arc<ReceiverState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn verify(headers: &HeaderMap, body: &[u8]) -> bool {
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
    let Ok(ts) = header("x-gputriage-timestamp").parse::<i64>() else {
        return false;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let Some(hex_sig) = header("x-gputriage-signature").strip_prefix("sha256=") else {
        return false;
    };
    let Ok(sig) = hex::decode(hex_sig) else {
        return false;
    };
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("{ts}.").as_bytes());
    mac.update(body);
    (now - ts).abs() <= 300 && mac.verify_slice(&sig).is_ok()
}

async fn receive(
    State(st): State<Arc<ReceiverState>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let header = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let delivery: i64 = header("x-gputriage-delivery").parse().unwrap_or(-1);
    let mut inbox = st.inbox.lock().unwrap();
    let tries = inbox.tries.entry(delivery).or_default();
    *tries += 1;
    let status = if *tries <= st.fail_first { 500 } else { 200 };
    inbox.got.push(Received {
        event: header("x-gputriage-event"),
        delivery,
        verified: verify(&headers, &body),
        status,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    StatusCode::from_u16(status).unwrap()
}

impl Receiver {
    async fn start(fail_first: usize) -> Receiver {
        let state = Arc::new(ReceiverState {
            fail_first,
            inbox: Mutex::default(),
        });
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(receive))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver { url, state, task }
    }

    fn got(&self) -> Vec<Received> {
        self.state.inbox.lock().unwrap().got.clone()
    }

    /// The 2xx-answered requests.
    fn accepted(&self) -> Vec<Received> {
        self.got().into_iter().filter(|r| r.status == 200).collect()
    }
}

/// Fast retries, loopback allowed (the receiver lives there).
fn settings() -> WebhookSettings {
    WebhookSettings {
        allow_private: true,
        backoff: vec![Duration::from_millis(50); 3],
        timeout: Duration::from_secs(5),
        poll: Duration::from_millis(200),
        batch: 8,
    }
}

async fn app_with(settings: &WebhookSettings) -> TestApp {
    let s = settings.clone();
    TestApp::spawn_with(move |mut state| {
        state.webhooks = s;
        state
    })
    .await
}

async fn create_endpoint(app: &TestApp, admin: &str, body: Value) -> Value {
    let res = app.post_json(admin, "/api/v1/webhooks", &body).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    res.json()
}

async fn upload(app: &TestApp, token: &str, project: &str, log: &str) -> Value {
    let meta = json!({"project": project}).to_string();
    let res = app
        .upload(
            token,
            &[
                ("meta", None, meta.as_bytes()),
                ("log", Some("train.log"), log.as_bytes()),
            ],
            None,
        )
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    res.json()
}

async fn deliveries(app: &TestApp, admin: &str, endpoint: i64) -> Vec<Value> {
    let res = app
        .get_as(admin, &format!("/api/v1/webhooks/{endpoint}/deliveries"))
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    res.json()["deliveries"].as_array().unwrap().clone()
}

/// A reproduction job of `report` claimed and answered by a CPU worker.
async fn finish_reproduction(app: &TestApp, worker: &str, job: i64) {
    let claim = app
        .post_json(
            worker,
            "/api/v1/jobs/claim",
            &json!({"worker": "cpu-1", "wait_secs": 0, "gpu": null, "no_gpu": true, "sandbox": "bwrap"}),
        )
        .await;
    assert_eq!(claim.status, StatusCode::OK, "{}", claim.body);
    assert_eq!(claim.json()["job_id"], job);
    let lease = claim.json()["lease_token"].as_str().unwrap().to_owned();
    let result = json!({"lease_token": lease, "exit_code": 1, "signal": null, "timed_out": false,
        "duration_ms": 900, "stdout": "", "stderr": OOB_LOG, "truncated": false, "gpu": null,
        "no_gpu": true, "sandbox": "bwrap", "error": null});
    let res = app
        .post_json(worker, &format!("/api/v1/jobs/{job}/result"), &result)
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
}

#[tokio::test]
async fn every_event_arrives_signed_after_two_failed_attempts_and_the_log_shows_them() {
    let settings = settings();
    let app = app_with(&settings).await;
    let receiver = Receiver::start(2).await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let ingest = app.token("ci", &[Scope::Ingest]).await;
    let worker = app.token("gpu", &[Scope::Worker]).await;
    let created = create_endpoint(
        &app,
        &admin,
        json!({"url": receiver.url, "secret": SECRET, "description": "ops",
               "events": ["new_group", "regression", "reproduction_finished", "rule_saved"]}),
    )
    .await;
    assert_eq!(created["secret"], SECRET);
    let endpoint = created["id"].as_i64().unwrap();
    // The secret is shown at creation only.
    for path in [
        "/api/v1/webhooks".to_owned(),
        format!("/api/v1/webhooks/{endpoint}"),
    ] {
        let res = app.get_as(&admin, &path).await;
        assert_eq!(res.status, StatusCode::OK);
        assert!(!res.body.contains(SECRET), "{path}: {}", res.body);
    }
    let sender = deliver::spawn(app.db.clone(), settings, PUBLIC_URL.into());

    // new_group; a second report of it with a script, reproduced (reproduction_finished);
    // then a fix, the group resolved, and the same failure again: a regression.
    let first = upload(&app, &ingest, "vision", OOB_LOG).await;
    let group = first["group_id"].as_i64().unwrap();
    let with_script = app
        .upload(
            &ingest,
            &[
                ("log", Some("x.log"), format!("other\n{OOB_LOG}").as_bytes()),
                ("script", Some("repro.py"), b"import torch\n"),
            ],
            None,
        )
        .await;
    assert_eq!(
        with_script.status,
        StatusCode::CREATED,
        "{}",
        with_script.body
    );
    assert_eq!(with_script.json()["group_id"], group);
    let repro_report = with_script.json()["id"].as_i64().unwrap();
    let job = with_script.json()["repro"]["job_id"].as_i64().unwrap();
    finish_reproduction(&app, &worker, job).await;
    let fix = app
        .post_json(
            &ingest,
            &format!("/api/v1/groups/{group}/fixes"),
            &json!({"summary": "clamp the targets", "link": "https://example.com/pr/1"}),
        )
        .await;
    assert_eq!(fix.status, StatusCode::CREATED, "{}", fix.body);
    let resolve = app
        .send(
            axum::http::Request::patch(format!("/api/v1/groups/{group}"))
                .header("authorization", format!("Bearer {ingest}"))
                .header("content-type", "application/json")
                .body(axum::body::Body::from(
                    json!({"state": "resolved"}).to_string(),
                ))
                .unwrap(),
        )
        .await;
    assert_eq!(resolve.status, StatusCode::OK, "{}", resolve.body);
    let again = upload(&app, &ingest, "vision", &format!("rerun\n{OOB_LOG}")).await;
    assert_eq!(again["group_id"], group);
    // A duplicate (the same bytes) announces nothing.
    upload(&app, &ingest, "vision", OOB_LOG).await;
    // rule_saved.
    let rule = app
        .post_json(
            &admin,
            "/api/v1/rules",
            &json!({"id": "team.mykernel", "category": "library_error", "title": "MyKernel failed",
                    "pattern": "MyKernel failed: code \\d+", "examples": ["MyKernel failed: code 3"]}),
        )
        .await;
    assert_eq!(rule.status, StatusCode::CREATED, "{}", rule.body);

    let kinds = [
        "new_group",
        "regression",
        "reproduction_finished",
        "rule_saved",
    ];
    wait_until_async(
        Duration::from_secs(30),
        "every event accepted",
        async || {
            let accepted = receiver.accepted();
            kinds.iter().all(|k| accepted.iter().any(|r| r.event == *k))
        },
    )
    .await;
    let got = receiver.got();
    assert!(got.iter().all(|r| r.verified), "{got:#?}");
    let accepted = receiver.accepted();
    let body_of = |kind: &str| {
        accepted
            .iter()
            .find(|r| r.event == kind)
            .map(|r| r.body.clone())
            .unwrap()
    };
    // Each delivery: two 500s, then the 200, under one delivery id.
    for r in &accepted {
        let tries: Vec<u16> = got
            .iter()
            .filter(|g| g.delivery == r.delivery)
            .map(|g| g.status)
            .collect();
        assert_eq!(tries, [500, 500, 200], "delivery {}", r.delivery);
        assert_eq!(r.body["delivery_id"], r.delivery);
        assert_eq!(r.body["schema_version"], 1);
        for key in [
            "event",
            "occurred_at",
            "summary",
            "report",
            "group",
            "known_fix",
            "reproduction",
            "rule",
        ] {
            assert!(r.body.get(key).is_some(), "{key} missing in {}", r.body);
        }
    }
    let new_group = body_of("new_group");
    let report = first["id"].as_i64().unwrap();
    assert_eq!(new_group["report"]["id"], report);
    assert_eq!(
        new_group["report"]["url"],
        format!("{PUBLIC_URL}/reports/{report}")
    );
    assert_eq!(new_group["report"]["project"], "vision");
    assert_eq!(new_group["report"]["category"], "out_of_bounds");
    assert_eq!(new_group["report"]["root_cause"]["line"], 2);
    assert_eq!(
        new_group["report"]["root_cause"]["text"],
        "IndexError: Target 10 is out of bounds."
    );
    assert_eq!(new_group["group"]["id"], group);
    assert_eq!(
        new_group["group"]["url"],
        format!("{PUBLIC_URL}/groups/{group}")
    );
    assert!(
        !new_group["report"]["next_steps"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    let regression = body_of("regression");
    assert_eq!(regression["report"]["id"], again["id"]);
    // The group's state rides with it (issue 39 item 3).
    assert_eq!(regression["group"]["state"], "regressed");
    assert_eq!(regression["known_fix"]["summary"], "clamp the targets");
    assert_eq!(regression["known_fix"]["link"], "https://example.com/pr/1");
    assert_eq!(regression["known_fix"]["author"], "ci");

    let repro = body_of("reproduction_finished");
    assert_eq!(repro["report"]["id"], repro_report);
    assert_eq!(repro["reproduction"]["job_id"], job);
    assert_eq!(repro["reproduction"]["state"], "done");
    assert_eq!(repro["reproduction"]["category"], "out_of_bounds");
    assert_eq!(repro["reproduction"]["exit_code"], 1);
    assert_eq!(repro["reproduction"]["outcome"], "reproduced");

    let saved = body_of("rule_saved");
    assert_eq!(saved["rule"]["id"], "team.mykernel");
    assert_eq!(saved["rule"]["action"], "create");
    assert_eq!(saved["rule"]["actor"], "admin");
    assert_eq!(saved["rule"]["category"], "library_error");
    assert_eq!(
        saved["rule"]["url"],
        format!("{PUBLIC_URL}/rules/team.mykernel")
    );
    assert!(saved["report"].is_null());

    // Exactly these events: the second report (a known, open group) and the
    // duplicate upload announced nothing.
    let mut events: Vec<String> = accepted.iter().map(|r| r.event.clone()).collect();
    events.sort();
    assert_eq!(
        events,
        [
            "new_group",
            "regression",
            "reproduction_finished",
            "rule_saved"
        ]
    );

    // The delivery log: three attempts each, the status codes in order.
    wait_until_async(
        Duration::from_secs(10),
        "every delivery recorded",
        async || {
            let list = deliveries(&app, &admin, endpoint).await;
            list.len() == 4 && list.iter().all(|d| d["state"] == "delivered")
        },
    )
    .await;
    for d in deliveries(&app, &admin, endpoint).await {
        assert_eq!(d["attempts"], 3, "{d}");
        assert_eq!(d["last_status"], 200, "{d}");
        let statuses: Vec<Value> = d["log"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["status"].clone())
            .collect();
        assert_eq!(statuses, [json!(500), json!(500), json!(200)], "{d}");
        assert!(
            d["log"][0]["error"]
                .as_str()
                .unwrap()
                .starts_with("HTTP 500"),
            "{d}"
        );
    }
    sender.abort();
}

#[tokio::test]
async fn filters_by_event_project_and_category_pick_the_endpoints() {
    let app = app_with(&settings()).await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let ingest = app.token("ci", &[Scope::Ingest]).await;
    let url = "http://127.0.0.1:9/hook";
    let id = |v: Value| v["id"].as_i64().unwrap();
    let vision = id(create_endpoint(
        &app,
        &admin,
        json!({"url": url, "events": ["new_group"], "projects": ["Vision"]}),
    )
    .await);
    let oom = id(create_endpoint(
        &app,
        &admin,
        json!({"url": url, "events": ["new_group"], "categories": ["out_of_memory"]}),
    )
    .await);
    let rules_only = id(create_endpoint(
        &app,
        &admin,
        json!({"url": url, "events": ["rule_saved"], "categories": ["out_of_memory"]}),
    )
    .await);
    let disabled = id(create_endpoint(
        &app,
        &admin,
        json!({"url": url, "events": ["new_group"], "enabled": false}),
    )
    .await);

    let oob_in_vision = upload(&app, &ingest, "vision", OOB_LOG).await;
    let oom_in_nlp = upload(&app, &ingest, "nlp", OOM_LOG).await;
    let rule = app
        .post_json(
            &admin,
            "/api/v1/rules",
            &json!({"id": "team.k", "category": "library_error", "title": "K failed",
                    "pattern": "Kernel K failed", "examples": ["Kernel K failed"]}),
        )
        .await;
    assert_eq!(rule.status, StatusCode::CREATED, "{}", rule.body);

    let reports_of = async |endpoint: i64| -> Vec<(String, Value)> {
        let mut out = Vec::new();
        for d in deliveries(&app, &admin, endpoint).await {
            out.push((d["event"].as_str().unwrap().to_owned(), d["id"].clone()));
        }
        out
    };
    assert_eq!(
        reports_of(vision).await.len(),
        1,
        "vision: only the vision report"
    );
    assert_eq!(reports_of(oom).await.len(), 1, "oom: only the OOM report");
    assert!(
        reports_of(rules_only).await.is_empty(),
        "a library_error rule is filtered out"
    );
    assert!(
        reports_of(disabled).await.is_empty(),
        "a disabled endpoint takes no events"
    );
    // Which report each got, from the queued facts.
    let payload_report = async |endpoint: i64| -> i64 {
        sqlx::query_scalar::<_, i64>(
            "SELECT (payload -> 'report' ->> 'id')::int8 FROM webhook_deliveries WHERE endpoint_id = $1",
        )
        .bind(endpoint)
        .fetch_one(app.db.pool())
        .await
        .unwrap()
    };
    assert_eq!(
        payload_report(vision).await,
        oob_in_vision["id"].as_i64().unwrap()
    );
    assert_eq!(
        payload_report(oom).await,
        oom_in_nlp["id"].as_i64().unwrap()
    );

    // An OOM rule reaches the rules endpoint; filters changed later apply to later events.
    let rule = app
        .post_json(
            &admin,
            "/api/v1/rules",
            &json!({"id": "team.oom", "category": "out_of_memory", "title": "Pool exhausted",
                    "pattern": "memory pool exhausted", "examples": ["memory pool exhausted"]}),
        )
        .await;
    assert_eq!(rule.status, StatusCode::CREATED, "{}", rule.body);
    assert_eq!(reports_of(rules_only).await.len(), 1);
}

#[tokio::test]
async fn a_slack_endpoint_gets_text_and_blocks_and_send_test_reaches_it() {
    let settings = settings();
    let app = app_with(&settings).await;
    let receiver = Receiver::start(0).await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let ingest = app.token("ci", &[Scope::Ingest]).await;
    let created = create_endpoint(
        &app,
        &admin,
        json!({"url": receiver.url, "secret": SECRET, "format": "slack", "events": ["new_group"]}),
    )
    .await;
    let endpoint = created["id"].as_i64().unwrap();
    assert_eq!(created["format"], "slack");
    let sender = deliver::spawn(app.db.clone(), settings, PUBLIC_URL.into());
    let test = app
        .post_json(
            &admin,
            &format!("/api/v1/webhooks/{endpoint}/test"),
            &json!({}),
        )
        .await;
    assert_eq!(test.status, StatusCode::ACCEPTED, "{}", test.body);
    let report = upload(&app, &ingest, "vision", OOB_LOG).await["id"]
        .as_i64()
        .unwrap();
    wait_until_async(
        Duration::from_secs(20),
        "the test and the event",
        async || receiver.accepted().len() == 2,
    )
    .await;
    let got = receiver.accepted();
    assert!(got.iter().all(|r| r.verified));
    let test_msg = got.iter().find(|r| r.event == "test").unwrap();
    assert_eq!(test_msg.delivery, test.json()["delivery_id"]);
    assert_eq!(test_msg.body["text"], "Test delivery from gpu-triage");
    let event = got.iter().find(|r| r.event == "new_group").unwrap();
    assert!(
        event.body["text"]
            .as_str()
            .unwrap()
            .starts_with("New failure in vision: Out of bounds: "),
        "{}",
        event.body
    );
    let section = event.body["blocks"][0]["text"]["text"].as_str().unwrap();
    assert!(
        section.contains(&format!("<{PUBLIC_URL}/reports/{report}|Report {report}>")),
        "{section}"
    );
    assert!(
        section.contains("`IndexError: Target 10 is out of bounds.`"),
        "{section}"
    );
    assert_eq!(event.body["blocks"][0]["type"], "section");
    sender.abort();
}

#[tokio::test]
async fn pending_deliveries_survive_a_restart_and_arrive_once() {
    let receiver = Receiver::start(1).await;
    // The first server: its delivery task makes one attempt (500) and is stopped.
    let first = WebhookSettings {
        backoff: vec![Duration::from_secs(1)],
        ..settings()
    };
    let app = app_with(&first).await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let ingest = app.token("ci", &[Scope::Ingest]).await;
    let endpoint = create_endpoint(
        &app,
        &admin,
        json!({"url": receiver.url, "secret": SECRET, "events": ["new_group"]}),
    )
    .await["id"]
        .as_i64()
        .unwrap();
    let report = upload(&app, &ingest, "vision", OOB_LOG).await["id"].clone();
    let sender = deliver::spawn(app.db.clone(), first.clone(), PUBLIC_URL.into());
    wait_until_async(
        Duration::from_secs(20),
        "the first attempt recorded",
        async || {
            deliveries(&app, &admin, endpoint)
                .await
                .first()
                .is_some_and(|d| d["attempts"] == 1)
        },
    )
    .await;
    sender.abort();
    let _ = sender.await;
    let d = deliveries(&app, &admin, endpoint).await.remove(0);
    assert_eq!(d["state"], "pending", "{d}");
    assert_eq!(d["last_status"], 500, "{d}");

    // A new application on the same database, with its own delivery task.
    let db = app.db.clone();
    drop(app);
    let restarted = TestApp::on(db);
    let sender = deliver::spawn(restarted.db.clone(), settings(), PUBLIC_URL.into());
    wait_until_async(
        Duration::from_secs(20),
        "the delivery after the restart",
        async || {
            deliveries(&restarted, &admin, endpoint)
                .await
                .first()
                .is_some_and(|d| d["state"] == "delivered")
        },
    )
    .await;
    let accepted = receiver.accepted();
    assert_eq!(accepted.len(), 1, "{accepted:#?}");
    assert_eq!(accepted[0].body["report"]["id"], report);
    assert!(accepted[0].verified);
    let d = deliveries(&restarted, &admin, endpoint).await.remove(0);
    assert_eq!(
        (d["attempts"].clone(), d["last_status"].clone()),
        (json!(2), json!(200))
    );
    sender.abort();
}
