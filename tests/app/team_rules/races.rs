//! Reclassification against everything else that touches groups: an upload landing in the group
//! a reclassification just emptied, and a report whose headline follows a reproduction.

use std::time::Duration;

use axum::http::StatusCode;
use gpu_triage::auth::Scope;
use gpu_triage::rules::{Category, Confidence, Ruleset};
use gpu_triage::storage::reclassify_runs::{Applied, Reclassified};
use gpu_triage::storage::reports::Headline;

use super::{ILLEGAL_LOG, KERNEL_LOG, upload};
use crate::support::{TestApp, wait_for_lock_wait, wait_for_statement};

fn moved_to(fingerprint: &str, category: &str) -> Reclassified {
    let category: Category = category.parse().unwrap();
    let mut classification = Ruleset::builtin()
        .unwrap()
        .classify_bytes("x", b"MyKernel failed\n");
    classification.category = category;
    classification.fingerprint = fingerprint.into();
    Reclassified {
        headline: Headline {
            category,
            title: "MyKernel failed".into(),
            confidence: Confidence::High,
            root_cause_line: Some(2),
            root_cause_text: "MyKernel failed: code 7 (launch 2)".into(),
            fingerprint: fingerprint.into(),
            signature: "MyKernel failed: code # (launch #)".into(),
            async_hint: false,
        },
        classification,
        search: gpu_triage::storage::search::Document {
            root: "MyKernel failed".into(),
            ..Default::default()
        },
        search_words: vec!["failed".into(), "mykernel".into()],
        story: None,
    }
}

/// Inserts a copy of report `id` under `project` in `tx` (an upload not yet committed), in
/// `group` or else the report's own group.
async fn copy_report(
    tx: &mut sqlx::PgConnection,
    id: i64,
    project: &str,
    group: Option<i64>,
) -> i64 {
    let copy: i64 = sqlx::query_scalar(
        "INSERT INTO reports (token_id, project, filename, group_id, category, title, \
             confidence, root_cause_line, root_cause_text, fingerprint, async_hint, \
             classification, log_sha256, log_bytes, log_lines) \
         SELECT token_id, $2, filename, coalesce($3, group_id), category, title, confidence, \
             root_cause_line, root_cause_text, fingerprint, async_hint, classification, \
             log_sha256, log_bytes, log_lines FROM reports WHERE id = $1 \
         RETURNING id",
    )
    .bind(id)
    .bind(project)
    .bind(group)
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO report_log_chunks (report_id, seq, first_line, lines, data) \
         SELECT $2, seq, first_line, lines, data FROM report_log_chunks WHERE report_id = $1",
    )
    .bind(id)
    .bind(copy)
    .execute(&mut *tx)
    .await
    .unwrap();
    copy
}

/// The statement with which reclassification drops a group it emptied: the one that waits for
/// an open upload or fix holding the group's row (their foreign key's `KEY SHARE` lock).
const DROP_GROUP: &str = "DELETE FROM groups";

/// Moves `report` to a new group with reclassification while `tx` (an upload or a fix in the
/// report's group) is open; commits `tx` once the move is blocked on it, and returns what the
/// move did.
async fn move_out_while_open(
    app: &TestApp,
    report: i64,
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
) -> Applied {
    let db = app.db.clone();
    let apply = tokio::spawn(async move {
        gpu_triage::app::team_rules::reclassify::apply(
            &db,
            report,
            &moved_to("fp-new", "library_error"),
        )
        .await
    });
    // Commit only once dropping the old group waits for `tx`: then the delete meets the
    // committed reference, the case under test.
    wait_for_lock_wait(&app.db, DROP_GROUP).await;
    assert!(
        !apply.is_finished(),
        "the move waits for the open transaction"
    );
    tx.commit().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), apply)
        .await
        .expect("apply finishes once the other transaction commits")
        .unwrap()
        .unwrap()
}

/// Uploads the kernel log: (report id, group id).
async fn kernel_report(app: &TestApp) -> (i64, i64) {
    let ingest = app.token("ci", &[Scope::Ingest]).await;
    let first = upload(app, &ingest, KERNEL_LOG).await;
    (
        first["id"].as_i64().unwrap(),
        first["group_id"].as_i64().unwrap(),
    )
}

#[tokio::test]
async fn a_report_landing_in_the_group_being_emptied_keeps_the_group_and_the_run_goes_on() {
    let app = TestApp::spawn().await;
    let (report, group) = kernel_report(&app).await;
    // An upload of the same failure, not yet committed: its report references the group.
    let mut upload_tx = app.db.pool().begin().await.unwrap();
    copy_report(&mut upload_tx, report, "other", None).await;
    // Reclassification moves the only committed report out and tries to drop the group.
    assert_eq!(
        move_out_while_open(&app, report, upload_tx).await,
        Applied::Regrouped
    );
    let left: Vec<(i64, String)> =
        sqlx::query_as("SELECT id, project FROM reports WHERE group_id = $1")
            .bind(group)
            .fetch_all(app.db.pool())
            .await
            .unwrap();
    assert_eq!(left.len(), 1, "the upload's report stays in its group");
    assert_eq!(left[0].1, "other");
    assert_eq!(app.count("reports").await, 2);
}

