//! How many of the truly most alike groups the band-key lookup of similar failures finds
//! (issue 42, migration 0051), over every live group of a database: each group in turn is the
//! probe; the exact answer ranks every other group by likeness (`rules::likeness`, at least
//! `app::similar::LISTED`, five listed); the lookup ranks only the candidates its band keys
//! give, the `storage::groups::PER_BAND` newest groups of each key, as
//! `storage::groups::similar_groups` reads them. A hit is a lookup answer as alike as the
//! exact answer of the same rank (equally alike groups are equal answers).
//!
//! Run on a database holding groups (for instance one filled by `kb_trust.py` with the
//! corpora): `DATABASE_URL=postgres://... cargo bench --bench similar`. Compares every pair
//! of groups: meant for a knowledge base of some thousands of groups.

use std::collections::HashMap;

use anyhow::Context;
use gpu_triage::app::similar::{LISTED, SHOWN};
use gpu_triage::rules::likeness::Trigrams;
use gpu_triage::storage::groups::PER_BAND;

/// Likeness bands the hits are counted in, by their lower bound.
const BUCKETS: [f32; 7] = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9];

fn main() -> anyhow::Result<()> {
    let url =
        std::env::var("DATABASE_URL").context("set DATABASE_URL to a database with groups")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let groups: Vec<(i64, String)> = rt.block_on(async {
        let pool = sqlx::PgPool::connect(&url).await?;
        sqlx::query_as(
            "SELECT id, signature FROM groups \
             WHERE merged_into IS NULL AND signature <> '' ORDER BY id",
        )
        .fetch_all(&pool)
        .await
    })?;
    let sets: Vec<Trigrams> = groups.iter().map(|(_, s)| Trigrams::of(s)).collect();
    let keys: Vec<Vec<i64>> = sets.iter().map(Trigrams::band_keys).collect();
    // Each key's holders, newest (highest id) first, as the B-tree is read backwards.
    let mut holders: HashMap<i64, Vec<usize>> = HashMap::new();
    for (i, ks) in keys.iter().enumerate() {
        for k in ks {
            holders.entry(*k).or_default().push(i);
        }
    }
    for list in holders.values_mut() {
        list.sort_by_key(|&i| std::cmp::Reverse(groups[i].0));
    }
    let shown = usize::try_from(SHOWN)?;
    let per_band = usize::try_from(PER_BAND)?;
    let rank = |probe: usize, among: &mut dyn Iterator<Item = usize>| {
        let mut alike: Vec<f32> = among
            .filter(|&j| j != probe)
            .map(|j| sets[probe].likeness(&sets[j]))
            .filter(|&s| s >= LISTED)
            .collect();
        alike.sort_by(|a, b| b.total_cmp(a));
        alike.truncate(shown);
        alike
    };
    let (mut answers, mut found) = ([0u32; BUCKETS.len()], [0u32; BUCKETS.len()]);
    let (mut probes_answered, mut best_found) = (0, 0);
    for (probe, probe_keys) in keys.iter().enumerate() {
        let exact = rank(probe, &mut (0..groups.len()));
        let mut candidates: Vec<usize> = probe_keys
            .iter()
            .flat_map(|k| {
                holders[k]
                    .iter()
                    .copied()
                    .filter(|&j| j != probe)
                    .take(per_band)
            })
            .collect();
        candidates.sort_unstable();
        candidates.dedup();
        let banded = rank(probe, &mut candidates.into_iter());
        for (r, want) in exact.iter().enumerate() {
            let bucket = BUCKETS.iter().rposition(|b| want >= b).unwrap_or(0);
            answers[bucket] += 1;
            let hit = banded.get(r).is_some_and(|got| *got >= want - 1e-6);
            if hit {
                found[bucket] += 1;
            }
            if r == 0 {
                probes_answered += 1;
                best_found += u32::from(hit);
            }
        }
    }
    let total: u32 = answers.iter().sum();
    let hits: u32 = found.iter().sum();
    println!(
        "{} groups; {total} exact answers (top {shown} at likeness >= {LISTED}); found {hits} ({:.1}%)",
        groups.len(),
        100.0 * f64::from(hits) / f64::from(total.max(1))
    );
    println!("most alike found for {best_found} of {probes_answered} groups that have one");
    for (i, b) in BUCKETS.iter().enumerate() {
        if answers[i] > 0 {
            println!(
                "  likeness {b:.1}+: {} of {} ({:.0}%)",
                found[i],
                answers[i],
                100.0 * f64::from(found[i]) / f64::from(answers[i])
            );
        }
    }
    Ok(())
}
