//! Webhooks: admins register endpoints (URL, events, format, filters, secret); the use cases
//! that cause an event (an upload that creates a group or brings a fixed failure back, a
//! finished reproduction, a saved team rule) write it to a PostgreSQL outbox in their own
//! transaction, one delivery per matching endpoint ([`enqueue`]: the fan-out and the filters
//! are decided at that moment, so a filter changed later does not touch deliveries already
//! queued); and a background task ([`deliver`]) posts them, signed, with retries and backoff,
//! keeping every attempt's status for the delivery log.

pub mod address;
pub mod deliver;
pub mod event;
pub mod guard;
pub mod payload;

use std::time::Duration;

use sqlx::PgConnection;

use super::Error;
use crate::api_types::ErrorCode;
use crate::api_types::webhooks::{
    Delivery, Endpoint, EndpointCreated, EndpointRequest, Event, EventKind, Format,
};
use crate::rules::Category;
use crate::storage::webhooks::{self as store, EndpointWrite};
use crate::storage::{Db, DbError};

/// Delivery settings (`serve --webhook-*`).
#[derive(Clone, Debug)]
pub struct WebhookSettings {
    /// Let endpoints reach loopback, private and link-local addresses (`--webhook-allow-private`).
    pub allow_private: bool,
    /// The wait after each failed attempt, in order; a delivery is dead after one more attempt
    /// than there are waits.
    pub backoff: Vec<Duration>,
    /// Time one attempt may take, connecting included.
    pub timeout: Duration,
    /// How often the delivery task looks for due rows when nothing wakes it.
    pub poll: Duration,
    /// Deliveries claimed (and posted side by side) at once.
    pub batch: usize,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        let secs = Duration::from_secs;
        WebhookSettings {
            allow_private: false,
            backoff: vec![secs(10), secs(30), secs(120), secs(600), secs(3600)],
            timeout: secs(10),
            poll: secs(5),
            batch: 8,
        }
    }
}

impl WebhookSettings {
    /// Attempts before a delivery is dead.
    #[must_use]
    pub fn max_attempts(&self) -> u32 {
        u32::try_from(self.backoff.len()).unwrap_or(u32::MAX - 1) + 1
    }
}

/// Most endpoints one deployment may register.
const MAX_ENDPOINTS: usize = 100;
/// Deliveries shown per endpoint.
pub const DELIVERY_LOG: i64 = 50;

fn invalid(message: impl Into<String>) -> Error {
    Error::Invalid(ErrorCode::InvalidWebhook, message.into())
}

fn clean_list(list: &[String], what: &str, max: usize) -> Result<Vec<String>, Error> {
    let mut out: Vec<String> = Vec::new();
    for item in list.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        if item.len() > 200 || item.chars().any(char::is_control) {
            return Err(invalid(format!(
                "{what}: each entry is at most 200 characters without control characters"
            )));
        }
        if !out.iter().any(|o| o == item) {
            out.push(item.to_owned());
        }
    }
    if out.len() > max {
        return Err(invalid(format!("{what}: at most {max} entries")));
    }
    Ok(out)
}

fn parse_events(names: &[String]) -> Result<Vec<EventKind>, Error> {
    let allowed: Vec<&str> = EventKind::SUBSCRIBABLE.iter().map(|k| k.as_str()).collect();
    let mut out = Vec::new();
    for name in clean_list(names, "events", 10)? {
        match EventKind::parse(&name).filter(|k| EventKind::SUBSCRIBABLE.contains(k)) {
            Some(k) if !out.contains(&k) => out.push(k),
            Some(_) => {}
            None => {
                return Err(invalid(format!(
                    "events: unknown event {name:?}; use {}",
                    allowed.join(", ")
                )));
            }
        }
    }
    if out.is_empty() {
        return Err(invalid(format!(
            "events: subscribe to at least one of {}",
            allowed.join(", ")
        )));
    }
    Ok(out)
}

fn parse_categories(names: &[String]) -> Result<Vec<Category>, Error> {
    clean_list(names, "categories", Category::ALL.len())?
        .iter()
        .map(|c| {
            c.parse::<Category>()
                .map_err(|e| invalid(format!("categories: {e}")))
        })
        .collect()
}

