//! Admins manage people (issue 31): the `/people` page and `/api/v1/people` list everyone who
//! signed in through the provider; disabling a person signs them out everywhere at once,
//! revokes their tokens and refuses their next sign-in; ending their sessions signs them out
//! without disabling them; only admins get either.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpu_triage::auth::Scope;

use super::{app_for, app_get, app_post, person_id, provider, sign_in, signed_in};
use crate::browse::{attr, texts};
use crate::support::{TestApp, TestResponse};

const LOG: &str = "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n";

/// `POST /api/v1/classify` with `token`: what a CI job with the token would get.
async fn classify_with(app: &TestApp, token: &str) -> StatusCode {
    let req = Request::post("/api/v1/classify")
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "text/plain")
        .body(Body::from(LOG))
        .unwrap();
    app.send(req).await.status
}

/// A member's own token, created on `/tokens` (its secret from the answer).
async fn own_token(app: &TestApp, jar: &mut super::Jar, name: &str) -> String {
    let res = app_post(
        app,
        jar,
        "/tokens",
        &[("name", name), ("scope_ingest", "on"), ("scope_read", "on")],
    )
    .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    attr(&res.body, "input#secret", "value").expect("the secret is shown once")
}

/// The `/people` row of person `id`: (text of each cell by class).
fn row(page: &TestResponse, id: i64, class: &str) -> String {
    texts(&page.body, &format!("#person-{id} .{class}")).join("")
}

