//! Server-side request forgery: loopback, private and link-local destinations are refused when
//! an endpoint is saved and again when a delivery resolves its name, unless the operator allows
//! them; and every bad field is a 422 naming it.

use std::time::Duration;

use axum::http::StatusCode;
use gpu_triage::app::webhooks::{WebhookSettings, deliver};
use gpu_triage::auth::Scope;
use serde_json::json;

use super::{
    OOB_LOG, PUBLIC_URL, Receiver, app_with, create_endpoint, deliveries, settings, upload,
};
use crate::support::{TestApp, wait_until_async};

#[tokio::test]
async fn private_destinations_are_refused_without_the_allow_flag() {
    let app = TestApp::spawn().await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    for url in [
        "http://127.0.0.1:8080/hook",
        "http://localhost/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/x",
        "http://10.0.0.7/x",
    ] {
        let res = app
            .post_json(
                &admin,
                "/api/v1/webhooks",
                &json!({"url": url, "events": ["new_group"]}),
            )
            .await;
        assert_eq!(
            res.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{url}: {}",
            res.body
        );
        assert_eq!(res.error_code(), "invalid_webhook");
        let message = res.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.contains("--webhook-allow-private"), "{message}");
    }
    for (body, want) in [
        (
            json!({"url": "ftp://example.com/", "events": ["new_group"]}),
            "http:// or https://",
        ),
        (
            json!({"url": "https://example.com/", "events": ["push"]}),
            "unknown event \"push\"",
        ),
        (
            json!({"url": "https://example.com/", "events": []}),
            "at least one",
        ),
        (json!({"events": ["new_group"]}), "url is required"),
        (
            json!({"url": "https://example.com/", "events": ["new_group"], "secret": "short"}),
            "secret",
        ),
        (
            json!({"url": "https://example.com/", "events": ["new_group"], "categories": ["oom"]}),
            "unknown category",
        ),
    ] {
        let res = app.post_json(&admin, "/api/v1/webhooks", &body).await;
        assert_eq!(
            res.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}: {}",
            res.body
        );
        let message = res.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.contains(want), "{body}: {message}");
    }
    let ingest = app.token("ci", &[Scope::Ingest]).await;
    let forbidden = app
        .post_json(
            &ingest,
            "/api/v1/webhooks",
            &json!({"url": "https://example.com/", "events": ["new_group"]}),
        )
        .await;
    assert_eq!(forbidden.status, StatusCode::FORBIDDEN);
    assert_eq!(app.count("webhook_endpoints").await, 0);

    // A name that resolves to loopback is refused again when delivered, not only when saved:
    // saved while private destinations were allowed, delivered by a task that forbids them.
    let receiver = Receiver::start(0).await;
    let port = receiver.url.rsplit(':').next().unwrap().to_owned();
    let allowing = app_with(&settings()).await;
    let admin2 = allowing.token("admin", &[Scope::Admin]).await;
    let ingest2 = allowing.token("ci", &[Scope::Ingest]).await;
    let endpoint = create_endpoint(
        &allowing,
        &admin2,
        json!({"url": format!("http://localhost:{port}"), "events": ["new_group"]}),
    )
    .await["id"]
        .as_i64()
        .unwrap();
    let strict = WebhookSettings {
        allow_private: false,
        backoff: Vec::new(),
        ..settings()
    };
    let sender = deliver::spawn(allowing.db.clone(), strict, PUBLIC_URL.into());
    upload(&allowing, &ingest2, "vision", OOB_LOG).await;
    wait_until_async(
        Duration::from_secs(20),
        "the delivery given up",
        async || {
            deliveries(&allowing, &admin2, endpoint)
                .await
                .first()
                .is_some_and(|d| d["state"] == "dead")
        },
    )
    .await;
    let d = deliveries(&allowing, &admin2, endpoint).await.remove(0);
    let error = d["last_error"].as_str().unwrap();
    assert!(error.contains("--webhook-allow-private"), "{error}");
    assert!(d["last_status"].is_null());
    assert!(receiver.got().is_empty(), "nothing reached the receiver");
    sender.abort();
}
