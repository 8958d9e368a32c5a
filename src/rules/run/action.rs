//! What to do with a failed job (issue 41 item 3): `drain_node` when any file shows hardware
//! failing (an Xid that means a faulty GPU or link: 48, 63, 64, 74, 79, 92, 94, 95; uncorrectable
//! ECC; a GPU fallen off the bus), naming only the nodes and GPUs that evidence points at;
//! `restart` for the transient (a preemption, a lost peer, a timeout with no cause in any file);
//! `fix_environment` for the driver, toolkit, container or a library's build; `fix_code` for a
//! failure of the program.

use super::{ActionKind, FileRole, RunAction, RunFile};
use crate::ingest::origin;
use crate::rules::Category;

/// Xids that mean the GPU or its links are failing: drain the node.
pub const HARDWARE_XIDS: [u32; 8] = [48, 63, 64, 74, 79, 92, 94, 95];

/// Xids the GPU reports for the program's own faults (an SM exception, an MMU fault, a
/// stopped channel after a crash): fix the code, not the node.
pub const PROGRAM_XIDS: [u32; 4] = [13, 31, 43, 45];

/// Decides the action from the story's files, its first failure's index and whether that
/// failure is itself only a consequence (no file holds a cause).
#[must_use]
pub fn decide(files: &[RunFile], first: Option<usize>, first_is_consequence: bool) -> RunAction {
    if let Some(drain) = hardware(files) {
        return drain;
    }
    let Some(f) = first.map(|i| &files[i]) else {
        return RunAction {
            kind: ActionKind::Restart,
            reason: "No file shows a failure; restart the job and keep its logs if it fails again."
                .into(),
            nodes: Vec::new(),
            gpus: Vec::new(),
        };
    };
    let rc = f.root_cause.as_ref();
    let rule = rc.map_or("", |r| r.rule.as_str());
    let text = &short(rc.map_or("", |r| r.text.as_str()));
    let at = place_words(f);
    let others = files
        .iter()
        .filter(|g| g.role == FileRole::Consequence)
        .count();
    let follow = if others > 0 {
        format!(" {others} other file(s) show only its consequences.")
    } else {
        String::new()
    };
    let (kind, why) = if first_is_consequence || preempted(files) {
        let why = if preempted(files) {
            "the job was preempted or its node failed".to_owned()
        } else {
            format!(
                "no file holds a cause: the earliest failure, {text:?}{at}, is what a rank prints when a peer is lost or stalls"
            )
        };
        (ActionKind::Restart, why)
    } else if let Some(xid) = xid(text).filter(|x| PROGRAM_XIDS.contains(x)) {
        (
            ActionKind::FixCode,
            format!(
                "the first failure{at} is Xid {xid}, which the GPU reports for a fault of the program's own kernels: {text:?}"
            ),
        )
    } else if environment(f.category, rule) {
        (
            ActionKind::FixEnvironment,
            format!(
                "the first failure{at} is in the environment (driver, toolkit, container or a library build): {text:?}"
            ),
        )
    } else if matches!(
        rule,
        "nccl.ib_completion_error" | "nccl.ib_verbs_failure" | "nccl.proxy_failed"
    ) {
        (
            ActionKind::Restart,
            format!("the first failure{at} is the network between nodes: {text:?}"),
        )
    } else {
        (
            ActionKind::FixCode,
            format!(
                "the first failure{at} is a failure of the program ({}): {text:?}",
                f.category.words().to_lowercase()
            ),
        )
    };
    RunAction {
        kind,
        reason: format!("{} because {why}.{follow}", kind.words()),
        nodes: Vec::new(),
        gpus: Vec::new(),
    }
}

/// A failure line as a reason quotes it: its first 160 characters.
fn short(text: &str) -> String {
    if text.chars().count() <= 160 {
        return text.to_owned();
    }
    let cut: String = text.chars().take(159).collect();
    format!("{cut}…")
}

/// ` on rank 2 (node-1, cuda:2) in rank2.log`.
fn place_words(f: &RunFile) -> String {
    let mut s = String::new();
    if let Some(rank) = f.rank {
        s.push_str(&format!(" on rank {rank}"));
    }
    let where_: Vec<&str> = [f.host.as_deref(), f.gpu.as_deref()]
        .into_iter()
        .flatten()
        .collect();
    if !where_.is_empty() {
        s.push_str(&format!(" ({})", where_.join(", ")));
    }
    s.push_str(&format!(" in {}", f.name));
    s
}

