//! A report submitted through the portal's start page. The web layer reads the form as it
//! streams in (the log spooled to a temporary file under its cap, so nothing large is held in
//! memory) and hands over its fields; here they are checked as the API checks its parts and
//! stored by [`upload::upload`]. A submission refused for what it holds comes back with the
//! start page's newest reports, so the page shows the form again from this one call.

use std::sync::Arc;

use crate::api_types::ErrorCode;
use crate::app::Error;
use crate::app::upload::{self, Limits, Meta, Upload, Uploaded, Uploader};
use crate::rules::Ruleset;
use crate::storage::Db;
use crate::storage::reports::ReportSummary;

/// The start page's form as the web layer read it: the fields as typed, the log spooled.
#[derive(Debug, Default)]
pub struct FormReport {
    /// The project, trimmed.
    pub project: String,
    /// The runs field, trimmed (empty: one run).
    pub repeats: String,
    /// The first non-empty log (a chosen file or the pasted text), spooled under its cap, and
    /// its file name.
    pub log: Option<(std::fs::File, String)>,
    /// The first script that is not blank, unchecked.
    pub script: Option<Vec<u8>>,
}

impl FormReport {
    /// The upload the form stands for: 422 `empty_log` without a log, 422 `bad_script` for a
    /// script [`upload::check_script`] refuses, 422 `bad_meta` for runs that are not a number
    /// from 1 to [`upload::MAX_REPEATS`] or a project [`Meta::parse`] refuses (in that order).
    fn into_upload(self, limits: &Limits) -> Result<Upload, Error> {
        let (log, filename) = self.log.ok_or_else(|| {
            Error::Invalid(
                ErrorCode::EmptyLog,
                "paste a log or choose a file to upload".into(),
            )
        })?;
        let script = (self.script)
            .map(|b| upload::check_script(&b, limits))
            .transpose()?;
        let repeats: u8 = match self.repeats.as_str() {
            "" => 1,
            n => n.parse().map_err(|_| {
                Error::Invalid(
                    ErrorCode::BadMeta,
                    format!("runs must be a number from 1 to {}", upload::MAX_REPEATS),
                )
            })?,
        };
        // The form's fields go through the same checks as the API's `meta` part.
        let meta_raw = serde_json::json!({ "project": self.project, "repeats": repeats })
            .to_string()
            .into_bytes();
        let meta = Meta::parse(&meta_raw)?;
        Ok(Upload {
            log,
            filename,
            script,
            meta,
            meta_raw,
        })
    }
}

/// What a submission came to.
#[derive(Debug)]
pub enum Submitted {
    /// Stored, or found stored already (a duplicate).
    Stored(Box<Uploaded>),
    /// Refused for what it holds (no log, a binary log, over a cap, a bad script or runs
    /// value): why, and the newest reports the start page lists beside the form again.
    Refused {
        /// Why: a 4xx the page shows beside the form, with its status.
        reason: Error,
        /// The start page's newest reports ([`super::start_list`]).
        recent: Vec<ReportSummary>,
    },
}

/// Stores the report `form` holds, as `uploader`; `hold` is kept until the upload's blocking
/// work ends (see [`upload::upload`]). A refusal for what the form holds is
/// [`Submitted::Refused`] with the start page's list ([`super::start_list`], read only when
/// `may_read`); any other failure is an error.
#[tracing::instrument(name = "reports::submit", skip_all, fields(token_id = uploader.token_id))]
pub async fn submit(
    db: &Db,
    ruleset: Arc<Ruleset>,
    limits: &Limits,
    uploader: Uploader,
    form: FormReport,
    hold: impl Send + 'static,
    may_read: bool,
) -> Result<Submitted, Error> {
    let stored = match form.into_upload(limits) {
        Ok(upload) => upload::upload(db, ruleset, uploader, upload, hold).await,
        Err(refused) => {
            // The request's slot is not held while the page is read.
            drop(hold);
            Err(refused)
        }
    };
    match stored {
        Ok(uploaded) => Ok(Submitted::Stored(Box::new(uploaded))),
        Err(reason @ (Error::Invalid(..) | Error::Unsupported(_) | Error::TooLarge(_))) => {
            Ok(Submitted::Refused {
                recent: super::start_list(db, may_read).await?,
                reason,
            })
        }
        Err(e) => Err(e),
    }
}
