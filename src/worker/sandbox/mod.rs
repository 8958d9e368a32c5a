//! The sandbox a reproduction script runs in (SECURITY.md item 10). Scripts come from whoever
//! can file a report, so they run under bubblewrap: no network and no other namespace shared
//! with the host, a read-only view of the system directories only (never `/` as a whole: a
//! unix socket on a read-only bind can still be connected to), private `/tmp`, `/run` and
//! `/dev/shm`, a non-root uid, its own session, killed with the worker. When the worker runs as
//! root, bubblewrap itself is started as the unprivileged sandbox user, so the script is that
//! user on the host as well and `RLIMIT_NPROC` (set with `prlimit`) applies to it.
//!
//! The script reaches the sandbox through bubblewrap's stdin (`--file 0`): no file of the
//! worker's is bound in, and the environment is cleared to a fixed list, so the worker's token
//! is out of reach.
//!
//! The pieces: [`bwrap`] builds bubblewrap's command line (what the script sees), [`launch`]
//! starts a script and tells afterwards whether the sandbox or the script ended the run, and
//! [`self_test`] checks the isolation before the worker takes any job.

mod bwrap;
mod launch;
mod self_test;

use std::path::{Path, PathBuf};

pub use launch::{Launch, Prepared, safe_script_name, sandbox_failure, strip_started_marker};

/// The uid and gid scripts run as (`nobody`).
pub const SANDBOX_ID: u32 = 65534;

/// How scripts are isolated; claims and results carry it as [`crate::api_types::Sandbox`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxKind {
    /// bubblewrap.
    Bwrap,
    /// `--unsafe-no-sandbox`: the script runs as the worker's user.
    None,
}

impl From<SandboxKind> for crate::api_types::Sandbox {
    fn from(kind: SandboxKind) -> Self {
        match kind {
            SandboxKind::Bwrap => crate::api_types::Sandbox::Bwrap,
            SandboxKind::None => crate::api_types::Sandbox::None,
        }
    }
}

/// Why the sandbox is unusable.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// `--python` names no executable file.
    #[error("the interpreter {0} is not an executable file (--python)")]
    NoPython(String),
    /// `bwrap` is not installed.
    #[error("bubblewrap (bwrap) is not on PATH; install the bubblewrap package")]
    NoBwrap,
    /// The self-test did not show the isolation it must.
    #[error("sandbox self-test failed: {0}")]
    SelfTest(String),
    /// Preparing or starting the run failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// What every run needs: the interpreter, the GPU (None with `--no-gpu`), the process limit.
#[derive(Debug, Clone)]
pub struct SandboxLauncher {
    kind: SandboxKind,
    bwrap: Option<PathBuf>,
    prlimit: Option<PathBuf>,
    python: PathBuf,
    gpu: Option<u32>,
    /// `/dev/nvidia<minor>` of that GPU, when known: the other GPUs' nodes stay out.
    gpu_minor: Option<u32>,
    max_procs: u32,
    drop_root: bool,
    /// Where runs get a memory cgroup, and its limit in bytes.
    memory: Option<(super::cgroup::ParentCgroup, u64)>,
}

impl SandboxLauncher {
    /// Finds bubblewrap (unless `unsafe_no_sandbox`) and `prlimit`, and resolves the interpreter
    /// on PATH (it must exist on the host: the sandbox binds it from there).
    pub fn new(
        python: &Path,
        gpu: Option<u32>,
        max_procs: u32,
        unsafe_no_sandbox: bool,
    ) -> Result<SandboxLauncher, SandboxError> {
        let python = find_program(python)
            .ok_or_else(|| SandboxError::NoPython(python.display().to_string()))?;
        let bwrap = if unsafe_no_sandbox {
            None
        } else {
            Some(find_program(Path::new("bwrap")).ok_or(SandboxError::NoBwrap)?)
        };
        let kind = if unsafe_no_sandbox {
            SandboxKind::None
        } else {
            SandboxKind::Bwrap
        };
        Ok(SandboxLauncher {
            kind,
            bwrap,
            prlimit: find_program(Path::new("prlimit")),
            python,
            gpu,
            gpu_minor: None,
            max_procs,
            drop_root: rustix::process::geteuid().is_root(),
            memory: None,
        })
    }

    /// Runs each script in its own memory cgroup under `memory`, limited to `limit` bytes.
    #[must_use]
    pub fn with_memory_limit(
        mut self,
        memory: Option<(super::cgroup::ParentCgroup, u64)>,
    ) -> SandboxLauncher {
        self.memory = memory;
        self
    }

    /// Binds only `/dev/nvidia<minor>` of the GPU's nodes (plus the control nodes), so a script
    /// cannot reach the host's other GPUs by changing `CUDA_VISIBLE_DEVICES`.
    #[must_use]
    pub fn with_gpu_minor(mut self, minor: Option<u32>) -> SandboxLauncher {
        self.gpu_minor = minor;
        self
    }

    /// `bwrap` or `none`.
    pub fn kind(&self) -> SandboxKind {
        self.kind
    }

    /// Whether a process limit is applied (`prlimit` found).
    pub fn limits_processes(&self) -> bool {
        self.prlimit.is_some()
    }

    /// The interpreter as resolved on the host.
    pub fn python(&self) -> &Path {
        &self.python
    }
}

/// `name` as given when it has a slash, else its first match on PATH.
fn find_program(name: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.components().count() > 1 || name.is_absolute() {
        return Some(name.to_owned()).filter(|p| executable(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_absolute() && executable(p))
}
