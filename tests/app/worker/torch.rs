//! Real PyTorch through the whole path: `upload` a crash log with a minimal script, `serve`
//! queues it, the real `worker` binary claims it and runs the script in its bubblewrap sandbox
//! (read-only system, private /tmp, no network, uid 65534) with the PyTorch that `.ci/run`
//! installs (`GPU_TRIAGE_TORCH_PYTHON`). This machine has no GPU, so the worker runs each
//! CUDA-hard-coded script under CPU translation: unchanged, with CUDA redirected to the CPU,
//! where PyTorch names the bad index at the true line. With `GPU_TRIAGE_REQUIRE_TORCH` set (CI)
//! a missing PyTorch fails instead of skipping.

use std::path::PathBuf;
use std::process::Stdio;

use serde_json::Value;

use super::{have_bwrap, text};
use crate::support::{binary, create_token, database_url, fresh_db, spawn_server};

/// The interpreter with PyTorch, or `None` (skip) where this machine has none and CI does not
/// require it.
fn torch_python() -> Option<PathBuf> {
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

/// What the user pasted: the asynchronous report, blaming a later, innocent line.
const REPORTED: &str = "Traceback (most recent call last):\n  File \"/home/u/repro.py\", line 40, in <module>\n    print(loss.item())\nRuntimeError: CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n";

/// A script, the line it really fails at, what PyTorch says there on the CPU, and the category.
struct Case {
    name: &'static str,
    script: &'static str,
    line: usize,
    message: &'static str,
    category: &'static str,
}

const CASES: &[Case] = &[
    Case {
        name: "embedding lookup past the table (CUDA-hard-coded)",
        script: "import torch\nimport torch.nn as nn\n\nemb = nn.Embedding(10, 4).cuda()\nidx = torch.tensor([1, 2, 10], device=\"cuda\")\ntorch.cuda.synchronize()\nout = emb(idx)\nprint(out.sum().item())\n",
        line: 7,
        message: "IndexError: index out of range in self",
        category: "out_of_bounds",
    },
    Case {
        name: "cross-entropy target out of range",
        script: "import torch\nimport torch.nn.functional as F\ndevice = torch.device(\"cuda\")\nlogits = torch.randn(4, 10, device=device)\ntarget = torch.tensor([1, 2, 3, 10]).to(device)\nloss = F.cross_entropy(logits, target)\nprint(loss.item())\n",
        line: 6,
        message: "IndexError: Target 10 is out of bounds.",
        category: "out_of_bounds",
    },
    Case {
        name: "gather index past the dimension",
        script: "import torch\nmodel = torch.nn.Linear(5, 5)\nmodel.cuda()\nx = torch.randn(3, 5).cuda(0)\nidx = torch.tensor([[0, 9, 1]], device=\"cuda:0\")\ny = model(x).gather(1, idx)\n",
        line: 6,
        message: "RuntimeError: index 9 is out of bounds for dimension 1 with size 5",
        category: "out_of_bounds",
    },
    Case {
        name: "advanced indexing (device-agnostic)",
        script: "import torch\ndevice = \"cuda\" if torch.cuda.is_available() else \"cpu\"\nx = torch.arange(10, device=device)\ni = torch.tensor([3, 10], device=device)\ny = x[i]\n",
        line: 5,
        message: "IndexError: index 10 is out of bounds for dimension 0 with size 10",
        category: "out_of_bounds",
    },
    Case {
        name: "NLL with a negative target",
        script: "import torch\nimport torch.nn.functional as F\nlogp = F.log_softmax(torch.randn(2, 5).cuda(), dim=1)\ntarget = torch.tensor([-1, 2]).cuda()\nloss = F.nll_loss(logp, target)\n",
        line: 5,
        message: "IndexError: Target -1 is out of bounds.",
        category: "out_of_bounds",
    },
    Case {
        name: "dtype mismatch",
        script: "import torch\na = torch.randn(2, 3, device=\"cuda\")\nb = torch.randn(3, 2, dtype=torch.float64, device=\"cuda\")\nc = a @ b\n",
        line: 4,
        message: "expected m1 and m2 to have the same dtype",
        category: "dtype_mismatch",
    },
    Case {
        name: "shape mismatch",
        script: "import torch\nlayer = torch.nn.Linear(768, 10).to(\"cuda\")\nx = torch.randn(4, 512).cuda()\ny = layer(x)\n",
        line: 4,
        message: "mat1 and mat2 shapes cannot be multiplied (4x512 and 768x10)",
        category: "shape_mismatch",
    },
];

#[test]
fn real_pytorch_scripts_fail_at_their_true_line_under_cpu_translation() {
    let Some(python) = torch_python() else {
        return;
    };
    if !have_bwrap() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_db, options) = rt.block_on(fresh_db());
    let url = database_url(options.get_database().unwrap());
    let ingest = create_token(&url, "ingest", "ci");
    let read = create_token(&url, "read", "reader");
    let worker = create_token(&url, "worker", "cpu-host");
    let (_server, port) = spawn_server(&url);
    let base = format!("http://127.0.0.1:{port}");
    let dir = crate::support::shared_tempdir();
    let log = dir.path().join("train.log");

    let run_with = |n: usize,
                    reported: &str,
                    script: &str,
                    extra: &[&str],
                    worker_extra: &[&str]|
     -> (i64, Value) {
        // Each log differs, so each upload is its own report.
        std::fs::write(&log, format!("run {n}\n{reported}")).unwrap();
        let path = dir.path().join("repro.py");
        std::fs::write(&path, script).unwrap();
        let up = binary()
            .args(["upload", "--server", &base])
            .args(extra)
            .arg("--script")
            .arg(&path)
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
        let out = binary()
            .args(["worker", "--server", &base, "--once", "--no-gpu"])
            .args(worker_extra)
            .args(["--timeout", "300", "--python"])
            .arg(&python)
            .env("GPU_TRIAGE_TOKEN", &worker)
            .env_remove("LD_LIBRARY_PATH")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert!(out.status.success(), "worker: {}", text(&out.stderr));
        let (status, report) =
            super::e2e::http_get_json(port, &format!("/api/v1/reports/{report_id}"), &read);
        assert_eq!(status, 200, "{report}");
        (report_id, report)
    };
    let run = |n: usize, reported: &str, script: &str| run_with(n, reported, script, &[], &[]);

    for (n, case) in CASES.iter().enumerate() {
        let (_, report) = run(n, REPORTED, case.script);
        let repro = &report["reproductions"][0];
        let stderr = repro["stderr"].as_str().unwrap_or_default();
        let what = format!("{}: {repro}", case.name);
        assert_eq!(repro["state"], "done", "{what}");
        assert_eq!(repro["sandbox"], "bwrap", "{what}");
        assert_eq!(repro["cpu_translation"], true, "{what}");
        // What it ran on: the interpreter's torch (a CUDA build) and the device, the CPU.
        let env = &repro["environment"];
        assert!(
            env["torch"].as_str().is_some_and(|t| t.starts_with("2.")),
            "{what}"
        );
        assert!(env["cuda_build"].is_string(), "{what}");
        assert!(
            env["python"].as_str().is_some_and(|p| p.starts_with("3.")),
            "{what}"
        );
        assert_eq!(env["device"], "cpu", "{what}");
        assert_eq!(repro["exit_code"], 1, "{what}");
        assert!(stderr.contains(case.message), "{what}");
        // The traceback starts at the user's script and names the true line.
        let at = format!("File \"/tmp/repro.py\", line {}, in <module>", case.line);
        assert!(stderr.contains(&at), "{at} not in {what}");
        assert!(
            !stderr.contains("<string>") && !stderr.contains("runpy"),
            "{what}"
        );
        assert_eq!(repro["classification"]["category"], case.category, "{what}");
        // A synchronous, specific result is what the report's headline follows.
        assert_eq!(report["category"], case.category, "{}: {report}", case.name);
    }

    // Asked for three runs, a deterministic failure says so, with its line.
    let (_, report) = run_with(100, REPORTED, CASES[0].script, &["--repeats", "3"], &[]);
    let repro = &report["reproductions"][0];
    assert_eq!(repro["verdict"], "fails 3/3 at repro.py:7", "{repro}");
    assert_eq!(repro["runs"].as_array().map(Vec::len), Some(3), "{repro}");

    // A failure that comes and goes is flaky, with its k/N. The script picks a bad index on every
    // other run, counted in a file of the test's: only a worker without the sandbox (its own
    // user, the host's files) lets runs share state, so this one runs `--unsafe-no-sandbox`.
    let counter = dir.path().join("count");
    let flaky = format!(
        "import os, torch\np = {counter:?}\nn = int(open(p).read()) if os.path.exists(p) else 0\nopen(p, \"w\").write(str(n + 1))\nemb = torch.nn.Embedding(10, 4).cuda()\nidx = torch.tensor([10 if n % 2 else 3], device=\"cuda\")\nout = emb(idx)\n",
        counter = counter.display().to_string()
    );
    let (_, report) = run_with(
        101,
        REPORTED,
        &flaky,
        &["--repeats", "5"],
        &["--unsafe-no-sandbox"],
    );
    let repro = &report["reproductions"][0];
    assert_eq!(repro["verdict"], "flaky: fails 2/5", "{repro}");
    let lines: Vec<&Value> = repro["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["failing_line"])
        .collect();
    assert_eq!(
        lines,
        [
            &Value::Null,
            &Value::from("repro.py:7"),
            &Value::Null,
            &Value::from("repro.py:7"),
            &Value::Null
        ],
        "{repro}"
    );

    // Placement: moved to the CPU, a device mismatch disappears and the run succeeds.
    let (id, report) = run(
        CASES.len(),
        "Traceback (most recent call last):\n  File \"/home/u/repro.py\", line 4, in <module>\n    print((a @ b).shape)\nRuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!\n",
        "import torch\na = torch.randn(3, 3, device=\"cuda\")\nb = torch.randn(3, 3)\nprint((a @ b).shape)\n",
    );
    assert_eq!(report["category"], "device_mismatch", "{report}");
    let repro = &report["reproductions"][0];
    assert_eq!(repro["cpu_translation"], true, "{repro}");
    assert_eq!(repro["exit_code"], 0, "{repro}");
    assert!(
        repro["stdout"]
            .as_str()
            .unwrap_or_default()
            .contains("torch.Size([3, 3])"),
        "{repro}"
    );
    // The page says what a clean run on the CPU means for a device mismatch.
    let page = report_page(port, id, &read);
    assert!(
        page.contains("On the CPU (CUDA redirected to the CPU)"),
        "{page}"
    );
    assert!(page.contains("Ran on Python 3."), "{page}");
    assert!(
        page.contains("the reported failure is one of placement"),
        "{page}"
    );
}

/// The report page as a signed-in reader sees it.
fn report_page(port: u16, id: i64, token: &str) -> String {
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
    agent
        .get(format!("http://127.0.0.1:{port}/reports/{id}"))
        .header("Cookie", &cookie)
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap()
}
