//! Merging groups (issue 30 item 3) through `POST /api/v1/groups/{id}/merge`: what moves
//! (reports, counts, fixes, tags, history), where later uploads of the merged failure land, what
//! the merged group's URL answers, the refusals, chains, and an upload that meets a merge half
//! way.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpu_triage::auth::Scope;
use serde_json::{Value, json};

use super::{device_log, group, history, patch, upload};
use crate::support::{TestApp, TestResponse, wait_for_lock_wait};

/// `POST /api/v1/groups/{id}/merge` with a raw body.
async fn merge_raw(app: &TestApp, token: &str, id: i64, body: &str) -> TestResponse {
    let req = Request::post(format!("/api/v1/groups/{id}/merge"))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    app.send(req).await
}

/// Merges group `id` into `into`: the answer.
async fn merge(app: &TestApp, token: &str, id: i64, into: i64) -> TestResponse {
    merge_raw(app, token, id, &json!({ "into": into }).to_string()).await
}

/// Reports stored in group `id` (straight from the database).
async fn stored_reports(app: &TestApp, id: i64) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM reports WHERE group_id = $1")
        .bind(id)
        .fetch_one(app.db.pool())
        .await
        .unwrap()
}

fn ids(v: &Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_i64().unwrap())
        .collect()
}

#[tokio::test]
async fn a_merge_moves_reports_counts_fixes_tags_and_history_and_routes_the_next_upload() {
    let app = TestApp::spawn().await;
    let alice = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let (r1, a) = upload(
        &app,
        &alice,
        &device_log("alpha"),
        json!({"project": "vision"}),
    )
    .await;
    let (r2, a2) = upload(
        &app,
        &alice,
        &device_log("alpha"),
        json!({"project": "nlp"}),
    )
    .await;
    let (r3, b) = upload(
        &app,
        &alice,
        &device_log("bravo"),
        json!({"project": "vision"}),
    )
    .await;
    assert_eq!(a, a2);
    assert_ne!(a, b);
    // Group a: a fix, a triage change, and a report retention deleted (its count kept).
    let fix = app
        .post_json(
            &alice,
            &format!("/api/v1/groups/{a}/fixes"),
            &json!({"summary": "move the tensor to cuda:0 first"}),
        )
        .await;
    assert_eq!(fix.status, StatusCode::CREATED, "{}", fix.body);
    let ignored = patch(&app, &alice, a, json!({"state": "ignored"})).await;
    assert_eq!(ignored.status, StatusCode::OK, "{}", ignored.body);
    sqlx::query(
        "INSERT INTO group_expired_reports (group_id, project, day, reports, last_seen) \
         VALUES ($1, 'vision', '2020-01-02', 3, '2020-01-02T10:00:00Z')",
    )
    .bind(a)
    .execute(app.db.pool())
    .await
    .unwrap();
    let before = group(&app, &alice, a).await;
    assert_eq!(before["count"], 5);

    let res = merge(&app, &alice, a, b).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let merged = res.json();
    // The answer is group b with everything of a.
    assert_eq!(merged["id"], b);
    assert_eq!(merged["count"], 6, "2 + 3 removed + 1");
    assert_eq!(merged["removed_by_retention"], 3);
    assert_eq!(merged["merged_groups"], json!([a]));
    assert_eq!(
        merged["fixes"][0]["summary"],
        "move the tensor to cuda:0 first"
    );
    assert_eq!(merged["fixes"][0]["group_id"], b);
    let mut reports = ids(&merged["reports"]);
    reports.sort_unstable();
    assert_eq!(reports, [r1, r2, r3]);
    assert_eq!(
        merged["first_seen"], before["first_seen"],
        "the earlier first sighting"
    );
    // Tags count every report now: vision 1 + 1 + 3 removed, nlp 1.
    assert_eq!(
        merged["tags"]["project"],
        json!([{"value": "vision", "count": 5}, {"value": "nlp", "count": 1}])
    );
    // The history: the merge, by whom, newest; a's own entry moved along, marked as a's.
    let h = history(&merged);
    assert_eq!(
        (&h[0].0, &h[0].1, &h[0].2, &h[0].3),
        (
            &"alice".to_owned(),
            &"merge".to_owned(),
            &a.to_string(),
            &b.to_string()
        ),
        "{h:?}"
    );
    assert!(h[0].4.contains("5 reports, 1 fix"), "{}", h[0].4);
    assert_eq!(merged["history"][0]["merged_from"], Value::Null);
    assert_eq!(h[1].1, "state");
    assert_eq!(merged["history"][1]["merged_from"], a);
    // The target keeps its own triage.
    assert_eq!(merged["state"], "open");
    assert_eq!(stored_reports(&app, a).await, 0);
    let left: i64 =
        sqlx::query_scalar("SELECT count(*) FROM group_expired_reports WHERE group_id = $1")
            .bind(a)
            .fetch_one(app.db.pool())
            .await
            .unwrap();
    assert_eq!(left, 0, "the deleted reports' counts moved");

    // A report of a's group reads as b's.
    let report = app.get_as(&alice, &format!("/api/v1/reports/{r1}")).await;
    assert_eq!(report.json()["group_id"], b);
    // The next upload of a's failure lands in b.
    let (r4, g) = upload(
        &app,
        &alice,
        &device_log("alpha"),
        json!({"project": "vision"}),
    )
    .await;
    assert_eq!(g, b, "the merged group's fingerprint routes to the target");
    let after = group(&app, &alice, b).await;
    assert_eq!(after["count"], 7);
    assert!(ids(&after["reports"]).contains(&r4));
    assert_eq!(stored_reports(&app, a).await, 0);

    // a's URL says where it went; the group list and the count leave it out.
    let old = app.get_as(&alice, &format!("/api/v1/groups/{a}")).await;
    assert_eq!(old.status, StatusCode::PERMANENT_REDIRECT, "{}", old.body);
    assert_eq!(
        old.headers["location"],
        format!("/api/v1/groups/{b}").as_str()
    );
    assert_eq!(old.error_code(), "group_merged");
    assert!(
        old.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("merged into group {b}")),
        "{}",
        old.body
    );
    let list = app.get_as(&alice, "/api/v1/groups").await.json();
    assert_eq!(list["total"], 1, "{list}");
    assert_eq!(list["groups"][0]["id"], b);
}

