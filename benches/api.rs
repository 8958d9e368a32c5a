//! The API benchmark (issue targets, DESIGN.md section 9), run against the real `serve` binary
//! on its embedded PostgreSQL, or on a database of its own created on the `DATABASE_URL` server
//! (and dropped at the end):
//! 1. uploads (`POST /api/v1/reports`, ~`BENCH_LOG_KB` KB real-looking logs, default 50) from
//!    `BENCH_CLIENTS` keep-alive connections, new and recurring failures apart: first
//!    `BENCH_NEW` (default 2,000) distinct failures never seen before, into the empty database
//!    (each one makes a group and looks up similar groups), then for `BENCH_SECS` seconds
//!    unique logs of four failures already seen. Each prints req/s, p50/p99, status classes,
//!    and the rate of its first and last `BENCH_WINDOW` (default 500) answers with their
//!    ratio: an upload must not get slower as groups accumulate (issue 42: target last >= 80%
//!    of first). DESIGN.md's targets: >= 1,500 req/s recurring, >= 1,000 new, p99 < 50 ms,
//!    zero 5xx;
//! 2. search latency over HTTP with `BENCH_SEED` reports seeded through the storage layer
//!    (default 100,000; target p95 < 50 ms);
//! 3. one 100 MB upload, streamed, with the server's peak RSS growth (target <= 128 MiB);
//! 4. a 128 MiB report viewed by 16 signed-in clients at once (root-cause page and pages
//!    anywhere in the log, plus 4 raw downloads alongside): page p50/p99 (target < 300 ms) and
//!    the server's peak RSS growth (target <= 256 MiB);
//! 5. 128 slow uploads on one token (each stalled after its first bytes) while 16 clients of
//!    another token classify: their p99 (target < 1 s) and status classes (target: all 200).
//!
//! 1b. (`uploads-grown`) the same two upload runs after `BENCH_GROUPS` (default 100,000) more
//!    distinct failures, each its own group, were stored through the storage layer.
//!
//! `BENCH_SECTIONS` picks sections (`uploads,uploads-grown,search,big,views,flood`, default
//! all). With `GPU_TRIAGE_LOG_STORE` (and the `AWS_*` variables) set, the server keeps logs in
//! that object store, so the same runs measure uploads with the store.
//! Run: `cargo bench --bench api` (e.g. `BENCH_SECS=5 BENCH_SEED=20000 cargo bench --bench api`,
//! or `BENCH_SECTIONS=uploads cargo bench --bench api` for the uploads alone).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

