//! Upload a run: a failed job's artifacts (one log per rank or node, the launcher's and the
//! scheduler's output, the node's dmesg or journal), sent as several `log` parts or one
//! `archive` part (`.tar.gz`, `.tgz`, `.zip`), become one report (issue 41). Each file is
//! classified, the run's story told (the first failure, the consequences, the action), and the
//! report stored through the same transaction as a single log's
//! ([`crate::app::upload::store`]: group, idempotency key, duplicates, webhooks), with the
//! story beside it, so a run is stored whole or not at all.

mod prepare;

use std::io::{Read, Seek};
use std::sync::Arc;

use crate::api_types::ErrorCode;
use crate::app::upload::{Limits, Meta, UploadError, Uploaded, Uploader};
use crate::app::{Error, blocking};
use crate::ingest::archive::{self, ArchiveError, Caps, Kind};
use crate::ingest::{self, Reject};
use crate::rules::Ruleset;
use crate::storage::Db;

/// Where a run's files come from.
#[derive(Debug)]
pub enum RunSource {
    /// Several `log` parts, spooled, with their file names (paths in the run).
    Logs(Vec<(std::fs::File, String)>),
    /// One `archive` part, spooled, with its file name.
    Archive(std::fs::File, String),
}

/// A run as received: its files, the optional script and `meta`.
#[derive(Debug)]
pub struct RunUpload {
    pub source: RunSource,
    pub script: Option<String>,
    pub meta: Meta,
    /// The `meta` part as sent, part of what an idempotency key covers.
    pub meta_raw: Vec<u8>,
}

/// Why a run is refused.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The archive is refused (caps, unsafe members, unreadable).
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    /// A file's text was refused while it was read.
    #[error(transparent)]
    Reject(#[from] Reject),
    /// A `log` part's file name is absolute or climbs out with `..`, or two parts share one.
    #[error("{0}")]
    BadName(String),
    /// No file of the run is text.
    #[error("the run holds no text file ({0} skipped as empty or not text)")]
    NoText(usize),
    /// Reading or compressing failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl From<RunError> for Error {
    /// Caps 413, a non-archive 415, unsafe members, bad names and no text 422.
    fn from(e: RunError) -> Self {
        let message = e.to_string();
        match e {
            RunError::Archive(
                ArchiveError::TooManyFiles { .. }
                | ArchiveError::TooLarge { .. }
                | ArchiveError::Bomb { .. },
            ) => Error::TooLarge(message),
            RunError::Archive(ArchiveError::Unreadable(_)) => Error::Unsupported(message),
            RunError::Archive(ArchiveError::Member { source, .. }) | RunError::Io(source) => {
                Error::Internal(source.into())
            }
            RunError::Archive(_) | RunError::BadName(_) => {
                Error::Invalid(ErrorCode::BadArchive, message)
            }
            RunError::NoText(_) => Error::Invalid(ErrorCode::EmptyLog, message),
            RunError::Reject(r) => UploadError::Log(r).into(),
        }
    }
}

/// Stores a run as one report (see the module doc); `hold` is kept alive until the blocking
/// work ends.
#[tracing::instrument(name = "job_run::upload_run", skip_all, fields(token_id = uploader.token_id, project = tracing::field::Empty, report_id = tracing::field::Empty, group_id = tracing::field::Empty))]
pub async fn upload_run(
    db: &Db,
    ruleset: Arc<Ruleset>,
    limits: &Limits,
    uploader: Uploader,
    run: RunUpload,
    hold: impl Send + 'static,
) -> Result<Uploaded, Error> {
    let RunUpload {
        source,
        script,
        meta,
        meta_raw,
    } = run;
    let script_for_key = script.clone().unwrap_or_default();
    let caps = Caps {
        max_decoded_bytes: limits.max_log_bytes,
        ..Caps::default()
    };
    let (new, story) = blocking(move || {
        let _hold = hold;
        prepare_run(&ruleset, source, &caps, meta, script)
    })
    .await??;
    tracing::info!(
        files = story.files.len(),
        action = story.action.kind.as_str(),
        "run prepared"
    );
    crate::app::upload::store(db, uploader, new, &script_for_key, &meta_raw, Some(story)).await
}

