//! Which project names retention settings take (issue 28 item 6): exactly those an upload takes
//! and the group list and search filter by, through the API and the portal's form alike, so no
//! route refuses a project another one stores or accepts one that could never have a report.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpu_triage::auth::Scope;
use serde_json::json;

use super::{app_with, put_retention, settings};
use crate::browse::{Browser, sign_in, texts};
use crate::support::{TestApp, TestResponse};

/// `name` as one path segment: every byte but ASCII letters and digits percent-encoded.
fn segment(name: &str) -> String {
    name.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Whether an upload with `meta.project` = `name` is stored (201) or refused (422).
async fn upload_takes(app: &TestApp, token: &str, name: &str, n: usize) -> bool {
    let log =
        format!("run {n}\nRuntimeError: CUDA error: an illegal memory access was encountered\n");
    let meta = json!({ "project": name }).to_string();
    let res = app
        .upload(
            token,
            &[
                ("log", Some("job.log"), log.as_bytes()),
                ("meta", None, meta.as_bytes()),
            ],
            None,
        )
        .await;
    match res.status {
        StatusCode::CREATED => true,
        StatusCode::UNPROCESSABLE_ENTITY => false,
        other => panic!("upload {name:?}: {other} {}", res.body),
    }
}

/// The portal's retention form, posted with project `name` and 7 days of logs.
async fn post_form(app: &TestApp, b: &Browser, name: &str) -> TestResponse {
    let fields = [
        ("csrf", b.csrf.as_str()),
        ("project", name),
        ("log_days", "7"),
        ("report_days", ""),
    ];
    let req = Request::post("/retention")
        .header("cookie", &b.cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(serde_urlencoded::to_string(fields).unwrap()))
        .unwrap();
    app.send(req).await
}

/// Whether a route's answer took the name (`ok`) or refused it (`refused`, with a reason that
/// names the project).
fn took(route: &str, name: &str, res: &TestResponse, ok: StatusCode, refused: StatusCode) -> bool {
    let reason = if res.status == StatusCode::SEE_OTHER || !res.body.starts_with('{') {
        texts(&res.body, "#form-error").concat()
    } else {
        res.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    if res.status == refused {
        assert!(reason.contains("project"), "{route} {name:?}: {}", res.body);
        false
    } else {
        assert_eq!(res.status, ok, "{route} {name:?}: {}", res.body);
        true
    }
}

#[tokio::test]
async fn retention_takes_exactly_the_project_names_an_upload_takes() {
    let (app, admin) = app_with(&settings(0, 0, 500)).await;
    let ci = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let b = sign_in(&app, &admin).await;
    // (name, taken everywhere?)
    let names = [
        ("vision".to_owned(), true),
        ("Team/Vision".to_owned(), true),
        ("p".repeat(200), true),
        ("p".repeat(201), false),
        // Characters count, not bytes (the OpenAPI document's maxLength counts characters).
        ("é".repeat(200), true),
        ("é".repeat(201), false),
        ("a\u{0}b".to_owned(), false),
        ("a\u{7}b".to_owned(), true),
    ];
    for (n, (name, want)) in names.iter().enumerate() {
        let stored = upload_takes(&app, &ci, name, n).await;
        assert_eq!(stored, *want, "upload {name:?}");
        let api = app
            .send(put_retention(
                &admin,
                &segment(name),
                &json!({"log_days": 7}),
            ))
            .await;
        let api = took(
            "PUT retention",
            name,
            &api,
            StatusCode::OK,
            StatusCode::UNPROCESSABLE_ENTITY,
        );
        let form = post_form(&app, &b, name).await;
        let form = took(
            "POST /retention",
            name,
            &form,
            StatusCode::SEE_OTHER,
            StatusCode::UNPROCESSABLE_ENTITY,
        );
        let listed = app
            .get_as(&ci, &format!("/api/v1/groups?project={}", segment(name)))
            .await;
        let listed = took(
            "GET groups",
            name,
            &listed,
            StatusCode::OK,
            StatusCode::BAD_REQUEST,
        );
        assert_eq!(
            (api, form, listed),
            (stored, stored, stored),
            "{name:?}: the upload {}",
            if stored { "stores it" } else { "refuses it" }
        );
    }
}
