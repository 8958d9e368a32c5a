//! Starting a script in the sandbox and telling afterwards who ended the run: the command with
//! its start marker (or its memory-cgroup gate), how the interpreter starts the script (as is,
//! or under CPU translation), and the reading of a finished run's stderr that tells a sandbox
//! that failed to start the script from a script that failed.

use std::ffi::OsString;
use std::fs::File;
use std::io::{Seek, Write};
use std::process::{Command, Stdio};

use super::{SandboxError, SandboxLauncher};
use crate::worker::run;

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

impl SandboxLauncher {
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
}

/// `$0` of the shell that starts the interpreter: dash prefixes its own errors with it.
const SH_NAME: &str = "gpu-triage-sandbox";

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
const CPU_TRANSLATION: &str = include_str!("../cpu_translation.py");

impl Launch {
    fn interpreter_args(self) -> Vec<OsString> {
        match self {
            Launch::Script => Vec::new(),
            Launch::CpuTranslation => vec!["-c".into(), CPU_TRANSLATION.into()],
        }
    }
}

/// Run by `/bin/sh -c` inside the sandbox with `$1` the marker, then the interpreter and the
/// script: a missing interpreter exits 1 before the marker, like bubblewrap's own failures.
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
pub(super) fn script_file(text: &str) -> std::io::Result<File> {
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
