//! Retention that really deletes (issue 20 item 4), against the real database: reports uploaded
//! through the API across projects with different retention, some made old by moving their
//! upload time back, then one pass run at once (no timer, no sleep). Deleted reports lose their
//! rows, log bytes, search rows and jobs, and search no longer finds them, while their groups
//! keep counts, first and last seen, trends, project filters, commit first sightings and fixes;
//! expired logs leave the report with its classification; batches, idempotence, the background
//! task, the CLI, and the settings API and page with their refusals and permissions.

mod names;
mod settings;

use axum::http::StatusCode;
use gpu_triage::api_types::retention::Days;
use gpu_triage::app::retention::{self, PassSummary, RetentionSettings};
use gpu_triage::auth::Scope;
use serde_json::{Value, json};

use crate::browse::{page, sign_in, texts};
use crate::support::TestApp;

/// An illegal memory access with a traceback through the user's code; `marker` is a word only in
/// the log's first line (its search excerpt). Every marker gives the same failure, one group.
fn ima_log(marker: &str) -> Vec<u8> {
    format!(
        "2026-07-30T03:36:29.1Z INFO starting run model={marker} batch_size=64
epoch 1 step 10 loss=2.31
Traceback (most recent call last):
  File \"/srv/vision/train.py\", line 57, in <module>
    loss.item()
  File \"/srv/vision/model.py\", line 23, in forward
    x = self.emb(idx)
RuntimeError: CUDA error: an illegal memory access was encountered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
"
    )
    .into_bytes()
}

/// An out-of-memory log (another failure, another group).
fn oom_log(marker: &str) -> Vec<u8> {
    format!(
        "INFO finetuning {marker} on 8 GPUs
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.06 GiB is free.
"
    )
    .into_bytes()
}

/// The application with these retention settings, and an admin token.
async fn app_with(settings: &RetentionSettings) -> (TestApp, String) {
    let settings = settings.clone();
    let app = TestApp::spawn_with(move |mut s| {
        s.retention = settings;
        s
    })
    .await;
    let admin = app.token("root", &[Scope::Admin]).await;
    (app, admin)
}

fn settings(log_days: u32, report_days: u32, batch: u32) -> RetentionSettings {
    RetentionSettings {
        defaults: Days {
            log_days,
            report_days,
        },
        batch,
        ..RetentionSettings::default()
    }
}

/// Uploads `log` with `meta` (and a script when given); the upload's answer.
async fn upload(app: &TestApp, token: &str, log: &[u8], meta: Value, script: bool) -> Value {
    let meta = meta.to_string();
    let mut parts: Vec<(&str, Option<&str>, &[u8])> = vec![
        ("log", Some("job.log"), log),
        ("meta", None, meta.as_bytes()),
    ];
    if script {
        parts.push(("script", Some("repro.py"), b"import torch\nprint(1)\n"));
    }
    let res = app.upload(token, &parts, None).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    res.json()
}

fn id(v: &Value) -> i64 {
    v["id"].as_i64().expect("id")
}

/// Moves the upload time of `ids` (and of their search rows) `days` days back, and their groups'
/// first sighting with them: as if they had been uploaded then.
async fn backdate(app: &TestApp, ids: &[i64], days: i32) {
    for sql in [
        "UPDATE reports SET created_at = created_at - make_interval(days => $2) WHERE id = ANY($1)",
        "UPDATE report_search SET created_at = created_at - make_interval(days => $2) \
         WHERE report_id = ANY($1)",
        "UPDATE groups g SET first_seen = LEAST(g.first_seen, r.created_at) FROM reports r \
         WHERE r.group_id = g.id AND r.id = ANY($1)",
    ] {
        sqlx::query(sql)
            .bind(ids)
            .bind(days)
            .execute(app.db.pool())
            .await
            .unwrap();
    }
}

/// One pass now, as `serve`'s task and `gpu-triage retention run` run it.
async fn pass(app: &TestApp, settings: &RetentionSettings) -> PassSummary {
    retention::run_pass(&app.db, settings, retention::now())
        .await
        .expect("retention pass")
}

/// Rows counted per table for the reports `ids`.
async fn rows_of(app: &TestApp, table: &str, column: &str, ids: &[i64]) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM {table} WHERE {column} = ANY($1)"
    )))
    .bind(ids)
    .fetch_one(app.db.pool())
    .await
    .unwrap()
}