#[path = "common/mod.rs"]
mod common;
use common::{Conn, create_token, fresh_database, percentile, rss_kib, start_server};

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A training log of about `kb` KB (loss lines, ANSI colours, timestamps; `n` makes its bytes
/// unique), ending in `failure`.
fn training_log(n: u64, kb: usize, failure: &str) -> Vec<u8> {
    let mut s = String::with_capacity(kb * 1024 + 4096);
    let mut i = 0;
    while s.len() < kb.saturating_sub(1) * 1024 {
        s.push_str(&format!(
            "2026-07-30T03:36:{:02}.{:07}Z \x1b[32mINFO\x1b[0m step {i} loss={:.4} lr=3.0e-4 grad_norm=1.{i:03}\n",
            i % 60,
            n,
            1.0 / (i + 1) as f64
        ));
        i += 1;
    }
    s.push_str(failure);
    s.push_str(&format!("run id {n}\n"));
    s.into_bytes()
}

/// A log of one of four failures that recur: every `n` has its own bytes, not its own failure.
fn recurring_log(n: u64, kb: usize) -> Vec<u8> {
    let tails = [
        "RuntimeError: CUDA error: an illegal memory access was encountered\n",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.06 GiB is free.\n",
        "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1231: indexSelectSmallIndex: block: [3,0,0], thread: [1,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\nRuntimeError: CUDA error: device-side assert triggered\n",
        "RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x768 and 1152x1152)\n",
    ];
    training_log(n, kb, tails[(n % 4) as usize])
}

/// `n` in letters (`a`, `b`, ..., `ba`, ...): numbers are normalized out of fingerprints, so a
/// failure made distinct by a number would not be a new one.
fn letters(mut n: u64) -> String {
    let mut w = Vec::new();
    loop {
        w.push(b'a' + (n % 26) as u8);
        n /= 26;
        if n == 0 {
            break;
        }
    }
    w.reverse();
    String::from_utf8_lossy(&w).into_owned()
}

/// A log of a failure no other `n` has (its own fingerprint, so its own group), raised in the
/// user's code, worded like real ones so that similar groups exist.
fn new_failure_log(n: u64, kb: usize) -> Vec<u8> {
    let w = letters(n);
    let error = match n % 4 {
        0 => format!("KeyError: 'layer_{w}'"),
        1 => format!("ValueError: unknown layer kind conv_{w}"),
        2 => format!("AssertionError: block {w} is not registered in the model"),
        _ => format!(
            "RuntimeError: Error(s) in loading state_dict for Net: Missing key(s) in state_dict: \"enc_{w}.weight\""
        ),
    };
    let failure = format!(
        "Traceback (most recent call last):\n  File \"/srv/jobs/vision/train.py\", line 88, in <module>\n    main()\n  File \"/srv/jobs/vision/blocks/{w}.py\", line 14, in forward_{w}\n    x = self.op(x)\n{error}\n"
    );
    training_log(n, kb, &failure)
}

fn multipart_head(token: &str, len: usize, boundary: &str) -> String {
    format!(
        "POST /api/v1/reports HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {token}\r\nContent-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {len}\r\n\r\n"
    )
}

/// When an upload run ends.
#[derive(Clone, Copy)]
enum Until {
    /// After this many uploads in all.
    Count(u64),
    /// At this moment.
    Deadline(Instant),
}

/// One upload's answer.
struct Done {
    /// When it came.
    at: Instant,
    /// How long it took, in ms.
    ms: f64,
    /// Its status (0: no answer, the connection failed).
    status: u16,
    /// The report's group, from the answer.
    group: Option<u64>,
}

/// Uploads the logs `log(n)` for n = 1, 2, ... from `clients` keep-alive connections until
/// `until`, each answer with its time.
fn upload_run(
    port: u16,
    token: &str,
    clients: u64,
    until: Until,
    log: impl Fn(u64) -> Vec<u8> + Send + Sync + 'static,
) -> anyhow::Result<Vec<Done>> {
    let next = std::sync::Arc::new(AtomicU64::new(1));
    let log = std::sync::Arc::new(log);
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let (token, next, log) = (token.to_owned(), next.clone(), log.clone());
            std::thread::spawn(move || -> anyhow::Result<Vec<Done>> {
                let mut done = Vec::new();
                let mut conn = Conn::open(port)?;
                let boundary = "bench-boundary-1234567890";
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    match until {
                        Until::Count(count) if n > count => break,
                        Until::Deadline(stop) if Instant::now() >= stop => break,
                        _ => {}
                    }
                    let mut body = format!("--{boundary}\r\nContent-Disposition: form-data; name=\"log\"; filename=\"train.log\"\r\nContent-Type: text/plain\r\n\r\n").into_bytes();
                    body.extend_from_slice(&log(n));
                    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
                    let head = multipart_head(&token, body.len(), boundary);
                    let t = Instant::now();
                    match conn.request(&head, &mut &body[..]) {
                        Ok((status, answer)) => done.push(Done {
                            at: Instant::now(),
                            ms: t.elapsed().as_secs_f64() * 1e3,
                            status,
                            group: group_of(&answer),
                        }),
                        Err(_) => {
                            done.push(Done {
                                at: Instant::now(),
                                ms: t.elapsed().as_secs_f64() * 1e3,
                                status: 0,
                                group: None,
                            });
                            conn = Conn::open(port)?;
                        }
                    }
                }
                Ok(done)
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in threads {
        all.extend(
            t.join()
                .map_err(|_| anyhow::anyhow!("client thread panicked"))??,
        );
    }
    all.sort_by_key(|d| d.at);
    Ok(all)
}

/// The `"group_id"` of an upload's JSON answer.
fn group_of(answer: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(answer).ok()?;
    let rest = text.split("\"group_id\":").nth(1)?;
    rest.trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// What a run came to, as printed.
struct Summary {
    rps: f64,
    p99: f64,
    server_errors: usize,
    /// The rate of the last `window` answers over that of the first `window`.
    ratio: f64,
    /// Distinct groups in the answers.
    groups: usize,
    /// How many answers the first and the last window held.
    window: usize,
}

/// Prints a run (answers sorted by time, begun at `start`): its rate, latencies and status
/// classes overall, then over its first and last `window` answers (a quarter of them each when
/// there are fewer than 4 windows).
fn summarize(start: Instant, done: Vec<Done>, window: usize) -> Summary {
    let n = done.len();
    let secs = done
        .last()
        .map_or(0.0, |d| d.at.duration_since(start).as_secs_f64());
    let rps = n as f64 / secs.max(1e-9);
    let mut classes = [0usize; 6];
    for d in &done {
        classes[(d.status / 100) as usize % 6] += 1;
    }
    let latencies = |part: &[Done]| {
        let mut l: Vec<f64> = part.iter().map(|d| d.ms).collect();
        l.sort_by(|a, b| a.total_cmp(b));
        (percentile(&l, 0.5), percentile(&l, 0.99))
    };
    let (p50, p99) = latencies(&done);
    println!(
        "requests {n} in {secs:.1} s  req/s {rps:.0}  p50 {p50:.1} ms  p99 {p99:.1} ms  \
         2xx {}  4xx {}  5xx {}  errors {}",
        classes[2], classes[4], classes[5], classes[0]
    );
    let w = window.min(n / 4).max(1);
    let mut ratio = 0.0;
    if n >= 2 * w && n > 1 {
        // The first window from the start, the last from the answer before it.
        let first_secs = done[w - 1].at.duration_since(start).as_secs_f64();
        let last_secs = done[n - 1]
            .at
            .duration_since(done[n - w - 1].at)
            .as_secs_f64();
        let (first, last) = (w as f64 / first_secs, w as f64 / last_secs);
        let (f50, f99) = latencies(&done[..w]);
        let (l50, l99) = latencies(&done[n - w..]);
        ratio = last / first;
        println!(
            "first {w}: {first:.0} req/s (p50 {f50:.1} ms, p99 {f99:.1} ms)  \
             last {w}: {last:.0} req/s (p50 {l50:.1} ms, p99 {l99:.1} ms)  last/first {ratio:.2}"
        );
    }
    let groups: std::collections::HashSet<u64> = done.iter().filter_map(|d| d.group).collect();
    Summary {
        rps,
        p99,
        server_errors: classes[5],
        ratio,
        groups: groups.len(),
        window: w,
    }
}

fn pass(ok: bool) -> &'static str {
    if ok { "PASS" } else { "FAIL" }
}

/// Runs `f` to completion on a runtime of its own.
fn rt_block<T>(f: impl std::future::Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::runtime::Runtime::new()?.block_on(f)
}

/// Whether `groups` had statistics by the end of a run: how many times it was analyzed, and
/// how many rows PostgreSQL counts in it.
async fn table_stats(data: &Path, url: Option<&str>) -> anyhow::Result<String> {
    use gpu_triage::storage::{self, DataLocation};
    let location = match url {
        Some(u) => DataLocation::Url(u.to_owned()),
        None => DataLocation::Embedded(data.to_path_buf()),
    };
    let opened = storage::open(&location, 1).await?;
    // Read here rather than through `storage`: it describes the run, not the application.
    let (analyzed, rows): (i64, i64) = sqlx::query_as(
        "SELECT analyze_count + autoanalyze_count, n_live_tup \
         FROM pg_stat_user_tables WHERE relname = 'groups'",
    )
    .fetch_one(opened.db.pool())
    .await?;
    Ok(format!("analyzed {analyzed} times ({rows} rows counted)"))
}

/// The first `n` of the groups [`seed_groups`] makes, after every `n` an upload run uses.
const SEEDED_FROM: u64 = 1_000_000;

/// The upload section's settings: two runs, new failures then recurring ones.
struct UploadRuns {
    port: u16,
    pid: u32,
    token: String,
    clients: u64,
    new_failures: u64,
    secs: u64,
    window: usize,
    kb: usize,
}

impl UploadRuns {
    /// `new_failures` distinct failures never seen before (numbered from `first + 1`, so a
    /// second call does not repeat the first's), then `secs` of the four recurring ones, each
    /// with its rate, latencies, first/last windows, the server's RSS before and after and
    /// whether `groups` was analyzed meanwhile.
    fn run(&self, first: u64, data: &Path, env_db: Option<&str>) -> anyhow::Result<()> {
        let UploadRuns {
            port,
            pid,
            clients,
            new_failures,
            secs,
            window,
            kb,
            ..
        } = *self;
        let token = &self.token;
        println!(
            "\n== POST /api/v1/reports, {new_failures} distinct new failures, ~{kb} KB logs, \
             {clients} keep-alive clients"
        );
        let rss = rss_kib(pid, "VmRSS:");
        let start = Instant::now();
        let run = upload_run(port, token, clients, Until::Count(new_failures), move |n| {
            new_failure_log(first + n, kb)
        })?;
        let new = summarize(start, run, window);
        let stats = rt_block(table_stats(data, env_db))?;
        println!(
            "groups made: {} of {new_failures} uploads; statistics on groups during the run: {stats}; \
             server RSS {} -> {} MiB",
            new.groups,
            rss / 1024,
            rss_kib(pid, "VmRSS:") / 1024
        );
        println!(
            "targets: last {w} >= 80% as fast as the first {w}: {}; \
             >= 1,000 req/s, p99 < 50 ms, zero 5xx: {}",
            pass(new.ratio >= 0.8),
            pass(new.rps >= 1000.0 && new.p99 < 50.0 && new.server_errors == 0),
            w = new.window,
        );

        println!(
            "\n== POST /api/v1/reports, recurring failures (4 known, each log unique), ~{kb} KB \
             logs, {clients} keep-alive clients, {secs} s"
        );
        let rss = rss_kib(pid, "VmRSS:");
        let start = Instant::now();
        let stop = start + Duration::from_secs(secs);
        let run = upload_run(port, token, clients, Until::Deadline(stop), move |n| {
            recurring_log(first + n, kb)
        })?;
        let recurring = summarize(start, run, window);
        println!(
            "server RSS {} -> {} MiB",
            rss / 1024,
            rss_kib(pid, "VmRSS:") / 1024
        );
        println!(
            "targets: last {w} >= 80% as fast as the first {w}: {}; \
             >= 1,500 req/s, p99 < 50 ms, zero 5xx: {}",
            pass(recurring.ratio >= 0.8),
            pass(recurring.rps >= 1500.0 && recurring.p99 < 50.0 && recurring.server_errors == 0),
            w = recurring.window,
        );
        Ok(())
    }
}

/// Stores `n` distinct failures, each its own group (new-failure logs of about 1 KB numbered
/// from [`SEEDED_FROM`]), through the storage layer as an upload would.
async fn seed_groups(data: &Path, url: Option<&str>, n: u64) -> anyhow::Result<()> {
    seed(data, url, n, |i| {
        (
            new_failure_log(SEEDED_FROM + i, 1),
            gpu_triage::app::upload::Meta::default(),
        )
    })
    .await
}

fn main() -> anyhow::Result<()> {
    let secs = env_num("BENCH_SECS", 10);
    let clients = env_num("BENCH_CLIENTS", 16);
    let seed = env_num("BENCH_SEED", 100_000);
    let new_failures = env_num("BENCH_NEW", 2_000);
    let window = env_num("BENCH_WINDOW", 500) as usize;
    let kb = env_num("BENCH_LOG_KB", 50) as usize;
    let sections = std::env::var("BENCH_SECTIONS").unwrap_or_default();
    let wants = |name: &str| sections.is_empty() || sections.split(',').any(|s| s.trim() == name);
    let dir = tempfile::tempdir()?;
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )?;
    let data = dir.path().join("data");
    let fresh = fresh_database()?;
    let env_db = fresh.as_ref().map(|f| f.url.clone());
    let token = create_token(&data, "admin", "bench")?;
    let (server, port) = start_server(&data)?;
    let pid = server.0.id();
    println!(
        "server pid {pid} on port {port}, database: {}",
        if env_db.is_some() {
            "a new one on the DATABASE_URL server"
        } else {
            "embedded"
        }
    );

    // 1. Uploads: new failures into the empty database, then recurring ones.
    let runs = UploadRuns {
        port,
        pid,
        token: token.clone(),
        clients,
        new_failures,
        secs,
        window,
        kb,
    };
    if wants("uploads") {
        println!("\n=== uploads into an empty database");
        runs.run(0, &data, env_db.as_deref())?;
    }
    // 1b. The same runs once the knowledge base holds `BENCH_GROUPS` groups.
    if wants("uploads-grown") {
        let groups = env_num("BENCH_GROUPS", 100_000);
        println!("\n=== uploads into a database holding {groups} more groups");
        let t = Instant::now();
        rt_block(seed_groups(&data, env_db.as_deref(), groups))?;
        println!(
            "seeded {groups} groups in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        runs.run(SEEDED_FROM + groups, &data, env_db.as_deref())?;
    }

    if wants("search") {
        // 2. Search with many stored reports, seeded through the storage layer.
        println!("\n== search with {seed} stored reports (seeded through the storage layer)");
        let rt = tokio::runtime::Runtime::new()?;
        let t = Instant::now();
        rt.block_on(seed_reports(&data, env_db.as_deref(), seed))?;
        println!("seeded in {:.1} s", t.elapsed().as_secs_f64());
        let queries = [
            "illegal memory access",
            "indexSelectSmallIndex",
            "out of memory",
            "mat1 and mat2",
            "Indexing.cu",
            "device-side assert",
            "cuda error",
            "step 42",
            "srcSelectDimSize",
            "nonexistentterm",
        ];
        let mut conn = Conn::open(port)?;
        let mut slat = Vec::new();
        let mut per_query: Vec<Vec<f64>> = vec![Vec::new(); queries.len()];
        for round in 0..20 {
            for (qi, q) in queries.iter().enumerate() {
                let path = format!(
                    "/api/v1/search?q={}&page={}",
                    q.replace(' ', "%20"),
                    round % 3 + 1
                );
                let head = format!(
                    "GET {path} HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer {token}\r\n\r\n"
                );
                let t = Instant::now();
                let (status, _) = conn.request(&head, &mut std::io::empty())?;
                let ms = t.elapsed().as_secs_f64() * 1e3;
                slat.push(ms);
                per_query[qi].push(ms);
                if status != 200 {
                    bail!("search {path} answered {status}");
                }
            }
        }
        // Which words cost what: a slow percentile is one query's doing, or every query's.
        for (q, times) in queries.iter().zip(&mut per_query) {
            times.sort_by(|a, b| a.total_cmp(b));
            println!(
                "  {q:<24} p50 {:6.1} ms  max {:6.1} ms",
                percentile(times, 0.5),
                times.last().copied().unwrap_or(0.0)
            );
        }
        slat.sort_by(|a, b| a.total_cmp(b));
        let p95 = percentile(&slat, 0.95);
        println!(
            "queries {}  p50 {:.1} ms  p95 {p95:.1} ms  max {:.1} ms",
            slat.len(),
            percentile(&slat, 0.5),
            slat.last().copied().unwrap_or(0.0)
        );
        println!(
            "target p95 < 50 ms: {}",
            if p95 < 50.0 { "PASS" } else { "FAIL" }
        );

        // The rule list counts each rule's hits over every stored report.
        let mut rlat = Vec::new();
        for _ in 0..10 {
            let head = format!(
                "GET /api/v1/rules HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer {token}\r\n\r\n"
            );
            let t = Instant::now();
            let (status, _) = conn.request(&head, &mut std::io::empty())?;
            rlat.push(t.elapsed().as_secs_f64() * 1e3);
            if status != 200 {
                bail!("GET /api/v1/rules answered {status}");
            }
        }
        rlat.sort_by(|a, b| a.total_cmp(b));
        println!(
            "GET /api/v1/rules (hit counts over {seed} reports): p50 {:.1} ms  max {:.1} ms",
            percentile(&rlat, 0.5),
            rlat.last().copied().unwrap_or(0.0)
        );
    }

    if wants("big") {
        // 3. One 100 MB upload, streamed.
        println!("\n== one 100 MB upload");
        let big = dir.path().join("big.log");
        {
            let mut f = std::io::BufWriter::new(std::fs::File::create(&big)?);
            let mut n = 0u64;
            while f.get_ref().metadata()?.len() < 100_000_000 {
                for _ in 0..1000 {
                    n += 1;
                    writeln!(
                        f,
                        "2026-07-30T03:36:29.{n:07}Z step {n} loss=0.{n} epoch 3 |##########| tokens/s 12345"
                    )?;
                }
                f.flush()?;
            }
            writeln!(
                f,
                "RuntimeError: CUDA error: an illegal memory access was encountered"
            )?;
        }
        let size = big.metadata()?.len();
        let boundary = "bench-big-boundary";
        let pre = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"log\"; filename=\"big.log\"\r\nContent-Type: text/plain\r\n\r\n"
        );
        let post = format!("\r\n--{boundary}--\r\n");
        let len = pre.len() + size as usize + post.len();
        let before = rss_kib(pid, "VmRSS:");
        let hwm_before = rss_kib(pid, "VmHWM:");
        let mut body = pre
            .as_bytes()
            .chain(std::fs::File::open(&big)?)
            .chain(post.as_bytes());
        let t = Instant::now();
        let (status, resp) =
            Conn::open(port)?.request(&multipart_head(&token, len, boundary), &mut body)?;
        let hwm_after = rss_kib(pid, "VmHWM:");
        let growth = hwm_after.saturating_sub(before.max(hwm_before.min(before)));
        println!(
            "status {status} in {:.1} s; server RSS before {} MiB, peak {} MiB (growth {} MiB); {}",
            t.elapsed().as_secs_f64(),
            before / 1024,
            hwm_after / 1024,
            growth / 1024,
            String::from_utf8_lossy(&resp)
                .chars()
                .take(120)
                .collect::<String>()
        );
        println!(
            "target <= 128 MiB RSS growth: {}",
            if status == 201 && growth <= 128 * 1024 {
                "PASS"
            } else {
                "FAIL"
            }
        );
    }
    if wants("views") {
        views(port, pid, &token, dir.path())?;
    }
    if wants("flood") {
        let hog = create_token(&data, "ingest", "hog")?;
        slow_upload_flood(port, &hog, &token, secs)?;
    }
    drop(server);
    drop(fresh);
    Ok(())
}

/// Section 4: concurrent views of one large report.
fn views(port: u16, pid: u32, token: &str, dir: &Path) -> anyhow::Result<()> {
    println!("\n== 16 concurrent views of a 128 MiB report");
    let big = dir.join("big128.log");
    let lines = {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&big)?);
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
        n
    };
    let size = big.metadata()?.len();
    let boundary = "bench-view-boundary";
    let pre = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"log\"; filename=\"big128.log\"\r\nContent-Type: text/plain\r\n\r\n"
    );
    let post = format!("\r\n--{boundary}--\r\n");
    let len = pre.len() + size as usize + post.len();
    let mut body = pre
        .as_bytes()
        .chain(std::fs::File::open(&big)?)
        .chain(post.as_bytes());
    let (status, resp) =
        Conn::open(port)?.request(&multipart_head(token, len, boundary), &mut body)?;
    if status != 201 {
        bail!(
            "the 128 MiB upload answered {status}: {}",
            String::from_utf8_lossy(&resp)
        );
    }
    let text = String::from_utf8_lossy(&resp);
    let id: u64 = text
        .split("\"id\":")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|v| v.parse().ok())
        .context("report id")?;
    // Sign in as a browser would.
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
    let cookie = answer
        .lines()
        .find_map(|l| {
            l.strip_prefix("set-cookie: ")
                .or_else(|| l.strip_prefix("Set-Cookie: "))
        })
        .and_then(|c| c.split(';').next())
        .context("session cookie")?
        .to_owned();
    // Peak RSS from here on (Linux: writing 5 to clear_refs resets VmHWM).
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")?;
    let before = rss_kib(pid, "VmRSS:");
    let rounds = 8u64;
    let viewers: Vec<_> = (0..16u64)
        .map(|c| {
            let cookie = cookie.clone();
            std::thread::spawn(move || -> anyhow::Result<Vec<f64>> {
                let mut conn = Conn::open(port)?;
                let mut lat = Vec::new();
                for r in 0..rounds {
                    // The root-cause page, then pages spread over the whole log.
                    let path = if r == 0 {
                        format!("/reports/{id}")
                    } else {
                        format!(
                            "/reports/{id}?start={}",
                            (c * 7919 + r * 104_729) * 97 % lines + 1
                        )
                    };
                    let head =
                        format!("GET {path} HTTP/1.1\r\nHost: b\r\nCookie: {cookie}\r\n\r\n");
                    let t = Instant::now();
                    let (status, _) = conn.request(&head, &mut std::io::empty())?;
                    lat.push(t.elapsed().as_secs_f64() * 1e3);
                    if status != 200 {
                        bail!("{path} answered {status}");
                    }
                }
                Ok(lat)
            })
        })
        .collect();
    let downloads: Vec<_> = (0..4)
        .map(|_| {
            let cookie = cookie.clone();
            std::thread::spawn(move || -> anyhow::Result<u64> {
                let mut conn = Conn::open(port)?;
                conn.0.write_all(
                    format!("GET /reports/{id}/raw HTTP/1.1\r\nHost: b\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n")
                        .as_bytes(),
                )?;
                Ok(std::io::copy(&mut conn.0, &mut std::io::sink())?)
            })
        })
        .collect();
    let mut lat = Vec::new();
    for v in viewers {
        lat.extend(v.join().map_err(|_| anyhow::anyhow!("viewer panicked"))??);
    }
    let mut downloaded = Vec::new();
    for d in downloads {
        downloaded.push(
            d.join()
                .map_err(|_| anyhow::anyhow!("download panicked"))??,
        );
    }
    let peak = rss_kib(pid, "VmHWM:");
    let growth = peak.saturating_sub(before);
    lat.sort_by(|a, b| a.total_cmp(b));
    let p99 = percentile(&lat, 0.99);
    println!(
        "{} lines, {size} bytes; {} page views: p50 {:.1} ms  p99 {p99:.1} ms  max {:.1} ms; \
         raw downloads {downloaded:?} bytes each (with headers)",
        lines,
        lat.len(),
        percentile(&lat, 0.5),
        lat.last().copied().unwrap_or(0.0)
    );
    println!(
        "server RSS before {} MiB, peak {} MiB (growth {} MiB)",
        before / 1024,
        peak / 1024,
        growth / 1024
    );
    println!(
        "target page < 300 ms (p99): {}; target <= 256 MiB RSS growth: {}",
        if p99 < 300.0 { "PASS" } else { "FAIL" },
        if growth <= 256 * 1024 { "PASS" } else { "FAIL" }
    );
    Ok(())
}

