//! "Reclassify": re-runs the current rules over every stored report in a background task, in id
//! order and in small batches, recording progress (done/total) in its run row. Each report is
//! updated in its own transaction (moving it to its new group when the fingerprint changed), so
//! an interrupted run loses nothing: every report keeps either its old or its new
//! classification. Reports uploaded during the run are included (the scan runs until no report
//! is left after the last id seen).

use std::io::Read;

use super::{RulesetHandle, TeamRulesError};
use crate::report::{Meta, search_text};
use crate::rules::{Classification, Ruleset};
use crate::storage::Db;
use crate::storage::reclassify::{self as store, Applied, Reclassified, Run, StoredLog};

/// Reports read per batch.
const BATCH: i64 = 50;
/// Decompressed bytes of one stored log reclassified at most (uploads are capped lower).
const MAX_LOG_BYTES: u64 = 256 << 20;

/// Starts a run by `actor` in the background; [`TeamRulesError::Busy`] when one is running.
pub async fn start(db: &Db, handle: &RulesetHandle, actor: &str) -> Result<Run, TeamRulesError> {
    let run = store::start_run(db, handle.version(), actor)
        .await?
        .ok_or(TeamRulesError::Busy)?;
    let (db, handle, task_run) = (db.clone(), handle.clone(), run.clone());
    tokio::spawn(async move {
        let outcome = run_all(&db, &handle, &task_run).await;
        let failed = outcome.as_ref().err().map(ToString::to_string);
        if let Some(why) = &failed {
            tracing::error!(run = task_run.id, error = %why, "reclassification failed");
        }
        if let Err(e) = store::finish_run(&db, &task_run, failed.as_deref()).await {
            tracing::error!(run = task_run.id, error = %e, "recording the end of a reclassification");
        }
    });
    Ok(run)
}

/// Runs to completion (used by [`start`]'s task).
pub async fn run_all(db: &Db, handle: &RulesetHandle, run: &Run) -> Result<(), TeamRulesError> {
    let (mut after, mut done, mut changed, mut regrouped) = (0i64, 0i64, 0i64, 0i64);
    loop {
        let batch = store::next_reports(db, after, BATCH).await?;
        let Some(last) = batch.last() else { break };
        after = last.id;
        // The ruleset in use now: a save during the run applies to the reports still ahead.
        let ruleset = handle.current();
        let updates = tokio::task::spawn_blocking(move || classify_batch(&ruleset, batch))
            .await
            .map_err(|e| TeamRulesError::Internal(e.to_string()))?;
        for (id, update) in updates {
            match store::apply(db, id, &update).await? {
                Applied::Changed => changed += 1,
                Applied::Regrouped => {
                    changed += 1;
                    regrouped += 1;
                }
                Applied::Missing | Applied::Unchanged => {}
            }
            done += 1;
        }
        store::record_progress(db, run, done, changed, regrouped).await?;
    }
    Ok(())
}

fn classify_batch(ruleset: &Ruleset, batch: Vec<StoredLog>) -> Vec<(i64, Reclassified)> {
    batch
        .into_iter()
        .filter_map(|r| {
            let reader = flate2::read::GzDecoder::new(&r.log_gz[..]).take(MAX_LOG_BYTES);
            match ruleset.classify_reader(&r.filename, reader) {
                Ok(c) => Some((r.id, columns(&c, &r))),
                Err(e) => {
                    tracing::warn!(report = r.id, error = %e, "stored log unreadable; left as is");
                    None
                }
            }
        })
        .collect()
}

/// The classification as report columns, exactly as an upload stores them.
fn columns(c: &Classification, r: &StoredLog) -> Reclassified {
    let meta = Meta {
        project: r.project.clone(),
        branch: r.branch.clone(),
        ..Meta::default()
    };
    let root = c.root_cause.as_ref();
    Reclassified {
        category: c.category.as_str().to_owned(),
        title: c.title.clone(),
        confidence: serde_json::to_value(c.confidence)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        root_cause_line: root.and_then(|r| i32::try_from(r.line).ok()),
        root_cause_text: root.map(|r| r.text.clone()).unwrap_or_default(),
        fingerprint: c.fingerprint.clone(),
        async_hint: c.async_hint,
        classification: serde_json::to_value(c).unwrap_or_default(),
        search_text: search_text(c, &meta, &r.filename),
    }
}
