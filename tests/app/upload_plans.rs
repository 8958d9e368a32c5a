//! Uploads do not slow down as groups grow (issue 42 item 1): every statement an upload runs
//! reads `groups` and `reports` through an index even before the planner has statistics on
//! them. A fresh server's tables are not analyzed until autovacuum gets to them, and a plan
//! that scans every group then costs each upload in proportion to the groups stored.
//!
//! The statements are not copied here: the application runs real uploads on connections that
//! load PostgreSQL's `auto_explain`, which sends the plan of every statement it executes
//! (foreign-key checks included) to the client as a notice, and sqlx hands notices to
//! `tracing`, where this test collects them.

use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use gpu_triage::auth::Scope;
use gpu_triage::storage::Db;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

use crate::support::{TestApp, fresh_db};

/// Groups (and twice as many reports) stored before the uploads: enough that a scan of every
/// group costs more than an index lookup by any estimate.
const GROUPS: i64 = 3000;

/// The plans `auto_explain` sent while the collector was installed, as JSON.
#[derive(Clone, Default)]
struct Plans(Arc<Mutex<Vec<serde_json::Value>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Plans {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != "sqlx::postgres::notice" {
            return;
        }
        struct Message(String);
        impl Visit for Message {
            fn record_str(&mut self, field: &Field, value: &str) {
                if field.name() == "message" {
                    value.clone_into(&mut self.0);
                }
            }
            fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        // "duration: 0.123 ms  plan:\n{ ... }"
        if let Some((_, json)) = message.0.split_once("plan:")
            && let Ok(plan) = serde_json::from_str(json.trim())
        {
            self.0.lock().unwrap().push(plan);
        }
    }
}

/// Fills the fresh database with `GROUPS` groups of distinct failures that share their
/// wording (as real signatures do), two reports each, a fix on a few, with autovacuum off for
/// those tables so that nothing analyzes them during the test.
async fn seed_unanalyzed(db: &Db) {
    for sql in [
        "ALTER TABLE groups SET (autovacuum_enabled = false)",
        "ALTER TABLE reports SET (autovacuum_enabled = false)",
        "ALTER TABLE report_search SET (autovacuum_enabled = false)",
        "ALTER TABLE report_log_chunks SET (autovacuum_enabled = false)",
        "ALTER TABLE group_bands SET (autovacuum_enabled = false)",
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(db.pool())
            .await
            .unwrap();
    }
    // Letters only: digits are normalized away in signatures and fingerprints.
    sqlx::query(
        "INSERT INTO groups (fingerprint, category, title, root_cause_text, signature) \
         SELECT 'seed-' || i, 'unknown', 'ValueError', \
             'ValueError: unknown layer kind ' || w, \
             'ValueError: unknown layer kind ' || w || ' train.py:<module> model_' || \
                 translate((i % 40)::text, '0123456789', 'abcdefghij') || '.py:forward' \
         FROM (SELECT i, translate(md5(i::text), '0123456789', 'ghijklmnop') AS w \
               FROM generate_series(1, $1) i) s",
    )
    .bind(GROUPS)
    .execute(db.pool())
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO reports (project, commit_sha, group_id, category, title, confidence, \
             root_cause_text, fingerprint, classification, log_sha256, log_bytes, log_lines, \
             signature, created_at) \
         SELECT 'vision', substr(md5(g.id::text), 1, 12), g.id, g.category, g.title, 'low', \
             g.root_cause_text, g.fingerprint, '{}'::jsonb, sha256((g.id * 2 + k)::text::bytea), \
             100, 3, g.signature, now() - make_interval(secs => g.id * 2 + k) \
         FROM groups g CROSS JOIN generate_series(0, 1) k",
    )
    .execute(db.pool())
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO fixes (group_id, summary) \
         SELECT id, 'register the layer kind' FROM groups WHERE id % 100 = 0",
    )
    .execute(db.pool())
    .await
    .unwrap();
    let analyzed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stats WHERE tablename IN ('groups', 'reports', 'group_bands')",
    )
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert_eq!(analyzed, 0, "the tables must stay without statistics");
}

/// A log of a failure no seeded group has, raised from `model_b.py`; `step` changes its bytes
/// but not its failure.
fn log(kind: &str, step: u32) -> String {
    format!(
        "step {step} loss=0.25\n\
         Traceback (most recent call last):\n  \
           File \"/srv/vision/train.py\", line 12, in <module>\n    main()\n  \
           File \"/srv/vision/model_b.py\", line 40, in forward\n    x = self.block(x)\n\
         ValueError: unknown layer kind {kind}\n"
    )
}

/// Each `Seq Scan` of `groups`, `reports` or `group_bands` in `plan`, with the query that ran
/// it.
fn full_scans(plan: &serde_json::Value, query: &str, out: &mut Vec<String>) {
    if plan["Node Type"] == "Seq Scan"
        && matches!(
            plan["Relation Name"].as_str(),
            Some("groups" | "reports" | "group_bands")
        )
    {
        out.push(format!(
            "Seq Scan on {} in: {query}",
            plan["Relation Name"].as_str().unwrap_or_default()
        ));
    }
    for child in plan["Plans"].as_array().into_iter().flatten() {
        full_scans(child, query, out);
    }
}

