//! A worker whose interpreter lacks torch (issue 30 item 1), with the real binaries: `upload` a
//! crash log with its script, `serve` queues it, `worker` runs it under CPU translation with a
//! fake interpreter that has no torch (`ModuleNotFoundError` at `import torch`). The API says
//! `environment_error`, the report keeps the log's category and root-cause line, the page names
//! the missing module and the `--python` fix and claims no true failing line; re-queued and run
//! by a worker whose interpreter has torch, the job reproduces. The worker runs
//! `--unsafe-no-sandbox` so this runs wherever bubblewrap is missing (the sandbox is not what
//! is under test here).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::Value;

use super::e2e::http_get_json;
use super::lifecycle::fake_python;
use super::text;
use crate::browse::{attr, texts};
use crate::support::{binary, create_token, database_url, fresh_db, spawn_server};

/// What the user pasted: the asynchronous report, blaming `loss.item()`.
const REPORTED: &str = "epoch 3\nTraceback (most recent call last):\n  File \"/tmp/train.py\", line 57, in <module>\n    print(loss.item())\nRuntimeError: CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n";

/// A Python without torch: it says its version when the worker asks (`env.py`), and every
/// script fails at `import torch`, under CPU translation (`-c BOOTSTRAP script`) or not.
const NO_TORCH_PYTHON: &str = r#"#!/bin/sh
case "$*" in
*env.py) echo 'gpu-triage-env {"python": "3.11.2"}'; exit 0 ;;
esac
script="$1"
if [ "$1" = "-c" ]; then
  script="$3"
  echo "gpu-triage: CPU translation run (CUDA redirected to the CPU); torch is not importable, the script runs unchanged" >&2
fi
cat >&2 <<EOF
Traceback (most recent call last):
  File "/tmp/$(basename "$script")", line 1, in <module>
    import torch
ModuleNotFoundError: No module named 'torch'
EOF
exit 1
"#;

fn no_torch_python(dir: &Path) -> PathBuf {
    let python = dir.join("no-torch-python");
    std::fs::write(&python, NO_TORCH_PYTHON).unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    python
}

/// Runs `worker --once --no-gpu --unsafe-no-sandbox` with `python` and `extra` flags.
fn run_worker(base: &str, token: &str, python: &Path, extra: &[&str]) -> String {
    let out = binary()
        .args(["worker", "--server", base, "--once", "--no-gpu"])
        .args(["--unsafe-no-sandbox", "--timeout", "60"])
        .args(extra)
        .arg("--python")
        .arg(python)
        .env("GPU_TRIAGE_TOKEN", token)
        .env("GPU_TRIAGE_LOG", "info")
        .env_remove("LD_LIBRARY_PATH")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let log = text(&out.stderr);
    assert!(out.status.success(), "worker: {log}");
    log
}

/// A signed-in portal session over real HTTP: the agent (no redirects followed) and cookie.
fn sign_in(port: u16, token: &str) -> (ureq::Agent, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let login = agent
        .post(format!("http://127.0.0.1:{port}/login"))
        .send_form([("token", token)])
        .unwrap();
    let cookie = login
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .expect("a session cookie")
        .to_owned();
    (agent, cookie)
}

fn get_page(agent: &ureq::Agent, cookie: &str, url: &str) -> String {
    agent
        .get(url)
        .header("Cookie", cookie)
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap()
}

