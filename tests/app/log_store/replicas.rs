//! Two `serve` replicas on one PostgreSQL and one object store (issue 42 item 4): what one
//! stores the other serves at once (report, group, search, raw log), a job is claimed once and
//! a webhook delivered once across them, and a replica killed with SIGKILL in the middle of
//! keyed uploads loses and doubles nothing once the clients retry on the other.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::weed::{Weed, weed};
use super::{agent, log_text, post_upload, prefixes, shared};
use crate::support::{
    KillOnDrop, binary, create_token, database_url, free_port, fresh_database_name,
    wait_for_status, wait_until,
};

/// One replica: `serve` on the shared database and store, its sweeper idle (the test sweeps).
fn replica(db_url: &str, weed: &Weed, store: &str) -> (KillOnDrop, u16) {
    let port = free_port();
    let child = binary()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--log-store", store, "--require-log-store"])
        .args([
            "--log-store-grace-secs",
            "0",
            "--log-store-sweep-secs",
            "86400",
        ])
        .args(["--webhook-allow-private", "--webhook-poll-secs", "1"])
        .env("DATABASE_URL", db_url)
        .env("GPU_TRIAGE_RATE_LIMIT", "0")
        .envs(weed.env(weed.s3_port))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn serve");
    let guard = KillOnDrop(child);
    assert!(wait_for_status(port, "/readyz", 200, 60), "replica ready");
    (guard, port)
}

fn call(
    agent: &ureq::Agent,
    method: &str,
    port: u16,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let url = format!("http://127.0.0.1:{port}{path}");
    let auth = format!("Bearer {token}");
    let mut res = match body {
        Some(b) => agent
            .post(&url)
            .header("Authorization", &auth)
            .header("Content-Type", "application/json")
            .send(b.to_string())
            .unwrap(),
        None => {
            assert_eq!(method, "GET");
            agent
                .get(&url)
                .header("Authorization", &auth)
                .call()
                .unwrap()
        }
    };
    let text = res.body_mut().read_to_string().unwrap_or_default();
    (
        res.status().as_u16(),
        serde_json::from_str(&text).unwrap_or(Value::Null),
    )
}

/// A webhook receiver on loopback that counts the deliveries it is sent (answering 200).
fn receiver() -> (String, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://127.0.0.1:{}/hook",
        listener.local_addr().unwrap().port()
    );
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                let mut buf = [0u8; 8192];
                // Headers, then the body its Content-Length announces.
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
                    if let Some((head, body)) = text.split_once("\r\n\r\n") {
                        let len = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if body.len() >= len {
                            break;
                        }
                    }
                }
                if got.starts_with(b"POST") {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
                let _ = conn.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            });
        }
    });
    (url, count)
}

