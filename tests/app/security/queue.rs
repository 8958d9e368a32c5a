//! SECURITY.md item 11 with real processes: the served binary (5 s leases, a reaper every
//! second) and real `gpu-triage worker` processes. A worker SIGKILLed mid-job, a worker cut
//! off from the server by a proxy the test controls, and 20 workers racing for 10 jobs: every
//! job is completed exactly once. The workers run `--no-gpu --unsafe-no-sandbox` with a shell
//! script as the interpreter, so this runs on any machine; the sandbox itself is tested in
//! `worker::canaries`.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use gpu_triage::storage::Db;
use serde_json::Value;

use super::{Served, eventually};
use crate::support::{KillOnDrop, binary, create_token, database_url, fresh_db, shared_tempdir};

const LOG: &str = "RuntimeError: CUDA error: an illegal memory access was encountered\n";

/// The served binary with short leases, its database, and an ingest and a worker token.
struct Queue {
    rt: tokio::runtime::Runtime,
    db: Db,
    server: Served,
    ingest: String,
    worker: String,
    _tmp: tempfile::TempDir,
}

impl Queue {
    fn start() -> Queue {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let (db, options) = rt.block_on(fresh_db());
        let url = database_url(options.get_database().unwrap());
        let ingest = create_token(&url, "ingest", "ci");
        let worker = create_token(&url, "worker", "gpu-hosts");
        let tmp = shared_tempdir();
        let server = Served::start(
            &url,
            tmp.path(),
            &["--rate-limit", "0"],
            &[
                ("GPU_TRIAGE_JOB_LEASE_SECS", "5"),
                ("GPU_TRIAGE_JOB_REAPER_SECS", "1"),
            ],
        );
        Queue {
            rt,
            db,
            server,
            ingest,
            worker,
            _tmp: tmp,
        }
    }

    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.server.port)
    }

    /// Uploads a log with a script; the queued job's id.
    fn job(&self, n: usize) -> i64 {
        let boundary = "q";
        let mut body = super::multipart_log(boundary, format!("run {n}\n{LOG}").as_bytes());
        body.truncate(body.len() - format!("--{boundary}--\r\n").len());
        body.extend_from_slice(
            // The workers here have no GPU: the uploader says the job may run anywhere.
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"script\"; filename=\"repro.py\"\r\n\r\necho reproduced {n}\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"meta\"\r\n\r\n{{\"needs\": \"any\"}}\r\n--{boundary}--\r\n").as_bytes(),
        );
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut res = agent
            .post(format!("{}/api/v1/reports", self.base()))
            .header("Authorization", format!("Bearer {}", self.ingest))
            .header(
                "Content-Type",
                format!("multipart/form-data; boundary={boundary}"),
            )
            .send(&body[..])
            .unwrap();
        let text = res.body_mut().read_to_string().unwrap();
        assert_eq!(res.status().as_u16(), 201, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        v["repro"]["job_id"].as_i64().unwrap()
    }

    /// A `--once` worker against `server` running scripts with `python`; its stderr goes to
    /// `log`.
    fn worker(&self, server: &str, python: &Path, name: &str, log: &Path) -> KillOnDrop {
        let child = binary()
            .args(["worker", "--server", server, "--once", "--no-gpu"])
            .args(["--cpu-translation", "off"])
            .args(["--unsafe-no-sandbox", "--timeout", "120", "--name", name])
            .arg("--python")
            .arg(python)
            .env("GPU_TRIAGE_TOKEN", &self.worker)
            .env("GPU_TRIAGE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        KillOnDrop(child)
    }

    fn scalar<T>(&self, sql: &str, job: i64) -> T
    where
        T: Send + Unpin + for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
    {
        self.rt.block_on(async {
            sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
                .bind(job)
                .fetch_one(self.db.pool())
                .await
                .unwrap()
        })
    }

    fn state(&self, job: i64) -> String {
        self.scalar("SELECT state FROM jobs WHERE id = $1", job)
    }

    /// (attempt outcomes in order, reproductions recorded) of `job`.
    fn history(&self, job: i64) -> (Vec<String>, i64) {
        let outcomes = self.rt.block_on(async {
            sqlx::query_scalar(
                "SELECT outcome || ':' || worker FROM job_attempts WHERE job_id = $1 ORDER BY attempt",
            )
            .bind(job)
            .fetch_all(self.db.pool())
            .await
            .unwrap()
        });
        let recorded = self.scalar("SELECT count(*) FROM reproductions WHERE job_id = $1", job);
        (outcomes, recorded)
    }
}

