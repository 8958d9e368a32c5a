//! Issue 16, found by an attack pass on a running server. SECURITY.md item 15: NUL and other
//! control bytes are neutralized in every text stored (a crash log padded with NULs is still a
//! text log, a worker's output with a NUL is recorded, never lost as a 500 the worker retries, a
//! team rule with one is refused clearly; no route answers 500). Item 17: private responses are
//! `no-store`. Item 13: a multipart preamble or part header that never ends is refused after a
//! few KiB, not buffered for as long as the client sends.

use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use gpu_triage::auth::Scope;
use http_body_util::{BodyExt, Channel};
use serde_json::json;
use tower::ServiceExt;

use crate::support::{TestApp, TestResponse};

/// A log whose node died mid-write: the file system left NUL padding, and one line carries a
/// NUL and a bell inside the error message itself.
fn padded_log() -> Vec<u8> {
    let mut log = b"epoch 3 step 120 loss 0.41\n".to_vec();
    log.extend_from_slice(
        b"RuntimeError: CUDA error: an illegal memory access\x00 was\x07 encountered\n",
    );
    log.extend(std::iter::repeat_n(0u8, 6000));
    log.extend_from_slice(b"\nnode restarted\n");
    log
}

#[tokio::test]
async fn a_log_with_nul_padding_is_classified_and_its_pages_render() {
    let app = TestApp::spawn().await;
    let admin = app.token("ci", &[Scope::Admin]).await;
    let up = app
        .upload(&admin, &[("log", Some("padded.log"), &padded_log())], None)
        .await;
    assert_eq!(up.status, StatusCode::CREATED, "{}", up.body);
    let body = up.json();
    assert_eq!(body["classification"]["category"], "illegal_memory_access");
    let text = body["classification"]["root_cause"]["text"]
        .as_str()
        .unwrap();
    assert!(!text.contains(['\0', '\x07']), "{text:?}");
    assert_eq!(body["classification"]["root_cause"]["line"], 2);
    let id = body["id"].as_i64().unwrap();
    let got = app.get_as(&admin, &format!("/api/v1/reports/{id}")).await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
}

#[tokio::test]
async fn a_real_binary_file_is_still_refused() {
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest]).await;
    // A PNG header and chunk bytes: most bytes are not text.
    let png: Vec<u8> = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
        .iter()
        .copied()
        .chain((0..4000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8))
        .collect();
    let res = app
        .upload(&t, &[("log", Some("shot.png"), &png)], None)
        .await;
    assert_eq!(
        res.status,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "{}",
        res.body
    );
    assert_eq!(app.count("reports").await, 0);
}

#[tokio::test]
async fn metadata_with_nul_is_refused_never_a_500() {
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest]).await;
    let meta =
        json!({"project": "vision\u{0}x", "branch": "main\u{0}", "environment": "GPU 0\u{0}"})
            .to_string();
    // A plain file name, so that the metadata is what is judged (a NUL in the file name is
    // refused earlier, as a bad multipart part: security::sql).
    let res = app
        .upload(
            &t,
            &[
                (
                    "log",
                    Some("a.log"),
                    b"RuntimeError: CUDA error: misaligned address\n",
                ),
                ("meta", None, meta.as_bytes()),
            ],
            None,
        )
        .await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", res.body);
    assert_eq!(res.error_code(), "bad_meta");
    assert_eq!(app.count("reports").await, 0);
}

