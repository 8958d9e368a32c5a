//! The regression rule on upload: a report in a resolved group reopens it as regressed when it
//! comes from a build that should contain the fix (by version, by commit, or else by time), is
//! only recorded when it comes from an older build, and leaves ignored groups alone.

use std::sync::Arc;

use axum::http::StatusCode;
use gpu_triage::auth::Scope;
use serde_json::{Value, json};

use super::{device_log, group, history, patch, upload};
use crate::support::TestApp;

/// Resolves group `id` (in `fixed`, when not empty) and checks the answer.
async fn resolve(app: &TestApp, token: &str, id: i64, fixed: &str) {
    let body = if fixed.is_empty() {
        json!({"state": "resolved"})
    } else {
        json!({"state": "resolved", "resolved_in": fixed})
    };
    let res = patch(app, token, id, body).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert_eq!(res.json()["state"], "resolved");
}

async fn state(app: &TestApp, token: &str, id: i64) -> String {
    group(app, token, id).await["state"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn resolving_a_group_and_uploading_the_failure_again_marks_it_regressed() {
    let app = TestApp::spawn().await;
    let alice = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let first = device_log("hotel");
    let (_, id) = upload(&app, &alice, &first, Value::Null).await;
    resolve(&app, &alice, id, "").await;

    // The same bytes again are the same report (a duplicate), not a new occurrence.
    let again = app
        .upload(&alice, &[("log", Some("run.log"), first.as_bytes())], None)
        .await;
    assert_eq!(again.json()["duplicate"], true);
    assert_eq!(state(&app, &alice, id).await, "resolved");

    // Another run of the failure, with nothing to tell its build by: it came after the fix.
    let (report, same) = upload(&app, &alice, &device_log("hotel"), Value::Null).await;
    assert_eq!(same, id);
    let g = group(&app, &alice, id).await;
    assert_eq!(g["state"], "regressed");
    assert_eq!(
        history(&g)[0],
        (
            "gpu-triage".to_owned(),
            "state".to_owned(),
            "resolved".to_owned(),
            "regressed".to_owned(),
            "reported after the group was resolved".to_owned()
        )
    );
    assert_eq!(g["history"][0]["report_id"], json!(report));
    // More reports leave it regressed and add nothing to the history.
    upload(&app, &alice, &device_log("hotel"), Value::Null).await;
    let later = group(&app, &alice, id).await;
    assert_eq!(later["state"], "regressed");
    assert_eq!(history(&later).len(), 2);
    // The list finds it among the regressed.
    let listed = app
        .get_as(&alice, "/api/v1/groups?state=regressed")
        .await
        .json();
    assert_eq!(listed["groups"][0]["id"], json!(id));
}

#[tokio::test]
async fn a_fix_in_a_version_is_regressed_only_by_builds_of_that_version_or_later() {
    let app = TestApp::spawn().await;
    let alice = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let (_, id) = upload(
        &app,
        &alice,
        &device_log("india"),
        json!({"version": "1.8"}),
    )
    .await;
    resolve(&app, &alice, id, "2.0").await;

    let (old, _) = upload(
        &app,
        &alice,
        &device_log("india"),
        json!({"version": "1.9"}),
    )
    .await;
    let (older, _) = upload(
        &app,
        &alice,
        &device_log("india"),
        json!({"version": "1.10"}),
    )
    .await;
    let (pre, _) = upload(
        &app,
        &alice,
        &device_log("india"),
        json!({"version": "v2.0.0rc1"}),
    )
    .await;
    let g = group(&app, &alice, id).await;
    assert_eq!(g["state"], "resolved", "{g}");
    let notes: Vec<(Value, Value, Value)> = (g["history"].as_array().unwrap().iter())
        .take(3)
        .map(|e| {
            (
                e["action"].clone(),
                e["detail"].clone(),
                e["report_id"].clone(),
            )
        })
        .collect();
    assert_eq!(
        notes,
        [
            (
                json!("older_build"),
                json!("version 2.0rc1 is older than the fix (2.0)"),
                json!(pre)
            ),
            (
                json!("older_build"),
                json!("version 1.10 is older than the fix (2.0)"),
                json!(older)
            ),
            (
                json!("older_build"),
                json!("version 1.9 is older than the fix (2.0)"),
                json!(old)
            ),
        ]
    );

    let (new, _) = upload(
        &app,
        &alice,
        &device_log("india"),
        json!({"version": "2.1"}),
    )
    .await;
    let g = group(&app, &alice, id).await;
    assert_eq!(g["state"], "regressed");
    assert_eq!(g["resolved_in"], "2.0", "the fix that did not hold is kept");
    assert_eq!(
        (&g["history"][0]["detail"], &g["history"][0]["report_id"]),
        (
            &json!("version 2.1 is not older than the fix (2.0)"),
            &json!(new)
        )
    );
    let report = app
        .get_as(&alice, &format!("/api/v1/reports/{new}"))
        .await
        .json();
    assert_eq!(report["version"], "2.1");

    // A version the rule could not compare is refused at upload, and nothing is stored.
    let before = app.count("reports").await;
    let bad = app
        .upload(
            &alice,
            &[
                ("log", Some("run.log"), device_log("india").as_bytes()),
                ("meta", None, br#"{"version":"nightly"}"#),
            ],
            None,
        )
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.body);
    assert_eq!(bad.error_code(), "bad_meta");
    assert!(
        bad.body.contains("version must look like 2.1"),
        "{}",
        bad.body
    );
    assert_eq!(app.count("reports").await, before);
}

#[tokio::test]
async fn a_fix_in_a_commit_is_regressed_by_that_commit_or_a_newer_one_not_by_an_older_build() {
    let app = TestApp::spawn().await;
    let alice = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let old_commit = "aaaaaaa1111111111111111111111111111111111";
    let old_commit = &old_commit[..40];
    let fix_commit = "bbbbbbb2222222222222222222222222222222222";
    let fix_commit = &fix_commit[..40];
    let meta = |commit: &str| json!({"project": "vision", "commit": commit});
    let (_, id) = upload(&app, &alice, &device_log("juliet"), meta(old_commit)).await;
    resolve(&app, &alice, id, &fix_commit[..10]).await;

    // The old build again (first seen before the fix): recorded, still resolved.
    let (old, _) = upload(&app, &alice, &device_log("juliet"), meta(old_commit)).await;
    let g = group(&app, &alice, id).await;
    assert_eq!(g["state"], "resolved");
    assert_eq!(
        (
            &g["history"][0]["action"],
            &g["history"][0]["detail"],
            &g["history"][0]["report_id"]
        ),
        (
            &json!("older_build"),
            &json!("commit aaaaaaa11111 was first seen before the fix commit bbbbbbb222"),
            &json!(old)
        )
    );
    // The fix commit itself (abbreviated as the resolution named it, in full in the report).
    upload(&app, &alice, &device_log("juliet"), meta(fix_commit)).await;
    let g = group(&app, &alice, id).await;
    assert_eq!(g["state"], "regressed");
    assert_eq!(
        g["history"][0]["detail"],
        json!("built from the fix commit bbbbbbb22222")
    );

    // Resolved again in the same commit; a commit never seen before is a newer build.
    resolve(&app, &alice, id, fix_commit).await;
    upload(&app, &alice, &device_log("juliet"), meta("ccccccc3333")).await;
    let g = group(&app, &alice, id).await;
    assert_eq!(g["state"], "regressed");
    assert_eq!(
        g["history"][0]["detail"],
        json!("commit ccccccc3333 was first seen after the fix commit bbbbbbb22222")
    );

    // A report that names no commit falls back to time: it came after the resolution.
    resolve(&app, &alice, id, fix_commit).await;
    upload(
        &app,
        &alice,
        &device_log("juliet"),
        json!({"project": "vision"}),
    )
    .await;
    assert_eq!(state(&app, &alice, id).await, "regressed");
}

#[tokio::test]
async fn an_ignored_group_stays_ignored_when_the_failure_comes_back() {
    let app = TestApp::spawn().await;
    let alice = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let (_, id) = upload(&app, &alice, &device_log("kilo"), Value::Null).await;
    let res = patch(&app, &alice, id, json!({"state": "ignored"})).await;
    assert_eq!(res.status, StatusCode::OK);
    for version in ["1.0", "9.9"] {
        upload(
            &app,
            &alice,
            &device_log("kilo"),
            json!({"version": version}),
        )
        .await;
    }
    let g = group(&app, &alice, id).await;
    assert_eq!(g["state"], "ignored");
    assert_eq!(g["count"], 3);
    assert_eq!(history(&g).len(), 1, "only the person's change");
}

#[tokio::test]
async fn concurrent_reports_reopen_a_resolved_group_once() {
    let app = Arc::new(TestApp::spawn().await);
    let alice = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let (_, id) = upload(&app, &alice, &device_log("lima"), Value::Null).await;
    resolve(&app, &alice, id, "").await;
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let (app, alice) = (app.clone(), alice.clone());
        tasks.push(tokio::spawn(async move {
            upload(&app, &alice, &device_log("lima"), Value::Null)
                .await
                .1
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), id);
    }
    let g = group(&app, &alice, id).await;
    assert_eq!(
        (g["state"].clone(), g["count"].clone()),
        (json!("regressed"), json!(7))
    );
    let reopened = history(&g).iter().filter(|e| e.3 == "regressed").count();
    assert_eq!(reopened, 1, "{:?}", history(&g));
}

#[tokio::test]
async fn a_report_says_where_its_group_stands_and_a_regression_is_a_banner_above_its_fix() {
    let app = TestApp::spawn().await;
    let alice = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let (first, id) = upload(&app, &alice, &device_log("india"), Value::Null).await;
    let res = app
        .post_json(
            &alice,
            &format!("/api/v1/groups/{id}/fixes"),
            &json!({"summary": "move the mask to the model's device"}),
        )
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let res = patch(&app, &alice, id, json!({"assignee": "alice"})).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    resolve(&app, &alice, id, "v2.1.0").await;
    let detail = app
        .get_as(&alice, &format!("/api/v1/reports/{first}"))
        .await
        .json();
    assert_eq!(
        detail["group_state"],
        json!({"state": "resolved", "resolved_in": "v2.1.0", "assignee": "alice"})
    );
    let b = crate::browse::sign_in(&app, &alice).await;
    let html = crate::browse::page(&app, &b.cookie, &format!("/reports/{first}"))
        .await
        .body;
    assert_eq!(
        crate::browse::texts(&html, "#report-group-state"),
        ["resolved in v2.1.0"]
    );
    assert!(crate::browse::texts(&html, "#regressed").is_empty());

    // A build that should hold the fix fails the same way: the group regressed, and the new
    // report's page says so above the fix it was resolved with.
    let meta = json!({"version": "2.2.0"}).to_string();
    let log = device_log("india");
    let answer = app
        .upload(
            &alice,
            &[
                ("log", Some("run.log"), log.as_bytes()),
                ("meta", None, meta.as_bytes()),
            ],
            None,
        )
        .await
        .json();
    // The upload's own answer (what CI prints) already says so.
    assert_eq!(answer["group_state"]["state"], "regressed", "{answer}");
    let (again, same) = (
        answer["id"].as_i64().expect("report id"),
        answer["group_id"].as_i64().expect("group id"),
    );
    assert_eq!(same, id);
    let detail = app
        .get_as(&alice, &format!("/api/v1/reports/{again}"))
        .await
        .json();
    assert_eq!(detail["group_state"]["state"], "regressed");
    let html = crate::browse::page(&app, &b.cookie, &format!("/reports/{again}"))
        .await
        .body;
    let banner = crate::browse::texts(&html, "#regressed");
    assert_eq!(banner.len(), 1, "{html}");
    assert!(
        banner[0].contains("resolved in v2.1.0 and has come back; assigned to alice"),
        "{banner:?}"
    );
    let (regressed_at, fix_at) = (
        html.find("id=\"regressed\""),
        html.find("id=\"fixed-before\""),
    );
    assert!(
        regressed_at.is_some() && fix_at.is_some() && regressed_at < fix_at,
        "the regression comes before the fix"
    );
    // The group's state is also kept for the report that came before.
    let first_page = crate::browse::page(&app, &b.cookie, &format!("/reports/{first}"))
        .await
        .body;
    assert_eq!(
        crate::browse::texts(&first_page, "#report-group-state"),
        ["regressed"]
    );
}