/// An executable shell script standing in for Python.
fn interpreter(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn wait_exit(child: &mut KillOnDrop, log: &Path) -> bool {
    let ok = eventually(90, || child.0.try_wait().unwrap().is_some());
    let log = std::fs::read_to_string(log).unwrap_or_default();
    assert!(ok, "the worker did not finish: {log}");
    child.0.wait().unwrap().success()
}

fn kill_marked(marker: &str) {
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline"))
            && String::from_utf8_lossy(&cmdline).contains(marker)
            && let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>()
            && let Some(pid) = rustix::process::Pid::from_raw(pid)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

#[test]
fn a_worker_killed_mid_job_loses_its_lease_and_a_second_worker_completes_the_job_once() {
    let q = Queue::start();
    let dir = tempfile::tempdir().unwrap();
    let job = q.job(1);
    let marker = format!("{}.{}", 600, std::process::id());
    let started = dir.path().join("started");
    let sleepy = interpreter(
        dir.path(),
        "sleepy",
        &format!("touch {}\nexec sleep {marker}\n", started.display()),
    );
    let fast = interpreter(dir.path(), "fast", "exec /bin/sh \"$@\"\n");
    let log_a = dir.path().join("a.log");
    let mut a = q.worker(&q.base(), &sleepy, "host-a", &log_a);
    assert!(eventually(60, || started.exists()), "the job never started");
    assert_eq!(q.state(job), "running");
    a.0.kill().unwrap(); // SIGKILL: no chance to report anything
    a.0.wait().unwrap();
    kill_marked(&marker);

    // The lease runs out and the server's reaper requeues the job on its own.
    assert!(
        eventually(60, || q.state(job) == "queued"),
        "never requeued"
    );
    let log_b = dir.path().join("b.log");
    let mut b = q.worker(&q.base(), &fast, "host-b", &log_b);
    assert!(wait_exit(&mut b, &log_b));
    assert_eq!(q.state(job), "done");
    let (outcomes, recorded) = q.history(job);
    assert_eq!(outcomes, vec!["expired:host-a", "result:host-b"]);
    assert_eq!(recorded, 1);
    let stdout: String = q.scalar("SELECT stdout FROM reproductions WHERE job_id = $1", job);
    assert_eq!(stdout, "reproduced 1\n");
}

/// Per connection: (request lines client→server, status codes server→client), in order.
type Traffic = Mutex<Vec<(Vec<String>, Vec<u16>)>>;

/// A TCP proxy the test can cut (every connection dropped, new ones refused) and heal. It
/// notes each request line and each response status line per connection, in order.
struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
    traffic: Arc<Traffic>,
}

impl Proxy {
    fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new(Vec::new()));
        let traffic = Arc::new(Mutex::new(Vec::new()));
        let (c, o, t) = (cut.clone(), open.clone(), traffic.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if c.load(Ordering::SeqCst) {
                    drop(client); // partitioned: refused
                    continue;
                }
                let Ok(upstream) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let index = {
                    let mut t = t.lock().unwrap();
                    t.push((Vec::new(), Vec::new()));
                    t.len() - 1
                };
                let mut open = o.lock().unwrap();
                open.push(client.try_clone().unwrap());
                open.push(upstream.try_clone().unwrap());
                drop(open);
                for (mut from, mut to, requests) in [
                    (
                        client.try_clone().unwrap(),
                        upstream.try_clone().unwrap(),
                        true,
                    ),
                    (upstream, client, false),
                ] {
                    let t = t.clone();
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16 << 10];
                        let mut seen = Vec::new();
                        while let Ok(n @ 1..) = from.read(&mut buf) {
                            seen.extend_from_slice(&buf[..n]);
                            note(&t, index, &seen, requests);
                            if to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        Proxy {
            port,
            cut,
            open,
            traffic,
        }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }

    /// Statuses of the responses to requests whose line starts with `prefix`.
    fn answers_to(&self, prefix: &str) -> Vec<u16> {
        let mut out = Vec::new();
        for (requests, statuses) in self.traffic.lock().unwrap().iter() {
            for (req, status) in requests.iter().zip(statuses) {
                if req.starts_with(prefix) {
                    out.push(*status);
                }
            }
        }
        out
    }
}

/// Re-reads a connection's stream so far: its request lines or its status codes.
fn note(traffic: &Traffic, index: usize, seen: &[u8], requests: bool) {
    let text = String::from_utf8_lossy(seen);
    let mut t = traffic.lock().unwrap();
    if requests {
        t[index].0 = text
            .match_indices("POST /api/")
            .filter_map(|(at, _)| text[at..].split("\r\n").next().map(str::to_owned))
            .collect();
    } else {
        t[index].1 = text
            .match_indices("HTTP/1.1 ")
            .filter_map(|(at, _)| text.get(at + 9..at + 12)?.parse().ok())
            .collect();
    }
}

#[test]
fn a_worker_cut_off_from_the_server_loses_the_job_and_its_late_result_gets_409() {
    let q = Queue::start();
    let dir = tempfile::tempdir().unwrap();
    let job = q.job(1);
    let proxy = Proxy::start(q.server.port);
    let started = dir.path().join("started");
    // Finishes after a second: by then the worker is cut off and holds a result to post.
    let slow = interpreter(
        dir.path(),
        "slow",
        &format!("touch {}\nsleep 1\necho late result\n", started.display()),
    );
    let fast = interpreter(dir.path(), "fast", "exec /bin/sh \"$@\"\n");
    let log_a = dir.path().join("a.log");
    let mut a = q.worker(
        &format!("http://127.0.0.1:{}", proxy.port),
        &slow,
        "host-a",
        &log_a,
    );
    assert!(eventually(60, || started.exists()), "the job never started");
    proxy.cut();
    assert!(
        eventually(60, || std::fs::read_to_string(&log_a)
            .unwrap_or_default()
            .contains("posting the result failed")),
        "the cut-off worker never tried to post: {}",
        std::fs::read_to_string(&log_a).unwrap_or_default()
    );
    assert!(
        eventually(60, || q.state(job) == "queued"),
        "never requeued"
    );
    let log_b = dir.path().join("b.log");
    let mut b = q.worker(&q.base(), &fast, "host-b", &log_b);
    assert!(wait_exit(&mut b, &log_b));
    assert_eq!(q.state(job), "done");

    // The network comes back while the first worker is still retrying its result.
    proxy.heal();
    assert!(wait_exit(&mut a, &log_a));
    let log = std::fs::read_to_string(&log_a).unwrap();
    assert!(log.contains("lease lost"), "{log}");
    let results = proxy.answers_to(&format!("POST /api/v1/jobs/{job}/result"));
    assert_eq!(results, vec![409], "the late result's answers: {log}");
    let (outcomes, recorded) = q.history(job);
    assert_eq!(outcomes, vec!["expired:host-a", "result:host-b"]);
    assert_eq!(recorded, 1);
    let stdout: String = q.scalar("SELECT stdout FROM reproductions WHERE job_id = $1", job);
    assert_eq!(
        stdout, "reproduced 1\n",
        "the second worker's result, not the late one"
    );
}

#[test]
fn twenty_worker_processes_racing_for_ten_jobs_complete_each_exactly_once() {
    let q = Queue::start();
    let dir = tempfile::tempdir().unwrap();
    let jobs: Vec<i64> = (0..10).map(|n| q.job(n)).collect();
    let fast = interpreter(dir.path(), "fast", "exec /bin/sh \"$@\"\n");
    let mut workers: Vec<(KillOnDrop, PathBuf)> = (0..20)
        .map(|i| {
            let log = dir.path().join(format!("w{i}.log"));
            (q.worker(&q.base(), &fast, &format!("host-{i}"), &log), log)
        })
        .collect();
    let handled = AtomicUsize::new(0);
    for (child, log) in &mut workers {
        assert!(
            wait_exit(child, log),
            "{}",
            std::fs::read_to_string(&*log).unwrap()
        );
        if std::fs::read_to_string(&*log)
            .unwrap()
            .contains("result recorded")
        {
            handled.fetch_add(1, Ordering::SeqCst);
        }
    }
    assert_eq!(
        handled.load(Ordering::SeqCst),
        10,
        "one job per worker that got one"
    );
    let mut hosts = Vec::new();
    for job in jobs {
        assert_eq!(q.state(job), "done");
        let (outcomes, recorded) = q.history(job);
        assert_eq!(outcomes.len(), 1, "{outcomes:?}");
        assert!(outcomes[0].starts_with("result:"), "{outcomes:?}");
        assert_eq!(recorded, 1);
        hosts.push(outcomes[0].clone());
    }
    hosts.sort();
    hosts.dedup();
    assert_eq!(hosts.len(), 10, "ten different workers: {hosts:?}");
}

#[test]
fn a_poison_job_that_takes_its_worker_down_every_time_dies_with_its_reason() {
    let q = Queue::start();
    let dir = tempfile::tempdir().unwrap();
    let job = q.job(1);
    // Unsandboxed, the interpreter is the worker's child: it kills the worker, as an
    // out-of-memory kill or a driver crash would.
    let poison = interpreter(dir.path(), "poison", "kill -KILL $PPID\nsleep 1\n");
    for attempt in 1..=3 {
        let log = dir.path().join(format!("w{attempt}.log"));
        let mut w = q.worker(&q.base(), &poison, &format!("host-{attempt}"), &log);
        assert!(
            !wait_exit(&mut w, &log),
            "attempt {attempt}: the worker was killed"
        );
        let want = if attempt < 3 { "queued" } else { "dead" };
        assert!(
            eventually(60, || q.state(job) == want),
            "attempt {attempt}: never {want}"
        );
    }
    let (outcomes, recorded) = q.history(job);
    assert_eq!(
        outcomes,
        vec!["expired:host-1", "expired:host-2", "expired:host-3"]
    );
    assert_eq!(recorded, 0);
    let reason: String = q.scalar("SELECT dead_reason FROM jobs WHERE id = $1", job);
    assert!(reason.contains("3 of 3 attempts"), "{reason}");
    assert!(reason.contains("lease expired"), "{reason}");
    // Nothing is handed out any more.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let res = agent
        .post(format!("{}/api/v1/jobs/claim", q.base()))
        .header("Authorization", format!("Bearer {}", q.worker))
        .header("Content-Type", "application/json")
        .send(r#"{"worker":"host-4","wait_secs":0,"gpu":null,"no_gpu":true,"sandbox":"none"}"#)
        .unwrap();
    assert_eq!(res.status().as_u16(), 204);
    assert_eq!(q.state(job), "dead");
}
