//! Upgrades keep what is stored: a database written by an earlier release, migrated to this
//! one, still shows and serves every report.

use std::io::Write;

use axum::http::StatusCode;
use gpu_triage::auth::Scope;

use crate::browse::{page, sign_in, texts};
use crate::support::{TestApp, empty_db};

/// Runs the project's migrations whose file names sort before `first_left_out` on `db`: the
/// schema as an earlier release left it.
async fn migrate_before(db: &gpu_triage::storage::Db, first_left_out: &str) {
    let old = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.as_str() < first_left_out {
            std::fs::copy(&path, old.path().join(&name)).unwrap();
        }
    }
    sqlx::migrate::Migrator::new(old.path())
        .await
        .unwrap()
        .run(db.pool())
        .await
        .unwrap();
}

#[tokio::test]
async fn logs_stored_whole_before_migration_10_become_one_chunk_and_still_render() {
    let (db, _) = empty_db().await;
    // The schema as it was before the log was chunked: migrations 1 to 9.
    migrate_before(&db, "0010").await;
    // A report as that release stored it: the whole log in one gzip stream.
    let log: String = (1..=1000)
        .map(|i| format!("step {i}\n"))
        .chain(["RuntimeError: CUDA error: out of memory\n".to_owned()])
        .collect();
    let classification = gpu_triage::rules::Ruleset::builtin()
        .unwrap()
        .classify_bytes("train.log", log.as_bytes());
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(log.as_bytes()).unwrap();
    let log_gz = gz.finish().unwrap();
    let group: i64 = sqlx::query_scalar(
        "INSERT INTO groups (fingerprint, category, title) VALUES ('fp', 'out_of_memory', 'OOM') \
         RETURNING id",
    )
    .fetch_one(db.pool())
    .await
    .unwrap();
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO reports (group_id, category, title, confidence, root_cause_line, \
             fingerprint, classification, log_sha256, log_bytes, log_lines, log_gz) \
         VALUES ($1, 'out_of_memory', 'OOM', 'high', 1001, 'fp', $2, '\\x00', $3, 1001, $4) \
         RETURNING id",
    )
    .bind(group)
    .bind(serde_json::to_value(&classification).unwrap())
    .bind(log.len() as i64)
    .bind(&log_gz)
    .fetch_one(db.pool())
    .await
    .unwrap();

    db.migrate().await.unwrap();
    let chunks: Vec<(i32, i64, i64)> =
        sqlx::query_as("SELECT seq, first_line, lines FROM report_log_chunks WHERE report_id = $1")
            .bind(id)
            .fetch_all(db.pool())
            .await
            .unwrap();
    assert_eq!(chunks, [(0, 1, 1001)]);
    let app = TestApp::on(db);
    let token = app.token("reader", &[Scope::Read]).await;
    let b = sign_in(&app, &token).await;
    let report = page(&app, &b.cookie, &format!("/reports/{id}")).await;
    assert_eq!(report.status, StatusCode::OK, "{}", report.body);
    let hl = texts(&report.body, "pre.log .hl");
    assert!(hl.len() == 1 && hl[0].contains("out of memory"), "{hl:?}");
    let start = page(&app, &b.cookie, &format!("/reports/{id}?start=500")).await;
    assert_eq!(
        texts(&start.body, "pre.log a.ln")
            .first()
            .map(String::as_str),
        Some("500")
    );
    let raw = page(&app, &b.cookie, &format!("/reports/{id}/raw")).await;
    assert_eq!(raw.body, log);
}

