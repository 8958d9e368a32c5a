//! The whole reproduction path with the real binaries: `upload` a crash log whose traceback
//! blames an innocent line together with its script, `serve` queues the job, `worker` (real
//! sandbox, fake interpreter that fails where `CUDA_LAUNCH_BLOCKING=1` says) claims and runs it,
//! and the report then carries the synchronous traceback and its classification.

use std::process::Stdio;

use serde_json::Value;

use super::{have_bwrap, lifecycle::fake_python, text};
use crate::support::{binary, create_token, database_url, fresh_db, spawn_server};

/// What the user pasted: the asynchronous report, blaming `loss.item()`.
const REPORTED: &str = "epoch 3\nTraceback (most recent call last):\n  File \"/tmp/train.py\", line 57, in <module>\n    print(loss.item())\nRuntimeError: CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n";

#[test]
fn upload_serve_and_worker_turn_an_async_report_into_its_true_line() {
    if !have_bwrap() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_db, options) = rt.block_on(fresh_db());
    let url = database_url(options.get_database().unwrap());
    let ingest = create_token(&url, "ingest", "ci");
    let read = create_token(&url, "read", "reader");
    let worker = create_token(&url, "worker", "gpu-host");
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
        .env("GPU_TRIAGE_TOKEN", &ingest)
        .output()
        .unwrap();
    assert!(up.status.success(), "{}", text(&up.stderr));
    let printed = text(&up.stdout);
    let report_id: i64 = printed
        .split("/reports/")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("upload printed no report URL: {printed}"));
    let (_, before) = http_get_json(port, &format!("/api/v1/reports/{report_id}"), &read);
    assert_eq!(before["reproductions"][0]["state"], "queued", "{before}");

    let python = fake_python(dir.path());
    let run = binary()
        .args([
            "worker",
            "--server",
            &base,
            "--once",
            "--no-gpu",
            // The fake interpreter's CUDA_LAUNCH_BLOCKING path is under test here.
            "--cpu-translation",
            "off",
            "--timeout",
            "60",
        ])
        .arg("--python")
        .arg(&python)
        .env("GPU_TRIAGE_TOKEN", &worker)
        .env_remove("LD_LIBRARY_PATH")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(run.status.success(), "worker: {}", text(&run.stderr));

    let (status, report) = http_get_json(port, &format!("/api/v1/reports/{report_id}"), &read);
    assert_eq!(status, 200, "{report}");
    let repro = &report["reproductions"][0];
    assert_eq!(repro["state"], "done", "{report}");
    assert_eq!(repro["no_gpu"], true);
    assert_eq!(repro["sandbox"], "bwrap");
    assert!(repro["stderr"].as_str().unwrap().contains("out = emb(idx)"));
    assert_eq!(repro["classification"]["category"], "out_of_bounds");

    // The reported line and the true one are both on record for the page to set side by side.
    assert!(
        report["classification"]["root_cause"]["text"]
            .as_str()
            .unwrap()
            .contains("device-side assert")
    );
    assert!(
        repro["classification"]["root_cause"]["text"]
            .as_str()
            .unwrap()
            .contains("srcIndex < srcSelectDimSize")
    );
}

pub(super) fn http_get_json(port: u16, path: &str, token: &str) -> (u16, Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut res = agent
        .get(format!("http://127.0.0.1:{port}{path}"))
        .header("Authorization", format!("Bearer {token}"))
        .call()
        .unwrap();
    let status = res.status().as_u16();
    let body = res.body_mut().read_to_string().unwrap_or_default();
    (
        status,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}
