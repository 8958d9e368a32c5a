//! SECURITY.md items 5 and 8: tokens stored only as a hash and a prefix, accepted only from the
//! Authorization header, refused at once when revoked; every state-changing portal form refuses
//! a foreign `Origin` and a missing or wrong CSRF token, changing nothing.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpu_triage::auth::Scope;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::{Browser, dump, page, sign_in};
use crate::support::{TestApp, TestResponse, binary, database_url};

const OOM: &[u8] = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n";

#[tokio::test]
async fn tokens_and_sessions_are_stored_only_as_hashes_with_a_prefix() {
    let (db, options) = crate::support::fresh_db().await;
    let url = database_url(options.get_database().unwrap());
    let token = tokio::task::spawn_blocking(move || {
        crate::support::create_token(&url, "ingest,read", "ci")
    })
    .await
    .unwrap();
    let app = TestApp::on(db);
    let b = sign_in(&app, &token).await;
    let session = b.cookie.split_once('=').unwrap().1.to_owned();
    assert!(app.get_as(&token, "/api/v1/search?q=x").await.status == StatusCode::OK);

    let stored = dump(&app.db).await;
    assert!(!stored.contains(&token), "the raw token is stored");
    assert!(
        !stored.contains(&token[4..]),
        "the token's secret part is stored"
    );
    assert!(
        !stored.contains(&session[4..]),
        "the raw session id is stored"
    );
    let (prefix, hash, scopes, used): (String, Vec<u8>, Vec<String>, bool) = sqlx::query_as(
        "SELECT prefix, hash, scopes, \
         EXISTS (SELECT 1 FROM token_usage u WHERE u.token_id = t.id) \
         FROM tokens t WHERE name = 'ci'",
    )
    .fetch_one(app.db.pool())
    .await
    .unwrap();
    assert_eq!(prefix, &token[..12]);
    assert_eq!(hash, Sha256::digest(token.as_bytes()).to_vec());
    assert_eq!(scopes, vec!["ingest", "read"]);
    assert!(used, "last use is recorded");
    assert_eq!(token.len(), 4 + 64, "gtr_ and 256 bits in hex");
}

/// Request headers: name, value.
type Headers<'a> = Vec<(&'a str, String)>;

/// `GET /api/v1/search?q=x` with `headers`.
async fn search_with(app: &TestApp, path: &str, headers: &[(&str, String)]) -> TestResponse {
    let mut req = Request::get(path);
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    app.send(req.body(Body::empty()).unwrap()).await
}

#[tokio::test]
async fn the_api_takes_tokens_only_from_the_authorization_header() {
    let app = TestApp::spawn().await;
    let token = app.token("alice", &[Scope::Admin]).await;
    let b = sign_in(&app, &token).await;
    let before = dump(&app.db).await;
    let cases: Vec<(&str, String, Headers)> = vec![
        (
            "session cookie",
            "/api/v1/search?q=x".into(),
            vec![("cookie", b.cookie.clone())],
        ),
        (
            "token cookie",
            "/api/v1/search?q=x".into(),
            vec![("cookie", format!("token={token}; gt_token={token}"))],
        ),
        (
            "query token",
            format!("/api/v1/search?q=x&token={token}"),
            vec![],
        ),
        (
            "query access_token",
            format!("/api/v1/search?q=x&access_token={token}"),
            vec![],
        ),
        (
            "query api_key",
            format!("/api/v1/search?q=x&api_key={token}"),
            vec![],
        ),
        (
            "X-Api-Key",
            "/api/v1/search?q=x".into(),
            vec![("x-api-key", token.clone())],
        ),
        (
            "Authorization: token",
            "/api/v1/search?q=x".into(),
            vec![("authorization", format!("token {token}"))],
        ),
        (
            "bare Authorization",
            "/api/v1/search?q=x".into(),
            vec![("authorization", token.clone())],
        ),
        (
            "Basic",
            "/api/v1/search?q=x".into(),
            vec![("authorization", format!("Basic {token}"))],
        ),
    ];
    for (what, path, headers) in cases {
        let res = search_with(&app, &path, &headers).await;
        assert_eq!(res.status, StatusCode::UNAUTHORIZED, "{what}: {}", res.body);
        assert_eq!(res.error_code(), "unauthorized", "{what}");
    }
    // A signed-in browser cannot upload through the API with its cookie, even with the CSRF
    // token.
    let boundary = "b";
    let mut req = Request::post("/api/v1/reports")
        .header("cookie", &b.cookie)
        .header("x-csrf-token", &b.csrf)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        );
    req = req.header("origin", "http://localhost");
    let res = app
        .send(
            req.body(Body::from(super::multipart_log(boundary, OOM)))
                .unwrap(),
        )
        .await;
    assert_eq!(res.status, StatusCode::UNAUTHORIZED, "{}", res.body);
    assert_eq!(dump(&app.db).await, before, "nothing stored");
}

