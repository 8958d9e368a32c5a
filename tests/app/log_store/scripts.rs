//! Reproduction scripts kept in the object store (issue 42 item 2, migration 0050): an upload
//! puts its script there under a prefix of its own; the worker's claim and the report page read
//! it back, checked against its hash (a store that cannot give it back puts the job back in the
//! queue, its attempt not counted); duplicates, log retention and report retention leave no
//! object and lose no script a report still has; `db move-logs` moves scripts both ways.

use std::time::Duration;

use axum::http::StatusCode;
use gpu_triage::app::log_objects;
use gpu_triage::auth::Scope;

use super::weed::weed;
use super::{count, log_text, move_logs, prefixes, prefixes_under, retention_pass, shared};
use crate::browse::{page, sign_in, texts};
use crate::jobs::{SCRIPT, claim};
use crate::support::{TestApp, database_url, fresh_db};

/// Whether a report page shows the reproduction script.
fn shows_script(html: &str) -> bool {
    texts(html, "section.card pre.log")
        .iter()
        .any(|t| t.trim() == SCRIPT.trim())
}

/// Uploads `log` with the reproduction script: its report id and the answer.
async fn upload_with_script(app: &TestApp, token: &str, log: &str) -> (i64, serde_json::Value) {
    let res = app
        .upload(
            token,
            &[
                ("log", Some("job.log"), log.as_bytes()),
                ("script", Some("repro.py"), SCRIPT.as_bytes()),
            ],
            None,
        )
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let body = res.json();
    (body["id"].as_i64().unwrap(), body)
}

#[tokio::test]
async fn a_script_lives_in_the_store_and_the_worker_and_the_report_page_read_it_from_there() {
    let Some(weed) = weed("a_script_lives_in_the_store") else {
        return;
    };
    let objects = shared(weed.objects_at(weed.s3_port, &weed.fresh_url(), Duration::from_secs(10)));
    let (db, _) = fresh_db().await;
    let app = TestApp::on(db.with_log_store(objects.clone()));
    let token = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let worker = app.token("gpu-1", &[Scope::Worker]).await;
    let (id, body) = upload_with_script(&app, &token, &log_text("script", 200, None)).await;
    assert_eq!(body["repro"]["state"], "queued");

    // The row keeps where and what: no text; the object holds the script's bytes.
    assert_eq!(
        count(
            &app,
            "SELECT count(*) FROM reports WHERE script IS NULL AND script_prefix LIKE 'scripts/%' \
             AND script_sha256 IS NOT NULL"
        )
        .await,
        1
    );
    let dirs = prefixes_under(&objects, "scripts").await;
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let keys = objects.list(&dirs[0]).await.unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(objects.get(&keys[0]).await.unwrap(), SCRIPT.as_bytes());
    assert_eq!(
        count(&app, "SELECT count(*) FROM log_object_sweeps").await,
        0
    );

    // The report page shows it; the API says there is one.
    let b = sign_in(&app, &token).await;
    let shown = page(&app, &b.cookie, &format!("/reports/{id}")).await;
    assert_eq!(shown.status, StatusCode::OK);
    assert!(
        shows_script(&shown.body),
        "the script is not on the report page"
    );
    let api = app.get_as(&token, &format!("/api/v1/reports/{id}")).await;
    assert_eq!(api.json()["has_script"], true, "{}", api.body);

    // An object that no longer matches its hash is never run: the claim fails and the job
    // goes back to the queue, its attempt not counted.
    objects
        .put(&keys[0], b"import os; os.system('rm -rf /')\n".to_vec())
        .await
        .unwrap();
    let bad = claim(&app, &worker, "gpu-1").await;
    assert_eq!(
        bad.status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "{}",
        bad.body
    );
    assert_eq!(
        count(
            &app,
            "SELECT count(*) FROM jobs WHERE state = 'queued' AND attempts = 0 \
             AND lease_token IS NULL"
        )
        .await,
        1
    );
    // Put right, the worker gets the script byte for byte, on the first attempt.
    objects
        .put(&keys[0], SCRIPT.as_bytes().to_vec())
        .await
        .unwrap();
    let res = claim(&app, &worker, "gpu-1").await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let job = res.json();
    assert_eq!(job["script"], SCRIPT, "{job}");
    assert_eq!(job["attempt"], 1, "{job}");
}

