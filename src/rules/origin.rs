//! Where a failure happened: the rank, host and GPU a root-cause line names, kept as facts of
//! the finding (`failing_rank`, `failing_host`, `failing_gpu`) so a report can say "rank 3 on
//! node-7 failed first, on cuda:3" while the other ranks only time out.
//!
//! Read from what tooling puts in front of a line (a `[rank3]:` prefix, pdsh's `worker-1: `, NCCL's
//! `host:pid:tid [dev]` head) and from how runtimes and launchers spell them inside the message
//! (`[Rank 5]`, `process rank 7 ... on node gpu-12`, `srun: error: node-3: task 4`, ONNX
//! Runtime's `GPU=0 ; hostname=DESK`, `GPU 0 has a total capacity`, `cuda:3`, a PCI bus id).

use std::sync::LazyLock;

use regex::Regex;

use crate::ingest::normalize::rank_prefix;

/// The rank, host and GPU one line names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    /// The distributed rank.
    pub rank: Option<u32>,
    /// The host name.
    pub host: Option<String>,
    /// The GPU: `cuda:N` for a device index, or a PCI bus id (`0000:3b:00.0`).
    pub gpu: Option<String>,
}

impl Origin {
    /// Fills what this origin lacks from `other`.
    pub fn or(mut self, other: Origin) -> Origin {
        self.rank = self.rank.or(other.rank);
        self.host = self.host.or(other.host);
        self.gpu = self.gpu.or(other.gpu);
        self
    }

    /// Whether it names nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == Origin::default()
    }
}

#[allow(
    clippy::expect_used,
    reason = "constant patterns; every one is exercised by the unit tests"
)]
fn re(pattern: &str) -> Regex {
    Regex::new(pattern).expect("constant origin pattern compiles")
}

/// Ranks inside messages: ProcessGroupNCCL's `[Rank 5]` and `[PG 3 Rank 5]`, mpirun's
/// `process rank 7`, torchrun's summary `rank : 3` and `rank2 (local rank: 2)`, srun's `task 4:`.
static RANK: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?:\[(?:PG [^\]]*?)?Rank (\d+)\]|process rank (\d+)\b|^rank\s*:\s*(\d+)\b|^rank(\d+) \(local rank|srun: error: [^:\s]+: task (\d+):)",
    )
});

/// Hosts inside messages: ONNX Runtime's `hostname=DESK`, mpirun's `on node gpu-12`, srun's
/// `srun: error: node-3: task`, slurmstepd's `STEP 12.0 ON node-3 CANCELLED`, torchrun's summary
/// `host : worker-0`.
static HOST: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?:hostname=([^\s;,]+)|\bon node ([A-Za-z0-9][\w.-]*)|srun: error: ([^:\s]+): task|\bON ([A-Za-z0-9][\w.-]*) CANCELLED|^host\s*:\s*([A-Za-z0-9][\w.-]*))",
    )
});

/// NCCL's line head: `gpu5:35917:35994 [1] ` (host, pid, thread, CUDA device).
static NCCL_HEAD: LazyLock<Regex> =
    LazyLock::new(|| re(r"^([A-Za-z0-9][\w.-]*):\d+:\d+ \[(\d+)\] "));

/// GPUs inside messages: `GPU 0 has`, `(GPU 0; 15.78 GiB`, `GPU=0 ;`, `on device 3`, `cuda:3`,
/// a PCI bus id (`PCI:0000:3b:00`, `00000000:3B:00.0`).
static GPU: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?:\bGPU[ =#]?(\d{1,3})(?:[\s;,.)]|$)|\bon device (\d+)\b|\bcuda:(\d+)\b|PCI:([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)|\b(?:[0-9a-fA-F]{4}){1,2}:([0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\b)",
    )
});

/// Where one line says its failure happened: `raw` is the line with its prefixes (ANSI
/// removed), `cleaned` the message as rules see it.
#[must_use]
pub fn of_line(raw: &str, cleaned: &str) -> Origin {
    let host = crate::ingest::normalize::host_label_of(raw);
    let mut o = Origin {
        rank: prefix_rank(raw),
        host: host.map(str::to_owned),
        gpu: None,
    };
    if let Some(c) = NCCL_HEAD.captures(cleaned) {
        o.host = o.host.or_else(|| Some(c[1].to_owned()));
        o.gpu = Some(format!("cuda:{}", &c[2]));
    }
    if o.rank.is_none()
        && let Some(c) = RANK.captures(cleaned)
    {
        o.rank = first_group(&c).and_then(|v| v.parse().ok());
    }
    if o.host.is_none()
        && let Some(c) = HOST.captures(cleaned)
    {
        o.host = first_group(&c).map(str::to_owned);
    }
    if o.gpu.is_none() {
        o.gpu = gpu_of(cleaned);
    }
    o
}

