//! What the HTTP benchmarks share: the spawned server that is killed on drop, a keep-alive
//! HTTP/1.1 connection, percentiles and a process's memory from `/proc`.

#![allow(dead_code)] // Each benchmark uses its own part of this.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use std::time::Instant;

use anyhow::{Context, bail};

/// The `serve` process of a benchmark, killed when the benchmark ends.
pub struct Server(pub Child);
impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

/// A keep-alive HTTP/1.1 connection: one request at a time.
pub struct Conn(pub TcpStream);

impl Conn {
    pub fn open(port: u16) -> anyhow::Result<Conn> {
        let s = TcpStream::connect(("127.0.0.1", port))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(300)))?;
        Ok(Conn(s))
    }

    /// Sends head + body, returns (status, response body).
    pub fn request(&mut self, head: &str, body: &mut dyn Read) -> anyhow::Result<(u16, Vec<u8>)> {
        self.0.write_all(head.as_bytes())?;
        std::io::copy(body, &mut self.0)?;
        let mut raw = Vec::new();
        let mut buf = [0u8; 16384];
        let head_end = loop {
            let n = self.0.read(&mut buf)?;
            if n == 0 {
                bail!("connection closed");
            }
            raw.extend_from_slice(&buf[..n]);
            if let Some(p) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
        };
        let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
        let status: u16 = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .context("status")?;
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while raw.len() < head_end + len {
            let n = self.0.read(&mut buf)?;
            if n == 0 {
                bail!("connection closed mid-body");
            }
            raw.extend_from_slice(&buf[..n]);
        }
        Ok((status, raw[head_end..head_end + len].to_vec()))
    }
}

/// The `p` quantile (0-1) of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// A `/proc/PID/status` field in KiB (`VmRSS:`, `VmHWM:`).
pub fn rss_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(field)).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// A `gpu-triage` command on the data directory `data`, quiet, with no per-token rate limit
/// (one token drives every client of a benchmark; the limit is for shared servers).
pub fn command(data: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpu-triage"));
    c.args(args)
        .env("GPU_TRIAGE_DATA", data)
        .env("GPU_TRIAGE_LOG", "warn")
        .env("GPU_TRIAGE_RATE_LIMIT", "0");
    c
}

/// A new token of `scope` named `name`, as printed once by `token create`.
pub fn create_token(data: &Path, scope: &str, name: &str) -> anyhow::Result<String> {
    let out = command(data, &["token", "create", "--scope", scope, "--name", name]).output()?;
    if !out.status.success() {
        bail!(
            "token create failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .find(|w| w.starts_with("gtr_"))
        .context("token printed")?
        .to_owned())
}

/// `serve` on a free loopback port, once `/readyz` answers 200 (within 60 s).
pub fn start_server(data: &Path) -> anyhow::Result<(Server, u16)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let server = Server(
        command(data, &["serve", "--listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .spawn()?,
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while !Conn::open(port)
        .and_then(|mut c| {
            c.request(
                "GET /readyz HTTP/1.1\r\nHost: b\r\n\r\n",
                &mut std::io::empty(),
            )
        })
        .is_ok_and(|(s, _)| s == 200)
    {
        if Instant::now() > deadline {
            bail!("server not ready");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok((server, port))
}
