//! The access path of each statement, chosen from a probe of the newest reports: how common
//! each tier's match is decides between walking a recency index newest first and building a
//! bitmap from the GIN (and trigram) indexes, for the lists and for the count. The costs below
//! are the model the choice is made on; the search's transaction carries the choice as local
//! planner settings.

use sqlx::PgConnection;

use super::sql::Statement;
use super::terms::Terms;
use crate::storage::DbError;
use crate::storage::search::COUNT_CAP;

/// Newest reports of the filtered set tested to measure how common a match is.
pub(super) const PROBE: i64 = 1000;
/// Estimated cost, in microseconds, of testing one row in a newest-first walk (its inline
/// vectors) ...
const WALK_US: f64 = 1.5;
/// ... of one index entry of a bitmap ...
const ENTRY_US: f64 = 0.4;
/// ... and of fetching one row the bitmap points at (a random heap page).
const FETCH_US: f64 = 4.0;

/// Rows at most a count walks: about ten milliseconds.
pub(super) const COUNT_WALK_ROWS: i64 = 12_000;
/// Matches at most a bitmap counts exactly (each costs an index entry, the first thousand a row
/// fetch): about ten milliseconds.
const COUNT_INDEX_MATCHES: f64 = 20_000.0;

/// Rows at most a symptom or log tier walks, newest first, when neither full path is cheap
/// (about eight milliseconds) ...
pub(super) const TIER_WALK_ROWS: i64 = 5_000;
/// ... which is when both would cost more than this, in microseconds: the tier's own match is
/// rare (a walk reads far) while the tier above it is common (the index hands over every row of
/// the tier above too: a report whose root cause matches has its whole document match, and
/// each such row is fetched to be ruled out).
const TIER_BUDGET_US: f64 = 10_000.0;

/// How a statement reaches its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Access {
    /// Walk a recency index newest first, testing each row.
    Walk,
    /// Build a bitmap from the GIN (and trigram) indexes.
    Index,
    /// Whatever the planner picks (groups and fixes: small tables).
    Planner,
}

/// How a symptom or log tier finds its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TierPath {
    /// Every matching row, through this access path.
    Full(Access),
    /// The matches among the newest [`TIER_WALK_ROWS`] rows of the filtered set only: older
    /// ones are left to the count's lower bound.
    Bounded,
}

/// How common each tier's match is among the newest reports of the filtered set (the probe's
/// row, by column name).
#[derive(Clone, Copy, Debug, Default, sqlx::FromRow)]
pub(super) struct Probe {
    /// Rows tested (fewer than [`PROBE`]: that is the whole filtered set).
    pub(super) rows: i64,
    /// Of those, rows whose root cause matches ...
    pub(super) root: i64,
    /// ... whose root cause and symptoms together match ...
    pub(super) head: i64,
    /// ... and whose whole document matches.
    pub(super) any: i64,
    /// Reports in the table (planner statistics).
    pub(super) table: f64,
    /// The access path to use whatever the numbers say.
    #[sqlx(skip)]
    pub(super) forced: Option<Access>,
}

impl Probe {
    /// Share of rows matching, smoothed so that no match still means "rare", not "never".
    pub(super) fn share(&self, matches: i64) -> f64 {
        (matches as f64 + 0.5) / (self.rows.max(1) as f64)
    }

    /// The access path finding the newest `want` rows of a match with share `share`: a walk
    /// tests `want / share` rows; a bitmap fetches and sorts every match.
    pub(super) fn list_access(&self, share: f64, want: i64) -> Access {
        if let Some(access) = self.forced {
            return access;
        }
        if self.rows < PROBE {
            return Access::Walk;
        }
        let walk = want as f64 / share * WALK_US;
        let matches = share * self.table;
        let bitmap = matches * (ENTRY_US + FETCH_US);
        if walk <= bitmap {
            Access::Walk
        } else {
            Access::Index
        }
    }

    /// The path of a symptom or log tier whose own match has share `share` and whose index
    /// hands over the rows of share `bitmap_share` (its match or any tier's above it): the
    /// cheaper full path when it fits [`TIER_BUDGET_US`], else a bounded walk. A search still
    /// answers in milliseconds when its words fill the root-cause tier of a hundred thousand
    /// reports and nothing else; a symptom or log hit older than the walk is not listed.
    pub(super) fn tier_path(&self, share: f64, bitmap_share: f64, want: i64) -> TierPath {
        if let Some(access) = self.forced {
            return TierPath::Full(access);
        }
        if self.rows < PROBE {
            return TierPath::Full(Access::Walk);
        }
        let walk = (want as f64 / share).min(self.table) * WALK_US;
        let bitmap = bitmap_share * self.table * (ENTRY_US + FETCH_US);
        if walk.min(bitmap) > TIER_BUDGET_US {
            TierPath::Bounded
        } else if walk <= bitmap {
            TierPath::Full(Access::Walk)
        } else {
            TierPath::Full(Access::Index)
        }
    }

