//! One pass over a run's file, after the engine classified it, for what ordering the run's
//! failures needs (issue 41 items 2 and 4): when each finding's line was written
//! ([`super::stamp`]), where it happened ([`super::origin`]), the file's own rank, host and GPU,
//! the launcher's failure table (torchrun's `Root Cause (first observed failure)` block names
//! the rank and host that failed first), and the lines where a new attempt starts (an elastic
//! agent's `will restart worker group`, a Slurm requeue, a `Cycle: N` marker). Streaming: one
//! line in memory at a time.

use std::collections::BTreeMap;
use std::io::{self, BufRead};

use super::origin::{self, Place};
use super::stamp::{Clock, Stamp};

/// What a finding's line says of itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LineFacts {
    /// 1-based line.
    pub line: usize,
    /// The stamp in force at the line (its own or the last before it).
    pub stamp: Option<Stamp>,
    /// The rank, host and GPU the line itself names.
    pub place: Place,
}

/// A file's scan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileScan {
    /// The wanted lines' facts, in the order asked.
    pub lines: Vec<LineFacts>,
    /// The file's place: the host and GPU its lines name first, the rank most of its launcher
    /// prefixes name.
    pub place: Place,
    /// 1-based lines where a new attempt starts (the first attempt starts at line 1).
    pub restarts: Vec<usize>,
    /// The year of the file's first absolute stamp.
    pub year: Option<i32>,
    /// The rank and host a launcher's failure table names as the first observed failure
    /// (the first to exit, which is not always the first to fail).
    pub launcher_root: Option<Place>,
    /// Every rank's host in a launcher's failure table.
    pub launcher_hosts: Vec<(u32, String)>,
}

/// Lines a scan reads for the file's place (a rank prefix repeats on every line; a host is
/// named early): past them, only the wanted lines' places are read.
const PLACE_LINES: usize = 2_000;

/// Scans `text`, recording the facts of the 1-based lines in `wanted`.
pub fn scan(mut text: impl BufRead, wanted: &[usize]) -> io::Result<FileScan> {
    let mut want: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (i, &line) in wanted.iter().enumerate() {
        want.entry(line).or_default().push(i);
    }
    let mut out = FileScan {
        lines: wanted
            .iter()
            .map(|&line| LineFacts {
                line,
                ..LineFacts::default()
            })
            .collect(),
        ..FileScan::default()
    };
    let mut clock = Clock::default();
    let mut ranks: BTreeMap<u32, usize> = BTreeMap::new();
    let mut table = Table::default();
    let mut cycle: Option<u64> = None;
    let mut buf = Vec::new();
    let mut n = 0;
    loop {
        buf.clear();
        if text.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        n += 1;
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim_end_matches(['\n', '\r']);
        clock.note(line);
        if n <= PLACE_LINES {
            if out.year.is_none() {
                out.year = clock.now().and_then(Stamp::year);
            }
            if let Some(rank) = super::normalize::rank_prefix(line) {
                *ranks.entry(rank).or_default() += 1;
            }
            if out.place.host.is_none() || out.place.gpu.is_none() {
                let here = origin::from_line(line);
                if out.place.host.is_none() {
                    out.place.host = here.host;
                }
                if out.place.gpu.is_none() {
                    out.place.gpu = here.gpu;
                }
            }
        }
        if is_restart(line, &mut cycle) && n > 1 {
            out.restarts.push(n);
        }
        if table.in_table || line.contains("Root Cause (first") || line.contains("Failures:") {
            table.line(line, &mut out.launcher_root, &mut out.launcher_hosts);
        }
        if let Some(slots) = want.get(&n) {
            let stamp = clock.now();
            let place = origin::from_line(line);
            for &slot in slots {
                out.lines[slot].stamp = stamp;
                out.lines[slot].place = place.clone();
            }
        }
    }
    for facts in &mut out.lines {
        facts.stamp = facts.stamp.map(|s| clock.settle(s));
    }
    out.place.rank = ranks
        .iter()
        .max_by_key(|(rank, count)| (**count, std::cmp::Reverse(**rank)))
        .map(|(rank, _)| *rank);
    Ok(out)
}

