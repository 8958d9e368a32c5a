//! Runs one prepared command to completion, a wall-clock timeout or cancellation, whichever
//! comes first, and captures its output within fixed caps. Untrusted scripts can print without
//! end, fork, ignore signals and hold pipes open: the command is its own process group, killed
//! as a whole with SIGKILL, and both pipes are read concurrently (neither can block the other),
//! keeping the first `cap` bytes and draining the rest into nothing, so worker memory stays
//! bounded whatever the script does.

use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// How often the child's state and the cancel flag are checked.
const POLL: Duration = Duration::from_millis(50);
/// How long the readers may take to finish after the child is gone (a grandchild that escaped
/// the kill may still hold a pipe; its output is then abandoned).
const READER_GRACE: Duration = Duration::from_secs(2);

/// Limits of one run.
#[derive(Debug, Clone, Copy)]
pub struct RunLimits {
    /// Wall-clock limit.
    pub timeout: Duration,
    /// Bytes kept of stdout and of stderr, each.
    pub output_cap: usize,
    /// Bytes of stderr kept beyond the cap, for what the sandbox itself prints first (its start
    /// marker), so the script keeps its whole allowance.
    pub stderr_extra: usize,
}

/// One captured stream.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CapturedStream {
    /// The text (lossy UTF-8), at most the cap in bytes.
    pub text: String,
    /// Whether anything was cut.
    pub truncated: bool,
}

/// What happens between spawn and the script starting, for a command that waits on its stdin
/// for a first line (the sandbox's gate): the child enters its memory cgroup, then gets the line
/// and the script after it.
#[derive(Debug)]
pub struct Gate {
    /// The run's cgroup (removed, with anything left in it, when the run is over).
    pub cgroup: super::cgroup::RunCgroup,
    /// What follows the gate line on stdin.
    pub script: Vec<u8>,
}

/// How a run ended.
#[derive(Debug)]
pub struct RunOutput {
    /// The exit status (`None` when it could not be waited for).
    pub status: Option<ExitStatus>,
    /// Killed at the wall-clock limit.
    pub timed_out: bool,
    /// Killed because `cancel` was set.
    pub cancelled: bool,
    /// Wall time from spawn to exit.
    pub duration: Duration,
    /// Captured stdout.
    pub stdout: CapturedStream,
    /// Captured stderr.
    pub stderr: CapturedStream,
    /// The memory limit it was killed at (bytes), when its cgroup saw an OOM kill.
    pub oom_limit: Option<u64>,
}

/// Spawns `cmd` (stdout and stderr piped, its own process group) and waits for it. `cancel`
/// returning true kills it early (lease lost, worker stopping). With a `gate`, the child is
/// moved into the gate's cgroup before it is let go. Spawn failures are returned as errors.
pub fn run(
    mut cmd: Command,
    limits: RunLimits,
    cancel: &dyn Fn() -> bool,
    gate: Option<Gate>,
) -> std::io::Result<RunOutput> {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if gate.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let started = Instant::now();
    let mut child = cmd.spawn()?;
    let cgroup = match gate {
        Some(Gate { cgroup, script }) => {
            if let Err(e) = cgroup.enter(child.id()) {
                kill_group(&mut child);
                let _ = child.wait();
                return Err(std::io::Error::other(format!(
                    "cannot move the run into its memory cgroup: {e}"
                )));
            }
            if let Some(mut stdin) = child.stdin.take() {
                // A thread: a script larger than the pipe is read while it is written. A run
                // that stops reading (it failed) only ends the write.
                thread::spawn(move || {
                    let _ = stdin
                        .write_all(b"go\n")
                        .and_then(|()| stdin.write_all(&script));
                });
            }
            Some(cgroup)
        }
        None => None,
    };
    let stdout = child.stdout.take().map(|s| capture(s, limits.output_cap));
    let stderr = child
        .stderr
        .take()
        .map(|s| capture(s, limits.output_cap.saturating_add(limits.stderr_extra)));
    let deadline = started + limits.timeout;
    let (mut timed_out, mut cancelled) = (false, false);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!("cannot wait for the script: {e}");
                kill_group(&mut child);
                break child.wait().ok();
            }
        }
        if cancel() {
            cancelled = true;
        } else if Instant::now() >= deadline {
            timed_out = true;
        }
        if timed_out || cancelled {
            kill_group(&mut child);
            break child.wait().ok();
        }
        thread::sleep(POLL);
    };
    let duration = started.elapsed();
    // The group may have members left when the leader exited on its own.
    kill_group(&mut child);
    let collect = |rx: Option<mpsc::Receiver<CapturedStream>>| {
        let grace = Instant::now() + READER_GRACE;
        rx.and_then(|rx| {
            rx.recv_timeout(grace.saturating_duration_since(Instant::now()))
                .ok()
        })
        .unwrap_or_default()
    };
    Ok(RunOutput {
        status,
        timed_out,
        cancelled,
        duration,
        stdout: collect(stdout),
        stderr: collect(stderr),
        oom_limit: cgroup
            .as_ref()
            .filter(|c| c.oom_killed())
            .map(|c| c.limit()),
    })
}

