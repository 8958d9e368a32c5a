//! Triage of many groups at once (issue 39 item 4): `POST /api/v1/groups/bulk` (all or nothing,
//! its refusals), an ignore that lasts until the failure happens again or until N more reports
//! (reopened by the upload that brings the last of them), and the undo of a change
//! (`POST /api/v1/groups/changes/{id}/undo`), refused when a group changed since.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpu_triage::auth::Scope;
use serde_json::{Value, json};

use super::{device_log, group, history, patch, upload};
use crate::support::{TestApp, TestResponse};

/// `POST path` with a raw JSON body.
pub async fn post_raw(app: &TestApp, token: &str, path: &str, body: &str) -> TestResponse {
    let req = Request::post(path)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    app.send(req).await
}

/// `POST /api/v1/groups/bulk` with `ids` and `change`.
pub async fn bulk(app: &TestApp, token: &str, ids: &[i64], change: Value) -> TestResponse {
    let body = json!({ "ids": ids, "change": change }).to_string();
    post_raw(app, token, "/api/v1/groups/bulk", &body).await
}

/// `POST /api/v1/groups/changes/{id}/undo`.
pub async fn undo(app: &TestApp, token: &str, id: i64) -> TestResponse {
    post_raw(app, token, &format!("/api/v1/groups/changes/{id}/undo"), "").await
}

/// Each group's (state, resolved_in, assignee).
async fn triage_of(app: &TestApp, token: &str, ids: &[i64]) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for id in ids {
        let g = group(app, token, *id).await;
        let s = |k: &str| g[k].as_str().unwrap_or_default().to_owned();
        out.push((s("state"), s("resolved_in"), s("assignee")));
    }
    out
}

fn t(state: &str, resolved_in: &str, assignee: &str) -> (String, String, String) {
    (state.into(), resolved_in.into(), assignee.into())
}

