//! `/healthz`, `/readyz`, the home page and the security headers, in-process.

use axum::http::{StatusCode, header};
use gpu_triage::storage::{self, Db};

use crate::support::{TestApp, own_cluster, shared_tempdir};

#[tokio::test]
async fn healthz_and_readyz_answer_on_a_migrated_database() {
    let app = TestApp::spawn().await;
    let live = app.get("/healthz").await;
    assert_eq!(live.status, StatusCode::OK);
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status, StatusCode::OK, "{}", ready.body);
}

#[tokio::test]
async fn readyz_is_503_before_migrations_ran() {
    let (_, options) = crate::support::fresh_db().await;
    let app = TestApp::on(Db::connect_lazy(options, 2));
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(app.get("/healthz").await.status, StatusCode::OK);
}

#[tokio::test]
async fn home_page_renders_with_stylesheet_and_security_headers() {
    let app = TestApp::spawn().await;
    let home = app.get("/").await;
    assert_eq!(home.status, StatusCode::OK);
    assert!(
        home.body
            .contains("<link rel=\"stylesheet\" href=\"/static/app.css\">")
    );
    assert!(home.body.contains("CUDA_LAUNCH_BLOCKING=1"));
    let csp = home.headers[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap();
    assert!(csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"));
    assert_eq!(home.headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");

    let css = app.get("/static/app.css").await;
    assert_eq!(css.status, StatusCode::OK);
    assert!(
        css.headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/css")
    );
    assert!(css.body.contains("--accent"));
}

#[tokio::test]
async fn unknown_paths_get_a_404_page() {
    let app = TestApp::spawn().await;
    let res = app.get("/no/such/page").await;
    assert_eq!(res.status, StatusCode::NOT_FOUND);
    assert!(res.body.contains("Not found"));
}

#[tokio::test]
async fn readyz_turns_503_with_retry_after_when_the_database_goes_away() {
    let dir = shared_tempdir();
    let cluster = own_cluster(dir.path());
    storage::create_database(&cluster.connect_options("postgres"), "gpu_triage")
        .await
        .unwrap();
    let db = Db::connect_lazy(cluster.connect_options("gpu_triage"), 2);
    db.migrate().await.unwrap();
    let app = TestApp::on(db.clone());
    assert_eq!(app.get("/readyz").await.status, StatusCode::OK);

    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .unwrap()
        .unwrap();
    let res = app.get("/readyz").await;
    assert_eq!(res.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(res.headers.contains_key(header::RETRY_AFTER));
    let body: serde_json::Value = serde_json::from_str(&res.body).unwrap();
    assert_eq!(body["error"]["code"], "unavailable");
    assert_eq!(app.get("/healthz").await.status, StatusCode::OK);
}

#[tokio::test]
async fn data_written_before_a_cluster_restart_is_read_after_it() {
    let dir = shared_tempdir();
    let first = {
        let cluster = own_cluster(dir.path());
        storage::create_database(&cluster.connect_options("postgres"), "gpu_triage")
            .await
            .unwrap();
        let db = Db::connect_lazy(cluster.connect_options("gpu_triage"), 2);
        db.migrate().await.unwrap();
        let instance = storage::instance(&db).await.unwrap();
        db.close().await;
        tokio::task::spawn_blocking(move || cluster.stop())
            .await
            .unwrap()
            .unwrap();
        instance
    };
    let cluster = own_cluster(dir.path());
    assert!(cluster.is_owner());
    let db = Db::connect_lazy(cluster.connect_options("gpu_triage"), 2);
    db.migrate().await.unwrap();
    assert_eq!(storage::instance(&db).await.unwrap(), first);
    db.close().await;
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn readyz_waits_for_the_stored_team_rules_when_serve_asks_it_to() {
    let mut handle = None;
    let app = crate::support::TestApp::spawn_with(|mut s| {
        s.await_team_rules = true;
        handle = Some(s.ruleset.clone());
        s
    })
    .await;
    let handle = handle.expect("state seen");
    let res = app.get("/readyz").await;
    assert_eq!(res.status, StatusCode::SERVICE_UNAVAILABLE, "{}", res.body);
    assert!(res.headers.contains_key("retry-after"));
    gpu_triage::app::team_rules::reload(&app.db, &handle)
        .await
        .expect("load team rules");
    assert_eq!(app.get("/readyz").await.status, StatusCode::OK);
}
