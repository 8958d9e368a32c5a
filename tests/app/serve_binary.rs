//! End-to-end runs of the real `gpu-triage` binary: the embedded default, restarts (clean and
//! `kill -9`), an embedded PostgreSQL killed under `serve`, `DATABASE_URL`, and the message when
//! PostgreSQL is missing.

use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{
    KillOnDrop, binary, database_url, free_port, http_get, http_get_with, shared_tempdir,
    wait_for_status, wait_until,
};

fn spawn_serve(data: &std::path::Path, port: u16) -> Child {
    binary()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("GPU_TRIAGE_DATA", data)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn serve")
}

fn migrate_instance(data: &std::path::Path) -> String {
    let out = binary()
        .arg("migrate")
        .env("GPU_TRIAGE_DATA", data)
        .output()
        .expect("run migrate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    text.trim().rsplit(' ').next().unwrap().to_string()
}

/// The postmaster's pid, from the first line of `postmaster.pid`, when the file is there.
fn postmaster_pid(data: &std::path::Path) -> Option<String> {
    std::fs::read_to_string(data.join("pg/postmaster.pid"))
        .ok()
        .and_then(|t| t.lines().next().map(str::to_string))
}

fn postgres_running_in(data: &std::path::Path) -> bool {
    postmaster_pid(data).is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
}

/// Everything `child` writes to stderr, collected by a thread as it comes (so the pipe never
/// fills and a test can wait for a line while the process runs).
fn collect_stderr(child: &mut Child) -> Arc<Mutex<String>> {
    use std::io::BufRead;
    let log = Arc::new(Mutex::new(String::new()));
    let stderr = child.stderr.take().expect("stderr piped");
    let sink = log.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let mut log = sink.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
    log
}

/// Issue 16 item 9: a PostgreSQL that dies under `serve` (here the postmaster gets SIGKILL) is
/// restarted by `serve` on the same data, with a log line saying so, and the server is ready
/// again without a restart of its own; a SIGTERM afterwards still stops the cluster cleanly,
/// without being taken for another crash.
#[test]
fn serve_restarts_an_embedded_postgresql_that_was_killed_and_keeps_its_data() {
    let dir = shared_tempdir();
    let data = dir.path().join("data");
    let port = free_port();
    let mut child = binary()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("GPU_TRIAGE_DATA", &data)
        .env("GPU_TRIAGE_LOG", "info,sqlx=warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let log = collect_stderr(&mut child);
    let mut server = KillOnDrop(child);
    assert!(wait_for_status(port, "/readyz", 200, 60), "serve ready");

    // Data written before the kill: a report, uploaded with the first admin token.
    let token_file = data.join("initial-admin-token");
    wait_until(Duration::from_secs(30), "the first admin token", || {
        token_file.exists()
    });
    let token = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_owned();
    let bearer = format!("Bearer {token}");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut res = agent
        .post(format!("http://127.0.0.1:{port}/api/v1/reports"))
        .header("Authorization", &bearer)
        .header("Content-Type", "multipart/form-data; boundary=b")
        .send(
            &crate::security::multipart_log(
                "b",
                b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n",
            )[..],
        )
        .unwrap();
    let body = res.body_mut().read_to_string().unwrap();
    assert_eq!(res.status().as_u16(), 201, "{body}");
    let created: serde_json::Value = serde_json::from_str(&body).unwrap();
    let report = format!("/api/v1/reports/{}", created["id"].as_i64().unwrap());

    let killed = postmaster_pid(&data).expect("postmaster.pid while ready");
    let status = std::process::Command::new("kill")
        .args(["-KILL", &killed])
        .status()
        .unwrap();
    assert!(status.success(), "kill -KILL {killed}");
    // (`/readyz` may not show the short outage: a request waits up to the pool's acquire
    // timeout for a connection, and the restart can come within it.)
    wait_until(Duration::from_secs(90), "a new postmaster", || {
        postmaster_pid(&data).is_some_and(|pid| pid != killed)
    });
    wait_until(
        Duration::from_secs(90),
        "/readyz 200 after the restart",
        || http_get(port, "/readyz").is_some_and(|(s, _)| s == 200),
    );
    let read = http_get_with(port, &report, &[("authorization", &bearer)]);
    assert_eq!(
        read.as_ref().map(|(s, _)| *s),
        Some(200),
        "the report uploaded before the kill: {read:?}"
    );
    assert!(read.unwrap().1.contains("out_of_memory"));
    wait_until(Duration::from_secs(10), "the restart in the log", || {
        log.lock()
            .unwrap()
            .contains("embedded PostgreSQL restarted and ready")
    });
    {
        let log = log.lock().unwrap();
        assert!(
            log.contains("embedded PostgreSQL exited (killed by signal 9); restarting it"),
            "{log}"
        );
    }

    std::process::Command::new("kill")
        .args(["-TERM", &server.0.id().to_string()])
        .status()
        .unwrap();
    assert!(server.0.wait().unwrap().success(), "clean exit on SIGTERM");
    assert!(
        !postgres_running_in(&data),
        "the restarted cluster stopped with the server"
    );
    let log = log.lock().unwrap();
    assert_eq!(
        log.matches("embedded PostgreSQL exited").count(),
        1,
        "the clean stop was not taken for a crash: {log}"
    );
}

#[test]
fn serve_on_the_embedded_default_keeps_data_across_sigterm_and_kill_9() {
    let dir = shared_tempdir();
    let data = dir.path().join("data");
    let instance = migrate_instance(&data);
    assert_eq!(instance.len(), 36, "a uuid: {instance}");
    assert!(
        !postgres_running_in(&data),
        "migrate stops the cluster it started"
    );

    let port = free_port();
    let mut server = spawn_serve(&data, port);
    assert!(
        wait_for_status(port, "/readyz", 200, 60),
        "serve became ready"
    );
    let (status, body) = http_get(port, "/").unwrap();
    assert_eq!(status, 200);
    assert!(body.contains("gpu-triage"));

    // While serve runs, another command shares its cluster instead of starting a second one.
    assert_eq!(migrate_instance(&data), instance);
    assert_eq!(
        http_get(port, "/readyz").unwrap().0,
        200,
        "serve still ready"
    );

    std::process::Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(server.wait().unwrap().success(), "clean exit on SIGTERM");
    assert!(
        !postgres_running_in(&data),
        "cluster stopped with the server"
    );

    let port = free_port();
    let mut server = spawn_serve(&data, port);
    assert!(
        wait_for_status(port, "/readyz", 200, 60),
        "second start ready"
    );
    server.kill().unwrap(); // SIGKILL: no chance to clean up
    server.wait().unwrap();

    // The next start recovers the cluster the killed run left and finds the same data.
    assert_eq!(migrate_instance(&data), instance);
}

#[test]
fn serve_uses_database_url_when_set_and_creates_no_cluster() {
    let name = crate::support::fresh_database_name();

    let dir = shared_tempdir();
    let data = dir.path().join("unused");
    let port = free_port();
    let mut server = binary()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("DATABASE_URL", database_url(&name))
        .env("GPU_TRIAGE_DATA", &data)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ready = wait_for_status(port, "/readyz", 200, 60);
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(ready, "ready on DATABASE_URL");
    assert!(!data.join("pg").exists(), "no embedded cluster was created");
}

/// Run as root under a umask of 077 (common for root shells and service managers), the
/// embedded default still starts: the data root it creates must stay reachable by the
/// `postgres` user the cluster runs as (seen on a GPU host, where `serve` refused to start).
/// Not as root, the cluster runs as this user and the same call must succeed as well.
#[test]
fn the_embedded_default_starts_under_a_strict_umask() {
    let dir = shared_tempdir();
    let data = dir.path().join("made/here");
    let template = binary();
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.args(["-c", "umask 077 && exec \"$0\" migrate"])
        .arg(template.get_program());
    for (key, value) in template.get_envs() {
        match value {
            Some(value) => cmd.env(key, value),
            None => cmd.env_remove(key),
        };
    }
    let out = cmd.env("GPU_TRIAGE_DATA", &data).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        data.join("pg/PG_VERSION").is_file(),
        "the cluster was created"
    );
}

/// Issue 16 item 9: the first admin token never reaches the service log. Without a terminal it
/// is written once to a 0600 file in the data directory, and the log names only that file.
#[test]
fn the_first_admin_token_goes_to_a_private_file_not_to_the_log() {
    use std::os::unix::fs::PermissionsExt;
    let name = crate::support::fresh_database_name();
    let dir = shared_tempdir();
    let data = dir.path().join("data");
    let port = free_port();
    let server = binary()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("DATABASE_URL", database_url(&name))
        .env("GPU_TRIAGE_DATA", &data)
        .env("GPU_TRIAGE_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ready = wait_for_status(port, "/readyz", 200, 60);
    let file = data.join("initial-admin-token");
    // The token is created once migrations are applied: poll for the file until a deadline.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !file.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let token = std::fs::read_to_string(&file).map(|t| t.trim().to_owned());
    let authorized = token.as_ref().ok().and_then(|t| {
        let bearer = format!("Bearer {t}");
        crate::support::http_get_with(port, "/api/v1/rules", &[("authorization", &bearer)])
    });
    let mut server = server;
    let _ = server.kill();
    let output = server.wait_with_output().unwrap();
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(ready, "ready");
    let token = token.expect("the token file was written");
    assert!(token.starts_with("gtr_"), "{token}");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(authorized.map(|(status, _)| status), Some(200));
    assert!(!out.contains(&token), "the token reached the log");
    assert!(
        out.contains("initial-admin-token"),
        "the log names the file: {out}"
    );
}

#[test]
fn missing_postgresql_binaries_give_one_clear_error() {
    let dir = shared_tempdir();
    let out = binary()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("GPU_TRIAGE_DATA", dir.path())
        .env("GPU_TRIAGE_PG_BINDIR", "/nonexistent/pg/bin")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("apt-get install postgresql"), "{stderr}");
    assert!(stderr.contains("DATABASE_URL"), "{stderr}");
    assert!(stderr.contains("/nonexistent/pg/bin"), "{stderr}");
}

/// Issue 16 item 6 (SECURITY.md item 12): a client that never finishes its headers, or opens a
/// connection and sends nothing, is disconnected after the header-read timeout, while other
/// clients are served.
#[test]
fn half_open_connections_are_closed_after_the_header_read_timeout() {
    use std::io::{Read, Write};
    let name = crate::support::fresh_database_name();
    let port = free_port();
    let server = binary()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--header-read-timeout-secs", "1"])
        .env("DATABASE_URL", database_url(&name))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _server = crate::support::KillOnDrop(server);
    assert!(wait_for_status(port, "/readyz", 200, 60), "ready");
    let open = |bytes: &[u8]| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(bytes).unwrap();
        // Long enough that only the server's timeout, not this one, can end the read.
        s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        s
    };
    let mut partial = open(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n");
    let mut silent = open(b"");
    // Meanwhile another client is served.
    assert_eq!(
        crate::support::http_get(port, "/healthz").map(|(s, _)| s),
        Some(200)
    );
    for (what, stream) in [("partial headers", &mut partial), ("no bytes", &mut silent)] {
        let started = std::time::Instant::now();
        let mut buf = Vec::new();
        let read = stream.read_to_end(&mut buf);
        // Closed by the server (EOF: hyper read all we sent, so no reset), not by our read
        // timeout.
        assert!(
            read.is_ok(),
            "{what}: {read:?} after {:?}",
            started.elapsed()
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(15),
            "{what}: closed only after {:?}",
            started.elapsed()
        );
        let text = String::from_utf8_lossy(&buf);
        // hyper answers only malformed heads; on its header-read timeout it closes without a
        // word, half a request or none.
        assert_eq!(text, "", "{what}");
    }
}

/// Issue 16 item 1 (SECURITY.md item 12): an upload whose body stalls gets 408 after one body
/// window and gives its slot back; other requests are served meanwhile.
#[test]
fn a_stalled_upload_body_gets_408_after_one_window() {
    use std::io::{Read, Write};
    let url = database_url(&crate::support::fresh_database_name());
    let token = crate::support::create_token(&url, "ingest", "ci");
    let port = free_port();
    let server = binary()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--body-window-secs", "1", "--body-min-rate", "1024"])
        .env("DATABASE_URL", &url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _server = crate::support::KillOnDrop(server);
    assert!(wait_for_status(port, "/readyz", 200, 60), "ready");
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let boundary = "slow-boundary";
    let start = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"log\"; filename=\"a.log\"\r\n\r\nRuntimeError: CUDA error: out of memory\n"
    );
    write!(
        stream,
        "POST /api/v1/reports HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: 100000\r\n\r\n{start}"
    )
    .unwrap();
    // The body now stalls; another client is served meanwhile.
    assert_eq!(
        crate::support::http_get(port, "/healthz").map(|(s, _)| s),
        Some(200)
    );
    let started = std::time::Instant::now();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&answer).contains("body_too_slow") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("body_too_slow"), "{answer}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}