#[tokio::test]
async fn a_bulk_change_applies_to_every_group_or_to_none() {
    let app = TestApp::spawn().await;
    let alice = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let reader = app.token("reader", &[Scope::Read]).await;
    let mut ids = Vec::new();
    for name in ["alpha", "bravo", "charlie", "delta"] {
        ids.push(upload(&app, &alice, &device_log(name), Value::Null).await.1);
    }
    let (a, b, c, d) = (ids[0], ids[1], ids[2], ids[3]);

    let res = bulk(
        &app,
        &alice,
        &[c, a, b],
        json!({"state": "resolved", "resolved_in": "2.0"}),
    )
    .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let v = res.json();
    assert!(v["change_id"].as_i64().is_some(), "{v}");
    assert_eq!(v["changed"], json!([a, b, c]));
    assert_eq!(v["groups"][0]["state"], "resolved");
    assert_eq!(v["groups"][2]["resolved_in"], "2.0");
    assert_eq!(
        triage_of(&app, &alice, &[a, b, c, d]).await,
        [
            t("resolved", "2.0", ""),
            t("resolved", "2.0", ""),
            t("resolved", "2.0", ""),
            t("open", "", "")
        ]
    );
    let h = history(&group(&app, &alice, b).await);
    assert_eq!(
        h[0],
        (
            "alice".into(),
            "state".into(),
            "open".into(),
            "resolved".into(),
            "in 2.0".into()
        )
    );
    // Nothing to change: no change recorded.
    let again = bulk(&app, &alice, &[a, b], json!({"state": "resolved"})).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    assert_eq!(again.json()["change_id"], Value::Null);
    assert_eq!(again.json()["changed"], json!([]));

    // Refusals change nothing, and name what is wrong.
    let many: Vec<i64> = (1..=101).collect();
    let refused: Vec<(Vec<i64>, Value, StatusCode, &str, String)> = vec![
        (
            vec![],
            json!({"state": "open"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_bulk",
            "names no group".into(),
        ),
        (
            many,
            json!({"state": "open"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_bulk",
            "at most 100".into(),
        ),
        (
            vec![a, d, a],
            json!({"state": "open"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_bulk",
            format!("group {a} twice"),
        ),
        (
            vec![a, 999_999, 999_998],
            json!({"state": "open"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_bulk",
            "no groups 999998, 999999".into(),
        ),
        (
            vec![a, d],
            json!({"state": "regressed"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_triage",
            format!("group {a}: regressed is set by gpu-triage"),
        ),
        // d is open: `resolved_in` alone refuses d, and a (first in id order) is left as well.
        (
            vec![a, d],
            json!({"resolved_in": "3.0"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_triage",
            format!("group {d}: resolved_in goes only"),
        ),
        (
            vec![a, d],
            json!({}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_triage",
            "nothing to change".into(),
        ),
    ];
    for (ids, change, status, code, says) in refused {
        let res = bulk(&app, &alice, &ids, change.clone()).await;
        assert_eq!(res.status, status, "{ids:?} {change}: {}", res.body);
        assert_eq!(res.error_code(), code, "{ids:?} {change}");
        assert!(res.body.contains(&says), "{ids:?} {change}: {}", res.body);
    }
    assert_eq!(
        triage_of(&app, &alice, &[a, d]).await,
        [t("resolved", "2.0", ""), t("open", "", "")]
    );
    for body in [
        r#"{"ids": [1]}"#.to_owned(),
        json!({"ids": [a], "change": {"state": "open"}, "extra": 1}).to_string(),
        r#"{"ids": "1", "change": {}}"#.to_owned(),
        "{".to_owned(),
    ] {
        let res = post_raw(&app, &alice, "/api/v1/groups/bulk", &body).await;
        assert_eq!(res.status, StatusCode::BAD_REQUEST, "{body}: {}", res.body);
        assert_eq!(res.error_code(), "bad_json");
    }
    // A merged group: 409, naming it; the others are left as they are.
    let merged = post_raw(
        &app,
        &alice,
        &format!("/api/v1/groups/{c}/merge"),
        &json!({"into": b}).to_string(),
    )
    .await;
    assert_eq!(merged.status, StatusCode::OK, "{}", merged.body);
    let res = bulk(&app, &alice, &[c, d], json!({"state": "ignored"})).await;
    assert_eq!(res.status, StatusCode::CONFLICT, "{}", res.body);
    assert_eq!(res.error_code(), "group_merged");
    assert!(
        res.body
            .contains(&format!("group {c} was merged into group {b}")),
        "{}",
        res.body
    );
    assert_eq!(triage_of(&app, &alice, &[d]).await, [t("open", "", "")]);
    // A read-only token may not, whatever the body.
    let res = bulk(&app, &reader, &[d], json!({"state": "ignored"})).await;
    assert_eq!(res.status, StatusCode::FORBIDDEN, "{}", res.body);
    assert_eq!(triage_of(&app, &alice, &[d]).await, [t("open", "", "")]);
}

#[tokio::test]
async fn an_ignore_until_it_happens_again_or_more_reports_is_reopened_by_the_last_of_them() {
    let app = TestApp::spawn().await;
    let ci = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let echo = device_log("echo");
    let (_, once) = upload(&app, &ci, &echo, Value::Null).await;
    let (_, twice) = upload(&app, &ci, &device_log("foxtrot"), Value::Null).await;
    let (_, forever) = upload(&app, &ci, &device_log("golf"), Value::Null).await;

    let res = patch(
        &app,
        &ci,
        once,
        json!({"state": "ignored", "ignore_until_reports": 1}),
    )
    .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert_eq!(res.json()["ignore_reports_left"], 1);
    let res = bulk(
        &app,
        &ci,
        &[twice],
        json!({"state": "ignored", "ignore_until_reports": 2}),
    )
    .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let res = patch(&app, &ci, forever, json!({"state": "ignored"})).await;
    assert_eq!(res.json()["ignore_reports_left"], Value::Null);
    let h = history(&group(&app, &ci, once).await);
    assert_eq!(h[0].4, "until it happens again");
    // Listed as ignored with their countdowns; not in the default list.
    let list = app.get_as(&ci, "/api/v1/groups?state=ignored").await.json();
    let lefts: Vec<Value> = (list["groups"].as_array().unwrap().iter())
        .map(|g| g["ignore_reports_left"].clone())
        .collect();
    assert_eq!(lefts, [Value::Null, json!(2), json!(1)]);

    // It happens again: reopened by the service, naming the report.
    let (report, into) = upload(&app, &ci, &device_log("echo"), Value::Null).await;
    assert_eq!(into, once);
    let g = group(&app, &ci, once).await;
    assert_eq!(
        (g["state"].as_str(), &g["ignore_reports_left"]),
        (Some("open"), &Value::Null)
    );
    let newest = &g["history"][0];
    assert_eq!(
        (
            &newest["actor_kind"],
            &newest["from"],
            &newest["to"],
            &newest["report_id"]
        ),
        (
            &json!("service"),
            &json!("ignored"),
            &json!("open"),
            &json!(report)
        )
    );
    // Two more: the first counts down, the second reopens.
    upload(&app, &ci, &device_log("foxtrot"), Value::Null).await;
    let g = group(&app, &ci, twice).await;
    assert_eq!(
        (g["state"].as_str(), &g["ignore_reports_left"]),
        (Some("ignored"), &json!(1))
    );
    upload(&app, &ci, &device_log("foxtrot"), Value::Null).await;
    assert_eq!(group(&app, &ci, twice).await["state"], "open");
    // Ignored for good stays ignored.
    upload(&app, &ci, &device_log("golf"), Value::Null).await;
    assert_eq!(group(&app, &ci, forever).await["state"], "ignored");

    // The count goes only with the ignored state, and within bounds.
    for (body, says) in [
        (
            json!({"state": "resolved", "ignore_until_reports": 2}),
            "goes only with",
        ),
        (
            json!({"state": "ignored", "ignore_until_reports": 0}),
            "must be 1",
        ),
        (
            json!({"state": "ignored", "ignore_until_reports": 1_000_001}),
            "must be 1",
        ),
    ] {
        let res = patch(&app, &ci, forever, body.clone()).await;
        assert_eq!(
            res.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}: {}",
            res.body
        );
        assert!(res.body.contains(says), "{body}: {}", res.body);
    }
}

#[tokio::test]
async fn an_undo_puts_back_exactly_what_a_change_changed_unless_a_group_changed_since() {
    let app = TestApp::spawn().await;
    let alice = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let reader = app.token("reader", &[Scope::Read]).await;
    let (_, a) = upload(&app, &alice, &device_log("hotel"), Value::Null).await;
    let (_, b) = upload(&app, &alice, &device_log("india"), Value::Null).await;
    let (_, c) = upload(&app, &alice, &device_log("juliett"), Value::Null).await;
    assert_eq!(
        patch(&app, &alice, a, json!({"assignee": "alice"}))
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        patch(
            &app,
            &alice,
            b,
            json!({"state": "resolved", "resolved_in": "1.0"})
        )
        .await
        .status,
        StatusCode::OK
    );

    let res = bulk(
        &app,
        &alice,
        &[a, b, c],
        json!({"state": "resolved", "assignee": ""}),
    )
    .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let change = res.json()["change_id"].as_i64().unwrap();
    // b was resolved (in 1.0) already: not changed, so not undone either.
    assert_eq!(res.json()["changed"], json!([a, c]));
    assert_eq!(
        triage_of(&app, &alice, &[a, b, c]).await,
        [
            t("resolved", "", ""),
            t("resolved", "1.0", ""),
            t("resolved", "", "")
        ]
    );
    // Only the reader may not.
    let res = undo(&app, &reader, change).await;
    assert_eq!(res.status, StatusCode::FORBIDDEN, "{}", res.body);

    let res = undo(&app, &alice, change).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert_eq!(res.json()["changed"], json!([a, c]));
    assert_eq!(
        triage_of(&app, &alice, &[a, b, c]).await,
        [
            t("open", "", "alice"),
            t("resolved", "1.0", ""),
            t("open", "", "")
        ]
    );
    let h = history(&group(&app, &alice, a).await);
    assert!(
        h[..2]
            .iter()
            .all(|e| e.0 == "alice" && e.4.contains(&format!("undoing change {change}"))),
        "{h:?}"
    );
    let res = undo(&app, &alice, change).await;
    assert_eq!(res.status, StatusCode::CONFLICT, "{}", res.body);
    assert_eq!(res.error_code(), "already_undone");

    // Changed since (by hand, or by an upload): refused, and nothing is undone.
    let res = bulk(
        &app,
        &alice,
        &[a, c],
        json!({"state": "ignored", "ignore_until_reports": 1}),
    )
    .await;
    let second = res.json()["change_id"].as_i64().unwrap();
    upload(&app, &alice, &device_log("juliett"), Value::Null).await;
    assert_eq!(
        group(&app, &alice, c).await["state"],
        "open",
        "reopened by the upload"
    );
    let res = undo(&app, &alice, second).await;
    assert_eq!(res.status, StatusCode::CONFLICT, "{}", res.body);
    assert_eq!(res.error_code(), "changed_since");
    assert!(
        res.body.contains(&format!("group {c} changed since")),
        "{}",
        res.body
    );
    assert_eq!(
        group(&app, &alice, a).await["state"],
        "ignored",
        "a is left as it is"
    );
    let res = bulk(&app, &alice, &[a], json!({"state": "resolved"})).await;
    let third = res.json()["change_id"].as_i64().unwrap();
    assert_eq!(
        patch(&app, &alice, a, json!({"assignee": ""})).await.status,
        StatusCode::OK
    );
    let res = undo(&app, &alice, third).await;
    assert_eq!(res.error_code(), "changed_since", "{}", res.body);
    assert_eq!(group(&app, &alice, a).await["state"], "resolved");

    let res = undo(&app, &alice, 999_999).await;
    assert_eq!(res.status, StatusCode::NOT_FOUND, "{}", res.body);
    let res = post_raw(&app, &alice, "/api/v1/groups/changes/x/undo", "").await;
    assert_eq!(res.status, StatusCode::NOT_FOUND, "{}", res.body);
}
