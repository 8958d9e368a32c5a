//! Groups follow the failure in the code (issue 39 item 1): two programs raising the same
//! error sentence are two groups, the same program failing again (other numbers, other line
//! numbers, another host) is one; an environment failure joins whatever code ran into it; and
//! reports stored under the older grouping are regrouped once when `serve` starts.

use axum::http::StatusCode;
use gpu_triage::app::team_rules::RulesetHandle;
use gpu_triage::app::team_rules::reclassify::regroup_if_needed;
use gpu_triage::auth::Scope;

use crate::support::TestApp;

/// A device mismatch raised in `program`'s own `module.function`, at line `line`.
fn mismatch(program: &str, module: &str, function: &str, line: u32, pid: u32) -> String {
    format!(
        "[pid {pid}] epoch 3 step 1{line}\n\
         Traceback (most recent call last):\n\
         \x20 File \"/srv/{program}/train.py\", line 4{line}, in <module>\n\
         \x20   main()\n\
         \x20 File \"/srv/{program}/train.py\", line 3{line}, in main\n\
         \x20   out = model(x)\n\
         \x20 File \"/usr/local/lib/python3.12/dist-packages/torch/nn/modules/module.py\", line 1736, in _call_impl\n\
         \x20   return forward_call(*args, **kwargs)\n\
         \x20 File \"/srv/{program}/{module}.py\", line {line}, in {function}\n\
         \x20   return self.head(x)\n\
         RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!\n"
    )
}

/// A driver too old for the CUDA runtime, as `program` prints it.
fn driver_too_old(program: &str, found: u32) -> String {
    format!(
        "Traceback (most recent call last):\n\
         \x20 File \"/srv/{program}/serve.py\", line 9, in <module>\n\
         \x20   torch.zeros(1).cuda()\n\
         RuntimeError: The NVIDIA driver on your system is too old (found version {found}). Please update your GPU driver by downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx\n"
    )
}

async fn upload(app: &TestApp, token: &str, log: &str) -> (i64, i64) {
    let res = app
        .upload(token, &[("log", Some("run.log"), log.as_bytes())], None)
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let v = res.json();
    (
        v["id"].as_i64().expect("report id"),
        v["group_id"].as_i64().expect("group id"),
    )
}

#[tokio::test]
async fn the_same_sentence_from_two_programs_is_two_groups_and_a_rerun_is_one() {
    let app = TestApp::spawn().await;
    let token = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let (_, vision) = upload(
        &app,
        &token,
        &mismatch("vision", "resnet", "forward", 12, 7),
    )
    .await;
    // The same program failing again: other pid, step and line numbers (the function moved).
    let (_, rerun) = upload(
        &app,
        &token,
        &mismatch("vision", "resnet", "forward", 57, 9131),
    )
    .await;
    let (_, nlp) = upload(&app, &token, &mismatch("nlp", "bert", "classify", 12, 7)).await;
    assert_eq!(vision, rerun, "a re-run of one failure is one group");
    assert_ne!(vision, nlp, "another program's mismatch is another bug");
    // An environment failure joins whatever code ran into it.
    let (_, a) = upload(&app, &token, &driver_too_old("vision", 11040)).await;
    let (_, b) = upload(&app, &token, &driver_too_old("nlp", 10020)).await;
    assert_eq!(a, b, "one remedy: update the driver");
}

#[tokio::test]
async fn reports_grouped_the_old_way_are_regrouped_once() {
    let app = TestApp::spawn().await;
    let token = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let (first, group_a) = upload(
        &app,
        &token,
        &mismatch("vision", "resnet", "forward", 12, 7),
    )
    .await;
    let (second, group_b) = upload(&app, &token, &mismatch("nlp", "bert", "classify", 12, 7)).await;
    assert_ne!(group_a, group_b);
    // As scheme 1 stored them: one group keyed by the sentence alone, holding both.
    let pool = app.db.pool();
    let old: i64 = sqlx::query_scalar(
        "INSERT INTO groups (fingerprint, category, title, root_cause_text) \
         SELECT 'scheme-1', category, title, root_cause_text FROM groups WHERE id = $1 \
         RETURNING id",
    )
    .bind(group_a)
    .fetch_one(pool)
    .await
    .expect("old group");
    sqlx::query("UPDATE reports SET group_id = $1, fingerprint = 'scheme-1' WHERE id = ANY($2)")
        .bind(old)
        .bind(vec![first, second])
        .execute(pool)
        .await
        .expect("move");
    let search_groups = async || -> Vec<i64> {
        sqlx::query_scalar(
            "SELECT group_id FROM report_search WHERE report_id = ANY($1) ORDER BY report_id",
        )
        .bind(vec![first, second])
        .fetch_all(pool)
        .await
        .expect("search groups")
    };
    assert_eq!(
        search_groups().await,
        [old, old],
        "search rows follow a move"
    );
    sqlx::query("UPDATE instance SET grouping_scheme = 1")
        .execute(pool)
        .await
        .expect("scheme");

    let ruleset = std::sync::Arc::new(gpu_triage::rules::Ruleset::builtin().expect("rules"));
    let handle = RulesetHandle::new(ruleset);
    assert!(regroup_if_needed(&app.db, &handle).await.expect("regroup"));
    let groups: Vec<i64> =
        sqlx::query_scalar("SELECT group_id FROM reports WHERE id = ANY($1) ORDER BY id")
            .bind(vec![first, second])
            .fetch_all(pool)
            .await
            .expect("groups");
    assert_eq!(
        groups,
        [group_a, group_b],
        "each back in the group of its own code"
    );
    // Their search rows moved with them (search collapses hits by the group these name).
    assert_eq!(search_groups().await, [group_a, group_b]);
    let scheme: i32 = sqlx::query_scalar("SELECT grouping_scheme FROM instance")
        .fetch_one(pool)
        .await
        .expect("scheme");
    assert_eq!(scheme, gpu_triage::rules::GROUPING_SCHEME);
    // Once is enough: the next start finds nothing to do.
    assert!(!regroup_if_needed(&app.db, &handle).await.expect("regroup"));
}