/// Whether `plan` reads `relation` through one of its indexes.
fn reads_by_index(plan: &serde_json::Value, relation: &str) -> bool {
    (matches!(
        plan["Node Type"].as_str(),
        Some("Index Scan" | "Index Only Scan")
    ) && plan["Relation Name"] == relation)
        || plan["Plans"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| reads_by_index(p, relation))
}

#[tokio::test]
async fn every_upload_statement_reads_groups_and_reports_by_index_before_any_analyze() {
    let (seeding, options) = fresh_db().await;
    seed_unanalyzed(&seeding).await;
    // Keyed as a server does at start: the band-key table is as large as the groups'.
    gpu_triage::app::similar::key_groups(&seeding)
        .await
        .unwrap();
    seeding.pool().close().await;
    // These connections explain every statement they execute, nested ones included.
    let db = Db::connect_lazy(
        options.options([
            ("session_preload_libraries", "auto_explain"),
            ("auto_explain.log_min_duration", "0"),
            ("auto_explain.log_format", "json"),
            ("auto_explain.log_level", "notice"),
            ("auto_explain.log_nested_statements", "on"),
        ]),
        4,
    );
    db.migrate().await.unwrap();
    let app = TestApp::on(db);
    let token = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    // A group whose failure is resolved at a commit, so that an upload runs the regression
    // rule (reads of the report's build and the project's commits).
    let resolved = app
        .upload(
            &token,
            &[("log", Some("a.log"), log("conv_resolved", 1).as_bytes())],
            None,
        )
        .await;
    assert_eq!(resolved.status, StatusCode::CREATED, "{}", resolved.body);
    sqlx::query(
        "UPDATE groups SET state = 'resolved', resolved_in = 'abcdef1' \
         WHERE id = $1",
    )
    .bind(resolved.json()["group_id"].as_i64().unwrap())
    .execute(app.db.pool())
    .await
    .unwrap();

    let plans = Plans::default();
    let subscriber = tracing_subscriber::registry().with(plans.clone());
    let _collecting = tracing::subscriber::set_default(subscriber);
    // Callsites first hit by another test's thread while this subscriber was registered may
    // have cached "never" (see request_id.rs): compute every interest again.
    tracing::callsite::rebuild_interest_cache();

    let meta = br#"{"project":"vision","commit":"0123456789ab","version":"2.1.0"}"#;
    let uploads: [(&str, String, Option<&str>, bool); 6] = [
        // A failure never seen before: a new group, and its similar groups looked up.
        ("new", log("conv_hkpq", 1), None, true),
        // The same failure again: a recurring one.
        ("recurring", log("conv_hkpq", 2), None, false),
        // The same bytes again: a duplicate.
        ("duplicate", log("conv_hkpq", 2), None, false),
        // With an idempotency key, then its retry (the first answer replayed).
        ("keyed", log("conv_hkpq", 3), Some("k-1"), false),
        ("replayed", log("conv_hkpq", 3), Some("k-1"), false),
        // A report in the resolved group from another commit: the regression rule runs.
        ("regression", log("conv_resolved", 2), None, false),
    ];
    for (what, text, key, with_script) in &uploads {
        let mut parts: Vec<(&str, Option<&str>, &[u8])> = vec![
            ("log", Some("train.log"), text.as_bytes()),
            ("meta", None, meta),
        ];
        if *with_script {
            parts.push(("script", Some("repro.py"), b"import torch\n"));
        }
        let res = app.upload(&token, &parts, *key).await;
        assert!(res.status.is_success(), "{what}: {}", res.body);
    }
    drop(_collecting);

    let plans = plans.0.lock().unwrap().clone();
    assert!(plans.len() > 20, "auto_explain sent {} plans", plans.len());
    let mut scans = Vec::new();
    for p in &plans {
        full_scans(
            &p["Plan"],
            p["Query Text"].as_str().unwrap_or(""),
            &mut scans,
        );
    }
    assert!(
        scans.is_empty(),
        "statements of an upload scan a whole table before statistics exist:\n{}",
        scans.join("\n")
    );
    let nearest: Vec<_> = plans
        .iter()
        .filter(|p| {
            p["Query Text"]
                .as_str()
                .is_some_and(|q| q.contains("FROM group_bands") && q.contains("LATERAL"))
        })
        .collect();
    assert!(
        !nearest.is_empty(),
        "no similar-groups lookup was explained"
    );
    for p in nearest {
        assert!(
            reads_by_index(&p["Plan"], "group_bands") && reads_by_index(&p["Plan"], "groups"),
            "the similar-groups lookup does not read its band keys and candidates by index: {:#}",
            p["Plan"]
        );
    }
}
