//! Speed and memory benchmark for a run of many files (issue 41): `BENCH_FILES` files (default
//! 512) of `BENCH_FILE_MB` decimal MB each (default 2), one per rank of a 64-node job, classified
//! by the built-in ruleset, scanned for stamps, places and restarts, and ordered into the run's
//! story (first failure, consequences, action): the engine's part of `app::job_run`, without
//! the scrubbing, compression and database work every upload does.
//!
//! The files are deterministic rank logs with ISO 8601 stamps (training steps, NCCL INFO lines,
//! a caught warning): every rank ends with an NCCL watchdog timeout ten minutes after rank 137
//! runs out of memory, a few ranks end clean, and each node has a journal. The texts are made
//! once (four kinds) and handed to the files by reference, so memory measures the engine, not
//! the input. `BENCH_THREADS` workers (default 2, the target machine's cores) take files in
//! turn, as a server's blocking threads would. The story must name rank 137's OOM as the first
//! failure (exit 2 otherwise).
//!
//! Target: at most 3 s (wall, the files classified and the run ordered) and 128 MiB peak RSS
//! (`VmHWM` of this process) on the 2-core machine. Exits 1 when missed.
//!
//! Run: `cargo bench --bench run` (or `BENCH_FILES=64 BENCH_FILE_MB=2 cargo bench --bench run`).

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use gpu_triage::ingest::file_scan;
use gpu_triage::rules::Ruleset;
use gpu_triage::rules::run::story::{self, FileInput};

const TARGET_SECS: f64 = 3.0;
const TARGET_RSS_MIB: f64 = 128.0;
/// The rank that fails first.
const CULPRIT: usize = 137;

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// A rank log of about `bytes` bytes of training output stamped from 13:00:00, ending with
/// `last` (stamped at `end`).
fn rank_log(bytes: usize, last: &str, end: &str) -> String {
    let mut out = String::with_capacity(bytes + 1024);
    let mut n: u64 = 0;
    while out.len() < bytes {
        n += 1;
        let (m, s, ms) = (n / 60_000 % 60, n / 1000 % 60, n % 1000);
        let _ = match n % 7 {
            0 => writeln!(
                out,
                "2024-06-25T13:{m:02}:{s:02}.{ms:03}Z gpu-node-01:15325:16199 [3] NCCL INFO Channel {:02}/0 : 3[3] -> 4[4] via P2P/CUMEM/read",
                n % 32
            ),
            3 => writeln!(
                out,
                "2024-06-25T13:{m:02}:{s:02}.{ms:03}Z UserWarning: torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly"
            ),
            _ => writeln!(
                out,
                "2024-06-25T13:{m:02}:{s:02}.{ms:03}Z step {n} | loss {:.4} | lr 3.0e-04 | grad_norm {:.3} | tokens/s 48213",
                1.0 / (n as f64).sqrt(),
                0.5 + (n % 13) as f64 / 10.0
            ),
        };
    }
    let _ = writeln!(out, "{end} {last}");
    out
}

fn vm_hwm_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn main() -> ExitCode {
    let files = env_num("BENCH_FILES", 512).max(CULPRIT + 1);
    let file_bytes = env_num("BENCH_FILE_MB", 2) * 1_000_000;
    let threads = env_num("BENCH_THREADS", 2).max(1);
    let ruleset = match Ruleset::builtin() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("bench run: the built-in ruleset: {e}");
            return ExitCode::from(2);
        }
    };
    let timeout = rank_log(
        file_bytes,
        "[E ProcessGroupNCCL.cpp:563] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=15734, OpType=ALLREDUCE, NumelIn=220084533, NumelOut=220084533, Timeout(ms)=600000) ran for 600037 milliseconds before timing out.",
        "2024-06-25T14:10:00.000Z",
    );
    let oom = rank_log(
        file_bytes,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 336.00 MiB. GPU 0 has a total capacity of 79.15 GiB of which 141.25 MiB is free.",
        "2024-06-25T14:00:00.000Z",
    );
    let clean = rank_log(file_bytes, "step done", "2024-06-25T14:00:00.000Z");
    let journal = rank_log(
        file_bytes / 8,
        "gpu-node-01 kernel: NVRM: GPU at PCI:0000:3b:00: GPU-5d1f2c",
        "Jun 25 13:59:00",
    );
    let text_of = |i: usize| -> (String, &str) {
        let node = i / 8;
        match i {
            CULPRIT => (format!("node-{node}/rank{i}.log"), oom.as_str()),
            i if i >= files => (format!("node-{}/journal.txt", i - files), journal.as_str()),
            i if i % 97 == 5 => (format!("node-{node}/rank{i}.log"), clean.as_str()),
            _ => (format!("node-{node}/rank{i}.log"), timeout.as_str()),
        }
    };
    let journals = files.div_ceil(8);
    let total = files + journals;
    let bytes: usize = (0..total).map(|i| text_of(i).1.len()).sum();
    println!(
        "run of {files} rank logs + {journals} journals = {:.1} MB, {threads} threads",
        bytes as f64 / 1e6
    );

    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<(usize, FileInput)>> = Mutex::new(Vec::with_capacity(total));
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        break;
                    }
                    let (name, text) = text_of(i);
                    let classification = if std::env::var_os("BENCH_SKIP_CLASSIFY").is_some() {
                        ruleset.classify_bytes(&name, b"x\n")
                    } else {
                        ruleset.classify_bytes(&name, text.as_bytes())
                    };
                    let wanted: Vec<usize> =
                        classification.root_cause.iter().map(|r| r.line).collect();
                    let skip = std::env::var_os("BENCH_SKIP_SCAN").is_some();
                    let scan = match file_scan::scan(
                        if skip { &b""[..] } else { text.as_bytes() },
                        &wanted,
                    ) {
                        Ok(scan) => scan,
                        Err(e) => panic!("scanning a slice cannot fail: {e}"),
                    };
                    let input = FileInput {
                        name,
                        bytes: text.len() as u64,
                        lines: classification.stats.lines,
                        first_line: 1,
                        classification,
                        scan,
                        attempts: Vec::new(),
                    };
                    if let Ok(mut done) = done.lock() {
                        done.push((i, input));
                    }
                }
            });
        }
    });
    let classified = started.elapsed().as_secs_f64();
    let mut inputs = done.into_inner().unwrap_or_default();
    inputs.sort_by_key(|(i, _)| *i);
    let story = story::tell(inputs.into_iter().map(|(_, f)| f).collect(), Vec::new());
    let secs = started.elapsed().as_secs_f64();
    let rss = vm_hwm_mib();

    println!(
        "classified and scanned in {classified:.2} s, ordered in {:.3} s: {secs:.2} s total ({:.0} MB/s), peak RSS {rss:.1} MiB",
        secs - classified,
        bytes as f64 / 1e6 / secs
    );
    let Some(first) = &story.first_failure else {
        eprintln!("bench run: the story names no first failure");
        return ExitCode::from(2);
    };
    println!(
        "first failure: {} line {} (rank {:?}), action {}; {} consequences",
        first.file,
        first.line,
        first.rank,
        story.action.kind.as_str(),
        story
            .files
            .iter()
            .filter(|f| f.consequence_of.is_some())
            .count()
    );
    if first.rank != Some(CULPRIT as u32) {
        eprintln!("bench run: expected rank {CULPRIT} first");
        return ExitCode::from(2);
    }
    let ok = secs <= TARGET_SECS && rss <= TARGET_RSS_MIB;
    println!(
        "target: <= {TARGET_SECS} s and <= {TARGET_RSS_MIB} MiB: {}",
        if ok { "met" } else { "MISSED" }
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
