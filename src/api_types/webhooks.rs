//! The webhook wire types: the event kinds an endpoint subscribes to, the facts of one event as
//! the outbox keeps them (ids, texts, categories; no URLs, which depend on where the server is
//! reached and are added when the body is rendered, `app::webhooks::payload`), the body formats,
//! a delivery's state, and the `/api/v1/webhooks` request and response bodies.

use serde::{Deserialize, Serialize};

use super::{Fix, JobState};
use crate::rules::{Category, Classification};

/// The kinds of event an endpoint can subscribe to, plus `test` (the "send test" button).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// An upload created a new group: a failure never seen before.
    NewGroup,
    /// A failure came back (see `app::webhooks::event::is_regression`).
    Regression,
    /// A group ignored until it happened N more times (or again) got the last of them and
    /// reopened by itself.
    Reopened,
    /// A reproduction job ended: a result was recorded, or the job gave up (`dead`).
    ReproductionFinished,
    /// A team rule was created, changed, turned on or off, deleted or imported.
    RuleSaved,
    /// A test delivery asked for by an admin; sent to one endpoint whatever its filters.
    Test,
}

impl EventKind {
    /// The kinds an endpoint may subscribe to.
    pub const SUBSCRIBABLE: [EventKind; 5] = [
        EventKind::NewGroup,
        EventKind::Regression,
        EventKind::Reopened,
        EventKind::ReproductionFinished,
        EventKind::RuleSaved,
    ];

    /// The wire spelling (payload `event`, the `X-GpuTriage-Event` header, the database).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::NewGroup => "new_group",
            EventKind::Regression => "regression",
            EventKind::Reopened => "reopened",
            EventKind::ReproductionFinished => "reproduction_finished",
            EventKind::RuleSaved => "rule_saved",
            EventKind::Test => "test",
        }
    }

    /// The kind spelled `s`, if it is one.
    #[must_use]
    pub fn parse(s: &str) -> Option<EventKind> {
        Self::SUBSCRIBABLE
            .into_iter()
            .chain([EventKind::Test])
            .find(|k| k.as_str() == s)
    }

    /// What the kind means, in a few words (portal checkboxes).
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            EventKind::NewGroup => "a failure never seen before (new group)",
            EventKind::Regression => "a failure that was fixed before came back",
            EventKind::Reopened => "an ignored failure came back as often as allowed (reopened)",
            EventKind::ReproductionFinished => "a reproduction finished",
            EventKind::RuleSaved => "a team rule was saved or deleted",
            EventKind::Test => "a test delivery",
        }
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The root-cause line of a classification.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootCauseLine {
    /// 1-based line of the log as uploaded (of the output, for a reproduction).
    pub line: u64,
    pub text: String,
}

impl RootCauseLine {
    /// The root cause of `c`, if it names one.
    #[must_use]
    pub fn of(c: &Classification) -> Option<RootCauseLine> {
        c.root_cause.as_ref().map(|r| RootCauseLine {
            line: r.line as u64,
            text: r.text.clone(),
        })
    }
}

/// The report an event is about.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReportFacts {
    pub id: i64,
    pub project: String,
    pub branch: String,
    pub commit: String,
    pub job_url: String,
    pub category: Category,
    pub title: String,
    pub root_cause: Option<RootCauseLine>,
    pub next_steps: Vec<String>,
    /// For a run of files (issue 41): what to do with the job, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<crate::rules::run::RunAction>,
    /// For a run of files: the failure the others follow from (file, line, rank, host, GPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_failure: Option<crate::rules::run::FirstFailure>,
}

/// The group an event is about.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupFacts {
    pub id: i64,
    pub category: Category,
    pub title: String,
    /// Where the group stands after the event (upload events: `open` for a new group,
    /// `regressed` for a regression, with the build it had been resolved in and its
    /// assignee); null where the event does not read it (a reproduction's end).
    #[serde(default)]
    pub state: Option<super::GroupState>,
    #[serde(default)]
    pub resolved_in: String,
    #[serde(default)]
    pub assignee: String,
}

/// The fix known for the failure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FixFacts {
    pub group_id: i64,
    pub summary: String,
    pub link: String,
    pub author: String,
    pub created_at: crate::time::Timestamp,
}

impl From<&Fix> for FixFacts {
    fn from(f: &Fix) -> Self {
        FixFacts {
            group_id: f.group_id,
            summary: f.summary.clone(),
            link: f.link.clone(),
            author: f.author.clone(),
            created_at: f.created_at,
        }
    }
}

/// How a reproduction ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReproductionFacts {
    pub job_id: i64,
    /// `done` (a result was recorded) or `dead` (the job gave up).
    pub state: JobState,
    pub exit_code: Option<i32>,
    /// The synchronous run's classification (a `done` job).
    pub category: Option<Category>,
    pub title: Option<String>,
    pub root_cause: Option<RootCauseLine>,
    /// "fails 5/5 at repro.py:13", "flaky: fails 2/5" when the job ran the script repeatedly.
    pub verdict: String,
    /// Why a dead job gave up.
    pub error: String,
    /// What the run showed (a `done` job): only `reproduced` is an account of the reported
    /// failure; `environment_error` means the worker's environment stopped the run first.
    #[serde(default)]
    pub outcome: Option<crate::rules::outcome::Outcome>,
    /// For `environment_error` and `sandbox_error`: what went wrong and how to fix the worker.
    #[serde(default)]
    pub outcome_reason: String,
    #[serde(default)]
    pub outcome_fix: String,
}

/// A team-rule change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuleFacts {
    pub id: String,
    /// `create`, `update`, `delete` or `import`.
    pub action: String,
    pub actor: String,
    pub category: Option<Category>,
    pub title: Option<String>,
    /// Whether the rule is on after the change (false once deleted).
    pub enabled: bool,
}