#[tokio::test]
async fn reports_stored_before_migration_16_stay_searchable_by_what_they_were_searchable_by() {
    let (db, _) = empty_db().await;
    // The schema before search documents: migrations 1 to 15.
    migrate_before(&db, "0016").await;
    // A report as that release stored it: its search text held the title, the findings and
    // some metadata.
    let group: i64 = sqlx::query_scalar(
        "INSERT INTO groups (fingerprint, category, title) \
         VALUES ('fp', 'out_of_bounds', 'Index out of range') RETURNING id",
    )
    .fetch_one(db.pool())
    .await
    .unwrap();
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO reports (group_id, project, branch, commit_sha, category, title, \
             confidence, root_cause_line, root_cause_text, fingerprint, classification, \
             log_sha256, log_bytes, log_lines, search_text) \
         VALUES ($1, 'Vision', 'fix/labels', 'a1b2c3d4e5f6', 'out_of_bounds', \
             'Index out of range', 'high', 2, 'Assertion `srcIndex < srcSelectDimSize` failed.', \
             'fp', '{}', '\\x00', 10, 2, \
             'Index out of range\nout_of_bounds\nVision\nfix/labels\ntrain.log\n\
              indexSelectSmallIndex: block: [3,0,0] Assertion failed') \
         RETURNING id",
    )
    .bind(group)
    .fetch_one(db.pool())
    .await
    .unwrap();

    db.migrate().await.unwrap();
    let app = TestApp::on(db);
    let token = app.token("reader", &[Scope::Read]).await;
    for q in [
        "srcSelectDimSize",
        "indexSelectSmallIndex",
        "fix%2Flabels",
        "a1b2c3d4e5f6",
        "vision",
    ] {
        let res = app.get_as(&token, &format!("/api/v1/search?q={q}")).await;
        assert_eq!(res.status, StatusCode::OK, "{q}: {}", res.body);
        let found = res.json();
        let reports: Vec<i64> = found["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["kind"] == "report")
            .map(|r| r["id"].as_i64().unwrap())
            .collect();
        assert_eq!(reports, vec![id], "{q}: {found}");
    }
    // Its words are known to "did you mean".
    let found = app
        .get_as(&token, "/api/v1/search?q=indexSelectSmalIndex")
        .await
        .json();
    assert_eq!(found["corrected"], "indexselectsmallindex", "{found}");
}

#[tokio::test]
async fn fixes_history_and_rule_edits_recorded_before_migration_27_keep_their_names() {
    let (db, _) = empty_db().await;
    // The schema before actors were typed: migrations 1 to 26.
    migrate_before(&db, "0027").await;
    let group: i64 = sqlx::query_scalar(
        "INSERT INTO groups (fingerprint, category, title, assignee) \
         VALUES ('fp', 'out_of_memory', 'OOM', 'bob') RETURNING id",
    )
    .fetch_one(db.pool())
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO fixes (group_id, summary, author) VALUES ($1, 'smaller batch', 'alice')",
    )
    .bind(group)
    .execute(db.pool())
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO group_events (group_id, actor, action, from_value, to_value) \
         VALUES ($1, 'alice', 'assignee', '', 'bob')",
    )
    .bind(group)
    .execute(db.pool())
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO rule_history (rule_id, action, actor, new) \
         VALUES ('team.old', 'create', 'alice', '{\"spec\": null, \"enabled\": true}')",
    )
    .execute(db.pool())
    .await
    .unwrap();

    db.migrate().await.unwrap();
    let app = TestApp::on(db);
    let token = app.token("reader", &[Scope::Read]).await;
    let b = sign_in(&app, &token).await;
    let page_of_group = page(&app, &b.cookie, &format!("/groups/{group}")).await;
    assert_eq!(
        page_of_group.status,
        StatusCode::OK,
        "{}",
        page_of_group.body
    );
    // Shown by name, with no kind (neither "token" nor a person's mark).
    assert_eq!(texts(&page_of_group.body, "ul.fixes .who"), ["alice"]);
    assert_eq!(
        crate::browse::attr(&page_of_group.body, "ul.fixes .who", "data-kind"),
        None
    );
    assert_eq!(texts(&page_of_group.body, "#assignee"), ["bob"]);
    let history = texts(&page_of_group.body, "ol.history li");
    assert!(history[0].ends_with("alice assigned bob"), "{history:?}");
    let api = app
        .get_as(&token, &format!("/api/v1/groups/{group}"))
        .await
        .json();
    assert_eq!(
        (
            &api["fixes"][0]["author"],
            &api["fixes"][0]["author_kind"],
            &api["history"][0]["actor"],
            &api["history"][0]["actor_kind"],
            &api["assignee"],
            &api["assignee_id"]
        ),
        (
            &serde_json::json!("alice"),
            &serde_json::Value::Null,
            &serde_json::json!("alice"),
            &serde_json::Value::Null,
            &serde_json::json!("bob"),
            &serde_json::Value::Null
        )
    );
    let rules = page(&app, &b.cookie, "/rules").await;
    assert_eq!(texts(&rules.body, ".history .actor"), ["alice"]);
}
