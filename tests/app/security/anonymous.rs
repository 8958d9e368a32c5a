//! SECURITY.md item 18 (issue 28 item 1): clients without a token cannot lock token holders
//! out. The real `serve` binary on real sockets: anonymous connections that send a request's
//! headers and a first piece of its body, then stall, from one loopback address and from
//! several, while a token holder and a signed-in portal user keep being served.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::support::{create_token, database_url, fresh_db, spawn_server_with};

/// What the server allows by default (docs/src/security.md).
const PER_ADDRESS: usize = 8;
const ANONYMOUS_TOTAL: usize = 32;

/// A connection from `from` (any 127.0.0.0/8 address) to the server.
async fn connect_from(from: Ipv4Addr, port: u16) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::from((from, 0)))
        .expect("bind a loopback address");
    socket
        .connect(SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .expect("connect")
}

/// Sends `head` and `first` (the start of a body that declares more) and leaves the rest unsent.
async fn stall(from: Ipv4Addr, port: u16, head: &str, first: &[u8]) -> TcpStream {
    let mut stream = connect_from(from, port).await;
    stream.write_all(head.as_bytes()).await.expect("head");
    stream.write_all(first).await.expect("first bytes");
    stream
}

/// The status of the response on `stream`, if one arrives within `within`.
async fn status_within(stream: &mut TcpStream, within: Duration) -> Option<u16> {
    let mut buf = Vec::new();
    let read = tokio::time::timeout(within, async {
        let mut chunk = [0u8; 1024];
        while !buf.windows(2).any(|w| w == b"\r\n") {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    read.ok()?;
    let line = String::from_utf8_lossy(&buf);
    line.split_whitespace().nth(1)?.parse().ok()
}

/// One request on a fresh connection with a 1 s budget for the whole answer: its status and
/// body, or `None` when it did not answer in time.
async fn request_within_a_second(port: u16, raw: String) -> Option<(u16, String)> {
    tokio::time::timeout(Duration::from_secs(1), async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        stream.write_all(raw.as_bytes()).await.ok()?;
        let mut out = Vec::new();
        stream.read_to_end(&mut out).await.ok()?;
        let text = String::from_utf8_lossy(&out).into_owned();
        let status = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
        Some((status, body))
    })
    .await
    .ok()
    .flatten()
}

/// How long a stalled request goes unanswered before it counts as held: refusals come at
/// once, held requests not before the sign-in deadline.
const HELD: Duration = Duration::from_secs(5);

/// Each connection with the status it was answered with, read to the end of the connection
/// (the server closes it after a refusal), or `None` when it was not answered within `within`.
async fn answers(streams: Vec<TcpStream>, within: Duration) -> Vec<(TcpStream, Option<u16>)> {
    let tasks: Vec<_> = streams
        .into_iter()
        .map(|mut stream| {
            tokio::spawn(async move {
                let mut out = Vec::new();
                let read = tokio::time::timeout(within, stream.read_to_end(&mut out)).await;
                let status = match read {
                    Ok(Ok(_)) => String::from_utf8_lossy(&out)
                        .split_whitespace()
                        .nth(1)
                        .and_then(|s| s.parse().ok()),
                    _ => None,
                };
                (stream, status)
            })
        })
        .collect();
    let mut out = Vec::new();
    for task in tasks {
        out.push(task.await.expect("reader task"));
    }
    out
}

/// The connections still waiting (held) and the statuses of the others, sorted.
fn split_held(answered: Vec<(TcpStream, Option<u16>)>) -> (Vec<TcpStream>, Vec<u16>) {
    let mut held = Vec::new();
    let mut refused = Vec::new();
    for (stream, status) in answered {
        match status {
            None => held.push(stream),
            Some(s) => refused.push(s),
        }
    }
    refused.sort_unstable();
    (held, refused)
}

fn login_head(extra: &str, declared: usize) -> String {
    format!(
        "POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}Content-Type: \
         application/x-www-form-urlencoded\r\nContent-Length: {declared}\r\n\r\n"
    )
}

/// The portal session cookie of `token`, signed in before the attack starts.
async fn sign_in(port: u16, token: &str) -> String {
    let body = format!("token={token}");
    let raw = format!("{}{body}", login_head("Connection: close\r\n", body.len()));
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    stream.write_all(raw.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    stream.read_to_end(&mut out).await.expect("read");
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 303"), "signed in: {text}");
    text.lines()
        .find_map(|l| l.strip_prefix("set-cookie: gt_session="))
        .and_then(|v| v.split(';').next())
        .expect("session cookie")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stalled_anonymous_bodies_from_one_or_many_addresses_never_delay_token_holders() {
    let (_db, options) = fresh_db().await;
    let url = database_url(options.get_database().expect("database name"));
    let token = create_token(&url, "ingest,read", "reader");
    // The sign-in deadline is longer than this test needs to set up and probe (default 5 s),
    // so the stalled sign-ins are still held when the token holder is served.
    let (_server, port) = spawn_server_with(&url, &["--sign-in-deadline-secs", "20"]);
    let cookie = sign_in(port, &token).await;

    // Every other route that takes a body answers an anonymous request before reading it
    // (401/403, or 303 to the sign-in page).
    for (method, path) in [
        ("POST", "/reports"),
        ("POST", "/logout"),
        ("POST", "/groups/1/fixes"),
        ("POST", "/rules"),
        ("POST", "/webhooks"),
        ("POST", "/retention"),
        ("POST", "/api/v1/reports"),
        ("POST", "/api/v1/classify"),
        ("POST", "/api/v1/jobs/claim"),
        ("POST", "/api/v1/groups/1/fixes"),
        ("PATCH", "/api/v1/groups/1"),
    ] {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: \
             application/json\r\nContent-Length: 100000\r\n\r\n"
        );
        let mut stream = stall(Ipv4Addr::new(127, 0, 1, 1), port, &head, b"{").await;
        let status = status_within(&mut stream, Duration::from_secs(10)).await;
        assert!(
            matches!(status, Some(303 | 401 | 403)),
            "{method} {path} answered {status:?} without its body"
        );
    }

    // The attack: 130 sign-ins from one address that declare a megabyte, send
    // `token=` and stall. A megabyte is no sign-in form: refused at once (and the connection
    // closed), nothing held.
    let mut oversized = Vec::new();
    for _ in 0..130 {
        let head = login_head("", 1_000_000);
        oversized.push(stall(Ipv4Addr::LOCALHOST, port, &head, b"token=").await);
    }
    for (_, status) in answers(oversized, HELD).await {
        assert_eq!(
            status,
            Some(413),
            "a sign-in body over the cap is refused unread"
        );
    }

    // The same with bodies of a plausible size, half of them with a forged bearer token and
    // session cookie (which must not buy a token holder's slot): the address's share is held,
    // the rest refused at once with 429.
    let forged = format!(
        "Authorization: Bearer gtr_{}\r\nCookie: gt_session=gtr_{}\r\n",
        "0".repeat(64),
        "1".repeat(64)
    );
    let mut attack = Vec::new();
    for i in 0..130 {
        let head = login_head(if i % 2 == 0 { &forged } else { "" }, 200);
        attack.push(stall(Ipv4Addr::LOCALHOST, port, &head, b"token=").await);
    }
    let (mut held, refused) = split_held(answers(attack, HELD).await);
    assert_eq!(held.len(), PER_ADDRESS, "refused: {refused:?}");
    assert_eq!(refused, vec![429; 130 - PER_ADDRESS]);

    // And as many as each address may hold from five more loopback addresses, more than the
    // anonymous pool has in all: past the total, 503 at once.
    let mut more = Vec::new();
    for last in 2..=6u8 {
        for _ in 0..PER_ADDRESS {
            let from = Ipv4Addr::new(127, 0, 0, last);
            more.push(stall(from, port, &login_head("", 200), b"t").await);
        }
    }
    let (also_held, refused) = split_held(answers(more, HELD).await);
    held.extend(also_held);
    assert_eq!(held.len(), ANONYMOUS_TOTAL, "refused: {refused:?}");
    assert_eq!(
        refused,
        vec![503; 5 * PER_ADDRESS + PER_ADDRESS - ANONYMOUS_TOTAL]
    );

    // Meanwhile the token holder and the signed-in user are served, each answer within 1 s.
    for i in 0..10 {
        let body = "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB";
        let classify = format!(
            "POST /api/v1/classify HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \
             {token}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let (status, text) = request_within_a_second(port, classify)
            .await
            .unwrap_or_else(|| panic!("classify {i} did not answer within 1 s"));
        assert_eq!(status, 200, "{text}");
        assert!(text.contains("out_of_memory"), "{text}");
        let search = format!(
            "GET /api/v1/search?q=cuda HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \
             {token}\r\nConnection: close\r\n\r\n"
        );
        let (status, text) = request_within_a_second(port, search)
            .await
            .unwrap_or_else(|| panic!("search {i} did not answer within 1 s"));
        assert_eq!(status, 200, "{text}");
        let page = format!(
            "GET /groups HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: gt_session={cookie}\r\n\
             Connection: close\r\n\r\n"
        );
        let (status, text) = request_within_a_second(port, page)
            .await
            .unwrap_or_else(|| panic!("page {i} did not answer within 1 s"));
        assert_eq!(status, 200, "{text}");
    }

    // The anonymous slots were held all along: 127.0.0.1 is still at its share.
    let mut probe = stall(Ipv4Addr::LOCALHOST, port, &login_head("", 200), b"t").await;
    assert_eq!(
        status_within(&mut probe, Duration::from_secs(10)).await,
        Some(429)
    );
    // A stalled sign-in gives its slot back at the sign-in deadline, before the body-rate
    // window would: 408, and the address may sign in again.
    let first = held.swap_remove(0);
    let answered = answers(vec![first], Duration::from_secs(90)).await;
    assert_eq!(answered[0].1, Some(408));
}
