//! One request followed through the logs (issue 32 item 5): every answer carries an
//! `X-Request-Id` (the client's when sane, else a made-up one), refusals and error pages
//! included, as the API document declares; and the log lines a request causes name it, its
//! actor and the ids its use case works on.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpu_triage::auth::Scope;

use crate::support::{Captured, TestApp, TestResponse};

const OOM: &[u8] = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n";

/// The id an answer carries.
fn id_of(res: &TestResponse) -> &str {
    res.headers
        .get("x-request-id")
        .unwrap_or_else(|| panic!("{} answered without X-Request-Id", res.status))
        .to_str()
        .expect("an ASCII id")
}

/// Whether `id` has the shape of an id the server made up: 32 lowercase hex digits.
fn is_made_up(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A request to `path` with `X-Request-Id: id` (raw bytes, so that insane ids can be sent).
fn with_id(method: &str, path: &str, id: &[u8]) -> axum::http::request::Builder {
    Request::builder()
        .method(method)
        .uri(path)
        .header("x-request-id", id)
}

#[tokio::test]
async fn an_answer_without_an_id_gets_a_made_up_one_each_time() {
    let app = TestApp::spawn().await;
    let first = app.get("/api/v1/openapi.json").await;
    let second = app.get("/api/v1/openapi.json").await;
    assert_eq!(first.status, StatusCode::OK);
    assert!(is_made_up(id_of(&first)), "{:?}", id_of(&first));
    assert!(is_made_up(id_of(&second)), "{:?}", id_of(&second));
    assert_ne!(id_of(&first), id_of(&second), "two requests, one id");
}

#[tokio::test]
async fn a_sane_incoming_id_is_echoed() {
    let app = TestApp::spawn().await;
    let longest = "x".repeat(128);
    for id in ["ci-run-42/step:7", "a", longest.as_str(), "job#7@runner+2"] {
        let req = with_id("GET", "/api/v1/openapi.json", id.as_bytes());
        let res = app.send(req.body(Body::empty()).unwrap()).await;
        assert_eq!(res.status, StatusCode::OK);
        assert_eq!(id_of(&res), id, "a sane id is kept as sent");
    }
}

#[tokio::test]
async fn an_insane_incoming_id_is_replaced() {
    let app = TestApp::spawn().await;
    let too_long = "x".repeat(129);
    for id in [
        too_long.as_bytes(),
        &b"two words"[..],
        &b"tab\there"[..],
        &b""[..],
        &b"caf\xe9"[..],
        &b"{\"quoted\"}"[..],
        &b"\"x\"=y,actor=\"initial-admin\""[..],
    ] {
        let req = with_id("GET", "/api/v1/openapi.json", id);
        let res = app.send(req.body(Body::empty()).unwrap()).await;
        assert_eq!(res.status, StatusCode::OK);
        let answered = id_of(&res);
        assert!(
            is_made_up(answered),
            "{:?} was answered with {answered:?}, not a made-up id",
            String::from_utf8_lossy(id)
        );
    }
}

#[tokio::test]
async fn refusals_and_error_pages_carry_the_id_too() {
    let app = TestApp::spawn_with(|mut s| {
        s.limits.max_classify_bytes = 16;
        s
    })
    .await;
    let ingest = app.token("ci", &[Scope::Ingest]).await;
    let reader = app.token("reader", &[Scope::Read]).await;
    let classify = |token: &str, body: &[u8], id: &str| {
        with_id("POST", "/api/v1/classify", id.as_bytes())
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "text/plain")
            .body(Body::from(body.to_vec()))
            .unwrap()
    };
    let cases = [
        (
            "no token",
            with_id("GET", "/api/v1/reports/1", b"refused-401")
                .body(Body::empty())
                .unwrap(),
            StatusCode::UNAUTHORIZED,
        ),
        (
            "forged token",
            with_id("GET", "/api/v1/reports/1", b"refused-401-forged")
                .header("authorization", format!("Bearer gtr_{}", "0".repeat(64)))
                .body(Body::empty())
                .unwrap(),
            StatusCode::UNAUTHORIZED,
        ),
        (
            "wrong scope",
            with_id("GET", "/api/v1/webhooks", b"refused-403")
                .header("authorization", format!("Bearer {reader}"))
                .body(Body::empty())
                .unwrap(),
            StatusCode::FORBIDDEN,
        ),
        (
            "over the cap",
            classify(&ingest, OOM, "refused-413"),
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
        (
            "unknown API path",
            with_id("GET", "/api/v1/nothing-here", b"refused-404-api")
                .body(Body::empty())
                .unwrap(),
            StatusCode::NOT_FOUND,
        ),
        (
            "unknown page",
            with_id("GET", "/nothing-here", b"refused-404-page")
                .body(Body::empty())
                .unwrap(),
            StatusCode::NOT_FOUND,
        ),
        (
            "wrong method",
            with_id("DELETE", "/api/v1/classify", b"refused-405")
                .body(Body::empty())
                .unwrap(),
            StatusCode::METHOD_NOT_ALLOWED,
        ),
    ];
    for (what, req, status) in cases {
        let sent = req.headers()["x-request-id"].to_str().unwrap().to_owned();
        let res = app.send(req).await;
        assert_eq!(res.status, status, "{what}: {}", res.body);
        assert_eq!(id_of(&res), sent, "{what}");
    }
}

/// Uploads an out-of-memory log as `token` with `X-Request-Id: id` while capturing this
/// thread's log lines in the server's own format; the answer and the lines.
async fn upload_logged(app: &TestApp, token: &str, id: &[u8]) -> (TestResponse, Vec<String>) {
    let (captured, _logging) = Captured::start();
    let boundary = "request-id-test-boundary";
    let mut body = Vec::new();
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"log\"; \
             filename=\"train.log\"\r\nContent-Type: text/plain\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(OOM);
    body.extend_from_slice(
        format!(
            "\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"meta\"\r\n\r\n\
             {{\"project\":\"vision\"}}\r\n--{boundary}--\r\n"
        )
        .as_bytes(),
    );
    let req = with_id("POST", "/api/v1/reports", id)
        .header("authorization", format!("Bearer {token}"))
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(Body::from(body))
        .unwrap();
    let res = app.send(req).await;
    (res, captured.lines())
}

/// The `report stored` line among `lines`.
fn stored_line(lines: &[String]) -> &str {
    lines
        .iter()
        .find(|l| l.contains("report stored"))
        .unwrap_or_else(|| panic!("no `report stored` line in:\n{}", lines.join("\n")))
}

#[tokio::test]
async fn a_log_line_of_an_upload_names_the_request_its_actor_and_the_report() {
    let app = TestApp::spawn().await;
    let token = app.token("nightly-ci", &[Scope::Ingest]).await;
    let (res, lines) = upload_logged(&app, &token, b"follow-me-7").await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    assert_eq!(id_of(&res), "follow-me-7");
    let report_id = res.json()["id"].as_i64().expect("the report's id");
    let stored = stored_line(&lines);
    for wanted in [
        "request{id=\"follow-me-7\" method=POST path=\"/api/v1/reports\"".to_owned(),
        "actor=\"nightly-ci\"".to_owned(),
        "upload::upload{".to_owned(),
        "project=\"vision\"".to_owned(),
        format!("report_id={report_id} "),
    ] {
        assert!(stored.contains(&wanted), "{wanted:?} not in {stored:?}");
    }
}

#[tokio::test]
async fn a_name_or_a_request_id_cannot_forge_a_field_of_the_log_line() {
    let app = TestApp::spawn().await;
    // A token name may hold quotes and `=` (only control characters are refused).
    let token = app
        .token("ci\" actor=\"initial-admin", &[Scope::Ingest])
        .await;
    let forged_id = b"\"x\"=y,actor=\"initial-admin\"";
    let (res, lines) = upload_logged(&app, &token, forged_id).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    assert!(is_made_up(id_of(&res)), "the forged id was replaced");
    let stored = stored_line(&lines);
    assert!(
        stored.contains(r#"actor="ci\" actor=\"initial-admin""#),
        "{stored}"
    );
    // Outside quoted values, `actor=` appears once: the real field.
    let (mut bare, mut quoted, mut escaped) = (String::new(), false, false);
    for c in stored.chars() {
        match (quoted, escaped, c) {
            (true, true, _) => escaped = false,
            (true, false, '\\') => escaped = true,
            (_, false, '"') => quoted = !quoted,
            (false, _, c) => bare.push(c),
            (true, false, _) => {}
        }
    }
    assert_eq!(bare.matches("actor=").count(), 1, "{stored}");
}

#[tokio::test]
async fn the_api_document_declares_the_id_on_every_answer() {
    let app = TestApp::spawn().await;
    let doc = app.get("/api/v1/openapi.json").await.json();
    let mut answers = Vec::new();
    for (name, answer) in doc["components"]["responses"].as_object().unwrap() {
        answers.push((format!("components.responses.{name}"), answer));
    }
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let Some(responses) = op.get("responses").and_then(|r| r.as_object()) else {
                continue; // Not an operation (a path's shared parameters).
            };
            for (status, answer) in responses {
                if answer.get("$ref").is_none() {
                    answers.push((format!("{method} {path} {status}"), answer));
                }
            }
        }
    }
    assert!(answers.len() > 50, "{} answers", answers.len());
    for (what, answer) in answers {
        let header = &answer["headers"]["X-Request-Id"];
        assert_eq!(header["schema"]["maxLength"], 128, "{what}: {answer}");
    }
}