/// Section 5: one token's slow uploads must not starve other tokens.
fn slow_upload_flood(port: u16, hog: &str, other: &str, secs: u64) -> anyhow::Result<()> {
    println!("\n== 128 slow uploads on one token, 16 clients of another token for {secs} s");
    let boundary = "bench-slow-boundary";
    let part = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"log\"; filename=\"slow.log\"\r\n\r\n"
    );
    let mut stalled = Vec::new();
    for _ in 0..128 {
        let mut s = TcpStream::connect(("127.0.0.1", port))?;
        s.write_all(multipart_head(hog, 1 << 20, boundary).as_bytes())?;
        s.write_all(part.as_bytes())?;
        stalled.push(s);
    }
    // Those beyond the token's share are answered at once; the rest hold their slots.
    let mut refused = 0;
    for s in &mut stalled {
        s.set_read_timeout(Some(Duration::from_millis(500)))?;
        let mut buf = [0u8; 64];
        if let Ok(n) = s.read(&mut buf)
            && buf[..n].starts_with(b"HTTP/1.1 429")
        {
            refused += 1;
        }
    }
    println!("slow uploads answered 429 at once: {refused} of 128 (the rest hold their slots)");
    let stop = Instant::now() + Duration::from_secs(secs);
    let clients: Vec<_> = (0..16)
        .map(|_| {
            let other = other.to_owned();
            std::thread::spawn(move || -> anyhow::Result<(Vec<f64>, u64)> {
                let mut conn = Conn::open(port)?;
                let body = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n";
                let head = format!(
                    "POST /api/v1/classify HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer {other}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                let (mut lat, mut not_ok) = (Vec::new(), 0);
                while Instant::now() < stop {
                    let t = Instant::now();
                    let (status, _) = conn.request(&head, &mut &body[..])?;
                    lat.push(t.elapsed().as_secs_f64() * 1e3);
                    not_ok += u64::from(status != 200);
                }
                Ok((lat, not_ok))
            })
        })
        .collect();
    let (mut lat, mut not_ok) = (Vec::new(), 0);
    for c in clients {
        let (l, n) = c.join().map_err(|_| anyhow::anyhow!("client panicked"))??;
        lat.extend(l);
        not_ok += n;
    }
    drop(stalled);
    lat.sort_by(|a, b| a.total_cmp(b));
    let p99 = percentile(&lat, 0.99);
    println!(
        "other token: {} requests, {not_ok} not 200; p50 {:.1} ms  p99 {p99:.1} ms  max {:.1} ms",
        lat.len(),
        percentile(&lat, 0.5),
        lat.last().copied().unwrap_or(0.0)
    );
    println!(
        "target p99 < 1 s and all served: {}",
        if p99 < 1000.0 && not_ok == 0 && !lat.is_empty() {
            "PASS"
        } else {
            "FAIL"
        }
    );
    Ok(())
}

