//! "Reclassify": re-runs the current rules over every stored report in a background task, in id
//! order and in small batches, recording progress (done/total) in its run row. Each report is
//! updated in its own transaction (moving it to its new group when the fingerprint changed), so
//! an interrupted run loses nothing: every report keeps either its old or its new
//! classification. Reports uploaded during the run are included (the scan runs until no report
//! is left after the last id seen), and so are reports whose id the scan passed before their
//! upload committed (a final sweep once the transactions open at the end of the scan are over).

use std::io::Read;
use std::time::{Duration, Instant};

pub use crate::storage::reclassify_runs::ReclassifyRun;

use super::{RulesetHandle, TeamRulesError};
use crate::actor::Actor;
use crate::app::upload::search_doc::{self, Origin, Plan};
use crate::rules::{Classification, Ruleset};
use crate::storage::reclassify_runs::{self as store, Applied, Reclassified, StoredLog};
use crate::storage::reports::Headline;
use crate::storage::{Db, DbError};

/// Reports read per batch.
const BATCH: i64 = 50;
/// Decompressed bytes of one stored log reclassified at most (uploads are capped lower).
const MAX_LOG_BYTES: u64 = 256 << 20;

/// Records the start of a run over every stored report by `actor`, unless one is running
/// (`None`).
#[tracing::instrument(name = "reclassify::open_run", skip_all, fields(version = version, actor = actor.name()))]
pub async fn open_run(
    db: &Db,
    version: i64,
    actor: &Actor,
) -> Result<Option<ReclassifyRun>, DbError> {
    let mut tx = db.pool().begin().await?;
    match store::start_run(&mut tx, version, actor).await {
        Ok(Some(run)) => {
            tx.commit().await?;
            Ok(Some(run))
        }
        other => {
            tx.rollback().await?;
            other
        }
    }
}

/// Stores one report's new classification in its own transaction (see [`store::apply`]); the
/// report's row lock is released at once whatever came of it.
#[tracing::instrument(name = "reclassify::apply", level = "debug", skip_all, fields(report_id = report_id))]
pub async fn apply(db: &Db, report_id: i64, update: &Reclassified) -> Result<Applied, DbError> {
    let mut tx = db.pool().begin().await?;
    match store::apply(&mut tx, report_id, update).await {
        Ok(applied @ (Applied::Changed | Applied::Regrouped)) => {
            tx.commit().await?;
            Ok(applied)
        }
        other => {
            tx.rollback().await?;
            other
        }
    }
}

/// Starts a run by `actor` in the background; [`TeamRulesError::Busy`] when one is running.
#[tracing::instrument(name = "reclassify::start", skip_all, fields(actor = actor.name(), run_id = tracing::field::Empty))]
pub async fn start(
    db: &Db,
    handle: &RulesetHandle,
    actor: &Actor,
) -> Result<ReclassifyRun, TeamRulesError> {
    let run = open_run(db, handle.version(), actor)
        .await?
        .ok_or(TeamRulesError::Busy)?;
    tracing::Span::current().record("run_id", run.id);
    let (db, handle, task_run) = (db.clone(), handle.clone(), run.clone());
    // The run outlives the request that started it; its log lines still name that request.
    let task = async move {
        let outcome = run_all(&db, &handle, &task_run).await;
        let failed = outcome.as_ref().err().map(ToString::to_string);
        if let Some(why) = &failed {
            tracing::error!(run = task_run.id, error = %why, "reclassification failed");
        }
        if let Err(e) = store::finish_run(db.pool(), &task_run, failed.as_deref()).await {
            tracing::error!(run = task_run.id, error = %e, "recording the end of a reclassification");
        }
    };
    tokio::spawn(tracing::Instrument::in_current_span(task));
    Ok(run)
}