#[tokio::test]
async fn a_worker_result_with_nul_bytes_is_recorded_once() {
    let app = TestApp::spawn().await;
    let ingest = app.token("ci", &[Scope::Ingest]).await;
    let worker = app.token("gpu-1", &[Scope::Worker]).await;
    let up = app
        .upload(
            &ingest,
            &[
                (
                    "log",
                    Some("t.log"),
                    b"RuntimeError: CUDA error: device-side assert triggered\n",
                ),
                ("script", Some("r.py"), b"import torch\n"),
            ],
            None,
        )
        .await;
    assert_eq!(up.status, StatusCode::CREATED, "{}", up.body);
    let claim = app
        .post_json(
            &worker,
            "/api/v1/jobs/claim",
            &json!({"worker": "gpu-1", "wait_secs": 0,
            "gpu": {"name": "NVIDIA H100\u{0}", "driver_version": "550.54"}, "no_gpu": false, "sandbox": "bwrap"}),
        )
        .await;
    assert_eq!(claim.status, StatusCode::OK, "{}", claim.body);
    let claim = claim.json();
    let (job, lease) = (
        claim["job_id"].as_i64().unwrap(),
        claim["lease_token"].as_str().unwrap().to_owned(),
    );
    let result = json!({"lease_token": lease, "exit_code": 1, "signal": null, "timed_out": false,
        "duration_ms": 812, "truncated": false, "no_gpu": false, "sandbox": "bwrap", "error": null,
        "stdout": "step 1\u{0}\u{0}\n",
        "stderr": "Traceback (most recent call last):\n  File \"r.py\", line 3, in <module>\nIndexError: index out of range in self\u{0}\n",
        "gpu": {"name": "NVIDIA H100\u{0}", "driver_version": "550.54\u{0}"}});
    let path = format!("/api/v1/jobs/{job}/result");
    let first = app.post_json(&worker, &path, &result).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    let again = app.post_json(&worker, &path, &result).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    assert_eq!(app.count("reproductions").await, 1);
    let stderr: String = sqlx::query_scalar("SELECT stderr FROM reproductions")
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert!(
        stderr.contains("index out of range in self") && !stderr.contains('\0'),
        "{stderr:?}"
    );
}

#[tokio::test]
async fn a_team_rule_with_a_control_character_is_refused_with_its_reason() {
    let app = TestApp::spawn().await;
    let admin = app.token("alice", &[Scope::Admin]).await;
    let rule = json!({"id": "team.nul", "category": "library_error", "title": "My kernel\u{0} failed",
        "pattern": "MyKernel failed", "examples": ["MyKernel failed\u{0}"]});
    let res = app.post_json(&admin, "/api/v1/rules", &rule).await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", res.body);
    assert_eq!(res.error_code(), "invalid_rule");
    assert!(
        res.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("control character"),
        "{}",
        res.body
    );
    assert_eq!(app.count("team_rules").await, 0);
}

/// Issue 16 item 9: what a signed-in user or a token reads is never kept by a shared cache.
#[tokio::test]
async fn private_responses_carry_no_store_and_the_stylesheet_stays_cacheable() {
    let app = TestApp::spawn().await;
    let admin = app.token("alice", &[Scope::Admin]).await;
    let up = app
        .upload(
            &admin,
            &[(
                "log",
                Some("t.log"),
                b"RuntimeError: CUDA error: misaligned address\n",
            )],
            None,
        )
        .await;
    assert_eq!(up.status, StatusCode::CREATED, "{}", up.body);
    let id = up.json()["id"].as_i64().unwrap();
    let browser = super::sign_in(&app, &admin).await;
    let responses = [
        (
            "api report",
            app.get_as(&admin, &format!("/api/v1/reports/{id}")).await,
        ),
        (
            "api search",
            app.get_as(&admin, "/api/v1/search?q=misaligned").await,
        ),
        (
            "report page",
            super::page(&app, &browser.cookie, &format!("/reports/{id}")).await,
        ),
        (
            "raw log",
            super::page(&app, &browser.cookie, &format!("/reports/{id}/raw")).await,
        ),
        (
            "unauthorized",
            app.get(&format!("/api/v1/reports/{id}")).await,
        ),
    ];
    for (what, res) in responses {
        let cache = res
            .headers
            .get("cache-control")
            .map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(cache.as_deref(), Some("no-store"), "{what}: {}", res.status);
    }
    let css = app.get("/static/app.css").await;
    assert_eq!(css.headers["cache-control"], "public, max-age=3600");
}

/// Issue 16 item 9: the idempotency fingerprint covers the file name, so a second request that
/// differs only there is not answered with the first one's report.
#[tokio::test]
async fn an_idempotency_key_reused_with_another_file_name_is_refused() {
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest]).await;
    let log: &[u8] = b"RuntimeError: CUDA error: misaligned address\n";
    let first = app
        .upload(&t, &[("log", Some("rank0.log"), log)], Some("run-42"))
        .await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    let retry = app
        .upload(&t, &[("log", Some("rank0.log"), log)], Some("run-42"))
        .await;
    assert_eq!(retry.status, StatusCode::CREATED, "{}", retry.body);
    assert_eq!(retry.json()["id"], first.json()["id"]);
    let other = app
        .upload(&t, &[("log", Some("rank1.log"), log)], Some("run-42"))
        .await;
    assert_eq!(
        other.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        other.body
    );
    assert_eq!(other.error_code(), "idempotency_key_reused");
    assert_eq!(app.count("reports").await, 1);
}

