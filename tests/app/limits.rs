//! Load limits over the real router and database: the per-token rate limit (429 with
//! `Retry-After`, other tokens unaffected), the in-flight cap (503 with `Retry-After`) held
//! until a response body is done, each token's share of it (one token's slow uploads leave the
//! others served), and gzip request bodies whose decoded size is what the caps count.

use std::io::Write;

use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use gpu_triage::auth::Scope;
use gpu_triage::web::limits::LoadLimits;
use http_body_util::Channel;

use crate::support::{TestApp, TestResponse, send_to, wait_until_async};

const OOM: &[u8] = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n";

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(bytes).expect("gzip");
    enc.finish().expect("gzip")
}

fn classify_request(token: &str, body: Vec<u8>, encoding: Option<&str>) -> Request<Body> {
    let mut req = Request::post("/api/v1/classify")
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "text/plain");
    if let Some(e) = encoding {
        req = req.header("content-encoding", e);
    }
    req.body(Body::from(body)).expect("request")
}

/// An app whose tokens may make a burst of 3 requests (6 a minute), with no in-flight cap.
async fn rate_limited_app() -> TestApp {
    TestApp::spawn_with(|s| {
        s.with_load_limits(&LoadLimits {
            per_token_per_minute: 6,
            burst: 3,
            ..LoadLimits::default()
        })
    })
    .await
}

#[tokio::test]
async fn a_burst_on_one_token_gets_429_with_retry_after_and_another_token_is_unaffected() {
    let app = rate_limited_app().await;
    let busy = app.token("busy", &[Scope::Ingest]).await;
    let quiet = app.token("quiet", &[Scope::Ingest]).await;
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let res = app.send(classify_request(&busy, OOM.to_vec(), None)).await;
        statuses.push(res.status.as_u16());
        if res.status == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(res.error_code(), "rate_limited");
            let wait: u64 = res.headers["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!((1..=10).contains(&wait), "Retry-After {wait}");
        }
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    let other = app.send(classify_request(&quiet, OOM.to_vec(), None)).await;
    assert_eq!(other.status, StatusCode::OK, "{}", other.body);
    let metrics = app.get("/metrics").await.body;
    assert!(
        metrics.contains("gpu_triage_requests_rate_limited_total 2"),
        "{metrics}"
    );
}

/// The start page's form: pasted log number `n`, as a browser posts it.
fn portal_upload(b: &crate::browse::Browser, n: usize) -> Request<Body> {
    let boundary = "limits-test-boundary";
    let log = format!("step {n}\nRuntimeError: CUDA error: out of memory\n");
    let mut body = String::new();
    for (name, value) in [("csrf", b.csrf.as_str()), ("log_text", log.as_str())] {
        body.push_str(&format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
        ));
    }
    body.push_str(&format!("--{boundary}--\r\n"));
    Request::post("/reports")
        .header("cookie", &b.cookie)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(Body::from(body))
        .expect("request")
}

#[tokio::test]
async fn portal_actions_spend_the_signed_in_tokens_rate_limit_but_pages_do_not() {
    let app = rate_limited_app().await;
    let token = app.token("portal", &[Scope::Ingest, Scope::Read]).await;
    let quiet = app.token("quiet", &[Scope::Ingest]).await;
    let b = crate::browse::sign_in(&app, &token).await;
    // Reading pages spends nothing.
    for _ in 0..5 {
        let home = crate::browse::page(&app, &b.cookie, "/").await;
        assert_eq!(home.status, StatusCode::OK);
    }
    let mut statuses = Vec::new();
    for n in 0..5 {
        let res = app.send(portal_upload(&b, n)).await;
        statuses.push(res.status.as_u16());
        if res.status == StatusCode::TOO_MANY_REQUESTS {
            assert!(res.headers.contains_key("retry-after"), "{:?}", res.headers);
            assert!(res.body.contains("rate limit"), "{}", res.body);
        }
    }
    assert_eq!(statuses, [303, 303, 303, 429, 429]);
    assert_eq!(app.count("reports").await, 3);
    // The session and the API share the token's budget; another token keeps its own.
    let api = app.send(classify_request(&token, OOM.to_vec(), None)).await;
    assert_eq!(api.status, StatusCode::TOO_MANY_REQUESTS, "{}", api.body);
    let other = app.send(classify_request(&quiet, OOM.to_vec(), None)).await;
    assert_eq!(other.status, StatusCode::OK, "{}", other.body);
}

