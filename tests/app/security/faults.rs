//! Database faults against the served binary, each on a private cluster of its own: PostgreSQL
//! restarted (`pg_ctl restart -m fast`) under a stream of uploads, and the server started while
//! PostgreSQL is down. Neither needs the server to be restarted.

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpu_triage::storage::embedded::EmbeddedPostgres;
use gpu_triage::storage::{self, Db};

use super::{Served, eventually, multipart_log};
use crate::support::{
    KillOnDrop, binary, create_token, free_port, http_get, own_cluster, shared_tempdir,
};

const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n";

/// A migrated `gpu_triage` database on `cluster`, and its URL.
fn prepare(rt: &tokio::runtime::Runtime, cluster: &EmbeddedPostgres) -> (Db, String) {
    let db = rt.block_on(async {
        storage::create_database(&cluster.connect_options("postgres"), "gpu_triage")
            .await
            .unwrap();
        let db = Db::connect_lazy(cluster.connect_options("gpu_triage"), 2);
        db.migrate().await.unwrap();
        db
    });
    let options = cluster.connect_options("gpu_triage");
    let url = format!(
        "postgres://postgres@localhost:{}/gpu_triage?host={}",
        options.get_port(),
        cluster.socket_dir().display()
    );
    (db, url)
}

/// Stops whatever postmaster runs in `data` when dropped: after `pg_ctl restart` the server
/// is no longer the cluster watchdog's child, so the watchdog alone would leave it running.
struct StopPostmaster<'a>(&'a EmbeddedPostgres);