#[tokio::test]
async fn bad_merges_are_refused_with_their_reason_and_change_nothing() {
    let app = TestApp::spawn().await;
    let alice = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let reader = app.token("reader", &[Scope::Read]).await;
    let (_, a) = upload(&app, &alice, &device_log("charlie"), Value::Null).await;
    let (_, b) = upload(&app, &alice, &device_log("delta"), Value::Null).await;
    let (_, c) = upload(&app, &alice, &device_log("echo"), Value::Null).await;

    // A read-only token: 403 whatever the body, before it is read.
    for body in ["{", "[]", "{\"into\": 1}", &json!({"into": b}).to_string()] {
        let res = merge_raw(&app, &reader, a, body).await;
        assert_eq!(res.status, StatusCode::FORBIDDEN, "{body}: {}", res.body);
        assert_eq!(res.error_code(), "forbidden");
    }
    // Into itself, into nothing, from nothing, not an id.
    let res = merge(&app, &alice, a, a).await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", res.body);
    assert_eq!(res.error_code(), "bad_merge");
    assert!(
        res.body.contains("cannot be merged into itself"),
        "{}",
        res.body
    );
    let res = merge(&app, &alice, a, 999_999).await;
    assert_eq!(res.status, StatusCode::NOT_FOUND, "{}", res.body);
    assert!(
        res.body.contains("group to merge into not found"),
        "{}",
        res.body
    );
    let res = merge(&app, &alice, 999_999, a).await;
    assert_eq!(res.status, StatusCode::NOT_FOUND, "{}", res.body);
    let res = merge(&app, &alice, a, 0).await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", res.body);
    for body in ["{", "{}", "{\"into\": \"b\"}", "{\"into\": 2, \"why\": 1}"] {
        let res = merge_raw(&app, &alice, a, body).await;
        assert_eq!(res.status, StatusCode::BAD_REQUEST, "{body}: {}", res.body);
        assert_eq!(res.error_code(), "bad_json");
    }
    // Nothing moved.
    for id in [a, b, c] {
        let g = group(&app, &alice, id).await;
        assert_eq!(
            (g["count"].as_i64(), g["history"].as_array().map(Vec::len)),
            (Some(1), Some(0))
        );
    }

    // Merged once: merging it again, triaging it or recording a fix for it is a conflict that
    // names where it went.
    assert_eq!(merge(&app, &alice, a, b).await.status, StatusCode::OK);
    let again = merge(&app, &alice, a, c).await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.body);
    assert_eq!(again.error_code(), "group_merged");
    assert!(
        again
            .body
            .contains(&format!("already merged into group {b}")),
        "{}",
        again.body
    );
    let triage = patch(&app, &alice, a, json!({"state": "resolved"})).await;
    assert_eq!(triage.status, StatusCode::CONFLICT, "{}", triage.body);
    assert_eq!(triage.error_code(), "group_merged");
    let fix = app
        .post_json(
            &alice,
            &format!("/api/v1/groups/{a}/fixes"),
            &json!({"summary": "x"}),
        )
        .await;
    assert_eq!(fix.status, StatusCode::CONFLICT, "{}", fix.body);
    assert!(
        fix.body.contains(&format!("merged into group {b}")),
        "{}",
        fix.body
    );
    assert_eq!(app.count("fixes").await, 0);
    // b into a: a stands for b, so that is b into itself.
    let back = merge(&app, &alice, b, a).await;
    assert_eq!(
        back.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        back.body
    );
    assert!(
        back.body
            .contains(&format!("group {a} was merged into group {b}")),
        "{}",
        back.body
    );
    assert_eq!(group(&app, &alice, c).await["count"], 1);
    assert_eq!(group(&app, &alice, b).await["count"], 2);
}