const BOUNDARY: &str = "gpu-triage-guard-test-0c1d";

fn multipart_request(path: &str, auth: (&str, &str)) -> axum::http::request::Builder {
    Request::post(path).header(auth.0, auth.1).header(
        "content-type",
        format!("multipart/form-data; boundary={BOUNDARY}"),
    )
}

/// What a streamed body got: the answer, and how many bytes the client sent before the server
/// stopped reading.
struct Streamed {
    res: TestResponse,
    sent: usize,
}

/// Sends `head`, then up to `total` bytes of `fill` in 64 KiB chunks, as the body of `req`,
/// until the server stops reading it. The client gives up at 16 MiB (a server without the
/// multipart guard would buffer all of it, rescanning it per chunk: half a minute of CPU in a
/// debug build): the body then ends there, unfinished.
async fn stream_body(
    app: &TestApp,
    req: axum::http::request::Builder,
    head: &[u8],
    fill: u8,
    total: usize,
) -> Streamed {
    const GIVE_UP: usize = 16 << 20;
    let (mut tx, body) = Channel::<Bytes>::new(1);
    let req = req.body(Body::new(body)).unwrap();
    let router = app.router.clone();
    let answer = tokio::spawn(async move { router.oneshot(req).await.unwrap() });
    let piece = Bytes::from(vec![fill; 64 << 10]);
    let mut sent = 0;
    if tx.send_data(Bytes::copy_from_slice(head)).await.is_ok() {
        sent += head.len();
        while sent < total.min(GIVE_UP) && tx.send_data(piece.clone()).await.is_ok() {
            sent += piece.len();
        }
    }
    drop(tx);
    let res = answer.await.unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let res = TestResponse {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    };
    Streamed { res, sent }
}

/// Issue 16 item 2: a part header of 256 MiB with no blank line used to be buffered whole (+264
/// MB RSS, 13 CPU-seconds) before a 400.
#[tokio::test]
async fn a_part_header_that_never_ends_is_refused_after_its_cap_and_nothing_is_stored() {
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest]).await;
    let head = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"log\"; filename=\"a.log\"\r\nX-Pad: "
    );
    let bearer = format!("Bearer {t}");
    let req = multipart_request("/api/v1/reports", ("authorization", &bearer));
    let got = stream_body(&app, req, head.as_bytes(), b'h', 256 << 20).await;
    assert_eq!(
        got.res.status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "{}",
        got.res.body
    );
    assert_eq!(got.res.error_code(), "too_large");
    let message = got.res.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("header block") && message.contains("16384-byte"),
        "{message}"
    );
    assert!(
        got.sent < 1 << 20,
        "{} bytes sent before the answer",
        got.sent
    );
    assert_eq!(app.count("reports").await, 0);
}

/// Issue 16 item 2: the same for a preamble of 200 MiB before the first boundary, on the API
/// (JSON) and on the portal's form (an HTML error page).
#[tokio::test]
async fn a_preamble_that_never_reaches_the_boundary_is_refused_early_on_the_api_and_the_portal() {
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest]).await;
    let head = b"This is a multi-part message in MIME format.\r\n";

    let bearer = format!("Bearer {t}");
    let req = multipart_request("/api/v1/reports", ("authorization", &bearer));
    let api = stream_body(&app, req, head, b'p', 200 << 20).await;
    assert_eq!(
        api.res.status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "{}",
        api.res.body
    );
    assert_eq!(api.res.error_code(), "too_large");
    assert!(api.res.body.contains("preamble"), "{}", api.res.body);
    assert!(
        api.sent < 1 << 20,
        "{} bytes sent before the answer",
        api.sent
    );

    let browser = super::sign_in(&app, &t).await;
    let req = multipart_request("/reports", ("cookie", &browser.cookie));
    let portal = stream_body(&app, req, head, b'p', 200 << 20).await;
    assert_eq!(
        portal.res.status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "{}",
        portal.res.body
    );
    let message = super::texts(&portal.res.body, ".error-message").join(" ");
    assert!(
        message.contains("preamble") && message.contains("16384-byte"),
        "{message}"
    );
    assert!(
        portal.sent < 1 << 20,
        "{} bytes sent before the answer",
        portal.sent
    );
    assert_eq!(app.count("reports").await, 0);
}

