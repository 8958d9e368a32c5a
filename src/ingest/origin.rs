//! Where a failure happened, as a run's files say it: the rank, the host and the GPU (issue 41
//! item 2). Read from a file's name (`rank3.log`, `node-7/stderr`, torchrun's
//! `attempt_0/3/stderr.log`, `slurm-1234.out`) and from a line's own marks: launcher prefixes
//! (`[rank3]:`, `[default3]:`, `3: `), c10's `[Rank 5]`, NCCL's `host:pid:tid [dev] NCCL`, the
//! syslog/journal host, Slurm's `srun: error: node-7: task 2:` and `... ON node-7 CANCELLED`,
//! PCI bus ids in NVRM lines and `cuda:N` devices.

use super::normalize;

/// A rank, host and GPU, each when something names it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Place {
    /// The distributed rank (global where the log says so).
    pub rank: Option<u32>,
    /// The host (node) name.
    pub host: Option<String>,
    /// The GPU: `cuda:N`, or a PCI bus id (`PCI:0000:3b:00`).
    pub gpu: Option<String>,
}

impl Place {
    /// `self`, with what it lacks taken from `other`.
    #[must_use]
    pub fn or(mut self, other: &Place) -> Place {
        if self.rank.is_none() {
            self.rank = other.rank;
        }
        if self.host.is_none() {
            self.host.clone_from(&other.host);
        }
        if self.gpu.is_none() {
            self.gpu.clone_from(&other.gpu);
        }
        self
    }
}

/// What a file's name says: a rank from `rank3`, `rank_3`, `rank-3`, `worker3`'s stem or
/// torchrun's `attempt_N/<rank>/` folder; a host from a folder named like one (`node-7`,
/// `host3`, `nid001234`, `gpu-node-01`, `ip-10-0-0-7`).
#[must_use]
pub fn from_path(name: &str) -> Place {
    let parts: Vec<&str> = name.split('/').collect();
    let mut place = Place::default();
    for (i, part) in parts.iter().enumerate() {
        let stem = part.split('.').next().unwrap_or(part);
        if let Some(rank) = numbered(stem, &["rank", "proc", "process"]) {
            place.rank = Some(rank);
        }
        if i > 0
            && parts[i - 1].starts_with("attempt_")
            && !part.is_empty()
            && part.bytes().all(|c| c.is_ascii_digit())
        {
            place.rank = part.parse().ok();
        }
        let is_folder = i + 1 < parts.len();
        if is_folder && looks_like_host(part) {
            place.host = Some((*part).to_owned());
        }
        if let Some(gpu) = numbered(stem, &["gpu", "cuda", "device"]) {
            place.gpu = Some(format!("cuda:{gpu}"));
        }
    }
    place
}

/// `rank3`, `rank_3`, `rank-3`, `log_rank3` → 3 for the given words.
fn numbered(stem: &str, words: &[&str]) -> Option<u32> {
    let lower = stem.to_ascii_lowercase();
    for word in words {
        let Some(at) = lower.rfind(word) else {
            continue;
        };
        if at > 0 && lower.as_bytes()[at - 1].is_ascii_alphabetic() {
            continue;
        }
        let rest = lower[at + word.len()..].trim_start_matches(['_', '-']);
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let after = rest.as_bytes().get(digits);
        if digits > 0 && digits <= 6 && after.is_none_or(|c| !c.is_ascii_alphanumeric()) {
            return rest[..digits].parse().ok();
        }
    }
    None
}