#[tokio::test]
async fn duplicates_and_retention_leave_no_script_object_and_keep_the_scripts_reports_still_have() {
    let Some(weed) = weed("duplicates_and_retention_leave_no_script") else {
        return;
    };
    let objects = shared(weed.objects_at(weed.s3_port, &weed.fresh_url(), Duration::from_secs(10)));
    let (db, _) = fresh_db().await;
    let app = TestApp::on(db.with_log_store(objects.clone()));
    let token = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let (old, _) = upload_with_script(&app, &token, &log_text("old", 200, None)).await;
    let (young, _) = upload_with_script(&app, &token, &log_text("young", 200, None)).await;
    // The same upload again: a duplicate, whose freshly written log and script go at the sweep.
    let (dup, body) = upload_with_script(&app, &token, &log_text("young", 200, None)).await;
    assert_eq!((dup, &body["duplicate"]), (young, &serde_json::json!(true)));
    assert_eq!(prefixes_under(&objects, "scripts").await.len(), 3);
    assert_eq!(log_objects::sweep_all(&app.db).await.unwrap(), 2);
    assert_eq!(prefixes_under(&objects, "scripts").await.len(), 2);
    assert_eq!(prefixes(&objects).await.len(), 2);

    // Log retention removes the old report's log and keeps its script: the job still runs it.
    sqlx::query("UPDATE reports SET created_at = created_at - interval '10 days' WHERE id = $1")
        .bind(old)
        .execute(app.db.pool())
        .await
        .unwrap();
    let summary = retention_pass(&app, 5, 0).await;
    assert_eq!(summary.removed.logs, 1);
    assert_eq!(log_objects::sweep_all(&app.db).await.unwrap(), 1);
    assert_eq!(prefixes(&objects).await.len(), 1);
    assert_eq!(prefixes_under(&objects, "scripts").await.len(), 2);
    let b = sign_in(&app, &token).await;
    let shown = page(&app, &b.cookie, &format!("/reports/{old}")).await;
    assert_eq!(shown.status, StatusCode::OK);
    assert!(shows_script(&shown.body), "the script went with the log");

    // Report retention deletes the report: its script object is queued and swept.
    let summary = retention_pass(&app, 5, 7).await;
    assert_eq!(summary.removed.reports, 1);
    assert_eq!(log_objects::sweep_all(&app.db).await.unwrap(), 1);
    let left = prefixes_under(&objects, "scripts").await;
    let young_prefix: String =
        sqlx::query_scalar("SELECT script_prefix FROM reports WHERE id = $1")
            .bind(young)
            .fetch_one(app.db.pool())
            .await
            .unwrap();
    assert_eq!(left, [young_prefix]);
}

#[tokio::test]
async fn move_logs_moves_scripts_into_the_store_and_back_byte_for_byte() {
    let Some(weed) = weed("move_logs_moves_scripts") else {
        return;
    };
    let store_url = weed.fresh_url();
    let objects = shared(weed.objects_at(weed.s3_port, &store_url, Duration::from_secs(10)));
    let (db, options) = fresh_db().await;
    let url = database_url(options.get_database().unwrap());
    let plain = TestApp::on(db.clone());
    let token = plain.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let worker = plain.token("gpu-1", &[Scope::Worker]).await;
    let (id, _) = upload_with_script(&plain, &token, &log_text("moving", 300, None)).await;
    let in_row = "SELECT count(*) FROM reports WHERE script IS NOT NULL";
    assert_eq!(count(&plain, in_row).await, 1);

    let out = move_logs(&url, &store_url, &weed.env(weed.s3_port), &store_url);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("and 1 reproduction scripts"), "{said}");
    assert_eq!(count(&plain, in_row).await, 0);
    let dirs = prefixes_under(&objects, "scripts").await;
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let key = objects.list(&dirs[0]).await.unwrap().remove(0);
    assert_eq!(objects.get(&key).await.unwrap(), SCRIPT.as_bytes());
    // Served from the store now.
    let with_store = TestApp::on(db.clone().with_log_store(objects.clone()));
    let b = sign_in(&with_store, &token).await;
    let shown = page(&with_store, &b.cookie, &format!("/reports/{id}")).await;
    assert!(
        shows_script(&shown.body),
        "the moved script is not on the report page"
    );
    // Nothing left to move.
    let out = move_logs(&url, &store_url, &weed.env(weed.s3_port), &store_url);
    assert!(String::from_utf8_lossy(&out.stdout).contains("and 0 reproduction scripts"));

    // Back into the row: the object goes, the worker gets the same bytes from PostgreSQL.
    let out = move_logs(&url, "postgres", &weed.env(weed.s3_port), &store_url);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("and 1 reproduction scripts"), "{said}");
    assert_eq!(count(&plain, in_row).await, 1);
    assert!(prefixes_under(&objects, "scripts").await.is_empty());
    let res = claim(&plain, &worker, "gpu-1").await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert_eq!(res.json()["script"], SCRIPT);
}
