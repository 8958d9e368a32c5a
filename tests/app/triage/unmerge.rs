//! Unmerging groups (issue 39 item 5) through `POST /api/v1/groups/{id}/unmerge`: exactly what
//! belongs to the group goes back (reports, fixes, counts of deleted reports, history), after
//! chained merges and after uploads its fingerprint sent to the group that held it; the
//! refusals; bulk merges; and an upload that meets an unmerge half way.

use std::sync::Arc;

use axum::http::StatusCode;
use gpu_triage::auth::Scope;
use serde_json::{Value, json};

use super::bulk::post_raw;
use super::{device_log, group, upload};
use crate::support::{TestApp, TestResponse, wait_for_lock_wait};

async fn merge(app: &TestApp, token: &str, id: i64, into: i64) -> TestResponse {
    let body = json!({ "into": into }).to_string();
    post_raw(app, token, &format!("/api/v1/groups/{id}/merge"), &body).await
}

async fn unmerge(app: &TestApp, token: &str, id: i64) -> TestResponse {
    post_raw(app, token, &format!("/api/v1/groups/{id}/unmerge"), "").await
}

/// The ids of the reports a group lists, ascending.
fn report_ids(g: &Value) -> Vec<i64> {
    let mut ids: Vec<i64> = (g["reports"].as_array().unwrap().iter())
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    ids
}

fn fix_summaries(g: &Value) -> Vec<String> {
    let mut s: Vec<String> = (g["fixes"].as_array().unwrap().iter())
        .map(|f| f["summary"].as_str().unwrap().to_owned())
        .collect();
    s.sort();
    s
}

async fn fix(app: &TestApp, token: &str, group: i64, summary: &str) {
    let res = app
        .post_json(
            token,
            &format!("/api/v1/groups/{group}/fixes"),
            &json!({ "summary": summary }),
        )
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
}