#[tokio::test]
async fn a_revoked_token_is_refused_at_once_on_the_api_and_in_its_portal_sessions() {
    let (db, options) = crate::support::fresh_db().await;
    let url = database_url(options.get_database().unwrap());
    let app = TestApp::on(db);
    let token = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let b = sign_in(&app, &token).await;
    assert_eq!(
        app.get_as(&token, "/api/v1/search?q=x").await.status,
        StatusCode::OK
    );
    assert_eq!(
        page(&app, &b.cookie, "/groups").await.status,
        StatusCode::OK
    );
    let out = tokio::task::spawn_blocking(move || {
        binary()
            .args(["token", "revoke", "alice"])
            .env("DATABASE_URL", url)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let before = dump(&app.db).await;
    let api = app.get_as(&token, "/api/v1/search?q=x").await;
    assert_eq!(api.status, StatusCode::UNAUTHORIZED, "{}", api.body);
    let up = app
        .upload(&token, &[("log", Some("a.log"), OOM)], None)
        .await;
    assert_eq!(up.status, StatusCode::UNAUTHORIZED, "{}", up.body);
    let pagec = page(&app, &b.cookie, "/groups").await;
    assert_eq!(pagec.status, StatusCode::SEE_OTHER, "sent to sign in");
    let form = post_multipart(
        &app,
        &b,
        &[("csrf", &b.csrf), ("log_text", "RuntimeError: x")],
        None,
    )
    .await;
    assert_eq!(form.status, StatusCode::SEE_OTHER, "{}", form.body);
    assert_eq!(form.headers["location"], "/login");
    let login = post_urlencoded(&app, None, "/login", format!("token={token}"), None).await;
    assert_eq!(login.status, StatusCode::UNAUTHORIZED);
    assert_eq!(dump(&app.db).await, before, "nothing stored");
}

async fn post_urlencoded(
    app: &TestApp,
    cookie: Option<&str>,
    path: &str,
    body: String,
    origin: Option<&str>,
) -> TestResponse {
    let mut req = Request::post(path)
        .header("host", "localhost")
        .header("content-type", "application/x-www-form-urlencoded");
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    if let Some(o) = origin {
        req = req.header("origin", o);
    }
    app.send(req.body(Body::from(body)).unwrap()).await
}

async fn post_multipart(
    app: &TestApp,
    b: &Browser,
    fields: &[(&str, &str)],
    origin: Option<&str>,
) -> TestResponse {
    let boundary = "csrf-boundary";
    let mut body = String::new();
    for (name, value) in fields {
        body.push_str(&format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
        ));
    }
    body.push_str(&format!("--{boundary}--\r\n"));
    let mut req = Request::post("/reports")
        .header("host", "localhost")
        .header("cookie", &b.cookie)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        );
    if let Some(o) = origin {
        req = req.header("origin", o);
    }
    app.send(req.body(Body::from(body)).unwrap()).await
}

