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
    let upload_ = parts.into_upload(limits)?;
    upload(db, ruleset, uploader, upload_, hold).await
}
