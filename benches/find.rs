//! The find benchmark (issue 28 item 7): a 128 MiB report's log searched with the portal's
//! find (`GET /reports/{id}?grep=TEXT`) by 16 signed-in clients at once, against the real
//! `serve` binary on its embedded PostgreSQL (or `DATABASE_URL`). Three phases, each
//! `BENCH_ROUNDS` requests per client, with the server's peak RSS growth in each:
//! 1. page views all over the log (the yardstick for memory);
//! 2. the same find from every client (a search hit's link followed by many people);
//! 3. a different find on every request: rare words, words on every line, words found nowhere.
//!
//! Target: find p99 < 1 s in phases 2 and 3, and RSS growth no more than the page views'.
//! Run: `cargo bench --bench find` (`BENCH_ROUNDS=8 cargo bench --bench find`).

use std::io::{Read, Write};
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail};

#[path = "common/mod.rs"]
mod common;
use common::{Conn, create_token, percentile, rss_kib, start_server};

const CLIENTS: u64 = 16;

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|c| match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' => (c as char).to_string(),
            _ => format!("%{c:02X}"),
        })
        .collect()
}

/// Writes the 128 MiB log (training steps, one failure in the middle); returns its lines.
fn write_log(path: &Path) -> anyhow::Result<u64> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut n = 0u64;
    while f.get_ref().metadata()?.len() < 127 << 20 {
        for _ in 0..1000 {
            n += 1;
            writeln!(
                f,
                "2026-07-30T03:36:29.{n:07}Z step {n} loss=0.{n} epoch 3 |##########| tokens/s 12345"
            )?;
            if n == 900_000 {
                writeln!(
                    f,
                    "RuntimeError: CUDA error: an illegal memory access was encountered"
                )?;
                n += 1;
            }
        }
        f.flush()?;
    }
    Ok(n)
}

/// Uploads the log; returns the report id.
fn upload(port: u16, token: &str, log: &Path) -> anyhow::Result<u64> {
    let size = log.metadata()?.len();
    let boundary = "bench-find-boundary";
    let pre = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"log\"; filename=\"big128.log\"\r\nContent-Type: text/plain\r\n\r\n"
    );
    let post = format!("\r\n--{boundary}--\r\n");
    let len = pre.len() + size as usize + post.len();
    let head = format!(
        "POST /api/v1/reports HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {token}\r\nContent-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {len}\r\n\r\n"
    );
    let mut body = pre
        .as_bytes()
        .chain(std::fs::File::open(log)?)
        .chain(post.as_bytes());
    let (status, resp) = Conn::open(port)?.request(&head, &mut body)?;
    if status != 201 {
        bail!(
            "the upload answered {status}: {}",
            String::from_utf8_lossy(&resp)
        );
    }
    String::from_utf8_lossy(&resp)
        .split("\"id\":")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|v| v.parse().ok())
        .context("report id")
}

/// Signs in as a browser would; returns the session cookie.
fn sign_in(port: u16, token: &str) -> anyhow::Result<String> {
    let form = format!("token={token}");
    let mut conn = Conn::open(port)?;
    conn.0.write_all(
        format!(
            "POST /login HTTP/1.1\r\nHost: b\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
            form.len()
        )
        .as_bytes(),
    )?;
    let mut answer = String::new();
    conn.0.read_to_string(&mut answer)?;
    Ok(answer
        .lines()
        .find_map(|l| {
            l.strip_prefix("set-cookie: ")
                .or_else(|| l.strip_prefix("Set-Cookie: "))
        })
        .and_then(|c| c.split(';').next())
        .context("session cookie")?
        .to_owned())
}

