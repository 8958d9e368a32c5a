//! SECURITY.md items 1 and 9 over real sockets against the served binary: oversize bodies with
//! an honest `Content-Length` and chunked without one, a client that hangs up mid-upload, 200
//! concurrent uploads under a small in-flight cap; and concurrent retries of one
//! `Idempotency-Key`, in-process.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use gpu_triage::auth::Scope;

use super::{Served, count_at, eventually, multipart_log, raw_exchange};
use crate::support::{TestApp, create_token, database_url, fresh_db, shared_tempdir};

const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n";
const CAP: usize = 256 << 10;

fn upload_head(port: u16, token: &str, boundary: &str, length: Option<usize>) -> String {
    let framing = match length {
        Some(n) => format!("Content-Length: {n}"),
        None => "Transfer-Encoding: chunked".to_owned(),
    };
    format!(
        "POST /api/v1/reports HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: multipart/form-data; boundary={boundary}\r\n{framing}\r\nConnection: close\r\n\r\n"
    )
}

/// `body` in HTTP/1.1 chunks of 16 KiB.
fn chunked(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in body.chunks(16 << 10) {
        out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        out.extend_from_slice(piece);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

#[test]
fn oversize_bodies_honest_or_chunked_and_a_hung_up_client_store_nothing_and_leave_no_file() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (db, options) = rt.block_on(fresh_db());
    let url = database_url(options.get_database().unwrap());
    let token = create_token(&url, "ingest", "ci");
    let tmp = shared_tempdir();
    let cap = CAP.to_string();
    let server = Served::start(&url, tmp.path(), &["--max-log-bytes", &cap], &[]);
    let port = server.port;
    let log = OOM.repeat((CAP * 3) / OOM.len());
    let body = multipart_log("b", log.as_bytes());

    let (status, text) = raw_exchange(
        port,
        upload_head(port, &token, "b", Some(body.len())),
        body.clone(),
    );
    assert_eq!(status, 413, "honest Content-Length: {text}");
    assert!(text.contains("\"too_large\""), "{text}");
    let (status, text) = raw_exchange(port, upload_head(port, &token, "b", None), chunked(&body));
    assert_eq!(status, 413, "chunked: {text}");
    // Just under the cap is stored, so the cap is what refused the others.
    let small = multipart_log("b", OOM.repeat((CAP - 1024) / OOM.len()).as_bytes());
    let (status, text) = raw_exchange(port, upload_head(port, &token, "b", None), chunked(&small));
    assert_eq!(status, 201, "{text}");
    assert_eq!(count_at(&rt, &db, "reports"), 1);
    assert!(
        eventually(10, || server.open_files_in(tmp.path()).is_empty()),
        "spool files left open: {:?}",
        server.open_files_in(tmp.path())
    );
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "files left in TMPDIR"
    );

    // A client that sends half its upload and hangs up: the spool file exists while the body
    // streams, and is gone with the connection; no row.
    for framing in [Some(body.len()), None] {
        use std::io::Write;
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .write_all(upload_head(port, &token, "b", framing).as_bytes())
            .unwrap();
        let half = &body[..CAP / 2];
        match framing {
            Some(_) => stream.write_all(half).unwrap(),
            None => {
                let c = chunked(half);
                stream.write_all(&c[..c.len() - 5]).unwrap() // without the last chunk
            }
        }
        stream.flush().unwrap();
        assert!(
            eventually(30, || !server.open_files_in(tmp.path()).is_empty()),
            "the upload never started spooling"
        );
        drop(stream);
        assert!(
            eventually(30, || server.open_files_in(tmp.path()).is_empty()),
            "spool file kept after the client left ({framing:?}): {:?}",
            server.open_files_in(tmp.path())
        );
    }
    assert_eq!(
        count_at(&rt, &db, "reports"),
        1,
        "no row from a hung-up client"
    );
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    assert_eq!(crate::support::http_get(port, "/healthz").unwrap().0, 200);
}

