//! A run keeps its first failure when the rules change (issue 41 item 1 of the rest): a
//! reclassification (a team rule saved) and a regroup (the grouping scheme raised) tell the
//! run's story again over its files, so its headline, first failure and group stay the
//! asserting rank's, not whatever the joined text of all its files would classify as.

use axum::http::StatusCode;
use gpu_triage::app::team_rules::RulesetHandle;
use gpu_triage::app::team_rules::reclassify;
use gpu_triage::auth::Scope;
use serde_json::Value;

use crate::support::TestApp;

/// Rank `rank`'s NCCL watchdog timeout, written at `at` (glog time).
fn timeout(rank: u32, at: &str) -> String {
    format!(
        "[rank{rank}]:[I1125 {at}.000001 {pid} ProcessGroupNCCL.cpp:1200] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] ProcessGroupNCCL initialized\n\
         [rank{rank}]:[E1125 {at}.512345 {pid} ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=57, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600034 milliseconds before timing out.\n\
         [rank{rank}]:[E1125 {at}.612345 {pid} ProcessGroupNCCL.cpp:1664] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] Exception (either an error or timeout) detected by watchdog at work: 57, last enqueued NCCL work: 57, last completed NCCL work: 56.\n\
         [rank{rank}]:[E1125 {at}.712345 {pid} ProcessGroupNCCL.cpp:630] [Rank {rank}] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.\n\
         [rank{rank}]:[E1125 {at}.812345 {pid} ProcessGroupNCCL.cpp:636] [Rank {rank}] To avoid data inconsistency, we are taking the entire process down.\n",
        pid = 4000 + rank
    )
}

/// Rank 3 asserts first; ranks 0-2 time out in the collective it never entered. The timeouts
/// come first in upload order, so the joined log opens with them.
fn run_files() -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = (0..3)
        .map(|r| (format!("rank{r}.log"), timeout(r, "10:12:07")))
        .collect();
    files.push((
        "rank3.log".into(),
        "[rank3]:[I1125 10:02:01.000001 4003 ProcessGroupNCCL.cpp:1200] [PG ID 0 PG GUID 0(default_pg) Rank 3] ProcessGroupNCCL initialized\n\
         [rank3]: step 56 loss 2.31\n\
         [rank3]:[W1125 10:02:06.100000 4003 train.py:88] checking labels\n\
         [rank3]: Traceback (most recent call last):\n\
         [rank3]:   File \"/srv/seg/train.py\", line 121, in <module>\n\
         [rank3]:     main()\n\
         [rank3]:   File \"/srv/seg/train.py\", line 97, in main\n\
         [rank3]:     assert labels.max() < num_classes, f\"label {labels.max()} out of range for {num_classes} classes\"\n\
         [rank3]: AssertionError: label 1000 out of range for 10 classes\n"
            .into(),
    ));
    files
}

/// What must hold of the run whatever the rules did: rank 3's assert is the first failure,
/// the report's headline and root-cause line are its, and it sits in `group`.
fn assert_rank3(body: &Value, group: &Value) {
    let first = &body["first_failure"];
    assert_eq!(first["file"], "rank3.log", "{body}");
    assert_eq!(first["rank"], 3, "{first}");
    assert!(
        first["text"]
            .as_str()
            .is_some_and(|t| t.contains("AssertionError: label 1000")),
        "{first}"
    );
    assert!(
        body["classification"]["root_cause"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("AssertionError: label 1000")),
        "the headline is the first failure's: {}",
        body["classification"]["root_cause"]
    );
    let rank3 = body["files"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["name"] == "rank3.log"))
        .expect("rank3.log");
    assert_eq!(
        body["classification"]["root_cause"]["line"].as_u64(),
        Some(rank3["first_line"].as_u64().expect("first line") + 8),
        "the root-cause line is rank3.log's line 9 in the joined log"
    );
    assert_eq!(body["action"]["kind"], "fix_code", "{}", body["action"]);
    assert_eq!(
        &body["group_id"], group,
        "the run stays in its first failure's group"
    );
    for r in 0..3 {
        let f = body["files"]
            .as_array()
            .and_then(|f| f.iter().find(|f| f["name"] == format!("rank{r}.log")))
            .expect("rank file");
        assert_eq!(f["role"], "consequence", "{f}");
    }
}

async fn detail(app: &TestApp, token: &str, id: i64) -> Value {
    let res = app.get_as(token, &format!("/api/v1/reports/{id}")).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    res.json()
}

#[tokio::test]
async fn a_reclassified_or_regrouped_run_keeps_its_first_failure_and_group() {
    let app = TestApp::spawn().await;
    let token = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let files = run_files();
    let parts: Vec<(&str, Option<&str>, &[u8])> = files
        .iter()
        .map(|(n, t)| ("log", Some(n.as_str()), t.as_bytes()))
        .collect();
    let res = app.upload(&token, &parts, None).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let created = res.json();
    let id = created["id"].as_i64().expect("id");
    let group = created["group_id"].clone();
    assert_rank3(&created, &group);
    // The group is rank 3's own: its log alone lands in it.
    let alone = app
        .upload(
            &token,
            &[("log", Some("rank3.log"), files[3].1.as_bytes())],
            None,
        )
        .await;
    assert_eq!(alone.json()["group_id"], group);

    // A reclassification (what saving a team rule starts).
    let handle = RulesetHandle::new(std::sync::Arc::new(
        gpu_triage::rules::Ruleset::builtin().expect("rules"),
    ));
    let run = reclassify::start(&app.db, &handle, &gpu_triage::actor::Actor::Service("test"))
        .await
        .expect("no run going");
    crate::support::wait_until_async(
        std::time::Duration::from_secs(60),
        "the reclassification to end",
        async || {
            let state: String =
                sqlx::query_scalar("SELECT state FROM reclassify_runs WHERE id = $1")
                    .bind(run.id)
                    .fetch_one(app.db.pool())
                    .await
                    .expect("run row");
            state != "running"
        },
    )
    .await;
    let (state, changed): (String, i64) =
        sqlx::query_as("SELECT state, changed FROM reclassify_runs WHERE id = $1")
            .bind(run.id)
            .fetch_one(app.db.pool())
            .await
            .expect("run row");
    assert_eq!(
        (state.as_str(), changed),
        ("done", 0),
        "same rules, same story"
    );
    let after = detail(&app, &token, id).await;
    assert_rank3(&after, &group);
    assert_eq!(
        after["files"], created["files"],
        "the story is told again the same"
    );

    // A regroup: the reports were stored under an older grouping scheme.
    sqlx::query("UPDATE instance SET grouping_scheme = 1")
        .execute(app.db.pool())
        .await
        .expect("scheme");
    assert!(
        reclassify::regroup_if_needed(&app.db, &handle)
            .await
            .expect("regroup")
    );
    let regrouped = detail(&app, &token, id).await;
    assert_rank3(&regrouped, &group);
    assert_eq!(regrouped["first_failure"], created["first_failure"]);
}
