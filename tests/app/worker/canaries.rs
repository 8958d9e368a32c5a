//! Sandbox canaries: scripts that try to reach the network, a host unix socket, the worker's
//! token, a host directory, or to exhaust processes, output and time. Each runs through the
//! worker's real bubblewrap sandbox and must be stopped or fail inside.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::*;

/// A directory outside `/tmp` (in the build tree) that anyone may enter and write: only the
/// sandbox's mount namespace can keep a script out of it.
fn open_host_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", unique()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// Runs one Python canary through the real sandbox; its result.
fn canary(name: &str, script: &str) -> Value {
    let server = JobServer::start(vec![job(20, name, script, 60)]);
    let out = run_worker(&server, &["--no-gpu", "--python", "/usr/bin/python3"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let result = server.only_result(20);
    eprintln!(
        "canary {name}: {}",
        result["stdout"].as_str().unwrap_or_default()
    );
    assert_eq!(result["sandbox"], "bwrap");
    assert_eq!(result["exit_code"], 0, "{result}");
    result
}

/// The lines of a canary's stdout that start with `prefix`.
fn lines_with(result: &Value, prefix: &str) -> Vec<String> {
    let stdout = result["stdout"].as_str().unwrap_or_default();
    stdout
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

#[test]
fn sandboxed_scripts_reach_no_network_socket_token_or_host_file() {
    if !have_bwrap() || !have_python() {
        return;
    }
    // Network: a listener on the host's loopback and an outside address.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let net = canary(
        "net.py",
        &format!(
            r#"import socket
for host, port in [("127.0.0.1", {port}), ("1.1.1.1", 53)]:
    try:
        socket.create_connection((host, port), timeout=3).close()
        print(f"CONNECTED {{host}}:{{port}}")
    except OSError as e:
        print(f"blocked {{host}}:{{port}}: {{e}}")
"#
        ),
    );
    assert_eq!(lines_with(&net, "blocked").len(), 2, "{net}");
    assert!(lines_with(&net, "CONNECTED").is_empty(), "{net}");
    assert!(
        listener.accept().is_err(),
        "the loopback listener got a connection"
    );

    // A database-style unix socket outside /tmp, connectable from the host.
    let sock_dir = open_host_dir("pgsock");
    let sock_path = sock_dir.join(".s.PGSQL.5432");
    let unix = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
    std::fs::set_permissions(&sock_path, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::os::unix::net::UnixStream::connect(&sock_path).expect("the host can connect");
    unix.accept().unwrap();
    unix.set_nonblocking(true).unwrap();
    let system_socket = "/var/run/postgresql/.s.PGSQL.5432";
    if !Path::new(system_socket).exists() {
        eprintln!("NOTE: {system_socket} does not exist on this host; the canary still tries it");
    }
    let sock = canary(
        "sock.py",
        &format!(
            r#"import socket
for path in [{:?}, {system_socket:?}]:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        print(f"CONNECTED {{path}}")
    except OSError as e:
        print(f"blocked {{path}}: {{e}}")
"#,
            sock_path.to_str().unwrap()
        ),
    );
    assert_eq!(lines_with(&sock, "blocked").len(), 2, "{sock}");
    assert!(
        unix.accept().is_err(),
        "the unix socket got a connection from the sandbox"
    );

    // The worker's token: a world-readable file outside /tmp, one inside the host's /tmp, and
    // the worker's own environment (GPU_TRIAGE_TOKEN) and command line.
    let token_dir = open_host_dir("token");
    let token_file = token_dir.join("worker-token");
    std::fs::write(&token_file, TOKEN).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let tmp = crate::support::shared_tempdir();
    let tmp_token = tmp.path().join("worker-token");
    std::fs::write(&tmp_token, TOKEN).unwrap();
    std::fs::set_permissions(&tmp_token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let secrets = canary(
        "token.py",
        &format!(
            r#"import os
for path in [{:?}, {:?}]:
    try:
        print(f"READ {{path}}: {{open(path).read()!r}}")
    except OSError as e:
        print(f"blocked {{path}}: {{e}}")
seen = b""
for pid in filter(str.isdigit, os.listdir("/proc")):
    for part in ("environ", "cmdline"):
        try:
            seen += open(f"/proc/{{pid}}/{{part}}", "rb").read()
        except OSError:
            pass
print("processes:", seen)
print("environ:", dict(os.environ))
"#,
            token_file.to_str().unwrap(),
            tmp_token.to_str().unwrap()
        ),
    );
    assert_eq!(lines_with(&secrets, "blocked").len(), 2, "{secrets}");
    let stdout = secrets["stdout"].as_str().unwrap();
    assert!(
        !stdout.contains(TOKEN) && !stdout.contains("READ"),
        "{stdout}"
    );
    assert!(stdout.contains("'CUDA_LAUNCH_BLOCKING': '1'"), "{stdout}");

    // Writes anywhere but /tmp fail, including a world-writable host directory; the write to
    // /tmp stays in the sandbox's own /tmp (a name no one else uses, so the host's /tmp has no
    // such file unless the write leaked).
    let host_dir = open_host_dir("writable");
    let tmp_file = format!("/tmp/gpu-triage-canary-{}", unique());
    let writes = canary(
        "write.py",
        &format!(
            r#"for path in ["/usr/canary", "/etc/canary", "/canary", "/var/canary", {:?}, {tmp_file:?}]:
    try:
        open(path, "w").write("x")
        print(f"WROTE {{path}}")
    except OSError as e:
        print(f"blocked {{path}}: {{e}}")
"#,
            host_dir.join("canary").to_str().unwrap()
        ),
    );
    assert_eq!(
        lines_with(&writes, "WROTE"),
        vec![format!("WROTE {tmp_file}")],
        "{writes}"
    );
    assert_eq!(lines_with(&writes, "blocked").len(), 5, "{writes}");
    assert!(!host_dir.join("canary").exists());
    assert!(
        !Path::new(&tmp_file).exists(),
        "the sandbox's write reached the host: {tmp_file}"
    );
}

/// Runs a shell-script job through the real sandbox with `args`; the worker's stderr and the
/// result.
fn shell_job(name: &str, script: &str, timeout_secs: u64, args: &[&str]) -> (String, Value) {
    let server = JobServer::start(vec![job(30, name, script, timeout_secs)]);
    let mut all = vec!["--no-gpu", "--python", "/bin/sh"];
    all.extend_from_slice(args);
    let out = run_worker(&server, &all, &[]);
    let log = text(&out.stderr);
    assert!(out.status.success(), "{log}");
    let result = server.only_result(30);
    let stderr = result["stderr"].as_str().unwrap_or_default();
    eprintln!("{name}: worker log:\n{log}\nscript stderr: {stderr:.300}");
    (log, result)
}

#[test]
fn a_fork_bomb_is_contained_and_killed_with_every_process() {
    if !have_bwrap() {
        return;
    }
    let name = format!("bomb-{}.sh", unique());
    // The script's own shell forks once, before the bomb exists, then becomes `sleep`: were it
    // to fork again (the pipeline's second half, `sleep`) once the bomb had taken every process
    // slot, it would fail and exit on its own before the timeout (seen once in CI).
    let (_, result) = shell_job(
        &name,
        "bomb() { bomb | bomb & }; bomb & exec sleep 30",
        4,
        &["--max-procs", "64"],
    );
    assert_eq!(result["timed_out"], true, "{result}");
    assert_eq!(
        (&result["exit_code"], &result["signal"]),
        (&Value::Null, &json!(9))
    );
    let stderr = result["stderr"].as_str().unwrap_or_default();
    if which("prlimit") {
        assert!(
            stderr.to_lowercase().contains("fork"),
            "no fork failure: {stderr:.400}"
        );
    } else {
        eprintln!("NOTE: prlimit is missing; the fork bomb was stopped by the timeout alone");
    }
    assert_eq!(processes_with(&name), Vec::<String>::new());
}

fn which(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn a_gigabyte_of_output_is_capped_and_the_worker_stays_small() {
    if !have_bwrap() {
        return;
    }
    let script = "head -c 1073741824 /dev/zero | tr '\\0' x; echo done >&2";
    let (log, result) = shell_job("flood.sh", script, 300, &[]);
    let stdout = result["stdout"].as_str().unwrap();
    assert_eq!(stdout.len(), 1 << 20);
    assert!(stdout.bytes().all(|b| b == b'x'));
    assert_eq!(
        (&result["truncated"], &result["exit_code"]),
        (&json!(true), &json!(0))
    );
    assert_eq!(result["stderr"], "done\n");
    let peak_mib: u64 = log
        .split("worker peak RSS ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("the job line reports the worker's peak RSS");
    assert!(peak_mib < 100, "worker peak RSS {peak_mib} MiB");
}

#[test]
fn a_script_that_sleeps_forever_is_killed_at_the_timeout_with_its_children() {
    if !have_bwrap() {
        return;
    }
    let marker = format!("3600.{}", unique());
    let script = format!("sleep {marker} & (sleep {marker}; echo late) & exec sleep {marker}");
    let (_, result) = shell_job("sleeper.sh", &script, 2, &[]);
    assert_eq!(result["timed_out"], true);
    assert_eq!(
        (&result["exit_code"], &result["signal"]),
        (&Value::Null, &json!(9))
    );
    assert_eq!(processes_with(&marker), Vec::<String>::new());
}

#[test]
fn a_script_cannot_pass_its_own_failure_off_as_the_sandboxs() {
    if !have_bwrap() || !have_python() {
        return;
    }
    let script = "import sys\n\
                  sys.stderr.write('bwrap: execvp python3: No such file or directory\\n')\n\
                  sys.exit(1)\n";
    let server = JobServer::start(vec![job(21, "forge.py", script, 60)]);
    let out = run_worker(&server, &["--no-gpu", "--python", "/usr/bin/python3"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let result = server.only_result(21);
    assert_eq!(result["sandbox"], "bwrap");
    assert_eq!(result["exit_code"], 1, "{result}");
    assert!(
        result["error"].is_null(),
        "a script's exit, not a worker error: {result}"
    );
    assert_eq!(
        result["stderr"], "bwrap: execvp python3: No such file or directory\n",
        "the sandbox's start marker is not part of the script's output"
    );
}

#[test]
fn a_run_over_its_memory_limit_is_killed_and_says_so() {
    if !have_bwrap() || !have_python() {
        return;
    }
    if let Err(why) = gpu_triage::worker::cgroup::detect() {
        // Where the worker cannot create memory cgroups it runs without a limit (and logs so).
        eprintln!("SKIPPED a_run_over_its_memory_limit_is_killed_and_says_so: {why}");
        return;
    }
    let script = "import sys\n\
                  print('allocating', flush=True)\n\
                  blob = b'x' * (512 << 20)\n\
                  print('survived', len(blob))\n";
    let server = JobServer::start(vec![job(22, "hog.py", script, 60)]);
    let out = run_worker(
        &server,
        &[
            "--no-gpu",
            "--python",
            "/usr/bin/python3",
            "--memory-max",
            "128",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("runs are limited to 128 MiB of memory"),
        "{}",
        text(&out.stderr)
    );
    let result = server.only_result(22);
    let stdout = result["stdout"].as_str().unwrap_or_default();
    assert!(stdout.contains("allocating"), "{result}");
    assert!(!stdout.contains("survived"), "{result}");
    assert_ne!(result["exit_code"], 0, "{result}");
    assert!(result["error"].is_null(), "the script's outcome: {result}");
    let stderr = result["stderr"].as_str().unwrap_or_default();
    assert!(
        stderr.contains("killed at its memory limit (128 MiB"),
        "{result}"
    );
}