/// Regroups every stored report once when the engine groups failures differently from when
/// they were stored (`instance.grouping_scheme` below [`crate::rules::GROUPING_SCHEME`]): a
/// reclassification run by the service, then the scheme recorded. Returns whether it ran. A
/// run already under way (another replica's, or a team rule change's) leaves it to the next
/// start; an interrupted one is simply done again.
#[tracing::instrument(name = "reclassify::regroup_if_needed", skip_all)]
pub async fn regroup_if_needed(db: &Db, handle: &RulesetHandle) -> Result<bool, TeamRulesError> {
    let wanted = crate::rules::GROUPING_SCHEME;
    let stored = store::grouping_scheme(db.pool()).await?;
    if stored >= wanted {
        return Ok(false);
    }
    let Some(run) = open_run(db, handle.version(), &Actor::SERVICE).await? else {
        tracing::info!("a reclassification is under way; regrouping waits for the next start");
        return Ok(false);
    };
    tracing::info!(
        run = run.id,
        from = stored,
        to = wanted,
        "regrouping stored reports"
    );
    let outcome = run_all(db, handle, &run).await;
    let failed = outcome.as_ref().err().map(ToString::to_string);
    store::finish_run(db.pool(), &run, failed.as_deref()).await?;
    outcome?;
    store::set_grouping_scheme(db.pool(), wanted).await?;
    Ok(true)
}

/// How long the final sweep waits for uploads that were in flight when the scan ended.
const SETTLE: Duration = Duration::from_secs(60);

/// Counts kept while a run goes.
#[derive(Default)]
struct Tally {
    done: i64,
    changed: i64,
    regrouped: i64,
}

