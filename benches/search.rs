//! The search benchmark (issue 18 item 1: p95 < 50 ms over 1,000,000 stored reports): seeds a
//! dedicated database set-based (`benches/search_seed.sql`: reports, groups, fixes and search
//! documents shaped like the upload pipeline's), then times a mix of realistic searches
//! through `app::search::search`, the function the API and the portal call: common words, rare
//! words (commits, job URLs, custom kernels), file names, functions, words only in log bodies,
//! misspellings, filters and later pages. Prints p50/p95/p99 per kind of query and overall.
//!
//! Run: `cargo bench --bench search`. Settings (environment):
//! - `BENCH_REPORTS` (default 1,000,000): reports to seed;
//! - `BENCH_ROUNDS` (default 5): timed rounds over the mix, after one untimed warm-up round;
//! - `BENCH_SEARCH_DATA` (default `<target>/tmp/search-bench`): the embedded cluster's data
//!   root, kept between runs: a database already seeded with `BENCH_REPORTS` reports is reused
//!   (seconds), another size is reseeded; delete the directory to start over;
//! - `DATABASE_URL`: use that (dedicated, empty or bench-seeded) database instead.

use std::time::Instant;

use anyhow::{Context, bail};
use gpu_triage::app::search::{SearchRequest, search};
use gpu_triage::storage::search::Total;
use gpu_triage::storage::{self, DataLocation, Db};

const SEED_SQL: &str = include_str!("search_seed.sql");
const GROUPS: i32 = 4000;
const BATCH: i64 = 50_000;

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace(['_', ','], "").parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() -> anyhow::Result<()> {
    let reports = env_num("BENCH_REPORTS", 1_000_000) as i64;
    let rounds = env_num("BENCH_ROUNDS", 5);
    let location = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => DataLocation::Url(url),
        _ => DataLocation::Embedded(
            std::env::var_os("BENCH_SEARCH_DATA")
                .map(Into::into)
                .unwrap_or_else(|| {
                    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("search-bench")
                }),
        ),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(run(location, reports, rounds))
}

async fn run(location: DataLocation, reports: i64, rounds: u64) -> anyhow::Result<()> {
    let opened = storage::open(&location, 4).await?;
    println!("database: {}", opened.description);
    let db = opened.db.clone();
    let embedded = matches!(location, DataLocation::Embedded(_));
    ensure_seeded(&db, reports, embedded).await?;
    let size: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
        .fetch_one(db.pool())
        .await?;
    println!(
        "database size: {:.2} GiB ({} reports)",
        size as f64 / f64::from(1u32 << 30),
        reports
    );
    let mix = query_mix(&db).await?;
    let mut all: Vec<f64> = Vec::new();
    let mut by_kind: Vec<(&str, Vec<f64>)> = Vec::new();
    for round in 0..=rounds {
        for (kind, request) in &mix {
            let t = Instant::now();
            let found = search(&db, request).await?;
            let ms = t.elapsed().as_secs_f64() * 1e3;
            if round == 0 {
                // The warm-up round shows what each query finds.
                let first = found.hits.first().map(|h| h.tier.as_str()).unwrap_or("-");
                let total = match found.total {
                    Total::Exact(n) => n.to_string(),
                    Total::AtLeast(n) => format!("{n}+"),
                };
                let shown = found
                    .corrected
                    .as_deref()
                    .map(|c| format!(" -> {c:?}"))
                    .unwrap_or_default();
                println!(
                    "  {kind:<11} {:<58} {total:>6} hits, first in {first:<10} {ms:7.1} ms{shown}",
                    describe(request)
                );
                continue;
            }
            all.push(ms);
            match by_kind.iter_mut().find(|(k, _)| k == kind) {
                Some((_, v)) => v.push(ms),
                None => by_kind.push((kind, vec![ms])),
            }
        }
    }
    println!(
        "\n{:<11} {:>7} {:>9} {:>9} {:>9} {:>9}",
        "kind", "queries", "p50 ms", "p95 ms", "p99 ms", "max ms"
    );
    for (kind, v) in by_kind
        .iter_mut()
        .chain(std::iter::once(&mut ("overall", all)))
    {
        v.sort_by(|a, b| a.total_cmp(b));
        println!(
            "{kind:<11} {:>7} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
            v.len(),
            percentile(v, 0.5),
            percentile(v, 0.95),
            percentile(v, 0.99),
            v.last().copied().unwrap_or(0.0)
        );
        if *kind == "overall" {
            let p95 = percentile(v, 0.95);
            println!(
                "target p95 < 50 ms: {}",
                if p95 < 50.0 { "PASS" } else { "FAIL" }
            );
        }
    }
    Ok(())
}

