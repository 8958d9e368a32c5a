//! `gpu-triage worker`, the real binary, against a small in-test job server that speaks the
//! jobs wire contract and records what it received. The GPU is a stub `libcuda.so.1` compiled
//! here (tests/app/stub_libcuda.c); Python is a fake interpreter (a shell script) or the
//! system's `/usr/bin/python3` for the sandbox canaries. Each canary runs through the worker's
//! real bubblewrap sandbox and must be stopped or fail inside. Where this machine lacks a tool
//! (cc, bwrap, python3) the test says so on stderr and skips that part.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use crate::support::binary;

mod canaries;
mod e2e;
mod environment;
mod lifecycle;
mod torch;

const TOKEN: &str = "gtr_test_worker_token_0123456789";

/// What the fake server hands out and what it got.
#[derive(Default)]
struct Recorded {
    jobs: Mutex<VecDeque<Value>>,
    claims: Mutex<Vec<Value>>,
    heartbeats: Mutex<Vec<(i64, Value)>>,
    results: Mutex<Vec<(i64, Value)>>,
    /// Status of heartbeat answers (200 or 409).
    heartbeat_status: AtomicU16,
    /// How many result posts get 503 before one is accepted.
    failing_results: AtomicU32,
}

/// The jobs endpoints of the contract, in-process, on a real port.
struct JobServer {
    state: Arc<Recorded>,
    url: String,
    _runtime: tokio::runtime::Runtime,
}

fn unauthorized(headers: &HeaderMap) -> Option<Response> {
    let ok = headers
        .get("authorization")
        .is_some_and(|v| v.as_bytes() == format!("Bearer {TOKEN}").as_bytes());
    let body = json!({"error": {"code": "unauthorized", "message": "bad token"}});
    (!ok).then(|| (StatusCode::UNAUTHORIZED, Json(body)).into_response())
}

async fn claim(
    State(s): State<Arc<Recorded>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if let Some(denied) = unauthorized(&headers) {
        return denied;
    }
    s.claims.lock().unwrap().push(body);
    match s.jobs.lock().unwrap().pop_front() {
        Some(job) => Json(job).into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    }
}

async fn heartbeat(
    State(s): State<Arc<Recorded>>,
    UrlPath(id): UrlPath<i64>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if let Some(denied) = unauthorized(&headers) {
        return denied;
    }
    s.heartbeats.lock().unwrap().push((id, body));
    match s.heartbeat_status.load(Ordering::SeqCst) {
        409 => {
            let err = json!({"error": {"code": "lease_lost", "message": "lease expired"}});
            (StatusCode::CONFLICT, Json(err)).into_response()
        }
        _ => Json(json!({"lease_secs": 4})).into_response(),
    }
}

async fn result(
    State(s): State<Arc<Recorded>>,
    UrlPath(id): UrlPath<i64>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if let Some(denied) = unauthorized(&headers) {
        return denied;
    }
    s.results.lock().unwrap().push((id, body));
    let failing = s.failing_results.load(Ordering::SeqCst);
    if failing > 0 {
        s.failing_results.store(failing - 1, Ordering::SeqCst);
        let err = json!({"error": {"code": "unavailable", "message": "database restarting"}});
        return (StatusCode::SERVICE_UNAVAILABLE, Json(err)).into_response();
    }
    let classification = json!({"category": "out_of_bounds"});
    Json(json!({"reproduction_id": 1, "state": "done", "classification": classification}))
        .into_response()
}

impl JobServer {
    fn start(jobs: Vec<Value>) -> JobServer {
        let state = Arc::new(Recorded {
            jobs: Mutex::new(jobs.into()),
            heartbeat_status: AtomicU16::new(200),
            ..Recorded::default()
        });
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let app = axum::Router::new()
            .route("/api/v1/jobs/claim", post(claim))
            .route("/api/v1/jobs/{id}/heartbeat", post(heartbeat))
            .route("/api/v1/jobs/{id}/result", post(result))
            .with_state(Arc::clone(&state));
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        runtime.spawn(async move { axum::serve(listener, app).await });
        JobServer {
            state,
            url,
            _runtime: runtime,
        }
    }

    fn claims(&self) -> Vec<Value> {
        self.state.claims.lock().unwrap().clone()
    }

    fn results(&self) -> Vec<(i64, Value)> {
        self.state.results.lock().unwrap().clone()
    }

    /// The one result posted, for job `id`.
    fn only_result(&self, id: i64) -> Value {
        let results = self.results();
        assert_eq!(results.len(), 1, "{results:?}");
        assert_eq!(results[0].0, id);
        results[0].1.clone()
    }
}

/// A job as the server hands it out.
fn job(id: i64, script_name: &str, script: &str, timeout_secs: u64) -> Value {
    json!({"job_id": id, "report_id": 100 + id, "attempt": 1, "max_attempts": 3,
           "lease_token": format!("lease-{id}"), "lease_secs": 60,
           "script": script, "script_name": script_name, "timeout_secs": timeout_secs})
}