/// Whether `line` starts a new attempt: an elastic agent restarting its workers, a Slurm
/// requeue, or a `Cycle: N` marker past the first one seen.
fn is_restart(line: &str, cycle: &mut Option<u64>) -> bool {
    if line.contains("will restart worker group") && line.contains("attempts left") {
        return true;
    }
    if line.contains("equeu") || line.contains("EQUEU") {
        let lower = line.to_ascii_lowercase();
        return lower.contains("requeued") || lower.contains("requeueing");
    }
    if let Some(at) = line.find("Cycle: ") {
        let digits: String = line[at + 7..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if let Ok(n) = digits.parse::<u64>() {
            let first = cycle.is_none();
            let newer = cycle.is_none_or(|c| n > c);
            if newer {
                *cycle = Some(n);
            }
            return newer && !first;
        }
    }
    false
}

/// torchrun's failure table: `Failures:` and `Root Cause (first observed failure):` sections of
/// `[N]:` entries with `host : X` and `rank : N (local_rank: M)` lines.
#[derive(Debug, Default)]
struct Table {
    in_table: bool,
    in_root: bool,
    host: Option<String>,
    rank: Option<u32>,
}

impl Table {
    fn line(&mut self, line: &str, root: &mut Option<Place>, hosts: &mut Vec<(u32, String)>) {
        let body = super::normalize::strip_decorations(line).trim();
        let root_head = body.starts_with("Root Cause (first observed failure)");
        if root_head || body.starts_with("Failures:") {
            *self = Table {
                in_table: true,
                in_root: root_head,
                ..Table::default()
            };
            return;
        }
        if !self.in_table {
            return;
        }
        if body.starts_with("=====") {
            self.in_table = false;
            return;
        }
        if body.starts_with('[') && body.ends_with("]:") {
            self.host = None;
            self.rank = None;
            return;
        }
        let Some((key, value)) = body.split_once(':') else {
            return;
        };
        let value = value.trim();
        match key.trim() {
            "host" => self.host = Some(value.to_owned()),
            "rank" => {
                self.rank = value.split_whitespace().next().and_then(|r| r.parse().ok());
            }
            _ => return,
        }
        if let (Some(host), Some(rank)) = (&self.host, self.rank) {
            if !hosts.iter().any(|(r, _)| *r == rank) {
                hosts.push((rank, host.clone()));
            }
            if self.in_root && root.is_none() {
                *root = Some(Place {
                    rank: Some(rank),
                    host: Some(host.clone()),
                    gpu: None,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAUNCHER: &str = "\
W1129 08:30:37.727000 23225 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 23471 closing signal SIGTERM
E1129 08:30:38.028000 23225 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 2 (pid: 23473) of binary: python3
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-29_08:30:38
  host      : node-3
  rank      : 0 (local_rank: 0)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-29_08:30:37
  host      : node-1
  rank      : 2 (local_rank: 2)
  exitcode  : 1 (pid: 23473)
============================================================
";

    #[test]
    fn a_launcher_log_names_its_root_cause_rank_and_host() {
        let s = scan(LAUNCHER.as_bytes(), &[2, 3]).expect("scan");
        assert_eq!(
            s.launcher_root,
            Some(Place {
                rank: Some(2),
                host: Some("node-1".into()),
                gpu: None
            })
        );
        assert_eq!(
            s.launcher_hosts,
            vec![(0, "node-3".to_owned()), (2, "node-1".to_owned())]
        );
        assert_eq!(s.lines[0].line, 2);
        let t = |l: &str| crate::ingest::stamp::parse(l);
        assert_eq!(s.lines[0].stamp, t("E1129 08:30:38.028000 x"));
        // A line without a stamp takes the one before it.
        assert_eq!(s.lines[1].stamp, t("E1129 08:30:38.028000 x"));
        assert!(s.restarts.is_empty());
    }

    #[test]
    fn a_rank_log_has_the_rank_its_prefixes_name_and_its_restarts() {
        let log = "\
[rank3]: step 1
Jun 25 13:46:36 node-7 agent: [default] Worker group FAILED. 3/3 attempts left; will restart worker group
[rank3]: step 1
[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered
Cycle: 1
Cycle: 2
Cycle: 2
slurmstepd: error: *** JOB 77 ON node-7 CANCELLED AT 2024-06-25T13:50:00 DUE TO PREEMPTION *** JOB REQUEUED
";
        let s = scan(log.as_bytes(), &[4]).expect("scan");
        assert_eq!(s.place.rank, Some(3));
        assert_eq!(s.place.host.as_deref(), Some("node-7"));
        assert_eq!(s.restarts, vec![2, 6, 8]);
        assert_eq!(s.lines[0].place.rank, Some(3));
        assert!(s.lines[0].stamp.is_some());
        assert_eq!(s.year, None, "no line starts with a dated stamp");
    }
}