#[tokio::test]
async fn an_unmerge_gives_back_exactly_what_belongs_to_the_group_after_chains_and_new_uploads() {
    let app = TestApp::spawn().await;
    let alice = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let (a1, a) = upload(
        &app,
        &alice,
        &device_log("alpha"),
        json!({"project": "vision"}),
    )
    .await;
    let (a2, _) = upload(
        &app,
        &alice,
        &device_log("alpha"),
        json!({"project": "nlp"}),
    )
    .await;
    let (b1, b) = upload(&app, &alice, &device_log("bravo"), Value::Null).await;
    let (c1, c) = upload(&app, &alice, &device_log("charlie"), Value::Null).await;
    fix(&app, &alice, a, "fix of alpha").await;
    fix(&app, &alice, b, "fix of bravo").await;
    sqlx::query(
        "INSERT INTO group_expired_reports (group_id, project, day, reports, last_seen) \
         VALUES ($1, 'vision', '2020-01-02', 3, '2020-01-02T10:00:00Z')",
    )
    .bind(a)
    .execute(app.db.pool())
    .await
    .unwrap();
    let a_before = group(&app, &alice, a).await;
    assert_eq!(a_before["count"], 5);

    // A chain: a into b, then b into c; then a's failure again (it lands in c), and a fix of c.
    assert_eq!(merge(&app, &alice, a, b).await.status, StatusCode::OK);
    assert_eq!(merge(&app, &alice, b, c).await.status, StatusCode::OK);
    let (a3, landed) = upload(&app, &alice, &device_log("alpha"), Value::Null).await;
    assert_eq!(landed, c);
    fix(&app, &alice, c, "fix recorded after the merges").await;
    let held = group(&app, &alice, c).await;
    assert_eq!(held["count"], 8, "5 stored and 3 deleted");
    assert_eq!(report_ids(&held), [a1, a2, b1, c1, a3]);

    // Split b out: b's own and everything of a (merged into b before b's merge) go back.
    let res = unmerge(&app, &alice, b).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let back = res.json();
    assert_eq!(back["id"], b);
    assert_eq!(report_ids(&back), [a1, a2, b1, a3]);
    assert_eq!(back["count"], 7);
    assert_eq!(back["removed_by_retention"], 3);
    assert_eq!(fix_summaries(&back), ["fix of alpha", "fix of bravo"]);
    assert_eq!(
        back["merged_groups"],
        json!([a]),
        "a is merged into b again"
    );
    assert_eq!(back["history"][0]["action"], "unmerge");
    assert_eq!(
        (&back["history"][0]["from"], &back["history"][0]["to"]),
        (&json!(c.to_string()), &json!(b.to_string()))
    );
    // b's own entry of a's merge came back with it, as b's own again.
    let own_merge = (back["history"].as_array().unwrap().iter())
        .find(|e| e["action"] == "merge" && e["from"] == a.to_string().as_str())
        .cloned()
        .expect("a's merge entry");
    assert_eq!(own_merge["merged_from"], Value::Null);
    let kept = group(&app, &alice, c).await;
    assert_eq!(report_ids(&kept), [c1]);
    assert_eq!(kept["count"], 1);
    assert_eq!(fix_summaries(&kept), ["fix recorded after the merges"]);
    assert_eq!(kept["merged_groups"], json!([]));
    assert_eq!(kept["history"][0]["action"], "unmerge");
    let moved = app.get_as(&alice, &format!("/api/v1/groups/{a}")).await;
    assert_eq!(moved.status, StatusCode::PERMANENT_REDIRECT);
    assert_eq!(
        moved.headers["location"],
        format!("/api/v1/groups/{b}").as_str()
    );
    // a's failure now lands in b.
    let (a4, landed) = upload(&app, &alice, &device_log("alpha"), Value::Null).await;
    assert_eq!(landed, b);

    // Split a out of b: exactly a's, the deleted-report counts by project included.
    let res = unmerge(&app, &alice, a).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let a_again = res.json();
    assert_eq!(report_ids(&a_again), [a1, a2, a3, a4]);
    assert_eq!(a_again["count"], 7);
    assert_eq!(a_again["removed_by_retention"], 3);
    assert_eq!(a_again["tags"]["project"], a_before["tags"]["project"]);
    assert_eq!(a_again["first_seen"], a_before["first_seen"]);
    assert_eq!(fix_summaries(&a_again), ["fix of alpha"]);
    let b_now = group(&app, &alice, b).await;
    assert_eq!(report_ids(&b_now), [b1]);
    assert_eq!(fix_summaries(&b_now), ["fix of bravo"]);
    assert_eq!(b_now["removed_by_retention"], 0);
    // Nothing is left pointing anywhere.
    let stray: i64 =
        sqlx::query_scalar("SELECT count(*) FROM reports WHERE merged_from IS NOT NULL")
            .fetch_one(app.db.pool())
            .await
            .unwrap();
    assert_eq!(stray, 0);
    // Search follows the reports home: a's failure is one row, of group a; every search row
    // names its report's group.
    let res = app
        .get_as(&alice, "/api/v1/search?q=wrapper_CUDA__alpha")
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let found = res.json();
    let groups: Vec<i64> = (found["results"].as_array().unwrap().iter())
        .map(|h| h["group"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(groups, [a], "{found}");
    let astray: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM report_search s JOIN reports r ON r.id = s.report_id \
         WHERE s.group_id <> r.group_id",
    )
    .fetch_one(app.db.pool())
    .await
    .unwrap();
    assert_eq!(astray, 0);
}

#[tokio::test]
async fn an_unmerge_of_a_group_that_is_not_merged_or_unknown_or_by_a_reader_is_refused() {
    let app = TestApp::spawn().await;
    let alice = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let reader = app.token("reader", &[Scope::Read]).await;
    let (_, a) = upload(&app, &alice, &device_log("delta"), Value::Null).await;
    let (_, b) = upload(&app, &alice, &device_log("echo"), Value::Null).await;
    let res = unmerge(&app, &alice, a).await;
    assert_eq!(res.status, StatusCode::CONFLICT, "{}", res.body);
    assert_eq!(res.error_code(), "not_merged");
    assert_eq!(
        unmerge(&app, &alice, 999_999).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(merge(&app, &alice, a, b).await.status, StatusCode::OK);
    let res = unmerge(&app, &reader, a).await;
    assert_eq!(res.status, StatusCode::FORBIDDEN, "{}", res.body);
    assert_eq!(group(&app, &alice, b).await["merged_groups"], json!([a]));
    assert_eq!(unmerge(&app, &alice, a).await.status, StatusCode::OK);
    let again = unmerge(&app, &alice, a).await;
    assert_eq!(again.error_code(), "not_merged", "{}", again.body);
}

#[tokio::test]
async fn several_groups_merge_into_one_at_once_and_each_can_be_unmerged() {
    let app = TestApp::spawn().await;
    let alice = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let (_, a) = upload(&app, &alice, &device_log("foxtrot"), Value::Null).await;
    let (_, b) = upload(&app, &alice, &device_log("golf"), Value::Null).await;
    upload(&app, &alice, &device_log("golf"), Value::Null).await;
    let (_, c) = upload(&app, &alice, &device_log("hotel"), Value::Null).await;
    let all = json!({"ids": [a, b, c]}).to_string();
    let res = post_raw(&app, &alice, "/api/v1/groups/merge", &all).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let into = res.json();
    assert_eq!(into["id"], b, "the group with the most reports");
    assert_eq!(into["count"], 4);
    let mut merged: Vec<i64> = (into["merged_groups"].as_array().unwrap().iter())
        .map(|v| v.as_i64().unwrap())
        .collect();
    merged.sort_unstable();
    assert_eq!(merged, [a, c]);
    for (body, status, code) in [
        (
            json!({"ids": [a, c], "into": b}),
            StatusCode::CONFLICT,
            "group_merged",
        ),
        (
            json!({"ids": [b]}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_merge",
        ),
        (
            json!({"ids": [b], "into": b}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_merge",
        ),
        (
            json!({"ids": [b, 999_999]}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_bulk",
        ),
        (
            json!({"ids": [b, b]}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_bulk",
        ),
    ] {
        let res = post_raw(&app, &alice, "/api/v1/groups/merge", &body.to_string()).await;
        assert_eq!(res.status, status, "{body}: {}", res.body);
        assert_eq!(res.error_code(), code, "{body}");
    }
    assert_eq!(unmerge(&app, &alice, c).await.status, StatusCode::OK);
    let left = group(&app, &alice, b).await;
    assert_eq!(left["count"], 3);
    assert_eq!(left["merged_groups"], json!([a]));
}

#[tokio::test]
async fn an_upload_that_meets_an_unmerge_waits_for_it_and_lands_in_the_group_split_out() {
    let app = Arc::new(TestApp::spawn().await);
    let alice = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let (first, a) = upload(&app, &alice, &device_log("india"), Value::Null).await;
    let (_, b) = upload(&app, &alice, &device_log("juliett"), Value::Null).await;
    assert!(a < b, "the group split out is locked first");
    assert_eq!(merge(&app, &alice, a, b).await.status, StatusCode::OK);
    let (routed, landed) = upload(&app, &alice, &device_log("india"), Value::Null).await;
    assert_eq!(landed, b);
    // Hold the holder's row as a triage change would: the unmerge locks a, then waits for b.
    let mut holder = app.db.pool().begin().await.unwrap();
    sqlx::query("SELECT 1 FROM groups WHERE id = $1 FOR NO KEY UPDATE")
        .bind(b)
        .execute(&mut *holder)
        .await
        .unwrap();
    let unmerging = {
        let (app, alice) = (app.clone(), alice.clone());
        tokio::spawn(async move { unmerge(&app, &alice, a).await })
    };
    wait_for_lock_wait(&app.db, "FROM groups WHERE id = $1 FOR NO KEY UPDATE").await;
    // An upload of a's failure now: it must wait for the unmerge, then land in a. (The test
    // pool has four connections: the holder, the unmerge, this upload and the next one.)
    let uploading = {
        let (app, alice) = (app.clone(), alice.clone());
        tokio::spawn(async move { upload(&app, &alice, &device_log("india"), Value::Null).await })
    };
    wait_for_lock_wait(&app.db, "WHERE fingerprint = $1 FOR KEY SHARE").await;
    // One of b's own failure goes on into b meanwhile.
    let (own, into) = upload(&app, &alice, &device_log("juliett"), Value::Null).await;
    assert_eq!(into, b);
    holder.commit().await.unwrap();
    let res = unmerging.await.unwrap();
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let (later, group_id) = uploading.await.unwrap();
    assert_eq!(group_id, a, "the upload followed the unmerge");
    let split = group(&app, &alice, a).await;
    let mut want = vec![first, routed, later];
    want.sort_unstable();
    assert_eq!(report_ids(&split), want);
    let b_now = group(&app, &alice, b).await;
    assert!(report_ids(&b_now).contains(&own));
    assert_eq!(b_now["count"], 2);
}