/// A folder name that names a machine: a host word with a number, or an EC2-style `ip-` name.
fn looks_like_host(part: &str) -> bool {
    let lower = part.to_ascii_lowercase();
    let has_digit = lower.bytes().any(|c| c.is_ascii_digit());
    let hostish = [
        "node", "host", "nid", "gpu", "compute", "worker", "ip-", "dgx", "hgx",
    ];
    has_digit
        && !lower.starts_with("attempt")
        && !lower.starts_with("rank")
        && hostish
            .iter()
            .any(|h| lower.starts_with(h) || lower.contains(&format!("-{h}")))
        && lower
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// What one line says (see the module doc).
#[must_use]
pub fn from_line(line: &str) -> Place {
    let mut place = Place {
        rank: normalize::rank_prefix(line).or_else(|| c10_rank(line)),
        ..Place::default()
    };
    let body = super::prefix::strip_operations_prefix(normalize::strip_decorations(line));
    if let Some((host, dev)) = nccl_head(body) {
        place.host = Some(host.to_owned());
        place.gpu = Some(format!("cuda:{dev}"));
    }
    if place.host.is_none() {
        place.host = slurm_host(line)
            .map(|(host, task)| {
                place.rank = place.rank.or(task);
                host
            })
            .or_else(|| syslog_host(line))
            .map(str::to_owned);
    }
    if let Some(bus) = pci_bus(line) {
        place.gpu = Some(bus);
    } else if place.gpu.is_none()
        && let Some(at) = line.find("cuda:")
    {
        let digits: String = line[at + 5..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if !digits.is_empty() {
            place.gpu = Some(format!("cuda:{digits}"));
        }
    }
    place
}

/// c10's `[Rank 5]` inside a message.
fn c10_rank(line: &str) -> Option<u32> {
    let at = line.find("[Rank ")?;
    let rest = &line[at + 6..];
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    (digits > 0 && rest[digits..].starts_with(']'))
        .then(|| rest[..digits].parse().ok())
        .flatten()
}

/// NCCL's `host:pid:tid [dev] NCCL ...` head.
fn nccl_head(body: &str) -> Option<(&str, u32)> {
    let (head, rest) = body.split_once(' ')?;
    let rest = rest.strip_prefix('[')?;
    let (dev, rest) = rest.split_once(']')?;
    if !rest.trim_start().starts_with("NCCL") {
        return None;
    }
    let mut fields = head.split(':');
    let host = fields.next()?;
    let ids: Vec<&str> = fields.collect();
    let numeric = |s: &&str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    (!host.is_empty() && ids.len() == 2 && ids.iter().all(numeric))
        .then(|| dev.parse().ok().map(|d| (host, d)))
        .flatten()
}

/// Slurm: `srun: error: node-7: task 2: Exited ...` (host, task) or `... ON node-7 CANCELLED`.
fn slurm_host(line: &str) -> Option<(&str, Option<u32>)> {
    if let Some(rest) = line.trim_start().strip_prefix("srun: error: ") {
        let (host, rest) = rest.split_once(": ")?;
        let task = rest
            .strip_prefix("task ")
            .and_then(|t| t.split(':').next())
            .and_then(|t| t.parse().ok());
        return (!host.contains(' ')).then_some((host, task));
    }
    let at = line.find(" ON ")?;
    let rest = &line[at + 4..];
    let (host, after) = rest.split_once(' ')?;
    (line.contains("slurmstepd") && after.starts_with("CANCELLED")).then_some((host, None))
}

/// The host of a syslog or journal line: the word after `Mon DD HH:MM:SS`.
fn syslog_host(line: &str) -> Option<&str> {
    let s = line.trim_start();
    if !matches!(super::stamp::parse(s), Some(super::stamp::Stamp::NoYear(_)))
        || !s.as_bytes().first().is_some_and(u8::is_ascii_uppercase)
        || s.starts_with(['I', 'W', 'E', 'F'])
            && s.as_bytes().get(1).is_some_and(u8::is_ascii_digit)
    {
        return None;
    }
    let rest = s.get(6..)?.trim_start();
    let host = rest.split_whitespace().nth(1)?;
    (!host.ends_with(':') && host.bytes().any(|c| c.is_ascii_alphabetic())).then_some(host)
}

/// A PCI bus id as NVRM and nvidia-smi print it: `PCI:0000:3b:00` or `0000:3B:00.0`.
fn pci_bus(line: &str) -> Option<String> {
    let b = line.as_bytes();
    let hex = |s: &[u8]| s.iter().all(u8::is_ascii_hexdigit);
    for (i, _) in line.match_indices(':') {
        // `dddd:bb:dd` (or an eight-digit domain): the colon after the domain.
        let run = b[..i]
            .iter()
            .rev()
            .take_while(|c| c.is_ascii_hexdigit())
            .count();
        if !(run == 4 || run == 8) || b.len() < i + 6 || b[i + 3] != b':' {
            continue;
        }
        if !hex(&b[i + 1..i + 3]) || !hex(&b[i + 4..i + 6]) {
            continue;
        }
        let id = line[i - 4..i + 6].to_ascii_lowercase();
        return Some(format!("PCI:{id}"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(rank: Option<u32>, host: Option<&str>, gpu: Option<&str>) -> Place {
        Place {
            rank,
            host: host.map(str::to_owned),
            gpu: gpu.map(str::to_owned),
        }
    }

    #[test]
    fn file_names_name_ranks_hosts_and_gpus() {
        let cases = [
            ("rank3.log", place(Some(3), None, None)),
            ("logs/log_rank_12.txt", place(Some(12), None, None)),
            ("node-7/stderr", place(None, Some("node-7"), None)),
            (
                "out/gpu-node-01/rank-5.err",
                place(Some(5), Some("gpu-node-01"), None),
            ),
            ("abc_x/attempt_0/2/stderr.log", place(Some(2), None, None)),
            ("slurm-1234.out", place(None, None, None)),
            ("frank3.log", place(None, None, None)),
            ("dmesg-gpu3.txt", place(None, None, Some("cuda:3"))),
            ("attempt_1/stderr", place(None, None, None)),
        ];
        for (name, want) in cases {
            assert_eq!(from_path(name), want, "{name}");
        }
    }

    #[test]
    fn lines_name_ranks_hosts_and_gpus() {
        let cases = [
            (
                "[rank5]:[E ProcessGroupNCCL.cpp:563] [Rank 5] Watchdog caught collective operation timeout",
                place(Some(5), None, None),
            ),
            (
                "[E ProcessGroupNCCL.cpp:563] [Rank 5] Watchdog caught",
                place(Some(5), None, None),
            ),
            (
                "train-w-0:15325:16199 [2] NCCL INFO [Service thread] Connection closed by localRank 2",
                place(None, Some("train-w-0"), Some("cuda:2")),
            ),
            (
                "Jun 25 13:46:36 node-7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
                place(None, Some("node-7"), Some("PCI:0000:3b:00")),
            ),
            (
                "srun: error: node-7: task 2: Exited with exit code 1",
                place(Some(2), Some("node-7"), None),
            ),
            (
                "slurmstepd: error: *** STEP 1234.0 ON gpu-a12 CANCELLED AT 2024-06-25T13:46:36 ***",
                place(None, Some("gpu-a12"), None),
            ),
            (
                "RuntimeError: Expected all tensors to be on the same device, cuda:1 and cpu!",
                place(None, None, Some("cuda:1")),
            ),
            (
                "GPU 00000000:3B:00.0: Detected Critical Xid Error",
                place(None, None, Some("PCI:0000:3b:00")),
            ),
            (
                "E0625 13:46:36.56 23225 api.py:1002] failed (exitcode: 1)",
                place(None, None, None),
            ),
            (
                "Traceback (most recent call last):",
                place(None, None, None),
            ),
        ];
        for (line, want) in cases {
            assert_eq!(from_line(line), want, "{line}");
        }
    }
}
