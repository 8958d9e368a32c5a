//! The log store failing: half way through an upload (503 with `Retry-After`, nothing stored,
//! nothing left in the store once swept), hanging (the request times out, 503), unreachable
//! at start (a clear error; `--require-log-store` refuses to start), refusing the credentials
//! (an error naming what failed).

use std::time::Duration;

use axum::http::StatusCode;
use gpu_triage::app::log_objects;
use gpu_triage::auth::Scope;

use super::proxy::{FaultProxy, Mode};
use super::weed::weed;
use super::{agent, log_text, post_upload, prefixes, shared};
use crate::support::{
    KillOnDrop, TestApp, binary, create_token, database_url, free_port, fresh_database_name,
    fresh_db, wait_for_status,
};

async fn stored(app: &TestApp) -> (i64, i64) {
    (
        app.count("reports").await,
        app.count("report_log_chunks").await,
    )
}

#[tokio::test]
async fn a_store_that_goes_down_half_way_through_an_upload_stores_nothing_and_leaves_no_orphan() {
    let Some(weed) = weed("a_store_that_goes_down_half_way") else {
        return;
    };
    let proxy = FaultProxy::start(weed.s3_port);
    let url = weed.fresh_url();
    let through_proxy = shared(weed.objects_at(proxy.port, &url, Duration::from_secs(5)));
    let direct = shared(weed.objects_at(weed.s3_port, &url, Duration::from_secs(5)));
    let (db, _) = fresh_db().await;
    let app = TestApp::on(db.clone().with_log_store(through_proxy));
    let token = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    // Four chunks; the store goes away once 300 kB of them went through.
    let log = log_text("halfway", 52_000, None);
    proxy.cut_after(300_000);
    let res = app
        .upload(&token, &[("log", Some("job.log"), log.as_bytes())], None)
        .await;
    assert_eq!(res.status, StatusCode::SERVICE_UNAVAILABLE, "{}", res.body);
    assert_eq!(res.headers["retry-after"], "5");
    assert_eq!(res.error_code(), "unavailable");
    assert_eq!(stored(&app).await, (0, 0));
    assert_eq!(app.count("log_object_sweeps").await, 1);

    // The store is back: the sweep removes whatever the upload wrote, and the upload, sent
    // again, is stored whole.
    proxy.set(Mode::Pass);
    let sweeping = db.clone().with_log_store(direct.clone());
    assert_eq!(log_objects::sweep_all(&sweeping).await.unwrap(), 1);
    assert!(prefixes(&direct).await.is_empty());
    assert_eq!(app.count("log_object_sweeps").await, 0);
    let res = app
        .upload(&token, &[("log", Some("job.log"), log.as_bytes())], None)
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    assert_eq!(prefixes(&direct).await.len(), 1);
}

#[tokio::test]
async fn a_store_that_hangs_times_out_and_the_upload_answers_503() {
    let Some(weed) = weed("a_store_that_hangs_times_out") else {
        return;
    };
    let proxy = FaultProxy::start(weed.s3_port);
    let url = weed.fresh_url();
    let objects = shared(weed.objects_at(proxy.port, &url, Duration::from_millis(500)));
    let (db, _) = fresh_db().await;
    let app = TestApp::on(db.with_log_store(objects.clone()));
    let token = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    proxy.set(Mode::Stall);
    let log = log_text("hang", 300, None);
    let res = app
        .upload(&token, &[("log", Some("job.log"), log.as_bytes())], None)
        .await;
    assert_eq!(res.status, StatusCode::SERVICE_UNAVAILABLE, "{}", res.body);
    assert!(res.headers.contains_key("retry-after"));
    assert_eq!(stored(&app).await, (0, 0));
    proxy.set(Mode::Pass);
    let res = app
        .upload(&token, &[("log", Some("job.log"), log.as_bytes())], None)
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    assert_eq!(stored(&app).await.0, 1);
}

/// `serve` with `flags` and the store's environment; its exit status and stderr when it exits
/// within `secs`, `None` (killed) when it kept running.
fn serve_briefly(db_url: &str, env: &[(String, String)], flags: &[&str]) -> std::process::Output {
    binary()
        .args(["serve", "--listen", &format!("127.0.0.1:{}", free_port())])
        .args(flags)
        .env("DATABASE_URL", db_url)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .expect("run serve")
}

#[test]
fn a_required_store_that_is_unreachable_or_refuses_the_credentials_stops_the_start() {
    let Some(weed) = weed("a_required_store_that_is_unreachable") else {
        return;
    };
    let db_url = database_url(&fresh_database_name());
    let url = weed.fresh_url();
    let closed = free_port();
    let out = serve_briefly(
        &db_url,
        &weed.env(closed),
        &[
            "--log-store",
            &url,
            "--require-log-store",
            "--log-store-timeout-secs",
            "2",
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&url) && err.contains("unreachable") && err.contains("--require-log-store"),
        "{err}"
    );

    let mut env = weed.env(weed.s3_port);
    for (k, v) in &mut env {
        if k == "AWS_SECRET_ACCESS_KEY" {
            *v = "not-the-secret".into();
        }
    }
    let out = serve_briefly(&db_url, &env, &["--log-store", &url, "--require-log-store"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&url)
            && err.contains("refused the credentials")
            && err.contains("AWS_SECRET_ACCESS_KEY"),
        "{err}"
    );

    let out = serve_briefly(&db_url, &[], &["--log-store", "gs://bucket/x"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("s3://BUCKET/PREFIX"));
}

#[test]
fn a_store_unreachable_at_start_is_reported_and_uploads_answer_503_until_it_is_back() {
    let Some(weed) = weed("a_store_unreachable_at_start") else {
        return;
    };
    let db_url = database_url(&fresh_database_name());
    let token = create_token(&db_url, "ingest,read", "ci");
    let proxy = FaultProxy::start(weed.s3_port);
    proxy.set(Mode::Refuse);
    let port = free_port();
    let url = weed.fresh_url();
    let child = binary()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--log-store", &url, "--log-store-timeout-secs", "2"])
        .env("DATABASE_URL", &db_url)
        .env("GPU_TRIAGE_LOG", "error")
        .envs(weed.env(proxy.port))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut server = KillOnDrop(child);
    assert!(
        wait_for_status(port, "/readyz", 200, 60),
        "serve starts without the store"
    );
    let agent = agent();
    let log = log_text("down-at-start", 100, None);
    let (status, retry, body) =
        post_upload(&agent, port, &token, log.as_bytes(), None, None).unwrap();
    assert_eq!(status, 503, "{body}");
    assert_eq!(retry.as_deref(), Some("5"));
    proxy.set(Mode::Pass);
    let (status, _, body) = post_upload(&agent, port, &token, log.as_bytes(), None, None).unwrap();
    assert_eq!(status, 201, "{body}");
    server.0.kill().unwrap();
    let out = std::mem::replace(
        &mut server.0,
        std::process::Command::new("true").spawn().unwrap(),
    )
    .wait_with_output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the log store failed its check") && err.contains(&url),
        "{err}"
    );
}
