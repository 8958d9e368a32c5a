//! `gpu-triage upload` against the real server: prints category, root-cause line and URL,
//! detects duplicates, and exits non-zero with a clear message on bad tokens, rejected input,
//! an unreachable server and usage errors.

use crate::support::{binary, create_token, database_url, free_port, spawn_server};

#[test]
fn upload_prints_results_and_fails_clearly() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (db, options) = rt.block_on(crate::support::fresh_db());
    let url = database_url(options.get_database().unwrap());
    let ingest = create_token(&url, "ingest", "up-ingest");
    let read = create_token(&url, "read", "up-read");
    let (_server, port) = spawn_server(&url);
    let server = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("train.log");
    std::fs::write(&log, "step 9\nIndexError: Target 10 is out of bounds.\n").unwrap();
    let script = dir.path().join("repro.py");
    std::fs::write(&script, "import torch\n").unwrap();

    let run = |args: &[&str], token: Option<&str>| {
        let mut cmd = binary();
        cmd.arg("upload")
            .args(args)
            .env("GPU_TRIAGE_URL", &server)
            .env_remove("GPU_TRIAGE_TOKEN");
        if let Some(t) = token {
            cmd.env("GPU_TRIAGE_TOKEN", t);
        }
        cmd.output().unwrap()
    };
    let log_s = log.to_str().unwrap();
    let out = run(
        &[
            "--project",
            "vision",
            "--version",
            "2.1.0",
            "--meta",
            "branch=main",
            "--script",
            script.to_str().unwrap(),
            log_s,
        ],
        Some(&ingest),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("out_of_bounds"), "{stdout}");
    assert!(stdout.contains("line 2"), "{stdout}");
    assert!(stdout.contains(&format!("{server}/reports/")), "{stdout}");
    assert!(stdout.contains("reproduction queued"), "{stdout}");

    let again = run(&["--project", "vision", log_s], Some(&ingest));
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stdout).contains("duplicate"));

    let forbidden = run(&[log_s], Some(&read));
    assert_eq!(forbidden.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&forbidden.stderr);
    assert!(
        stderr.contains("the token lacks the ingest scope"),
        "{stderr}"
    );
    let bogus = run(
        &[log_s],
        Some("gtr_0000000000000000000000000000000000000000000000000000000000000000"),
    );
    assert_eq!(bogus.status.code(), Some(1));

    let empty = dir.path().join("empty.log");
    std::fs::write(&empty, "").unwrap();
    let rejected = run(&[empty.to_str().unwrap()], Some(&ingest));
    assert_eq!(rejected.status.code(), Some(1));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&rejected.stdout),
        String::from_utf8_lossy(&rejected.stderr)
    );
    assert!(said.contains("empty"), "{said}");

    assert_eq!(run(&[log_s], None).status.code(), Some(2), "missing token");
    assert_eq!(
        run(&["--meta", "owner=x", log_s], Some(&ingest))
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        run(&["/nonexistent.log"], Some(&ingest)).status.code(),
        Some(2)
    );
    let not_a_version = run(&["--version", "nightly", log_s], Some(&ingest));
    assert_eq!(not_a_version.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&not_a_version.stderr);
    assert!(stderr.contains("\"nightly\" is not a version"), "{stderr}");

    let reports: i64 = rt
        .block_on(sqlx::query_scalar("SELECT count(*) FROM reports").fetch_one(db.pool()))
        .unwrap();
    assert_eq!(reports, 1);
    // `--version` travels as `meta.version` and is stored with the report.
    let version: String = rt
        .block_on(sqlx::query_scalar("SELECT version FROM reports").fetch_one(db.pool()))
        .unwrap();
    assert_eq!(version, "2.1.0");
}

#[test]
fn upload_to_an_unreachable_server_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("a.log");
    std::fs::write(&log, "RuntimeError: CUDA error: out of memory\n").unwrap();
    let port = free_port();
    let out = binary()
        .args([
            "upload",
            "--server",
            &format!("http://127.0.0.1:{port}"),
            "--token",
            "gtr_x",
        ])
        .arg(&log)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!said.is_empty());
}
