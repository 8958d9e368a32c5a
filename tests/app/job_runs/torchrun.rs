//! A real distributed run: `torchrun` starts four CPU processes (gloo) with the PyTorch that
//! `.ci/run` installs (`GPU_TRIAGE_TORCH_PYTHON`); rank 2 raises while a worker thread keeps its
//! process alive, so the other ranks time out waiting for it, and the launcher, which names the
//! first rank to *exit*, blames rank 0. Its per-rank logs and the launcher's output are uploaded
//! as a directory with `gpu-triage upload DIR`; the run must name rank 2's exception as the
//! first failure, on the host the launcher's table gives rank 2, with `fix_code`, and the other
//! ranks' timeouts as its consequences. With `GPU_TRIAGE_REQUIRE_TORCH` set (CI) a missing
//! PyTorch fails instead of skipping.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::{binary, create_token, database_url, fresh_db, spawn_server};

const TRAIN: &str = r#"import datetime, threading, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
rank = dist.get_rank()
x = torch.ones(4)
for step in range(2):
    dist.all_reduce(x)
    print(f"step {step} rank {rank} ok", flush=True)
if rank == 2:
    # A worker thread keeps the failed process alive, so its peers wait for it and time out.
    threading.Thread(target=time.sleep, args=(12,)).start()
    raise ValueError(f"labels out of range on rank {rank}: max label 1000 >= num_classes 10")
dist.all_reduce(x)
print("done", flush=True)
"#;

/// The interpreter with PyTorch, or `None` (skip) where this machine has none and CI does not
/// require it.
pub(super) fn torch_python() -> Option<PathBuf> {
    let found = std::env::var_os("GPU_TRIAGE_TORCH_PYTHON")
        .map(PathBuf::from)
        .filter(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("GPU_TRIAGE_REQUIRE_TORCH").is_none(),
            "GPU_TRIAGE_REQUIRE_TORCH is set but GPU_TRIAGE_TORCH_PYTHON names no interpreter"
        );
        eprintln!("skipped: GPU_TRIAGE_TORCH_PYTHON is not set (.ci/run installs PyTorch)");
    }
    found
}

/// The host torchrun's failure table gives `rank` (`host : X` above `rank : N`).
fn launcher_host(launcher: &str, rank: u32) -> String {
    let lines: Vec<&str> = launcher.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.trim().starts_with("rank") && l.contains(&format!(": {rank} (local_rank")))
        .expect("the launcher's table lists the rank");
    lines[..at]
        .iter()
        .rev()
        .find_map(|l| l.trim().strip_prefix("host"))
        .and_then(|h| h.trim().strip_prefix(':'))
        .expect("a host line")
        .trim()
        .to_owned()
}

#[test]
fn a_torchrun_whose_rank_raises_is_blamed_on_that_rank_not_on_the_first_to_exit() {
    let Some(python) = torch_python() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let run_dir = dir.path().join("run");
    std::fs::create_dir_all(&run_dir).expect("mkdir");
    let script = dir.path().join("train.py");
    std::fs::write(&script, TRAIN).expect("write train.py");
    let out = std::process::Command::new(&python)
        .args(["-m", "torch.distributed.run", "--nproc-per-node", "4"])
        .arg("--log-dir")
        .arg(run_dir.join("logs"))
        .args(["--redirects", "3", "--tee", "3"])
        .arg(&script)
        .env("OMP_NUM_THREADS", "1")
        .output()
        .expect("run torchrun");
    assert!(!out.status.success(), "rank 2 raised, so the run fails");
    let launcher = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(run_dir.join("launcher.log"), &launcher).expect("write launcher.log");
    assert!(
        launcher.contains("Root Cause (first observed failure)"),
        "{launcher}"
    );
    let host = launcher_host(&launcher, 2);

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (_db, options) = rt.block_on(fresh_db());
    let url = database_url(options.get_database().expect("db name"));
    let token = create_token(&url, "ingest,read", "torchrun");
    let (_server, port) = spawn_server(&url);
    let up = binary()
        .args(["upload", "--summary", "markdown", "--exclude", "*.py"])
        .arg(&run_dir)
        .env("GPU_TRIAGE_URL", format!("http://127.0.0.1:{port}"))
        .env("GPU_TRIAGE_TOKEN", &token)
        .output()
        .expect("run upload");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&up.stdout),
        String::from_utf8_lossy(&up.stderr),
    );
    assert!(up.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("action: fix_code"), "{stderr}");
    assert!(stdout.contains("**Action: Fix the code**"), "{stdout}");

    let id = stderr
        .split("/reports/")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .expect("the report's URL");
    let detail = crate::support::http_get_with(
        port,
        &format!("/api/v1/reports/{id}"),
        &[("Authorization", &format!("Bearer {token}"))],
    )
    .expect("GET the report");
    assert_eq!(detail.0, 200, "{}", detail.1);
    let body: Value = serde_json::from_str(&detail.1).expect("JSON");
    let first = &body["first_failure"];
    let file = first["file"].as_str().expect("file");
    assert!(
        Path::new(file).ends_with("attempt_0/2/stderr.log"),
        "{first}"
    );
    assert_eq!(first["rank"], 2, "{first}");
    assert_eq!(first["host"].as_str(), Some(host.as_str()), "{first}");
    assert!(
        first["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("ValueError: labels out of range")),
        "{first}"
    );
    assert_eq!(body["action"]["kind"], "fix_code", "{}", body["action"]);
    let files = body["files"].as_array().expect("files");
    for rank in [0, 1, 3] {
        let stderr_log = files
            .iter()
            .find(|f| {
                f["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with(&format!("attempt_0/{rank}/stderr.log")))
            })
            .expect("every rank's stderr is in the run");
        assert_eq!(stderr_log["role"], "consequence", "{stderr_log}");
        assert_eq!(stderr_log["consequence_of"], file, "{stderr_log}");
        assert_eq!(stderr_log["rank"], rank);
    }
    let launcher_file = files
        .iter()
        .find(|f| f["name"] == "launcher.log")
        .expect("the launcher's output is in the run");
    assert_eq!(launcher_file["role"], "consequence", "{launcher_file}");
}
