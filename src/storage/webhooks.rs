//! Webhooks (migration 0019): endpoints, the outbox of deliveries and the attempt log. Rows are
//! written in the caller's transaction (a delivery commits with the change that caused it), due
//! deliveries are claimed with `FOR UPDATE SKIP LOCKED` under a lease (so replicas never post the
//! same row at once and a sender that dies leaves it due again), and a NOTIFY on [`CHANNEL`]
//! wakes the delivery tasks when rows are added.

use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor, Row};

use super::{Db, DbError};
use crate::api_types::webhooks::{
    Attempt, Delivery, DeliveryState, Endpoint, Event, EventKind, Format,
};
use crate::rules::Category;

/// The channel a committed enqueue notifies.
pub const CHANNEL: &str = "gpu_triage_webhooks";

/// An endpoint's fields as written (create, or a whole replacement on update).
#[derive(Clone, Debug)]
pub struct EndpointWrite {
    pub url: String,
    pub events: Vec<EventKind>,
    pub format: Format,
    pub projects: Vec<String>,
    pub categories: Vec<Category>,
    pub description: String,
    pub enabled: bool,
}

const ENDPOINT_COLUMNS: &str = concat!(
    "id, url, events, format, projects, categories, description, enabled, created_by, ",
    "created_at",
    " AS created, ",
    "updated_at",
    " AS updated"
);

fn endpoint_from_row(row: &sqlx::postgres::PgRow) -> Result<Endpoint, DbError> {
    let events: Vec<String> = row.try_get("events")?;
    let categories: Vec<String> = row.try_get("categories")?;
    Ok(Endpoint {
        id: row.try_get("id")?,
        url: row.try_get("url")?,
        events: events
            .iter()
            .map(|e| {
                EventKind::parse(e).ok_or_else(|| DbError::Corrupt(format!("webhook event {e:?}")))
            })
            .collect::<Result<_, _>>()?,
        format: row.try_get("format")?,
        projects: row.try_get("projects")?,
        categories: categories
            .iter()
            .map(|c| c.parse().map_err(DbError::Corrupt))
            .collect::<Result<_, _>>()?,
        description: row.try_get("description")?,
        enabled: row.try_get("enabled")?,
        created_by: row.try_get("created_by")?,
        created_at: row.try_get("created")?,
        updated_at: row.try_get("updated")?,
    })
}

fn names<T: Copy>(items: &[T], name: fn(T) -> &'static str) -> Vec<&'static str> {
    items.iter().map(|i| name(*i)).collect()
}

/// Stores a new endpoint with its secret.
pub async fn insert_endpoint(
    ex: impl PgExecutor<'_>,
    e: &EndpointWrite,
    secret: &str,
    created_by: &str,
) -> Result<Endpoint, DbError> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO webhook_endpoints \
             (url, events, format, projects, categories, description, enabled, secret, created_by) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING {ENDPOINT_COLUMNS}"
    )))
    .bind(&e.url)
    .bind(names(&e.events, EventKind::as_str))
    .bind(e.format)
    .bind(&e.projects)
    .bind(names(&e.categories, Category::as_str))
    .bind(&e.description)
    .bind(e.enabled)
    .bind(secret)
    .bind(created_by)
    .fetch_one(ex)
    .await?;
    endpoint_from_row(&row)
}

/// Replaces an endpoint's fields (and its secret, when given); `None` when it does not exist.
pub async fn update_endpoint(
    ex: impl PgExecutor<'_>,
    id: i64,
    e: &EndpointWrite,
    secret: Option<&str>,
) -> Result<Option<Endpoint>, DbError> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE webhook_endpoints SET url = $2, events = $3, format = $4, projects = $5, \
             categories = $6, description = $7, enabled = $8, secret = coalesce($9, secret), \
             updated_at = now() \
         WHERE id = $1 RETURNING {ENDPOINT_COLUMNS}"
    )))
    .bind(id)
    .bind(&e.url)
    .bind(names(&e.events, EventKind::as_str))
    .bind(e.format)
    .bind(&e.projects)
    .bind(names(&e.categories, Category::as_str))
    .bind(&e.description)
    .bind(e.enabled)
    .bind(secret)
    .fetch_optional(ex)
    .await?;
    row.as_ref().map(endpoint_from_row).transpose()
}

/// Deletes an endpoint and its deliveries; false when it did not exist.
pub async fn delete_endpoint(ex: impl PgExecutor<'_>, id: i64) -> Result<bool, DbError> {
    let done = sqlx::query("DELETE FROM webhook_endpoints WHERE id = $1")
        .bind(id)
        .execute(ex)
        .await?;
    Ok(done.rows_affected() > 0)
}