fn describe(r: &SearchRequest) -> String {
    let mut s = format!("{:?}", r.q);
    for (name, value) in [("category", &r.category), ("project", &r.project)] {
        if let Some(v) = value {
            s.push_str(&format!(" {name}={v}"));
        }
    }
    if let Some(p) = r.page {
        s.push_str(&format!(" page={p}"));
    }
    s
}

/// Seeds the database unless it already holds exactly `reports` bench reports.
async fn ensure_seeded(db: &Db, reports: i64, embedded: bool) -> anyhow::Result<()> {
    let seeded: Option<i64> = if exists(db, "bench_seed.meta").await? {
        sqlx::query_scalar("SELECT max(reports) FROM bench_seed.meta")
            .fetch_one(db.pool())
            .await?
    } else {
        None
    };
    // A database seeded by an older build whose migrations changed since is seeded again.
    if seeded == Some(reports) && db.migrate().await.is_ok() {
        println!("reusing the database seeded with {reports} reports");
        return Ok(());
    }
    let stored: Option<i64> = if exists(db, "public.reports").await? {
        Some(
            sqlx::query_scalar("SELECT count(*) FROM reports")
                .fetch_one(db.pool())
                .await?,
        )
    } else {
        None
    };
    if stored.unwrap_or(0) > 0 || seeded.is_some() {
        if !embedded && seeded.is_none() {
            bail!(
                "DATABASE_URL holds {} reports not seeded by this bench: point it at an empty database",
                stored.unwrap_or(0)
            );
        }
        println!("dropping the database seeded with another size or schema");
        sqlx::raw_sql(
            "DROP SCHEMA IF EXISTS bench_seed CASCADE; DROP SCHEMA public CASCADE; \
             CREATE SCHEMA public;",
        )
        .execute(db.pool())
        .await?;
    }
    let t = Instant::now();
    db.migrate().await?;
    sqlx::raw_sql(SEED_SQL).execute(db.pool()).await?;
    // Loading first and indexing after is several times faster than maintaining the indexes
    // row by row; they are rebuilt from their own definitions.
    let indexes: Vec<(String, String)> = sqlx::query_as(
        "SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index \
         WHERE indrelid IN ('reports'::regclass, 'report_search'::regclass) \
           AND NOT indisprimary AND NOT indisunique \
         ORDER BY pg_relation_size(indexrelid) DESC, indexrelid",
    )
    .fetch_all(db.pool())
    .await?;
    for (name, _) in &indexes {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP INDEX {name}")))
            .execute(db.pool())
            .await?;
    }
    sqlx::query("SELECT bench_seed.seed_groups($1)")
        .bind(GROUPS)
        .execute(db.pool())
        .await?;
    // Two connections, one batch of ids each at a time.
    let batches: Vec<(i64, i64)> = (0..(reports + BATCH - 1) / BATCH)
        .map(|b| (b * BATCH + 1, ((b + 1) * BATCH).min(reports)))
        .collect();
    let workers: Vec<_> = (0..2)
        .map(|w| {
            let db = db.clone();
            let mine: Vec<(i64, i64)> = batches.iter().copied().skip(w).step_by(2).collect();
            tokio::spawn(async move {
                for (lo, hi) in mine {
                    sqlx::query("SELECT bench_seed.seed_reports($1, $2, $3)")
                        .bind(lo)
                        .bind(hi)
                        .bind(GROUPS)
                        .execute(db.pool())
                        .await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for w in workers {
        w.await??;
    }
    println!(
        "reports and documents stored in {:.0} s",
        t.elapsed().as_secs_f64()
    );
    sqlx::query("SELECT bench_seed.seed_rest($1)")
        .bind(reports)
        .execute(db.pool())
        .await?;
    sqlx::raw_sql(
        "SELECT setval('reports_id_seq', (SELECT max(id) FROM reports)); \
         SELECT setval('fixes_id_seq', (SELECT coalesce(max(id), 1) FROM fixes));",
    )
    .execute(db.pool())
    .await?;
    // The largest indexes first, on two connections.
    let queue = std::sync::Arc::new(std::sync::Mutex::new(indexes));
    let builders: Vec<_> = (0..2)
        .map(|_| {
            let db = db.clone();
            let queue = queue.clone();
            tokio::spawn(async move {
                let mut conn = db.pool().acquire().await?;
                sqlx::query("SET maintenance_work_mem = '1GB'")
                    .execute(&mut *conn)
                    .await?;
                loop {
                    let next = match queue.lock() {
                        Ok(mut q) if !q.is_empty() => Some(q.remove(0)),
                        _ => None,
                    };
                    let Some((_, def)) = next else {
                        break;
                    };
                    sqlx::raw_sql(sqlx::AssertSqlSafe(def))
                        .execute(&mut *conn)
                        .await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for b in builders {
        b.await??;
    }
    sqlx::raw_sql("VACUUM ANALYZE")
        .execute(db.pool())
        .await
        .context("vacuum")?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE bench_seed.meta (reports int8); INSERT INTO bench_seed.meta VALUES ({reports})"
    )))
    .execute(db.pool())
    .await?;
    println!(
        "seeded {reports} reports in {:.0} s (indexes and VACUUM ANALYZE included)",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Whether the table `name` exists.
async fn exists(db: &Db, name: &str) -> anyhow::Result<bool> {
    Ok(sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
        .bind(name)
        .fetch_one(db.pool())
        .await?)
}

fn req(q: &str) -> SearchRequest {
    SearchRequest {
        q: q.to_owned(),
        ..SearchRequest::default()
    }
}

/// The queries timed, by kind. Rare values are read from the seeded data.
async fn query_mix(db: &Db) -> anyhow::Result<Vec<(&'static str, SearchRequest)>> {
    let samples: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT commit_sha, job_url, project FROM reports \
         WHERE id IN (SELECT max(id) * k / 7 FROM reports, generate_series(2, 6) k GROUP BY k) \
         ORDER BY id",
    )
    .fetch_all(db.pool())
    .await?;
    let kernels: Vec<String> = sqlx::query_scalar(
        "SELECT substring(names FROM 'fused_[a-z]+_kernel') FROM report_search \
         WHERE report_id IN (SELECT max(report_id) * k / 9 FROM report_search, \
                             generate_series(1, 8) k GROUP BY k) \
           AND names LIKE '%fused\\_%'",
    )
    .fetch_all(db.pool())
    .await?;
    let branch: Option<String> = sqlx::query_scalar(
        "SELECT branch FROM reports WHERE branch LIKE 'exp/%' ORDER BY id DESC LIMIT 1 OFFSET 5000",
    )
    .fetch_optional(db.pool())
    .await?;
    if samples.len() < 3 {
        bail!("too few reports seeded to sample from");
    }
    let mut mix: Vec<(&str, SearchRequest)> = Vec::new();
    for q in [
        "out of memory",
        "illegal memory access",
        "cuda error",
        "device-side assert triggered",
        "RuntimeError",
        "NCCL timeout",
        "shapes cannot be multiplied",
        "CUDA_LAUNCH_BLOCKING",
    ] {
        mix.push(("common", req(q)));
    }
    mix.push(("rare", req(&samples[0].0)));
    mix.push(("rare", req(&samples[1].0[..7])));
    mix.push(("rare", req(&samples[2].1)));
    for k in kernels.iter().take(3) {
        mix.push(("rare", req(k)));
    }
    if let Some(b) = &branch {
        mix.push(("rare", req(b)));
    }
    for q in [
        "train.py",
        "models/resnet.py",
        "focal.py:123",
        "attention.py",
        "data/collate.py",
        "CUDACachingAllocator.cpp",
    ] {
        mix.push(("file", req(q)));
    }
    for q in [
        "loss.item",
        "train_one_epoch",
        "self.emb",
        "_call_impl",
        "optimizer.step",
        "scaler.scale",
    ] {
        mix.push(("function", req(q)));
    }
    for q in [
        "resnet50",
        "wandb",
        "world_size",
        "bert-base-uncased",
        "H100",
        "grad_norm",
    ] {
        mix.push(("log body", req(q)));
    }
    for q in [
        "ilegal memory acess",
        "out of memroy",
        "segmentaton fault",
        "watchdog timout",
        "devcie-side assert",
        "cuda driver verison",
    ] {
        mix.push(("misspelled", req(q)));
    }
    let filtered = |q: &str, category: Option<&str>, project: Option<&str>| SearchRequest {
        q: q.to_owned(),
        category: category.map(str::to_owned),
        project: project.map(str::to_owned),
        ..SearchRequest::default()
    };
    let project = samples[3].2.to_uppercase();
    for r in [
        filtered("memory", Some("out_of_memory"), None),
        filtered("error", None, Some(&project)),
        filtered("train.py", Some("nccl_error"), None),
        filtered("cuda error", Some("ILLEGAL_MEMORY_ACCESS"), None),
        filtered("out of memory", None, Some(&samples[4].2)),
        filtered("loss.item", Some("shape_mismatch"), Some(&project)),
    ] {
        mix.push(("filtered", r));
    }
    let paged = |q: &str, page: u32, per_page: u32| SearchRequest {
        q: q.to_owned(),
        page: Some(page),
        per_page: Some(per_page),
        ..SearchRequest::default()
    };
    for r in [
        paged("out of memory", 3, 20),
        paged("train.py", 2, 20),
        paged("cuda error", 5, 20),
        paged("resnet50", 10, 20),
        paged("illegal memory access", 2, 50),
        paged("nccl", 4, 25),
    ] {
        mix.push(("later page", r));
    }
    Ok(mix)
}