#[tokio::test]
async fn requests_beyond_the_in_flight_cap_get_503_and_probes_still_answer() {
    let app = TestApp::spawn_with(|s| {
        s.with_load_limits(&LoadLimits {
            per_token_per_minute: 0,
            burst: 1,
            max_in_flight: 1,
            max_in_flight_per_token: 0,
            ..LoadLimits::default()
        })
    })
    .await;
    let token = app.token("ci", &[Scope::Ingest]).await;
    // An upload whose body is still arriving holds the only slot.
    let (mut tx, body) = Channel::<Bytes>::new(1);
    let req = Request::post("/api/v1/reports")
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "multipart/form-data; boundary=b")
        .body(Body::new(body))
        .expect("request");
    let router = app.router.clone();
    let slow = tokio::spawn(async move {
        use tower::ServiceExt;
        router.oneshot(req).await.expect("router").status()
    });
    tx.send_data(Bytes::from_static(
        b"--b\r\nContent-Disposition: form-data; name=\"log\"; filename=\"a.log\"\r\n\r\n",
    ))
    .await
    .expect("send");
    // The upload's body is read only past the cap (in the handler): once its first chunk has
    // left the channel, the upload holds the only slot and waits for the rest of its body.
    wait_until_async(
        std::time::Duration::from_secs(30),
        "the held upload to take the slot and read its first chunk",
        async || tx.capacity() == tx.max_capacity(),
    )
    .await;
    assert!(!slow.is_finished(), "the held upload waits for its body");
    let shed = app.send(classify_request(&token, OOM.to_vec(), None)).await;
    assert_eq!(
        shed.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        shed.body
    );
    assert_eq!(shed.error_code(), "overloaded");
    assert_eq!(shed.headers["retry-after"], "1");
    assert_eq!(app.get("/healthz").await.status, StatusCode::OK);
    // The held upload completes normally once its body ends.
    tx.send_data(Bytes::from([OOM, b"\r\n--b--\r\n".as_slice()].concat()))
        .await
        .expect("send");
    drop(tx);
    assert_eq!(slow.await.expect("task"), StatusCode::CREATED);
    let after = app.send(classify_request(&token, OOM.to_vec(), None)).await;
    assert_eq!(after.status, StatusCode::OK, "the slot is free again");
    assert_eq!(app.count("reports").await, 1);
}

#[tokio::test]
async fn gzip_bodies_are_decoded_and_their_decoded_size_is_capped() {
    let app = TestApp::spawn_with(|mut s| {
        s.limits.upload.max_log_bytes = 1 << 20;
        s.limits.max_classify_bytes = 1 << 20;
        s
    })
    .await;
    let token = app.token("ci", &[Scope::Ingest]).await;
    let res = app
        .send(classify_request(&token, gzip(OOM), Some("gzip")))
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert_eq!(res.json()["category"], "out_of_memory");

    // 64 MiB of newlines compress to ~64 KiB: refused at the decoded cap, nothing stored.
    let bomb = gzip(&vec![b'\n'; 64 << 20]);
    assert!(bomb.len() < 200 << 10, "{}", bomb.len());
    let res = app
        .send(classify_request(&token, bomb.clone(), Some("gzip")))
        .await;
    assert_eq!(res.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", res.body);

    let boundary = "b";
    let mut multipart = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"log\"; filename=\"a.log\"\r\n\r\n"
    )
    .into_bytes();
    multipart.extend(vec![b'\n'; 64 << 20]);
    multipart.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let req = Request::post("/api/v1/reports")
        .header("authorization", format!("Bearer {token}"))
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .header("content-encoding", "gzip")
        .body(Body::from(gzip(&multipart)))
        .expect("request");
    let res = app.send(req).await;
    assert_eq!(res.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", res.body);
    assert_eq!(app.count("reports").await, 0);

    // Corrupt gzip and unknown encodings are refused clearly.
    let res = app
        .send(classify_request(&token, b"not gzip".to_vec(), Some("gzip")))
        .await;
    assert_eq!(res.status, StatusCode::BAD_REQUEST, "{}", res.body);
    let res = app
        .send(classify_request(&token, OOM.to_vec(), Some("br")))
        .await;
    assert_eq!(
        res.status,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "{}",
        res.body
    );
}

#[tokio::test]
async fn a_body_of_several_gzip_members_is_decoded_whole() {
    let app = TestApp::spawn().await;
    let token = app.token("ci", &[Scope::Ingest]).await;
    let first = b"epoch 1\nstep 2\n".repeat(5000);
    let mut body = gzip(&first);
    body.extend(gzip(OOM));
    let res = app
        .send(classify_request(&token, body.clone(), Some("gzip")))
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let v = res.json();
    assert_eq!(v["category"], "out_of_memory");
    assert_eq!(v["stats"]["bytes"], (first.len() + OOM.len()) as u64);
    // Bytes after the last member that are not gzip are refused.
    body.extend_from_slice(b"trailing junk");
    let res = app.send(classify_request(&token, body, Some("gzip"))).await;
    assert_eq!(res.status, StatusCode::BAD_REQUEST, "{}", res.body);
}

/// An upload to `POST /api/v1/reports` whose body is fed through the returned channel.
fn streamed_upload(token: &str) -> (http_body_util::channel::Sender<Bytes>, Request<Body>) {
    let (tx, body) = Channel::<Bytes>::new(1);
    let req = Request::post("/api/v1/reports")
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "multipart/form-data; boundary=b")
        .body(Body::new(body))
        .expect("request");
    (tx, req)
}

const PART_HEAD: &[u8] =
    b"--b\r\nContent-Disposition: form-data; name=\"log\"; filename=\"a.log\"\r\n\r\n";

