//! Group triage (issue 18 items 4 and 5) against a real database: states, `resolved_in`,
//! assignees and the history through `PATCH /api/v1/groups/{id}`, the filtered, sorted and paged
//! `GET /api/v1/groups`, the regression rule on upload, tag breakdowns, merges, and the same
//! through the portal's pages and forms.

use std::sync::atomic::{AtomicU32, Ordering};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::Value;

use crate::support::{TestApp, TestResponse};

mod api;
mod bulk;
mod concurrency;
mod merge;
mod merge_portal;
mod portal;
mod regression;
mod reopened;
mod tracker;
mod unmerge;

static RUN: AtomicU32 = AtomicU32::new(1);

/// A log of failure `name` (letters only: each name is a group of its own), from a run of its
/// own (different bytes every call, so never a duplicate).
pub fn device_log(name: &str) -> String {
    let run = RUN.fetch_add(1, Ordering::Relaxed);
    format!(
        "run {run}\nRuntimeError: Expected all tensors to be on the same device, but found at \
         least two devices, cuda:0 and cpu! (when checking argument for argument index in method \
         wrapper_CUDA__{name})\n"
    )
}

/// Uploads `log` with `meta` (a JSON object, or `null` for none): (report id, group id).
pub async fn upload(app: &TestApp, token: &str, log: &str, meta: Value) -> (i64, i64) {
    let meta = meta.to_string();
    let mut parts: Vec<(&str, Option<&str>, &[u8])> =
        vec![("log", Some("run.log"), log.as_bytes())];
    if meta != "null" {
        parts.push(("meta", None, meta.as_bytes()));
    }
    let res = app.upload(token, &parts, None).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let v = res.json();
    (v["id"].as_i64().unwrap(), v["group_id"].as_i64().unwrap())
}

/// `PATCH /api/v1/groups/{id}` with a raw body.
pub async fn patch_raw(app: &TestApp, token: &str, id: i64, body: &str) -> TestResponse {
    let req = Request::patch(format!("/api/v1/groups/{id}"))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    app.send(req).await
}

/// `PATCH /api/v1/groups/{id}` with `body`.
pub async fn patch(app: &TestApp, token: &str, id: i64, body: Value) -> TestResponse {
    patch_raw(app, token, id, &body.to_string()).await
}

/// `GET /api/v1/groups/{id}`, answered 200.
pub async fn group(app: &TestApp, token: &str, id: i64) -> Value {
    let res = app.get_as(token, &format!("/api/v1/groups/{id}")).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    res.json()
}

/// The history of a group as (actor, action, from, to, detail), newest first.
pub fn history(group: &Value) -> Vec<(String, String, String, String, String)> {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    group["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                s(&e["actor"]),
                s(&e["action"]),
                s(&e["from"]),
                s(&e["to"]),
                s(&e["detail"]),
            )
        })
        .collect()
}