fn check_secret(secret: &str) -> Result<(), Error> {
    if !(16..=200).contains(&secret.len()) || !secret.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid(
            "secret must be 16-200 printable characters without spaces",
        ));
    }
    Ok(())
}

/// A new signing secret: `whsec_` and 256 random bits in hex.
fn generate_secret() -> Result<String, Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| Error::Internal(anyhow::anyhow!("no randomness from the OS: {e}")))?;
    Ok(format!("whsec_{}", hex::encode(bytes)))
}

/// The fields `req` asks for, over `current` (an update) or from scratch (a create).
fn merged(
    req: &EndpointRequest,
    current: Option<&Endpoint>,
    allow_private: bool,
) -> Result<EndpointWrite, Error> {
    let url = match (&req.url, current) {
        (Some(u), _) => guard::check_url(u, allow_private).map_err(invalid)?,
        (None, Some(c)) => c.url.clone(),
        (None, None) => return Err(invalid("url is required")),
    };
    let events = match (&req.events, current) {
        (Some(e), _) => parse_events(e)?,
        (None, Some(c)) => c.events.clone(),
        (None, None) => return Err(invalid("events is required")),
    };
    let format = match &req.format {
        Some(f) => Format::parse(f.trim())
            .ok_or_else(|| invalid(format!("format must be \"json\" or \"slack\", not {f:?}")))?,
        None => current.map_or(Format::Json, |c| c.format),
    };
    let projects = match &req.projects {
        Some(p) => clean_list(p, "projects", 50)?,
        None => current.map(|c| c.projects.clone()).unwrap_or_default(),
    };
    let categories = match &req.categories {
        Some(c) => parse_categories(c)?,
        None => current.map(|c| c.categories.clone()).unwrap_or_default(),
    };
    let description = match &req.description {
        Some(d) => {
            let d = d.trim();
            if d.chars().count() > 500 || d.chars().any(char::is_control) {
                return Err(invalid(
                    "description is at most 500 characters without control characters",
                ));
            }
            d.to_owned()
        }
        None => current.map(|c| c.description.clone()).unwrap_or_default(),
    };
    Ok(EndpointWrite {
        url,
        events,
        format,
        projects,
        categories,
        description,
        enabled: req.enabled.or(current.map(|c| c.enabled)).unwrap_or(true),
    })
}

/// Registers an endpoint for `actor`; the answer carries its secret, shown this once.
#[tracing::instrument(name = "webhooks::create", skip_all, fields(actor = actor, endpoint_id = tracing::field::Empty))]
pub async fn create(
    db: &Db,
    settings: &WebhookSettings,
    req: &EndpointRequest,
    actor: &str,
) -> Result<EndpointCreated, Error> {
    let write = merged(req, None, settings.allow_private)?;
    let secret = match &req.secret {
        Some(s) => {
            check_secret(s)?;
            s.clone()
        }
        None => generate_secret()?,
    };
    // Last, once the request is otherwise valid: this may ask a name server.
    guard::check_resolved_url(&write.url, settings.allow_private)
        .await
        .map_err(invalid)?;
    if store::list_endpoints(db.pool(), false).await?.len() >= MAX_ENDPOINTS {
        return Err(invalid(format!(
            "at most {MAX_ENDPOINTS} endpoints; delete one first"
        )));
    }
    let endpoint = store::insert_endpoint(db.pool(), &write, &secret, actor).await?;
    tracing::Span::current().record("endpoint_id", endpoint.id);
    tracing::info!(endpoint = endpoint.id, url = %endpoint.url, by = actor, "webhook endpoint created");
    Ok(EndpointCreated { endpoint, secret })
}

/// Changes the fields `req` gives (a new secret included); 404 for an unknown endpoint.
#[tracing::instrument(name = "webhooks::update", skip_all, fields(endpoint_id = id))]
pub async fn update(
    db: &Db,
    settings: &WebhookSettings,
    id: i64,
    req: &EndpointRequest,
) -> Result<Endpoint, Error> {
    let current = get(db, id).await?;
    let write = merged(req, Some(&current), settings.allow_private)?;
    if let Some(s) = &req.secret {
        check_secret(s)?;
    }
    // A URL saved earlier is judged again only when the request changes it.
    if req.url.is_some() {
        guard::check_resolved_url(&write.url, settings.allow_private)
            .await
            .map_err(invalid)?;
    }
    store::update_endpoint(db.pool(), id, &write, req.secret.as_deref())
        .await?
        .ok_or(Error::NotFound("webhook"))
}