/// Runs to completion (used by [`start`]'s task): every report in id order, then a sweep for
/// reports with ids the scan already passed that committed only after it passed them (an
/// upload's id is taken when its transaction inserts, not when it commits).
#[tracing::instrument(name = "reclassify::run_all", skip_all, fields(run_id = run.id))]
pub async fn run_all(
    db: &Db,
    handle: &RulesetHandle,
    run: &ReclassifyRun,
) -> Result<(), TeamRulesError> {
    let mut tally = Tally::default();
    let mut seen: Vec<i64> = Vec::new();
    let mut after = scan_from(db, handle, run, 0, &mut seen, &mut tally).await?;
    // Wait for the transactions open now, then take the reports the scan could not see: those
    // that commit after its end (ids above `after`) and those whose id it passed before they
    // committed (ids below, not seen).
    let horizon = store::xid_horizon(db.pool()).await?;
    let deadline = Instant::now() + SETTLE;
    while !store::settled(db.pool(), &horizon).await? {
        if Instant::now() > deadline {
            tracing::warn!(
                run = run.id,
                "transactions still open after {SETTLE:?}; sweeping now"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    after = scan_from(db, handle, run, after, &mut seen, &mut tally).await?;
    seen.sort_unstable();
    let missed = not_seen(&store::ids_upto(db.pool(), after).await?, &seen);
    for ids in missed.chunks(BATCH as usize) {
        let batch = store::reports_by_id(db, ids).await?;
        process(db, handle, batch, &mut tally).await?;
        store::record_progress(db.pool(), run, tally.done, tally.changed, tally.regrouped).await?;
    }
    Ok(())
}

/// Reclassifies the reports after id `after`, in id order, until none is left; returns the
/// last id seen.
async fn scan_from(
    db: &Db,
    handle: &RulesetHandle,
    run: &ReclassifyRun,
    mut after: i64,
    seen: &mut Vec<i64>,
    tally: &mut Tally,
) -> Result<i64, TeamRulesError> {
    loop {
        let batch = store::next_reports(db, after, BATCH).await?;
        let Some(last) = batch.last() else {
            return Ok(after);
        };
        after = last.id;
        seen.extend(batch.iter().map(|r| r.id));
        process(db, handle, batch, tally).await?;
        store::record_progress(db.pool(), run, tally.done, tally.changed, tally.regrouped).await?;
    }
}

/// The ids of `all` (sorted) that are not in `seen` (sorted).
fn not_seen(all: &[i64], seen: &[i64]) -> Vec<i64> {
    all.iter()
        .copied()
        .filter(|id| seen.binary_search(id).is_err())
        .collect()
}

/// Classifies one batch with the ruleset in use now (a save during the run applies to the
/// reports still ahead) and stores each result in its own transaction.
async fn process(
    db: &Db,
    handle: &RulesetHandle,
    batch: Vec<StoredLog>,
    tally: &mut Tally,
) -> Result<(), TeamRulesError> {
    let ruleset = handle.current();
    let updates = tokio::task::spawn_blocking(move || classify_batch(&ruleset, batch))
        .await
        .map_err(|e| TeamRulesError::Internal(e.to_string()))?;
    for (id, update) in updates {
        match apply(db, id, &update).await? {
            Applied::Changed => tally.changed += 1,
            Applied::Regrouped => {
                tally.changed += 1;
                tally.regrouped += 1;
            }
            Applied::Missing | Applied::Unchanged => {}
        }
        tally.done += 1;
    }
    Ok(())
}

fn classify_batch(ruleset: &Ruleset, batch: Vec<StoredLog>) -> Vec<(i64, Reclassified)> {
    batch
        .into_iter()
        .filter_map(|r| {
            if let Some(story) = &r.story {
                // A run is classified file by file, its story told again (issue 41).
                return match run_columns(ruleset, &r, story) {
                    Ok(update) => Some((r.id, update)),
                    Err(e) => {
                        tracing::warn!(report = r.id, error = %e, "stored run unreadable; left as is");
                        None
                    }
                };
            }
            let reader = flate2::read::MultiGzDecoder::new(&r.log_gz[..]).take(MAX_LOG_BYTES);
            match ruleset
                .classify_reader(&r.filename, reader)
                .map_err(|e| e.to_string())
                .and_then(|c| columns(&c, &r).map_err(|e| e.to_string()))
            {
                Ok(update) => Some((r.id, update)),
                Err(e) => {
                    tracing::warn!(report = r.id, error = %e, "stored log unreadable; left as is");
                    None
                }
            }
        })
        .collect()
}

/// A stored run's new columns: its files cut out of the joined log and its story told again
/// ([`crate::app::job_run::reclassify_run`]), so its headline and group stay its first
/// failure's.
fn run_columns(
    ruleset: &Ruleset,
    r: &StoredLog,
    story: &sqlx::types::Json<serde_json::Value>,
) -> Result<Reclassified, String> {
    let story: crate::rules::run::RunStory =
        serde_json::from_value(story.0.clone()).map_err(|e| format!("its story: {e}"))?;
    let meta = crate::app::upload::Meta {
        project: r.project.clone(),
        job_url: r.job_url.clone(),
        commit: r.commit_sha.clone(),
        branch: r.branch.clone(),
        ..Default::default()
    };
    let reader = flate2::read::MultiGzDecoder::new(&r.log_gz[..]).take(MAX_LOG_BYTES);
    let (new, story) =
        crate::app::job_run::reclassify_run(ruleset, reader, &story, &r.filename, meta)
            .map_err(|e| e.to_string())?;
    Ok(Reclassified {
        headline: new.headline,
        classification: new.classification,
        search: new.search,
        search_words: new.search_words,
        story: Some(story),
    })
}

/// The classification as report columns, and the search document read from the log (a second
/// pass over it: the lines around the new findings), exactly as an upload stores them.
fn columns(c: &Classification, r: &StoredLog) -> std::io::Result<Reclassified> {
    let mut plan = Plan::new(c);
    let reader = flate2::read::MultiGzDecoder::new(&r.log_gz[..]).take(MAX_LOG_BYTES);
    plan.read_stream(std::io::BufReader::new(reader))?;
    let search = plan.finish(
        c,
        &Origin {
            filename: &r.filename,
            project: &r.project,
            branch: &r.branch,
            commit: &r.commit_sha,
            job_url: &r.job_url,
        },
    );
    Ok(Reclassified {
        headline: Headline::of(c),
        classification: c.clone(),
        search_words: search_doc::words(&search),
        search,
        story: None,
    })
}

#[cfg(test)]
mod tests {
    use super::not_seen;

    #[test]
    fn the_sweep_takes_exactly_the_ids_the_scan_did_not_see() {
        assert_eq!(not_seen(&[1, 2, 3, 5, 8], &[1, 3, 8]), vec![2, 5]);
        assert!(not_seen(&[1, 2], &[1, 2]).is_empty());
        assert!(not_seen(&[], &[4]).is_empty());
    }
}
