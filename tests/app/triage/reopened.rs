//! An ignore that waits for N more reports ends with the last of them: the group reopens by
//! itself, and endpoints subscribed to `reopened` hear of it once, with the report that ended
//! it and the group's new state (issue 39 item 4); a duplicate upload counts nothing.

use axum::http::StatusCode;
use gpu_triage::auth::Scope;
use serde_json::{Value, json};

use super::{device_log, group, patch, upload};
use crate::support::TestApp;

/// The events queued for `endpoint`, oldest first: (event, payload).
async fn queued(app: &TestApp, endpoint: i64) -> Vec<(String, Value)> {
    sqlx::query_as::<_, (String, Value)>(
        "SELECT event, payload FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY id",
    )
    .bind(endpoint)
    .fetch_all(app.db.pool())
    .await
    .expect("deliveries")
}

#[tokio::test]
async fn the_last_report_an_ignore_waited_for_reopens_the_group_and_announces_it() {
    let app = TestApp::spawn_with(|mut state| {
        state.webhooks.allow_private = true;
        state
    })
    .await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let ci = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let endpoint = async |events: Value| -> i64 {
        let res = app
            .post_json(
                &admin,
                "/api/v1/webhooks",
                &json!({"url": "http://127.0.0.1:9/hook", "events": events}),
            )
            .await;
        assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
        res.json()["id"].as_i64().expect("id")
    };
    let reopened = endpoint(json!(["reopened"])).await;
    let others = endpoint(json!(["regression"])).await;

    let (_, g) = upload(&app, &ci, &device_log("hotel"), Value::Null).await;
    let res = patch(
        &app,
        &ci,
        g,
        json!({"state": "ignored", "ignore_until_reports": 2}),
    )
    .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);

    // The first of the two: still ignored, nothing announced.
    let first = device_log("hotel");
    let (_, same) = upload(&app, &ci, &first, Value::Null).await;
    assert_eq!(same, g);
    assert_eq!(group(&app, &ci, g).await["state"], "ignored");
    assert!(queued(&app, reopened).await.is_empty());
    // A duplicate of it counts nothing and announces nothing.
    let dup = app
        .upload(&ci, &[("log", Some("run.log"), first.as_bytes())], None)
        .await;
    assert!(dup.status.is_success(), "{}", dup.body);
    assert_eq!(dup.json()["duplicate"], true, "{}", dup.body);
    assert_eq!(group(&app, &ci, g).await["ignore_reports_left"], 1);
    assert!(queued(&app, reopened).await.is_empty());

    // The last one reopens the group and is announced, with the report that ended the ignore.
    let (last, same) = upload(&app, &ci, &device_log("hotel"), Value::Null).await;
    assert_eq!(same, g);
    assert_eq!(group(&app, &ci, g).await["state"], "open");
    let got = queued(&app, reopened).await;
    assert_eq!(got.len(), 1, "{got:?}");
    let (event, payload) = &got[0];
    assert_eq!(event, "reopened");
    assert_eq!(payload["report"]["id"], last);
    assert_eq!(payload["group"]["id"], g);
    assert_eq!(payload["group"]["state"], "open");
    assert!(
        queued(&app, others).await.is_empty(),
        "a reopening is not a regression"
    );

    // Further reports of the open group announce nothing more.
    upload(&app, &ci, &device_log("hotel"), Value::Null).await;
    assert_eq!(queued(&app, reopened).await.len(), 1);
}
