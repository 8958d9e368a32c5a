//! SECURITY.md item 4: hostile text in every place a page shows it (the log, uploader metadata,
//! a fix, a reproduction's stdout/stderr, a search hit) renders as inert text, under the CSP and
//! nosniff headers; the raw log is a plain-text attachment.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpu_triage::auth::Scope;
use serde_json::json;

use super::{assert_inert, page, sign_in, texts};
use crate::support::TestApp;

/// Markup, an OSC 8 `javascript:` hyperlink, odd and broken SGR sequences, a lone ESC, C1 and
/// NUL bytes, a bidi override: on lines that also carry a real CUDA error.
const HOSTILE: &[u8] = b"<script>alert(1)</script>\n\
<img src=x onerror=alert(2)>\n\
</pre><b onmouseover=alert(3)>x</b><pre>\n\
\x1b]8;;javascript:alert(4)\x07click me\x1b]8;;\x07\n\
\x1b]8;;javascript:alert(5)\x1b\\st-terminated\x1b]8;;\x1b\\\n\
\x1b[38;5;999;1;48;2;300;0;0mRuntimeError: CUDA error: misaligned address <svg onload=alert(6)>\x1b[0m\n\
\x1b[999999999999999999999m\x1b[;;;;m\x1b[?1049h\x1b[31\n\
lone \x1b escape and \xc2\x9b31m C1 CSI and \xe2\x80\xaeevil\n\
<a href=\"javascript:alert(7)\">link</a> <iframe src=javascript:alert(8)></iframe>\n";

const SCRIPT_MARKUP: &str = "<script>alert(9)</script>";