/// The drain, when some file shows hardware failing.
fn hardware(files: &[RunFile]) -> Option<RunAction> {
    let mut nodes: Vec<String> = Vec::new();
    let mut gpus: Vec<String> = Vec::new();
    let mut evidence: Vec<String> = Vec::new();
    for f in files {
        for finding in &f.findings {
            let Some(what) = hardware_fault(&finding.text) else {
                continue;
            };
            let here = origin::from_line(&finding.text);
            if let Some(host) = here.host.or_else(|| f.host.clone())
                && !nodes.contains(&host)
            {
                nodes.push(host);
            }
            if let Some(gpu) = here.gpu.or_else(|| f.gpu.clone())
                && !gpus.contains(&gpu)
            {
                gpus.push(gpu);
            }
            if evidence.len() < 3 {
                evidence.push(format!("{what} in {} line {}", f.name, finding.line));
            }
        }
    }
    if evidence.is_empty() {
        return None;
    }
    let which = if nodes.is_empty() {
        "the node that ran it (no file names the host)".to_owned()
    } else {
        nodes.join(", ")
    };
    Some(RunAction {
        kind: ActionKind::DrainNode,
        reason: format!(
            "Drain {which} because the GPU hardware failed: {}.",
            evidence.join("; ")
        ),
        nodes,
        gpus,
    })
}

/// The hardware fault a line states: `Xid 79`, uncorrectable ECC, a GPU fallen off the bus.
#[must_use]
pub fn hardware_fault(text: &str) -> Option<String> {
    if let Some(xid) = xid(text)
        && HARDWARE_XIDS.contains(&xid)
    {
        return Some(format!("Xid {xid}"));
    }
    let lower = text.to_ascii_lowercase();
    if lower.contains("fallen off the bus") {
        return Some("a GPU fallen off the bus".into());
    }
    if lower.contains("uncorrectable ecc")
        || lower.contains("ecc error") && lower.contains("uncorrect")
    {
        return Some("an uncorrectable ECC error".into());
    }
    None
}

/// The Xid number of an NVRM line: `Xid (PCI:0000:3b:00): 79, ...` or `Xid 79`.
fn xid(text: &str) -> Option<u32> {
    let at = text.find("Xid")?;
    let mut rest = text[at + 3..].trim_start();
    if rest.starts_with('(') {
        rest = rest.split_once("):")?.1.trim_start();
    }
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    rest[..digits].parse().ok()
}

/// Whether any file says the job was preempted or its node failed under the scheduler.
fn preempted(files: &[RunFile]) -> bool {
    files.iter().any(|f| {
        f.findings.iter().any(|x| {
            x.text.contains("DUE TO PREEMPTION")
                || x.text.contains("DUE TO NODE FAILURE")
                || x.text.contains("instance is being preempted")
                || x.text.contains("Spot instance interruption")
        })
    })
}

/// Whether a failure of this category and rule lies in the environment rather than the program.
fn environment(category: Category, rule: &str) -> bool {
    const RULES: &[&str] = &[
        "python.module_not_found",
        "python.extension_abi",
        "pip.requirement_not_found",
        "cuda.invalid_kernel_image",
        "cuda.invalid_device_function",
        "cuda.library_not_found",
        "cuda.library_undefined_symbol",
        "cuda.library_arch_mismatch",
        "torch.no_cuda_gpus",
        "nccl.no_interface",
        "nccl.no_transport",
        "nccl.shm_failed",
        "gloo.interface_not_found",
        "build.compile_error",
        "build.failed",
    ];
    matches!(category, Category::DriverIssue | Category::LibraryError)
        || RULES.contains(&rule)
        || rule.starts_with("container.")
        || rule.starts_with("nvml.")
        || rule.starts_with("kmod.")
        || rule.starts_with("cudnn.version")
        || rule.starts_with("k8s.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hardware_faults_are_read_from_nvrm_lines() {
        let cases = [
            (
                "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
                Some("Xid 79"),
            ),
            (
                "NVRM: Xid (PCI:0000:3b:00): 48, pid=1, An uncorrectable double bit error",
                Some("Xid 48"),
            ),
            ("NVRM: Xid (PCI:0000:3b:00): 31, pid=1, MMU Fault", None),
            ("NVRM: Xid 94, Contained ECC error", Some("Xid 94")),
            ("NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception", None),
            (
                "RuntimeError: CUDA error: uncorrectable ECC error encountered",
                Some("an uncorrectable ECC error"),
            ),
            (
                "GPU 0000:3b:00.0 has fallen off the bus",
                Some("a GPU fallen off the bus"),
            ),
            (
                "RuntimeError: CUDA error: an illegal memory access was encountered",
                None,
            ),
        ];
        for (text, want) in cases {
            assert_eq!(hardware_fault(text).as_deref(), want, "{text}");
        }
    }
}