/// What RFC 2046 allows and real clients send still works: a preamble, transport padding after
/// a delimiter, several header lines, an epilogue; also gzip-encoded, where the guard counts
/// decoded bytes (the compressed body is far longer than the preamble cap and holds no
/// boundary).
#[tokio::test]
async fn an_upload_with_a_preamble_padding_and_an_epilogue_is_stored_plain_or_gzipped() {
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest]).await;
    let body = |run: &str| {
        let mut log = format!("run {run}\n");
        log.extend((0..20_000u64).map(|i| {
            format!(
                "step {i} loss {}\n",
                i.wrapping_mul(2_654_435_761) % 100_003
            )
        }));
        log.push_str("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n");
        format!(
            "This is a multi-part message in MIME format.\r\n\
             --{BOUNDARY} \t\r\n\
             Content-Disposition: form-data; name=\"log\"; filename=\"train.log\"\r\n\
             Content-Type: text/plain; charset=utf-8\r\n\
             Content-Transfer-Encoding: 8bit\r\n\r\n\
             {log}\r\n\
             --{BOUNDARY}\r\n\
             Content-Disposition: form-data; name=\"meta\"\r\n\r\n\
             {{\"project\": \"vision\"}}\r\n\
             --{BOUNDARY}--\r\n\
             This epilogue is ignored.\r\n"
        )
        .into_bytes()
    };
    let bearer = format!("Bearer {t}");
    let plain = multipart_request("/api/v1/reports", ("authorization", &bearer))
        .body(Body::from(body("plain")))
        .unwrap();
    let res = app.send(plain).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    assert_eq!(res.json()["classification"]["category"], "out_of_memory");

    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &body("gzipped")).unwrap();
    let gz = gz.finish().unwrap();
    assert!(gz.len() > 64 << 10, "{} compressed bytes", gz.len());
    let gzipped = multipart_request("/api/v1/reports", ("authorization", &bearer))
        .header("content-encoding", "gzip")
        .body(Body::from(gz))
        .unwrap();
    let res = app.send(gzipped).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    assert_eq!(app.count("reports").await, 2);
}

#[tokio::test]
async fn a_form_of_more_than_64_parts_is_refused_with_413() {
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest]).await;
    let browser = super::sign_in(&app, &t).await;
    let mut body = String::new();
    for _ in 0..65 {
        body.push_str(&format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\ny\r\n"
        ));
    }
    body.push_str(&format!("--{BOUNDARY}--\r\n"));
    let req = multipart_request("/reports", ("cookie", &browser.cookie))
        .body(Body::from(body))
        .unwrap();
    let res = app.send(req).await;
    assert_eq!(res.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", res.body);
    let message = super::texts(&res.body, ".error-message").join(" ");
    assert!(message.contains("more than 64 parts"), "{message}");
    assert_eq!(app.count("reports").await, 0);
}