#[tokio::test]
async fn merges_follow_chains_to_the_group_that_holds_the_failure_now() {
    let app = TestApp::spawn().await;
    let alice = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let (_, a) = upload(&app, &alice, &device_log("foxtrot"), Value::Null).await;
    let (_, b) = upload(&app, &alice, &device_log("golf"), Value::Null).await;
    let (_, c) = upload(&app, &alice, &device_log("hotel"), Value::Null).await;
    let (_, d) = upload(&app, &alice, &device_log("india"), Value::Null).await;
    assert_eq!(merge(&app, &alice, b, c).await.status, StatusCode::OK);
    // a into b after b went into c: a lands in c.
    let res = merge(&app, &alice, a, b).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let into_c = res.json();
    assert_eq!(into_c["id"], c);
    assert_eq!(into_c["count"], 3);
    assert_eq!(into_c["merged_groups"], json!([b, a]));
    assert_eq!(history(&into_c)[0].2, a.to_string());
    assert_eq!(history(&into_c)[0].3, c.to_string());
    // c into d: the groups merged into c now point at d, one step.
    assert_eq!(merge(&app, &alice, c, d).await.status, StatusCode::OK);
    for old in [a, b, c] {
        let res = app.get_as(&alice, &format!("/api/v1/groups/{old}")).await;
        assert_eq!(
            res.status,
            StatusCode::PERMANENT_REDIRECT,
            "{old}: {}",
            res.body
        );
        assert_eq!(
            res.headers["location"],
            format!("/api/v1/groups/{d}").as_str()
        );
    }
    let pointers: Vec<(i64, Option<i64>)> =
        sqlx::query_as("SELECT id, merged_into FROM groups ORDER BY id")
            .fetch_all(app.db.pool())
            .await
            .unwrap();
    assert_eq!(
        pointers,
        [(a, Some(d)), (b, Some(d)), (c, Some(d)), (d, None)]
    );
    for name in ["foxtrot", "golf", "hotel"] {
        let (_, g) = upload(&app, &alice, &device_log(name), Value::Null).await;
        assert_eq!(g, d, "{name}");
    }
    let all = group(&app, &alice, d).await;
    assert_eq!(all["count"], 7);
    assert_eq!(all["merged_groups"], json!([c, b, a]));
    // The merges read in order in d's history: b into c, a into c, c into d (newest first).
    let merges: Vec<(String, String)> = history(&all)
        .into_iter()
        .filter(|e| e.1 == "merge")
        .map(|e| (e.2, e.3))
        .collect();
    assert_eq!(
        merges,
        [
            (c.to_string(), d.to_string()),
            (a.to_string(), c.to_string()),
            (b.to_string(), c.to_string()),
        ]
    );
}

