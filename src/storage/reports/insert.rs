//! Storing a report: its row, its group by fingerprint (created or joined), its idempotency
//! key and the reproduction job of an attached script, all in the caller's transaction, with
//! the duplicate and repeated-key answers that store nothing new.

use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor};

use super::log::{LogChunk, LogPlace, discard_objects, insert_log};
use super::script::{self, ScriptPlace};
use crate::api_types::{JobState, QueuedJob};
use crate::rules::{Category, Classification, Confidence};
use crate::storage::DbError;

/// A report ready to store: the classification already made, the log already scrubbed and
/// compressed.
#[derive(Clone, Debug)]
pub struct NewReport {
    /// The token that uploaded it.
    pub token_id: Option<i64>,
    /// Metadata from the uploader (CI): project, job URL, commit, branch, environment text.
    pub project: String,
    pub job_url: String,
    pub commit_sha: String,
    pub branch: String,
    pub environment: String,
    /// The version of the build the log comes from (checked as a version), or empty.
    pub version: String,
    /// The uploaded file's name.
    pub filename: String,
    /// The classification's headline fields, as columns for listing, filtering and grouping.
    pub headline: Headline,
    /// The whole classification (DESIGN.md section 3).
    pub classification: Classification,
    /// SHA-256 of the uploaded bytes, for duplicate detection.
    pub log_sha256: Vec<u8>,
    pub log_bytes: i64,
    pub log_lines: i64,
    /// The scrubbed log, in independently compressed chunks of whole lines.
    pub log: Vec<LogChunk>,
    /// Where those chunks are kept (`app::log_objects::place` writes them to the object store
    /// before the transaction when one is configured).
    pub log_place: LogPlace,
    /// The attached minimal reproduction script, if any (queues a job).
    pub script: Option<String>,
    /// Where that script is kept (`app::log_objects::place` writes it to the object store
    /// before the transaction when one is configured).
    pub script_place: ScriptPlace,
    /// Runs the job asks for (1-5).
    pub repeats: u8,
    /// What the job needs to run.
    pub needs: crate::api_types::Needs,
    /// The search document (migration 0016).
    pub search: crate::storage::search::Document,
    /// Its vocabulary words, sorted (see `app::upload::search_doc::words`).
    pub search_words: Vec<String>,
}

/// A classification's headline as a report row keeps it in columns, for listing, filtering
/// and grouping: written on upload and on reclassification from the same mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Headline {
    pub category: Category,
    pub title: String,
    pub confidence: Confidence,
    pub root_cause_line: Option<i32>,
    pub root_cause_text: String,
    pub fingerprint: String,
    /// The failure's shape, for similar failures (`Classification::signature`).
    pub signature: String,
    pub async_hint: bool,
}

impl Headline {
    /// The headline of `c`.
    #[must_use]
    pub fn of(c: &Classification) -> Headline {
        let root = c.root_cause.as_ref();
        Headline {
            category: c.category,
            title: c.title.clone(),
            confidence: c.confidence,
            root_cause_line: root.and_then(|r| i32::try_from(r.line).ok()),
            root_cause_text: root.map(|r| r.text.clone()).unwrap_or_default(),
            fingerprint: c.fingerprint.clone(),
            signature: c.signature.clone(),
            async_hint: c.async_hint,
        }
    }
}

/// An upload's `Idempotency-Key` as `idempotency_keys` records it: with the token that sent it
/// and the hash of the body it came with.
#[derive(Clone, Debug)]
pub struct IdempotencyRecord {
    /// The token that sent it (keys are per token).
    pub token_id: i64,
    /// The header's value.
    pub key: String,
    /// SHA-256 of the request body, to tell a retry from a different request reusing the key.
    pub request_sha256: Vec<u8>,
}

/// What an insert did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InsertOutcome {
    /// Stored (`duplicate: false`), or found identical bytes already stored for the project
    /// (`duplicate: true`), or replayed the first answer to this idempotency key.
    Stored(Stored),
    /// The idempotency key was used before with a different body.
    KeyReused,
}

/// The report an upload resulted in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub report_id: i64,
    pub group_id: i64,
    pub duplicate: bool,
    /// The answer replayed for a repeated idempotency key (nothing new was stored).
    pub replayed: bool,
    /// This insert created the report's group (its failure was never seen before).
    pub new_group: bool,
    /// The reproduction job queued for its script, with its state.
    pub job: Option<QueuedJob>,
}

