//! Every spelling of an internal address that an attack pass got saved is refused when an
//! endpoint is created or changed, through the API and the portal form alike (422 naming the
//! flag that would allow it), and saved when the operator allows private destinations. Nothing
//! here connects anywhere: a save only parses the URL and asks the system resolver about names
//! that the hosts file holds.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpu_triage::auth::Scope;
use serde_json::json;

use super::portal::post_form;
use super::{app_with, settings};
use crate::browse::{sign_in, texts};
use crate::support::TestApp;

/// The spellings found saved, and more of the same families.
const SPELLINGS: &[&str] = &[
    "http://2130706433/",
    "http://0x7f000001/",
    "http://0177.0.0.1/",
    "http://017700000001/",
    "http://0x7f.0.0.1/",
    "http://127.1/",
    "http://0/",
    "http://127.0.0.1./",
    "http://localhost./",
    "http://0xa9fea9fe/latest/meta-data",
    "http://[::127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[2002:7f00:1::]/",
    "http://[64:ff9b::127.0.0.1]/",
    "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",
    "http://[fe80::1%25lo]/",
];

/// `http://NAME:8080/` for every name the hosts file maps to a loopback address (`localhost` at
/// least; other names are refused only because the resolver says where they point).
fn hosts_file_names() -> Vec<String> {
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let mut urls = Vec::new();
    for line in hosts.lines() {
        let line = line.split('#').next().unwrap_or_default();
        let mut words = line.split_whitespace();
        let loopback = words
            .next()
            .and_then(|a| a.parse::<std::net::IpAddr>().ok())
            .is_some_and(|ip| ip.is_loopback());
        if loopback {
            urls.extend(words.map(|name| format!("http://{name}:8080/")));
        }
    }
    assert!(
        urls.iter().any(|u| u.contains("localhost")),
        "the hosts file maps localhost: {urls:?}"
    );
    urls
}

fn all_spellings() -> Vec<String> {
    let mut urls: Vec<String> = SPELLINGS.iter().map(|s| (*s).to_owned()).collect();
    urls.extend(hosts_file_names());
    urls
}

async fn patch_json(app: &TestApp, token: &str, path: &str, body: &serde_json::Value) -> String {
    let req = Request::patch(path)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let res = app.send(req).await;
    assert_eq!(
        res.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{body}: {}",
        res.body
    );
    res.json()["error"]["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn every_spelling_of_an_internal_address_is_refused_at_save_in_the_api_and_the_portal() {
    let app = TestApp::spawn().await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let b = sign_in(&app, &admin).await;
    for url in all_spellings() {
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
        assert!(
            message.contains("--webhook-allow-private"),
            "{url}: {message}"
        );

        let form = [
            ("csrf", b.csrf.as_str()),
            ("url", url.as_str()),
            ("events", "new_group"),
            ("format", "json"),
        ];
        let page = post_form(&app, &b.cookie, "/webhooks", &form).await;
        assert_eq!(page.status, StatusCode::UNPROCESSABLE_ENTITY, "{url}");
        let shown = texts(&page.body, ".error-message").concat();
        assert!(shown.contains("--webhook-allow-private"), "{url}: {shown}");
    }
    assert_eq!(app.count("webhook_endpoints").await, 0);

    // Changing a saved endpoint's URL meets the same policy; the URL stays as it was.
    let public = "http://8.8.8.8/hook";
    let created = app
        .post_json(
            &admin,
            "/api/v1/webhooks",
            &json!({"url": public, "events": ["new_group"]}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let id = created.json()["id"].as_i64().unwrap();
    for url in all_spellings() {
        let message = patch_json(
            &app,
            &admin,
            &format!("/api/v1/webhooks/{id}"),
            &json!({ "url": url }),
        )
        .await;
        assert!(
            message.contains("--webhook-allow-private"),
            "{url}: {message}"
        );
    }
    let stored: String = sqlx::query_scalar("SELECT url FROM webhook_endpoints WHERE id = $1")
        .bind(id)
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert_eq!(stored, public);
}

#[tokio::test]
async fn the_allow_flag_still_lets_every_spelling_be_saved() {
    let app = app_with(&settings()).await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let urls = all_spellings();
    for url in &urls {
        let res = app
            .post_json(
                &admin,
                "/api/v1/webhooks",
                &json!({"url": url, "events": ["new_group"]}),
            )
            .await;
        assert_eq!(res.status, StatusCode::CREATED, "{url}: {}", res.body);
    }
    assert_eq!(app.count("webhook_endpoints").await, urls.len() as i64);
}
