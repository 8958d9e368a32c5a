//! The search itself: hits ranked by tier (root cause, fix, symptom, log), newest first within a
//! tier, collapsed to one row per group (the group's best hit; issue 39 item 6: a recurring
//! failure is one answer, not a page of copies), counted up to [`COUNT_CAP`], with snippets.
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
//! lower bound it did prove. The symptom and log tiers, whose indexes also hand over every row of
//! the tiers above them, walk only the newest reports when their own match is rare under a
//! common one ([`plan::TierPath`]): proving that no old report holds the words only in its log
//! would cost a fetch of every root-cause match.

mod count;
mod details;
mod plan;
mod rank;
mod sql;
mod terms;

use std::collections::HashSet;

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
    sqlx::query!(
        "SELECT set_config('plan_cache_mode', 'force_custom_plan', true) AS plan_cache_mode, \
                set_config('work_mem', '32MB', true) AS work_mem, \
                set_config('jit', 'off', true) AS jit, \
                set_config('max_parallel_workers_per_gather', '0', true) AS parallel_workers"
    )
    .fetch_one(&mut *tx)
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
    // Rows (groups) are ranked up to the cap: a page past it is empty.
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
    let mut rows: Vec<Ranked> = Vec::new();
    let mut seen: HashSet<i64> = HashSet::new();
    let mut exhausted = true;
    for tier in [Tier::RootCause, Tier::Fix, Tier::Symptom, Tier::Log] {
        let need = end - rows.len() as i64;
        if need <= 0 {
            exhausted = false;
            break;
        }
        let (found, complete) = tier_groups(tx, &terms, &probe, tier, need, &seen).await?;
        exhausted &= complete;
        for hit in found {
            if seen.insert(hit.group) {
                rows.push(hit);
            }
        }
    }
    let total = if exhausted {
        Total::Exact(rows.len() as i64)
    } else {
        count::count(tx, &terms, &probe).await?
    };
    let more = rows.len() as i64 > q.offset + q.limit && q.offset + q.limit < COUNT_CAP;
    let page: Vec<Ranked> = rows
        .into_iter()
        .skip(usize::try_from(q.offset).unwrap_or(usize::MAX))
        .take(usize::try_from(q.limit).unwrap_or(0))
        .collect();
    let hits = details::details(tx, &terms, &page).await?;
    Ok(Found { hits, total, more })
}

/// The newest hit of each of up to `need` groups not in `seen` that `tier` matches, newest first,
/// and whether the tier holds no more hits. It ranks `need` hits, then four times as many while
/// they fall in fewer new groups (one group's reports filling them), up to [`COUNT_CAP`] hits:
/// a group whose reports are all older than that many hits of others is left to later pages'
/// count, not searched for. A symptom or log tier whose path is a bounded walk
/// ([`plan::TierPath::Bounded`]) is never complete: older rows were not read.
async fn tier_groups(
    tx: &mut PgConnection,
    terms: &terms::Terms,
    probe: &Probe,
    tier: Tier,
    need: i64,
    seen: &HashSet<i64>,
) -> Result<(Vec<Ranked>, bool), DbError> {
    let mut want = need.min(COUNT_CAP);
    loop {
        let (hits, full) = rank::tier_hits(tx, terms, probe, tier, want).await?;
        let short = (hits.len() as i64) < want;
        let mut new: HashSet<i64> = HashSet::new();
        let firsts: Vec<Ranked> = (hits.into_iter())
            .filter(|h| !seen.contains(&h.group) && new.insert(h.group))
            .collect();
        // A bounded walk that came up short found all it can: asking for more reads no further.
        if short || firsts.len() as i64 >= need || want >= COUNT_CAP {
            return Ok((firsts, short && full));
        }
        want = (want * 4).min(COUNT_CAP);
    }
}