#[test]
fn two_hundred_concurrent_uploads_get_only_201_429_or_503_and_rows_match_the_201s() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (db, options) = rt.block_on(fresh_db());
    let url = database_url(options.get_database().unwrap());
    let tokens: Vec<String> = (0..2)
        .map(|i| create_token(&url, "ingest", &format!("ci-{i}")))
        .collect();
    let tmp = shared_tempdir();
    let server = Served::start(
        &url,
        tmp.path(),
        &[
            "--max-in-flight",
            "16",
            "--rate-burst",
            "80",
            "--rate-limit",
            "60",
        ],
        &[],
    );
    let base = format!("http://127.0.0.1:{}/api/v1/reports", server.port);
    let barrier = Arc::new(std::sync::Barrier::new(200));
    let threads: Vec<_> = (0..200)
        .map(|i| {
            let (base, token, barrier) = (base.clone(), tokens[i % 2].clone(), barrier.clone());
            std::thread::spawn(move || {
                let agent: ureq::Agent = ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .timeout_global(Some(Duration::from_secs(120)))
                    .build()
                    .into();
                let body = multipart_log("b", format!("upload {i}\n{OOM}").as_bytes());
                barrier.wait();
                let res = agent
                    .post(&base)
                    .header("Authorization", format!("Bearer {token}"))
                    .header("Content-Type", "multipart/form-data; boundary=b")
                    .send(&body[..]);
                match res {
                    Ok(mut r) => {
                        let retry = r.headers().get("retry-after").is_some();
                        let text = r.body_mut().read_to_string().unwrap_or_default();
                        (r.status().as_u16(), retry, text)
                    }
                    Err(e) => panic!("upload {i}: {e}"),
                }
            })
        })
        .collect();
    let mut by_status = std::collections::BTreeMap::<u16, usize>::new();
    for t in threads {
        let (status, retry, text) = t.join().unwrap();
        assert!(matches!(status, 201 | 429 | 503), "status {status}: {text}");
        if status != 201 {
            assert!(retry, "{status} without Retry-After");
        }
        *by_status.entry(status).or_default() += 1;
    }
    eprintln!("200 concurrent uploads, max-in-flight 16: {by_status:?}");
    let created = by_status.get(&201).copied().unwrap_or(0);
    assert!(created > 0);
    assert_eq!(
        count_at(&rt, &db, "reports") as usize,
        created,
        "{by_status:?}"
    );
    assert!(eventually(10, || server
        .open_files_in(tmp.path())
        .is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_retries_with_one_idempotency_key_store_one_report() {
    let app = Arc::new(TestApp::spawn().await);
    let t = app.token("ci", &[Scope::Ingest]).await;
    for round in 0..3 {
        let key = format!("ci-run-{round}");
        let log = format!("round {round}\n{OOM}");
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (app, t, key, log) = (app.clone(), t.clone(), key.clone(), log.clone());
                tokio::spawn(async move {
                    app.upload(&t, &[("log", Some("a.log"), log.as_bytes())], Some(&key))
                        .await
                })
            })
            .collect();
        let mut ids = Vec::new();
        for task in tasks {
            let res = task.await.unwrap();
            assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
            ids.push(res.json()["id"].as_i64().unwrap());
        }
        ids.dedup();
        assert_eq!(ids.len(), 1, "one report per key: {ids:?}");
    }
    assert_eq!(app.count("reports").await, 3);
    assert_eq!(app.count("idempotency_keys").await, 3);
}

#[tokio::test]
async fn a_json_body_that_names_a_key_twice_is_refused_and_nothing_is_stored() {
    let app = TestApp::spawn().await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let before = app.count("tokens").await;
    // serde_json alone would keep the last `scopes` (admin) while a reader of the first saw read.
    let req = axum::http::Request::post("/api/v1/tokens")
        .header("authorization", format!("Bearer {admin}"))
        .header("content-type", "application/json")
        .body(axum::body::Body::from(
            r#"{"name":"ci","scopes":["read"],"scopes":["admin"]}"#,
        ))
        .expect("request");
    let res = app.send(req).await;
    assert_eq!(res.status, StatusCode::BAD_REQUEST, "{}", res.body);
    assert_eq!(res.error_code(), "bad_json");
    assert!(res.body.contains("more than once"), "{}", res.body);
    assert_eq!(app.count("tokens").await, before);
}