/// One endpoint.
pub async fn get_endpoint(ex: impl PgExecutor<'_>, id: i64) -> Result<Option<Endpoint>, DbError> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE id = $1"
    )))
    .bind(id)
    .fetch_optional(ex)
    .await?;
    row.as_ref().map(endpoint_from_row).transpose()
}

/// Every endpoint, oldest first (`enabled_only`: those that take new events).
pub async fn list_endpoints(
    ex: impl PgExecutor<'_>,
    enabled_only: bool,
) -> Result<Vec<Endpoint>, DbError> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE enabled OR NOT $1 ORDER BY id"
    )))
    .bind(enabled_only)
    .fetch_all(ex)
    .await?;
    rows.iter().map(endpoint_from_row).collect()
}

/// Queues `event` for each of `endpoints` and notifies the delivery tasks (on commit).
pub async fn insert_deliveries(
    conn: &mut PgConnection,
    endpoints: &[i64],
    event: &Event,
) -> Result<Vec<i64>, DbError> {
    if endpoints.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO webhook_deliveries (endpoint_id, event, payload) \
         SELECT e, $2, $3 FROM UNNEST($1::int8[]) AS e RETURNING id",
    )
    .bind(endpoints)
    .bind(event.event)
    .bind(Json(event))
    .fetch_all(&mut *conn)
    .await?;
    sqlx::query("SELECT pg_notify($1, '')")
        .bind(CHANNEL)
        .execute(&mut *conn)
        .await?;
    Ok(ids)
}

/// A due delivery, claimed for one attempt.
#[derive(Clone, Debug)]
pub struct ClaimedDelivery {
    pub id: i64,
    pub endpoint_id: i64,
    pub event: Event,
    /// Attempts made before this one.
    pub attempts: u32,
    pub created_at: crate::time::Timestamp,
    pub url: String,
    pub format: Format,
    pub secret: String,
}

/// Claims up to `limit` due deliveries, oldest due first, pushing each one's due time `lease`
/// seconds ahead: another sender skips them meanwhile, and they are due again should this one
/// die before recording its attempt.
pub async fn claim_due(
    ex: impl PgExecutor<'_>,
    limit: i64,
    lease_secs: f64,
) -> Result<Vec<ClaimedDelivery>, DbError> {
    let rows = sqlx::query(concat!(
        "WITH due AS (SELECT id FROM webhook_deliveries \
             WHERE state = 'pending' AND next_attempt_at <= now() \
             ORDER BY next_attempt_at, id LIMIT $1 FOR UPDATE SKIP LOCKED) \
         UPDATE webhook_deliveries d \
             SET next_attempt_at = now() + make_interval(secs => $2) \
         FROM due, webhook_endpoints e \
         WHERE d.id = due.id AND e.id = d.endpoint_id \
         RETURNING d.id, d.endpoint_id, d.payload, d.attempts, ",
        "d.created_at",
        " AS created, e.url, e.format, e.secret"
    ))
    .bind(limit)
    .bind(lease_secs)
    .fetch_all(ex)
    .await?;
    rows.iter()
        .map(|r| {
            let Json(event): Json<Event> = r.try_get("payload")?;
            let attempts: i32 = r.try_get("attempts")?;
            Ok(ClaimedDelivery {
                id: r.try_get("id")?,
                endpoint_id: r.try_get("endpoint_id")?,
                event,
                attempts: u32::try_from(attempts).unwrap_or(0),
                created_at: r.try_get("created")?,
                url: r.try_get("url")?,
                format: r.try_get("format")?,
                secret: r.try_get("secret")?,
            })
        })
        .collect()
}

/// What one attempt came to and what follows from it.
#[derive(Clone, Debug)]
pub struct AttemptRecord<'a> {
    pub delivery_id: i64,
    /// 1-based number of this attempt.
    pub attempt: u32,
    pub status: Option<u16>,
    pub error: &'a str,
    pub duration_ms: u64,
    /// The delivery's state after it.
    pub state: DeliveryState,
    /// Seconds until the next attempt (a pending delivery).
    pub retry_in_secs: f64,
}

