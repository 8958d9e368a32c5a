//! A signed-in browser for the in-process portal tests: sign in with a token (session cookie and
//! CSRF token), fetch pages with the cookie, and read them with CSS selectors.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use scraper::{Html, Selector};

use crate::support::{TestApp, TestResponse};

/// A signed-in browser: the session cookie and the page's CSRF token.
pub struct Browser {
    pub cookie: String,
    pub csrf: String,
}

pub async fn sign_in(app: &TestApp, token: &str) -> Browser {
    let req = Request::post("/login")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(format!("token={token}")))
        .unwrap();
    let res = app.send(req).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    let cookie = res.headers["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let home = page(app, &cookie, "/").await;
    let csrf = attr(&home.body, "input[name=csrf]", "value").expect("csrf field");
    Browser { cookie, csrf }
}

/// Posts a portal form to `path` as browser `b`: `fields` url-encoded, plus `origin` when given.
pub async fn post_form(
    app: &TestApp,
    b: &Browser,
    path: &str,
    fields: &[(&str, &str)],
    origin: Option<&str>,
) -> TestResponse {
    let body = serde_urlencoded::to_string(fields).unwrap();
    let mut req = Request::post(path)
        .header("cookie", &b.cookie)
        .header("content-type", "application/x-www-form-urlencoded");
    if let Some(o) = origin {
        req = req.header("origin", o);
    }
    app.send(req.body(Body::from(body)).unwrap()).await
}

pub async fn page(app: &TestApp, cookie: &str, path: &str) -> TestResponse {
    let req = Request::get(path)
        .header("cookie", cookie)
        .body(Body::empty())
        .unwrap();
    app.send(req).await
}

pub fn texts(html: &str, css: &str) -> Vec<String> {
    let doc = Html::parse_document(html);
    let sel = Selector::parse(css).unwrap();
    doc.select(&sel)
        .map(|e| e.text().collect::<String>())
        .collect()
}

pub fn attr(html: &str, css: &str, name: &str) -> Option<String> {
    let doc = Html::parse_document(html);
    let sel = Selector::parse(css).unwrap();
    doc.select(&sel)
        .next()
        .and_then(|e| e.value().attr(name))
        .map(str::to_owned)
}