/// Reads, classifies and joins a run's files (blocking).
pub fn prepare_run(
    ruleset: &Ruleset,
    source: RunSource,
    caps: &Caps,
    meta: Meta,
    script: Option<String>,
) -> Result<
    (
        crate::storage::reports::NewReport,
        crate::rules::run::RunStory,
    ),
    RunError,
> {
    let mut asm = prepare::Assembly::new(ruleset);
    let name = match source {
        RunSource::Logs(files) => {
            let mut names = std::collections::HashSet::new();
            let count = files.len();
            for (mut file, raw) in files {
                let name = archive::safe_name(&raw).ok_or_else(|| {
                    RunError::BadName(format!("log part {raw:?} has an absolute or `..` name"))
                })?;
                if !names.insert(name.clone()) {
                    return Err(RunError::BadName(format!(
                        "two log parts are named {name:?}"
                    )));
                }
                file.rewind()?;
                asm.file(&name, std::io::BufReader::new(file))?;
            }
            format!("run of {count} files")
        }
        RunSource::Archive(mut file, name) => {
            file.rewind()?;
            let mut head = [0u8; 4];
            let n = file.read(&mut head)?;
            file.rewind()?;
            let kind = Kind::sniff(&head[..n]).ok_or_else(|| {
                ArchiveError::Unreadable("it starts like neither gzip nor zip".into())
            })?;
            let skipped = archive::read_members(kind, file, caps, |member, data| {
                // An I/O error keeps its own kind: a cap passed inside it is the archive's.
                asm.file(member, data).map_err(|e| match e {
                    RunError::Io(e) => e,
                    other => std::io::Error::other(other),
                })
            })?;
            for s in skipped {
                asm.skip(&s.name, &s.reason);
            }
            ingest::scrub::scrub(&name).text.into_owned()
        }
    };
    asm.finish(&name, meta, script)
}

/// A stored run classified again with `ruleset` (a reclassification or a regroup): the joined
/// log is cut back into its files where `story` says they lie, each file classified and the
/// story told again, so the headline, first failure and group stay the first failure's, not
/// whatever the joined text would classify as. Files keep their uploaded byte counts and the
/// archive's skipped members stay listed. Blocking.
pub fn reclassify_run(
    ruleset: &Ruleset,
    joined: impl Read,
    story: &crate::rules::run::RunStory,
    run_name: &str,
    meta: Meta,
) -> Result<
    (
        crate::storage::reports::NewReport,
        crate::rules::run::RunStory,
    ),
    RunError,
> {
    use std::io::BufRead;
    let mut asm = prepare::Assembly::new(ruleset);
    let mut files: Vec<&crate::rules::run::RunFile> = story.files.iter().collect();
    files.sort_by_key(|f| f.first_line);
    let mut reader = std::io::BufReader::new(joined);
    // 1-based number of the next line `reader` gives.
    let mut next: u64 = 1;
    let mut line = Vec::new();
    for f in files {
        while next < f.first_line {
            line.clear();
            if reader.read_until(b'\n', &mut line)? == 0 {
                return Err(RunError::Io(std::io::Error::other(format!(
                    "the stored log ends before {:?} (line {})",
                    f.name, f.first_line
                ))));
            }
            next += 1;
        }
        let mut text = Vec::new();
        for _ in 0..f.lines {
            if reader.read_until(b'\n', &mut text)? == 0 {
                break;
            }
            next += 1;
        }
        asm.file(&f.name, &text[..])?;
        asm.keep_bytes(&f.name, f.bytes);
    }
    for s in &story.skipped {
        asm.skip(&s.name, &s.reason);
    }
    // The dumps were read on upload and not kept: what they said stays.
    let (new, mut told) = asm.finish(run_name, meta, None)?;
    told.collectives.clone_from(&story.collectives);
    Ok((new, told))
}