#[tokio::test]
async fn a_fix_recorded_in_the_group_being_emptied_keeps_the_group_and_the_fix() {
    let app = TestApp::spawn().await;
    let (report, group) = kernel_report(&app).await;
    let mut fix_tx = app.db.pool().begin().await.unwrap();
    sqlx::query(
        "INSERT INTO fixes (group_id, summary, details, link, author) \
         VALUES ($1, 'pin the kernel version', '', '', 'alice')",
    )
    .bind(group)
    .execute(&mut *fix_tx)
    .await
    .unwrap();
    assert_eq!(
        move_out_while_open(&app, report, fix_tx).await,
        Applied::Regrouped
    );
    let fixes: Vec<(i64, String)> = sqlx::query_as("SELECT group_id, summary FROM fixes")
        .fetch_all(app.db.pool())
        .await
        .unwrap();
    assert_eq!(fixes, [(group, "pin the kernel version".to_owned())]);
}

#[tokio::test]
async fn uploads_racing_a_reclassification_that_empties_their_group_all_land() {
    let app = TestApp::spawn().await;
    let mut uploaded = 0;
    for round in 0..60i64 {
        // A token per round keeps the test under the per-token rate limit.
        let ingest = app.token(&format!("ci{round}"), &[Scope::Ingest]).await;
        // One report in the group; reclassification moves it away (and drops the group)
        // while another upload of the same failure is on its way in.
        let log = format!("round {round} a\nMyKernel failed: code 7 (launch 2)\n");
        let first = upload(&app, &ingest, log.as_bytes()).await;
        uploaded += 1;
        let id = first["id"].as_i64().unwrap();
        let fingerprint: String =
            sqlx::query_scalar("SELECT fingerprint FROM reports WHERE id = $1")
                .bind(id)
                .fetch_one(app.db.pool())
                .await
                .unwrap();
        let db = app.db.clone();
        let away = format!("fp-away-{round}");
        let apply = tokio::spawn(async move {
            gpu_triage::app::team_rules::reclassify::apply(
                &db,
                id,
                &moved_to(&away, "library_error"),
            )
            .await
        });
        let next = format!("round {round} b\nMyKernel failed: code 7 (launch 2)\n");
        let res = app
            .upload(&ingest, &[("log", Some("ci.log"), next.as_bytes())], None)
            .await;
        assert_eq!(res.status.as_u16(), 201, "round {round}: {}", res.body);
        uploaded += 1;
        apply
            .await
            .unwrap()
            .expect("the reclassification step succeeds");
        let in_group: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM reports r JOIN groups g ON g.id = r.group_id \
             WHERE g.fingerprint = $1",
        )
        .bind(&fingerprint)
        .fetch_one(app.db.pool())
        .await
        .unwrap();
        // Every round's second upload stays; every first one was moved away.
        assert_eq!(
            in_group,
            round + 1,
            "round {round}: the second uploads are in their group"
        );
    }
    assert_eq!(app.count("reports").await, uploaded);
    let orphans: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM groups g WHERE NOT EXISTS \
         (SELECT 1 FROM reports r WHERE r.group_id = g.id)",
    )
    .fetch_one(app.db.pool())
    .await
    .unwrap();
    assert_eq!(orphans, 0, "emptied groups are removed");
}

#[tokio::test]
async fn reclassifying_keeps_a_headline_that_follows_a_reproduction() {
    let app = TestApp::spawn().await;
    let ingest = app.token("ci", &[Scope::Ingest]).await;
    let stored = upload(&app, &ingest, ILLEGAL_LOG).await;
    let id = stored["id"].as_i64().unwrap();
    sqlx::query(
        "UPDATE reports SET category_source = 'reproduction', \
             original_category = category, original_title = title, \
             category = 'out_of_bounds', title = 'Index out of bounds (device-side assert)' \
         WHERE id = $1",
    )
    .bind(id)
    .execute(app.db.pool())
    .await
    .unwrap();
    let applied = gpu_triage::app::team_rules::reclassify::apply(
        &app.db,
        id,
        &moved_to("fp-team", "library_error"),
    )
    .await
    .unwrap();
    assert_eq!(applied, Applied::Regrouped);
    let row: (String, String, String, Option<String>, String) = sqlx::query_as(
        "SELECT category, title, category_source, original_category, fingerprint \
         FROM reports WHERE id = $1",
    )
    .bind(id)
    .fetch_one(app.db.pool())
    .await
    .unwrap();
    assert_eq!(
        row,
        (
            "out_of_bounds".into(),
            "Index out of bounds (device-side assert)".into(),
            "reproduction".into(),
            Some("library_error".into()),
            "fp-team".into()
        )
    );
}