/// Stored compressed log bytes of `ids`.
async fn log_bytes_of(app: &TestApp, ids: &[i64]) -> i64 {
    sqlx::query_scalar(
        "SELECT coalesce(sum(octet_length(data)), 0)::int8 FROM report_log_chunks \
         WHERE report_id = ANY($1)",
    )
    .bind(ids)
    .fetch_one(app.db.pool())
    .await
    .unwrap()
}

/// The reports search finds for `query`, one per group (each group's best match).
async fn found_reports(app: &TestApp, token: &str, query: &str) -> Vec<i64> {
    ids_of_reports(
        app.get_as(token, &format!("/api/v1/search?q={query}&per_page=50"))
            .await,
    )
}

/// The reports search finds for `query` in `project`: search answers one row per group, so the
/// project narrows it to that project's report where two projects share a group.
async fn found_in(app: &TestApp, token: &str, project: &str, query: &str) -> Vec<i64> {
    ids_of_reports(
        app.get_as(
            token,
            &format!("/api/v1/search?q={query}&project={project}&per_page=50"),
        )
        .await,
    )
}

/// The ids of the reports a search answer's rows stand for, sorted.
fn ids_of_reports(res: crate::support::TestResponse) -> Vec<i64> {
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let mut ids: Vec<i64> = res.json()["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter(|r| r["kind"] == "report")
        .map(|r| r["id"].as_i64().expect("id"))
        .collect();
    ids.sort_unstable();
    ids
}

async fn group_json(app: &TestApp, token: &str, group: i64) -> Value {
    let res = app.get_as(token, &format!("/api/v1/groups/{group}")).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    res.json()
}

#[tokio::test]
async fn expired_reports_are_deleted_with_their_bytes_while_groups_keep_counts_trends_and_fixes() {
    // Reports: 90 days by default; project Vision overrides to 7 days.
    let settings = settings(0, 90, 500);
    let (app, t) = app_with(&settings).await;
    let set = app
        .send(put_retention(&t, "Vision", &json!({"report_days": 7})))
        .await;
    assert_eq!(set.status, StatusCode::OK, "{}", set.body);

    let commit = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678";
    let old_a = upload(
        &app,
        &t,
        &ima_log("quokka"),
        json!({"project": "Vision"}),
        true,
    )
    .await;
    let old_b = upload(
        &app,
        &t,
        &ima_log("wombat"),
        json!({"project": "Vision", "commit": commit}),
        true,
    )
    .await;
    let fresh_c = upload(
        &app,
        &t,
        &ima_log("platypus"),
        json!({"project": "Vision"}),
        false,
    )
    .await;
    let old_nlp = upload(
        &app,
        &t,
        &ima_log("echidna"),
        json!({"project": "nlp"}),
        false,
    )
    .await;
    let fresh_nlp = upload(
        &app,
        &t,
        &ima_log("dingo"),
        json!({"project": "nlp"}),
        false,
    )
    .await;
    // A failure only Vision had, all of it old.
    let old_oom = upload(
        &app,
        &t,
        &oom_log("kookaburra"),
        json!({"project": "Vision"}),
        false,
    )
    .await;
    let group = old_a["group_id"].as_i64().unwrap();
    for r in [&old_b, &fresh_c, &old_nlp, &fresh_nlp] {
        assert_eq!(r["group_id"], group, "one failure, one group");
    }
    let oom_group = old_oom["group_id"].as_i64().unwrap();
    let fix = app
        .post_json(
            &t,
            &format!("/api/v1/groups/{group}/fixes"),
            &json!({"summary": "clamp the embedding index"}),
        )
        .await;
    assert_eq!(fix.status, StatusCode::CREATED, "{}", fix.body);

    let expired = [id(&old_a), id(&old_b), id(&old_oom)];
    let kept = [id(&fresh_c), id(&old_nlp), id(&fresh_nlp)];
    backdate(
        &app,
        &[id(&old_a), id(&old_b), id(&old_nlp), id(&old_oom)],
        10,
    )
    .await;

    let before = group_json(&app, &t, group).await;
    assert_eq!(before["count"], 5);
    let (trend_before, _) = gpu_triage::app::triage::trends(&app.db, &[group, oom_group], 30)
        .await
        .unwrap();
    let first_seen = |db: &gpu_triage::storage::Db| {
        let db = db.clone();
        async move {
            gpu_triage::storage::group_triage::commit_first_seen(db.pool(), "Vision", commit, 0)
                .await
                .unwrap()
        }
    };
    let commit_seen = first_seen(&app.db).await;
    assert!(commit_seen.is_some());
    assert_eq!(rows_of(&app, "jobs", "report_id", &expired).await, 2);
    assert!(log_bytes_of(&app, &expired).await > 0);
    assert_eq!(found_reports(&app, &t, "quokka").await, vec![id(&old_a)]);

    let summary = pass(&app, &settings).await;
    assert_eq!(summary.removed.reports, 3, "{summary:?}");
    assert_eq!(summary.removed.logs, 0);
    assert!(summary.removed.bytes > 0);

    // Gone: rows, log bytes, search rows, jobs (and what hangs off them).
    for (table, column) in [
        ("reports", "id"),
        ("report_log_chunks", "report_id"),
        ("report_search", "report_id"),
        ("jobs", "report_id"),
    ] {
        assert_eq!(rows_of(&app, table, column, &expired).await, 0, "{table}");
        assert_eq!(
            rows_of(&app, table, column, &kept).await > 0,
            table != "jobs"
        );
    }
    assert_eq!(log_bytes_of(&app, &expired).await, 0);
    assert!(log_bytes_of(&app, &kept).await > 0);
    // Search, the API and the portal no longer find them; the kept ones still are.
    for (marker, report) in [
        ("quokka", &old_a),
        ("wombat", &old_b),
        ("kookaburra", &old_oom),
    ] {
        assert!(found_reports(&app, &t, marker).await.is_empty(), "{marker}");
        let res = app
            .get_as(&t, &format!("/api/v1/reports/{}", id(report)))
            .await;
        assert_eq!(res.status, StatusCode::NOT_FOUND, "{}", res.body);
    }
    assert_eq!(found_reports(&app, &t, "echidna").await, vec![id(&old_nlp)]);
    let b = sign_in(&app, &t).await;
    let gone = page(&app, &b.cookie, &format!("/reports/{}", id(&old_a))).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    let results = page(&app, &b.cookie, "/search?q=quokka").await;
    assert_eq!(results.status, StatusCode::OK);
    assert!(!results.body.contains(&format!("/reports/{}\"", id(&old_a))));
    let kept_page = page(&app, &b.cookie, &format!("/reports/{}", id(&old_nlp))).await;
    assert_eq!(kept_page.status, StatusCode::OK);

    // The groups stay whole: count, first and last seen, trend, fixes, project filter, commits.
    let after = group_json(&app, &t, group).await;
    for field in ["count", "first_seen", "last_seen"] {
        assert_eq!(after[field], before[field], "{field}");
    }
    assert_eq!(after["removed_by_retention"], 2);
    assert_eq!(after["fixes"].as_array().unwrap().len(), 1);
    assert_eq!(after["reports"].as_array().unwrap().len(), 3);
    let oom = group_json(&app, &t, oom_group).await;
    assert_eq!(
        (
            oom["count"].as_i64(),
            oom["reports"].as_array().map(Vec::len)
        ),
        (Some(1), Some(0))
    );
    assert_eq!(
        oom["tags"]["project"][0]["value"], "Vision",
        "{}",
        oom["tags"]
    );
    let (trend_after, _) = gpu_triage::app::triage::trends(&app.db, &[group, oom_group], 30)
        .await
        .unwrap();
    assert_eq!(trend_after, trend_before);
    assert_eq!(first_seen(&app.db).await, commit_seen);
    let listed = app.get_as(&t, "/api/v1/groups?project=vision").await;
    let ids: Vec<i64> = listed.json()["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["id"].as_i64().unwrap())
        .collect();
    assert!(ids.contains(&oom_group), "{}", listed.body);
    let group_page = page(&app, &b.cookie, &format!("/groups/{group}")).await;
    assert_eq!(
        texts(&group_page.body, "#removed-by-retention"),
        ["(2 removed by retention)"]
    );

    // A second pass finds nothing more; the page shows what was removed from Vision.
    let again = pass(&app, &settings).await;
    assert_eq!(again, PassSummary::default());
    assert_eq!(group_json(&app, &t, group).await["count"], 5);
    let overview = app.get_as(&t, "/api/v1/retention").await.json();
    let vision = overview["projects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["project"] == "vision")
        .cloned()
        .unwrap();
    assert_eq!(vision["removed"]["reports"], 3, "{vision}");
    assert_eq!(vision["report_days"], 7);
    assert_eq!(overview["runs"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn an_expired_log_leaves_the_report_and_its_classification_and_search_forgets_its_lines() {
    // Vision keeps raw logs 7 days; everything else keeps everything.
    let settings = settings(0, 0, 500);
    let (app, t) = app_with(&settings).await;
    let set = app
        .send(put_retention(&t, "vision", &json!({"log_days": 7})))
        .await;
    assert_eq!(set.status, StatusCode::OK, "{}", set.body);
    let vision = upload(
        &app,
        &t,
        &ima_log("quokka"),
        json!({"project": "Vision"}),
        false,
    )
    .await;
    let nlp = upload(
        &app,
        &t,
        &ima_log("wombat"),
        json!({"project": "nlp"}),
        false,
    )
    .await;
    backdate(&app, &[id(&vision), id(&nlp)], 10).await;
    let before = app
        .get_as(&t, &format!("/api/v1/reports/{}", id(&vision)))
        .await
        .json();
    assert!(before["log_removed"].is_null());
    assert_eq!(
        found_in(&app, &t, "vision", "train.py").await,
        vec![id(&vision)]
    );
    assert_eq!(found_in(&app, &t, "nlp", "train.py").await, vec![id(&nlp)]);

    let summary = pass(&app, &settings).await;
    assert_eq!((summary.removed.logs, summary.removed.reports), (1, 0));

    assert_eq!(rows_of(&app, "reports", "id", &[id(&vision)]).await, 1);
    assert_eq!(
        rows_of(&app, "report_log_chunks", "report_id", &[id(&vision)]).await,
        0
    );
    assert_eq!(log_bytes_of(&app, &[id(&vision)]).await, 0);
    assert!(log_bytes_of(&app, &[id(&nlp)]).await > 0);
    let after = app
        .get_as(&t, &format!("/api/v1/reports/{}", id(&vision)))
        .await
        .json();
    assert_eq!(after["classification"], before["classification"]);
    assert_eq!(after["log_removed"]["after_days"], 7, "{after}");
    assert!(after["log_removed"]["at"].is_string());
    // Log lines (excerpt) and frames are no longer searchable; the classification still is.
    assert!(found_in(&app, &t, "vision", "quokka").await.is_empty());
    assert_eq!(found_in(&app, &t, "nlp", "wombat").await, vec![id(&nlp)]);
    assert!(found_in(&app, &t, "vision", "train.py").await.is_empty());
    assert_eq!(found_in(&app, &t, "nlp", "train.py").await, vec![id(&nlp)]);
    assert_eq!(
        found_in(&app, &t, "vision", "illegal+memory+access").await,
        vec![id(&vision)]
    );
    assert_eq!(
        found_in(&app, &t, "nlp", "illegal+memory+access").await,
        vec![id(&nlp)]
    );

    // The page shows the classification and says the log was removed; the download is gone.
    let b = sign_in(&app, &t).await;
    let shown = page(&app, &b.cookie, &format!("/reports/{}", id(&vision))).await;
    assert_eq!(shown.status, StatusCode::OK, "{}", shown.body);
    let note = texts(&shown.body, "#log-removed").concat();
    assert!(
        note.contains("removed by retention just now") && note.contains("after 7 days"),
        "{note}"
    );
    assert!(
        texts(&shown.body, "#root-cause")
            .concat()
            .contains("illegal memory access")
    );
    assert!(texts(&shown.body, "pre.log").is_empty());
    let grep = page(
        &app,
        &b.cookie,
        &format!("/reports/{}?grep=loss", id(&vision)),
    )
    .await;
    assert_eq!(grep.status, StatusCode::OK);
    let raw = page(&app, &b.cookie, &format!("/reports/{}/raw", id(&vision))).await;
    assert_eq!(raw.status, StatusCode::GONE, "{}", raw.body);
    let raw = page(&app, &b.cookie, &format!("/reports/{}/raw", id(&nlp))).await;
    assert_eq!(raw.status, StatusCode::OK);
    assert!(raw.body.contains("model=wombat"));

    // Reclassification leaves a report without its log as it is (nothing to read again).
    let handle = gpu_triage::app::team_rules::RulesetHandle::new(std::sync::Arc::new(
        gpu_triage::rules::Ruleset::builtin().unwrap(),
    ));
    let run = gpu_triage::app::team_rules::reclassify::open_run(
        &app.db,
        handle.version(),
        &gpu_triage::actor::Actor::Service("t"),
    )
    .await
    .unwrap()
    .expect("no run going");
    gpu_triage::app::team_rules::reclassify::run_all(&app.db, &handle, &run)
        .await
        .unwrap();
    let reclassified = app
        .get_as(&t, &format!("/api/v1/reports/{}", id(&vision)))
        .await
        .json();
    assert_eq!(reclassified["classification"], before["classification"]);
    assert_eq!(reclassified["group_id"], before["group_id"]);

    // Idempotent.
    assert_eq!(pass(&app, &settings).await, PassSummary::default());
}

#[tokio::test]
async fn one_pass_removes_more_than_a_batch_and_the_background_task_runs_passes_by_itself() {
    // Batches of 3; reports kept 1 day by default, project "logs" keeps reports but not logs.
    let settings = settings(0, 1, 3);
    let (app, t) = app_with(&settings).await;
    let set = app
        .send(put_retention(
            &t,
            "logs",
            &json!({"log_days": 1, "report_days": 0}),
        ))
        .await;
    assert_eq!(set.status, StatusCode::OK, "{}", set.body);
    let mut bulk = Vec::new();
    let mut logs = Vec::new();
    for i in 0..8 {
        bulk.push(id(&upload(
            &app,
            &t,
            &oom_log(&format!("bulk run {i}")),
            json!({"project": "bulk"}),
            false,
        )
        .await));
    }
    for i in 0..5 {
        logs.push(id(&upload(
            &app,
            &t,
            &oom_log(&format!("logs run {i}")),
            json!({"project": "logs"}),
            false,
        )
        .await));
    }
    backdate(&app, &bulk, 2).await;
    backdate(&app, &logs, 2).await;

    let summary = pass(&app, &settings).await;
    assert_eq!(
        (summary.removed.reports, summary.removed.logs),
        (8, 5),
        "{summary:?}"
    );
    assert_eq!(rows_of(&app, "reports", "id", &bulk).await, 0);
    assert_eq!(rows_of(&app, "reports", "id", &logs).await, 5);
    assert_eq!(
        rows_of(&app, "report_log_chunks", "report_id", &logs).await,
        0
    );
    assert_eq!(pass(&app, &settings).await, PassSummary::default());

    // `serve`'s task: new old reports go without anyone running a pass.
    let later = id(&upload(
        &app,
        &t,
        &oom_log("late run"),
        json!({"project": "bulk"}),
        false,
    )
    .await);
    backdate(&app, &[later], 2).await;
    let task = retention::spawn(app.db.clone(), settings.clone());
    crate::support::wait_until_async(
        std::time::Duration::from_secs(30),
        "the background pass to delete the old report",
        async || rows_of(&app, "reports", "id", &[later]).await == 0,
    )
    .await;
    task.abort();
    let group = group_json(&app, &t, bulk_group(&app).await).await;
    assert_eq!(group["count"], 14, "{group}");
}

/// The one group the OOM uploads share.
async fn bulk_group(app: &TestApp) -> i64 {
    sqlx::query_scalar("SELECT id FROM groups WHERE category = 'out_of_memory'")
        .fetch_one(app.db.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn retention_run_on_the_command_line_applies_the_defaults_it_is_given() {
    let (db, options) = crate::support::fresh_db().await;
    let app = TestApp::on(db);
    let t = app.token("root", &[Scope::Admin]).await;
    let old = id(&upload(
        &app,
        &t,
        &oom_log("cli old"),
        json!({"project": "cli"}),
        false,
    )
    .await);
    let fresh = id(&upload(
        &app,
        &t,
        &oom_log("cli fresh"),
        json!({"project": "cli"}),
        false,
    )
    .await);
    backdate(&app, &[old], 3).await;
    let url = crate::support::database_url(options.get_database().unwrap());
    let out = tokio::task::spawn_blocking(move || {
        crate::support::binary()
            .args(["retention", "run", "--report-retention-days", "2"])
            .env("DATABASE_URL", url)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("cli: 1 reports deleted"), "{stdout}");
    assert!(
        stdout.contains("retention pass done: 1 reports deleted"),
        "{stdout}"
    );
    assert_eq!(rows_of(&app, "reports", "id", &[old]).await, 0);
    assert_eq!(rows_of(&app, "reports", "id", &[fresh]).await, 1);
}

/// `PUT /api/v1/projects/{project}/retention` with `body`.
fn put_retention(
    token: &str,
    project: &str,
    body: &Value,
) -> axum::http::Request<axum::body::Body> {
    axum::http::Request::put(format!("/api/v1/projects/{project}/retention"))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .unwrap()
}
