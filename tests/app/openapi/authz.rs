//! Authorisation before parsing (SECURITY.md item 21, issue 28 item 4): over every documented
//! operation, a token without the operation's scope gets 403 whatever its path, query and body
//! are, so a caller cannot learn what the server would make of a request it may not send; an
//! authorised token with a malformed JSON body gets the 400 that describes it.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use gpu_triage::auth::Scope;

use super::{Checker, Spec, answers, concrete};

/// Malformed requests to one operation: (path, content type, body). Each breaks a different
/// extractor: the path id, the query, the JSON body (truncated, of the wrong type, not UTF-8),
/// the multipart framing.
fn malformed(template: &str) -> Vec<(String, &'static str, Vec<u8>)> {
    let numeric = concrete(template, "1");
    let query = "?page=abc&per_page=-1&limit=x&q=&state=nonsense&wait=forever";
    let mut out = vec![
        (
            concrete(template, "not-an-id"),
            "application/json",
            b"{}".to_vec(),
        ),
        (concrete(template, "0"), "application/json", b"{}".to_vec()),
        (
            format!("{numeric}{query}"),
            "application/json",
            b"{}".to_vec(),
        ),
        (numeric.clone(), "application/json", b"{".to_vec()),
        (numeric.clone(), "application/json", b"[]".to_vec()),
        (numeric.clone(), "application/json", b"{}".to_vec()),
        (numeric.clone(), "application/json", vec![0xff, 0xfe, 0x00]),
        (numeric.clone(), "multipart/form-data", b"garbage".to_vec()),
        (numeric.clone(), "text/plain", Vec::new()),
    ];
    out.dedup();
    out
}

#[tokio::test]
async fn a_token_without_the_scope_gets_403_whatever_its_path_query_or_body() {
    let app = answers::app().await;
    let spec = Spec::of(&app).await;
    let mut checker = Checker::new(&app, &spec);
    let mut tokens = BTreeMap::new();
    for scope in Scope::ALL {
        tokens.insert(scope.as_str(), app.token(scope.as_str(), &[scope]).await);
    }
    let mut refused = 0;
    for (method, template, op) in spec.operations() {
        let Some(scopes) = Spec::scopes(op) else {
            continue; // Public: nothing to authorise.
        };
        for (scope, token) in &tokens {
            if scopes.contains(*scope) || *scope == "admin" {
                continue;
            }
            for (path, content_type, body) in malformed(template) {
                let res = checker
                    .raw(token, method, &path, content_type, body.clone())
                    .await;
                assert_eq!(
                    (res.status, res.error_code()),
                    (StatusCode::FORBIDDEN, "forbidden".to_owned()),
                    "{} {path} with a {scope} token and the body {:?}: {}",
                    method.to_uppercase(),
                    String::from_utf8_lossy(&body),
                    res.body
                );
                refused += 1;
            }
        }
    }
    // Every operation but the public ones and the admin-only ones is refused to some token.
    assert!(refused > 100, "only {refused} requests were tried");
}

#[tokio::test]
async fn an_authorised_token_with_a_malformed_json_body_is_told_what_is_wrong() {
    let app = answers::app().await;
    let spec = Spec::of(&app).await;
    let mut checker = Checker::new(&app, &spec);
    let admin = app.token("admin", &[Scope::Admin]).await;
    let mut tried = 0;
    for (method, template, op) in spec.operations() {
        let json = &op["requestBody"]["content"]["application/json"];
        if json.is_null() || Spec::scopes(op).is_none() {
            continue;
        }
        let path = concrete(template, "1");
        for body in [&b"{"[..], b"[]", b"\"text\""] {
            let res = checker
                .raw(&admin, method, &path, "application/json", body.to_vec())
                .await;
            // Broken JSON is 400; JSON of the wrong shape is 400 or, where the operation
            // names its own validation code, 422. Never a success, never a 401 or 403.
            let expected: &[StatusCode] = if body == b"{" {
                &[StatusCode::BAD_REQUEST]
            } else {
                &[StatusCode::BAD_REQUEST, StatusCode::UNPROCESSABLE_ENTITY]
            };
            assert!(
                expected.contains(&res.status),
                "{} {path} with {:?}: {} {}",
                method.to_uppercase(),
                String::from_utf8_lossy(body),
                res.status,
                res.body
            );
            tried += 1;
        }
    }
    assert!(tried >= 30, "only {tried} requests were tried");
}