/// Issue 16: a NUL anywhere a client can put one (path, query, JSON, form, multipart field,
/// file name, log, script, worker output) is never a 500, on any route.
#[tokio::test]
async fn a_nul_anywhere_on_any_route_is_never_a_500() {
    let app = TestApp::spawn().await;
    let admin = app.token("root", &[Scope::Admin]).await;
    let up = app
        .upload(
            &admin,
            &[(
                "log",
                Some("a.log"),
                b"RuntimeError: CUDA error: out of memory\n",
            )],
            None,
        )
        .await;
    assert_eq!(up.status, StatusCode::CREATED, "{}", up.body);
    let (report, group) = (
        up.json()["id"].as_i64().unwrap(),
        up.json()["group_id"].as_i64().unwrap(),
    );
    let b = crate::browse::sign_in(&app, &admin).await;
    let nul = "a\u{0}b";
    let api = |method: &str, path: &str, ct: &str, body: Vec<u8>| {
        Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {admin}"))
            .header("content-type", ct)
            .body(Body::from(body))
            .unwrap()
    };
    let portal = |method: &str, path: &str, ct: &str, body: Vec<u8>| {
        Request::builder()
            .method(method)
            .uri(path)
            .header("cookie", &b.cookie)
            .header("content-type", ct)
            .body(Body::from(body))
            .unwrap()
    };
    let json = |v: serde_json::Value| v.to_string().into_bytes();
    let form = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| format!("{k}={}", v.replace('\u{0}', "%00")))
            .collect::<Vec<_>>()
            .join("&")
            .into_bytes()
    };
    let multipart = |parts: &[(&str, Option<&str>, &[u8])]| {
        let mut body = Vec::new();
        for (name, file, bytes) in parts {
            let disposition = match file {
                Some(f) => format!("name=\"{name}\"; filename=\"{f}\""),
                None => format!("name=\"{name}\""),
            };
            body.extend_from_slice(
                format!("--nulb\r\nContent-Disposition: form-data; {disposition}\r\n\r\n")
                    .as_bytes(),
            );
            body.extend_from_slice(bytes);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(b"--nulb--\r\n");
        body
    };
    let (js, fm, mp, txt) = (
        "application/json",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=nulb",
        "text/plain",
    );
    let log = b"step\0\0\0\nRuntimeError: CUDA error: out of memory\0\n".as_slice();
    let meta = json(serde_json::json!({"project": nul, "branch": nul}));
    let rule = serde_json::json!({"id": "team.n\u{0}", "category": "library_error",
        "title": nul, "pattern": "Boom\u{0} failed", "advice": [nul], "examples": [nul]});
    let csrf = b.csrf.as_str();
    let requests = vec![
        api("GET", "/api/v1/reports/%00", txt, vec![]),
        api("GET", &format!("/api/v1/reports/{report}%00"), txt, vec![]),
        api("GET", "/api/v1/groups/%00", txt, vec![]),
        api(
            "GET",
            "/api/v1/search?q=%00&project=%00&category=%00",
            txt,
            vec![],
        ),
        api("POST", "/api/v1/classify", txt, log.to_vec()),
        api(
            "POST",
            "/api/v1/reports",
            mp,
            multipart(&[("log", Some("a\u{0}.log"), log)]),
        ),
        api(
            "POST",
            "/api/v1/reports",
            mp,
            multipart(&[("log", Some("n.log"), log)]),
        ),
        api(
            "POST",
            "/api/v1/reports",
            mp,
            multipart(&[("log", Some("m.log"), b"x\n"), ("meta", None, &meta)]),
        ),
        api(
            "POST",
            "/api/v1/reports",
            mp,
            multipart(&[
                ("log", Some("s.log"), b"y\nRuntimeError: boom\n"),
                (
                    "script",
                    Some("repro\u{0}.py"),
                    b"import torch\0\nprint(1)\n",
                ),
            ]),
        ),
        api(
            "POST",
            &format!("/api/v1/groups/{group}/fixes"),
            js,
            json(serde_json::json!({"summary": nul, "details": nul, "link": nul})),
        ),
        api(
            "POST",
            "/api/v1/jobs/claim",
            js,
            json(serde_json::json!({
            "worker": nul, "gpu": {"name": nul}, "sandbox": "bubblewrap"})),
        ),
        api(
            "POST",
            "/api/v1/jobs/%00/heartbeat",
            js,
            json(serde_json::json!({"lease_token": nul})),
        ),
        api(
            "POST",
            "/api/v1/jobs/1/heartbeat",
            js,
            json(serde_json::json!({"lease_token": nul})),
        ),
        api(
            "POST",
            "/api/v1/jobs/1/result",
            js,
            json(serde_json::json!({
            "lease_token": nul, "duration_ms": 1, "stdout": nul, "stderr": nul})),
        ),
        api("GET", "/api/v1/rules?q=%00", txt, vec![]),
        api("POST", "/api/v1/rules", js, json(rule.clone())),
        api("POST", "/api/v1/rules/preview", js, json(rule.clone())),
        api("PUT", "/api/v1/rules/%00", js, json(rule.clone())),
        api("PUT", "/api/v1/rules/team.x", js, json(rule)),
        api("DELETE", "/api/v1/rules/%00", txt, vec![]),
        api(
            "POST",
            "/api/v1/webhooks",
            js,
            json(
                serde_json::json!({"url": format!("https://example.com/{nul}"),
                "events": [nul], "projects": [nul], "categories": [nul], "secret": nul,
                "description": nul, "format": nul}),
            ),
        ),
        api(
            "POST",
            "/api/v1/webhooks",
            js,
            json(serde_json::json!({"url": "https://example.com/",
                "events": ["new_group"], "projects": [nul], "description": nul})),
        ),
        api(
            "PATCH",
            "/api/v1/webhooks/%00",
            js,
            json(serde_json::json!({"url": nul})),
        ),
        api("GET", "/api/v1/webhooks/%00/deliveries", txt, vec![]),
        api("POST", "/api/v1/webhooks/%00/test", txt, vec![]),
        api("DELETE", "/api/v1/webhooks/%00", txt, vec![]),
        portal("GET", "/?q=%00", txt, vec![]),
        portal("GET", "/reports/%00", txt, vec![]),
        portal("GET", &format!("/reports/{report}?start=%00"), txt, vec![]),
        portal("GET", &format!("/reports/{report}?start=1%00"), txt, vec![]),
        portal("GET", "/reports/%00/raw", txt, vec![]),
        portal("GET", "/groups?page=%00", txt, vec![]),
        portal("GET", "/groups/%00", txt, vec![]),
        portal("GET", "/search?q=%00&category=%00", txt, vec![]),
        portal("GET", "/rules/%00", txt, vec![]),
        portal("GET", "/rules/new?from=%00", txt, vec![]),
        portal(
            "POST",
            "/reports",
            mp,
            multipart(&[
                ("csrf", None, csrf.as_bytes()),
                ("log_text", None, log),
                ("project", None, b"p\0q"),
                ("script", None, b"print(1)\0\n"),
            ]),
        ),
        portal(
            "POST",
            "/reports",
            mp,
            multipart(&[
                ("csrf", None, csrf.as_bytes()),
                ("log_file", Some("f\u{0}.log"), log),
            ]),
        ),
        portal(
            "POST",
            &format!("/groups/{group}/fixes"),
            fm,
            form(&[
                ("csrf", csrf),
                ("summary", nul),
                ("details", nul),
                ("link", nul),
            ]),
        ),
        portal(
            "POST",
            "/groups/%00/fixes",
            fm,
            form(&[("csrf", csrf), ("summary", "x")]),
        ),
        portal(
            "POST",
            &format!("/groups/{group}/merge"),
            fm,
            form(&[("csrf", csrf), ("into", nul)]),
        ),
        portal(
            "POST",
            "/rules",
            fm,
            form(&[
                ("csrf", csrf),
                ("id", "team.n\u{0}"),
                ("category", nul),
                ("title", nul),
                ("pattern", nul),
                ("advice", nul),
                ("examples", nul),
                ("counter_examples", nul),
                ("action", "preview"),
            ]),
        ),
        portal(
            "POST",
            "/rules",
            fm,
            form(&[
                ("csrf", csrf),
                ("id", "team.n"),
                ("category", "library_error"),
                ("title", nul),
                ("pattern", "Boom failed"),
                ("advice", nul),
                ("examples", "Boom failed"),
                ("action", "save"),
            ]),
        ),
        portal(
            "POST",
            "/rules/%00/enabled",
            fm,
            form(&[("csrf", csrf), ("enabled", nul)]),
        ),
        portal("POST", "/rules/%00/delete", fm, form(&[("csrf", csrf)])),
        portal("POST", "/rules/reclassify", fm, form(&[("csrf", nul)])),
        portal("POST", "/jobs/%00/requeue", fm, form(&[("csrf", csrf)])),
        portal("GET", "/webhooks/%00", txt, vec![]),
        portal(
            "POST",
            "/webhooks",
            fm,
            form(&[
                ("csrf", csrf),
                ("url", nul),
                ("events", nul),
                ("projects", nul),
                ("categories", nul),
                ("description", nul),
                ("secret", nul),
            ]),
        ),
        portal(
            "POST",
            "/webhooks/%00/enabled",
            fm,
            form(&[("csrf", csrf), ("enabled", nul)]),
        ),
        portal("POST", "/login", fm, form(&[("token", nul)])),
        portal("POST", "/logout", fm, form(&[("csrf", nul)])),
    ];
    for req in requests {
        let what = format!("{} {}", req.method(), req.uri());
        let res = app.send(req).await;
        assert!(
            !res.status.is_server_error(),
            "{what}: {} {}",
            res.status,
            res.body
        );
    }
}
