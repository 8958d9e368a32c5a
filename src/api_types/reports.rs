//! The reports' wire types: what an upload answers (`ReportCreated`, with the job it queued,
//! the known fix and the similar failures) and one report with its fixes and reproductions
//! (`GET /api/v1/reports/{id}`: `ReportDetail`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{CpuRun, JobState, RunEnvironment, RunOutcome, Sandbox, retention};
use crate::rules::outcome::Outcome;
use crate::rules::run::{FirstFailure, RunAction, RunFile, RunStory, SkippedFile};
use crate::rules::{Category, Classification};

/// The reproduction job an upload queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QueuedJob {
    /// The job's id.
    pub job_id: i64,
    /// Its state now.
    pub state: JobState,
}

/// `POST /api/v1/reports` 201/200 response.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReportCreated {
    /// The report's id.
    pub id: i64,
    /// The report page.
    pub url: String,
    /// The group of recurring failures it joined.
    pub group_id: i64,
    /// The same bytes were already stored for the project: this is that report.
    #[serde(default)]
    #[schema(required)]
    pub duplicate: bool,
    /// The stored report's classification.
    pub classification: Classification,
    /// The reproduction queued for an attached script.
    #[schema(required)]
    pub repro: Option<QueuedJob>,
    /// What fixed this failure before: the newest fix of its own group, or null; a similar
    /// group's fix is never offered as this failure's (it is listed in `similar`).
    #[serde(default)]
    #[schema(required)]
    pub known_fix: Option<Fix>,
    /// Where its group stands after this upload (a regression shows here at once); null
    /// only from servers older than this field.
    #[serde(default)]
    #[schema(required)]
    pub group_state: Option<GroupStanding>,
    /// Other groups whose failure has nearly the same shape, most alike first.
    #[serde(default)]
    #[schema(required)]
    pub similar: Vec<SimilarFailure>,
    /// For a run of files: its files, first failure and action.
    #[serde(flatten)]
    pub run: RunFields,
}

/// What a report uploaded as a run of files (several `log` parts or an `archive`) adds to its
/// answers (issue 41); empty and null for a single log.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunFields {
    /// Every file of the run: name, bytes, lines, category, root cause, role, consequence-of,
    /// rank, host, GPU, attempts.
    #[serde(default)]
    #[schema(required)]
    pub files: Vec<RunFile>,
    /// The failure the others follow from: file, line, rank, host, GPU.
    #[serde(default)]
    #[schema(required)]
    pub first_failure: Option<FirstFailure>,
    /// What to do with the job (`fix_code`, `fix_environment`, `restart`, `drain_node`) and why.
    #[serde(default)]
    #[schema(required)]
    pub action: Option<RunAction>,
    /// Archive members left out (not text, empty, flight-recorder dumps), with the reason.
    #[serde(default)]
    #[schema(required)]
    pub skipped: Vec<SkippedFile>,
    /// From the ranks' flight-recorder dumps in the run: the first collective some ranks never
    /// entered (group, number, operation, ranks in and out); null without dumps or when the
    /// ranks agree.
    #[serde(default)]
    #[schema(required)]
    pub collectives: Option<crate::rules::run::flight::Divergence>,
}

impl From<Option<RunStory>> for RunFields {
    fn from(story: Option<RunStory>) -> Self {
        story.map_or_else(RunFields::default, |s| RunFields {
            files: s.files,
            first_failure: s.first_failure,
            action: Some(s.action),
            skipped: s.skipped,
            collectives: s.collectives,
        })
    }
}

/// A group of failures shaped like a report's (its root cause with numbers taken out, and the
/// user's stack frames), as report responses list it.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SimilarFailure {
    pub group_id: i64,
    /// The group page.
    pub url: String,
    pub category: Category,
    pub title: String,
    /// The group's root-cause line, as first seen.
    pub root_cause: String,
    pub report_count: i64,
    /// Trigram similarity of the two failures' signatures, 0 to 1.
    pub similarity: f32,
    /// Its fixes, newest first (at most three).
    pub fixes: Vec<Fix>,
}

/// A fix recorded for a group, as `GET /api/v1/groups/{id}` and `GET /api/v1/reports/{id}`
/// list it.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Fix {
    pub id: i64,
    pub group_id: i64,
    /// What fixed it, in a line.
    pub summary: String,
    pub details: String,
    /// A link to the change (commit, pull request); empty when none.
    pub link: String,
    /// Who recorded it: a person's name, a token's name, or (for fixes recorded before people
    /// were told apart from tokens) the name as it was stored.
    pub author: String,
    /// `person`, `token` or `service`; `null` for a fix recorded before actors were typed.
    #[serde(default)]
    #[schema(required)]
    pub author_kind: Option<crate::actor::ActorKind>,
    /// The person who recorded it, when a person did (and still exists).
    #[serde(default)]
    #[schema(required)]
    pub author_person_id: Option<i64>,
    /// When (RFC 3339 on the wire).
    pub created_at: crate::time::Timestamp,
}

