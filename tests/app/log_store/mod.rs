//! Raw logs in an S3-compatible object store (issue 42), against a real SeaweedFS: uploads,
//! page views, finds and raw downloads read from it, retention and the sweeper empty it,
//! `db move-logs` moves logs both ways (`store`); reproduction scripts kept there and moved both
//! ways (`scripts`); the store failing at start, half way through an upload, hanging, or
//! refusing the credentials (`faults`); two `serve` replicas on one PostgreSQL and one store
//! (`replicas`).

mod faults;
pub(crate) mod proxy;
mod replicas;
mod scripts;
mod store;
pub(crate) mod weed;

use std::sync::Arc;
use std::time::Duration;

use gpu_triage::storage::objects::LogObjects;

/// A log of `lines` numbered lines (about 60 bytes each) ending in an out-of-memory error,
/// distinct per `tag`; with `marker`, line `lines / 2` says so.
pub(crate) fn log_text(tag: &str, lines: usize, marker: Option<&str>) -> String {
    let mut log = String::with_capacity(lines * 64);
    for i in 1..=lines {
        if Some(i) == marker.map(|_| lines / 2) {
            log.push_str(&format!("{} at line {i}\n", marker.unwrap_or_default()));
        } else {
            let noise = (i as u64).wrapping_mul(2_654_435_761) % 1_000_003;
            log.push_str(&format!(
                "[{tag}] step {i} loss 0.{noise:06} grad {noise:x} ok\n"
            ));
        }
    }
    log.push_str(&format!(
        "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB in {tag}\n"
    ));
    log
}

/// The object prefixes (`logs/<id>/`) under the store that hold objects (SeaweedFS may keep
/// an emptied directory, which holds nothing).
pub(crate) async fn prefixes(objects: &LogObjects) -> Vec<String> {
    prefixes_under(objects, "logs").await
}

/// The object prefixes under `kind` (`logs`, `scripts`) that hold objects.
pub(crate) async fn prefixes_under(objects: &LogObjects, kind: &str) -> Vec<String> {
    let mut dirs = Vec::new();
    for dir in objects.list_dirs(kind).await.expect("list the store") {
        if !objects.list(&dir).await.expect("list a prefix").is_empty() {
            dirs.push(dir);
        }
    }
    dirs.sort();
    dirs
}

/// A multipart upload body for the API: (content type, body).
pub(crate) fn multipart(log: &[u8], script: Option<&str>) -> (String, Vec<u8>) {
    let boundary = "gpu-triage-store-test-3b9c";
    let mut body = Vec::new();
    body.extend_from_slice(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"log\"; filename=\"job.log\"\r\nContent-Type: text/plain\r\n\r\n").as_bytes());
    body.extend_from_slice(log);
    body.extend_from_slice(b"\r\n");
    if let Some(script) = script {
        body.extend_from_slice(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"script\"; filename=\"repro.py\"\r\nContent-Type: text/plain\r\n\r\n{script}\r\n").as_bytes());
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// An HTTP client for the real binary that reports every status (never an error for 4xx/5xx).
pub(crate) fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

/// `POST /api/v1/reports` to the binary on `port`: (status, Retry-After, body), or `None`
/// when the connection failed (the server is gone).
pub(crate) fn post_upload(
    agent: &ureq::Agent,
    port: u16,
    token: &str,
    log: &[u8],
    key: Option<&str>,
    script: Option<&str>,
) -> Option<(u16, Option<String>, serde_json::Value)> {
    let (content_type, body) = multipart(log, script);
    let mut req = agent
        .post(format!("http://127.0.0.1:{port}/api/v1/reports"))
        .header("Authorization", format!("Bearer {token}"))
        .header("Content-Type", content_type);
    if let Some(key) = key {
        req = req.header("Idempotency-Key", key);
    }
    let mut res = req.send(&body[..]).ok()?;
    let retry = res
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = res.body_mut().read_to_string().ok()?;
    Some((
        res.status().as_u16(),
        retry,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
    ))
}

/// The test's store handle, shared by the app and the test's own checks.
pub(crate) fn shared(objects: LogObjects) -> Arc<LogObjects> {
    Arc::new(objects)
}

/// A count from `sql` on the test application's database.
pub(crate) async fn count(app: &crate::support::TestApp, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(app.db.pool())
        .await
        .unwrap()
}

/// `gpu-triage db move-logs` with the test store's settings.
pub(crate) fn move_logs(
    url: &str,
    to: &str,
    env: &[(String, String)],
    store: &str,
) -> std::process::Output {
    crate::support::binary()
        .args(["db", "move-logs", "--to", to, "--log-store-grace-secs", "0"])
        .args(["--log-store", store, "--log-store-timeout-secs", "5"])
        .env("DATABASE_URL", url)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .expect("run db move-logs")
}

/// One retention pass with these defaults (days; 0 keeps forever).
pub(crate) async fn retention_pass(
    app: &crate::support::TestApp,
    log_days: u32,
    report_days: u32,
) -> gpu_triage::app::retention::PassSummary {
    use gpu_triage::app::retention::{self, RetentionSettings};
    let settings = RetentionSettings {
        defaults: gpu_triage::api_types::retention::Days {
            log_days,
            report_days,
        },
        ..RetentionSettings::default()
    };
    retention::run_pass(&app.db, &settings, retention::now())
        .await
        .expect("a retention pass")
}
