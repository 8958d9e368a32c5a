//! `gpu-triage worker`, the real binary, against a small in-test job server that speaks the
//! jobs wire contract and records what it received. The GPU is a stub `libcuda.so.1` compiled
//! here (tests/app/stub_libcuda.c); Python is a fake interpreter (a shell script) or the
//! system's `/usr/bin/python3` for the sandbox canaries. Each canary runs through the worker's
//! real bubblewrap sandbox and must be stopped or fail inside. Where this machine lacks a tool
//! (cc, bwrap, python3) the test says so on stderr and skips that part.

use std::collections::VecDeque;
use std::os::unix::fs::PermissionsExt;
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
    cmd.args(["worker", "--server", &server.url, "--once"])
        .args(args)
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
        eprintln!("SKIPPED: bubblewrap (bwrap) is missing or cannot create namespaces here");
    }
    ok
}

fn have_python() -> bool {
    let ok = Path::new("/usr/bin/python3").exists();
    if !ok {
        eprintln!("SKIPPED: /usr/bin/python3 is missing; the Python canaries need it");
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
                eprintln!("SKIPPED: no C compiler (cc) to build the stub libcuda: {e}");
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

#[test]
fn the_gpu_probe_reads_the_driver_and_says_plainly_when_there_is_none() {
    let Some(stub) = stub_cuda_dir() else { return };
    let out = probe(&stub, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let gpu: Value = serde_json::from_slice(&out.stdout).unwrap();
    let want = json!({"index": 0, "name": "Stub GPU", "driver_version": "12.4",
                      "total_memory_bytes": 85_899_345_920u64, "compute_capability": "9.0"});
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

/// The fake interpreter: what PyTorch prints for an out-of-range embedding index, reported
/// asynchronously at a later `loss.item()` unless CUDA_LAUNCH_BLOCKING=1 makes the launch
/// synchronous and the error surfaces at `emb(idx)`.
const FAKE_PYTHON: &str = r#"#!/bin/sh
script="$1"
cat >&2 <<'EOF'
../aten/src/ATen/native/cuda/Indexing.cu:1289: indexSelectLargeIndex: block: [12,0,0], thread: [96,0,0] Assertion `srcIndex < srcSelectDimSize` failed.
../aten/src/ATen/native/cuda/Indexing.cu:1289: indexSelectLargeIndex: block: [12,0,0], thread: [97,0,0] Assertion `srcIndex < srcSelectDimSize` failed.
Traceback (most recent call last):
EOF
if [ "$CUDA_LAUNCH_BLOCKING" = 1 ]; then
cat >&2 <<'EOF'
  File "/tmp/train.py", line 41, in <module>
    out = emb(idx)
          ^^^^^^^^
  File "/usr/lib/python3/dist-packages/torch/nn/modules/module.py", line 1532, in _wrapped_call_impl
    return self._call_impl(*args, **kwargs)
  File "/usr/lib/python3/dist-packages/torch/nn/modules/sparse.py", line 163, in forward
    return F.embedding(
RuntimeError: CUDA error: device-side assert triggered
Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.
EOF
else
cat >&2 <<'EOF'
  File "/tmp/train.py", line 57, in <module>
    print(loss.item())
          ^^^^^^^^^^^
RuntimeError: CUDA error: device-side assert triggered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.
EOF
fi
echo "script: $(head -n 1 "$script")"
echo "env: CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset} HOME=$HOME PYTHONUNBUFFERED=$PYTHONUNBUFFERED token=${GPU_TRIAGE_TOKEN-unset} ld=${LD_LIBRARY_PATH-unset}"
exit 1
"#;

/// Writes the fake interpreter as `<dir>/venv/bin/python`, readable by the sandbox user.
fn fake_python(dir: &Path) -> PathBuf {
    let bin = dir.join("venv/bin");
    std::fs::create_dir_all(&bin).unwrap();
    for d in [dir.join("venv"), bin.clone()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let python = bin.join("python");
    std::fs::write(&python, FAKE_PYTHON).unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    python
}

#[test]
fn the_posted_result_carries_the_synchronous_traceback_and_the_gpu_facts() {
    let (Some(stub), true) = (stub_cuda_dir(), have_bwrap()) else {
        return;
    };
    let dir = crate::support::shared_tempdir();
    let python = fake_python(dir.path());
    // Without CUDA_LAUNCH_BLOCKING the same interpreter blames the innocent line.
    let direct = Command::new(&python)
        .arg("/dev/null")
        .env_remove("CUDA_LAUNCH_BLOCKING")
        .output()
        .unwrap();
    let async_trace = text(&direct.stderr);
    assert!(async_trace.contains("loss.item()") && async_trace.contains("asynchronously reported"));

    let server = JobServer::start(vec![job(7, "train.py", "import torch  # repro\n", 60)]);
    let out = run_worker(
        &server,
        &["--python", python.to_str().unwrap(), "--gpu", "0"],
        &[("LD_LIBRARY_PATH", stub.to_str().unwrap())],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let gpu = json!({"index": 0, "name": "Stub GPU", "driver_version": "12.4",
                     "total_memory_bytes": 85_899_345_920u64, "compute_capability": "9.0"});
    let claims = server.claims();
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0]["gpu"], gpu);
    assert_eq!(
        (&claims[0]["no_gpu"], &claims[0]["sandbox"]),
        (&json!(false), &json!("bwrap"))
    );
    assert!(claims[0]["worker"].as_str().is_some_and(|w| !w.is_empty()));

    let result = server.only_result(7);
    let stderr = result["stderr"].as_str().unwrap();
    assert!(
        stderr.contains("line 41, in <module>\n    out = emb(idx)"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("loss.item()") && !stderr.contains("asynchronously"),
        "{stderr}"
    );
    assert!(stderr.contains("Assertion `srcIndex < srcSelectDimSize` failed."));
    let stdout = result["stdout"].as_str().unwrap();
    assert!(stdout.contains("script: import torch  # repro"), "{stdout}");
    assert!(
        stdout.contains(
            "env: CUDA_VISIBLE_DEVICES=0 HOME=/tmp PYTHONUNBUFFERED=1 token=unset ld=unset"
        ),
        "{stdout}"
    );
    assert_eq!(result["lease_token"], "lease-7");
    assert_eq!(
        (&result["exit_code"], &result["signal"]),
        (&json!(1), &Value::Null)
    );
    assert_eq!(
        (&result["timed_out"], &result["truncated"]),
        (&json!(false), &json!(false))
    );
    assert_eq!((&result["gpu"], &result["no_gpu"]), (&gpu, &json!(false)));
    assert_eq!(
        (&result["sandbox"], &result["error"]),
        (&json!("bwrap"), &Value::Null)
    );
    assert!(result["duration_ms"].is_u64());
}

#[test]
fn once_with_nothing_queued_exits_zero_and_says_so() {
    let server = JobServer::start(vec![]);
    let out = run_worker(
        &server,
        &["--no-gpu", "--unsafe-no-sandbox", "--python", "/bin/sh"],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("no job was queued"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(server.claims().len(), 1);
    assert_eq!(server.claims()[0]["sandbox"], "none");
}

#[test]
fn a_failing_sandbox_self_test_refuses_to_start_unless_unsafe() {
    if !have_bwrap() {
        return;
    }
    let server = JobServer::start(vec![job(
        3,
        "run.sh",
        "echo ran; echo blocking=$CUDA_LAUNCH_BLOCKING",
        60,
    )]);
    let out = run_worker(
        &server,
        &["--no-gpu", "--python", "/nonexistent/bin/python"],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("sandbox self-test failed") && err.contains("--unsafe-no-sandbox"),
        "{err}"
    );
    let no_bwrap = run_worker(
        &server,
        &["--no-gpu", "--python", "/bin/sh"],
        &[("PATH", "/nonexistent")],
    );
    assert_eq!(no_bwrap.status.code(), Some(1));
    assert!(text(&no_bwrap.stderr).contains("bubblewrap (bwrap) is not on PATH"));
    assert!(server.claims().is_empty(), "claimed without a sandbox");

    let out = run_worker(
        &server,
        &["--no-gpu", "--unsafe-no-sandbox", "--python", "/bin/sh"],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let result = server.only_result(3);
    assert_eq!(
        (&result["sandbox"], &result["no_gpu"], &result["gpu"]),
        (&json!("none"), &json!(true), &Value::Null)
    );
    assert_eq!(result["stdout"], "ran\nblocking=1\n");
}

#[test]
fn a_result_post_that_gets_503_is_retried_with_the_same_body() {
    let server = JobServer::start(vec![job(5, "hi.sh", "echo hi", 60)]);
    server.state.failing_results.store(1, Ordering::SeqCst);
    let out = run_worker(
        &server,
        &["--no-gpu", "--unsafe-no-sandbox", "--python", "/bin/sh"],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let results = server.results();
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results[0], results[1]);
    assert_eq!(results[1].1["stdout"], "hi\n");
    assert!(text(&out.stderr).contains("503"), "{}", text(&out.stderr));
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
fn a_lost_lease_kills_the_run_and_drops_the_job() {
    if !have_bwrap() {
        return;
    }
    let marker = format!("3600.{}", unique());
    let mut long = job(9, "long.sh", &format!("sleep {marker}"), 300);
    long["lease_secs"] = json!(4);
    let server = JobServer::start(vec![long]);
    server.state.heartbeat_status.store(409, Ordering::SeqCst);
    let out = run_worker(&server, &["--no-gpu", "--python", "/bin/sh"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("lease lost"),
        "{}",
        text(&out.stderr)
    );
    let beats = server.state.heartbeats.lock().unwrap().clone();
    assert_eq!(
        beats.first().map(|b| (b.0, b.1["lease_token"].clone())),
        Some((9, json!("lease-9")))
    );
    assert!(
        server.results().is_empty(),
        "a result was posted for a lost lease"
    );
    assert_eq!(processes_with(&marker), Vec::<String>::new());
}

/// A directory outside `/tmp` (in the build tree) that anyone may enter and write: only the
/// sandbox's mount namespace can keep a script out of it.
fn open_host_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", unique()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// Runs one Python canary through the real sandbox; its result.
fn canary(name: &str, script: &str) -> Value {
    let server = JobServer::start(vec![job(20, name, script, 60)]);
    let out = run_worker(&server, &["--no-gpu", "--python", "/usr/bin/python3"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let result = server.only_result(20);
    eprintln!(
        "canary {name}: {}",
        result["stdout"].as_str().unwrap_or_default()
    );
    assert_eq!(result["sandbox"], "bwrap");
    assert_eq!(result["exit_code"], 0, "{result}");
    result
}

/// The lines of a canary's stdout that start with `prefix`.
fn lines_with(result: &Value, prefix: &str) -> Vec<String> {
    let stdout = result["stdout"].as_str().unwrap_or_default();
    stdout
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

#[test]
fn sandboxed_scripts_reach_no_network_socket_token_or_host_file() {
    if !have_bwrap() || !have_python() {
        return;
    }
    // Network: a listener on the host's loopback and an outside address.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let net = canary(
        "net.py",
        &format!(
            r#"import socket
for host, port in [("127.0.0.1", {port}), ("1.1.1.1", 53)]:
    try:
        socket.create_connection((host, port), timeout=3).close()
        print(f"CONNECTED {{host}}:{{port}}")
    except OSError as e:
        print(f"blocked {{host}}:{{port}}: {{e}}")
"#
        ),
    );
    assert_eq!(lines_with(&net, "blocked").len(), 2, "{net}");
    assert!(lines_with(&net, "CONNECTED").is_empty(), "{net}");
    assert!(
        listener.accept().is_err(),
        "the loopback listener got a connection"
    );

    // A database-style unix socket outside /tmp, connectable from the host.
    let sock_dir = open_host_dir("pgsock");
    let sock_path = sock_dir.join(".s.PGSQL.5432");
    let unix = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
    std::fs::set_permissions(&sock_path, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::os::unix::net::UnixStream::connect(&sock_path).expect("the host can connect");
    unix.accept().unwrap();
    unix.set_nonblocking(true).unwrap();
    let system_socket = "/var/run/postgresql/.s.PGSQL.5432";
    if !Path::new(system_socket).exists() {
        eprintln!("NOTE: {system_socket} does not exist on this host; the canary still tries it");
    }
    let sock = canary(
        "sock.py",
        &format!(
            r#"import socket
for path in [{:?}, {system_socket:?}]:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        print(f"CONNECTED {{path}}")
    except OSError as e:
        print(f"blocked {{path}}: {{e}}")
"#,
            sock_path.to_str().unwrap()
        ),
    );
    assert_eq!(lines_with(&sock, "blocked").len(), 2, "{sock}");
    assert!(
        unix.accept().is_err(),
        "the unix socket got a connection from the sandbox"
    );

    // The worker's token: a world-readable file outside /tmp, one inside the host's /tmp, and
    // the worker's own environment (GPU_TRIAGE_TOKEN) and command line.
    let token_dir = open_host_dir("token");
    let token_file = token_dir.join("worker-token");
    std::fs::write(&token_file, TOKEN).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let tmp = crate::support::shared_tempdir();
    let tmp_token = tmp.path().join("worker-token");
    std::fs::write(&tmp_token, TOKEN).unwrap();
    std::fs::set_permissions(&tmp_token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let secrets = canary(
        "token.py",
        &format!(
            r#"import os
for path in [{:?}, {:?}]:
    try:
        print(f"READ {{path}}: {{open(path).read()!r}}")
    except OSError as e:
        print(f"blocked {{path}}: {{e}}")
seen = b""
for pid in filter(str.isdigit, os.listdir("/proc")):
    for part in ("environ", "cmdline"):
        try:
            seen += open(f"/proc/{{pid}}/{{part}}", "rb").read()
        except OSError:
            pass
print("processes:", seen)
print("environ:", dict(os.environ))
"#,
            token_file.to_str().unwrap(),
            tmp_token.to_str().unwrap()
        ),
    );
    assert_eq!(lines_with(&secrets, "blocked").len(), 2, "{secrets}");
    let stdout = secrets["stdout"].as_str().unwrap();
    assert!(
        !stdout.contains(TOKEN) && !stdout.contains("READ"),
        "{stdout}"
    );
    assert!(stdout.contains("'CUDA_LAUNCH_BLOCKING': '1'"), "{stdout}");

    // Writes anywhere but /tmp fail, including a world-writable host directory.
    let host_dir = open_host_dir("writable");
    let writes = canary(
        "write.py",
        &format!(
            r#"for path in ["/usr/canary", "/etc/canary", "/canary", "/var/canary", {:?}, "/tmp/ok"]:
    try:
        open(path, "w").write("x")
        print(f"WROTE {{path}}")
    except OSError as e:
        print(f"blocked {{path}}: {{e}}")
"#,
            host_dir.join("canary").to_str().unwrap()
        ),
    );
    assert_eq!(
        lines_with(&writes, "WROTE"),
        vec!["WROTE /tmp/ok".to_owned()],
        "{writes}"
    );
    assert_eq!(lines_with(&writes, "blocked").len(), 5, "{writes}");
    assert!(!host_dir.join("canary").exists());
    assert!(
        !Path::new("/tmp/ok").exists()
            || std::fs::read_to_string("/tmp/ok").unwrap_or_default() != "x"
    );
}

/// Runs a shell-script job through the real sandbox with `args`; the worker's stderr and the
/// result.
fn shell_job(name: &str, script: &str, timeout_secs: u64, args: &[&str]) -> (String, Value) {
    let server = JobServer::start(vec![job(30, name, script, timeout_secs)]);
    let mut all = vec!["--no-gpu", "--python", "/bin/sh"];
    all.extend_from_slice(args);
    let out = run_worker(&server, &all, &[]);
    let log = text(&out.stderr);
    assert!(out.status.success(), "{log}");
    let result = server.only_result(30);
    let stderr = result["stderr"].as_str().unwrap_or_default();
    eprintln!("{name}: worker log:\n{log}\nscript stderr: {stderr:.300}");
    (log, result)
}

#[test]
fn a_fork_bomb_is_contained_and_killed_with_every_process() {
    if !have_bwrap() {
        return;
    }
    let name = format!("bomb-{}.sh", unique());
    let (_, result) = shell_job(
        &name,
        "bomb() { bomb | bomb & }; bomb; sleep 30",
        4,
        &["--max-procs", "64"],
    );
    assert_eq!(result["timed_out"], true, "{result}");
    assert_eq!(
        (&result["exit_code"], &result["signal"]),
        (&Value::Null, &json!(9))
    );
    let stderr = result["stderr"].as_str().unwrap_or_default();
    if which("prlimit") {
        assert!(
            stderr.to_lowercase().contains("fork"),
            "no fork failure: {stderr:.400}"
        );
    } else {
        eprintln!("NOTE: prlimit is missing; the fork bomb was stopped by the timeout alone");
    }
    assert_eq!(processes_with(&name), Vec::<String>::new());
}

fn which(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn a_gigabyte_of_output_is_capped_and_the_worker_stays_small() {
    if !have_bwrap() {
        return;
    }
    let script = "head -c 1073741824 /dev/zero | tr '\\0' x; echo done >&2";
    let (log, result) = shell_job("flood.sh", script, 300, &[]);
    let stdout = result["stdout"].as_str().unwrap();
    assert_eq!(stdout.len(), 1 << 20);
    assert!(stdout.bytes().all(|b| b == b'x'));
    assert_eq!(
        (&result["truncated"], &result["exit_code"]),
        (&json!(true), &json!(0))
    );
    assert_eq!(result["stderr"], "done\n");
    let peak_mib: u64 = log
        .split("worker peak RSS ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("the job line reports the worker's peak RSS");
    assert!(peak_mib < 100, "worker peak RSS {peak_mib} MiB");
}

#[test]
fn a_script_that_sleeps_forever_is_killed_at_the_timeout_with_its_children() {
    if !have_bwrap() {
        return;
    }
    let marker = format!("3600.{}", unique());
    let script = format!("sleep {marker} & (sleep {marker}; echo late) & exec sleep {marker}");
    let (_, result) = shell_job("sleeper.sh", &script, 2, &[]);
    assert_eq!(result["timed_out"], true);
    assert_eq!(
        (&result["exit_code"], &result["signal"]),
        (&Value::Null, &json!(9))
    );
    assert_eq!(processes_with(&marker), Vec::<String>::new());
}