impl Drop for StopPostmaster<'_> {
    fn drop(&mut self) {
        let _ = self
            .0
            .pg_ctl()
            .args(["stop", "-m", "immediate", "-D"])
            .arg(self.0.data_dir())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// One upload over a fresh connection: (status, Retry-After present, body).
fn upload(
    agent: &ureq::Agent,
    base: &str,
    token: &str,
    key: &str,
    log: &str,
) -> (u16, bool, String) {
    let res = agent
        .post(format!("{base}/api/v1/reports"))
        .header("Authorization", format!("Bearer {token}"))
        .header("Content-Type", "multipart/form-data; boundary=b")
        .header("Idempotency-Key", key)
        .send(&multipart_log("b", log.as_bytes())[..]);
    match res {
        Ok(mut r) => {
            let retry = r.headers().get("retry-after").is_some();
            let body = r.body_mut().read_to_string().unwrap_or_default();
            (r.status().as_u16(), retry, body)
        }
        Err(e) => panic!("the server dropped an upload: {e}"),
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

#[test]
fn a_postgresql_restart_under_uploads_gives_503_then_recovers_with_one_report_per_key() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = shared_tempdir();
    let cluster = own_cluster(dir.path());
    let _stop = StopPostmaster(&cluster);
    let (db, url) = prepare(&rt, &cluster);
    let token = create_token(&url, "ingest", "ci");
    let tmp = shared_tempdir();
    let mut server = Served::start(&url, tmp.path(), &["--rate-limit", "0"], &[]);
    let port = server.port;
    let base = format!("http://127.0.0.1:{port}");

    // Readiness, watched throughout: the distinct statuses in order.
    let stop = Arc::new(AtomicBool::new(false));
    let ready_seen = Arc::new(Mutex::new(Vec::<u16>::new()));
    let watcher = {
        let (stop, seen) = (stop.clone(), ready_seen.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let status = http_get(port, "/readyz").map_or(0, |(s, _)| s);
                let mut seen = seen.lock().unwrap();
                if seen.last() != Some(&status) {
                    seen.push(status);
                }
                drop(seen);
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    // A stream of uploads, each retried with its own Idempotency-Key until stored.
    let done = Arc::new(Mutex::new(Vec::<(String, i64)>::new()));
    let statuses = Arc::new(Mutex::new(Vec::<(u16, bool, String)>::new()));
    // Two streams, so that some upload is always in flight when PostgreSQL goes away.
    let uploaders: Vec<_> = (0..2)
        .map(|stream| {
            let (stop, done, statuses) = (stop.clone(), done.clone(), statuses.clone());
            let (base, token) = (base.clone(), token.clone());
            std::thread::spawn(move || {
                let agent = agent();
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    let key = format!("stream-{stream}-{i}");
                    let log = format!("upload {stream}-{i}\n{OOM}");
                    for _ in 0..600 {
                        let (status, retry, body) = upload(&agent, &base, &token, &key, &log);
                        statuses.lock().unwrap().push((status, retry, body.clone()));
                        if status == 201 {
                            let id =
                                serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
                                    .as_i64()
                                    .unwrap();
                            done.lock().unwrap().push((key.clone(), id));
                            break;
                        }
                        if status != 503 {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    i += 1;
                }
            })
        })
        .collect();
    assert!(
        eventually(60, || done.lock().unwrap().len() >= 5),
        "uploads flow"
    );
    let restarted = cluster
        .pg_ctl()
        .args(["restart", "-m", "fast", "-w", "-t", "60", "-D"])
        .arg(cluster.data_dir())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(restarted.success(), "pg_ctl restart");
    let after_restart = done.lock().unwrap().len();
    assert!(
        eventually(60, || done.lock().unwrap().len() >= after_restart + 10),
        "uploads resume after the restart: {:?}",
        statuses.lock().unwrap().last()
    );
    stop.store(true, Ordering::SeqCst);
    for u in uploaders {
        u.join().unwrap();
    }
    watcher.join().unwrap();

    let statuses = statuses.lock().unwrap().clone();
    for (status, retry, body) in &statuses {
        assert!(matches!(status, 201 | 503), "{status}: {body}");
        if *status == 503 {
            assert!(retry, "503 without Retry-After: {body}");
            assert!(body.contains("\"unavailable\""), "{body}");
        }
    }
    let refused = statuses.iter().filter(|s| s.0 == 503).count();
    let seen = ready_seen.lock().unwrap().clone();
    eprintln!(
        "uploads during the restart: {} answers, {refused} of them 503; /readyz went {seen:?}",
        statuses.len()
    );
    assert!(
        refused > 0,
        "no upload was refused while PostgreSQL restarted"
    );
    let down = seen
        .iter()
        .position(|s| *s != 200)
        .expect("readyz never went false");
    assert!(
        seen[down..].contains(&200),
        "readyz never came back: {seen:?}"
    );
    assert_eq!(seen.last(), Some(&200));
    assert!(
        server.guard.0.try_wait().unwrap().is_none(),
        "the server kept running"
    );

    // Exactly one report per key, and a late retry of any key replays it.
    let done = done.lock().unwrap().clone();
    let reports: i64 = rt.block_on(async {
        sqlx::query_scalar("SELECT count(*) FROM reports")
            .fetch_one(db.pool())
            .await
            .unwrap()
    });
    assert_eq!(reports as usize, done.len());
    let agent = agent();
    let (key, id) = &done[after_restart.saturating_sub(1)];
    let n = key.trim_start_matches("stream-");
    assert!(n.contains('-'), "{key}");
    let (status, _, body) = upload(&agent, &base, &token, key, &format!("upload {n}\n{OOM}"));
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"].as_i64(),
        Some(*id)
    );
    let again: i64 = rt.block_on(async {
        sqlx::query_scalar("SELECT count(*) FROM reports")
            .fetch_one(db.pool())
            .await
            .unwrap()
    });
    assert_eq!(again, reports);
    let _ = server.guard.0.kill();
    rt.block_on(db.close());
}

#[test]
fn a_server_started_while_postgresql_is_down_is_live_not_ready_and_serves_once_it_is_up() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = shared_tempdir();
    let cluster = own_cluster(dir.path());
    let (db, url) = prepare(&rt, &cluster);
    let token = create_token(&url, "ingest", "ci");
    rt.block_on(db.close());
    cluster.stop().unwrap();

    let port = free_port();
    let child = binary()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("DATABASE_URL", &url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut server = KillOnDrop(child);
    assert!(
        eventually(60, || http_get(port, "/healthz")
            .is_some_and(|(s, _)| s == 200)),
        "live while the database is down"
    );
    for _ in 0..3 {
        let (status, body) = http_get(port, "/readyz").unwrap();
        assert_eq!(status, 503, "{body}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let base = format!("http://127.0.0.1:{port}");
    let (status, retry, body) = upload(&agent(), &base, &token, "early", OOM);
    assert_eq!((status, retry), (503, true), "{body}");

    let cluster = own_cluster(dir.path());
    assert!(
        crate::support::wait_for_status(port, "/readyz", 200, 60),
        "ready once PostgreSQL is up"
    );
    let (status, _, body) = upload(&agent(), &base, &token, "early", OOM);
    assert_eq!(status, 201, "{body}");
    assert!(
        server.0.try_wait().unwrap().is_none(),
        "the same server process"
    );
    let reports: i64 = rt.block_on(async {
        let db = Db::connect_lazy(cluster.connect_options("gpu_triage"), 1);
        let n = sqlx::query_scalar("SELECT count(*) FROM reports")
            .fetch_one(db.pool())
            .await
            .unwrap();
        db.close().await;
        n
    });
    assert_eq!(reports, 1);
    let _ = server.0.kill();
    let _ = server.0.wait();
    cluster.stop().unwrap();
}
