//! Tokens belong to someone (issue 31 item 4): a member creates, sees and revokes their own
//! tokens with no scope their role lacks; a viewer holds none; an admin sees every token with
//! its owner and creates service tokens for CI and workers; a person's token acts with no more
//! than the person's role now.

use axum::http::StatusCode;
use gpu_triage::auth::Scope;

use super::{app_for, app_get, app_post, person_id, provider, signed_in};
use crate::browse::{attr, texts};
use crate::support::TestApp;

/// The status of `POST /api/v1/reports` with one log, as `token`.
async fn upload_with(app: &TestApp, token: &str) -> StatusCode {
    let log: &[u8] = b"RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n";
    app.upload(token, &[("log", Some("run.log"), log)], None)
        .await
        .status
}

#[tokio::test]
async fn a_member_creates_their_own_token_and_cannot_create_an_admin_scope_one() {
    let Some(provider) = provider("oidc::tokens::member") else {
        return;
    };
    provider.set_groups(&[("ana", &["ml-team"])]);
    let app = app_for(&provider.issuer).await;
    let service = app.token("ci-service", &[Scope::Ingest]).await;
    let mut ana = signed_in(&app, &provider, "ana").await;

    // The page offers the scopes a member has, and lists none of the others' tokens.
    let page = app_get(&app, &mut ana, "/tokens").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("href=\"/tokens\""), "the nav links it");
    let offered: Vec<String> = texts(&page.body, "form.token-form fieldset code");
    assert_eq!(offered, ["ingest", "read"]);
    assert!(!page.body.contains("ci-service"), "{}", page.body);
    assert!(!page.body.contains("name=\"owner\""), "no service tokens");

    // An admin-scope token is refused with the reason, and nothing is stored.
    let before = app.count("tokens").await;
    let res = app_post(
        &app,
        &mut ana,
        "/tokens",
        &[("name", "root-please"), ("scope_admin", "on")],
    )
    .await;
    assert_eq!(res.status, StatusCode::FORBIDDEN, "{}", res.body);
    let error = texts(&res.body, "#token-error").concat();
    assert!(
        error.contains("your role (member) cannot give a token the admin scope"),
        "{error}"
    );
    assert_eq!(
        attr(&res.body, "#token-name", "value").as_deref(),
        Some("root-please")
    );
    let res = app_post(
        &app,
        &mut ana,
        "/tokens",
        &[("name", "w"), ("scope_read", "on"), ("scope_worker", "on")],
    )
    .await;
    assert_eq!(res.status, StatusCode::FORBIDDEN, "{}", res.body);
    assert_eq!(app.count("tokens").await, before);

    // An ingest token of her own: it uploads, and it is hers.
    let res = app_post(
        &app,
        &mut ana,
        "/tokens",
        &[
            ("name", "ana-ci"),
            ("scope_ingest", "on"),
            ("expires_in_days", "30"),
        ],
    )
    .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert_eq!(texts(&res.body, "#token-owner").concat(), "Ana");
    let secret = attr(&res.body, "input#secret", "value").unwrap();
    assert_eq!(upload_with(&app, &secret).await, StatusCode::CREATED);
    assert_eq!(
        app.get_as(&secret, "/api/v1/tokens").await.status,
        StatusCode::FORBIDDEN
    );
    let (owner, created_by): (Option<i64>, String) =
        sqlx::query_as("SELECT owner_person_id, created_by FROM tokens WHERE name = 'ana-ci'")
            .fetch_one(app.db.pool())
            .await
            .unwrap();
    assert_eq!(owner, Some(person_id(&app, "ana").await));
    assert_eq!(created_by, "Ana");
    let page = app_get(&app, &mut ana, "/tokens").await;
    assert_eq!(texts(&page.body, "tr.token-row").len(), 1);

    // She revokes her own token, but not another's (that one is not hers to see: 404).
    let service_id: i64 = sqlx::query_scalar("SELECT id FROM tokens WHERE name = 'ci-service'")
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    let res = app_post(&app, &mut ana, &format!("/tokens/{service_id}/revoke"), &[]).await;
    assert_eq!(res.status, StatusCode::NOT_FOUND, "{}", res.body);
    assert_eq!(upload_with(&app, &service).await, StatusCode::CREATED);
    let own_id: i64 = sqlx::query_scalar("SELECT id FROM tokens WHERE name = 'ana-ci'")
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    let res = app_post(&app, &mut ana, &format!("/tokens/{own_id}/revoke"), &[]).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    assert_eq!(upload_with(&app, &secret).await, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_viewer_cannot_create_tokens() {
    let Some(provider) = provider("oidc::tokens::viewer") else {
        return;
    };
    provider.set_groups(&[("bo", &["everyone"])]);
    let app = app_for(&provider.issuer).await;
    let mut bo = signed_in(&app, &provider, "bo").await;
    let home = app_get(&app, &mut bo, "/").await;
    assert!(!home.body.contains("href=\"/tokens\""), "no Tokens link");
    let page = app_get(&app, &mut bo, "/tokens").await;
    assert_eq!(page.status, StatusCode::FORBIDDEN, "{}", page.body);
    assert!(
        page.body
            .contains("your role (viewer) cannot hold API tokens"),
        "{}",
        page.body
    );
    let res = app_post(
        &app,
        &mut bo,
        "/tokens",
        &[("name", "mine"), ("scope_read", "on")],
    )
    .await;
    assert_eq!(res.status, StatusCode::FORBIDDEN, "{}", res.body);
    assert_eq!(app.count("tokens").await, 0);
}

#[tokio::test]
async fn an_admin_sees_every_token_with_its_owner_and_creates_service_tokens() {
    let Some(provider) = provider("oidc::tokens::admin") else {
        return;
    };
    provider.set_groups(&[("root", &["triage-admins"]), ("ana", &["ml-team"])]);
    let app = app_for(&provider.issuer).await;
    let mut ana = signed_in(&app, &provider, "ana").await;
    let res = app_post(
        &app,
        &mut ana,
        "/tokens",
        &[("name", "ana-laptop"), ("scope_read", "on")],
    )
    .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);

    let mut root = signed_in(&app, &provider, "root").await;
    let page = app_get(&app, &mut root, "/tokens").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let offered: Vec<String> = texts(&page.body, "form.token-form fieldset code");
    assert_eq!(offered, ["ingest", "read", "worker", "admin"]);
    assert!(page.body.contains("value=\"service\""), "{}", page.body);
    let res = app_post(
        &app,
        &mut root,
        "/tokens",
        &[
            ("name", "gpu-host-1"),
            ("scope_worker", "on"),
            ("owner", "service"),
        ],
    )
    .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert!(
        texts(&res.body, "#token-owner")
            .concat()
            .contains("service token"),
        "{}",
        res.body
    );
    let res = app_post(
        &app,
        &mut root,
        "/tokens",
        &[("name", "root-cli"), ("scope_admin", "on"), ("owner", "me")],
    )
    .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert_eq!(texts(&res.body, "#token-owner").concat(), "Root");

    let page = app_get(&app, &mut root, "/tokens").await;
    let owners: Vec<(String, String)> = texts(&page.body, "tr.token-row td[data-label=Name]")
        .into_iter()
        .zip(texts(&page.body, "tr.token-row .token-owner"))
        .collect();
    assert_eq!(
        owners,
        [
            ("root-cli".to_owned(), "Root".to_owned()),
            ("gpu-host-1".to_owned(), "service".to_owned()),
            ("ana-laptop".to_owned(), "Ana".to_owned()),
        ]
    );
    // The API lists the owners too.
    let admin = app.token("first-admin", &[Scope::Admin]).await;
    let list = app.get_as(&admin, "/api/v1/tokens").await.json();
    let ana_token = list["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "ana-laptop")
        .unwrap()
        .clone();
    assert_eq!(ana_token["owner_name"], "Ana");
    assert_eq!(ana_token["owner_person_id"], person_id(&app, "ana").await);
    let first = (list["tokens"].as_array().unwrap().iter())
        .find(|t| t["name"] == "first-admin")
        .unwrap()
        .clone();
    assert!(first["owner_person_id"].is_null() && first["owner_name"].is_null());
}

#[tokio::test]
async fn a_persons_token_acts_with_no_more_than_their_role_now() {
    let Some(provider) = provider("oidc::tokens::clamped") else {
        return;
    };
    provider.set_groups(&[("ana", &["ml-team"])]);
    let app = app_for(&provider.issuer).await;
    let mut ana = signed_in(&app, &provider, "ana").await;
    let res = app_post(
        &app,
        &mut ana,
        "/tokens",
        &[
            ("name", "ana-ci"),
            ("scope_ingest", "on"),
            ("scope_read", "on"),
        ],
    )
    .await;
    let secret = attr(&res.body, "input#secret", "value").unwrap();
    assert_eq!(upload_with(&app, &secret).await, StatusCode::CREATED);
    // Moved to the viewers at the provider: from her next sign-in on, her token reads only.
    provider.set_groups(&[("ana", &["everyone"])]);
    signed_in(&app, &provider, "ana").await;
    assert_eq!(upload_with(&app, &secret).await, StatusCode::FORBIDDEN);
    assert_eq!(
        app.get_as(&secret, "/api/v1/search?q=memory").await.status,
        StatusCode::OK
    );
}