/// The answer of the real server at `port` to `GET /api/v1/openapi.json` with `headers` and
/// a request id: (status line, head in lower case).
fn raw_get_with_headers(port: u16, headers: &[(String, String)]) -> (String, String) {
    let mut sent: Vec<(&str, &str)> = vec![("X-Request-Id", "big-head-1")];
    sent.extend(headers.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    let raw = crate::support::http_get_raw(port, "/api/v1/openapi.json", &sent).unwrap_or_default();
    let head = raw.split_once("\r\n\r\n").map_or(raw.as_str(), |(h, _)| h);
    let status = head.lines().next().unwrap_or_default().to_owned();
    (status, head.to_ascii_lowercase())
}

#[test]
fn too_many_or_too_large_headers_get_a_431_that_carries_the_id() {
    let url = crate::support::database_url(&crate::support::fresh_database_name());
    let (_server, port) = crate::support::spawn_server(&url);
    let many: Vec<(String, String)> = (0..150)
        .map(|n| (format!("x-extra-{n}"), "1".to_owned()))
        .collect();
    let large = vec![("cookie".to_owned(), "c".repeat(100 << 10))];
    for (what, headers) in [("150 headers", many), ("a 100 KiB cookie", large)] {
        let (status, head) = raw_get_with_headers(port, &headers);
        assert!(status.contains(" 431 "), "{what}: {status}");
        assert!(head.contains("x-request-id: big-head-1"), "{what}: {head}");
    }
    // Within the limits, the same request is served.
    let (status, _) = raw_get_with_headers(port, &[("x-extra".into(), "1".into())]);
    assert!(status.contains(" 200 "), "{status}");
}
