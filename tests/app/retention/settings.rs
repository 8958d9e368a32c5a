//! Retention settings: admins set a project's days through the API and the portal page; bad
//! values (negative, not a number, too many days, unknown fields) are refused with the field
//! named and change nothing; other scopes get 403.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpu_triage::auth::Scope;
use serde_json::{Value, json};

use super::{app_with, put_retention, settings};
use crate::browse::{page, sign_in, texts};
use crate::support::{TestApp, TestResponse};

async fn show(app: &TestApp, token: &str, project: &str) -> TestResponse {
    app.get_as(token, &format!("/api/v1/projects/{project}/retention"))
        .await
}

async fn delete(app: &TestApp, token: &str, project: &str) -> TestResponse {
    let req = Request::delete(format!("/api/v1/projects/{project}/retention"))
        .header("authorization", format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    app.send(req).await
}

#[tokio::test]
async fn admins_set_a_projects_retention_through_the_api_and_bad_values_are_refused() {
    let (app, admin) = app_with(&settings(30, 365, 500)).await;
    let reader = app.token("reader", &[Scope::Read]).await;
    let ingest = app.token("ci", &[Scope::Ingest]).await;

    // No setting yet: the defaults are in force.
    let fresh = show(&app, &admin, "Vision").await;
    assert_eq!(fresh.status, StatusCode::OK, "{}", fresh.body);
    let v = fresh.json();
    assert_eq!(
        (v["log_days"].as_u64(), v["report_days"].as_u64()),
        (Some(30), Some(365))
    );
    assert_eq!(v["set"], json!({"log_days": null, "report_days": null}));

    let set = app
        .send(put_retention(
            &admin,
            "Vision",
            &json!({"log_days": 7, "report_days": 0}),
        ))
        .await;
    assert_eq!(set.status, StatusCode::OK, "{}", set.body);
    let v = set.json();
    assert_eq!(v["project"], "vision", "projects match in any letter case");
    assert_eq!(
        (v["log_days"].as_u64(), v["report_days"].as_u64()),
        (Some(7), Some(0))
    );
    assert_eq!(v["set"], json!({"log_days": 7, "report_days": 0}));
    // Only one field: the other follows the default.
    let half = app
        .send(put_retention(
            &admin,
            "team%2Fvision",
            &json!({"report_days": 90}),
        ))
        .await;
    assert_eq!(half.status, StatusCode::OK, "{}", half.body);
    assert_eq!(half.json()["project"], "team/vision");
    assert_eq!(half.json()["log_days"], 30);

    for (body, field) in [
        (json!({"log_days": -1}), "log_days"),
        (json!({"log_days": "abc"}), "log_days"),
        (json!({"report_days": "30"}), "report_days"),
        (json!({"report_days": 36501}), "report_days"),
        (json!({"report_days": 1e12}), "report_days"),
        (json!({"log_days": 2.5}), "log_days"),
    ] {
        let res = app.send(put_retention(&admin, "vision", &body)).await;
        assert_eq!(
            res.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}: {}",
            res.body
        );
        assert_eq!(res.error_code(), "invalid_retention");
        let message = res.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(
            message.starts_with(&format!("{field} must be a whole number")),
            "{message}"
        );
    }
    let unknown = app
        .send(put_retention(&admin, "vision", &json!({"days": 3})))
        .await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST, "{}", unknown.body);
    let long = app
        .send(put_retention(
            &admin,
            &"p".repeat(201),
            &json!({"log_days": 3}),
        ))
        .await;
    assert_eq!(long.status, StatusCode::UNPROCESSABLE_ENTITY);
    // Nothing changed by the refusals.
    assert_eq!(
        show(&app, &admin, "vision").await.json()["set"],
        json!({"log_days": 7, "report_days": 0})
    );

    // Admin only.
    for token in [&reader, &ingest] {
        let res = app
            .send(put_retention(token, "vision", &json!({"log_days": 1})))
            .await;
        assert_eq!(res.status, StatusCode::FORBIDDEN);
        assert_eq!(
            show(&app, token, "vision").await.status,
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            app.get_as(token, "/api/v1/retention").await.status,
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            delete(&app, token, "vision").await.status,
            StatusCode::FORBIDDEN
        );
    }
    assert_eq!(
        app.get("/api/v1/retention").await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(show(&app, &admin, "vision").await.json()["log_days"], 7);

    // The overview lists both projects with their settings and the defaults.
    let overview = app.get_as(&admin, "/api/v1/retention").await;
    assert_eq!(overview.status, StatusCode::OK);
    let o: Value = overview.json();
    assert_eq!(o["defaults"], json!({"log_days": 30, "report_days": 365}));
    let names: Vec<&str> = o["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["project"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["team/vision", "vision"]);

    // Back to the defaults; a second reset has nothing to remove.
    let reset = delete(&app, &admin, "Vision").await;
    assert_eq!(reset.status, StatusCode::OK, "{}", reset.body);
    assert_eq!(reset.json()["log_days"], 30);
    assert_eq!(
        delete(&app, &admin, "vision").await.status,
        StatusCode::NOT_FOUND
    );
}

async fn post_form(
    app: &TestApp,
    cookie: &str,
    path: &str,
    fields: &[(&str, &str)],
) -> TestResponse {
    let body = serde_urlencoded::to_string(fields).unwrap();
    let req = Request::post(path)
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(body))
        .unwrap();
    app.send(req).await
}

