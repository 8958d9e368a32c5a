//! Logs kept in the object store: the chunk map in PostgreSQL, the bytes in SeaweedFS, and every
//! reader (report page, find, raw download, API) served from there; retention and duplicates
//! leave nothing behind once swept; `db move-logs` moves logs into the store and back,
//! resumable, each chunk verified.

use std::time::Duration;

use axum::http::StatusCode;
use gpu_triage::app::log_objects;
use gpu_triage::auth::Scope;

use super::proxy::FaultProxy;
use super::weed::weed;
use super::{count, log_text, move_logs, prefixes, retention_pass, shared};
use crate::browse::{page, sign_in, texts};
use crate::support::{TestApp, database_url, fresh_db};

#[tokio::test]
async fn a_log_lives_in_the_store_and_every_reader_reads_it_from_there() {
    let Some(weed) = weed("a_log_lives_in_the_store") else {
        return;
    };
    let objects = shared(weed.objects_at(weed.s3_port, &weed.fresh_url(), Duration::from_secs(10)));
    let (db, _) = fresh_db().await;
    let app = TestApp::on(db.with_log_store(objects.clone()));
    let token = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    // About 3.3 MB: four chunks of whole lines.
    let log = log_text("store", 52_000, Some("MARKER-7f3a"));
    let res = app
        .upload(&token, &[("log", Some("job.log"), log.as_bytes())], None)
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let id = res.json()["id"].as_i64().unwrap();

    // PostgreSQL keeps the chunk map, the store the bytes: one object per chunk.
    let chunks = count(&app, "SELECT count(*) FROM report_log_chunks").await;
    assert!(chunks >= 3, "{chunks} chunks");
    assert_eq!(
        count(
            &app,
            "SELECT count(*) FROM report_log_chunks WHERE data IS NOT NULL"
        )
        .await,
        0
    );
    let dirs = prefixes(&objects).await;
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    assert_eq!(objects.list(&dirs[0]).await.unwrap().len() as i64, chunks);
    assert_eq!(
        count(&app, "SELECT count(*) FROM log_object_sweeps").await,
        0
    );

    let b = sign_in(&app, &token).await;
    let raw = page(&app, &b.cookie, &format!("/reports/{id}/raw")).await;
    assert_eq!(raw.status, StatusCode::OK);
    assert!(raw.body == log, "the raw download differs from the upload");
    // A page in the middle of the log, and a find, read their chunks from the store.
    let mid = page(&app, &b.cookie, &format!("/reports/{id}?line=30000")).await;
    assert_eq!(mid.status, StatusCode::OK);
    assert!(
        texts(&mid.body, "pre.log")
            .join("")
            .contains("step 30000 loss"),
        "line 30000 is not on its page"
    );
    let found = page(&app, &b.cookie, &format!("/reports/{id}?grep=marker-7F3A")).await;
    assert_eq!(found.status, StatusCode::OK);
    assert!(
        texts(&found.body, "pre.log")
            .join("")
            .contains("MARKER-7f3a at line 26000"),
        "{}",
        texts(&found.body, "#log h2").join("")
    );
    let api = app.get_as(&token, &format!("/api/v1/reports/{id}")).await;
    assert_eq!(api.status, StatusCode::OK);
    assert_eq!(api.json()["classification"]["category"], "out_of_memory");

    // An object that no longer matches its recorded hash is an error, never a wrong page.
    let first = objects.list(&dirs[0]).await.unwrap();
    let key = first.iter().find(|k| k.ends_with("/0")).unwrap();
    objects.put(key, b"not the chunk".to_vec()).await.unwrap();
    let bad = page(&app, &b.cookie, &format!("/reports/{id}?line=1")).await;
    assert_eq!(bad.status, StatusCode::INTERNAL_SERVER_ERROR);
}

#[tokio::test]
async fn retention_and_duplicates_leave_no_object_once_swept() {
    let Some(weed) = weed("retention_and_duplicates_leave_no_object") else {
        return;
    };
    let objects = shared(weed.objects_at(weed.s3_port, &weed.fresh_url(), Duration::from_secs(10)));
    let (db, _) = fresh_db().await;
    let app = TestApp::on(db.with_log_store(objects.clone()));
    let token = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let mut ids = Vec::new();
    for tag in ["old", "new"] {
        let log = log_text(tag, 200, None);
        let res = app
            .upload(&token, &[("log", Some("job.log"), log.as_bytes())], None)
            .await;
        assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
        ids.push(res.json()["id"].as_i64().unwrap());
    }
    // The same bytes again: a duplicate, whose freshly written objects are due for the sweeper.
    let again = log_text("new", 200, None);
    let dup = app
        .upload(&token, &[("log", Some("job.log"), again.as_bytes())], None)
        .await;
    assert_eq!(dup.json()["duplicate"], true, "{}", dup.body);
    assert_eq!(prefixes(&objects).await.len(), 3);
    assert_eq!(log_objects::sweep_all(&app.db).await.unwrap(), 1);
    assert_eq!(prefixes(&objects).await.len(), 2);

    // The first report's log is past its time.
    sqlx::query("UPDATE reports SET created_at = created_at - interval '10 days' WHERE id = $1")
        .bind(ids[0])
        .execute(app.db.pool())
        .await
        .unwrap();
    let summary = retention_pass(&app, 5, 0).await;
    assert_eq!(summary.removed.logs, 1);
    assert!(summary.removed.bytes > 0, "the store's bytes are counted");
    assert_eq!(
        count(&app, "SELECT count(*) FROM log_object_sweeps").await,
        1
    );
    assert_eq!(log_objects::sweep_all(&app.db).await.unwrap(), 1);
    assert_eq!(prefixes(&objects).await.len(), 1);
    assert_eq!(
        count(&app, "SELECT count(*) FROM log_object_sweeps").await,
        0
    );

    let b = sign_in(&app, &token).await;
    let gone = page(&app, &b.cookie, &format!("/reports/{}/raw", ids[0])).await;
    assert_eq!(gone.status, StatusCode::GONE);
    let kept = page(&app, &b.cookie, &format!("/reports/{}/raw", ids[1])).await;
    assert!(kept.body == log_text("new", 200, None));
}

