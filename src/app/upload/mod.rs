//! Upload a report: an uploaded log (already spooled to a temporary file under its cap) is
//! checked, scrubbed of secrets, classified by the rule engine and compressed into a
//! `NewReport`, then stored in one transaction with its group, its idempotency key, the
//! reproduction job for an attached script and the webhook events it causes (a new group, a
//! regression). The API and the portal's form both call [`upload`]; this is the one place that
//! knows the order of those steps.

mod parts;
mod pipeline;
pub mod search_doc;

use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};

pub use parts::{ReceivedParts, upload_parts};
pub use pipeline::prepare;

use super::{Error, blocking};
use crate::api_types::{ErrorCode, JobState, QueuedJob};
use crate::app::webhooks::event::{UploadOutcome, report_facts, upload_events};
use crate::ingest::{self, Reject};
use crate::rules::{Classification, Ruleset};
use crate::storage::reports::{self as store, IdempotencyRecord, InsertOutcome};
use crate::storage::{Db, DbError};

/// Size caps (SECURITY.md item 1). Checked while streaming, before anything is stored.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Largest accepted log, in bytes.
    pub max_log_bytes: u64,
    /// Largest accepted reproduction script, in bytes.
    pub max_script_bytes: usize,
    /// Largest accepted `meta` JSON, in bytes.
    pub max_meta_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_log_bytes: 128 << 20,
            max_script_bytes: 64 << 10,
            max_meta_bytes: 64 << 10,
        }
    }
}

/// Uploader metadata (the `meta` part): where the log comes from.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ReportMeta)]
pub struct Meta {
    /// Project (repository, team); duplicates are detected per project.
    #[serde(default)]
    pub project: String,
    /// Link to the CI job.
    #[serde(default)]
    pub job_url: String,
    /// Commit under test.
    #[serde(default)]
    pub commit: String,
    /// Branch under test.
    #[serde(default)]
    pub branch: String,
    /// Free-form environment description (e.g. `python -m torch.utils.collect_env`).
    #[serde(default)]
    pub environment: String,
    /// Version of the build under test (`2.1.0`, `v2.1.0rc1`): tells whether a report in a
    /// group resolved in a version comes from a build that should contain the fix.
    #[serde(default)]
    pub version: String,
    /// How many times a worker runs the attached script (1-5), to tell a deterministic failure
    /// from a flaky one.
    #[serde(default = "one_run")]
    pub repeats: u8,
    /// What the reproduction needs: `gpu`, or `any` worker (one without a GPU runs it under CPU
    /// translation). Unset: decided from the log's category.
    #[serde(default)]
    pub needs: Option<Needs>,
}

pub use crate::api_types::Needs;

impl Default for Meta {
    fn default() -> Self {
        Meta {
            project: String::new(),
            job_url: String::new(),
            commit: String::new(),
            branch: String::new(),
            environment: String::new(),
            version: String::new(),
            repeats: 1,
            needs: None,
        }
    }
}

fn one_run() -> u8 {
    1
}

pub use crate::api_types::MAX_REPEATS;