/// A link opened signed out (a CI summary, a webhook, a chat message) goes to sign-in and
/// returns to its page afterwards; only a path on this site is returned to (issue 30 item 4).
#[tokio::test]
async fn signing_in_returns_to_the_page_a_signed_out_link_opened_and_never_off_site() {
    let app = TestApp::spawn().await;
    let token = app.token("ana", &[Scope::Read]).await;
    let asked = app.get("/reports/72?grep=illegal%20memory").await;
    assert_eq!(asked.status, StatusCode::SEE_OTHER);
    let to_login = asked.headers["location"].to_str().unwrap().to_owned();
    assert_eq!(
        to_login,
        "/login?next=%2Freports%2F72%3Fgrep%3Dillegal%2520memory"
    );
    // The form carries the return path; signing in goes there.
    let form = app.get(&to_login).await;
    assert_eq!(form.status, StatusCode::OK);
    assert_eq!(
        super::attr(&form.body, "input[name=next]", "value").as_deref(),
        Some("/reports/72?grep=illegal%20memory")
    );
    let body = serde_urlencoded::to_string([
        ("token", token.as_str()),
        ("next", "/reports/72?grep=illegal%20memory"),
    ])
    .unwrap();
    let signed = post_urlencoded(&app, None, "/login", body, None).await;
    assert_eq!(signed.status, StatusCode::SEE_OTHER, "{}", signed.body);
    assert_eq!(
        signed.headers["location"],
        "/reports/72?grep=illegal%20memory"
    );
    // A wrong token keeps the return path in the re-shown form.
    let body = serde_urlencoded::to_string([("token", "gtr_wrong"), ("next", "/groups")]).unwrap();
    let wrong = post_urlencoded(&app, None, "/login", body, None).await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        super::attr(&wrong.body, "input[name=next]", "value").as_deref(),
        Some("/groups")
    );
    // Off-site return paths are dropped: home instead, and no hidden field for them.
    for evil in [
        "https://evil.example/",
        "//evil.example",
        "/\\evil.example",
        "javascript:x",
    ] {
        let body =
            serde_urlencoded::to_string([("token", token.as_str()), ("next", evil)]).unwrap();
        let res = post_urlencoded(&app, None, "/login", body, None).await;
        assert_eq!(res.status, StatusCode::SEE_OTHER, "{evil}");
        assert_eq!(res.headers["location"], "/", "{evil}");
        let query = serde_urlencoded::to_string([("next", evil)]).unwrap();
        let shown = app.get(&format!("/login?{query}")).await;
        assert!(
            super::attr(&shown.body, "input[name=next]", "value").is_none(),
            "{evil}"
        );
    }
    // Signed in already: /login?next= goes straight there.
    let cookie = sign_in(&app, &token).await.cookie;
    let again = page(&app, &cookie, "/login?next=%2Fgroups").await;
    assert_eq!(again.status, StatusCode::SEE_OTHER);
    assert_eq!(again.headers["location"], "/groups");
}