/// Uploads the kernel log, then saves the team rule that classifies it: (ingest token, the
/// upload's answer).
async fn kernel_report_then_rule(app: &TestApp) -> (String, serde_json::Value) {
    let ingest = app.token("ci", &[Scope::Ingest]).await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let first = upload(app, &ingest, KERNEL_LOG).await;
    let res = app
        .post_json(&admin, "/api/v1/rules", &super::kernel_rule())
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    (ingest, first)
}

/// Starts a reclassification run with the stored rules, in the background: (run id, its task).
async fn start_reclassify(
    app: &TestApp,
) -> (
    i64,
    tokio::task::JoinHandle<Result<(), gpu_triage::app::team_rules::TeamRulesError>>,
) {
    let handle = gpu_triage::app::team_rules::RulesetHandle::new(std::sync::Arc::new(
        gpu_triage::rules::Ruleset::builtin().unwrap(),
    ));
    gpu_triage::app::team_rules::reload(&app.db, &handle)
        .await
        .unwrap();
    let run = gpu_triage::app::team_rules::reclassify::open_run(
        &app.db,
        handle.version(),
        &gpu_triage::actor::Actor::Service("test"),
    )
    .await
    .unwrap()
    .unwrap();
    let db = app.db.clone();
    let id = run.id;
    let task = tokio::spawn(async move {
        gpu_triage::app::team_rules::reclassify::run_all(&db, &handle, &run).await
    });
    (id, task)
}

#[tokio::test]
async fn reclassify_takes_a_report_that_committed_after_the_scan_passed_its_id() {
    let app = TestApp::spawn().await;
    let (ingest, first) = kernel_report_then_rule(&app).await;
    // An upload that took its id before the run and commits only after the scan passed it.
    let mut late_tx = app.db.pool().begin().await.unwrap();
    let late = copy_report(&mut late_tx, first["id"].as_i64().unwrap(), "late", None).await;
    let after = upload(
        &app,
        &ingest,
        b"later run\nMyKernel failed: code 9 (launch 1)\n",
    )
    .await;
    assert!(after["id"].as_i64().unwrap() > late);

    let before: String = sqlx::query_scalar("SELECT category FROM reports WHERE id = $1")
        .bind(first["id"].as_i64().unwrap())
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert_eq!(before, "unknown", "classified before the team rule existed");
    let (_, task) = start_reclassify(&app).await;
    // The scan read the committed reports (the late id between them is not visible yet), moved
    // the first one to the team rule's group and now waits for the open upload, which holds
    // the emptied group.
    wait_for_lock_wait(&app.db, DROP_GROUP).await;
    assert!(!task.is_finished(), "the run waits for the open upload");
    late_tx.commit().await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the run ends once the upload committed")
        .unwrap()
        .unwrap();
    let categories: Vec<(i64, String)> =
        sqlx::query_as("SELECT id, category FROM reports ORDER BY id")
            .fetch_all(app.db.pool())
            .await
            .unwrap();
    assert!(
        categories.iter().all(|(_, c)| c == "library_error"),
        "{categories:?}"
    );
}

#[tokio::test]
async fn reclassify_takes_an_upload_still_open_at_the_end_of_the_scan_with_the_newest_id() {
    let app = TestApp::spawn().await;
    let (ingest, first) = kernel_report_then_rule(&app).await;
    // Another group, which the run leaves in place: the late upload's lock on its group then
    // holds nothing up.
    let other = upload(&app, &ingest, ILLEGAL_LOG).await;
    let mut late_tx = app.db.pool().begin().await.unwrap();
    let late = copy_report(
        &mut late_tx,
        first["id"].as_i64().unwrap(),
        "late",
        other["group_id"].as_i64(),
    )
    .await;
    let (run_id, task) = start_reclassify(&app).await;
    // Commit only once the scan has gone past every committed report, found no more and waits
    // for the transactions still open (the settle check, which runs only after the scan ended).
    wait_for_statement(&app.db, "pg_snapshot_xmin(pg_current_snapshot())").await;
    let done: i64 = sqlx::query_scalar("SELECT done FROM reclassify_runs WHERE id = $1")
        .bind(run_id)
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert_eq!(
        done, 2,
        "the scan took both committed reports before it settled"
    );
    assert!(!task.is_finished(), "the run waits for the open upload");
    late_tx.commit().await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the run ends once the upload committed")
        .unwrap()
        .unwrap();
    let category: String = sqlx::query_scalar("SELECT category FROM reports WHERE id = $1")
        .bind(late)
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert_eq!(
        category, "library_error",
        "the late report {late} was reclassified"
    );
}
