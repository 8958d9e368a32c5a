//! The worker's life with a job: the synchronous traceback and GPU facts it posts, `--once`,
//! refusing to start without a working sandbox, result retries, a lost lease, and stopping on
//! SIGTERM/SIGINT.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use super::*;
use crate::support::wait_until;

/// The fake interpreter: what PyTorch prints for an out-of-range embedding index, reported
/// asynchronously at a later `loss.item()` unless CUDA_LAUNCH_BLOCKING=1 makes the launch
/// synchronous and the error surfaces at `emb(idx)`.
const FAKE_PYTHON: &str = r#"#!/bin/sh
script="$1"
if [ "$1" = "-c" ]; then
# CPU translation (`python -c BOOTSTRAP script`): PyTorch names the bad index on the CPU.
cat >&2 <<'EOF'
gpu-triage: CPU translation run (CUDA redirected to the CPU)
Traceback (most recent call last):
  File "/tmp/train.py", line 41, in <module>
    out = emb(idx)
IndexError: index out of range in self
EOF
exit 1
fi
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
pub(super) fn fake_python(dir: &Path) -> PathBuf {
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
fn a_device_side_assert_on_the_gpu_is_followed_by_a_run_on_the_cpu() {
    let (Some(stub), true) = (stub_cuda_dir(), have_bwrap()) else {
        return;
    };
    let dir = crate::support::shared_tempdir();
    let python = fake_python(dir.path());
    let server = JobServer::start(vec![job(8, "train.py", "import torch  # repro\n", 60)]);
    let out = run_worker(
        &server,
        &[
            "--python",
            python.to_str().unwrap(),
            "--gpu",
            "0",
            "--cpu-translation",
            "auto",
        ],
        &[("LD_LIBRARY_PATH", stub.to_str().unwrap())],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let result = server.only_result(8);
    // The GPU run is the synchronous one, as before; the CPU run follows it.
    assert_eq!(result["cpu_translation"], false, "{result}");
    assert!(
        result["stderr"]
            .as_str()
            .unwrap()
            .contains("device-side assert")
    );
    let cpu = &result["cpu"];
    assert_eq!(cpu["exit_code"], 1, "{result}");
    let stderr = cpu["stderr"].as_str().unwrap();
    assert!(
        stderr.contains(
            "line 41, in <module>\n    out = emb(idx)\nIndexError: index out of range in self"
        ),
        "{stderr}"
    );
    assert!(
        !stderr.contains("sandbox started"),
        "the start marker is stripped: {stderr}"
    );
    assert!(text(&out.stderr).contains("running the script again under CPU translation"));
}

#[test]
fn without_cpu_translation_a_gpu_failure_gets_no_cpu_run() {
    let (Some(stub), true) = (stub_cuda_dir(), have_bwrap()) else {
        return;
    };
    let dir = crate::support::shared_tempdir();
    let python = fake_python(dir.path());
    let server = JobServer::start(vec![job(9, "train.py", "import torch  # repro\n", 60)]);
    let out = run_worker(
        &server,
        &["--python", python.to_str().unwrap(), "--gpu", "0"],
        &[("LD_LIBRARY_PATH", stub.to_str().unwrap())],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(server.only_result(9).get("cpu").is_none());
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
                     "total_memory_bytes": 85_899_345_920u64, "compute_capability": "9.0",
                      "pci_bus_id": "0000:3b:00.0"});
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
    let missing = run_worker(
        &server,
        &["--no-gpu", "--python", "/nonexistent/bin/python"],
        &[],
    );
    assert_eq!(missing.status.code(), Some(1));
    let err = text(&missing.stderr);
    assert!(
        err.contains("the interpreter /nonexistent/bin/python is not an executable file"),
        "{err}"
    );
    // An interpreter the host has but the sandbox user cannot reach (root's private directory).
    if rustix::process::geteuid().is_root() {
        let private = tempfile::tempdir().unwrap();
        std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let python = private.path().join("python");
        std::fs::write(&python, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = run_worker(
            &server,
            &["--no-gpu", "--python", python.to_str().unwrap()],
            &[],
        );
        assert_eq!(
            out.status.code(),
            Some(1),
            "{python:?}: {}",
            text(&out.stderr)
        );
        let err = text(&out.stderr);
        assert!(
            err.contains("sandbox self-test failed") && err.contains("--unsafe-no-sandbox"),
            "{err}"
        );
    } else {
        eprintln!("SKIPPED unreachable-interpreter case: not root, the sandbox runs as this user");
    }
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

/// The worker without `--once`; its stderr is collected as it comes, so a test can wait for
/// a log line.
struct Running {
    child: std::process::Child,
    log: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    fn spawn(server: &JobServer, args: &[&str]) -> Running {
        let mut child = binary()
            .args([
                "worker",
                "--server",
                &server.url,
                "--no-gpu",
                "--cpu-translation",
                "off",
                "--python",
                "/bin/sh",
            ])
            .args(args)
            .env("GPU_TRIAGE_TOKEN", TOKEN)
            .env("GPU_TRIAGE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let mut stderr = child.stderr.take().unwrap();
        let sink = Arc::clone(&log);
        let reader = std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = stderr.read(&mut buf) {
                sink.lock().unwrap().push_str(&text(&buf[..n]));
            }
        });
        Running {
            child,
            log,
            reader: Some(reader),
        }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, signal).unwrap();
    }

    /// Waits for the exit (60 s at most); whether it succeeded.
    fn finish(mut self) -> (bool, String) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                self.reader.take().unwrap().join().unwrap();
                return (status.success(), self.log());
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the worker did not stop: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How long a worker may take to reach the next step of a signal test.
const STEP: Duration = Duration::from_secs(60);

#[test]
fn sigterm_stops_an_idle_worker_and_lets_a_running_job_finish_first() {
    use rustix::process::Signal;
    let idle = JobServer::start(vec![]);
    let worker = Running::spawn(&idle, &["--unsafe-no-sandbox"]);
    wait_until(STEP, "a claim", || !idle.claims().is_empty());
    worker.signal(Signal::TERM);
    let (ok, log) = worker.finish();
    assert!(
        ok && log.contains("no job running, worker stopped"),
        "{log}"
    );

    let mut slow = job(40, "slow.sh", "sleep 2; echo finished", 60);
    slow["lease_secs"] = json!(4);
    let busy = JobServer::start(vec![slow, job(41, "next.sh", "echo next", 60)]);
    let worker = Running::spawn(&busy, &["--unsafe-no-sandbox"]);
    wait_until(STEP, "the job", || worker.log().contains("claimed job 40"));
    worker.signal(Signal::TERM);
    let (ok, log) = worker.finish();
    assert!(ok && log.contains("finishing the running job"), "{log}");
    let result = busy.only_result(40);
    assert_eq!(
        (&result["stdout"], &result["error"]),
        (&json!("finished\n"), &Value::Null)
    );
    assert_eq!(busy.claims().len(), 1, "it claimed again after SIGTERM");
}

#[test]
fn a_second_signal_abandons_the_running_job_and_reports_it() {
    use rustix::process::Signal;
    if !have_bwrap() {
        return;
    }
    let marker = format!("3600.{}", unique());
    let server = JobServer::start(vec![job(42, "long.sh", &format!("sleep {marker}"), 300)]);
    let worker = Running::spawn(&server, &[]);
    wait_until(STEP, "the job", || worker.log().contains("claimed job 42"));
    worker.signal(Signal::INT);
    wait_until(STEP, "the first signal", || {
        worker.log().contains("finishing the running job")
    });
    worker.signal(Signal::INT);
    let (ok, log) = worker.finish();
    assert!(ok, "{log}");
    let result = server.only_result(42);
    let error = result["error"].as_str().unwrap_or_default();
    assert!(error.contains("abandoned"), "{result}");
    assert_eq!(result["exit_code"], Value::Null);
    assert_eq!(processes_with(&marker), Vec::<String>::new());
}

#[test]
fn repeated_runs_are_each_reported_with_their_failing_line_and_the_first_failure_is_sent() {
    let dir = crate::support::shared_tempdir();
    let counter = dir.path().join("runs");
    // Fails on runs 2 and 4 at "line 13", passes on 1 and 3: the worker's own user runs it
    // (no sandbox), so the count survives between runs.
    let script = format!(
        "n=$(( $(cat {c} 2>/dev/null || echo 0) + 1 )); echo $n > {c}\n\
         echo \"run $n\"\n\
         if [ $((n % 2)) = 0 ]; then\n\
         printf 'Traceback (most recent call last):\\n  File \"/tmp/repro.py\", line 13, in <module>\\n    out = emb(idx)\\nIndexError: index out of range in self\\n' >&2\n\
         exit 1\nfi\n",
        c = counter.display()
    );
    let mut spec = job(12, "repro.sh", &script, 60);
    spec["repeats"] = json!(4);
    let server = JobServer::start(vec![spec]);
    let out = run_worker(
        &server,
        &["--no-gpu", "--unsafe-no-sandbox", "--python", "/bin/sh"],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let result = server.only_result(12);
    let runs: Vec<(Value, Value)> = result["runs"]
        .as_array()
        .unwrap_or_else(|| panic!("no runs: {result}"))
        .iter()
        .map(|r| (r["exit_code"].clone(), r["failing_line"].clone()))
        .collect();
    let fail = (json!(1), json!("repro.py:13"));
    let pass = (json!(0), Value::Null);
    assert_eq!(runs, [pass.clone(), fail.clone(), pass, fail]);
    // The output sent is the first failing run's.
    assert_eq!(result["stdout"], "run 2\n", "{result}");
    assert_eq!(result["exit_code"], 1);
    assert_eq!(std::fs::read_to_string(&counter).unwrap().trim(), "4");
}
