//! Flight-recorder dumps from a real distributed run (issue 41 item 7): `torchrun` starts four
//! CPU processes (gloo) with the flight recorder on (`TORCH_FR_BUFFER_SIZE`); rank 2 never
//! enters the last all-reduce, the others time out in it, and every rank dumps its recorder
//! with `_dump_fr_trace_file` (gloo has no watchdog that dumps by itself). The per-rank logs
//! and dumps are uploaded as one archive: the run names the collective where the ranks
//! diverged and rank 2 as the one that never entered it, and lists the dumps as read, not as
//! text. Skips without PyTorch, as the torchrun test does.

use std::io::Write;

use axum::http::StatusCode;
use gpu_triage::auth::Scope;
use gpu_triage::rules::run::flight;

use crate::support::TestApp;

const TRAIN: &str = r#"import datetime, glob, os, sys, time
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace_file

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=4))
rank = dist.get_rank()
x = torch.ones(4)
for step in range(3):
    dist.all_reduce(x)
    print(f"step {step} rank {rank} ok", flush=True)
dist.broadcast(x, 0)
if rank == 2:
    # Rank 2 skips the next all-reduce (a data-dependent branch gone wrong) and waits.
    time.sleep(7)
else:
    try:
        dist.all_reduce(x)
    except RuntimeError as e:
        print(f"[rank{rank}] collective timed out: {e}", file=sys.stderr, flush=True)
_dump_fr_trace_file(rank)
# No rank leaves before every rank has dumped: a rank that exits early (gloo's teardown after a
# timed-out collective may abort the process) makes torchrun stop the others, rank 2 among
# them before its dump. `os._exit` skips that teardown.
dumps = os.environ["TORCH_FR_DUMP_TEMP_FILE"] + "*"
deadline = time.monotonic() + 60
while len(glob.glob(dumps)) < dist.get_world_size() and time.monotonic() < deadline:
    time.sleep(0.05)
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"#;

#[tokio::test]
async fn the_ranks_dumps_name_the_collective_where_they_diverged_and_who_never_entered_it() {
    let Some(python) = super::torchrun::torch_python() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let run_dir = dir.path().join("run");
    std::fs::create_dir_all(run_dir.join("fr")).expect("mkdir");
    let script = dir.path().join("train.py");
    std::fs::write(&script, TRAIN).expect("write train.py");
    let out = std::process::Command::new(&python)
        .args(["-m", "torch.distributed.run", "--nproc-per-node", "4"])
        .arg("--log-dir")
        .arg(run_dir.join("logs"))
        .args(["--redirects", "3"])
        .arg(&script)
        .env("OMP_NUM_THREADS", "1")
        .env("TORCH_FR_BUFFER_SIZE", "2000")
        .env("TORCH_FR_DUMP_TEMP_FILE", run_dir.join("fr/rank_"))
        .output()
        .expect("run torchrun");
    let launcher = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(run_dir.join("launcher.log"), &launcher).expect("write launcher.log");

    // Every rank dumped, and each dump reads without Python.
    let mut dumps = Vec::new();
    for rank in 0..4u32 {
        let path = run_dir.join(format!("fr/rank_{rank}"));
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{path:?}: {e}\n{launcher}"));
        let dump = flight::Dump::read(&data).expect("a dump");
        assert!(!dump.entries.is_empty(), "rank {rank} recorded collectives");
        assert_eq!(dump.groups.get("0").map(Vec::len), Some(4), "{dump:?}");
        dumps.push((rank, dump));
    }
    let last = dumps[0].1.entries.last().expect("an entry").clone();
    assert_eq!(last.op, "gloo:all_reduce");
    let d = flight::diverged(&dumps).expect("the ranks diverged");
    assert_eq!(
        (d.seq, d.op.as_str(), &d.entered[..], &d.missing[..]),
        (last.seq, "gloo:all_reduce", &[0, 1, 3][..], &[2][..]),
        "{d:?}"
    );

    // Uploaded as one archive with the logs.
    let mut tar = tar::Builder::new(Vec::new());
    tar.append_dir_all("run", &run_dir).expect("tar");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar.into_inner().expect("tar")).expect("gzip");
    let archive = gz.finish().expect("gzip");
    let app = TestApp::spawn().await;
    let token = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let res = app
        .upload(&token, &[("archive", Some("run.tar.gz"), &archive)], None)
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let body = res.json();
    let c = &body["collectives"];
    assert_eq!(c["op"], "gloo:all_reduce", "{body}");
    assert_eq!(c["seq"], last.seq);
    assert_eq!(c["missing"], serde_json::json!([2]));
    assert_eq!(c["entered"], serde_json::json!([0, 1, 3]));
    let skipped = body["skipped"].as_array().expect("skipped");
    for rank in 0..4 {
        let name = format!("run/fr/rank_{rank}");
        assert!(
            skipped.iter().any(|s| s["name"] == name.as_str()
                && s["reason"] == "flight-recorder dump, read for the collectives"),
            "{skipped:?}"
        );
    }
    // The report page says it too.
    let id = body["id"].as_i64().expect("id");
    let detail = app.get_as(&token, &format!("/api/v1/reports/{id}")).await;
    assert_eq!(detail.json()["collectives"], *c);
}
