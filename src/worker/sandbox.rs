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

use std::ffi::OsString;
use std::fs::File;
use std::io::{Seek, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::run::{self, Limits};

/// The uid and gid scripts run as (`nobody`).
pub const SANDBOX_ID: u32 = 65534;
/// System directories bound read-only (those that exist; merged-/usr symlinks are recreated).
const SYSTEM_DIRS: [&str; 8] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt",
];
/// The parts of `/etc` programs need; the rest (credentials, service configs) stays outside.
const ETC_FILES: [&str; 12] = [
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/os-release",
    "/etc/ssl",
    "/etc/python3",
];

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
pub struct Sandbox {
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
    memory: Option<(super::cgroup::Memory, u64)>,
}

/// A command ready to spawn, with what must live as long as it runs.
pub struct Prepared {
    /// The command (stdin already set).
    pub command: Command,
    /// The line the sandbox prints on stderr right before it execs the interpreter (a fresh
    /// random value per run): present, the script ran; absent, the sandbox failed to start it.
    /// A script cannot forge its absence, whatever it prints. `None` when unsandboxed.
    pub started_marker: Option<String>,
    /// The memory cgroup to move the run into before it starts, with its script.
    pub gate: Option<run::Gate>,
    /// The private script directory of an unsandboxed run.
    _dir: Option<tempfile::TempDir>,
}

