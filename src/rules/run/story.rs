//! The run's story: which failure came first and which follow from it. A file's failure is a
//! consequence by its kind (another rank's NCCL or gloo timeout, abort or lost peer, the
//! launcher's `ChildFailedError`, kills and exit codes, the scheduler's "task failed" or
//! cancellation), whatever its time; among the failures of their own, the first is the earliest
//! by the time its line was written, then the one the launcher's failure table names, then by
//! rank, then in file order (files without stamps come after files with them).

use super::{
    Attempt, FileFinding, FileRole, FileRootCause, FirstFailure, RunFile, RunStory, SkippedFile,
};
use crate::ingest::file_scan::FileScan;
use crate::ingest::origin::{self, Place};
use crate::rules::{Category, Classification};

/// One classified file of a run, with its scan.
#[derive(Clone, Debug)]
pub struct FileInput {
    /// The file's name in the run.
    pub name: String,
    pub bytes: u64,
    pub lines: u64,
    /// Where the file starts in the run's stored log.
    pub first_line: u64,
    /// The file's own classification (lines 1-based in the file).
    pub classification: Classification,
    /// Its scan, with the root-cause line among the wanted lines.
    pub scan: FileScan,
    /// Each attempt's failure when the file restarted.
    pub attempts: Vec<Attempt>,
}

/// Findings kept per file.
const MAX_FILE_FINDINGS: usize = 20;

/// Whether a failure with this rule and text follows from another failure rather than being a
/// cause of its own (see the module doc).
#[must_use]
pub fn is_consequence(rule: &str, text: &str) -> bool {
    const RULES: &[&str] = &[
        "nccl.watchdog_timeout",
        "nccl.timeout",
        "nccl.watchdog_terminated",
        "nccl.socket_closed",
        "nccl.ring_missing_rank",
        "c10d.collective_timeout_variant",
        "c10d.timeout_at_work",
        "c10d.dump_signal_timeout",
        "c10d.heartbeat_timeout",
        "c10d.nccl_ops_failed",
        "c10d.store_client_timeout",
        "c10d.store_peer_closed",
        "c10d.store_barrier_timeout",
        "c10d.store_clients_timeout",
        "c10d.rendezvous_closed",
        "gloo.pair_io_error",
        "gloo.application_timeout",
        "deepspeed.launcher_sigkill",
        "deepspeed.launcher_exit",
        "launcher.killed",
        "launcher.signal",
        "launcher.exit_code",
        "job.terminated",
        "mpi.rank_signal",
        "slurm.stepd_error",
        "vllm.worker_died",
        "ray.actor_died",
        "sglang.subprocess_failed",
        "tgi.shard_failed",
    ];
    const TEXTS: &[&str] = &[
        "ChildFailedError",
        "Connection closed by",
        "Connection reset by peer",
        "task failed",
        "Task failed",
        "Terminating remaining",
        "closing signal SIGTERM",
        "Exited with exit code",
        "srun: error:",
        "Some NCCL operations have failed or timed out",
        "Watchdog caught collective operation timeout",
    ];
    RULES.contains(&rule) || TEXTS.iter().any(|t| text.contains(t))
}

/// Whether `c` shows a failure at all.
fn fails(c: &Classification) -> bool {
    c.root_cause.is_some()
}