#[tokio::test]
async fn an_upload_that_meets_a_merge_waits_for_it_and_lands_in_the_target() {
    let app = Arc::new(TestApp::spawn().await);
    let alice = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let (_, a) = upload(&app, &alice, &device_log("juliett"), Value::Null).await;
    let (_, b) = upload(&app, &alice, &device_log("kilo"), Value::Null).await;
    assert!(a < b, "the merged group's row is locked first");
    // Hold the target's row as a triage change would: the merge locks a, then waits for b.
    let mut holder = app.db.pool().begin().await.unwrap();
    sqlx::query("SELECT 1 FROM groups WHERE id = $1 FOR NO KEY UPDATE")
        .bind(b)
        .execute(&mut *holder)
        .await
        .unwrap();
    let merging = {
        let (app, alice) = (app.clone(), alice.clone());
        tokio::spawn(async move { merge(&app, &alice, a, b).await })
    };
    wait_for_lock_wait(&app.db, "FROM groups WHERE id = $1 FOR NO KEY UPDATE").await;
    // An upload of a's failure now: it must wait for the merge, not land in a behind it.
    let uploading = {
        let (app, alice) = (app.clone(), alice.clone());
        tokio::spawn(async move { upload(&app, &alice, &device_log("juliett"), Value::Null).await })
    };
    wait_for_lock_wait(&app.db, "WHERE fingerprint = $1 FOR KEY SHARE").await;
    holder.commit().await.unwrap();
    let merged = merging.await.unwrap();
    assert_eq!(merged.status, StatusCode::OK, "{}", merged.body);
    let (report, group_id) = uploading.await.unwrap();
    assert_eq!(group_id, b, "the upload followed the merge");
    assert_eq!(stored_reports(&app, a).await, 0);
    let target = group(&app, &alice, b).await;
    assert_eq!(target["count"], 3);
    assert!(ids(&target["reports"]).contains(&report));
}

#[tokio::test]
async fn a_merged_group_is_no_search_hit_of_its_own_and_its_reports_name_the_target() {
    let app = TestApp::spawn().await;
    let alice = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let (report, a) = upload(&app, &alice, &device_log("quebec"), Value::Null).await;
    let (_, b) = upload(&app, &alice, &device_log("romeo"), Value::Null).await;
    // One row per group: (kind of its best match, that match's id, the group's id).
    let rows = |v: Value| -> Vec<(String, i64, i64)> {
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| {
                (
                    h["kind"].as_str().unwrap().to_owned(),
                    h["id"].as_i64().unwrap(),
                    h["group"]["id"].as_i64().unwrap(),
                )
            })
            .collect()
    };
    let search = async || {
        let res = app
            .get_as(&alice, "/api/v1/search?q=wrapper_CUDA__quebec")
            .await;
        assert_eq!(res.status, StatusCode::OK, "{}", res.body);
        res.json()
    };
    let before = search().await;
    let found = rows(before.clone());
    assert_eq!(found.len(), 1, "{before}");
    assert_eq!(found[0].2, a, "{before}");
    assert_eq!(merge(&app, &alice, a, b).await.status, StatusCode::OK);
    let after = search().await;
    // The merged group's own entry is gone; its report now stands for the target.
    assert_eq!(
        rows(after.clone()),
        [("report".to_owned(), report, b)],
        "{after}"
    );
    assert_eq!(after["results"][0]["group_id"], b, "{after}");
}