/// SIGKILL to the child's whole process group (it leads it), then to the child itself.
fn kill_group(child: &mut Child) {
    let pid = i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw);
    if let Some(pid) = pid {
        // ESRCH (all gone already) is the normal case after a clean exit.
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.kill();
}

/// Reads `stream` to its end on a thread, keeping the first `cap` bytes.
fn capture(mut stream: impl Read + Send + 'static, cap: usize) -> mpsc::Receiver<CapturedStream> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut kept = Vec::with_capacity(cap.min(64 * 1024));
        let mut buf = vec![0u8; 64 * 1024];
        let mut truncated = false;
        loop {
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let room = cap.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                    truncated |= n > room;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = tx.send(to_text(&kept, cap, truncated));
    });
    rx
}

/// Lossy UTF-8 of at most `cap` bytes: replacement characters can make the text longer than
/// the bytes, so it is cut again at a character boundary.
fn to_text(bytes: &[u8], cap: usize, truncated: bool) -> CapturedStream {
    let mut text = String::from_utf8_lossy(bytes).into_owned();
    let mut truncated = truncated;
    if text.len() > cap {
        let cut = text.floor_char_boundary(cap);
        text.truncate(cut);
        truncated = true;
    }
    CapturedStream { text, truncated }
}

/// Exit code and signal of a status, for the result. `sandboxed`: bubblewrap reports a child
/// killed by signal N as exit status 128 + N, which is read back as that signal.
pub fn code_and_signal(status: Option<ExitStatus>, sandboxed: bool) -> (Option<i32>, Option<i32>) {
    let Some(status) = status else {
        return (None, None);
    };
    match (status.code(), status.signal()) {
        (_, Some(signal)) => (None, Some(signal)),
        (Some(code), None) if sandboxed && (129..=128 + 64).contains(&code) => {
            (None, Some(code - 128))
        }
        (code, None) => (code, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", script]);
        cmd
    }

    fn limits(secs: u64, cap: usize) -> RunLimits {
        RunLimits {
            timeout: Duration::from_secs(secs),
            output_cap: cap,
            stderr_extra: 0,
        }
    }

    #[test]
    fn output_is_captured_and_capped_with_a_truncated_flag() -> std::io::Result<()> {
        let out = run(
            sh("printf 0123456789; printf abc >&2; exit 3"),
            limits(30, 4),
            &|| false,
            None,
        )?;
        assert_eq!(code_and_signal(out.status, false), (Some(3), None));
        assert_eq!(
            (out.stdout.text.as_str(), out.stdout.truncated),
            ("0123", true)
        );
        assert_eq!(
            (out.stderr.text.as_str(), out.stderr.truncated),
            ("abc", false)
        );
        assert!(!out.timed_out && !out.cancelled);
        Ok(())
    }

    #[test]
    fn a_script_past_its_timeout_is_killed_with_its_background_children() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let marker = dir.path().join("survivor");
        let script = format!("(sleep 3; touch {}) & sleep 600", marker.display());
        let out = run(sh(&script), limits(1, 1024), &|| false, None)?;
        assert!(out.timed_out);
        assert_eq!(code_and_signal(out.status, false), (None, Some(9)));
        thread::sleep(Duration::from_secs(4));
        assert!(!marker.exists(), "a background child survived the kill");
        Ok(())
    }

    #[test]
    fn cancelling_kills_the_run() -> std::io::Result<()> {
        let out = run(sh("sleep 600"), limits(600, 1024), &|| true, None)?;
        assert!(out.cancelled && !out.timed_out);
        Ok(())
    }

    #[test]
    fn invalid_utf8_never_exceeds_the_cap_after_replacement() {
        let bytes = vec![0xffu8; 10];
        let got = to_text(&bytes, 10, false);
        assert!(got.text.len() <= 10 && got.truncated, "{got:?}");
        assert_eq!(to_text("héllo".as_bytes(), 2, false).text, "h");
    }

    #[test]
    fn sandbox_exit_statuses_above_128_are_read_as_signals() {
        let status = |code: i32| Some(ExitStatus::from_raw(code << 8));
        assert_eq!(code_and_signal(status(137), true), (None, Some(9)));
        assert_eq!(code_and_signal(status(137), false), (Some(137), None));
        assert_eq!(code_and_signal(status(1), true), (Some(1), None));
        assert_eq!(
            code_and_signal(Some(ExitStatus::from_raw(9)), false),
            (None, Some(9))
        );
        assert_eq!(code_and_signal(None, true), (None, None));
    }
}