/// Every endpoint, oldest first.
#[tracing::instrument(name = "webhooks::list", skip_all)]
pub async fn list(db: &Db) -> Result<Vec<Endpoint>, Error> {
    Ok(store::list_endpoints(db.pool(), false).await?)
}

/// One endpoint, or 404.
#[tracing::instrument(name = "webhooks::get", skip_all, fields(endpoint_id = id))]
pub async fn get(db: &Db, id: i64) -> Result<Endpoint, Error> {
    store::get_endpoint(db.pool(), id)
        .await?
        .ok_or(Error::NotFound("webhook"))
}

/// Deletes an endpoint with its queued and logged deliveries; 404 when unknown.
#[tracing::instrument(name = "webhooks::delete", skip_all, fields(endpoint_id = id))]
pub async fn delete(db: &Db, id: i64) -> Result<(), Error> {
    if store::delete_endpoint(db.pool(), id).await? {
        Ok(())
    } else {
        Err(Error::NotFound("webhook"))
    }
}

/// Queues a `test` delivery to one endpoint, whatever its events and filters (and whether it
/// is enabled); returns the delivery's id.
#[tracing::instrument(name = "webhooks::send_test", skip_all, fields(endpoint_id = id))]
pub async fn send_test(db: &Db, id: i64) -> Result<i64, Error> {
    get(db, id).await?;
    let mut tx = db.pool().begin().await.map_err(DbError::from)?;
    let ids = store::insert_deliveries(&mut tx, &[id], &Event::test()).await?;
    tx.commit().await.map_err(DbError::from)?;
    ids.first()
        .copied()
        .ok_or_else(|| Error::Internal(anyhow::anyhow!("no delivery row returned")))
}

/// An endpoint and its newest deliveries with their attempts.
#[tracing::instrument(name = "webhooks::deliveries", skip_all, fields(endpoint_id = id))]
pub async fn deliveries(db: &Db, id: i64) -> Result<(Endpoint, Vec<Delivery>), Error> {
    let endpoint = get(db, id).await?;
    let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
    let list = store::list_deliveries(&mut conn, id, DELIVERY_LOG).await?;
    Ok((endpoint, list))
}

/// Whether `endpoint` takes `event`: enabled, subscribed to its kind, and its filters let it
/// through. A project filter matches in any letter case and lets through events without a
/// project (rule changes); a category filter lets through events without a category.
#[must_use]
pub fn accepts(endpoint: &Endpoint, event: &Event) -> bool {
    let project_ok = endpoint.projects.is_empty()
        || event.project().is_none_or(|p| {
            endpoint
                .projects
                .iter()
                .any(|q| q.to_lowercase() == p.to_lowercase())
        });
    let category_ok = endpoint.categories.is_empty()
        || event
            .category()
            .is_none_or(|c| endpoint.categories.contains(&c));
    endpoint.enabled && endpoint.events.contains(&event.event) && project_ok && category_ok
}