#[tokio::test]
async fn move_logs_moves_every_log_into_the_store_and_back_resuming_after_a_failure() {
    let Some(weed) = weed("move_logs_moves_every_log") else {
        return;
    };
    let store_url = weed.fresh_url();
    let objects = shared(weed.objects_at(weed.s3_port, &store_url, Duration::from_secs(10)));
    let (db, options) = fresh_db().await;
    let url = database_url(options.get_database().unwrap());
    let plain = TestApp::on(db.clone());
    let token = plain.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let logs: Vec<String> = (0..4)
        .map(|i| {
            log_text(
                &format!("move{i}"),
                if i == 0 { 40_000 } else { 3000 },
                None,
            )
        })
        .collect();
    let mut ids = Vec::new();
    for log in &logs {
        let res = plain
            .upload(&token, &[("log", Some("job.log"), log.as_bytes())], None)
            .await;
        assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
        ids.push(res.json()["id"].as_i64().unwrap());
    }
    let in_rows = "SELECT count(*) FROM report_log_chunks WHERE data IS NOT NULL";
    let all = count(&plain, "SELECT count(*) FROM report_log_chunks").await;
    assert_eq!(count(&plain, in_rows).await, all);

    // The store goes down half way: the first (largest) report moves, the second does not.
    let proxy = FaultProxy::start(weed.s3_port);
    let first_bytes = count(
        &plain,
        &format!(
            "SELECT sum(octet_length(data))::int8 FROM report_log_chunks WHERE report_id = {}",
            ids[0]
        ),
    )
    .await;
    proxy.cut_after(first_bytes + 20_000);
    let out = move_logs(&url, &store_url, &weed.env(proxy.port), &store_url);
    assert!(
        !out.status.success(),
        "the move should fail with the store down"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&store_url) && err.contains("unreachable"),
        "{err}"
    );
    let moved = all - count(&plain, in_rows).await;
    assert!(moved > 0 && moved < all, "{moved} of {all} chunks moved");

    // Run again (the store is back): it goes on, and each log reads back byte for byte.
    let out = move_logs(&url, &store_url, &weed.env(weed.s3_port), &store_url);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("moved the logs of 3 reports"), "{said}");
    assert_eq!(count(&plain, in_rows).await, 0);
    // The interrupted attempt's objects were swept: one prefix per report.
    assert_eq!(prefixes(&objects).await.len(), 4);
    let with_store = TestApp::on(db.clone().with_log_store(objects.clone()));
    let b = sign_in(&with_store, &token).await;
    for (id, log) in ids.iter().zip(&logs) {
        let raw = page(&with_store, &b.cookie, &format!("/reports/{id}/raw")).await;
        assert!(raw.body == *log, "report {id} differs after the move");
    }
    // Nothing left to move: a second run moves nothing.
    let out = move_logs(&url, &store_url, &weed.env(weed.s3_port), &store_url);
    assert!(String::from_utf8_lossy(&out.stdout).contains("moved the logs of 0 reports"));

    // And back into PostgreSQL: the objects go, the rows hold the same bytes.
    let out = move_logs(&url, "postgres", &weed.env(weed.s3_port), &store_url);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("moved the logs of 4 reports"), "{said}");
    assert!(said.contains("4 object prefixes removed"), "{said}");
    assert_eq!(count(&plain, in_rows).await, all);
    assert!(prefixes(&objects).await.is_empty());
    for (id, log) in ids.iter().zip(&logs) {
        let raw = page(&plain, &b.cookie, &format!("/reports/{id}/raw")).await;
        assert!(raw.body == *log, "report {id} differs after moving back");
    }
    // A bad destination is a usage error.
    let out = move_logs(&url, "ftp://x", &weed.env(weed.s3_port), &store_url);
    assert_eq!(out.status.code(), Some(2));
}
