//! The search itself: hits ranked by tier (root cause, fix, symptom, log), newest first within a
//! tier, counted up to [`COUNT_CAP`], with snippets.
//!
//! Finding "the newest matches" fast over a million reports needs two different walks, and the
//! planner cannot tell which one a query needs: it estimates words as independent, and the
//! words people search for ("illegal memory access") are anything but. A common match is found
//! fastest by walking the reports newest first and testing each row's inline vector (it stops
//! after a few rows); a rare one through the GIN index (a walk would read the whole table). So
//! each search first probes the newest reports of the filtered set ([`plan::PROBE`] rows, a few
//! milliseconds) to measure how common each tier's match is, then sets the access path of every
//! statement from that measure (`enable_bitmapscan` / `enable_indexscan`, local to the search's
//! transaction). The count walks a bounded number of the newest reports, or counts through the
//! index when the matches are few; when neither can prove the total cheaply, it states the
//! lower bound it did prove.

// The statements' shared fragments are macros: declared first, so the modules below see them.
#[macro_use]
mod sql;

mod count;
mod details;
mod plan;
mod rank;
mod terms;

use sqlx::PgConnection;

pub use terms::parts_query;

use self::plan::{Access, Probe};
use self::rank::Ranked;
use super::{COUNT_CAP, Found, Mode, Query, Tier, Total};
use crate::storage::DbError;

/// Searches reports, groups and fixes in the caller's transaction: one page of hits ranked by
/// tier, newest first within a tier, with the total. Its planner settings are local to that
/// transaction: end it (a rollback will do) before running anything else on it.
pub async fn search(tx: &mut PgConnection, q: &Query) -> Result<Found, DbError> {
    // Plans made for the actual words (a generic plan cannot know how common they are); exact
    // bitmaps; no JIT compilation or parallel workers, which cost more than these short
    // statements gain from them.
    sqlx::query(
        "SELECT set_config('plan_cache_mode', 'force_custom_plan', true), \
                set_config('work_mem', '32MB', true), set_config('jit', 'off', true), \
                set_config('max_parallel_workers_per_gather', '0', true)",
    )
    .execute(&mut *tx)
    .await?;
    let terms = terms::terms(tx, q).await?;
    if terms.all.is_none() && terms.pattern.is_none() {
        // No word to look for (only punctuation or operators).
        return Ok(Found {
            hits: Vec::new(),
            total: Total::Exact(0),
            more: false,
        });
    }
    // Hits are ranked up to the cap: a page past it is empty.
    let end = (q.offset + q.limit).min(COUNT_CAP) + 1;
    // A literal search comes after words and prefixes found nothing: what it looks for is rare,
    // and testing substrings row by row costs ten times a vector test, so it uses the trigram
    // index without probing.
    let probe = if terms.mode == Mode::Literal {
        Probe {
            forced: Some(Access::Index),
            ..Probe::default()
        }
    } else {
        plan::probe(tx, &terms).await?
    };
    let mut ranked: Vec<Ranked> = Vec::new();
    let mut exhausted = true;
    for tier in [Tier::RootCause, Tier::Fix, Tier::Symptom, Tier::Log] {
        let want = end - ranked.len() as i64;
        if want <= 0 {
            exhausted = false;
            break;
        }
        let found = rank::tier_hits(tx, &terms, &probe, tier, want).await?;
        exhausted &= (found.len() as i64) < want;
        ranked.extend(found);
    }
    let total = if exhausted {
        Total::Exact(ranked.len() as i64)
    } else {
        count::count(tx, &terms, &probe).await?
    };
    let more = ranked.len() as i64 > q.offset + q.limit && q.offset + q.limit < COUNT_CAP;
    let page: Vec<Ranked> = ranked
        .into_iter()
        .skip(usize::try_from(q.offset).unwrap_or(usize::MAX))
        .take(usize::try_from(q.limit).unwrap_or(0))
        .collect();
    let hits = details::details(tx, &terms, &page).await?;
    Ok(Found { hits, total, more })
}