#[tokio::test]
async fn slow_uploads_on_one_token_hold_only_its_share_and_other_tokens_are_served() {
    // The default slots (128, 32 per token); no rate limit, so only the slots decide.
    let app = TestApp::spawn_with(|s| {
        s.with_load_limits(&LoadLimits {
            per_token_per_minute: 0,
            ..LoadLimits::default()
        })
    })
    .await;
    let hog = app.token("hog", &[Scope::Ingest]).await;
    let others = [
        app.token("ci-a", &[Scope::Ingest]).await,
        app.token("ci-b", &[Scope::Ingest, Scope::Read]).await,
    ];
    // 128 uploads on one token, each stalled after its first bytes.
    let mut uploads = Vec::new();
    for _ in 0..128 {
        let (mut tx, req) = streamed_upload(&hog);
        let task = tokio::spawn(send_to(app.router.clone(), req));
        tx.send_data(Bytes::from_static(PART_HEAD))
            .await
            .expect("send");
        uploads.push((tx, task));
    }
    // All but the token's share are refused at once, without waiting for their bodies.
    wait_until_async(
        std::time::Duration::from_secs(60),
        "the uploads beyond the token's share to be answered",
        async || uploads.iter().filter(|(_, u)| u.is_finished()).count() >= 96,
    )
    .await;
    let (done, held): (Vec<_>, Vec<_>) = uploads.into_iter().partition(|(_, u)| u.is_finished());
    assert_eq!((done.len(), held.len()), (96, 32));
    for (_, refused) in done {
        let res: TestResponse = refused.await.expect("task");
        assert_eq!(res.status, StatusCode::TOO_MANY_REQUESTS, "{}", res.body);
        assert_eq!(res.error_code(), "token_busy");
        assert_eq!(res.headers["retry-after"], "1");
    }
    // Meanwhile other tokens are served, 16 clients side by side, every time.
    let mut clients = Vec::new();
    for n in 0..16 {
        let (router, token) = (app.router.clone(), others[n % 2].clone());
        clients.push(tokio::spawn(async move {
            let mut statuses = Vec::new();
            for _ in 0..12 {
                let res = send_to(router.clone(), classify_request(&token, OOM.to_vec(), None));
                statuses.push(res.await.status);
            }
            statuses
        }));
    }
    for client in clients {
        let statuses = client.await.expect("task");
        assert!(
            statuses.iter().all(|s| *s == StatusCode::OK),
            "{statuses:?}"
        );
    }
    let search = app
        .send(
            Request::get("/api/v1/search?q=memory")
                .header("authorization", format!("Bearer {}", others[1]))
                .body(Body::empty())
                .expect("request"),
        )
        .await;
    assert_eq!(search.status, StatusCode::OK, "{}", search.body);
    // The hog itself gets nothing more until one of its uploads ends.
    let more = app.send(classify_request(&hog, OOM.to_vec(), None)).await;
    assert_eq!(more.error_code(), "token_busy", "{}", more.body);
    let (mut senders, held): (Vec<_>, Vec<_>) = held.into_iter().unzip();
    let mut first = senders.remove(0);
    first
        .send_data(Bytes::from([OOM, b"\r\n--b--\r\n".as_slice()].concat()))
        .await
        .expect("send");
    drop(first);
    drop(senders); // The rest end unfinished: refused as broken multipart, nothing stored.
    let mut created = 0;
    for upload in held {
        let res = upload.await.expect("task");
        match res.status {
            StatusCode::CREATED => created += 1,
            StatusCode::BAD_REQUEST => assert_eq!(res.error_code(), "bad_multipart"),
            other => panic!("unexpected {other}: {}", res.body),
        }
    }
    assert_eq!(created, 1);
    assert_eq!(app.count("reports").await, 1);
    let again = app.send(classify_request(&hog, OOM.to_vec(), None)).await;
    assert_eq!(again.status, StatusCode::OK, "its share is free again");
}

#[tokio::test]
async fn a_slot_is_held_until_the_response_body_is_done() {
    let app = TestApp::spawn_with(|s| {
        s.with_load_limits(&LoadLimits {
            per_token_per_minute: 0,
            burst: 1,
            max_in_flight: 1,
            max_in_flight_per_token: 0,
            ..LoadLimits::default()
        })
    })
    .await;
    let token = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let res = app.send(classify_request(&token, OOM.to_vec(), None)).await;
    assert_eq!(res.status, StatusCode::OK);
    // A response whose body has not been read yet (a download still streaming) holds its slot.
    let pending = {
        use tower::ServiceExt;
        app.router
            .clone()
            .oneshot(classify_request(&token, OOM.to_vec(), None))
            .await
            .expect("router")
    };
    assert_eq!(pending.status(), StatusCode::OK);
    let shed = app.send(classify_request(&token, OOM.to_vec(), None)).await;
    assert_eq!(shed.error_code(), "overloaded", "{}", shed.body);
    // Reading it to the end gives the slot back.
    use http_body_util::BodyExt;
    let body = pending
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    assert!(!body.is_empty());
    let after = app.send(classify_request(&token, OOM.to_vec(), None)).await;
    assert_eq!(after.status, StatusCode::OK, "{}", after.body);
}