#[tokio::test]
async fn hostile_text_renders_inert_on_every_page_that_shows_it() {
    let app = TestApp::spawn().await;
    let admin = app.token("alice", &[Scope::Admin]).await;
    let meta = json!({
        "project": "<script>alert(10)</script>",
        "branch": "\"><img src=x onerror=alert(11)>",
        "commit": "'><svg onload=alert(12)>",
        "job_url": "https://ci.example/\"><script>alert(13)</script>",
        "environment": "<script>alert(14)</script>",
    })
    .to_string();
    let script = "print('<script>alert(15)</script>')\n";
    let up = app
        .upload(
            &admin,
            &[
                ("log", Some("<img src=x onerror=alert(16)>.log"), HOSTILE),
                ("meta", None, meta.as_bytes()),
                ("script", Some("r.py"), script.as_bytes()),
            ],
            None,
        )
        .await;
    assert_eq!(up.status, StatusCode::CREATED, "{}", up.body);
    let up = up.json();
    let (id, group, job) = (
        up["id"].as_i64().unwrap(),
        up["group_id"].as_i64().unwrap(),
        up["repro"]["job_id"].as_i64().unwrap(),
    );
    // A hostile fix and a hostile reproduction.
    let fix = app
        .post_json(
            &admin,
            &format!("/api/v1/groups/{group}/fixes"),
            &json!({"summary": SCRIPT_MARKUP, "details": "<img src=x onerror=alert(17)>",
                    "link": "https://wiki.example/?q=\"><script>alert(18)</script>"}),
        )
        .await;
    assert_eq!(fix.status, StatusCode::CREATED, "{}", fix.body);
    let claim = app
        .post_json(
            &admin,
            "/api/v1/jobs/claim",
            &json!({"worker": "<b>host</b>", "wait_secs": 0, "gpu": {"name": "Test GPU"}, "no_gpu": false, "sandbox": "none"}),
        )
        .await;
    assert_eq!(claim.status, StatusCode::OK, "{}", claim.body);
    let lease = claim.json()["lease_token"].as_str().unwrap().to_owned();
    let hostile_text = String::from_utf8_lossy(HOSTILE).into_owned();
    let result = app
        .post_json(
            &admin,
            &format!("/api/v1/jobs/{job}/result"),
            &json!({"lease_token": lease, "exit_code": 1, "signal": null, "timed_out": false,
                    "duration_ms": 10, "stdout": hostile_text, "stderr": hostile_text,
                    "truncated": false, "gpu": null, "no_gpu": true, "sandbox": "none",
                    "error": null}),
        )
        .await;
    assert_eq!(result.status, StatusCode::OK, "{}", result.body);

    let b = sign_in(&app, &admin).await;
    let report = page(&app, &b.cookie, &format!("/reports/{id}")).await;
    assert_inert(&report, "report page");
    let log = texts(&report.body, "pre.log").join("");
    assert!(log.contains("<script>alert(1)</script>"), "shown as text");
    assert!(log.contains("click me") && log.contains("misaligned address"));
    assert!(
        !log.contains("alert(4)") && !log.contains("alert(5)"),
        "OSC 8 targets are dropped: {log}"
    );
    assert!(!log.contains('\u{1b}'), "no raw escape reaches the page");
    let stdout = texts(&report.body, ".raw-stderr").join("");
    assert!(stdout.contains("<script>alert(1)</script>"), "{stdout}");
    let meta = texts(&report.body, "p.meta").join("");
    assert!(
        meta.contains("project <script>alert(10)</script>"),
        "{meta}"
    );
    // Only classes from the fixed set style the log: no style attribute (checked above) and no
    // class name taken from the input.
    for class in texts_attr(&report.body, "pre.log span", "class") {
        assert!(
            class
                .split(' ')
                .all(|c| c.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '-')),
            "{class}"
        );
    }

    for path in [
        format!("/groups/{group}"),
        "/groups".to_owned(),
        "/".to_owned(),
        "/search?q=script".to_owned(),
        "/search?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E".to_owned(),
        "/search?q=misaligned".to_owned(),
        format!("/reports/{id}?start=2"),
    ] {
        let res = page(&app, &b.cookie, &path).await;
        assert_inert(&res, &path);
    }
    let found = page(&app, &b.cookie, "/search?q=misaligned").await;
    assert!(!texts(&found.body, ".hit").is_empty(), "{}", found.body);
    let group_page = page(&app, &b.cookie, &format!("/groups/{group}")).await;
    assert_eq!(
        texts(&group_page.body, ".fixes strong"),
        vec![SCRIPT_MARKUP]
    );

    let raw = page(&app, &b.cookie, &format!("/reports/{id}/raw")).await;
    assert_eq!(raw.status, StatusCode::OK);
    assert_eq!(raw.headers["content-type"], "text/plain; charset=utf-8");
    assert!(
        raw.headers["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment;")
    );
    assert_eq!(raw.headers["x-content-type-options"], "nosniff");
    assert!(
        raw.body.contains("<script>alert(1)</script>"),
        "kept as uploaded"
    );

    // The API returns the same text as JSON strings, never as markup with a guessable type.
    let api = app.get_as(&admin, &format!("/api/v1/reports/{id}")).await;
    assert!(
        api.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
}

fn texts_attr(html: &str, css: &str, name: &str) -> Vec<String> {
    let doc = scraper::Html::parse_document(html);
    let sel = scraper::Selector::parse(css).unwrap();
    doc.select(&sel)
        .filter_map(|e| e.value().attr(name).map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn error_pages_echo_hostile_paths_and_queries_as_text() {
    let app = TestApp::spawn().await;
    let t = app.token("alice", &[Scope::Read]).await;
    let b = sign_in(&app, &t).await;
    for (path, status) in [
        // Not a report id: no such report.
        (
            "/reports/%3Cscript%3Ealert(1)%3C%2Fscript%3E",
            StatusCode::NOT_FOUND,
        ),
        // Not a category: the search form again with the reason.
        (
            "/search?q=x&category=%3Cscript%3Ealert(1)%3C%2Fscript%3E",
            StatusCode::BAD_REQUEST,
        ),
        (
            "/no/%3Cimg%20src=x%20onerror=alert(1)%3E",
            StatusCode::NOT_FOUND,
        ),
    ] {
        let req = Request::get(path)
            .header("cookie", &b.cookie)
            .body(Body::empty())
            .unwrap();
        let res = app.send(req).await;
        assert_eq!(res.status, status, "{path}");
        assert!(!res.body.contains("<script>alert"), "{path}");
        assert!(!res.body.contains("<img src=x"), "{path}");
        assert_eq!(res.headers["x-content-type-options"], "nosniff");
    }
}
