//! Webhooks (migration 0019): endpoints, the outbox of deliveries and the attempt log. Rows are
//! written in the caller's transaction (a delivery commits with the change that caused it), due
//! deliveries are claimed with `FOR UPDATE SKIP LOCKED` under a lease (so replicas never post the
//! same row at once and a sender that dies leaves it due again), and a NOTIFY on [`CHANNEL`]
//! wakes the delivery tasks when rows are added.

use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor};

use super::{Db, DbError};
use crate::api_types::webhooks::{
    Attempt, Delivery, DeliveryState, Endpoint, Event, EventKind, Format,
};
use crate::rules::Category;
use crate::time::Timestamp;

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

/// An endpoint row as the statements read it: the events and categories as their stored
/// spellings, parsed (an unknown one is [`DbError::Corrupt`]) into an [`Endpoint`].
struct EndpointRow {
    id: i64,
    url: String,
    events: Vec<String>,
    format: Format,
    projects: Vec<String>,
    categories: Vec<String>,
    description: String,
    enabled: bool,
    created_by: String,
    created: Timestamp,
    updated: Timestamp,
}

impl TryFrom<EndpointRow> for Endpoint {
    type Error = DbError;

    fn try_from(row: EndpointRow) -> Result<Self, DbError> {
        Ok(Endpoint {
            id: row.id,
            url: row.url,
            events: row
                .events
                .iter()
                .map(|e| {
                    EventKind::parse(e)
                        .ok_or_else(|| DbError::Corrupt(format!("webhook event {e:?}")))
                })
                .collect::<Result<_, _>>()?,
            format: row.format,
            projects: row.projects,
            categories: row
                .categories
                .iter()
                .map(|c| c.parse().map_err(DbError::Corrupt))
                .collect::<Result<_, _>>()?,
            description: row.description,
            enabled: row.enabled,
            created_by: row.created_by,
            created_at: row.created,
            updated_at: row.updated,
        })
    }
}

/// The stored spellings of `items`, for a `text[]` column.
fn names<T: Copy>(items: &[T], name: fn(T) -> &'static str) -> Vec<String> {
    items.iter().map(|i| name(*i).to_owned()).collect()
}