/// Runs the worker with `--once` (plus `args`) until it exits; fails the test after 120 s.
fn run_worker(server: &JobServer, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = binary();
    // The interpreters here are shells standing in for Python, so no CPU translation (Python
    // code; `worker::torch` runs it with real PyTorch).
    cmd.args(["worker", "--server", &server.url, "--once"]);
    if !args.contains(&"--cpu-translation") {
        cmd.args(["--cpu-translation", "off"]);
    }
    cmd.args(args)
        .env("GPU_TRIAGE_TOKEN", TOKEN)
        .env("GPU_TRIAGE_LOG", "info")
        .env_remove("LD_LIBRARY_PATH")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
    let deadline = Instant::now() + Duration::from_secs(120);
    while !waiter.is_finished() {
        if Instant::now() > deadline {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("the worker did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    waiter.join().unwrap()
}

/// Skips with a reason, or fails where `GPU_TRIAGE_REQUIRE_SANDBOX` is set (CI installs
/// bubblewrap, cc and python3, so there the sandbox tests must run).
fn skip(why: &str) {
    assert!(
        std::env::var_os("GPU_TRIAGE_REQUIRE_SANDBOX").is_none(),
        "GPU_TRIAGE_REQUIRE_SANDBOX is set but {why}"
    );
    eprintln!("SKIPPED: {why}");
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Whether bubblewrap can run here; says why not.
fn have_bwrap() -> bool {
    let ok = Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        skip("bubblewrap (bwrap) is missing or cannot create namespaces here");
    }
    ok
}

fn have_python() -> bool {
    let ok = Path::new("/usr/bin/python3").exists();
    if !ok {
        skip("/usr/bin/python3 is missing; the Python canaries need it");
    }
    ok
}

/// `libcuda.so.1` built from the stub, once; `None` (said why) without a C compiler.
fn stub_cuda_dir() -> Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stub-cuda");
        std::fs::create_dir_all(&dir).unwrap();
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/app/stub_libcuda.c");
        let out = Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(dir.join("libcuda.so.1"))
            .arg(&source)
            .output();
        match out {
            Ok(out) if out.status.success() => Some(dir),
            Ok(out) => panic!("cc failed on the stub: {}", text(&out.stderr)),
            Err(e) => {
                skip(&format!(
                    "no C compiler (cc) to build the stub libcuda: {e}"
                ));
                None
            }
        }
    })
    .clone()
}

/// A directory with nothing in it (no driver on the library path).
fn empty_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn probe(lib_dir: &Path, env: &[(&str, &str)]) -> Output {
    binary()
        .args(["worker", "--probe-only"])
        .env("LD_LIBRARY_PATH", lib_dir)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// Processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = text(&cmdline).replace('\0', " ");
            if cmdline.contains(marker) {
                found.push(format!(
                    "{}: {cmdline}",
                    entry.file_name().to_string_lossy()
                ));
            }
        }
    }
    found
}

/// Digits unique to this test run (markers in command lines).
fn unique() -> String {
    static COUNT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let n = COUNT.fetch_add(1, Ordering::SeqCst);
    format!("{}{nanos}{n}", std::process::id())
}

#[test]
fn the_gpu_probe_reads_the_driver_and_says_plainly_when_there_is_none() {
    let Some(stub) = stub_cuda_dir() else { return };
    let out = probe(&stub, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let gpu: Value = serde_json::from_slice(&out.stdout).unwrap();
    let want = json!({"index": 0, "name": "Stub GPU", "driver_version": "12.4",
                      "total_memory_bytes": 85_899_345_920u64, "compute_capability": "9.0",
                      "pci_bus_id": "0000:3b:00.0"});
    assert_eq!(gpu, want);

    let no_device = probe(&stub, &[("STUB_CUDA_DEVICES", "0")]);
    assert_eq!(no_device.status.code(), Some(1));
    let err = text(&no_device.stderr);
    assert!(
        err.contains("NVIDIA driver 12.4 found but it reports no CUDA device"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    let out = binary()
        .args(["worker", "--probe-only", "--gpu", "3"])
        .env("LD_LIBRARY_PATH", &stub)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--gpu 3: the driver reports only 1 CUDA device"));

    let empty = empty_dir();
    let no_driver = probe(empty.path(), &[]);
    if no_driver.status.success() {
        eprintln!("SKIPPED no-driver path: this machine has a real libcuda on its library path");
        return;
    }
    let err = text(&no_driver.stderr);
    assert_eq!(no_driver.status.code(), Some(1));
    assert!(
        err.contains("no NVIDIA driver: libcuda.so.1 is not on the library search path"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn a_worker_without_a_gpu_refuses_to_claim_gpu_jobs_and_points_to_no_gpu() {
    let server = JobServer::start(vec![job(1, "repro.py", "print(1)", 60)]);
    let empty = empty_dir();
    let lib = empty.path().to_str().unwrap();
    if probe(empty.path(), &[]).status.success() {
        eprintln!("SKIPPED: this machine has a real libcuda on its library path");
        return;
    }
    let out = run_worker(&server, &[], &[("LD_LIBRARY_PATH", lib)]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("no NVIDIA driver") && err.contains("pass --no-gpu"),
        "{err}"
    );
    assert!(server.claims().is_empty(), "it claimed without a GPU");
    if let Some(stub) = stub_cuda_dir() {
        let out = run_worker(
            &server,
            &[],
            &[
                ("LD_LIBRARY_PATH", stub.to_str().unwrap()),
                ("STUB_CUDA_DEVICES", "0"),
            ],
        );
        assert_eq!(out.status.code(), Some(1));
        assert!(text(&out.stderr).contains("reports no CUDA device"));
        assert!(server.claims().is_empty(), "it claimed without a device");
    }
}
