//! Memory limits for reproduction runs through the kernel's memory cgroup (DESIGN.md section 7:
//! "memory via cgroup where available; never RLIMIT_AS around CUDA", whose address-space
//! reservations exceed any sane limit). Where the worker may create cgroups below its own (a
//! root worker on cgroup v1's memory hierarchy, or a cgroup v2 subtree delegated to it with the
//! memory controller enabled for children), each run gets a child cgroup with a hard limit and no
//! swap, entered before the sandbox starts, so every process of the run and the tmpfs pages it
//! writes count against it. Elsewhere runs go without, and the worker says why at start.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the memory cgroup of this process lives, as read from `/proc/self/cgroup`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupPath {
    /// cgroup v1: the path within the `memory` hierarchy.
    V1(String),
    /// cgroup v2 (unified): the path within the unified hierarchy.
    V2(String),
}

/// Finds the memory cgroup in the text of `/proc/<pid>/cgroup`: the v1 `memory` controller's
/// line when there is one, else the unified (`0::`) line.
pub fn parse_proc_cgroup(text: &str) -> Option<CgroupPath> {
    let mut unified = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.split(',').any(|c| c == "memory") {
            return Some(CgroupPath::V1(path.to_owned()));
        }
        if controllers.is_empty() {
            unified = Some(CgroupPath::V2(path.to_owned()));
        }
    }
    unified
}

/// The cgroup directory runs are created in, and its kind.
#[derive(Debug, Clone)]
pub struct ParentCgroup {
    parent: PathBuf,
    v2: bool,
}

/// Finds a memory cgroup this worker may create run cgroups in, or says why there is none.
pub fn detect() -> Result<ParentCgroup, String> {
    let text = fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    let (parent, v2) = match parse_proc_cgroup(&text) {
        Some(CgroupPath::V1(path)) => (join(Path::new("/sys/fs/cgroup/memory"), &path), false),
        Some(CgroupPath::V2(path)) => {
            let unified = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
                .into_iter()
                .map(Path::new)
                .find(|p| p.join("cgroup.controllers").exists())
                .ok_or("no cgroup v2 hierarchy mounted")?;
            let dir = join(unified, &path);
            let enabled =
                fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
            if !enabled.split_whitespace().any(|c| c == "memory") {
                return Err(format!(
                    "the memory controller is not enabled for children of {} (run the worker \
                     in a delegated cgroup, e.g. systemd Delegate=yes)",
                    dir.display()
                ));
            }
            (dir, true)
        }
        None => return Err("no memory cgroup in /proc/self/cgroup".into()),
    };
    let memory = ParentCgroup { parent, v2 };
    // Creating, limiting and removing a probe shows the worker may do it for runs.
    let probe = memory
        .for_run(
            &format!("gpu-triage-probe-{}", std::process::id()),
            64 << 20,
        )
        .map_err(|e| {
            format!(
                "cannot create a memory cgroup in {}: {e}",
                memory.parent.display()
            )
        })?;
    drop(probe);
    Ok(memory)
}

fn join(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

impl ParentCgroup {
    /// `v1` or `v2`, and the directory, for the log.
    pub fn describe(&self) -> String {
        format!(
            "cgroup {} at {}",
            if self.v2 { "v2" } else { "v1" },
            self.parent.display()
        )
    }

    /// Creates the cgroup `name` limited to `limit` bytes of memory (and no swap where the
    /// kernel accounts it).
    pub fn for_run(&self, name: &str, limit: u64) -> io::Result<RunCgroup> {
        let dir = self.parent.join(name);
        fs::create_dir(&dir)?;
        let run = RunCgroup {
            dir,
            v2: self.v2,
            limit,
        };
        let limit = limit.to_string();
        if self.v2 {
            fs::write(run.dir.join("memory.max"), &limit)?;
            // Absent without swap accounting: then there is no swap to use anyway.
            let _ = fs::write(run.dir.join("memory.swap.max"), "0");
        } else {
            fs::write(run.dir.join("memory.limit_in_bytes"), &limit)?;
            let _ = fs::write(run.dir.join("memory.memsw.limit_in_bytes"), &limit);
        }
        Ok(run)
    }
}

/// One run's cgroup: removed (after killing anything left in it) when dropped.
#[derive(Debug)]
pub struct RunCgroup {
    dir: PathBuf,
    v2: bool,
    limit: u64,
}

impl RunCgroup {
    /// Moves process `pid` into the cgroup (its later children are born there).
    pub fn enter(&self, pid: u32) -> io::Result<()> {
        fs::write(self.dir.join("cgroup.procs"), pid.to_string())
    }

    /// The limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Whether the kernel killed a process of the run for exceeding the limit.
    pub fn oom_killed(&self) -> bool {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        fs::read_to_string(self.dir.join(file))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("oom_kill "))
            .any(|n| n.trim().parse::<u64>().is_ok_and(|n| n > 0))
    }

    fn pids(&self) -> Vec<i32> {
        fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            for pid in self.pids() {
                if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
            match fs::remove_dir(&self.dir) {
                Err(e) if Instant::now() < deadline && e.kind() != io::ErrorKind::NotFound => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    tracing::warn!("cannot remove {}: {e}", self.dir.display());
                    return;
                }
                _ => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_cgroup_is_found_in_v1_hybrid_and_v2_layouts() {
        let hybrid = "9:name=systemd:/\n4:memory:/process_api/abc\n0::/\n";
        assert_eq!(
            parse_proc_cgroup(hybrid),
            Some(CgroupPath::V1("/process_api/abc".into()))
        );
        let joined = "5:cpu,memory:/jobs\n";
        assert_eq!(
            parse_proc_cgroup(joined),
            Some(CgroupPath::V1("/jobs".into()))
        );
        let v2 = "0::/system.slice/gpu-triage-worker.service\n";
        assert_eq!(
            parse_proc_cgroup(v2),
            Some(CgroupPath::V2(
                "/system.slice/gpu-triage-worker.service".into()
            ))
        );
        assert_eq!(parse_proc_cgroup("garbage\n"), None);
    }
}