#[tokio::test]
async fn a_disabled_person_is_signed_out_everywhere_and_cannot_sign_in_again() {
    let Some(provider) = provider("oidc::people::disabled_person") else {
        return;
    };
    provider.set_groups(&[("root", &["triage-admins"]), ("ana", &["ml-team"])]);
    let app = app_for(&provider.issuer).await;

    // Ana is signed in on two machines and has a token of her own for CI.
    let mut laptop = signed_in(&app, &provider, "ana").await;
    let mut phone = signed_in(&app, &provider, "ana").await;
    let token = own_token(&app, &mut laptop, "ana-ci").await;
    assert_eq!(classify_with(&app, &token).await, StatusCode::OK);
    let ana = person_id(&app, "ana").await;

    let mut root = signed_in(&app, &provider, "root").await;
    let me = person_id(&app, "root").await;
    let page = app_get(&app, &mut root, "/people").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert_eq!(row(&page, ana, "person-name"), "Ana");
    assert_eq!(row(&page, ana, "person-email"), "ana@example.test");
    assert_eq!(row(&page, ana, "person-role"), "member");
    assert_eq!(row(&page, ana, "person-sessions"), "2");
    assert_eq!(row(&page, ana, "person-tokens"), "1");
    assert_eq!(row(&page, ana, "person-state"), "enabled");
    assert!(page.body.contains(&provider.issuer), "the issuer is shown");
    // The admin's own row offers no way to lock themselves out.
    assert!(
        texts(&page.body, &format!("#person-{me} td"))
            .concat()
            .contains("(you)")
    );
    assert!(!page.body.contains(&format!("/people/{me}/disable")));
    assert!(page.body.contains(&format!("/people/{ana}/disable")));

    // A forged form (no CSRF token) changes nothing.
    let req = Request::post(format!("/people/{ana}/disable"))
        .header("cookie", root.header())
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from("csrf="))
        .unwrap();
    assert_eq!(app.send(req).await.status, StatusCode::FORBIDDEN);
    assert_eq!(app_get(&app, &mut laptop, "/").await.status, StatusCode::OK);

    let res = app_post(&app, &mut root, &format!("/people/{ana}/disable"), &[]).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    assert_eq!(super::location(&res), format!("/people#person-{ana}"));

    // Her very next request, on either machine, is signed out; her token stops.
    for jar in [&mut laptop, &mut phone] {
        let res = app_get(&app, jar, "/groups").await;
        assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
        assert!(super::location(&res).starts_with("/login"));
    }
    assert_eq!(classify_with(&app, &token).await, StatusCode::UNAUTHORIZED);
    let page = app_get(&app, &mut root, "/people").await;
    assert_eq!(row(&page, ana, "person-state"), "disabled");
    assert_eq!(row(&page, ana, "person-sessions"), "0");
    assert_eq!(row(&page, ana, "person-tokens"), "0");
    assert!(page.body.contains(&format!("/people/{ana}/enable")));

    // Signing in again is refused with a page that says why, and opens no session.
    let mut again = super::Jar::default();
    let res = sign_in(&app, &provider, &mut again, "ana").await;
    assert_eq!(res.status, StatusCode::FORBIDDEN, "{}", res.body);
    assert!(res.body.contains("disabled"), "{}", res.body);
    assert!(again.get("gt_session").is_none());

    // Enabled again, she signs in; the revoked token stays revoked.
    let res = app_post(&app, &mut root, &format!("/people/{ana}/enable"), &[]).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    let mut back = signed_in(&app, &provider, "ana").await;
    assert_eq!(app_get(&app, &mut back, "/").await.status, StatusCode::OK);
    assert_eq!(classify_with(&app, &token).await, StatusCode::UNAUTHORIZED);

    // An admin cannot disable themselves.
    let res = app_post(&app, &mut root, &format!("/people/{me}/disable"), &[]).await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", res.body);
    assert!(
        texts(&res.body, "#people-error")
            .concat()
            .contains("cannot disable yourself"),
        "{}",
        res.body
    );
    assert_eq!(
        app_get(&app, &mut root, "/people").await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_person_disabled_while_signed_in_is_refused_on_the_next_request() {
    let Some(provider) = provider("oidc::people::disabled_mid_session") else {
        return;
    };
    provider.set_groups(&[("ana", &["ml-team"])]);
    let app = app_for(&provider.issuer).await;
    let mut jar = signed_in(&app, &provider, "ana").await;
    assert_eq!(
        app_get(&app, &mut jar, "/groups").await.status,
        StatusCode::OK
    );
    // Disabled by another route than the page (whose transaction also ends her sessions): the
    // session row is still there, and the person's state alone refuses it.
    sqlx::query("UPDATE people SET disabled_at = now() WHERE subject = 'ana'")
        .execute(app.db.pool())
        .await
        .unwrap();
    assert_eq!(app.count("sessions").await, 1);
    let res = app_get(&app, &mut jar, "/groups").await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    assert!(super::location(&res).starts_with("/login"));
    let home = app_get(&app, &mut jar, "/").await;
    assert!(
        !super::header_user(&home.body).contains("Ana"),
        "{}",
        home.body
    );
}

#[tokio::test]
async fn an_admin_ends_a_persons_sessions_without_disabling_them() {
    let Some(provider) = provider("oidc::people::end_sessions") else {
        return;
    };
    provider.set_groups(&[("root", &["triage-admins"]), ("bo", &["everyone"])]);
    let app = app_for(&provider.issuer).await;
    let mut bo = signed_in(&app, &provider, "bo").await;
    let bo_id = person_id(&app, "bo").await;
    let mut root = signed_in(&app, &provider, "root").await;
    let res = app_post(
        &app,
        &mut root,
        &format!("/people/{bo_id}/sessions/revoke"),
        &[],
    )
    .await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    let res = app_get(&app, &mut bo, "/groups").await;
    assert_eq!(
        res.status,
        StatusCode::SEE_OTHER,
        "signed out: {}",
        res.body
    );
    let page = app_get(&app, &mut root, "/people").await;
    assert_eq!(row(&page, bo_id, "person-sessions"), "0");
    assert_eq!(row(&page, bo_id, "person-state"), "enabled");
    // Not disabled: a new sign-in works.
    let mut bo = signed_in(&app, &provider, "bo").await;
    assert_eq!(
        app_get(&app, &mut bo, "/groups").await.status,
        StatusCode::OK
    );

    // Ending one's own sessions signs this browser out too.
    let me = person_id(&app, "root").await;
    let res = app_post(
        &app,
        &mut root,
        &format!("/people/{me}/sessions/revoke"),
        &[],
    )
    .await;
    assert_eq!(super::location(&res), "/login");
    assert_ne!(
        app_get(&app, &mut root, "/people").await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn the_people_page_and_api_are_for_admins_only() {
    let Some(provider) = provider("oidc::people::admins_only") else {
        return;
    };
    provider.set_groups(&[("ana", &["ml-team"]), ("bo", &["everyone"])]);
    let app = app_for(&provider.issuer).await;
    for (login, role) in [("ana", "member"), ("bo", "viewer")] {
        let mut jar = signed_in(&app, &provider, login).await;
        let home = app_get(&app, &mut jar, "/").await;
        assert!(
            !home.body.contains("href=\"/people\""),
            "no People link for a {role}"
        );
        let res = app_get(&app, &mut jar, "/people").await;
        assert_eq!(res.status, StatusCode::FORBIDDEN, "{}", res.body);
        assert!(
            res.body
                .contains(&format!("your role ({role}) does not allow this")),
            "{}",
            res.body
        );
        let ana = person_id(&app, "ana").await;
        let res = app_post(&app, &mut jar, &format!("/people/{ana}/disable"), &[]).await;
        assert_eq!(res.status, StatusCode::FORBIDDEN, "{}", res.body);
    }
    let ana = person_id(&app, "ana").await;

    // The API: admin tokens only, JSON errors.
    let ingest = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let res = app.get_as(&ingest, "/api/v1/people").await;
    assert_eq!(
        (res.status, res.error_code()),
        (StatusCode::FORBIDDEN, "forbidden".to_owned())
    );
    let admin = app.token("first-admin", &[Scope::Admin]).await;
    let list = app.get_as(&admin, "/api/v1/people").await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.body);
    let people = list.json()["people"].as_array().unwrap().clone();
    let names: Vec<&str> = people.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["Ana", "Bo"]);
    assert_eq!(people[0]["role"], "member");
    assert_eq!(people[0]["live_sessions"], 1);
    assert_eq!(people[0]["disabled"], false);

    let call = |method: &str, path: String| {
        Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {admin}"))
            .body(Body::empty())
            .unwrap()
    };
    let res = app
        .send(call("DELETE", format!("/api/v1/people/{ana}/sessions")))
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert_eq!(res.json()["live_sessions"], 0);
    let res = app
        .send(call("POST", format!("/api/v1/people/{ana}/disable")))
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert_eq!(res.json()["disabled"], true);
    let mut jar = super::Jar::default();
    let refused = sign_in(&app, &provider, &mut jar, "ana").await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    let res = app
        .send(call("POST", format!("/api/v1/people/{ana}/enable")))
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert_eq!(res.json()["disabled"], false);
    signed_in(&app, &provider, "ana").await;
    for (method, path) in [
        ("POST", "/api/v1/people/999999/disable"),
        ("POST", "/api/v1/people/999999/enable"),
        ("DELETE", "/api/v1/people/999999/sessions"),
        ("POST", "/api/v1/people/not-a-person/disable"),
    ] {
        let res = app.send(call(method, path.to_owned())).await;
        assert_eq!(
            (res.status, res.error_code()),
            (StatusCode::NOT_FOUND, "not_found".to_owned()),
            "{method} {path}"
        );
    }

    // Token sign-in (the first admin, installs without a provider) still reaches the page.
    let b = crate::browse::sign_in(&app, &admin).await;
    let page = crate::browse::page(&app, &b.cookie, "/people").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(
        page.body.contains("href=\"/people\""),
        "the admin's nav links it"
    );
    assert_eq!(texts(&page.body, "tr.person-row").len(), 2);
}