/// Stores `report` (see [`InsertOutcome`]) in the caller's transaction. Concurrent uploads of
/// the same bytes, or with the same idempotency key, serialise on transaction-scoped advisory
/// locks and yield one report; the caller ends its transaction at once either way (rolling
/// back what stored nothing), so those locks are not held longer than needed.
pub async fn insert_report(
    tx: &mut PgConnection,
    report: &NewReport,
    idempotency: Option<&IdempotencyRecord>,
) -> Result<InsertOutcome, DbError> {
    if let Some(idem) = idempotency {
        // The token id is sent as `int8` and written in decimal, as the key's lock always was.
        sqlx::query!(
            r#"SELECT pg_advisory_xact_lock(hashtextextended($1 || ':' || $2::int8::text, 1))
                 AS "locked: ()""#,
            idem.key,
            idem.token_id
        )
        .execute(&mut *tx)
        .await?;
        let first = sqlx::query!(
            "SELECT request_sha256, response FROM idempotency_keys WHERE token_id = $1 AND key = $2",
            idem.token_id,
            idem.key
        )
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(row) = first {
            if row.request_sha256 != idem.request_sha256 {
                return Ok(InsertOutcome::KeyReused);
            }
            // A row this version cannot read is passed over, and the upload stored anew.
            let replay: Option<Replay> = serde_json::from_value(row.response).ok();
            if let Some(replay) = replay {
                let mut stored = replay.stored();
                let job = job_for_report(&mut *tx, stored.report_id).await?;
                // The group may have been merged since: the answer names where it went.
                if let Some(now) =
                    crate::storage::group_merge::final_group(&mut *tx, stored.group_id).await?
                {
                    stored.group_id = now;
                }
                discard_objects(&mut *tx, &report.log_place).await?;
                script::discard_object(&mut *tx, &report.script_place).await?;
                return Ok(InsertOutcome::Stored(Stored {
                    job,
                    replayed: true,
                    new_group: false,
                    ..stored
                }));
            }
        }
    }
    sqlx::query!(
        r#"SELECT pg_advisory_xact_lock(hashtextextended($1 || ':' || encode($2, 'hex'), 2))
             AS "locked: ()""#,
        report.project,
        report.log_sha256
    )
    .execute(&mut *tx)
    .await?;
    let existing = sqlx::query!(
        "SELECT id, group_id FROM reports WHERE project = $1 AND log_sha256 = $2",
        report.project,
        report.log_sha256
    )
    .fetch_optional(&mut *tx)
    .await?;
    let stored = match existing {
        Some(row) => Stored {
            report_id: row.id,
            group_id: row.group_id,
            duplicate: true,
            replayed: false,
            new_group: false,
            job: job_for_report(&mut *tx, row.id).await?,
        },
        None => insert_new(&mut *tx, report).await?,
    };
    if stored.duplicate {
        discard_objects(&mut *tx, &report.log_place).await?;
        script::discard_object(&mut *tx, &report.script_place).await?;
    }
    if let Some(idem) = idempotency {
        sqlx::query!(
            "INSERT INTO idempotency_keys (token_id, key, request_sha256, status, response)
             VALUES ($1, $2, $3, $4, $5)",
            idem.token_id,
            idem.key,
            idem.request_sha256,
            if stored.duplicate { 200i16 } else { 201i16 },
            Json(Replay {
                report_id: stored.report_id,
                group_id: stored.group_id,
                duplicate: stored.duplicate,
            }) as _ // jsonb of our own type, as `classification` below
        )
        .execute(&mut *tx)
        .await?;
    }
    Ok(InsertOutcome::Stored(stored))
}

/// What an idempotency key remembers of the first answer (the `response` column): enough to
/// give the same answer again.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Replay {
    report_id: i64,
    group_id: i64,
    duplicate: bool,
}

impl Replay {
    fn stored(self) -> Stored {
        Stored {
            report_id: self.report_id,
            group_id: self.group_id,
            duplicate: self.duplicate,
            replayed: false,
            new_group: false,
            job: None,
        }
    }
}

async fn job_for_report(
    ex: impl PgExecutor<'_>,
    report_id: i64,
) -> Result<Option<QueuedJob>, DbError> {
    let row = sqlx::query!(
        r#"SELECT id, state AS "state: JobState"
         FROM jobs WHERE report_id = $1 ORDER BY id DESC LIMIT 1"#,
        report_id
    )
    .fetch_optional(ex)
    .await?;
    Ok(row.map(|r| QueuedJob {
        job_id: r.id,
        state: r.state,
    }))
}

