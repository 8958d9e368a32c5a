//! The use cases, between the edges (`web`, the CLI commands) and the engine and storage:
//! upload a report, reproduce it on a GPU worker, search, triage groups (state, assignee,
//! history, merges) and fixes, team rules and reclassification, tokens, webhooks, retention. Each
//! function takes
//! typed input, opens and owns its transaction,
//! calls the pure `ingest`/`rules` and the `storage` statements, and returns typed output; the
//! HTTP handlers (JSON and HTML alike) only extract, call one of them and render.

pub mod group_merge;
pub mod group_triage;
pub mod group_unmerge;
pub mod job_run;
pub mod log_objects;
pub mod logfind;
pub mod logstore;
pub mod oidc;
pub mod people;
pub mod project;
pub mod reports;
pub mod reproduce;
pub mod retention;
pub mod search;
pub mod similar;
pub mod team_rules;
pub mod tokens;
pub mod triage;
pub mod upload;
pub mod webhooks;

use crate::api_types::ErrorCode;
pub use crate::storage::Db;

use crate::storage::DbError;

/// Why a use case refused or failed; the web layer maps each to a status.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The thing named does not exist.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The thing named existed and was removed on purpose (410: a log retention removed).
    #[error("{0}")]
    Gone(String),
    /// Malformed input (400: a query out of bounds).
    #[error("{1}")]
    Malformed(ErrorCode, String),
    /// Well-formed but unacceptable input (422).
    #[error("{1}")]
    Invalid(ErrorCode, String),
    /// The caller may not do this (403: a member asking for an admin-scope token).
    #[error("{0}")]
    Forbidden(String),
    /// Input over a size cap (413).
    #[error("{0}")]
    TooLarge(String),
    /// Input of the wrong kind (415: a binary log).
    #[error("{0}")]
    Unsupported(String),
    /// The request conflicts with the current state (409: a lost lease, an existing id).
    #[error("{1}")]
    Conflict(ErrorCode, String),
    /// The group asked for was merged into another, which holds its reports now (the API
    /// answers 308 to the other's URL, the portal redirects there).
    #[error("group {group} was merged into group {into}")]
    Merged {
        /// The group asked for.
        group: i64,
        /// The group it was merged into.
        into: i64,
    },
    /// The credentials the request came with were revoked (or their person disabled) before
    /// its work could be stored (401): nothing was stored.
    #[error("the credentials of this request were revoked while it was in flight")]
    Revoked,
    /// The database failed or is unreachable.
    #[error(transparent)]
    Db(#[from] DbError),
    /// An unexpected failure (a blocking task panicked, an encoding failed).
    #[error("internal error: {0}")]
    Internal(#[source] anyhow::Error),
}

impl From<sqlx::Error> for Error {
    fn from(err: sqlx::Error) -> Self {
        Error::Db(err.into())
    }
}

/// Runs CPU-bound work (classification, compression) off the async threads, inside the
/// caller's span, so what it logs still names the request and the use case.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Error> {
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || span.in_scope(work))
        .await
        .map_err(|e| Error::Internal(e.into()))
}