#[tokio::test]
async fn every_portal_form_refuses_a_foreign_origin_or_a_missing_csrf_token() {
    let app = TestApp::spawn().await;
    let admin = app.token("alice", &[Scope::Admin]).await;
    // A report with a finished reproduction, so every form has something to act on.
    let up = app
        .upload(
            &admin,
            &[
                ("log", Some("a.log"), OOM),
                ("script", Some("r.py"), b"import torch\n"),
            ],
            None,
        )
        .await
        .json();
    let (group, job) = (
        up["group_id"].as_i64().unwrap(),
        up["repro"]["job_id"].as_i64().unwrap(),
    );
    let claim = app
        .post_json(
            &admin,
            "/api/v1/jobs/claim",
            &json!({"worker": "h", "wait_secs": 0, "gpu": {"name": "Test GPU"}, "no_gpu": false, "sandbox": "none"}),
        )
        .await
        .json();
    let done = app
        .post_json(
            &admin,
            &format!("/api/v1/jobs/{job}/result"),
            &json!({"lease_token": claim["lease_token"], "exit_code": 0, "signal": null,
                    "timed_out": false, "duration_ms": 1, "stdout": "", "stderr": "",
                    "truncated": false, "gpu": null, "no_gpu": true, "sandbox": "none", "error": null}),
        )
        .await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    let b = sign_in(&app, &admin).await;
    let foreign = [
        "https://evil.example",
        "http://localhost.evil.example",
        "null",
        // This server is plain http (http://gpu-triage.test): the same host over https is
        // another origin.
        "https://localhost",
    ];

    let before = dump(&app.db).await;
    let urlencoded_forms = [
        ("/logout".to_owned(), String::new()),
        (
            format!("/groups/{group}/fixes"),
            "&summary=forged+fix".to_owned(),
        ),
        (format!("/jobs/{job}/requeue"), String::new()),
        (format!("/groups/{group}/merge"), "&into=1".to_owned()),
    ];
    for (path, rest) in &urlencoded_forms {
        for (what, csrf, origin) in [
            ("no csrf", None, None),
            ("wrong csrf", Some("0".repeat(b.csrf.len())), None),
            ("empty csrf", Some(String::new()), None),
        ]
        .into_iter()
        .chain(
            foreign
                .iter()
                .map(|o| ("foreign origin", Some(b.csrf.clone()), Some(*o))),
        ) {
            let body = match &csrf {
                Some(c) => format!("csrf={c}{rest}"),
                None => rest.trim_start_matches('&').to_owned(),
            };
            let res = post_urlencoded(&app, Some(&b.cookie), path, body, origin).await;
            assert_eq!(
                res.status,
                StatusCode::FORBIDDEN,
                "{path} {what} {origin:?}: {}",
                res.body
            );
        }
    }
    for (what, fields, origin) in [
        ("no csrf", vec![("log_text", "RuntimeError: forged")], None),
        (
            "wrong csrf",
            vec![("csrf", "nope"), ("log_text", "RuntimeError: forged")],
            None,
        ),
        (
            "csrf after the log",
            vec![
                ("log_text", "RuntimeError: forged"),
                ("csrf", b.csrf.as_str()),
            ],
            None,
        ),
        (
            "foreign origin",
            vec![
                ("csrf", b.csrf.as_str()),
                ("log_text", "RuntimeError: forged"),
            ],
            Some("https://evil.example"),
        ),
    ] {
        let res = post_multipart(&app, &b, &fields, origin).await;
        assert_eq!(
            res.status,
            StatusCode::FORBIDDEN,
            "upload {what}: {}",
            res.body
        );
    }
    // Signing in from another site (login CSRF) is refused too, and starts no session.
    for origin in foreign {
        let res =
            post_urlencoded(&app, None, "/login", format!("token={admin}"), Some(origin)).await;
        assert_eq!(
            res.status,
            StatusCode::FORBIDDEN,
            "login from {origin}: {}",
            res.body
        );
        assert!(!res.headers.contains_key("set-cookie"));
    }
    assert_eq!(dump(&app.db).await, before, "nothing changed");
    // The session still works, and the same forms with the token and this site's Origin pass.
    assert_eq!(
        page(&app, &b.cookie, "/groups").await.status,
        StatusCode::OK
    );
    let ok = post_urlencoded(
        &app,
        Some(&b.cookie),
        &format!("/groups/{group}/fixes"),
        format!("csrf={}&summary=real+fix", b.csrf),
        Some("http://localhost"),
    )
    .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER, "{}", ok.body);
    let login = post_urlencoded(
        &app,
        None,
        "/login",
        format!("token={admin}"),
        Some("http://localhost"),
    )
    .await;
    assert_eq!(login.status, StatusCode::SEE_OTHER);
    let out = post_urlencoded(
        &app,
        Some(&b.cookie),
        "/logout",
        format!("csrf={}", b.csrf),
        None,
    )
    .await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert_eq!(
        page(&app, &b.cookie, "/groups").await.status,
        StatusCode::SEE_OTHER
    );
}

#[tokio::test]
async fn the_session_cookie_is_httponly_samesite_lax_and_secure_behind_tls() {
    for (secure, public) in [
        (false, "http://triage.internal"),
        (true, "https://triage.example"),
    ] {
        let app = TestApp::spawn_with(|mut s| {
            s.public_url = public.to_owned();
            s.secure_cookies = public.starts_with("https://");
            s
        })
        .await;
        let token = app.token("alice", &[Scope::Read]).await;
        let res = post_urlencoded(&app, None, "/login", format!("token={token}"), None).await;
        assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
        let cookie = res.headers["set-cookie"].to_str().unwrap().to_owned();
        let attrs: Vec<&str> = cookie.split(';').map(str::trim).collect();
        assert!(attrs.contains(&"HttpOnly"), "{cookie}");
        assert!(attrs.contains(&"SameSite=Lax"), "{cookie}");
        assert_eq!(attrs.contains(&"Secure"), secure, "{cookie}");
    }
}