/// Tells the run's story (see the module doc and [`super::action`]).
#[must_use]
pub fn tell(files: Vec<FileInput>, skipped: Vec<SkippedFile>) -> RunStory {
    let year = files
        .iter()
        .filter_map(|f| f.scan.year)
        .min()
        .unwrap_or(2000);
    let launcher_root: Option<Place> = files.iter().find_map(|f| f.scan.launcher_root.clone());
    let mut out: Vec<RunFile> = files.iter().map(|f| file_of(f, year)).collect();
    // A rank the launcher's failure table places on a host lends it to the rank's files.
    let hosts: Vec<&(u32, String)> = files.iter().flat_map(|f| &f.scan.launcher_hosts).collect();
    for f in &mut out {
        if f.host.is_none()
            && let Some(rank) = f.rank
            && let Some((_, host)) = hosts.iter().find(|(r, _)| *r == rank)
        {
            f.host = Some(host.clone());
        }
    }
    let consequence: Vec<bool> = files
        .iter()
        .map(|f| {
            f.classification
                .root_cause
                .as_ref()
                .is_some_and(|r| is_consequence(&r.rule, &r.text))
        })
        .collect();
    // Failing files in time order: own failures first, then consequences.
    let mut failing: Vec<usize> = (0..files.len())
        .filter(|&i| fails(&files[i].classification))
        .collect();
    let root_rank = launcher_root.as_ref().and_then(|p| p.rank);
    failing.sort_by_key(|&i| {
        let f = &out[i];
        (
            consequence[i],
            f.at_ms.is_none(),
            f.at_ms.unwrap_or(i64::MAX),
            root_rank.is_none() || f.rank != root_rank,
            f.rank.unwrap_or(u32::MAX),
            i,
        )
    });
    for (order, &i) in failing.iter().enumerate() {
        out[i].order = u32::try_from(order).ok();
    }
    let first = failing.first().copied();
    for (i, f) in out.iter_mut().enumerate() {
        f.role = match first {
            _ if !fails(&files[i].classification) => FileRole::Clean,
            Some(j) if j == i => FileRole::FirstFailure,
            Some(j) if consequence[i] => {
                f.consequence_of = Some(files[j].name.clone());
                FileRole::Consequence
            }
            _ => FileRole::Failure,
        };
    }
    let first_failure = first.and_then(|i| {
        let f = &out[i];
        let rc = f.root_cause.as_ref()?;
        Some(FirstFailure {
            file: f.name.clone(),
            line: rc.line,
            rank: f.rank,
            host: f.host.clone(),
            gpu: f.gpu.clone(),
            category: f.category,
            title: f.title.clone(),
            text: rc.text.clone(),
        })
    });
    let action = super::action::decide(&out, first, first.is_some_and(|i| consequence[i]));
    RunStory {
        files: out,
        first_failure,
        action,
        skipped,
        collectives: None,
    }
}

/// A file as the story lists it, before its role is known.
fn file_of(f: &FileInput, year: i32) -> RunFile {
    let c = &f.classification;
    let rc = c.root_cause.as_ref();
    let facts = rc.and_then(|r| f.scan.lines.iter().find(|l| l.line == r.line));
    let line_place = facts.map(|l| l.place.clone()).unwrap_or_default();
    // A host the file's own lines name beats a folder name that only looks like one.
    let named_host = Place {
        host: f.scan.place.host.clone(),
        ..Place::default()
    };
    let place = line_place
        .or(&named_host)
        .or(&origin::from_path(&f.name))
        .or(&f.scan.place)
        .or(&Place {
            rank: c.facts.ranks.first().copied(),
            ..Place::default()
        });
    RunFile {
        name: f.name.clone(),
        bytes: f.bytes,
        lines: f.lines,
        first_line: f.first_line,
        category: if rc.is_some() {
            c.category
        } else {
            Category::Unknown
        },
        title: c.title.clone(),
        root_cause: rc.map(|r| FileRootCause {
            line: r.line as u64,
            text: r.text.clone(),
            rule: r.rule.clone(),
        }),
        role: FileRole::Clean,
        consequence_of: None,
        rank: place.rank,
        host: place.host,
        gpu: place.gpu,
        at_ms: facts.and_then(|l| l.stamp).and_then(|s| s.resolve(year)),
        order: None,
        attempts: f.attempts.clone(),
        findings: c
            .findings
            .iter()
            .take(MAX_FILE_FINDINGS)
            .map(|x| FileFinding {
                rule: x.rule.clone(),
                category: x.category,
                line: x.line as u64,
                text: x.text.clone(),
            })
            .collect(),
    }
}

#[cfg(test)]
#[path = "story_tests.rs"]
mod tests;
