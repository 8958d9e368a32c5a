//! The webhook pages: admin only, CSRF on every form, the secret shown once, the delivery log
//! with each attempt's status code.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpu_triage::app::webhooks::deliver;
use gpu_triage::auth::Scope;

use super::{PUBLIC_URL, Receiver, app_with, settings};
use crate::browse::{attr, page, sign_in, texts};
use crate::support::{TestApp, TestResponse, wait_until_async};

pub(super) async fn post_form(
    app: &TestApp,
    cookie: &str,
    path: &str,
    fields: &[(&str, &str)],
) -> TestResponse {
    let body = fields
        .iter()
        .map(|(k, v)| format!("{k}={}", urlencode(v)))
        .collect::<Vec<_>>()
        .join("&");
    let req = Request::post(path)
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(body))
        .unwrap();
    app.send(req).await
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|c| match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (c as char).to_string()
            }
            _ => format!("%{c:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn admins_manage_endpoints_in_the_portal_with_csrf_and_see_the_delivery_log() {
    let settings = settings();
    let app = app_with(&settings).await;
    let receiver = Receiver::start(1).await;
    let admin = app.token("alice", &[Scope::Admin]).await;
    let reader = app.token("bob", &[Scope::Read]).await;
    let b = sign_in(&app, &admin).await;

    let list = page(&app, &b.cookie, "/webhooks").await;
    assert_eq!(list.status, StatusCode::OK);
    assert!(texts(&list.body, "p.empty").len() == 1, "{}", list.body);

    let form = [
        ("url", receiver.url.as_str()),
        ("events", "new_group"),
        ("events", "rule_saved"),
        ("format", "json"),
        ("projects", "vision, nlp"),
        ("categories", ""),
        ("description", "ops channel"),
    ];
    // Without the session's CSRF token: refused, nothing stored.
    let refused = post_form(&app, &b.cookie, "/webhooks", &form).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(app.count("webhook_endpoints").await, 0);
    let mut with_csrf = vec![("csrf", b.csrf.as_str())];
    with_csrf.extend_from_slice(&form);
    let created = post_form(&app, &b.cookie, "/webhooks", &with_csrf).await;
    assert_eq!(created.status, StatusCode::OK, "{}", created.body);
    let secret = texts(&created.body, "code.secret").remove(0);
    assert!(
        secret.starts_with("whsec_") && secret.len() > 40,
        "{secret}"
    );
    let id: i64 = sqlx::query_scalar("SELECT id FROM webhook_endpoints")
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    let stored: (Vec<String>, Vec<String>) =
        sqlx::query_as("SELECT events, projects FROM webhook_endpoints WHERE id = $1")
            .bind(id)
            .fetch_one(app.db.pool())
            .await
            .unwrap();
    assert_eq!(stored.0, ["new_group", "rule_saved"]);
    assert_eq!(stored.1, ["vision", "nlp"]);
    // Listed and shown without the secret.
    for path in ["/webhooks".to_owned(), format!("/webhooks/{id}")] {
        let p = page(&app, &b.cookie, &path).await;
        assert_eq!(p.status, StatusCode::OK);
        assert!(!p.body.contains(&secret), "{path} shows the secret");
        assert!(p.body.contains(&receiver.url), "{path}");
    }
    // A bad URL is refused on the page with the reason.
    let mut bad = with_csrf.clone();
    bad[1] = ("url", "gopher://example.com/");
    let bad = post_form(&app, &b.cookie, "/webhooks", &bad).await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        texts(&bad.body, ".error-message")
            .concat()
            .contains("http:// or https://"),
        "{}",
        bad.body
    );

    // Send test: the delivery log shows its attempts and status codes.
    let sender = deliver::spawn(app.db.clone(), settings, PUBLIC_URL.into());
    let tested = post_form(
        &app,
        &b.cookie,
        &format!("/webhooks/{id}/test"),
        &[("csrf", &b.csrf)],
    )
    .await;
    assert_eq!(tested.status, StatusCode::SEE_OTHER, "{}", tested.body);
    wait_until_async(Duration::from_secs(20), "the test delivered", async || {
        let p = page(&app, &b.cookie, &format!("/webhooks/{id}")).await;
        texts(&p.body, "tr.delivery .state")
            .concat()
            .contains("delivered")
    })
    .await;
    let shown = page(&app, &b.cookie, &format!("/webhooks/{id}")).await;
    assert_eq!(texts(&shown.body, "tr.delivery .event"), ["test"]);
    assert_eq!(
        texts(&shown.body, "tr.delivery .statuses")
            .concat()
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["500", "200"]
    );
    sender.abort();

    // Disable, then edit, then delete; each form needs the CSRF token.
    let off = post_form(
        &app,
        &b.cookie,
        &format!("/webhooks/{id}/enabled"),
        &[("csrf", &b.csrf), ("enabled", "false")],
    )
    .await;
    assert_eq!(off.status, StatusCode::SEE_OTHER);
    let enabled: bool = sqlx::query_scalar("SELECT enabled FROM webhook_endpoints")
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert!(!enabled);
    let edit = post_form(
        &app,
        &b.cookie,
        &format!("/webhooks/{id}"),
        &[
            ("csrf", &b.csrf),
            ("url", &receiver.url),
            ("events", "regression"),
            ("format", "slack"),
            ("projects", ""),
            ("categories", "out_of_memory"),
        ],
    )
    .await;
    assert_eq!(edit.status, StatusCode::SEE_OTHER, "{}", edit.body);
    let shown = page(&app, &b.cookie, &format!("/webhooks/{id}")).await;
    assert_eq!(
        attr(
            &shown.body,
            "input[name=events][value=regression]",
            "checked"
        ),
        Some(String::new())
    );
    assert_eq!(
        attr(
            &shown.body,
            "input[name=events][value=new_group]",
            "checked"
        ),
        None
    );
    let no_csrf = post_form(&app, &b.cookie, &format!("/webhooks/{id}/delete"), &[]).await;
    assert_eq!(no_csrf.status, StatusCode::FORBIDDEN);
    let deleted = post_form(
        &app,
        &b.cookie,
        &format!("/webhooks/{id}/delete"),
        &[("csrf", &b.csrf)],
    )
    .await;
    assert_eq!(deleted.status, StatusCode::SEE_OTHER);
    assert_eq!(app.count("webhook_endpoints").await, 0);

    // Someone without the admin scope gets 403 on the pages.
    let r = sign_in(&app, &reader).await;
    assert_eq!(
        page(&app, &r.cookie, "/webhooks").await.status,
        StatusCode::FORBIDDEN
    );
}
