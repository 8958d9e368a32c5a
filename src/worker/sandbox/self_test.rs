//! The sandbox's self-test, run once before the worker takes any job: a shell inside the
//! sandbox reports what it can see and do, and the worker refuses to start when the isolation
//! is not what SECURITY.md item 10 promises.

use std::ffi::OsString;
use std::time::Duration;

use super::launch::script_file;
use super::{SANDBOX_ID, SandboxError, SandboxLauncher};
use crate::worker::run::{self, RunLimits};

impl SandboxLauncher {
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
        let limits = RunLimits {
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
}