/// The group for `r`'s fingerprint: its id, whether it was created now, and the group the
/// report belongs to when another holds it (its fingerprint's group was merged: that group, for
/// the report's `merged_from`, migration 0032). An existing group is held with `FOR KEY SHARE`
/// until the transaction ends: that does not queue uploads of one failure behind each other
/// (they all take the shared lock), but it keeps a reclassification from deleting the group it
/// just emptied before this report lands in it. When such a delete won the race, the group is
/// created again. A group that was merged stands for the group it was merged into (held the same
/// way, so it is not merged away before this report lands); a merge or unmerge of the
/// fingerprint's group that is under way is waited for (migrations 0023, 0032).
async fn group_for(
    tx: &mut sqlx::PgConnection,
    r: &NewReport,
) -> Result<(i64, bool, Option<i64>), DbError> {
    loop {
        // A recurring failure's group exists: it is read first. An insert attempt costs more
        // even when it conflicts (the row's generated search columns are computed before the
        // conflict is found: ~1.4 ms a recurring upload, issue 42).
        let existing = sqlx::query!(
            "SELECT id, merged_into FROM groups WHERE fingerprint = $1 FOR KEY SHARE",
            r.headline.fingerprint
        )
        .fetch_optional(&mut *tx)
        .await?
        .map(|g| (g.id, g.merged_into));
        match existing {
            Some((id, None)) => return Ok((id, false, None)),
            Some((own, Some(into))) => {
                if let Some(id) = crate::storage::group_merge::live_group(&mut *tx, into).await? {
                    return Ok((id, false, Some(own)));
                }
                // The group it was merged into is going away: read the fingerprint's row again.
                continue;
            }
            None => {}
        }
        // When another transaction inserted the group first and has not committed, this
        // statement waits for it, and the next round's read sees its row.
        let inserted = sqlx::query_scalar!(
            "INSERT INTO groups (fingerprint, category, title, root_cause_text, signature)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (fingerprint) DO NOTHING
             RETURNING id",
            r.headline.fingerprint,
            r.headline.category.as_str(),
            r.headline.title,
            r.headline.root_cause_text,
            r.headline.signature
        )
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(id) = inserted {
            crate::storage::groups::insert_band_keys(&mut *tx, id, &r.headline.signature).await?;
            return Ok((id, true, None));
        }
    }
}

async fn insert_new(tx: &mut sqlx::PgConnection, r: &NewReport) -> Result<Stored, DbError> {
    let (group_id, new_group, merged_from) = group_for(tx, r).await?;
    // Once in a while, not per upload: see migration 0007. The upload that refreshes it holds
    // the row until it commits; the others arriving meanwhile skip the row instead of queueing
    // behind that upload and then finding nothing to change (they waited up to 0.8 s with 16
    // uploads of one failure at once, issue 42).
    sqlx::query!(
        "UPDATE groups SET last_seen = now() WHERE id = (
             SELECT id FROM groups
             WHERE id = $1 AND last_seen < now() - interval '30 seconds'
             FOR NO KEY UPDATE SKIP LOCKED)",
        group_id
    )
    .execute(&mut *tx)
    .await?;
    // The script's text in the row, or where the object store keeps it.
    let (script_text, script_prefix, script_sha256) = match &r.script_place {
        ScriptPlace::Database => (r.script.as_deref(), None, None),
        ScriptPlace::Objects { prefix, sha256 } => (None, Some(prefix.as_str()), Some(&sha256[..])),
    };
    let report_id = sqlx::query_scalar!(
        "INSERT INTO reports (token_id, project, job_url, commit_sha, branch, environment,
             filename, group_id, category, title, confidence, root_cause_line, root_cause_text,
             fingerprint, async_hint, classification, log_sha256, log_bytes, log_lines,
             script, finding_rules, signature, version, merged_from, script_prefix,
             script_sha256)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
             $18, $19, $20, jsonb_path_query_array($16, '$.findings[*].rule'), $21, $22, $23,
             $24, $25)
         RETURNING id",
        r.token_id,
        r.project,
        r.job_url,
        r.commit_sha,
        r.branch,
        r.environment,
        r.filename,
        group_id,
        r.headline.category.as_str(),
        r.headline.title,
        r.headline.confidence.as_str(),
        r.headline.root_cause_line,
        r.headline.root_cause_text,
        r.headline.fingerprint,
        r.headline.async_hint,
        // A jsonb parameter of our own type: the macro expects a `serde_json::Value`, and
        // `as _` lets `Json` encode it (as the unchecked statement did).
        Json(&r.classification) as _,
        r.log_sha256,
        r.log_bytes,
        r.log_lines,
        script_text,
        r.headline.signature,
        r.version,
        merged_from,
        script_prefix,
        script_sha256
    )
    .fetch_one(&mut *tx)
    .await?;
    script::claim_object(&mut *tx, &r.script_place).await?;
    insert_log(&mut *tx, report_id, &r.log, &r.log_place).await?;
    crate::storage::search::insert_document(&mut *tx, report_id, &r.search, &r.search_words)
        .await?;
    let job = match &r.script {
        Some(_) => {
            let id = sqlx::query_scalar!(
                "INSERT INTO jobs (report_id, repeats, needs) VALUES ($1, $2, $3) RETURNING id",
                report_id,
                i16::from(r.repeats),
                r.needs.as_str()
            )
            .fetch_one(&mut *tx)
            .await?;
            Some(QueuedJob {
                job_id: id,
                state: JobState::Queued,
            })
        }
        None => None,
    };
    Ok(Stored {
        report_id,
        group_id,
        duplicate: false,
        replayed: false,
        new_group,
        job,
    })
}