/// One event's facts. Every field is present in every event (null when it does not apply), so
/// receivers see one stable shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub event: EventKind,
    pub report: Option<ReportFacts>,
    pub group: Option<GroupFacts>,
    pub known_fix: Option<FixFacts>,
    pub reproduction: Option<ReproductionFacts>,
    pub rule: Option<RuleFacts>,
}

impl Event {
    /// An event of `kind` with no facts yet.
    #[must_use]
    pub fn empty(event: EventKind) -> Event {
        Event {
            event,
            report: None,
            group: None,
            known_fix: None,
            reproduction: None,
            rule: None,
        }
    }

    /// A test delivery.
    #[must_use]
    pub fn test() -> Event {
        Event::empty(EventKind::Test)
    }

    /// The project the event belongs to, when it has one (rule changes do not).
    #[must_use]
    pub fn project(&self) -> Option<&str> {
        self.report.as_ref().map(|r| r.project.as_str())
    }

    /// The failure category the event is about: the report's, else the rule's.
    #[must_use]
    pub fn category(&self) -> Option<Category> {
        self.report
            .as_ref()
            .map(|r| r.category)
            .or_else(|| self.rule.as_ref().and_then(|r| r.category))
    }
}

/// How an endpoint wants its bodies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// The JSON payload below.
    Json,
    /// A Slack incoming-webhook message (`{"text", "blocks"}`).
    Slack,
}

impl Format {
    /// The wire and database spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Slack => "slack",
        }
    }

    /// The format spelled `s`, if it is one.
    #[must_use]
    pub fn parse(s: &str) -> Option<Format> {
        [Format::Json, Format::Slack]
            .into_iter()
            .find(|f| f.as_str() == s)
    }
}

/// Where a delivery stands in the outbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// Not delivered yet: due at `next_attempt_at` (a first attempt, or a retry).
    Pending,
    /// A 2xx answer was received.
    Delivered,
    /// Every attempt failed; no more will be made.
    Dead,
}

impl DeliveryState {
    /// The wire and database spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Dead => "dead",
        }
    }

    /// The state spelled `s`, if it is one.
    #[must_use]
    pub fn parse(s: &str) -> Option<DeliveryState> {
        [
            DeliveryState::Pending,
            DeliveryState::Delivered,
            DeliveryState::Dead,
        ]
        .into_iter()
        .find(|d| d.as_str() == s)
    }
}

impl std::fmt::Display for DeliveryState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The body of `POST /api/v1/webhooks` (`url` and `events` required) and of
/// `PATCH /api/v1/webhooks/{id}` (only the fields given change). Names are strings here so an
/// unknown event or category is a 422 naming it, not a JSON error.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EndpointRequest {
    pub url: Option<String>,
    /// Event names: `new_group`, `regression`, `reopened`, `reproduction_finished`,
    /// `rule_saved`.
    pub events: Option<Vec<String>>,
    /// `json` (default) or `slack`.
    pub format: Option<String>,
    /// Only events of these projects (any letter case); empty: every project.
    pub projects: Option<Vec<String>>,
    /// Only events of these categories; empty: every category.
    pub categories: Option<Vec<String>>,
    /// The HMAC key (16-200 printable characters); generated when not given on creation.
    pub secret: Option<String>,
    pub description: Option<String>,
    pub enabled: Option<bool>,
}

/// A webhook endpoint as the API and the portal show it: never its secret.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Endpoint {
    pub id: i64,
    pub url: String,
    pub events: Vec<EventKind>,
    pub format: Format,
    pub projects: Vec<String>,
    pub categories: Vec<Category>,
    pub description: String,
    pub enabled: bool,
    pub created_by: String,
    pub created_at: crate::time::Timestamp,
    pub updated_at: crate::time::Timestamp,
}

/// The answer to creating an endpoint: the endpoint, and its secret shown this once.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EndpointCreated {
    #[serde(flatten)]
    pub endpoint: Endpoint,
    pub secret: String,
}

/// One delivery of an event to an endpoint, with its attempts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Delivery {
    pub id: i64,
    pub endpoint_id: i64,
    pub event: EventKind,
    pub state: DeliveryState,
    /// Attempts made so far.
    pub attempts: u32,
    /// When the next attempt is due (pending deliveries).
    #[schema(required)]
    pub next_attempt_at: Option<crate::time::Timestamp>,
    /// The last attempt's HTTP status; null when it got no response.
    #[schema(required)]
    pub last_status: Option<u16>,
    pub last_error: String,
    pub created_at: crate::time::Timestamp,
    #[schema(required)]
    pub delivered_at: Option<crate::time::Timestamp>,
    /// Every attempt, first first.
    pub log: Vec<Attempt>,
}

/// One attempt to deliver.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Attempt {
    pub attempt: u32,
    /// The HTTP status; null when no response came (refused, timed out, unreachable).
    #[schema(required)]
    pub status: Option<u16>,
    pub error: String,
    pub duration_ms: u64,
    pub at: crate::time::Timestamp,
}

/// `GET /api/v1/webhooks` response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EndpointList {
    pub webhooks: Vec<Endpoint>,
}

/// `DELETE /api/v1/webhooks/{id}` response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EndpointDeleted {
    /// The id removed.
    pub deleted: i64,
}

/// `POST /api/v1/webhooks/{id}/test` (202) response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TestQueued {
    /// The queued `test` delivery (see the endpoint's deliveries).
    pub delivery_id: i64,
}

/// `GET /api/v1/webhooks/{id}/deliveries` response: the endpoint and its newest deliveries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeliveryLog {
    pub webhook: Endpoint,
    /// The newest 50, newest first.
    pub deliveries: Vec<Delivery>,
}
