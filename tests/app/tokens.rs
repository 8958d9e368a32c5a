//! Tokens managed by admins over the API and in the portal (issue 30 item 7): create with
//! scopes and an optional expiry (the secret shown once, never listed), list with last use,
//! revoke (the token and its sessions stop at once); only admins; the CLI keeps working.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpu_triage::auth::Scope;
use serde_json::json;

use crate::browse::{attr, page, sign_in, texts};
use crate::support::TestApp;

async fn delete_as(app: &TestApp, token: &str, path: &str) -> crate::support::TestResponse {
    let req = Request::delete(path)
        .header("authorization", format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    app.send(req).await
}

#[tokio::test]
async fn admins_create_list_and_revoke_tokens_over_the_api_and_a_secret_is_shown_once() {
    let app = TestApp::spawn().await;
    let admin = app.token("root", &[Scope::Admin]).await;
    let created = app
        .post_json(
            &admin,
            "/api/v1/tokens",
            &json!({"name": "ci-vision", "scopes": ["ingest", "read", "ingest"], "expires_in_days": 30}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let v = created.json();
    let secret = v["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("gtr_") && secret.len() == 68, "{secret}");
    assert_eq!(v["scopes"], json!(["ingest", "read"]));
    assert_eq!(v["state"], "active");
    assert_eq!(v["created_by"], "root");
    assert!(v["expires_at"].is_string());
    let id = v["id"].as_i64().unwrap();
    // The new token works at once, with its scopes only.
    assert_eq!(
        app.get_as(&secret, "/api/v1/groups").await.status,
        StatusCode::OK
    );
    assert_eq!(
        app.get_as(&secret, "/api/v1/tokens").await.status,
        StatusCode::FORBIDDEN
    );

    // The list shows it with its prefix and last use, never a secret.
    let list = app.get_as(&admin, "/api/v1/tokens").await;
    assert_eq!(list.status, StatusCode::OK);
    assert!(!list.body.contains(&secret[4..]), "a secret in the listing");
    assert!(!list.body.contains("\"secret\""));
    let listed = list.json()["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .cloned()
        .unwrap();
    assert_eq!(listed["prefix"], json!(&secret[..12]));
    assert!(listed["last_used_at"].is_string(), "{listed}");

    // Bad requests say what is wrong; non-admins are refused before the body is read.
    for (body, needle) in [
        (json!({"name": " ", "scopes": ["read"]}), "name"),
        (json!({"name": "x", "scopes": []}), "scope"),
        (
            json!({"name": "x", "scopes": ["root"]}),
            "unknown scope \"root\"",
        ),
        (
            json!({"name": "x", "scopes": ["read"], "expires_in_days": 0}),
            "expires_in_days",
        ),
        (
            json!({"name": "x", "scopes": ["read"], "expires_in_days": 99999}),
            "expires_in_days",
        ),
    ] {
        let res = app.post_json(&admin, "/api/v1/tokens", &body).await;
        assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        let error = &res.json()["error"];
        assert_eq!(error["code"], "invalid_token");
        assert!(
            error["message"].as_str().unwrap().contains(needle),
            "{body}: {}",
            res.body
        );
    }
    let res = app
        .post_json(
            &admin,
            "/api/v1/tokens",
            &json!({"name": "x", "scopes": ["read"], "owner": 1}),
        )
        .await;
    assert_eq!(res.status, StatusCode::BAD_REQUEST);
    let res = app
        .post_json(&secret, "/api/v1/tokens", &json!("not even an object"))
        .await;
    assert_eq!(res.status, StatusCode::FORBIDDEN);

    // Revoked: it stops at once; a second revoke and an unknown id are 404.
    let revoked = delete_as(&app, &admin, &format!("/api/v1/tokens/{id}")).await;
    assert_eq!(revoked.status, StatusCode::OK, "{}", revoked.body);
    assert_eq!(revoked.json()["state"], "revoked");
    assert_eq!(
        app.get_as(&secret, "/api/v1/groups").await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        delete_as(&app, &admin, &format!("/api/v1/tokens/{id}"))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        delete_as(&app, &admin, "/api/v1/tokens/999999")
            .await
            .status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn an_expired_token_authenticates_nothing_and_its_sessions_end() {
    let app = TestApp::spawn().await;
    let admin = app.token("root", &[Scope::Admin]).await;
    let v = app
        .post_json(
            &admin,
            "/api/v1/tokens",
            &json!({"name": "short", "scopes": ["read"], "expires_in_days": 1}),
        )
        .await
        .json();
    let secret = v["secret"].as_str().unwrap().to_owned();
    let b = sign_in(&app, &secret).await;
    assert_eq!(
        page(&app, &b.cookie, "/reports").await.status,
        StatusCode::OK
    );
    // A day later (the clock is the database's: move the expiry instead).
    sqlx::query("UPDATE tokens SET expires_at = now() - interval '1 second' WHERE id = $1")
        .bind(v["id"].as_i64().unwrap())
        .execute(app.db.pool())
        .await
        .unwrap();
    assert_eq!(
        app.get_as(&secret, "/api/v1/groups").await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        page(&app, &b.cookie, "/reports").await.status,
        StatusCode::SEE_OTHER
    );
    let list = app.get_as(&admin, "/api/v1/tokens").await.json();
    let state = list["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "short")
        .unwrap()["state"]
        .clone();
    assert_eq!(state, "expired");
}

#[tokio::test]
async fn admins_manage_tokens_in_the_portal_with_the_secret_shown_once() {
    let app = TestApp::spawn().await;
    let admin = app.token("root", &[Scope::Admin]).await;
    let b = sign_in(&app, &admin).await;
    let list = page(&app, &b.cookie, "/tokens").await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.body);
    assert_eq!(texts(&list.body, "tr.token-row").len(), 1);

    let post = |body: String| {
        let req = Request::post("/tokens")
            .header("cookie", &b.cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from(body))
            .unwrap();
        app.send(req)
    };
    // Refused: no scope ticked; the typed name comes back.
    let res = post(format!(
        "csrf={}&name=gpu-worker-1&expires_in_days=",
        b.csrf
    ))
    .await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(texts(&res.body, "#token-error").concat().contains("scope"));
    assert_eq!(
        attr(&res.body, "#token-name", "value").as_deref(),
        Some("gpu-worker-1")
    );
    // Without the CSRF token: refused, nothing created.
    let res = post("name=x&scope_read=on".into()).await;
    assert_eq!(res.status, StatusCode::FORBIDDEN);
    assert_eq!(app.count("tokens").await, 1);
    // Created: the secret is on this answer only.
    let res = post(format!(
        "csrf={}&name=gpu-worker-1&scope_worker=on&expires_in_days=90",
        b.csrf
    ))
    .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let secret = attr(&res.body, "input#secret", "value").unwrap();
    assert!(secret.starts_with("gtr_"));
    let claim = app.get_as(&secret, "/api/v1/tokens").await;
    assert_eq!(
        claim.status,
        StatusCode::FORBIDDEN,
        "a worker token is not an admin"
    );
    let list = page(&app, &b.cookie, "/tokens").await;
    assert!(
        !list.body.contains(&secret[4..]),
        "the secret is never shown again"
    );
    let rows = texts(&list.body, "tr.token-row");
    assert_eq!(rows.len(), 2);
    assert!(
        rows[0].contains("gpu-worker-1")
            && rows[0].contains("worker")
            && rows[0].contains("by root"),
        "{}",
        rows[0]
    );
    // Revoke, confirmed behind a disclosure; then the token is refused.
    let id: i64 = attr(&list.body, "tr.token-row", "id").unwrap()["token-".len()..]
        .parse()
        .unwrap();
    assert!(
        attr(
            &list.body,
            &format!("#token-{id} details.confirm form"),
            "action"
        )
        .is_some()
    );
    let req = Request::post(format!("/tokens/{id}/revoke"))
        .header("cookie", &b.cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(format!("csrf={}", b.csrf)))
        .unwrap();
    let res = app.send(req).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER);
    assert_eq!(
        app.get_as(&secret, "/api/v1/groups").await.status,
        StatusCode::UNAUTHORIZED
    );
    let list = page(&app, &b.cookie, "/tokens").await;
    assert!(texts(&list.body, &format!("#token-{id} .token-state")).concat() == "revoked");

    // Not an admin: 403, and no Tokens link.
    let reader = app.token("viewer", &[Scope::Read, Scope::Ingest]).await;
    let r = sign_in(&app, &reader).await;
    assert_eq!(
        page(&app, &r.cookie, "/tokens").await.status,
        StatusCode::FORBIDDEN
    );
    let home = page(&app, &r.cookie, "/").await;
    assert!(!home.body.contains("href=\"/tokens\""));
}

/// A token's last use is written while uploads hold its row (issue 42): an upload keeps its
/// token's row share-locked until it commits, and with uploads overlapping all the time an
/// update of that row waited for all of them (34 s in the API benchmark), and the request
/// that carried it with it.
#[tokio::test]
async fn a_requests_last_use_is_recorded_while_an_upload_holds_the_tokens_row() {
    let app = TestApp::spawn().await;
    let token = app.token("ci", &[Scope::Read]).await;
    let id: i64 = sqlx::query_scalar("SELECT id FROM tokens WHERE name = 'ci'")
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    // What an upload's transaction holds until it commits (`storage::tokens::lock_live`).
    let mut upload = app.db.pool().begin().await.unwrap();
    sqlx::query("SELECT id FROM tokens WHERE id = $1 FOR SHARE")
        .bind(id)
        .execute(&mut *upload)
        .await
        .unwrap();
    let res = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        app.get_as(&token, "/api/v1/search?q=x"),
    )
    .await
    .expect("the request is answered while the upload holds the token's row");
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let used: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM token_usage WHERE token_id = $1)")
            .bind(id)
            .fetch_one(app.db.pool())
            .await
            .unwrap();
    assert!(used, "its last use is recorded");
    upload.rollback().await.unwrap();
}
