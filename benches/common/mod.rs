//! What the HTTP benchmarks share: the spawned server that is killed on drop, a keep-alive
//! HTTP/1.1 connection, percentiles, a process's memory from `/proc`, and a database of its own
//! on the `DATABASE_URL` server (so that a run starts empty and leaves nothing behind).

#![allow(dead_code)] // Each benchmark uses its own part of this.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
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

/// The URL of the database [`fresh_database`] created, once it has.
static FRESH_URL: OnceLock<String> = OnceLock::new();

/// A database created for this run on the `DATABASE_URL` server, dropped with this value unless
/// `BENCH_KEEP_DB` is set (then its name is printed, to read its plans afterwards).
pub struct FreshDatabase {
    admin: sqlx::postgres::PgConnectOptions,
    name: String,
    /// Its URL, for the benchmark's own connections.
    pub url: String,
}

impl Drop for FreshDatabase {
    fn drop(&mut self) {
        use sqlx::Connection;
        if std::env::var_os("BENCH_KEEP_DB").is_some() {
            eprintln!("kept the benchmark database {}", self.name);
            return;
        }
        let drop_it = async {
            let mut conn = sqlx::PgConnection::connect_with(&self.admin).await?;
            let sql = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name);
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&mut conn)
                .await?;
            anyhow::Ok(())
        };
        if let Err(e) = tokio::runtime::Runtime::new()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(drop_it))
        {
            eprintln!("could not drop the benchmark database {}: {e:#}", self.name);
        }
    }
}

/// With `DATABASE_URL` set, creates an empty database on that server for this run, which every
/// [`command`] then uses (a benchmark must not measure, or fill, whatever that URL's database
/// holds); `None` without it (the embedded cluster in the run's own data directory is new).
pub fn fresh_database() -> anyhow::Result<Option<FreshDatabase>> {
    let Some(url) = std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty()) else {
        return Ok(None);
    };
    let admin: sqlx::postgres::PgConnectOptions = url.parse().context("DATABASE_URL")?;
    let name = format!("bench_{}", std::process::id());
    tokio::runtime::Runtime::new()?
        .block_on(gpu_triage::storage::create_database(&admin, &name))?;
    let (base, query) = url.split_once('?').unwrap_or((&url, ""));
    let server = base.rsplit_once('/').map_or(base, |(server, _)| server);
    let fresh = if query.is_empty() {
        format!("{server}/{name}")
    } else {
        format!("{server}/{name}?{query}")
    };
    if FRESH_URL.set(fresh.clone()).is_err() {
        bail!("fresh_database called twice");
    }
    Ok(Some(FreshDatabase {
        admin,
        name,
        url: fresh,
    }))
}

/// A `gpu-triage` command on the data directory `data` (and the [`fresh_database`], if one was
/// made), quiet, with no per-token rate limit (one token drives every client of a benchmark;
/// the limit is for shared servers).
pub fn command(data: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpu-triage"));
    c.args(args)
        .env("GPU_TRIAGE_DATA", data)
        .env("GPU_TRIAGE_LOG", "warn")
        .env("GPU_TRIAGE_RATE_LIMIT", "0");
    if let Some(url) = FRESH_URL.get() {
        c.env("DATABASE_URL", url);
    }
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
