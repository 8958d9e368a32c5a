//! Which workers have been in touch lately: each worker's last contact (a claim poll, a
//! heartbeat, a result) and what its last claim said about itself, so the report page can say
//! whether anyone will pick a queued job up. Writes are throttled in the statements (a row is
//! rewritten only when older than the caller's interval, or when a claim describes the worker
//! differently; otherwise the statement only reads, without even a row lock), because idle
//! workers poll all the time. The interval and the window a page
//! asks about are policy of `app::reproduce`.

use sqlx::PgExecutor;

use super::DbError;
use crate::api_types::Sandbox;
use crate::time::Timestamp;

/// What kind of contact a worker made, as `workers.last_contact` stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contact {
    /// A claim poll (`POST /api/v1/jobs/claim`).
    Claim,
    /// A lease extension.
    Heartbeat,
    /// A posted result or error.
    Result,
}

impl Contact {
    /// The column's spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Contact::Claim => "claim",
            Contact::Heartbeat => "heartbeat",
            Contact::Result => "result",
        }
    }
}

/// What a claim says about the worker making it.
#[derive(Clone, Debug, PartialEq)]
pub struct SelfReport<'a> {
    pub name: &'a str,
    /// The GPU description (a JSON object), `None` without a GPU.
    pub gpu: Option<&'a serde_json::Value>,
    pub no_gpu: bool,
    pub sandbox: &'a Sandbox,
}

/// Records a claim poll of worker `w.name`: inserts it, or refreshes its row when the last
/// recorded contact is older than `throttle_secs` or it now describes itself differently.
/// One statement: the caller needs no transaction.
pub async fn record_claim(
    ex: impl PgExecutor<'_>,
    w: &SelfReport<'_>,
    throttle_secs: u32,
) -> Result<(), DbError> {
    sqlx::query!(
        "WITH refreshed AS ( \
             UPDATE workers SET last_seen_at = now(), last_contact = 'claim', gpu = $2, \
                 no_gpu = $3, sandbox = $4 \
             WHERE name = $1 AND (last_seen_at < now() - make_interval(secs => $5) \
                 OR gpu IS DISTINCT FROM $2 OR no_gpu <> $3 OR sandbox <> $4)) \
         INSERT INTO workers (name, last_contact, gpu, no_gpu, sandbox) \
         SELECT $1, 'claim', $2, $3, $4 WHERE NOT EXISTS (SELECT 1 FROM workers WHERE name = $1) \
         ON CONFLICT (name) DO NOTHING",
        w.name,
        w.gpu,
        w.no_gpu,
        w.sandbox.as_str(),
        f64::from(throttle_secs)
    )
    .execute(ex)
    .await?;
    Ok(())
}

/// Records a heartbeat or result of the worker named `name` (known from its job): refreshes its
/// row when the last recorded contact is older than `throttle_secs`; a worker first heard of
/// this way (a server upgraded while it ran a job) gets a row without a self-description.
pub async fn record_contact(
    ex: impl PgExecutor<'_>,
    name: &str,
    contact: Contact,
    throttle_secs: u32,
) -> Result<(), DbError> {
    sqlx::query!(
        "WITH refreshed AS ( \
             UPDATE workers SET last_seen_at = now(), last_contact = $2 \
             WHERE name = $1 AND last_seen_at < now() - make_interval(secs => $3)) \
         INSERT INTO workers (name, last_contact) SELECT $1, $2 \
         WHERE $1 <> '' AND NOT EXISTS (SELECT 1 FROM workers WHERE name = $1) \
         ON CONFLICT (name) DO NOTHING",
        name,
        contact.as_str(),
        f64::from(throttle_secs)
    )
    .execute(ex)
    .await?;
    Ok(())
}

/// A worker as the report page lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenWorker {
    pub name: String,
    /// The GPU's name, when its last claim described one.
    pub gpu_name: Option<String>,
    pub no_gpu: bool,
    pub last_seen_at: Timestamp,
}

/// Workers in touch within the last `window_secs`, most recent first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// How many workers were seen in the window.
    pub count: i64,
    /// How many of them can run a job that needs a GPU.
    pub with_gpu: i64,
    /// The most recent `limit` of them.
    pub workers: Vec<SeenWorker>,
}

/// The workers seen within the last `window_secs`: their count (and those with a GPU), and the
/// `limit` most recent.
pub async fn seen_within(
    ex: impl PgExecutor<'_>,
    window_secs: u32,
    limit: i64,
) -> Result<Seen, DbError> {
    let rows = sqlx::query!(
        r#"WITH recent AS (SELECT name, gpu, no_gpu, last_seen_at FROM workers
             WHERE last_seen_at >= now() - make_interval(secs => $1)),
         counts AS (SELECT count(*) AS n,
             count(*) FILTER (WHERE NOT no_gpu AND gpu IS NOT NULL) AS n_gpu FROM recent)
         SELECT c.n AS "n!", c.n_gpu AS "n_gpu!", w.name AS "name?",
             w.gpu ->> 'name' AS "gpu_name?", w.no_gpu AS "no_gpu?",
             w.last_seen_at AS "seen?: Timestamp"
         FROM counts c LEFT JOIN LATERAL (
             SELECT * FROM recent ORDER BY last_seen_at DESC, name LIMIT $2) w ON true"#,
        f64::from(window_secs),
        limit
    )
    .fetch_all(ex)
    .await?;
    let mut seen = Seen {
        count: 0,
        with_gpu: 0,
        workers: Vec::with_capacity(rows.len()),
    };
    for r in rows {
        seen.count = r.n;
        seen.with_gpu = r.n_gpu;
        if let Some(name) = r.name {
            seen.workers.push(SeenWorker {
                name,
                gpu_name: r.gpu_name,
                no_gpu: r.no_gpu.unwrap_or(false),
                // NOT NULL in the table: null only when no worker was joined.
                last_seen_at: r
                    .seen
                    .ok_or_else(|| DbError::Corrupt("worker without a last contact".into()))?,
            });
        }
    }
    Ok(seen)
}

/// Forgets workers not seen for `older_than_secs` (a worker's default name carries its pid, so
/// every restart is a new row); returns how many.
pub async fn forget_stale(ex: impl PgExecutor<'_>, older_than_secs: u32) -> Result<u64, DbError> {
    Ok(sqlx::query!(
        "DELETE FROM workers WHERE last_seen_at < now() - make_interval(secs => $1)",
        f64::from(older_than_secs)
    )
    .execute(ex)
    .await?
    .rows_affected())
}