/// One reproduction job of a report, as `GET /api/v1/reports/{id}` lists it under
/// `reproductions`: the result's fields are null until a result is recorded.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Reproduction {
    pub job_id: i64,
    pub state: JobState,
    pub attempt: u32,
    pub max_attempts: u32,
    #[schema(required)]
    pub exit_code: Option<i32>,
    #[schema(required)]
    pub signal: Option<i32>,
    pub timed_out: bool,
    #[schema(required)]
    pub duration_ms: Option<u64>,
    #[schema(required)]
    pub gpu: Option<Value>,
    #[schema(required)]
    pub stdout: Option<String>,
    #[schema(required)]
    pub stderr: Option<String>,
    pub truncated: bool,
    #[schema(required)]
    pub classification: Option<Classification>,
    #[schema(required)]
    pub no_gpu: Option<bool>,
    #[schema(required)]
    pub cpu_translation: Option<bool>,
    /// The follow-up run on the CPU, when there was one.
    #[schema(required)]
    pub cpu_run: Option<CpuRun>,
    /// With repeats: every run's outcome.
    pub runs: Vec<RunOutcome>,
    /// With repeats: "fails 5/5 at repro.py:13", "flaky: fails 2/5"; else empty.
    pub verdict: String,
    /// What the run showed (for a job that died of its worker's errors without a run,
    /// `sandbox_error`, or `environment_error` when the interpreter was missing); null while the
    /// job is pending, and for a job whose leases all expired without a result.
    #[schema(required)]
    pub outcome: Option<Outcome>,
    /// For `environment_error` and `sandbox_error`: what went wrong ("the worker's Python has
    /// no module named 'torch' ..."); else null.
    #[schema(required)]
    pub outcome_reason: Option<String>,
    /// For `environment_error` and `sandbox_error`: how to fix the worker (or the script)
    /// before re-queueing the job; else null.
    #[schema(required)]
    pub outcome_fix: Option<String>,
    /// What the run ran on.
    #[schema(required)]
    pub environment: Option<RunEnvironment>,
    #[schema(required)]
    pub sandbox: Option<Sandbox>,
    #[schema(required)]
    pub worker: Option<String>,
    #[schema(required)]
    pub reproduction_id: Option<i64>,
    #[schema(required)]
    pub dead_reason: Option<String>,
    #[schema(required)]
    pub error: Option<String>,
    #[schema(required)]
    pub requeued_from: Option<i64>,
}

/// Where a report's headline category comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CategorySource {
    /// The uploaded log's classification.
    Log,
    /// A reproduction that named a more specific root cause.
    Reproduction,
}

/// `GET /api/v1/reports/{id}` response.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReportDetail {
    pub id: i64,
    pub url: String,
    pub created_at: crate::time::Timestamp,
    pub project: String,
    pub job_url: String,
    pub commit: String,
    pub branch: String,
    pub environment: String,
    /// The version of the build the log comes from (`meta.version`), or empty.
    #[serde(default)]
    #[schema(required)]
    pub version: String,
    pub filename: String,
    pub log_bytes: i64,
    pub log_lines: i64,
    pub has_script: bool,
    pub group_id: i64,
    /// Where its group stands: open, resolved (in `resolved_in`), regressed or ignored, and
    /// who it is assigned to, so a report read alone (from CI, a link) says whether its
    /// failure is being handled or came back.
    pub group_state: GroupStanding,
    /// The log's classification (DESIGN.md section 3).
    pub classification: Classification,
    pub fixes: Vec<Fix>,
    /// What fixed this failure before: the newest of `fixes` (its own group's), never a
    /// similar group's.
    #[schema(required)]
    pub known_fix: Option<Fix>,
    /// Other groups whose failure has nearly the same shape, most alike first.
    pub similar: Vec<SimilarFailure>,
    pub reproductions: Vec<Reproduction>,
    /// The headline: the log's, or a more specific reproduction's.
    pub category: Category,
    pub title: String,
    pub category_source: CategorySource,
    /// The log's category when the headline follows a reproduction.
    #[schema(required)]
    pub original_category: Option<Category>,
    /// Set when retention removed the raw log (the report and its classification stay).
    #[serde(default)]
    #[schema(required)]
    pub log_removed: Option<retention::LogRemoved>,
    /// For a run of files: its files, first failure and action.
    #[serde(flatten)]
    pub run: RunFields,
}

impl GroupStanding {
    /// How a person reads it: `open`, `resolved in v2.1.0`, `regressed`, `ignored`.
    #[must_use]
    pub fn words(&self) -> String {
        if self.resolved_in.is_empty() || self.state != crate::api_types::GroupState::Resolved {
            self.state.as_str().to_owned()
        } else {
            format!("resolved in {}", self.resolved_in)
        }
    }
}

/// A report's group as triage left it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GroupStanding {
    pub state: crate::api_types::GroupState,
    /// The commit or version a resolution names; empty when none.
    pub resolved_in: String,
    /// The assignee's name; empty for nobody.
    pub assignee: String,
}