/// Writes `events` to the outbox in the caller's transaction: one delivery per enabled endpoint
/// that [`accepts`] each. Returns how many deliveries were queued.
#[tracing::instrument(name = "webhooks::enqueue", skip_all, fields(events = events.len()))]
pub(crate) async fn enqueue(conn: &mut PgConnection, events: &[Event]) -> Result<usize, DbError> {
    if events.is_empty() {
        return Ok(0);
    }
    let endpoints = store::list_endpoints(&mut *conn, true).await?;
    let mut queued = 0;
    for event in events {
        let ids: Vec<i64> = endpoints
            .iter()
            .filter(|e| accepts(e, event))
            .map(|e| e.id)
            .collect();
        queued += store::insert_deliveries(conn, &ids, event).await?.len();
    }
    Ok(queued)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api_types::webhooks::{ReportFacts, RuleFacts};
    use crate::time::Timestamp;

    fn endpoint(events: &[EventKind], projects: &[&str], categories: &[Category]) -> Endpoint {
        Endpoint {
            id: 1,
            url: "https://hooks.example.com/x".into(),
            events: events.to_vec(),
            format: Format::Json,
            projects: projects.iter().map(|p| p.to_string()).collect(),
            categories: categories.to_vec(),
            description: String::new(),
            enabled: true,
            created_by: "admin".into(),
            created_at: Timestamp::from_unix(0),
            updated_at: Timestamp::from_unix(0),
        }
    }

    fn report_event(project: &str, category: Category) -> Event {
        Event {
            report: Some(ReportFacts {
                id: 1,
                project: project.into(),
                branch: String::new(),
                commit: String::new(),
                job_url: String::new(),
                category,
                title: "t".into(),
                root_cause: None,
                next_steps: Vec::new(),
                action: None,
                first_failure: None,
            }),
            ..Event::empty(EventKind::NewGroup)
        }
    }

    #[test]
    fn filters_pick_events_by_kind_project_and_category() {
        use Category::{OutOfBounds as Oob, OutOfMemory as Oom};
        let new = [EventKind::NewGroup];
        let cases = [
            (endpoint(&new, &[], &[]), report_event("vision", Oom), true),
            (
                endpoint(&[EventKind::Regression], &[], &[]),
                report_event("vision", Oom),
                false,
            ),
            (
                endpoint(&new, &["Vision"], &[]),
                report_event("vision", Oom),
                true,
            ),
            (
                endpoint(&new, &["nlp"], &[]),
                report_event("vision", Oom),
                false,
            ),
            (endpoint(&new, &["nlp"], &[]), report_event("", Oom), false),
            (
                endpoint(&new, &[], &[Oob]),
                report_event("vision", Oom),
                false,
            ),
            (
                endpoint(&new, &["vision"], &[Oom, Oob]),
                report_event("vision", Oom),
                true,
            ),
        ];
        for (endpoint, event, want) in cases {
            assert_eq!(accepts(&endpoint, &event), want, "{endpoint:?} {event:?}");
        }
        let rule = Event {
            rule: Some(RuleFacts {
                id: "team.x".into(),
                action: "create".into(),
                actor: "a".into(),
                category: Some(Oob),
                title: None,
                enabled: true,
            }),
            ..Event::empty(EventKind::RuleSaved)
        };
        let rules = [EventKind::RuleSaved];
        assert!(accepts(&endpoint(&rules, &["vision"], &[]), &rule));
        assert!(accepts(&endpoint(&rules, &[], &[Oob]), &rule));
        assert!(!accepts(&endpoint(&rules, &[], &[Oom]), &rule));
        let mut off = endpoint(&new, &[], &[]);
        off.enabled = false;
        assert!(!accepts(&off, &report_event("vision", Oom)));
    }

    #[test]
    fn requests_are_validated_with_messages_naming_the_field() {
        let req = |f: fn(&mut EndpointRequest)| {
            let mut r = EndpointRequest {
                url: Some("https://hooks.example.com/a".into()),
                events: Some(vec!["new_group".into()]),
                ..EndpointRequest::default()
            };
            f(&mut r);
            merged(&r, None, false)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        assert_eq!(req(|_| {}), Ok(()));
        type Change = fn(&mut EndpointRequest);
        let cases: [(Change, &str); 7] = [
            (|r| r.url = None, "url is required"),
            (|r| r.events = Some(vec![]), "at least one"),
            (
                |r| r.events = Some(vec!["push".into()]),
                "unknown event \"push\"",
            ),
            (
                |r| r.events = Some(vec!["test".into()]),
                "unknown event \"test\"",
            ),
            (|r| r.format = Some("xml".into()), "format must be"),
            (
                |r| r.categories = Some(vec!["oom".into()]),
                "unknown category",
            ),
            (
                |r| r.url = Some("http://127.0.0.1/".into()),
                "--webhook-allow-private",
            ),
        ];
        for (change, want) in cases {
            let got = req(change);
            assert!(
                got.as_ref().is_err_and(|e| e.contains(want)),
                "{got:?} {want}"
            );
        }
        assert!(check_secret("short").is_err());
        assert!(check_secret("a secret with spaces").is_err());
        assert!(check_secret("0123456789abcdef").is_ok());
    }

    #[test]
    fn attempts_are_one_more_than_the_waits() {
        assert_eq!(WebhookSettings::default().max_attempts(), 6);
    }
}