    /// The access path of the count. A walk reads at most [`COUNT_WALK_ROWS`] rows: enough to
    /// find [`COUNT_CAP`] matches of a common word; a bitmap counts exactly when its matches are
    /// few. In between (matches thinly spread over a long history) neither proves the total
    /// cheaply, and the walk's matches are a lower bound.
    pub(super) fn count_access(&self) -> Access {
        if let Some(access) = self.forced {
            return access;
        }
        let share = self.share(self.any);
        if self.rows < PROBE || COUNT_CAP as f64 / share <= COUNT_WALK_ROWS as f64 {
            return Access::Walk;
        }
        if share * self.table <= COUNT_INDEX_MATCHES {
            Access::Index
        } else {
            Access::Walk
        }
    }
}

pub(super) async fn set_access(tx: &mut PgConnection, access: Access) -> Result<(), DbError> {
    let (bitmap, index) = match access {
        Access::Walk => ("off", "on"),
        Access::Index => ("on", "off"),
        Access::Planner => ("on", "on"),
    };
    let seq = if access == Access::Planner {
        "on"
    } else {
        "off"
    };
    sqlx::query!(
        "SELECT set_config('enable_bitmapscan', $1, true) AS bitmapscan, \
                set_config('enable_indexscan', $2, true) AS indexscan, \
                set_config('enable_seqscan', $3, true) AS seqscan",
        bitmap,
        index,
        seq
    )
    .fetch_one(&mut *tx)
    .await?;
    Ok(())
}

/// Tests the newest [`PROBE`] reports of the filtered set against each tier's match.
pub(super) async fn probe(tx: &mut PgConnection, t: &Terms) -> Result<Probe, DbError> {
    set_access(tx, Access::Walk).await?;
    Ok(probe_statement(t)
        .query_as::<Probe>()
        .fetch_one(&mut *tx)
        .await?)
}

/// The probe's statement: one row, read as a [`Probe`].
fn probe_statement(t: &Terms) -> Statement<'_> {
    let mut s = Statement::new(t, "SELECT count(*)::int8 AS rows, count(*) FILTER (WHERE ");
    s.root_match()
        .push(")::int8 AS root, count(*) FILTER (WHERE ")
        .head_match()
        .push(")::int8 AS head, count(*) FILTER (WHERE ")
        .any_match()
        .push(
            ")::int8 AS any, \
                    (SELECT greatest(reltuples, 0)::float8 FROM pg_class \
                     WHERE oid = 'report_search'::regclass) AS table \
             FROM (SELECT * FROM report_search s WHERE ",
        )
        .filters()
        .newest()
        .push(" LIMIT ")
        .bind(PROBE)
        .push(") s");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_matches_walk_and_rare_ones_use_the_index() {
        let probe = |any: i64| Probe {
            rows: PROBE,
            root: 0,
            head: 0,
            any,
            table: 1_000_000.0,
            forced: None,
        };
        assert_eq!(probe(300).list_access(0.3, 21), Access::Walk);
        assert_eq!(probe(0).list_access(0.0005, 21), Access::Index);
        assert_eq!(probe(300).count_access(), Access::Walk);
        assert_eq!(probe(2).count_access(), Access::Index);
        // Too many matches to count through the index, too thinly spread to find the cap
        // among the newest: a bounded walk (its matches are a lower bound).
        assert_eq!(probe(60).count_access(), Access::Walk);
        // A small filtered set is always walked.
        let small = Probe {
            rows: 40,
            ..probe(0)
        };
        assert_eq!(small.count_access(), Access::Walk);
        assert_eq!(
            small.tier_path(0.0005, 0.3, 21),
            TierPath::Full(Access::Walk)
        );
    }

    #[test]
    fn a_rare_lower_tier_under_a_common_one_is_walked_within_bounds() {
        let probe = Probe {
            rows: PROBE,
            root: 200,
            head: 200,
            any: 200,
            table: 100_000.0,
            forced: None,
        };
        // No symptom match among the newest, the root-cause tier common: a walk would read the
        // whole table, the index would fetch every root-cause match.
        assert_eq!(
            probe.tier_path(probe.share(0), probe.share(200), 21),
            TierPath::Bounded
        );
        // Rare in its tier and in the tiers above: the index.
        let rare = Probe {
            root: 0,
            head: 0,
            any: 1,
            ..probe
        };
        assert_eq!(
            rare.tier_path(rare.share(1), rare.share(1), 21),
            TierPath::Full(Access::Index)
        );
        // Common in its own tier: the walk finds its rows at once.
        assert_eq!(
            probe.tier_path(probe.share(300), probe.share(500), 21),
            TierPath::Full(Access::Walk)
        );
        // A literal search keeps its forced path.
        let literal = Probe {
            forced: Some(Access::Index),
            ..probe
        };
        assert_eq!(
            literal.tier_path(literal.share(0), literal.share(200), 21),
            TierPath::Full(Access::Index)
        );
    }
}