/// Inserts `n` reports through the storage layer (the same code path as uploads, minus HTTP).
async fn seed_reports(data: &Path, url: Option<&str>, n: u64) -> anyhow::Result<()> {
    seed(data, url, n, |i| {
        let log = format!(
            "step {i}\nFile \"/srv/proj{}/train.py\", line {}, in forward\n{}\n",
            i % 50,
            i % 400,
            match i % 5 {
                0 => format!("RuntimeError: CUDA error: an illegal memory access was encountered (op kernel_{})", i % 97),
                1 => format!("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {}.00 MiB.", i % 900),
                2 => "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1231: indexSelectSmallIndex: block: [3,0,0], thread: [1,0,0] Assertion `srcIndex < srcSelectDimSize` failed.".to_owned(),
                3 => format!("RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x{} and 1152x1152)", i % 2000),
                _ => format!("ValueError: bad batch {i}"),
            }
        );
        let meta = gpu_triage::app::upload::Meta {
            project: format!("proj{}", i % 50),
            ..Default::default()
        };
        (log.into_bytes(), meta)
    })
    .await
}

/// Stores the logs `make(i)` for i in 0..n through the storage layer (prepared and inserted as
/// an upload would be, minus HTTP), from 8 connections.
async fn seed(
    data: &Path,
    url: Option<&str>,
    n: u64,
    make: fn(u64) -> (Vec<u8>, gpu_triage::app::upload::Meta),
) -> anyhow::Result<()> {
    use gpu_triage::storage::{self, DataLocation};
    let location = match url {
        Some(u) => DataLocation::Url(u.to_owned()),
        None => DataLocation::Embedded(data.to_path_buf()),
    };
    let opened = storage::open(&location, 8).await?;
    let db = opened.db.clone();
    let rules = std::sync::Arc::new(gpu_triage::rules::Ruleset::builtin()?);
    let workers: Vec<_> = (0..8u64)
        .map(|w| {
            let (db, rules) = (db.clone(), rules.clone());
            tokio::spawn(async move {
                let mut i = w;
                while i < n {
                    let (log, meta) = make(i);
                    let prepared =
                        gpu_triage::app::upload::prepare(&rules, &log[..], "seed.log", meta, None)?;
                    let mut tx = db.pool().begin().await?;
                    gpu_triage::storage::reports::insert_report(&mut tx, &prepared, None).await?;
                    tx.commit().await?;
                    i += 8;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for w in workers {
        w.await??;
    }
    Ok(())
}