/// Stores a new endpoint with its secret.
pub async fn insert_endpoint(
    ex: impl PgExecutor<'_>,
    e: &EndpointWrite,
    secret: &str,
    created_by: &str,
) -> Result<Endpoint, DbError> {
    let row = sqlx::query_as!(
        EndpointRow,
        r#"INSERT INTO webhook_endpoints
             (url, events, format, projects, categories, description, enabled, secret, created_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         RETURNING id, url, events, format AS "format: Format", projects, categories, description,
             enabled, created_by, created_at AS "created: Timestamp",
             updated_at AS "updated: Timestamp""#,
        e.url,
        &names(&e.events, EventKind::as_str),
        e.format.as_str(),
        &e.projects,
        &names(&e.categories, Category::as_str),
        e.description,
        e.enabled,
        secret,
        created_by
    )
    .fetch_one(ex)
    .await?;
    Endpoint::try_from(row)
}

/// Replaces an endpoint's fields (and its secret, when given); `None` when it does not exist.
pub async fn update_endpoint(
    ex: impl PgExecutor<'_>,
    id: i64,
    e: &EndpointWrite,
    secret: Option<&str>,
) -> Result<Option<Endpoint>, DbError> {
    let row = sqlx::query_as!(
        EndpointRow,
        r#"UPDATE webhook_endpoints SET url = $2, events = $3, format = $4, projects = $5,
             categories = $6, description = $7, enabled = $8, secret = coalesce($9, secret),
             updated_at = now()
         WHERE id = $1
         RETURNING id, url, events, format AS "format: Format", projects, categories, description,
             enabled, created_by, created_at AS "created: Timestamp",
             updated_at AS "updated: Timestamp""#,
        id,
        e.url,
        &names(&e.events, EventKind::as_str),
        e.format.as_str(),
        &e.projects,
        &names(&e.categories, Category::as_str),
        e.description,
        e.enabled,
        secret
    )
    .fetch_optional(ex)
    .await?;
    row.map(Endpoint::try_from).transpose()
}

/// Deletes an endpoint and its deliveries; false when it did not exist.
pub async fn delete_endpoint(ex: impl PgExecutor<'_>, id: i64) -> Result<bool, DbError> {
    let done = sqlx::query!("DELETE FROM webhook_endpoints WHERE id = $1", id)
        .execute(ex)
        .await?;
    Ok(done.rows_affected() > 0)
}

/// One endpoint.
pub async fn get_endpoint(ex: impl PgExecutor<'_>, id: i64) -> Result<Option<Endpoint>, DbError> {
    let row = sqlx::query_as!(
        EndpointRow,
        r#"SELECT id, url, events, format AS "format: Format", projects, categories, description,
             enabled, created_by, created_at AS "created: Timestamp",
             updated_at AS "updated: Timestamp"
         FROM webhook_endpoints WHERE id = $1"#,
        id
    )
    .fetch_optional(ex)
    .await?;
    row.map(Endpoint::try_from).transpose()
}

/// Every endpoint, oldest first (`enabled_only`: those that take new events).
pub async fn list_endpoints(
    ex: impl PgExecutor<'_>,
    enabled_only: bool,
) -> Result<Vec<Endpoint>, DbError> {
    let rows = sqlx::query_as!(
        EndpointRow,
        r#"SELECT id, url, events, format AS "format: Format", projects, categories, description,
             enabled, created_by, created_at AS "created: Timestamp",
             updated_at AS "updated: Timestamp"
         FROM webhook_endpoints WHERE enabled OR NOT $1 ORDER BY id"#,
        enabled_only
    )
    .fetch_all(ex)
    .await?;
    rows.into_iter().map(Endpoint::try_from).collect()
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
    // The payload is `Json` (serialised by sqlx), which the macro cannot match with
    // `serde_json::Value`: `as _` takes it as it is.
    let ids: Vec<i64> = sqlx::query_scalar!(
        "INSERT INTO webhook_deliveries (endpoint_id, event, payload)
         SELECT e, $2, $3 FROM UNNEST($1::int8[]) AS e RETURNING id",
        endpoints,
        event.event.as_str(),
        Json(event) as _
    )
    .fetch_all(&mut *conn)
    .await?;
    sqlx::query!("SELECT pg_notify($1, '')", CHANNEL)
        .fetch_one(&mut *conn)
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
    let rows = sqlx::query!(
        r#"WITH due AS (SELECT id FROM webhook_deliveries
             WHERE state = 'pending' AND next_attempt_at <= now()
             ORDER BY next_attempt_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)
         UPDATE webhook_deliveries d
             SET next_attempt_at = now() + make_interval(secs => $2)
         FROM due, webhook_endpoints e
         WHERE d.id = due.id AND e.id = d.endpoint_id
         RETURNING d.id, d.endpoint_id, d.payload AS "payload: Json<Event>", d.attempts,
             d.created_at AS "created: Timestamp", e.url, e.format AS "format: Format",
             e.secret"#,
        limit,
        lease_secs
    )
    .fetch_all(ex)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| ClaimedDelivery {
            id: r.id,
            endpoint_id: r.endpoint_id,
            event: r.payload.0,
            attempts: u32::try_from(r.attempts).unwrap_or(0),
            created_at: r.created,
            url: r.url,
            format: r.format,
            secret: r.secret,
        })
        .collect())
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
    sqlx::query!(
        "INSERT INTO webhook_attempts (delivery_id, attempt, status, error, duration_ms)
         VALUES ($1, $2, $3, $4, $5)",
        a.delivery_id,
        attempt,
        status,
        a.error,
        i32::try_from(a.duration_ms).unwrap_or(i32::MAX)
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "UPDATE webhook_deliveries SET attempts = $2, state = $3, last_status = $4,
             last_error = $5, next_attempt_at = now() + make_interval(secs => $6),
             delivered_at = CASE WHEN $3 = 'delivered' THEN now() END
         WHERE id = $1",
        a.delivery_id,
        attempt,
        a.state.as_str(),
        status,
        a.error,
        a.retry_in_secs
    )
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
    let rows = sqlx::query!(
        r#"SELECT id, endpoint_id, event AS "event: EventKind", state AS "state: DeliveryState",
             attempts, last_status, last_error, created_at AS "created: Timestamp",
             CASE WHEN state = 'pending' THEN next_attempt_at END AS "next_at?: Timestamp",
             delivered_at AS "delivered: Timestamp"
         FROM webhook_deliveries WHERE endpoint_id = $1
         ORDER BY id DESC LIMIT $2"#,
        endpoint_id,
        limit
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut out: Vec<Delivery> = rows
        .into_iter()
        .map(|r| Delivery {
            id: r.id,
            endpoint_id: r.endpoint_id,
            event: r.event,
            state: r.state,
            attempts: u32::try_from(r.attempts).unwrap_or(0),
            next_attempt_at: r.next_at,
            last_status: r.last_status.and_then(|s| u16::try_from(s).ok()),
            last_error: r.last_error,
            created_at: r.created,
            delivered_at: r.delivered,
            log: Vec::new(),
        })
        .collect();
    let ids: Vec<i64> = out.iter().map(|d| d.id).collect();
    let attempts = sqlx::query!(
        r#"SELECT delivery_id, attempt, status, error, duration_ms, at AS "at_s: Timestamp"
         FROM webhook_attempts WHERE delivery_id = ANY($1)
         ORDER BY delivery_id, attempt, id"#,
        &ids
    )
    .fetch_all(&mut *conn)
    .await?;
    for r in attempts {
        if let Some(d) = out.iter_mut().find(|d| d.id == r.delivery_id) {
            d.log.push(Attempt {
                attempt: u32::try_from(r.attempt).unwrap_or(0),
                status: r.status.and_then(|s| u16::try_from(s).ok()),
                error: r.error,
                duration_ms: u64::try_from(r.duration_ms).unwrap_or(0),
                at: r.at_s,
            });
        }
    }
    Ok(out)
}

/// Seconds until the earliest pending delivery is due (negative when overdue); `None` when
/// nothing is pending.
pub async fn next_due_in(ex: impl PgExecutor<'_>) -> Result<Option<f64>, DbError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT extract(epoch FROM min(next_attempt_at) - now())::float8 AS "due_in?"
         FROM webhook_deliveries WHERE state = 'pending'"#
    )
    .fetch_one(ex)
    .await?)
}

/// Deletes finished (delivered or dead) deliveries older than `days` days; returns how many.
pub async fn prune_finished(ex: impl PgExecutor<'_>, days: i32) -> Result<u64, DbError> {
    let done = sqlx::query!(
        "DELETE FROM webhook_deliveries WHERE state <> 'pending'
             AND created_at < now() - make_interval(days => $1)",
        days
    )
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