/// A portal session on replica `port`: the cookie.
fn sign_in(port: u16, token: &str) -> String {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let res = agent
        .post(format!("http://127.0.0.1:{port}/login"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .send(format!("token={token}"))
        .unwrap();
    res.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned()
}

#[test]
fn two_replicas_serve_each_others_uploads_and_claim_and_deliver_once() {
    let Some(weed) = weed("two_replicas_serve_each_others_uploads") else {
        return;
    };
    let db_url = database_url(&fresh_database_name());
    let admin = create_token(&db_url, "admin", "ops");
    let worker = create_token(&db_url, "worker", "gpu-host");
    let store = weed.fresh_url();
    let (_a, a) = replica(&db_url, weed, &store);
    let (_b, b) = replica(&db_url, weed, &store);
    let agent = agent();
    let (hook, delivered) = receiver();
    let (status, created) = call(
        &agent,
        "POST",
        a,
        "/api/v1/webhooks",
        &admin,
        Some(json!({"url": hook, "events": ["new_group"]})),
    );
    assert_eq!(status, 201, "{created}");
    let endpoint = created["id"].as_i64().unwrap();

    // Uploaded through A, with a script: B serves it at once.
    let log = log_text("replicas", 4000, None);
    let (status, _, up) = post_upload(
        &agent,
        a,
        &admin,
        log.as_bytes(),
        None,
        Some("import torch\ntorch.zeros(1).cuda()\n"),
    )
    .unwrap();
    assert_eq!(status, 201, "{up}");
    let (id, group, job) = (
        up["id"].as_i64().unwrap(),
        up["group_id"].as_i64().unwrap(),
        up["repro"]["job_id"].as_i64().unwrap(),
    );
    let (status, report) = call(
        &agent,
        "GET",
        b,
        &format!("/api/v1/reports/{id}"),
        &admin,
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(report["group_id"], group);
    let (status, g) = call(
        &agent,
        "GET",
        b,
        &format!("/api/v1/groups/{group}"),
        &admin,
        None,
    );
    assert_eq!((status, g["count"].as_i64()), (200, Some(1)), "{g}");
    let (_, found) = call(&agent, "GET", b, "/api/v1/search?q=replicas", &admin, None);
    assert!(
        found.to_string().contains(&format!("\"id\":{id}")),
        "{found}"
    );
    let cookie = sign_in(b, &admin);
    let mut raw = agent
        .get(format!("http://127.0.0.1:{b}/reports/{id}/raw"))
        .header("Cookie", &cookie)
        .call()
        .unwrap();
    assert_eq!(raw.status().as_u16(), 200);
    assert!(
        raw.body_mut().read_to_string().unwrap() == log,
        "B's raw log differs"
    );

    // Both replicas asked for work at once: the job goes to one of them.
    let claim = json!({"worker": "gpu-host", "wait_secs": 0, "no_gpu": false, "sandbox": "bwrap",
        "gpu": {"index": 0, "name": "NVIDIA H100 80GB HBM3", "driver_version": "12.4",
                "total_memory_bytes": 85045231616u64, "compute_capability": "9.0"}});
    let answers: Vec<(u16, Value)> = std::thread::scope(|s| {
        let asks: Vec<_> = [a, b, a, b]
            .into_iter()
            .map(|port| {
                let (agent, worker, claim) = (agent.clone(), worker.clone(), claim.clone());
                s.spawn(move || {
                    call(
                        &agent,
                        "POST",
                        port,
                        "/api/v1/jobs/claim",
                        &worker,
                        Some(claim),
                    )
                })
            })
            .collect();
        asks.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let claimed: Vec<&Value> = answers
        .iter()
        .filter(|(s, _)| *s == 200)
        .map(|(_, j)| j)
        .collect();
    assert_eq!(claimed.len(), 1, "{answers:?}");
    assert_eq!(claimed[0]["job_id"], job);
    assert!(
        answers.iter().all(|(s, _)| *s == 200 || *s == 204),
        "{answers:?}"
    );

    // The new group's webhook: both replicas deliver, the delivery is posted once.
    wait_until(Duration::from_secs(30), "the webhook delivery", || {
        delivered.load(Ordering::SeqCst) >= 1
    });
    wait_until(
        Duration::from_secs(30),
        "the delivery to be recorded",
        || {
            let (_, d) = call(
                &agent,
                "GET",
                a,
                &format!("/api/v1/webhooks/{endpoint}/deliveries"),
                &admin,
                None,
            );
            d["deliveries"]
                .as_array()
                .is_some_and(|l| l.len() == 1 && l[0]["state"] == "delivered")
        },
    );
    assert_eq!(delivered.load(Ordering::SeqCst), 1);
}

#[test]
fn a_replica_killed_during_keyed_uploads_loses_and_doubles_nothing() {
    let Some(weed) = weed("a_replica_killed_during_keyed_uploads") else {
        return;
    };
    let db_url = database_url(&fresh_database_name());
    let token = create_token(&db_url, "ingest,read", "ci");
    let store = weed.fresh_url();
    let (mut a_guard, a) = replica(&db_url, weed, &store);
    let (_b, b) = replica(&db_url, weed, &store);
    let logs: Vec<(String, String)> = (0..24)
        .map(|i| {
            (
                format!("key-{i}"),
                log_text(&format!("kill{i}"), 2000, None),
            )
        })
        .collect();
    // Four clients upload to A; A is killed once a third of the answers came back.
    let answered: Mutex<HashMap<String, i64>> = Mutex::new(HashMap::new());
    let done = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for client in 0..4 {
            let (logs, answered, done, token) = (&logs, &answered, &done, &token);
            s.spawn(move || {
                let agent = agent();
                for (key, log) in logs.iter().skip(client).step_by(4) {
                    if let Some((201, _, body)) =
                        post_upload(&agent, a, token, log.as_bytes(), Some(key), None)
                    {
                        answered
                            .lock()
                            .unwrap()
                            .insert(key.clone(), body["id"].as_i64().unwrap());
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        wait_until(Duration::from_secs(120), "a third of the uploads", || {
            answered.lock().unwrap().len() >= 8
        });
        a_guard.0.kill().unwrap(); // SIGKILL
        let _ = a_guard.0.wait();
    });
    let before = answered.into_inner().unwrap();
    assert!(
        before.len() < logs.len(),
        "A was killed before it had answered every upload"
    );

    // Every client retries every key on B: each key one report, the first answer's.
    let agent = agent();
    let mut ids = Vec::new();
    for (key, log) in &logs {
        let (status, _, body) =
            post_upload(&agent, b, &token, log.as_bytes(), Some(key), None).unwrap();
        assert!(status == 201 || status == 200, "{status} {body}");
        let id = body["id"].as_i64().unwrap();
        if let Some(first) = before.get(key) {
            assert_eq!(*first, id, "{key} answered with another report");
        }
        ids.push(id);
    }
    let mut distinct = ids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        logs.len(),
        "a key's upload was stored twice or lost"
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let options: sqlx::postgres::PgConnectOptions = db_url.parse().unwrap();
        let objects = shared(weed.objects_at(weed.s3_port, &store, Duration::from_secs(10)));
        let db = gpu_triage::storage::Db::connect_lazy(options, 2).with_log_store(objects.clone());
        let reports: i64 = sqlx::query_scalar("SELECT count(*) FROM reports")
            .fetch_one(db.pool())
            .await
            .unwrap();
        assert_eq!(reports, logs.len() as i64);
        // What A wrote for uploads it never committed goes with the sweep: one prefix per report.
        gpu_triage::app::log_objects::sweep_all(&db).await.unwrap();
        assert_eq!(prefixes(&objects).await.len(), logs.len());
        db.close().await;
    });
}
