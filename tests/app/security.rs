//! SECURITY.md as an attack suite (issue 7): every item driven from outside, each case checking
//! the observable answer AND that nothing stored changed (a dump of every table before and
//! after). In-process cases use `TestApp`; the transport-level ones (oversize and chunked
//! bodies, a client that hangs up, 200 concurrent uploads, a PostgreSQL restart, workers killed
//! or cut off) run the real `serve` and `worker` binaries over real sockets.

use std::io::{Read, Write};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use gpu_triage::storage::Db;
use scraper::{Html, Selector};

use crate::support::{KillOnDrop, TestResponse, binary, free_port, wait_for_status};

mod anonymous;
mod capacity;
mod faults;
mod hardening;
mod identity;
mod input;
mod queue;
mod secrets;
mod sql;
mod web;

/// Every table of the schema as text, rows sorted, plus each report's log decompressed: what
/// "nothing stored changed" and "the secret is nowhere" are checked against.
pub async fn dump(db: &Db) -> String {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY 1",
    )
    .fetch_all(db.pool())
    .await
    .unwrap();
    assert!(tables.len() >= 8, "{tables:?}");
    let mut out = String::new();
    for table in tables {
        let rows: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), '') FROM \"{table}\" t"
        )))
        .fetch_one(db.pool())
        .await
        .unwrap();
        out.push_str(&format!("== {table}\n{rows}\n"));
    }
    let logs: Vec<(i64, Vec<u8>)> = sqlx::query_as(
        "SELECT report_id, string_agg(data, ''::bytea ORDER BY seq) FROM report_log_chunks \
         GROUP BY report_id ORDER BY report_id",
    )
    .fetch_all(db.pool())
    .await
    .unwrap();
    for (id, gz) in logs {
        let mut text = String::new();
        flate2::read::MultiGzDecoder::new(&gz[..])
            .read_to_string(&mut text)
            .unwrap();
        out.push_str(&format!("== log of report {id}\n{text}\n"));
    }
    out
}

pub use crate::browse::{Browser, attr, page, sign_in, texts};

/// A rendered page that can run nothing but the portal's own script files: no other script, no
/// object, embed, iframe or base element, no `on*` attribute, no `javascript:`/`data:`/`vbscript:` URL in any attribute, no `style`
/// attribute; and the CSP and nosniff headers set.
pub fn assert_inert(res: &TestResponse, what: &str) {
    assert_eq!(res.status, StatusCode::OK, "{what}: {}", res.body);
    let csp = res.headers["content-security-policy"].to_str().unwrap();
    for part in [
        "default-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(part), "{what}: CSP {csp}");
    }
    assert_eq!(res.headers["x-content-type-options"], "nosniff", "{what}");
    let doc = Html::parse_document(&res.body);
    let all = Selector::parse("*").unwrap();
    for el in doc.select(&all) {
        let name = el.value().name();
        // The portal's own scripts: same-origin files (the CSP allows nothing else), empty.
        let own_script = name == "script"
            && matches!(
                el.value().attr("src"),
                Some("/static/report.js" | "/static/groups.js")
            )
            && el.text().all(|t| t.trim().is_empty())
            && el.value().attrs().all(|(a, _)| a == "src" || a == "defer");
        if own_script {
            continue;
        }
        assert!(
            !matches!(
                name,
                "script" | "object" | "embed" | "iframe" | "base" | "img" | "svg:script"
            ),
            "{what}: a <{name}> element"
        );
        for (attr, value) in el.value().attrs() {
            let lower = attr.to_ascii_lowercase();
            assert!(!lower.starts_with("on"), "{what}: {attr}= on <{name}>");
            assert_ne!(lower, "style", "{what}: style= on <{name}>");
            let v: String = value
                .chars()
                .filter(|c| !c.is_whitespace() && !c.is_control())
                .collect::<String>()
                .to_ascii_lowercase();
            for scheme in ["javascript:", "data:", "vbscript:"] {
                assert!(
                    !v.starts_with(scheme),
                    "{what}: {attr}={value:?} on <{name}>"
                );
            }
        }
    }
}

/// The real `serve` binary with extra flags and environment, ready on the returned port. Its
/// temporary files go to `tmp` (so a test can see every spool file it opens).
pub struct Served {
    pub guard: KillOnDrop,
    pub port: u16,
}

impl Served {
    pub fn start(url: &str, tmp: &Path, args: &[&str], env: &[(&str, &str)]) -> Served {
        let port = free_port();
        let child = binary()
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(args)
            .env("DATABASE_URL", url)
            .env("TMPDIR", tmp)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn serve");
        let guard = KillOnDrop(child);
        assert!(wait_for_status(port, "/readyz", 200, 60), "server ready");
        Served { guard, port }
    }

    pub fn pid(&self) -> u32 {
        self.guard.0.id()
    }

    /// The server's open file descriptors that point into `dir` (its spool files: anonymous
    /// temporary files show as `dir/#inode (deleted)` or `dir/.tmpXXXX (deleted)`).
    pub fn open_files_in(&self, dir: &Path) -> Vec<String> {
        let dir = std::fs::canonicalize(dir).unwrap();
        let mut found = Vec::new();
        let Ok(entries) = std::fs::read_dir(format!("/proc/{}/fd", self.pid())) else {
            return found;
        };
        for entry in entries.flatten() {
            if let Ok(target) = std::fs::read_link(entry.path())
                && target.starts_with(&dir)
            {
                found.push(target.display().to_string());
            }
        }
        found
    }
}

/// A multipart body with one `log` part (and `extra` parts before it).
pub fn multipart_log(boundary: &str, log: &[u8]) -> Vec<u8> {
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"log\"; filename=\"a.log\"\r\nContent-Type: text/plain\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(log);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    body
}

/// One raw HTTP/1.1 exchange: writes `head` then `body` (from another thread, so an early answer
/// is read even while the body is refused), returns the status, headers and body text.
pub fn raw_exchange(port: u16, head: String, body: Vec<u8>) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let _ = writer.write_all(head.as_bytes());
        for piece in body.chunks(64 << 10) {
            if writer.write_all(piece).is_err() {
                break;
            }
        }
    });
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 << 10];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
        // One response is all we want: stop once its body is complete.
        if let Some(text) = complete_response(&raw) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
            let _ = sender.join();
            let status = text.split(' ').nth(1).unwrap().parse().unwrap();
            return (status, text);
        }
    }
    let _ = sender.join();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP response: {text:?}"));
    (status, text)
}

/// The response text once its headers and `Content-Length` bytes of body have arrived.
fn complete_response(raw: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(usize::MAX);
    (body.len() >= len).then(|| text.into_owned())
}

/// Polls `check` until it holds or `secs` pass; whether it held.
pub fn eventually(secs: u64, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if check() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Rows in `table` of the database at `url`, from a test thread.
pub fn count_at(rt: &tokio::runtime::Runtime, db: &Db, table: &str) -> i64 {
    rt.block_on(async {
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
            .fetch_one(db.pool())
            .await
            .unwrap()
    })
}
