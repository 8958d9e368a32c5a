//! SECURITY.md item 6: search input is data. Quote-and-comment injections, LIKE wildcards,
//! backslashes and NUL bytes match literally (rows that a wildcard would match are seeded and
//! must not come back), leave every table as it was, and never give a 500.

use axum::http::StatusCode;
use gpu_triage::auth::Scope;
use serde_json::json;

use super::{dump, page, sign_in};
use crate::support::TestApp;

const LOG: &str = "RuntimeError: CUDA error: an illegal memory access was encountered\n";

/// Percent-encodes everything but unreserved characters.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[tokio::test]
async fn hostile_search_terms_match_literally_and_change_nothing() {
    let app = TestApp::spawn().await;
    let t = app.token("root", &[Scope::Admin]).await;
    // Projects are searchable: rows that only a wildcard, a pattern escape or an injected OR
    // would return.
    let mut ids = std::collections::HashMap::new();
    for project in [
        "alpha_beta",
        "alphaXbeta",
        "gamma%delta",
        "gammaYYdelta",
        r"eps\ilon",
        "epsilon",
        "zeta' OR 1=1 --",
        "zeta",
    ] {
        let meta = json!({ "project": project }).to_string();
        // In the root-cause line: the error text is what a literal match reads.
        let log = format!("{}: {project}\n", LOG.trim_end());
        let res = app
            .upload(
                &t,
                &[
                    ("log", Some("a.log"), log.as_bytes()),
                    ("meta", None, meta.as_bytes()),
                ],
                None,
            )
            .await;
        assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
        ids.insert(project, res.json()["id"].as_i64().unwrap());
    }
    let b = sign_in(&app, &t).await;
    let before = dump(&app.db).await;
    let reports_found = |body: &serde_json::Value| -> Vec<i64> {
        let mut v: Vec<i64> = body["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["kind"] == "report")
            .map(|r| r["id"].as_i64().unwrap())
            .collect();
        v.sort_unstable();
        v
    };
    for (q, want) in [
        ("alpha_beta", vec![ids["alpha_beta"]]),
        ("ha_be", vec![ids["alpha_beta"]]),
        ("gamma%delta", vec![ids["gamma%delta"]]),
        ("a%d", vec![ids["gamma%delta"]]),
        // A literal match needs 3 characters (the trigram index cannot look up fewer; a scan
        // of every report would): a lone wildcard finds nothing rather than everything.
        ("%", vec![]),
        ("%%", vec![]),
        (r"eps\ilon", vec![ids[r"eps\ilon"]]),
        (r"s\i", vec![ids[r"eps\ilon"]]),
        (r"\", vec![]),
        (r"\%", vec![]),
        ("' OR 1=1 --", vec![ids["zeta' OR 1=1 --"]]),
        // Web-search syntax: OR is an operator, so this asks for "x" or the word "1".
        ("x' OR '1'='1", vec![ids["zeta' OR 1=1 --"]]),
        ("'; DROP TABLE reports; --", vec![]),
        ("\") OR true --", vec![]),
        ("*", vec![]),
        ("!!&&||:*", vec![]),
    ] {
        let res = app
            .get_as(&t, &format!("/api/v1/search?q={}", enc(q)))
            .await;
        assert_eq!(res.status, StatusCode::OK, "{q}: {}", res.body);
        assert_eq!(reports_found(&res.json()), want, "{q}: {}", res.body);
        let html = page(&app, &b.cookie, &format!("/search?q={}", enc(q))).await;
        assert_eq!(html.status, StatusCode::OK, "page {q}");
    }
    // Filters are bound parameters too: a project is any text, compared whole, so these match
    // no project and find nothing (every seeded report mentions CUDA).
    for value in ["alpha_beta' OR 1=1 --", "%"] {
        let res = app
            .get_as(&t, &format!("/api/v1/search?q=CUDA&project={}", enc(value)))
            .await;
        assert_eq!(res.status, StatusCode::OK, "project={value}: {}", res.body);
        assert_eq!(
            reports_found(&res.json()),
            Vec::<i64>::new(),
            "project={value}"
        );
    }
    // A category is one of a closed set, checked before any query: anything else is refused.
    let value = "out_of_bounds' OR '1'='1";
    let res = app
        .get_as(
            &t,
            &format!("/api/v1/search?q=CUDA&category={}", enc(value)),
        )
        .await;
    assert_eq!(
        res.status,
        StatusCode::BAD_REQUEST,
        "category={value}: {}",
        res.body
    );
    assert_eq!(res.error_code(), "bad_query", "category={value}");
    assert_eq!(dump(&app.db).await, before, "every table as it was");
}

#[tokio::test]
async fn a_nul_byte_anywhere_in_text_input_is_a_clear_4xx() {
    let app = TestApp::spawn().await;
    let t = app.token("root", &[Scope::Admin]).await;
    let up = app
        .upload(&t, &[("log", Some("a.log"), LOG.as_bytes())], None)
        .await
        .json();
    let group = up["group_id"].as_i64().unwrap();
    let b = sign_in(&app, &t).await;
    let before = dump(&app.db).await;
    for path in [
        "/api/v1/search?q=%00",
        "/api/v1/search?q=CUDA%00",
        "/api/v1/search?q=CUDA&project=%00",
        "/api/v1/search?q=CUDA&project=a%00b",
        "/api/v1/search?q=CUDA&category=%00",
    ] {
        let res = app.get_as(&t, path).await;
        assert_eq!(res.status, StatusCode::BAD_REQUEST, "{path}: {}", res.body);
        assert_eq!(res.error_code(), "bad_query", "{path}");
    }
    for path in [
        "/search?q=%00",
        "/search?q=CUDA&project=%00",
        "/search?q=a%00b",
    ] {
        // The search form again, with the reason, as a 400 like the API's `bad_query`.
        let res = page(&app, &b.cookie, path).await;
        assert_eq!(res.status, StatusCode::BAD_REQUEST, "{path}: {}", res.body);
        let errors = super::texts(&res.body, "p.error");
        assert_eq!(errors.len(), 1, "{path}: {}", res.body);
        assert!(errors[0].contains("without NUL"), "{path}: {errors:?}");
    }
    // JSON bodies and metadata with a NUL: refused, not a database error.
    let fix = app
        .post_json(
            &t,
            &format!("/api/v1/groups/{group}/fixes"),
            &json!({"summary": "a\u{0}b", "details": "x"}),
        )
        .await;
    assert_eq!(fix.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", fix.body);
    let fix = app
        .post_json(
            &t,
            &format!("/api/v1/groups/{group}/fixes"),
            &json!({"summary": "ok", "details": "a\u{0}b"}),
        )
        .await;
    assert_eq!(fix.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", fix.body);
    let meta = json!({"project": "a\u{0}b"}).to_string();
    let res = app
        .upload(
            &t,
            &[
                ("log", Some("a.log"), LOG.as_bytes()),
                ("meta", None, meta.as_bytes()),
            ],
            None,
        )
        .await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", res.body);
    let res = app
        .upload(&t, &[("log", Some("a\u{0}b.log"), LOG.as_bytes())], None)
        .await;
    assert_eq!(
        res.status,
        StatusCode::BAD_REQUEST,
        "a NUL in the file name: {}",
        res.body
    );
    assert_eq!(dump(&app.db).await, before, "nothing stored");
}
