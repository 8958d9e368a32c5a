//! The retention wire types: a project's settings as `PUT /api/v1/projects/{project}/retention`
//! takes them, the retention in force for a project with what was removed from it, the
//! instance's overview (`GET /api/v1/retention`), and the note a report carries when its raw log
//! was removed.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::time::Timestamp;

/// `PUT /api/v1/projects/{project}/retention`: days to keep raw logs and whole reports. Each is
/// a whole number of days from 0 (keep forever) to [`MAX_DAYS`], or `null`/absent to follow the
/// instance default. Kept as raw JSON values so that a string, a fraction or a negative number is
/// answered 422 with the field named (`app::retention` checks them), not a parser's message.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetentionRequest {
    /// Days to keep raw logs (0: forever); null or absent: the instance default.
    #[serde(default)]
    #[schema(value_type = Option<u32>, maximum = 36500)]
    pub log_days: Value,
    /// Days to keep whole reports (0: forever); null or absent: the instance default.
    #[serde(default)]
    #[schema(value_type = Option<u32>, maximum = 36500)]
    pub report_days: Value,
}

/// The most days a setting may name (100 years).
pub const MAX_DAYS: u32 = 36_500;

/// Days to keep raw logs and whole reports; 0: forever.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Days {
    pub log_days: u32,
    pub report_days: u32,
}

/// A project's own settings; `None`: the instance default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProjectSetting {
    #[schema(required)]
    pub log_days: Option<u32>,
    #[schema(required)]
    pub report_days: Option<u32>,
}

/// What retention removed, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RemovedCounts {
    /// Raw logs removed from reports that stay.
    pub logs: i64,
    /// Whole reports deleted.
    pub reports: i64,
    /// Compressed log bytes deleted (both kinds).
    pub bytes: i64,
}

/// The retention of one project (lowercase; `""` for reports uploaded without one).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProjectRetention {
    pub project: String,
    /// In force: the project's own setting, else the instance default.
    #[serde(flatten)]
    pub days: Days,
    /// The project's own setting (`null` fields follow the default).
    pub set: ProjectSetting,
    /// Removed from this project so far.
    pub removed: RemovedCounts,
    /// When retention last removed something from it.
    #[schema(required)]
    pub last_removed_at: Option<Timestamp>,
}

/// One retention pass (any replica).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RetentionRun {
    pub id: i64,
    pub started_at: Timestamp,
    /// `null` while it runs (or when its server stopped mid-pass).
    #[schema(required)]
    pub finished_at: Option<Timestamp>,
    pub removed: RemovedCounts,
    /// Why it stopped early; empty when it finished.
    pub error: String,
}

/// `GET /api/v1/retention`: the instance defaults, every project's retention, the latest passes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RetentionOverview {
    pub defaults: Days,
    /// Seconds between passes of this server's background task.
    pub interval_secs: u64,
    /// Reports per batch (one transaction each).
    pub batch: u32,
    pub projects: Vec<ProjectRetention>,
    pub runs: Vec<RetentionRun>,
}

/// On a report whose raw log retention removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LogRemoved {
    pub at: Timestamp,
    /// The retention in days that removed it.
    #[schema(required)]
    pub after_days: Option<u32>,
}