#[test]
fn a_worker_without_torch_reports_an_environment_error_and_the_fixed_worker_reproduces() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_db, options) = rt.block_on(fresh_db());
    let url = database_url(options.get_database().unwrap());
    let user = create_token(&url, "ingest,read", "ci");
    let worker = create_token(&url, "worker", "cpu-host");
    let (_server, port) = spawn_server(&url);
    let base = format!("http://127.0.0.1:{port}");
    let dir = crate::support::shared_tempdir();
    let log = dir.path().join("train.log");
    std::fs::write(&log, REPORTED).unwrap();
    let script = dir.path().join("repro.py");
    std::fs::write(
        &script,
        "import torch\nemb = torch.nn.Embedding(10, 4).cuda()\n",
    )
    .unwrap();
    let up = binary()
        .args(["upload", "--server", &base, "--script"])
        .arg(&script)
        .arg(&log)
        .env("GPU_TRIAGE_TOKEN", &user)
        .output()
        .unwrap();
    assert!(up.status.success(), "{}", text(&up.stderr));
    let printed = text(&up.stdout);
    let report: i64 = printed
        .split("/reports/")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("upload printed no report URL: {printed}"));
    let api_path = format!("/api/v1/reports/{report}");
    let (_, before) = http_get_json(port, &api_path, &user);

    // The worker's interpreter has no torch: the run never reaches the user's code.
    let worker_log = run_worker(&base, &worker, &no_torch_python(dir.path()), &[]);
    assert!(
        worker_log.contains("environment error") && worker_log.contains("--python"),
        "the worker tells its operator: {worker_log}"
    );
    let (status, api) = http_get_json(port, &api_path, &user);
    assert_eq!(status, 200, "{api}");
    let repro = &api["reproductions"][0];
    assert_eq!(repro["state"], "done", "{repro}");
    assert_eq!(repro["cpu_translation"], true, "{repro}");
    assert_eq!(repro["outcome"], "environment_error", "{repro}");
    assert!(
        repro["outcome_reason"]
            .as_str()
            .is_some_and(|r| r.contains("no module named 'torch'")),
        "{repro}"
    );
    assert_eq!(api["category"], before["category"]);
    assert_eq!(api["category_source"], "log");
    assert_eq!(
        api["classification"]["root_cause"],
        before["classification"]["root_cause"]
    );

    let (agent, cookie) = sign_in(port, &user);
    let page_url = format!("{base}/reports/{report}");
    let html = get_page(&agent, &cookie, &page_url);
    for said in [
        "true failing line",
        "actually raised at",
        "Reproduced on the CPU",
    ] {
        assert!(!html.contains(said), "the page says {said:?}");
    }
    let head = texts(&html, "#repro-outcome").join(" ");
    assert!(
        head.contains("Environment error") && head.contains("no module named 'torch'"),
        "{head}"
    );
    let job = repro["job_id"].as_i64().unwrap();
    let fix = texts(&html, &format!("#outcome-fix-{job}")).join(" ");
    assert!(fix.contains("--python") && fix.contains("torch"), "{fix}");
    assert!(html.contains("Ran on Python 3.11.2 · no torch"), "{html}");

    // The worker is fixed (an interpreter with torch, where the script fails at its true
    // line); the job is re-queued from the page and reproduces.
    let action = attr(&html, "form.requeue", "action").expect("a re-queue button");
    let csrf = attr(&html, "form.requeue input[name=csrf]", "value").expect("csrf");
    let res = agent
        .post(format!("{base}{action}"))
        .header("Cookie", &cookie)
        .send_form([("csrf", csrf.as_str())])
        .unwrap();
    assert_eq!(res.status().as_u16(), 303);
    run_worker(
        &base,
        &worker,
        &fake_python(dir.path()),
        &["--cpu-translation", "off"],
    );
    let (_, api) = http_get_json(port, &api_path, &user);
    let outcomes: Vec<&Value> = api["reproductions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["outcome"])
        .collect();
    assert_eq!(
        outcomes,
        [
            &Value::from("environment_error"),
            &Value::from("reproduced")
        ],
        "{api}"
    );
    let html = get_page(&agent, &cookie, &page_url);
    assert!(
        texts(&html, "#true-line").join(" ").contains("train.py:41"),
        "{html}"
    );
}

#[test]
fn the_systems_python_without_torch_is_an_environment_error_under_the_real_bootstrap() {
    // The real interpreter and the real CPU-translation bootstrap, in the real sandbox where
    // bubblewrap works: what a worker started without --python on a machine whose system
    // Python has no torch reports.
    if !super::have_python() {
        return;
    }
    let system = Path::new("/usr/bin/python3");
    let has_torch = std::process::Command::new(system)
        .args(["-c", "import torch"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if has_torch {
        eprintln!("SKIPPED: /usr/bin/python3 has torch here");
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_db, options) = rt.block_on(fresh_db());
    let url = database_url(options.get_database().unwrap());
    let user = create_token(&url, "ingest,read", "ci");
    let worker = create_token(&url, "worker", "cpu-host");
    let (_server, port) = spawn_server(&url);
    let base = format!("http://127.0.0.1:{port}");
    let dir = crate::support::shared_tempdir();
    let log = dir.path().join("train.log");
    std::fs::write(&log, REPORTED).unwrap();
    let script = dir.path().join("repro.py");
    std::fs::write(
        &script,
        "import torch\nemb = torch.nn.Embedding(10, 4).cuda()\n",
    )
    .unwrap();
    let up = binary()
        .args(["upload", "--server", &base, "--script"])
        .arg(&script)
        .arg(&log)
        .env("GPU_TRIAGE_TOKEN", &user)
        .output()
        .unwrap();
    assert!(up.status.success(), "{}", text(&up.stderr));
    let sandbox: &[&str] = if std::process::Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "true"])
        .status()
        .is_ok_and(|s| s.success())
    {
        &[]
    } else {
        &["--unsafe-no-sandbox"]
    };
    let out = binary()
        .args([
            "worker",
            "--server",
            &base,
            "--once",
            "--no-gpu",
            "--timeout",
            "60",
        ])
        .args(sandbox)
        .arg("--python")
        .arg(system)
        .env("GPU_TRIAGE_TOKEN", &worker)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    assert!(out.status.success(), "worker: {}", text(&out.stderr));
    let (_, api) = http_get_json(port, "/api/v1/reports/1", &user);
    let repro = &api["reproductions"][0];
    assert_eq!(repro["cpu_translation"], true, "{repro}");
    assert_eq!(repro["outcome"], "environment_error", "{repro}");
    assert!(
        repro["outcome_reason"]
            .as_str()
            .is_some_and(|r| r.contains("no module named 'torch'") && r.contains("repro.py:1")),
        "{repro}"
    );
    assert_eq!(api["category_source"], "log", "{api}");
}