/// `CLIENTS` clients each GET `rounds` paths (`path(client, round)`) at once; returns the
/// sorted latencies in ms and the server's peak RSS growth in MiB.
fn phase(
    port: u16,
    pid: u32,
    cookie: &str,
    rounds: u64,
    path: impl Fn(u64, u64) -> String + Send + Sync + Clone + 'static,
) -> anyhow::Result<(Vec<f64>, u64)> {
    // Peak RSS from here on (Linux: writing 5 to clear_refs resets VmHWM).
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")?;
    let before = rss_kib(pid, "VmRSS:");
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (cookie, path) = (cookie.to_owned(), path.clone());
            std::thread::spawn(move || -> anyhow::Result<Vec<f64>> {
                let mut conn = Conn::open(port)?;
                let mut lat = Vec::new();
                for r in 0..rounds {
                    let p = path(c, r);
                    let head = format!("GET {p} HTTP/1.1\r\nHost: b\r\nCookie: {cookie}\r\n\r\n");
                    let t = Instant::now();
                    let (status, _) = conn.request(&head, &mut std::io::empty())?;
                    lat.push(t.elapsed().as_secs_f64() * 1e3);
                    if status != 200 {
                        bail!("{p} answered {status}");
                    }
                }
                Ok(lat)
            })
        })
        .collect();
    let mut lat = Vec::new();
    for c in clients {
        lat.extend(c.join().map_err(|_| anyhow::anyhow!("client panicked"))??);
    }
    lat.sort_by(|a, b| a.total_cmp(b));
    let growth = rss_kib(pid, "VmHWM:").saturating_sub(before) / 1024;
    Ok((lat, growth))
}

fn report(name: &str, lat: &[f64], growth: u64) -> f64 {
    let p99 = percentile(lat, 0.99);
    println!(
        "{name}: {} requests, p50 {:.0} ms, p99 {p99:.0} ms, max {:.0} ms; server RSS growth {growth} MiB",
        lat.len(),
        percentile(lat, 0.5),
        lat.last().copied().unwrap_or(0.0)
    );
    p99
}

fn main() -> anyhow::Result<()> {
    let rounds = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4u64);
    let dir = tempfile::tempdir()?;
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )?;
    let data = dir.path().join("data");
    let token = create_token(&data, "admin", "bench")?;
    let (server, port) = start_server(&data)?;
    let pid = server.0.id();
    let log = dir.path().join("big128.log");
    let lines = write_log(&log)?;
    let id = upload(port, &token, &log)?;
    let cookie = sign_in(port, &token)?;
    println!(
        "128 MiB report {id}: {lines} lines, {} bytes; {CLIENTS} clients x {rounds} requests per phase",
        log.metadata()?.len()
    );

    let (lat, page_growth) = phase(port, pid, &cookie, rounds, move |c, r| {
        format!(
            "/reports/{id}?start={}",
            (c * 7919 + r * 104_729) * 97 % lines + 1
        )
    })?;
    report("page views", &lat, page_growth);
    let (lat, same_growth) = phase(port, pid, &cookie, rounds, move |_, _| {
        format!("/reports/{id}?grep={}", urlencode("illegal memory access"))
    })?;
    let same = report("the same find from every client", &lat, same_growth);
    // Every request its own words: a rare one (a step number: a few lines), one on every line,
    // one in the failure only, one found nowhere, in turn.
    let (lat, mixed_growth) = phase(port, pid, &cookie, rounds, move |c, r| {
        let needle = match (c + r) % 4 {
            0 => format!("step {}", 100_000 + c * 1009 + r * 17),
            1 => format!("0{c}{r}z step"),
            2 => format!("TOKENS/S {}", 12345 - (c * rounds + r) % 3),
            _ => format!("memory access {}", ["was", "WAS", "Was"][(r % 3) as usize]),
        };
        format!("/reports/{id}?grep={}", urlencode(&needle))
    })?;
    let mixed = report("a different find on every request", &lat, mixed_growth);
    drop(server);
    let growth = same_growth.max(mixed_growth);
    println!(
        "target find p99 < 1 s: same {}, different {}; target RSS growth <= the page views' ({page_growth} MiB) + 16 MiB: {}",
        if same < 1000.0 { "PASS" } else { "FAIL" },
        if mixed < 1000.0 { "PASS" } else { "FAIL" },
        if growth <= page_growth + 16 {
            "PASS"
        } else {
            "FAIL"
        }
    );
    Ok(())
}