impl Sandbox {
    /// Finds bubblewrap (unless `unsafe_no_sandbox`) and `prlimit`, and resolves the interpreter
    /// on PATH (it must exist on the host: the sandbox binds it from there).
    pub fn new(
        python: &Path,
        gpu: Option<u32>,
        max_procs: u32,
        unsafe_no_sandbox: bool,
    ) -> Result<Sandbox, SandboxError> {
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
        Ok(Sandbox {
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
    pub fn with_memory_limit(mut self, memory: Option<(super::cgroup::Memory, u64)>) -> Sandbox {
        self.memory = memory;
        self
    }

    /// Binds only `/dev/nvidia<minor>` of the GPU's nodes (plus the control nodes), so a script
    /// cannot reach the host's other GPUs by changing `CUDA_VISIBLE_DEVICES`.
    #[must_use]
    pub fn with_gpu_minor(mut self, minor: Option<u32>) -> Sandbox {
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

    /// Runs a shell inside the sandbox and checks what it must see: a non-root uid, a
    /// read-only system, a writable private `/tmp`, no network interface but `lo`, and the
    /// interpreter present and executable.
    pub fn self_test(&self) -> Result<(), SandboxError> {
        const CHECK: &str = r#"echo "uid=$(id -u)"
if touch /usr/.gpu-triage-rw 2>/dev/null || touch /.gpu-triage-rw 2>/dev/null; then echo system=writable; else echo system=readonly; fi
if echo ok > /tmp/.gpu-triage-rw; then echo tmp=writable; fi
echo "net=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ',')"
if [ -x "$GPU_TRIAGE_PYTHON" ]; then echo python=ok; fi
"#;
        let Some(bwrap) = &self.bwrap else {
            return Ok(());
        };
        let mut args = self.bwrap_args("self-test.sh");
        args.extend(["--setenv", "GPU_TRIAGE_PYTHON"].map(OsString::from));
        args.push(self.python.clone().into());
        args.extend(["--", "/bin/sh", "/tmp/self-test.sh"].map(OsString::from));
        let command = self.wrap(bwrap, args, Some(script_file(CHECK)?));
        let limits = Limits {
            timeout: Duration::from_secs(30),
            output_cap: 64 * 1024,
            stderr_extra: 0,
        };
        let out = run::run(command, limits, &|| false, None)?;
        let facts = out.stdout.text;
        let want = ["system=readonly", "tmp=writable", "net=lo,", "python=ok"];
        let uid_ok = facts.lines().any(|l| {
            l.strip_prefix("uid=")
                .is_some_and(|u| !u.is_empty() && u != "0")
        });
        let missing: Vec<&str> = want
            .into_iter()
            .filter(|w| !facts.lines().any(|l| l == *w))
            .collect();
        if uid_ok && missing.is_empty() && out.status.is_some_and(|s| s.success()) {
            return Ok(());
        }
        let mut why = format!(
            "expected a non-root uid and {}; the sandbox printed {:?}",
            want.join(", "),
            facts.trim()
        );
        if missing.contains(&"python=ok") {
            why += &format!(
                "; the interpreter {} is not executable inside the sandbox (it runs as uid \
                 {SANDBOX_ID}: the interpreter and its directories must be readable by it)",
                self.python.display()
            );
        }
        let err = out.stderr.text.trim();
        if !err.is_empty() {
            why += &format!("; stderr: {err}");
        }
        Err(SandboxError::SelfTest(why))
    }

    /// The command that runs `script` (saved as `/tmp/<script_name>`) with the interpreter.
    pub fn prepare(
        &self,
        script_name: &str,
        script: &str,
        launch: Launch,
    ) -> Result<Prepared, SandboxError> {
        let name = safe_script_name(script_name);
        let Some(bwrap) = &self.bwrap else {
            return self.prepare_unsandboxed(&name, script, launch);
        };
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce)
            .map_err(|e| std::io::Error::other(format!("no randomness from the OS: {e}")))?;
        let marker = format!("gpu-triage: sandbox started {}", hex::encode(nonce));
        let mut args = self.bwrap_args(&name);
        args.push("--".into());
        // `sh` checks the interpreter, prints the marker, then becomes the interpreter (same
        // pid, same process group).
        for a in ["/bin/sh", "-c", START, SH_NAME, &marker] {
            args.push(a.into());
        }
        args.push(self.python.clone().into());
        args.extend(launch.interpreter_args());
        args.push(format!("/tmp/{name}").into());
        let Some((memory, limit)) = &self.memory else {
            let command = self.wrap(bwrap, args, Some(script_file(script)?));
            return Ok(Prepared {
                command,
                started_marker: Some(marker),
                gate: None,
                _dir: None,
            });
        };
        // Gated: the command waits for a first line on stdin, which comes once the worker has
        // moved it into the run's cgroup, so every process of the run is born inside.
        let cgroup = memory.for_run(
            &format!("gpu-triage-run-{}", &marker[marker.len() - 12..]),
            *limit,
        )?;
        Ok(Prepared {
            command: self.wrap(bwrap, args, None),
            started_marker: Some(marker),
            gate: Some(run::Gate {
                cgroup,
                script: script.as_bytes().to_vec(),
            }),
            _dir: None,
        })
    }

    /// `--unsafe-no-sandbox`: a private directory as cwd, HOME and TMPDIR, the same cleared
    /// environment, the worker's own user.
    fn prepare_unsandboxed(
        &self,
        name: &str,
        script: &str,
        launch: Launch,
    ) -> Result<Prepared, SandboxError> {
        let dir = tempfile::Builder::new()
            .prefix("gpu-triage-job-")
            .tempdir()?;
        let path = dir.path().join(name);
        std::fs::write(&path, script)?;
        let mut command = Command::new(&self.python);
        command
            .args(launch.interpreter_args())
            .arg(&path)
            .current_dir(dir.path())
            .env_clear()
            .envs(self.env(&dir.path().display().to_string()))
            .stdin(Stdio::null());
        Ok(Prepared {
            command,
            started_marker: None,
            gate: None,
            _dir: Some(dir),
        })
    }

    /// The environment a script sees.
    fn env(&self, home: &str) -> Vec<(String, String)> {
        const SYSTEM_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
        let mut path = String::from(SYSTEM_PATH);
        let dir = self.python.parent().map(|d| d.display().to_string());
        if let Some(dir) = dir.filter(|d| !d.is_empty() && !SYSTEM_PATH.split(':').any(|p| p == d))
        {
            path = format!("{dir}:{path}");
        }
        let mut env = vec![
            ("PATH".to_owned(), path),
            ("HOME".to_owned(), home.to_owned()),
            ("CUDA_LAUNCH_BLOCKING".to_owned(), "1".to_owned()),
            ("PYTHONUNBUFFERED".to_owned(), "1".to_owned()),
        ];
        if let Some(gpu) = self.gpu {
            let inherited = std::env::var("CUDA_VISIBLE_DEVICES").ok();
            env.push((
                "CUDA_VISIBLE_DEVICES".to_owned(),
                visible_device(inherited.as_deref(), gpu),
            ));
        }
        env
    }

    /// bubblewrap's options up to (not including) `--` and the command; the script is read
    /// from stdin into `/tmp/<name>`.
    fn bwrap_args(&self, name: &str) -> Vec<OsString> {
        fn push<S: AsRef<std::ffi::OsStr>>(a: &mut Vec<OsString>, items: &[S]) {
            a.extend(items.iter().map(|s| s.as_ref().to_owned()));
        }
        let a = &mut Vec::new();
        let id = SANDBOX_ID.to_string();
        push(
            a,
            &[
                "--unshare-all",
                "--unshare-user",
                "--uid",
                &id,
                "--gid",
                &id,
            ],
        );
        push(
            a,
            &["--die-with-parent", "--new-session", "--cap-drop", "ALL"],
        );
        // No nested user namespaces: inside one a script would be root over new mount and
        // network namespaces, the usual start of a kernel exploit.
        push(a, &["--disable-userns", "--assert-userns-disabled"]);
        for dir in SYSTEM_DIRS {
            let path = Path::new(dir);
            match std::fs::read_link(path) {
                Ok(target) => push(a, &[Path::new("--symlink"), &target, path]),
                Err(_) if path.is_dir() => push(a, &["--ro-bind", dir, dir]),
                Err(_) => {}
            }
        }
        for file in ETC_FILES {
            push(a, &["--ro-bind-try", file, file]);
        }
        push(a, &["--proc", "/proc", "--dev", "/dev"]);
        // Sized tmpfs mounts: their pages belong to no process, so an unbounded one lets a
        // script fill the host's memory where no OOM kill can reach it.
        for (dir, size) in TMPFS {
            push(a, &["--size", &size.to_string(), "--tmpfs", dir]);
        }
        if self.gpu.is_some() {
            for node in select_device_nodes(nvidia_device_nodes(), self.gpu_minor) {
                push(a, &[Path::new("--dev-bind"), &node, &node]);
            }
            // The CUDA runtime reads PCI topology from /sys.
            push(a, &["--ro-bind-try", "/sys", "/sys"]);
        }
        if let Some(root) = interpreter_root(&self.python) {
            push(a, &[Path::new("--ro-bind"), &root, &root]);
        }
        // bubblewrap's own root (the mountpoints above) is a writable tmpfs until now.
        push(a, &["--remount-ro", "/", "--clearenv"]);
        for (key, value) in self.env("/tmp") {
            push(a, &["--setenv", &key, &value]);
        }
        push(
            a,
            &["--chdir", "/tmp", "--file", "0", &format!("/tmp/{name}")],
        );
        std::mem::take(a)
    }

    /// `prlimit --nproc=N:N bwrap ARGS`, as the sandbox user when the worker is root, reading
    /// the script from `script`; without one, behind a gate that waits for a first line on
    /// stdin (`sh -c 'read -r _ && exec "$@"'`), the script following on the same stdin.
    fn wrap(&self, bwrap: &Path, args: Vec<OsString>, script: Option<File>) -> Command {
        let mut command = match script {
            Some(_) => Command::new(self.prlimit.as_deref().unwrap_or(bwrap)),
            None => {
                let mut c = Command::new("/bin/sh");
                c.args(["-c", "read -r _ && exec \"$@\"", "gpu-triage-gate"]);
                c.arg(self.prlimit.as_deref().unwrap_or(bwrap));
                c
            }
        };
        if self.prlimit.is_some() {
            let n = self.max_procs;
            command.arg(format!("--nproc={n}:{n}")).arg("--").arg(bwrap);
        }
        command
            .args(args)
            .current_dir("/")
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
        if let Some(script) = script {
            command.stdin(Stdio::from(script));
        }
        if self.drop_root {
            command.uid(SANDBOX_ID).gid(SANDBOX_ID);
        }
        command
    }
}

/// `$0` of the shell that starts the interpreter: dash prefixes its own errors with it.
const SH_NAME: &str = "gpu-triage-sandbox";

/// Run by `/bin/sh -c` inside the sandbox with `$1` the marker, then the interpreter and the
/// script: a missing interpreter exits 1 before the marker, like bubblewrap's own failures.
/// How the interpreter starts the script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launch {
    /// `python /tmp/script.py`.
    Script,
    /// `python -c BOOTSTRAP /tmp/script.py`: the script runs unchanged, with CUDA redirected to
    /// the CPU by a torch function mode (`cpu_translation.py`), so index errors are checked
    /// synchronously and named at their true line on a machine without a GPU.
    CpuTranslation,
}

/// The CPU translation bootstrap, passed with `-c` (no file of the worker's enters the sandbox).
const CPU_TRANSLATION: &str = include_str!("cpu_translation.py");

impl Launch {
    fn interpreter_args(self) -> Vec<OsString> {
        match self {
            Launch::Script => Vec::new(),
            Launch::CpuTranslation => vec!["-c".into(), CPU_TRANSLATION.into()],
        }
    }
}

const START: &str = r#"m=$1; shift
[ -x "$1" ] || { printf '%s: the interpreter %s is not executable inside the sandbox\n' "$0" "$1" >&2; exit 1; }
printf '%s\n' "$m" >&2
exec "$@""#;

/// After a sandboxed run: strips the start marker from the head of `stderr`, and says why
/// when the sandbox, not the script, ended the run: no marker and exit code 1 (bubblewrap's
/// own failures, a missing interpreter), or the interpreter's `exec` failing just after it
/// (exit 126/127 with the shell's one-line message). A script cannot remove the marker, which
/// is printed before it starts.
pub fn sandbox_failure(
    stderr: &mut String,
    marker: &str,
    exit_code: Option<i32>,
) -> Option<String> {
    let first_line = |s: &str| {
        let line = s.lines().next().unwrap_or_default().trim();
        if line.is_empty() {
            "(no message)".to_owned()
        } else {
            line.to_owned()
        }
    };
    if strip_started_marker(stderr, marker) {
        let exec_failed = matches!(exit_code, Some(126 | 127))
            && stderr.starts_with(&format!("{SH_NAME}: "))
            && stderr.lines().count() == 1;
        return exec_failed.then(|| first_line(stderr));
    }
    (exit_code == Some(1)).then(|| first_line(stderr))
}

/// Removes the sandbox's start marker from the head of `stderr`; whether it was there (the
/// sandbox started the script).
pub fn strip_started_marker(stderr: &mut String, marker: &str) -> bool {
    let Some(rest) = stderr.strip_prefix(marker) else {
        return false;
    };
    let Some(rest) = rest.strip_prefix('\n') else {
        return false;
    };
    *stderr = rest.to_owned();
    true
}

/// The script in an unlinked, private temporary file, rewound for reading.
fn script_file(text: &str) -> std::io::Result<File> {
    let mut file = tempfile::tempfile()?;
    file.write_all(text.as_bytes())?;
    file.rewind()?;
    Ok(file)
}

/// A file name safe to use inside the sandbox: `[A-Za-z0-9._-]`, not hidden, else `repro.py`.
pub fn safe_script_name(name: &str) -> String {
    let ok = !name.is_empty()
        && name.len() <= 100
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        name.to_owned()
    } else {
        "repro.py".to_owned()
    }
}

/// Writable mounts of the sandbox and their sizes in bytes.
const TMPFS: [(&str, u64); 4] = [
    ("/dev/shm", 1 << 30),
    ("/tmp", 1 << 30),
    ("/run", 16 << 20),
    ("/var/tmp", 64 << 20),
];

/// The device nodes to bind: all control nodes (`nvidiactl`, `nvidia-uvm`, ...), and of the
/// per-GPU nodes (`nvidia0`, `nvidia1`, ...) only `minor`'s when it is known.
fn select_device_nodes(nodes: Vec<PathBuf>, minor: Option<u32>) -> Vec<PathBuf> {
    let Some(minor) = minor else {
        return nodes;
    };
    nodes
        .into_iter()
        .filter(|n| {
            let name = n.file_name().map(|f| f.to_string_lossy().into_owned());
            match name.as_deref().and_then(|f| f.strip_prefix("nvidia")) {
                Some(num) if !num.is_empty() && num.bytes().all(|b| b.is_ascii_digit()) => {
                    num.parse() == Ok(minor)
                }
                _ => true,
            }
        })
        .collect()
}

/// `/dev/nvidia0`, `/dev/nvidiactl`, `/dev/nvidia-uvm`, `/dev/nvidia-caps`, ... when present.
fn nvidia_device_nodes() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/dev") else {
        return Vec::new();
    };
    let mut nodes: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("nvidia"))
        .map(|e| e.path())
        .collect();
    nodes.sort();
    nodes
}

