//! bubblewrap's command line: the namespaces, the read-only system directories and the parts
//! of `/etc` programs need, sized private mounts, the GPU's device nodes, the interpreter's
//! environment root, and the fixed environment a script sees; then the `prlimit` and
//! unprivileged-user wrapping around it. Everything a script can reach is decided here.

use std::ffi::OsString;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{SANDBOX_ID, SandboxLauncher};

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

/// Writable mounts of the sandbox and their sizes in bytes.
const TMPFS: [(&str, u64); 4] = [
    ("/dev/shm", 1 << 30),
    ("/tmp", 1 << 30),
    ("/run", 16 << 20),
    ("/var/tmp", 64 << 20),
];

impl SandboxLauncher {
    /// The environment a script sees.
    pub(super) fn env(&self, home: &str) -> Vec<(String, String)> {
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
            // Hosts whose driver libraries are found through the worker's LD_LIBRARY_PATH
            // rather than ld.so.cache (NVIDIA's container images: /usr/local/nvidia/lib64) would
            // leave a script with no libcuda; it gets the entries the sandbox binds read-only.
            let inherited = std::env::var("LD_LIBRARY_PATH").ok();
            let root = interpreter_root(&self.python);
            if let Some(path) = library_path(inherited.as_deref(), root.as_deref()) {
                env.push(("LD_LIBRARY_PATH".to_owned(), path));
            }
        }
        env
    }

    /// bubblewrap's options up to (not including) `--` and the command; the script is read
    /// from stdin into `/tmp/<name>`.
    pub(super) fn bwrap_args(&self, name: &str) -> Vec<OsString> {
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
    pub(super) fn wrap(&self, bwrap: &Path, args: Vec<OsString>, script: Option<File>) -> Command {
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

/// The worker's `LD_LIBRARY_PATH` as the sandbox can use it: the absolute entries inside what it
/// binds read-only (a system directory, or the interpreter's environment `root`), in order and
/// once each; `None` when none is left. An entry elsewhere (a home, a writable directory) is
/// dropped: it is not there inside, and a script must not load libraries from places it could
/// write to.
fn library_path(inherited: Option<&str>, root: Option<&Path>) -> Option<String> {
    let bound = |dir: &Path| {
        SYSTEM_DIRS.iter().any(|d| dir.starts_with(d)) || root.is_some_and(|r| dir.starts_with(r))
    };
    let mut kept: Vec<&str> = Vec::new();
    for entry in inherited?.split(':') {
        let dir = Path::new(entry);
        let plain = dir
            .components()
            .all(|c| !matches!(c, std::path::Component::ParentDir));
        if dir.is_absolute() && plain && bound(dir) && !kept.contains(&entry) {
            kept.push(entry);
        }
    }
    (!kept.is_empty()).then(|| kept.join(":"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_driver_library_path_keeps_only_what_the_sandbox_binds_read_only() {
        let venv = Path::new("/srv/envs/torch");
        let cases: [(Option<&str>, Option<&Path>, Option<&str>); 7] = [
            (None, None, None),
            (Some(""), None, None),
            (
                Some("/usr/local/nvidia/lib64:/usr/local/nvidia/lib"),
                None,
                Some("/usr/local/nvidia/lib64:/usr/local/nvidia/lib"),
            ),
            // A home, a relative entry, a way out with `..` and a repeat are dropped.
            (
                Some("/home/u/lib:lib:/usr/../home/u:/usr/local/cuda/lib64:/usr/local/cuda/lib64"),
                None,
                Some("/usr/local/cuda/lib64"),
            ),
            (Some("/tmp/evil"), None, None),
            // The interpreter's own environment is bound too.
            (
                Some("/srv/envs/torch/lib:/srv/other/lib"),
                Some(venv),
                Some("/srv/envs/torch/lib"),
            ),
            (Some("/srv/envs/torch/lib"), None, None),
        ];
        for (inherited, root, want) in cases {
            assert_eq!(
                library_path(inherited, root).as_deref(),
                want,
                "{inherited:?} with {root:?}"
            );
        }
    }
    use crate::worker::sandbox::SandboxKind;

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

    fn sandbox(gpu: Option<u32>) -> SandboxLauncher {
        SandboxLauncher {
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
}