/// Why an upload is refused; each maps to a 4xx.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// The log itself is unacceptable (empty, too large, binary).
    #[error(transparent)]
    Log(#[from] Reject),
    /// The `meta` part is not a JSON object of the known string fields, or a field is too long.
    #[error("meta: {0}")]
    Meta(String),
    /// The script is too large, not UTF-8, or carries a secret.
    #[error("script: {0}")]
    Script(String),
    /// Reading the spooled upload failed.
    #[error("reading the upload: {0}")]
    Io(#[from] std::io::Error),
}

impl Meta {
    /// Where a report with this metadata and file name came from, as search keeps it.
    #[must_use]
    pub fn origin<'a>(&'a self, filename: &'a str) -> search_doc::Origin<'a> {
        search_doc::Origin {
            filename,
            project: &self.project,
            branch: &self.branch,
            commit: &self.commit,
            job_url: &self.job_url,
        }
    }

    /// Parses and validates the `meta` part.
    pub fn parse(bytes: &[u8]) -> Result<Meta, UploadError> {
        let meta: Meta = serde_json::from_slice(bytes).map_err(|e| {
            UploadError::Meta(format!(
                "{e} (expected a JSON object with string fields project, job_url, commit, branch, environment, version, a number repeats and needs \"gpu\" or \"any\")"
            ))
        })?;
        super::project::check_name(&meta.project).map_err(UploadError::Meta)?;
        for (name, value, max) in [
            ("job_url", &meta.job_url, 2000),
            ("commit", &meta.commit, 200),
            ("branch", &meta.branch, 300),
            ("environment", &meta.environment, 32 << 10),
        ] {
            if value.len() > max {
                return Err(UploadError::Meta(format!(
                    "{name} is longer than {max} bytes"
                )));
            }
            if value.contains('\0') {
                return Err(UploadError::Meta(format!("{name} contains a NUL byte")));
            }
        }
        let version = meta.version.trim();
        if !version.is_empty() && super::group_triage::regression::Version::parse(version).is_none()
        {
            return Err(UploadError::Meta(format!(
                "version must look like 2.1, 2.1.0 or v2.1.0rc1 (numbers with dots, at most \
                 {} characters), got {:?}",
                super::group_triage::regression::MAX_VERSION_LEN,
                version.chars().take(60).collect::<String>()
            )));
        }
        if !(1..=MAX_REPEATS).contains(&meta.repeats) {
            return Err(UploadError::Meta(format!(
                "repeats must be 1 to {MAX_REPEATS}"
            )));
        }
        let url = &meta.job_url;
        if !(url.is_empty() || url.starts_with("https://") || url.starts_with("http://")) {
            return Err(UploadError::Meta("job_url must be an http(s) URL".into()));
        }
        Ok(meta)
    }

    /// The same fields with secrets replaced by `[REDACTED:kind]` (a CI job URL with
    /// credentials in it, a token pasted into the environment text).
    #[must_use]
    pub fn scrubbed(self) -> Meta {
        let clean = |s: String| match ingest::scrub::scrub(&s).text {
            std::borrow::Cow::Borrowed(_) => s,
            std::borrow::Cow::Owned(clean) => clean,
        };
        Meta {
            project: clean(self.project),
            job_url: clean(self.job_url),
            commit: clean(self.commit),
            branch: clean(self.branch),
            environment: clean(self.environment),
            version: self.version.trim().to_owned(),
            repeats: self.repeats,
            needs: self.needs,
        }
    }
}

/// Checks a reproduction script: UTF-8 text under the cap, with no secret in it (a script is
/// run on shared GPU hosts and shown to everyone, so it is rejected rather than scrubbed).
pub fn check_script(bytes: &[u8], limits: &Limits) -> Result<String, UploadError> {
    if bytes.len() > limits.max_script_bytes {
        return Err(UploadError::Script(format!(
            "larger than the {}-byte limit",
            limits.max_script_bytes
        )));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(UploadError::Script("is empty".into()));
    }
    let text =
        std::str::from_utf8(bytes).map_err(|_| UploadError::Script("is not UTF-8 text".into()))?;
    if text.contains('\0') {
        return Err(UploadError::Script("contains a NUL byte".into()));
    }
    if let Some(kind) = ingest::scrub::find_secret(text) {
        return Err(UploadError::Script(format!(
            "contains what looks like a secret ({kind}); remove it and upload again"
        )));
    }
    Ok(text.to_owned())
}

impl From<UploadError> for Error {
    /// Empty 422, oversize 413, binary 415, bad meta or script 422.
    fn from(e: UploadError) -> Self {
        match e {
            UploadError::Log(r @ (Reject::Empty | Reject::Blank)) => {
                Error::Invalid(ErrorCode::EmptyLog, r.to_string())
            }
            UploadError::Log(r @ Reject::TooLarge { .. }) => Error::TooLarge(r.to_string()),
            UploadError::Log(Reject::Binary) => {
                Error::Unsupported("the log looks binary, not text".into())
            }
            UploadError::Meta(m) => Error::Invalid(ErrorCode::BadMeta, format!("meta: {m}")),
            UploadError::Script(m) => Error::Invalid(ErrorCode::BadScript, format!("script: {m}")),
            UploadError::Io(e) => Error::Internal(e.into()),
        }
    }
}

/// The parts of an upload (API or portal form), the log spooled under its cap.
#[derive(Debug)]
pub struct Upload {
    pub log: std::fs::File,
    pub filename: String,
    pub script: Option<String>,
    pub meta: Meta,
    /// The `meta` part as sent, part of what an idempotency key covers.
    pub meta_raw: Vec<u8>,
}

/// What an upload came to.
#[derive(Clone, Debug)]
pub struct Uploaded {
    pub report_id: i64,
    pub group_id: i64,
    /// The same bytes were already stored for the project: this is that report.
    pub duplicate: bool,
    /// The first answer to this idempotency key, replayed (nothing new was stored).
    pub replayed: bool,
    /// The reproduction queued for the script.
    pub job: Option<QueuedJob>,
    /// The stored report's classification (the first upload's, for a duplicate or replay).
    pub classification: Classification,
    /// The known fix of this failure: the newest fix of the report's own group; a similar
    /// group's fix is never offered (`app::similar::known_fix`).
    pub known_fix: Option<crate::api_types::Fix>,
    /// Other groups whose failure has nearly the same shape.
    pub similar: Vec<crate::app::similar::SimilarGroup>,
    /// Where the report's group stands after the upload (issue 39 item 3).
    pub group_state: Option<crate::storage::group_triage::Triage>,
    /// The run's story, for a report uploaded as a run (issue 41).
    pub run: Option<crate::rules::run::RunStory>,
}

/// Who uploads and how: the token, and the request's `Idempotency-Key` if it sent one.
#[derive(Clone, Debug)]
pub struct Uploader {
    /// The uploading token (`None`: a person signed in through the identity provider).
    pub token_id: Option<i64>,
    /// The person signed in, when there is no token.
    pub person_id: Option<i64>,
    pub idempotency_key: Option<String>,
}

/// Whether the uploader's credentials still hold (SECURITY.md item 24), with their row locked
/// until the transaction ends: an upload whose token is revoked, or whose person is disabled,
/// while it streams or classifies stores nothing, whichever server took the revocation.
async fn credentials_hold(
    tx: &mut sqlx::PgConnection,
    uploader: &Uploader,
) -> Result<bool, DbError> {
    match (uploader.token_id, uploader.person_id) {
        (Some(token), _) => crate::storage::tokens::lock_live(tx, token).await,
        (None, Some(person)) => Ok(crate::storage::people::lock_enabled(tx, person)
            .await?
            .is_some()),
        (None, None) => Ok(true),
    }
}

/// Classifies a log held in memory without storing it (`POST /api/v1/classify`): refused as
/// an upload would be (empty, blank, binary: `ingest::stream::check_whole`), classified on a
/// blocking thread. Nothing is scrubbed because nothing is kept.
#[tracing::instrument(name = "upload::classify_only", skip_all, fields(bytes = body.as_ref().len()))]
pub async fn classify_only(
    ruleset: Arc<Ruleset>,
    body: impl AsRef<[u8]> + Send + 'static,
) -> Result<Classification, Error> {
    ingest::stream::check_whole(body.as_ref()).map_err(UploadError::from)?;
    blocking(move || ruleset.classify_bytes("-", body.as_ref())).await
}

/// Runs the pipeline on a spooled upload and stores it in one transaction (see
/// [`store::insert_report`]). `hold` is kept alive until the blocking work ends (the web layer's
/// in-flight slot), so an abandoned request cannot free its slot while its work goes on.
#[tracing::instrument(name = "upload::upload", skip_all, fields(token_id = uploader.token_id, idempotency_key = uploader.idempotency_key.is_some(), project = tracing::field::Empty, report_id = tracing::field::Empty, group_id = tracing::field::Empty))]
pub async fn upload(
    db: &Db,
    ruleset: Arc<Ruleset>,
    uploader: Uploader,
    upload: Upload,
    hold: impl Send + 'static,
) -> Result<Uploaded, Error> {
    let Upload {
        log,
        filename,
        script,
        meta,
        meta_raw,
    } = upload;
    let script_for_key = script.clone().unwrap_or_default();
    let new = blocking(move || {
        use std::io::Seek;
        let _hold = hold;
        let mut log = log;
        log.rewind()?;
        prepare(&ruleset, log, &filename, meta, script)
    })
    .await??;
    store(db, uploader, new, &script_for_key, &meta_raw, None).await
}

/// Stores a prepared report (a log's, or a run's with its `run` story, `app::job_run`) in one
/// transaction: its group, its idempotency key (over the log's hash, the script, `meta_raw`
/// and the file name), the triage and webhook events it causes.
pub(crate) async fn store(
    db: &Db,
    uploader: Uploader,
    mut new: crate::storage::reports::NewReport,
    script_for_key: &str,
    meta_raw: &[u8],
    run: Option<crate::rules::run::RunStory>,
) -> Result<Uploaded, Error> {
    let span = tracing::Span::current();
    // Scrubbed by `prepare`, like every stored field.
    span.record("project", new.project.as_str());
    new.token_id = uploader.token_id;
    // Idempotency keys belong to a token (API retries); the portal sends none.
    let idem = (uploader.idempotency_key.clone().zip(uploader.token_id)).map(|(key, token_id)| {
        let mut h = Sha256::new();
        h.update(&new.log_sha256);
        h.update([0]);
        h.update(script_for_key.as_bytes());
        h.update([0]);
        h.update(meta_raw);
        // The file name is part of the request too: a retry resends it unchanged.
        h.update([0]);
        h.update(new.filename.as_bytes());
        IdempotencyRecord {
            token_id,
            key,
            request_sha256: h.finalize().to_vec(),
        }
    });
    // With `--log-store`, the chunks go to the object store now, before the transaction.
    super::log_objects::place(db, &mut new).await?;
    let result = store_report(db, &uploader, &new, idem.as_ref(), run).await;
    if result.is_err() {
        // What was written for a report that was not stored goes at the next sweep.
        super::log_objects::abandon(db, &new.log_place).await;
        super::log_objects::abandon_script(db, &new.script_place).await;
    }
    result
}

/// Stores a prepared report in one transaction (see [`upload`]).
async fn store_report(
    db: &Db,
    uploader: &Uploader,
    new: &store::NewReport,
    idem: Option<&IdempotencyRecord>,
    run: Option<crate::rules::run::RunStory>,
) -> Result<Uploaded, Error> {
    let span = tracing::Span::current();
    let mut tx = db.pool().begin().await.map_err(DbError::from)?;
    if !credentials_hold(&mut tx, uploader).await? {
        return Err(Error::Revoked);
    }
    let stored = match store::insert_report(&mut tx, new, idem).await? {
        InsertOutcome::Stored(s) => s,
        InsertOutcome::KeyReused => {
            tx.rollback().await.map_err(DbError::from)?;
            return Err(Error::Invalid(
                ErrorCode::IdempotencyKeyReused,
                "this Idempotency-Key was used with a different request".into(),
            ));
        }
    };
    if let Some(story) = &run
        && !stored.duplicate
        && !stored.replayed
    {
        crate::storage::job_runs::insert_story(&mut *tx, stored.report_id, story).await?;
    }
    // A duplicate or replay answers with the stored run's story, not this request's.
    let run = match run {
        Some(story) if !stored.duplicate && !stored.replayed => Some(story),
        _ => crate::storage::job_runs::get_story(&mut *tx, stored.report_id).await?,
    };
    span.record("report_id", stored.report_id);
    span.record("group_id", stored.group_id);
    let after = if !stored.duplicate && !stored.replayed {
        super::group_triage::after_upload(&mut tx, stored.report_id, stored.group_id).await?
    } else {
        super::group_triage::AfterUpload::default()
    };
    let classification = if stored.duplicate || stored.replayed {
        // The stored report's own classification (the first upload's), not this request's.
        store::get_report(&mut *tx, stored.report_id)
            .await?
            .map_or_else(|| new.classification.clone(), |r| r.classification)
    } else {
        new.classification.clone()
    };
    let own_fixes = crate::storage::groups::group_fixes(&mut *tx, stored.group_id).await?;
    // Read after the regression rule ran: a report that reopened its group says so at once.
    let triage = crate::storage::group_triage::get_triage(&mut *tx, stored.group_id).await?;
    let similar = crate::app::similar::of_signature(
        &mut tx,
        db.nearest_memo(),
        &new.headline.signature,
        stored.group_id,
    )
    .await?;
    let known_fix = crate::app::similar::known_fix(&own_fixes)
        .cloned()
        .map(crate::api_types::Fix::from);
    // Announced in the same transaction: the outbox row commits with the report, or neither.
    let outcome = UploadOutcome {
        new_report: !stored.duplicate && !stored.replayed,
        new_group: stored.new_group,
        regressed: after.regressed,
        reopened: after.reopened,
    };
    let mut report = report_facts(
        stored.report_id,
        (&new.project, &new.branch, &new.commit_sha, &new.job_url),
        &classification,
    );
    if let Some(story) = &run {
        report.action = Some(story.action.clone());
        report.first_failure.clone_from(&story.first_failure);
    }
    let events = upload_events(
        outcome,
        report,
        stored.group_id,
        triage.as_ref(),
        known_fix.as_ref(),
    );
    crate::app::webhooks::enqueue(&mut tx, &events).await?;
    tx.commit().await.map_err(DbError::from)?;
    tracing::info!(
        new_report = outcome.new_report,
        new_group = outcome.new_group,
        regressed = outcome.regressed,
        reopened = outcome.reopened,
        duplicate = stored.duplicate,
        replayed = stored.replayed,
        job_id = stored.job.as_ref().map(|j| j.job_id),
        "report stored"
    );
    Ok(Uploaded {
        group_state: triage,
        known_fix,
        similar,
        report_id: stored.report_id,
        group_id: stored.group_id,
        duplicate: stored.duplicate,
        replayed: stored.replayed,
        job: stored.job,
        classification,
        run,
    })
}

/// Whether an upload queued a job a waiting worker can claim now.
#[must_use]
pub fn queued_a_job(uploaded: &Uploaded) -> bool {
    uploaded
        .job
        .as_ref()
        .is_some_and(|j| j.state == JobState::Queued)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_is_validated() {
        let ok = Meta::parse(br#"{"project":"p","branch":"main","job_url":"https://ci/1"}"#)
            .expect("valid");
        assert_eq!((ok.project.as_str(), ok.branch.as_str()), ("p", "main"));
        let versioned = Meta::parse(br#"{"version":" v2.1.0rc1 "}"#).expect("valid version");
        assert_eq!(versioned.scrubbed().version, "v2.1.0rc1");
        for bad in [
            &b"not json"[..],
            br#"{"project":1}"#,
            br#"{"owner":"x"}"#,
            br#"{"job_url":"javascript:alert(1)"}"#,
            br#"{"version":"latest"}"#,
            br#"{"version":"2.1 beta"}"#,
            br#"[1]"#,
        ] {
            assert!(
                matches!(Meta::parse(bad), Err(UploadError::Meta(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn scripts_with_secrets_or_over_the_cap_are_refused() {
        let limits = Limits::default();
        assert!(check_script(b"import torch\nprint(torch.ones(1).cuda())\n", &limits).is_ok());
        let secret = b"import os\nos.environ['AWS_ACCESS_KEY_ID']='AKIAIOSFODNN7EXAMPLE'\n";
        let err = check_script(secret, &limits)
            .expect_err("secret")
            .to_string();
        assert!(err.contains("secret"), "{err}");
        let big = vec![b'#'; limits.max_script_bytes + 1];
        assert!(check_script(&big, &limits).is_err());
        assert!(check_script(b"\xff\xfe", &limits).is_err());
        assert!(check_script(b"  \n", &limits).is_err());
    }
}