/// What to bind for an interpreter outside the system directories: a virtualenv's or conda
/// environment's root (the parent of its `bin/`, holding `pyvenv.cfg` or `conda-meta/`), else
/// the interpreter file alone: binding "its directory" could hand a script the worker user's
/// home (`--python ~/python3`) with its keys and tokens.
fn interpreter_root(python: &Path) -> Option<PathBuf> {
    if !python.is_absolute() || SYSTEM_DIRS.iter().any(|d| python.starts_with(d)) {
        return None;
    }
    let env_root = python
        .parent()
        .filter(|dir| dir.file_name().is_some_and(|n| n == "bin"))
        .and_then(Path::parent)
        .filter(|root| root.join("pyvenv.cfg").is_file() || root.join("conda-meta").is_dir());
    Some(env_root.unwrap_or(python).to_owned())
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

/// The `CUDA_VISIBLE_DEVICES` value that shows the script the device the probe calls `gpu`: the
/// probe numbers devices within the worker's own `CUDA_VISIBLE_DEVICES` (`2,3` makes device 0 the
/// host's GPU 2), so the sandbox gets that list's entry, not the bare ordinal.
fn visible_device(inherited: Option<&str>, gpu: u32) -> String {
    inherited
        .map(|list| {
            list.split(',')
                .map(str::trim)
                .filter(|d| !d.is_empty())
                .collect::<Vec<_>>()
        })
        .and_then(|list| list.get(gpu as usize).map(|d| (*d).to_owned()))
        .unwrap_or_else(|| gpu.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_names_are_kept_only_when_plain() {
        let cases = [
            ("repro.py", "repro.py"),
            ("train_v2-min.py", "train_v2-min.py"),
            ("../etc/passwd", "repro.py"),
            ("a b.py", "repro.py"),
            (".bashrc", "repro.py"),
            ("", "repro.py"),
        ];
        for (name, want) in cases {
            assert_eq!(safe_script_name(name), want, "{name}");
        }
    }

    #[test]
    fn interpreters_outside_the_system_bind_their_environment_root() {
        let venv = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(venv.path().join("pyvenv.cfg"), "home = /usr/bin\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let venv_python = venv.path().join("bin/python");
        let cases = [
            ("/usr/bin/python3", None),
            ("/opt/conda/bin/python", None),
            (venv_python.to_str().unwrap_or(""), venv.path().to_str()),
            // Not an environment: only the file, never its directory (a home, say).
            ("/srv/venv/bin/python", Some("/srv/venv/bin/python")),
            ("/home/u/python3", Some("/home/u/python3")),
            ("python3", None),
        ];
        for (python, want) in cases {
            assert_eq!(
                interpreter_root(Path::new(python)),
                want.map(PathBuf::from),
                "{python}"
            );
        }
    }

    #[test]
    fn the_sandbox_sees_the_device_the_probe_numbered_within_the_workers_own_list() {
        assert_eq!(visible_device(None, 1), "1");
        assert_eq!(visible_device(Some("2,3"), 0), "2");
        assert_eq!(visible_device(Some("2, 3"), 1), "3");
        assert_eq!(visible_device(Some("GPU-8a1b,GPU-77ce"), 1), "GPU-77ce");
        // An ordinal beyond the list is passed on as it is (the probe refused it already).
        assert_eq!(visible_device(Some("2"), 4), "4");
    }

    #[test]
    fn only_the_chosen_gpus_node_is_bound_when_its_minor_is_known() {
        let nodes: Vec<PathBuf> = [
            "/dev/nvidia-caps",
            "/dev/nvidia-uvm",
            "/dev/nvidia0",
            "/dev/nvidia1",
            "/dev/nvidia10",
            "/dev/nvidiactl",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        let names = |v: Vec<PathBuf>| -> Vec<String> {
            v.iter().map(|p| p.display().to_string()).collect()
        };
        assert_eq!(
            names(select_device_nodes(nodes.clone(), Some(1))),
            [
                "/dev/nvidia-caps",
                "/dev/nvidia-uvm",
                "/dev/nvidia1",
                "/dev/nvidiactl"
            ]
        );
        assert_eq!(select_device_nodes(nodes.clone(), None), nodes);
    }

    #[test]
    fn nested_user_namespaces_are_off_and_every_writable_mount_is_sized() {
        let args: Vec<String> = sandbox(Some(0))
            .bwrap_args("x.py")
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(args.iter().any(|a| a == "--disable-userns"));
        for (i, a) in args.iter().enumerate() {
            if a == "--tmpfs" {
                assert_eq!(args[i - 2], "--size", "{} has no size", args[i + 1]);
            }
        }
    }

    fn sandbox(gpu: Option<u32>) -> Sandbox {
        Sandbox {
            kind: SandboxKind::Bwrap,
            bwrap: Some("/usr/bin/bwrap".into()),
            prlimit: None,
            python: "/srv/venv/bin/python".into(),
            gpu,
            gpu_minor: None,
            max_procs: 64,
            drop_root: false,
            memory: None,
        }
    }

    #[test]
    fn the_sandbox_environment_is_a_fixed_list_and_names_the_gpu() {
        let args: Vec<String> = sandbox(Some(2))
            .bwrap_args("repro.py")
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let line = args.join(" ");
        for want in [
            "--unshare-all --unshare-user --uid 65534 --gid 65534",
            "--die-with-parent --new-session",
            "--clearenv --setenv PATH /srv/venv/bin:/usr/local/bin:/usr/bin:/bin \
             --setenv HOME /tmp --setenv CUDA_LAUNCH_BLOCKING 1 --setenv PYTHONUNBUFFERED 1 \
             --setenv CUDA_VISIBLE_DEVICES 2 --chdir /tmp --file 0 /tmp/repro.py",
            "--size 1073741824 --tmpfs /tmp --size 16777216 --tmpfs /run",
            "--ro-bind /srv/venv/bin/python /srv/venv/bin/python",
        ] {
            assert!(line.contains(want), "{want}\nnot in\n{line}");
        }
        assert!(!line.contains("--bind /"), "{line}");
        let cpu = sandbox(None).bwrap_args("x.py");
        assert!(
            !cpu.iter()
                .any(|a| a == "CUDA_VISIBLE_DEVICES" || a == "/sys")
        );
    }

    #[test]
    fn only_the_sandbox_failing_before_or_at_exec_is_a_sandbox_failure() {
        let m = "gpu-triage: sandbox started 00ff";
        let case = |stderr: String, code: Option<i32>| {
            let mut s = stderr;
            let why = sandbox_failure(&mut s, m, code);
            (why, s)
        };
        // bubblewrap's own failure, or the interpreter check: no marker, exit 1.
        let (why, _) = case("bwrap: Can't find source path /x\n".into(), Some(1));
        assert_eq!(why.as_deref(), Some("bwrap: Can't find source path /x"));
        // The script printing the same words and exiting 1, after the marker.
        let (why, rest) = case(format!("{m}\nbwrap: fake\n"), Some(1));
        assert_eq!((why, rest.as_str()), (None, "bwrap: fake\n"));
        // exec of the interpreter failing right after the marker.
        let msg = format!("{SH_NAME}: 4: exec: /venv/bin/python: not found\n");
        let (why, _) = case(format!("{m}\n{msg}"), Some(127));
        assert_eq!(why.as_deref(), Some(msg.trim()));
        // A script exiting 127 with more to say is the script's.
        let (why, _) = case(format!("{m}\n{msg}Traceback\n"), Some(127));
        assert_eq!(why, None);
        // Killed before the shell printed anything: not a sandbox failure.
        assert_eq!(case(String::new(), None).0, None);
    }

    #[test]
    fn the_start_marker_is_stripped_only_from_the_head_of_stderr() {
        let marker = "gpu-triage: sandbox started 00ff";
        let mut started = format!("{marker}\nTraceback ...\n");
        assert!(strip_started_marker(&mut started, marker));
        assert_eq!(started, "Traceback ...\n");
        let mut failed = "bwrap: Can't mount proc on /newroot/proc\n".to_owned();
        assert!(!strip_started_marker(&mut failed, marker));
        assert_eq!(failed, "bwrap: Can't mount proc on /newroot/proc\n");
        let mut other = format!("{marker}00\n");
        assert!(
            !strip_started_marker(&mut other, marker),
            "another run's marker"
        );
    }
}