/// Records an attempt in the log and moves the delivery on, in one transaction.
pub async fn record_attempt(db: &Db, a: &AttemptRecord<'_>) -> Result<(), DbError> {
    let status = a.status.map(|s| i16::try_from(s).unwrap_or(i16::MAX));
    let attempt = i32::try_from(a.attempt).unwrap_or(i32::MAX);
    let mut tx = db.pool().begin().await?;
    sqlx::query(
        "INSERT INTO webhook_attempts (delivery_id, attempt, status, error, duration_ms) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(a.delivery_id)
    .bind(attempt)
    .bind(status)
    .bind(a.error)
    .bind(i32::try_from(a.duration_ms).unwrap_or(i32::MAX))
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "UPDATE webhook_deliveries SET attempts = $2, state = $3, last_status = $4, \
             last_error = $5, next_attempt_at = now() + make_interval(secs => $6), \
             delivered_at = CASE WHEN $3 = 'delivered' THEN now() END \
         WHERE id = $1",
    )
    .bind(a.delivery_id)
    .bind(attempt)
    .bind(a.state)
    .bind(status)
    .bind(a.error)
    .bind(a.retry_in_secs)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The newest deliveries of an endpoint with their attempts.
pub async fn list_deliveries(
    conn: &mut PgConnection,
    endpoint_id: i64,
    limit: i64,
) -> Result<Vec<Delivery>, DbError> {
    let rows = sqlx::query(concat!(
        "SELECT id, endpoint_id, event, state, attempts, last_status, last_error, ",
        "created_at",
        " AS created, CASE WHEN state = 'pending' THEN ",
        "next_attempt_at",
        " END AS next_at, ",
        "delivered_at",
        " AS delivered FROM webhook_deliveries WHERE endpoint_id = $1 \
         ORDER BY id DESC LIMIT $2"
    ))
    .bind(endpoint_id)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    let mut out: Vec<Delivery> = rows
        .iter()
        .map(|r| {
            let attempts: i32 = r.try_get("attempts")?;
            let status: Option<i16> = r.try_get("last_status")?;
            Ok(Delivery {
                id: r.try_get("id")?,
                endpoint_id: r.try_get("endpoint_id")?,
                event: r.try_get("event")?,
                state: r.try_get("state")?,
                attempts: u32::try_from(attempts).unwrap_or(0),
                next_attempt_at: r.try_get("next_at")?,
                last_status: status.and_then(|s| u16::try_from(s).ok()),
                last_error: r.try_get("last_error")?,
                created_at: r.try_get("created")?,
                delivered_at: r.try_get("delivered")?,
                log: Vec::new(),
            })
        })
        .collect::<Result<_, DbError>>()?;
    let ids: Vec<i64> = out.iter().map(|d| d.id).collect();
    let attempts = sqlx::query(concat!(
        "SELECT delivery_id, attempt, status, error, duration_ms, ",
        "at",
        " AS at_s FROM webhook_attempts WHERE delivery_id = ANY($1) ORDER BY delivery_id, attempt, id"
    ))
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await?;
    for r in &attempts {
        let delivery: i64 = r.try_get("delivery_id")?;
        let attempt: i32 = r.try_get("attempt")?;
        let status: Option<i16> = r.try_get("status")?;
        let duration: i32 = r.try_get("duration_ms")?;
        if let Some(d) = out.iter_mut().find(|d| d.id == delivery) {
            d.log.push(Attempt {
                attempt: u32::try_from(attempt).unwrap_or(0),
                status: status.and_then(|s| u16::try_from(s).ok()),
                error: r.try_get("error")?,
                duration_ms: u64::try_from(duration).unwrap_or(0),
                at: r.try_get("at_s")?,
            });
        }
    }
    Ok(out)
}

/// Seconds until the earliest pending delivery is due (negative when overdue); `None` when
/// nothing is pending.
pub async fn next_due_in(ex: impl PgExecutor<'_>) -> Result<Option<f64>, DbError> {
    Ok(sqlx::query_scalar(
        "SELECT extract(epoch FROM min(next_attempt_at) - now())::float8 \
         FROM webhook_deliveries WHERE state = 'pending'",
    )
    .fetch_one(ex)
    .await?)
}

/// Deletes finished (delivered or dead) deliveries older than `days` days; returns how many.
pub async fn prune_finished(ex: impl PgExecutor<'_>, days: i32) -> Result<u64, DbError> {
    let done = sqlx::query(
        "DELETE FROM webhook_deliveries WHERE state <> 'pending' \
             AND created_at < now() - make_interval(days => $1)",
    )
    .bind(days)
    .execute(ex)
    .await?;
    Ok(done.rows_affected())
}

/// A dedicated connection listening on [`CHANNEL`].
pub struct Listener(sqlx::postgres::PgListener);

/// Opens the listener (its own connection, reconnected by sqlx after a drop).
pub async fn listen(db: &Db) -> Result<Listener, DbError> {
    let mut l = sqlx::postgres::PgListener::connect_with(db.pool()).await?;
    l.listen(CHANNEL).await?;
    Ok(Listener(l))
}

impl Listener {
    /// Waits for the next notification.
    pub async fn recv(&mut self) -> Result<(), DbError> {
        self.0.recv().await?;
        Ok(())
    }
}