/// The rank prefix of a raw line (`[rank3]:`, `[1,3]<stderr>:`, `3: `), also behind a
/// pdsh-style host label (`node-7: [rank3]: ...`).
#[must_use]
pub fn prefix_rank(raw: &str) -> Option<u32> {
    rank_prefix(raw).or_else(|| {
        let host = crate::ingest::normalize::host_label_of(raw)?;
        let at = raw.find(host)? + host.len();
        rank_prefix(raw[at..].strip_prefix(':')?.trim_start())
    })
}

/// The one GPU a message names; `None` when it names two (a device mismatch names both, and
/// neither is where it failed).
fn gpu_of(text: &str) -> Option<String> {
    let mut found: Option<String> = None;
    for c in GPU.captures_iter(text) {
        let gpu = match (1..=3).find_map(|i| c.get(i)) {
            Some(index) => format!("cuda:{}", index.as_str()),
            None => {
                let pci = c.get(4).or_else(|| c.get(5))?.as_str().to_ascii_lowercase();
                // `00000000:3B:00.0` (nvidia-smi) and `0000:3b:00.0` (lspci) are one bus id.
                let whole = c.get(0)?.as_str().to_ascii_lowercase();
                let domain = whole.split(':').next().unwrap_or("0000");
                let domain = &domain[domain.len().saturating_sub(4)..];
                match c.get(4) {
                    Some(_) => pci,
                    None => format!("{domain}:{pci}"),
                }
            }
        };
        match &found {
            Some(f) if *f != gpu => return None,
            _ => found = Some(gpu),
        }
    }
    let mismatch = text.contains("same device") || text.contains("different device");
    found.filter(|_| !mismatch)
}

fn first_group<'h>(c: &regex::Captures<'h>) -> Option<&'h str> {
    (1..c.len()).find_map(|i| c.get(i)).map(|m| m.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(raw: &str) -> Origin {
        let cleaned = crate::ingest::normalize::clean_line(raw.as_bytes());
        of_line(raw, &cleaned)
    }

    #[test]
    fn prefixes_name_rank_and_host() {
        let o = of("[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered");
        assert_eq!(o.rank, Some(3));
        let o = of("worker-7: [rank3]: torch.OutOfMemoryError: CUDA out of memory.");
        assert_eq!((o.rank, o.host.as_deref()), (Some(3), Some("worker-7")));
        assert_eq!(prefix_rank("worker-7: [rank3]: x"), Some(3));
        assert_eq!(
            prefix_rank("2025-01-01T00:00:00Z worker-7: 12: x"),
            Some(12)
        );
        let o = of(
            "gpu5:35917:35994 [1] transport/net_ib.cu:788 NCCL WARN NET/IB : Got completion with error 12",
        );
        assert_eq!(o.host.as_deref(), Some("gpu5"));
        assert_eq!(o.gpu.as_deref(), Some("cuda:1"));
    }

    /// A line and the rank, host and GPU it names.
    type Case<'a> = (&'a str, Option<u32>, Option<&'a str>, Option<&'a str>);

    #[test]
    fn messages_name_rank_host_and_gpu() {
        let cases: [Case<'_>; 9] = [
            (
                "[PG ID 2 PG GUID 3 Rank 5] Process group watchdog thread terminated with exception",
                Some(5),
                None,
                None,
            ),
            (
                "mpirun noticed that process rank 7 with PID 0 on node gpu-12 exited on signal 9 (Killed).",
                Some(7),
                Some("gpu-12"),
                None,
            ),
            (
                "srun: error: Orion-01-01: task 4: Out Of Memory",
                Some(4),
                Some("Orion-01-01"),
                None,
            ),
            (
                "CUDNN failure 8: CUDNN_STATUS_EXECUTION_FAILED ; GPU=0 ; hostname=DESK-7 ; expr=x",
                None,
                Some("DESK-7"),
                Some("cuda:0"),
            ),
            (
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.15 GiB",
                None,
                None,
                Some("cuda:3"),
            ),
            (
                "NVRM: Xid (PCI:0000:3B:00): 79, pid=1234, GPU has fallen off the bus.",
                None,
                None,
                Some("0000:3b:00"),
            ),
            (
                "Unable to determine the device handle for GPU 00000000:3B:00.0: Unknown Error",
                None,
                None,
                Some("0000:3b:00.0"),
            ),
            (
                "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cuda:1!",
                None,
                None,
                None,
            ),
            ("rank      : 3 (local_rank: 3)", Some(3), None, None),
        ];
        for (line, rank, host, gpu) in cases {
            let o = of(line);
            assert_eq!(
                (o.rank, o.host.as_deref(), o.gpu.as_deref()),
                (rank, host, gpu),
                "{line}"
            );
        }
    }

    #[test]
    fn a_line_that_names_nothing_has_no_origin() {
        assert!(of("RuntimeError: boom").is_empty());
        assert!(of("epoch 3: loss 0.2").is_empty());
        // `python3: ` and `gcc-12: ` are programs, not hosts.
        assert!(of("python3: can't open file 'x.py'").host.is_none());
    }
}