async fn stored(app: &TestApp) -> Vec<(String, Option<i32>, Option<i32>)> {
    sqlx::query_as("SELECT project, log_days, report_days FROM project_retention ORDER BY 1")
        .fetch_all(app.db.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn the_retention_page_is_for_admins_and_refuses_bad_days_with_the_reason() {
    let (app, admin) = app_with(&settings(0, 90, 500)).await;
    let reader = app.token("reader", &[Scope::Read]).await;
    let r = sign_in(&app, &reader).await;
    assert_eq!(
        page(&app, &r.cookie, "/retention").await.status,
        StatusCode::FORBIDDEN
    );
    let refused = post_form(
        &app,
        &r.cookie,
        "/retention",
        &[("csrf", &r.csrf), ("project", "vision"), ("log_days", "3")],
    )
    .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);

    let b = sign_in(&app, &admin).await;
    let shown = page(&app, &b.cookie, "/retention").await;
    assert_eq!(shown.status, StatusCode::OK, "{}", shown.body);
    assert_eq!(texts(&shown.body, "#default-logs"), ["forever"]);
    assert_eq!(texts(&shown.body, "#default-reports"), ["90 days"]);
    assert!(texts(&shown.body, "nav a").contains(&"Retention".to_owned()));

    // Without the session's CSRF token: refused, nothing stored.
    let no_csrf = post_form(
        &app,
        &b.cookie,
        "/retention",
        &[("project", "vision"), ("log_days", "3")],
    )
    .await;
    assert_eq!(no_csrf.status, StatusCode::FORBIDDEN);
    for (log, report, field) in [
        ("-3", "", "log_days"),
        ("abc", "", "log_days"),
        ("", "99999999999", "report_days"),
        ("", "1.5", "report_days"),
    ] {
        let res = post_form(
            &app,
            &b.cookie,
            "/retention",
            &[
                ("csrf", &b.csrf),
                ("project", "vision"),
                ("log_days", log),
                ("report_days", report),
            ],
        )
        .await;
        assert_eq!(
            res.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{log}/{report}"
        );
        let message = texts(&res.body, "#form-error").concat();
        assert!(
            message.starts_with(&format!("Not saved: {field} must be a whole number")),
            "{message}"
        );
        // The form shows what was typed, to correct it.
        let typed = crate::browse::attr(&res.body, "#set input[name=project]", "value");
        assert_eq!(typed.as_deref(), Some("vision"));
    }
    assert!(stored(&app).await.is_empty());

    let saved = post_form(
        &app,
        &b.cookie,
        "/retention",
        &[
            ("csrf", &b.csrf),
            ("project", "Vision"),
            ("log_days", "7"),
            ("report_days", ""),
        ],
    )
    .await;
    assert_eq!(saved.status, StatusCode::SEE_OTHER, "{}", saved.body);
    assert_eq!(stored(&app).await, [("vision".to_owned(), Some(7), None)]);
    let shown = page(&app, &b.cookie, "/retention").await;
    assert_eq!(
        texts(&shown.body, "tr[data-project=vision] .logs-kept"),
        ["7 days"]
    );
    assert_eq!(
        texts(&shown.body, "tr[data-project=vision] .reports-kept"),
        ["90 days"]
    );
    assert_eq!(
        texts(&shown.body, "tr[data-project=vision] .source"),
        ["own"]
    );

    let reset = post_form(
        &app,
        &b.cookie,
        "/retention/reset",
        &[("csrf", &b.csrf), ("project", "vision")],
    )
    .await;
    assert_eq!(reset.status, StatusCode::SEE_OTHER);
    assert!(stored(&app).await.is_empty());
}
