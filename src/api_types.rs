//! The wire contract of API v1 (DESIGN.md section 5) as plain serde types, written once and
//! shared by the server's handlers, the GPU worker's client and the `upload` command, so the
//! two sides of each request cannot drift apart. Each derives its OpenAPI schema (utoipa), so
//! `/api/v1/openapi.json` describes exactly these types. Pure: no I/O, no web or storage types.
//!
//! The error body is here; each resource's types are in `api_types/`, and those of jobs, runs,
//! reports and groups are re-exported so a client names them all as `api_types::X`.

use serde::{Deserialize, Serialize};

pub mod filters;
mod group_bulk;
pub use group_bulk::{BulkAnswer, BulkChange, BulkMerge, GroupTriageItem, MAX_BULK};
mod groups;
pub use groups::{
    GroupAction, GroupDetail, GroupEvent, GroupList, GroupListItem, GroupPatch, GroupReport,
    GroupState, GroupTags, MergeRequest, TagCount,
};
mod jobs;
pub use jobs::{
    ClaimRequest, ClaimWait, ClaimedJob, HeartbeatReply, JobResult, JobState, LeaseRequest,
    MAX_CLAIM_WAIT_SECS, Needs, ResultReply, Sandbox,
};
pub mod people;
mod reports;
pub use reports::{
    CategorySource, Fix, GroupStanding, QueuedJob, ReportCreated, ReportDetail, Reproduction,
    RunFields, SimilarFailure,
};
pub mod retention;
pub mod rules;
mod runs;
pub use runs::{CpuRun, MAX_REPEATS, RunEnvironment, RunOutcome};
mod schemas;
pub mod search;
pub mod tokens;
pub mod webhooks;

/// The stable snake_case `code` of an error body (`{"error": {"code", "message"}}`), which
/// clients match on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum ErrorCode {
    AlreadyUndone,
    BadArchive,
    BadBody,
    BadBulk,
    BadDuration,
    BadFix,
    BadForm,
    BadGpu,
    BadIdempotencyKey,
    BadJson,
    BadMerge,
    BadMeta,
    BadMultipart,
    BadQuery,
    BadSandbox,
    BadScript,
    BadTriage,
    BadWorker,
    BodyTooSlow,
    Busy,
    ChangedSince,
    ClientBusy,
    EmptyLog,
    Forbidden,
    Gone,
    GroupMerged,
    HeadersTooLarge,
    IdempotencyKeyReused,
    Internal,
    InvalidPerson,
    InvalidRetention,
    InvalidRule,
    InvalidToken,
    InvalidWebhook,
    JobPending,
    LastAdmin,
    LeaseLost,
    LowersAccuracy,
    MethodNotAllowed,
    MissingLog,
    NoGpu,
    NotFound,
    NotMerged,
    Overloaded,
    RateLimited,
    RuleExists,
    TokenBusy,
    TooLarge,
    TooManyTokens,
    Unauthorized,
    Unavailable,
    UnexpectedField,
    UnsupportedMediaType,
}

impl ErrorCode {
    /// The wire spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::AlreadyUndone => "already_undone",
            ErrorCode::BadArchive => "bad_archive",
            ErrorCode::BadBody => "bad_body",
            ErrorCode::BadBulk => "bad_bulk",
            ErrorCode::BadDuration => "bad_duration",
            ErrorCode::BadFix => "bad_fix",
            ErrorCode::BadForm => "bad_form",
            ErrorCode::BadGpu => "bad_gpu",
            ErrorCode::BadIdempotencyKey => "bad_idempotency_key",
            ErrorCode::BadJson => "bad_json",
            ErrorCode::BadMerge => "bad_merge",
            ErrorCode::BadMeta => "bad_meta",
            ErrorCode::BadMultipart => "bad_multipart",
            ErrorCode::BadQuery => "bad_query",
            ErrorCode::BadSandbox => "bad_sandbox",
            ErrorCode::BadScript => "bad_script",
            ErrorCode::BadTriage => "bad_triage",
            ErrorCode::BadWorker => "bad_worker",
            ErrorCode::BodyTooSlow => "body_too_slow",
            ErrorCode::Busy => "busy",
            ErrorCode::ChangedSince => "changed_since",
            ErrorCode::ClientBusy => "client_busy",
            ErrorCode::EmptyLog => "empty_log",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::Gone => "gone",
            ErrorCode::GroupMerged => "group_merged",
            ErrorCode::HeadersTooLarge => "headers_too_large",
            ErrorCode::IdempotencyKeyReused => "idempotency_key_reused",
            ErrorCode::Internal => "internal",
            ErrorCode::InvalidPerson => "invalid_person",
            ErrorCode::InvalidRetention => "invalid_retention",
            ErrorCode::InvalidRule => "invalid_rule",
            ErrorCode::InvalidToken => "invalid_token",
            ErrorCode::InvalidWebhook => "invalid_webhook",
            ErrorCode::JobPending => "job_pending",
            ErrorCode::LastAdmin => "last_admin",
            ErrorCode::LeaseLost => "lease_lost",
            ErrorCode::LowersAccuracy => "lowers_accuracy",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::MissingLog => "missing_log",
            ErrorCode::NoGpu => "no_gpu",
            ErrorCode::NotFound => "not_found",
            ErrorCode::NotMerged => "not_merged",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::RuleExists => "rule_exists",
            ErrorCode::TokenBusy => "token_busy",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::TooManyTokens => "too_many_tokens",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::UnexpectedField => "unexpected_field",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every JSON error body (DESIGN.md section 5): `{"error": {"code", "message"}}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// The `error` of an [`ErrorBody`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// Stable; clients match on it.
    pub code: ErrorCode,
    /// For people; may change between releases.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_serialize_as_their_spelling() {
        for code in [
            ErrorCode::BadJson,
            ErrorCode::IdempotencyKeyReused,
            ErrorCode::LeaseLost,
        ] {
            let json = serde_json::to_value(code).unwrap_or_default();
            assert_eq!(json.as_str(), Some(code.as_str()));
        }
    }
}
