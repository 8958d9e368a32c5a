//! End-to-end runs of the real `gpu-triage` binary: the embedded default, restarts (clean and
//! `kill -9`), `DATABASE_URL`, and the message when PostgreSQL is missing.

use std::process::{Child, Stdio};

use crate::support::{binary, database_url, free_port, http_get, shared_tempdir, wait_for_status};

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

fn postgres_running_in(data: &std::path::Path) -> bool {
    std::fs::read_to_string(data.join("pg/postmaster.pid"))
        .ok()
        .and_then(|t| t.lines().next().map(str::to_string))
        .is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
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
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (db, options) = rt.block_on(crate::support::fresh_db());
    rt.block_on(db.close());
    let name = options.get_database().unwrap().to_string();

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
    assert!(!data.exists(), "no embedded cluster was created");
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
