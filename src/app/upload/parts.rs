//! The parts of an API upload as the web layer received them: the log spooled under its cap,
//! the script and `meta` bytes as sent. The web layer only reads the multipart body (caps,
//! field names, spooling); what the parts mean is checked here, once, in the order a client
//! can act on: the script, then whether a log came at all, then `meta`. So an upload walks
//! web → app → (ingest, rules, storage) and back, with no check of the parts in between.

use std::sync::Arc;

use super::{Limits, Meta, Upload, Uploaded, Uploader, check_script, upload};
use crate::api_types::ErrorCode;
use crate::app::Error;
use crate::rules::Ruleset;
use crate::storage::Db;

/// An API upload's parts as received, unchecked.
#[derive(Debug, Default)]
pub struct ReceivedParts {
    /// The `log` part spooled under its cap, and its file name (`None`: no `log` part came).
    pub log: Option<(std::fs::File, String)>,
    /// The `script` part's bytes.
    pub script: Option<Vec<u8>>,
    /// The `meta` part's bytes (empty: none came).
    pub meta_raw: Vec<u8>,
    /// Further `log` parts: with them the upload is a run of files (`app::job_run`).
    pub more_logs: Vec<(std::fs::File, String)>,
    /// An `archive` part: the upload is a run of its members (`app::job_run`).
    pub archive: Option<(std::fs::File, String)>,
}

impl ReceivedParts {
    /// The upload the parts stand for: 422 `bad_script` for a script [`check_script`] refuses,
    /// 400 `missing_log` without a `log` part, 422 `bad_meta` for `meta` [`Meta::parse`]
    /// refuses (in that order).
    fn into_upload(self, limits: &Limits) -> Result<Upload, Error> {
        let script = match self.script {
            Some(bytes) => Some(check_script(&bytes, limits)?),
            None => None,
        };
        let (log, filename) = self.log.ok_or_else(|| {
            Error::Malformed(
                ErrorCode::MissingLog,
                "the multipart field `log` (the log file) is required".into(),
            )
        })?;
        let meta = if self.meta_raw.is_empty() {
            Meta::default()
        } else {
            Meta::parse(&self.meta_raw)?
        };
        Ok(Upload {
            log,
            filename,
            script,
            meta,
            meta_raw: self.meta_raw,
        })
    }
}

impl ReceivedParts {
    /// The run the parts stand for: several `log` parts or one `archive` part (422
    /// `bad_archive` for both), checked as [`ReceivedParts::into_upload`] checks a log's.
    fn into_run(self, limits: &Limits) -> Result<crate::app::job_run::RunUpload, Error> {
        use crate::app::job_run::{RunSource, RunUpload};
        let script = match self.script {
            Some(bytes) => Some(check_script(&bytes, limits)?),
            None => None,
        };
        let source = match (self.archive, self.log) {
            (Some(_), Some(_)) => {
                return Err(Error::Invalid(
                    ErrorCode::BadArchive,
                    "send either `log` parts or one `archive` part, not both".into(),
                ));
            }
            (Some((file, name)), None) => RunSource::Archive(file, name),
            (None, log) => RunSource::Logs(log.into_iter().chain(self.more_logs).collect()),
        };
        let meta = if self.meta_raw.is_empty() {
            Meta::default()
        } else {
            Meta::parse(&self.meta_raw)?
        };
        Ok(RunUpload {
            source,
            script,
            meta,
            meta_raw: self.meta_raw,
        })
    }
}

/// Checks the received `parts` and stores the upload they stand for (see [`upload`]); `hold`
/// is kept until the upload's blocking work ends.
#[tracing::instrument(name = "upload::upload_parts", skip_all, fields(token_id = uploader.token_id))]
pub async fn upload_parts(
    db: &Db,
    ruleset: Arc<Ruleset>,
    limits: &Limits,
    uploader: Uploader,
    parts: ReceivedParts,
    hold: impl Send + 'static,
) -> Result<Uploaded, Error> {
    if parts.archive.is_some() || !parts.more_logs.is_empty() {
        let run = parts.into_run(limits)?;
        return crate::app::job_run::upload_run(db, ruleset, limits, uploader, run, hold).await;
    }
    let upload_ = parts.into_upload(limits)?;
    upload(db, ruleset, uploader, upload_, hold).await
}
