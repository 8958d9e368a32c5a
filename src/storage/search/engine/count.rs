//! The total, in groups (one search row each): the groups of the matching reports, found up to
//! [`COUNT_CAP`] reports by a bounded newest-first walk or through the index, whichever the
//! probe says proves it cheaply (else the lower bound the walk did prove), with the groups and
//! the fixes' groups that match; and how such a total adds up and reads.

use sqlx::PgConnection;

use super::plan::{Access, COUNT_WALK_ROWS, Probe, set_access};
use super::terms::Terms;
use crate::storage::DbError;
use crate::storage::search::{COUNT_CAP, Total};

/// The total in groups, reading matching reports up to [`COUNT_CAP`] (beyond them "at least"
/// the groups those hold).
pub(super) async fn count(
    tx: &mut PgConnection,
    t: &Terms,
    probe: &Probe,
) -> Result<Total, DbError> {
    let access = probe.count_access();
    set_access(tx, access).await?;
    let (reports, mut groups): (i64, Vec<i64>) = if access == Access::Walk {
        // Newest first (the recent pages are the ones in memory), a bounded number of rows.
        bind_terms!(sqlx::query_as(COUNT_WALK), t)
            .bind(COUNT_CAP)
            .bind(COUNT_WALK_ROWS)
            .fetch_one(&mut *tx)
            .await?
    } else {
        // In physical order, stopping after enough rows of the bitmap.
        bind_terms!(sqlx::query_as(COUNT_INDEX), t)
            .bind(COUNT_CAP)
            .fetch_one(&mut *tx)
            .await?
    };
    // Every matching report was read: fewer than the cap, and (for a walk) the walk read the
    // whole filtered set.
    let complete = reports < COUNT_CAP
        && (access != Access::Walk
            || sqlx::query_scalar::<_, i64>(COUNT_ROWS)
                .bind(t.category)
                .bind(&t.project)
                .bind(COUNT_WALK_ROWS + 1)
                .fetch_one(&mut *tx)
                .await?
                <= COUNT_WALK_ROWS);
    set_access(tx, Access::Planner).await?;
    let others: Vec<i64> = bind_terms!(sqlx::query_scalar(COUNT_OTHERS), t)
        .bind(COUNT_CAP)
        .fetch_one(&mut *tx)
        .await?;
    groups.extend(others);
    groups.sort_unstable();
    groups.dedup();
    let n = groups.len() as i64;
    Ok(if complete {
        Total::Exact(0).plus(n)
    } else {
        Total::AtLeast(n).plus(0)
    })
}

impl Total {
    /// This total and `n` more hits, capped at [`COUNT_CAP`]; a lower bound is rounded down to
    /// a number people read at a glance (412 to 400, 1,234 to 1,000).
    fn plus(self, n: i64) -> Total {
        match self {
            Total::Exact(m) if m + n < COUNT_CAP => Total::Exact(m + n),
            Total::Exact(_) => Total::AtLeast(COUNT_CAP),
            Total::AtLeast(m) => Total::AtLeast(round_down(m + n).min(COUNT_CAP)),
        }
    }
}

/// `n` rounded down to its leading digit (412 to 400, 87 to 80, 7 stays 7).
fn round_down(n: i64) -> i64 {
    let mut unit = 1;
    while n / unit >= 10 {
        unit *= 10;
    }
    n / unit * unit
}

/// Matching reports (up to $6 of the newest $7 of the filtered set) and their groups.
const COUNT_WALK: &str = concat!(
    "SELECT count(*)::int8, coalesce(array_agg(DISTINCT x.group_id), '{}') \
     FROM (SELECT s.group_id FROM (SELECT * FROM report_search s WHERE ",
    filters!(),
    newest!(),
    " LIMIT $7) s WHERE ",
    any_match!(),
    " LIMIT $6) x"
);
/// Rows of the filtered set ($1 category, $2 project), up to $3 (from the recency indexes).
const COUNT_ROWS: &str = "SELECT count(*)::int8 FROM (SELECT 1 FROM report_search s \
     WHERE ($1::text IS NULL OR s.category = $1) AND ($2::text IS NULL OR s.project = lower($2)) \
     LIMIT $3) x";
/// Matching reports (up to $6) and their groups.
const COUNT_INDEX: &str = concat!(
    "SELECT count(*)::int8, coalesce(array_agg(DISTINCT x.group_id), '{}') \
     FROM (SELECT s.group_id FROM report_search s WHERE ",
    any_match!(),
    " AND ",
    filters!(),
    " LIMIT $6) x"
);
/// The matching groups, and the groups of the matching fixes (up to $6 each).
const COUNT_OTHERS: &str = concat!(
    "SELECT array(",
    "SELECT g.id FROM groups g \
     WHERE (($1::tsquery IS NOT NULL AND g.search @@ $1::tsquery) OR ($2::text IS NOT NULL \
            AND (g.title ILIKE $2 OR g.root_cause_text ILIKE $2))) \
       AND g.merged_into IS NULL \
       AND ($3::text IS NULL OR g.category = $3) AND $4::text IS NULL LIMIT $6) \
     || array(\
     SELECT f.group_id FROM fixes f JOIN groups g ON g.id = f.group_id \
     WHERE (($1::tsquery IS NOT NULL AND f.search @@ $1::tsquery) OR ($2::text IS NOT NULL \
            AND (f.summary ILIKE $2 OR f.details ILIKE $2))) \
       AND ($3::text IS NULL OR g.category = $3) AND $4::text IS NULL LIMIT $6)"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_add_up_to_the_cap_and_lower_bounds_read_at_a_glance() {
        assert_eq!(Total::Exact(3).plus(2), Total::Exact(5));
        assert_eq!(Total::Exact(999).plus(1), Total::AtLeast(COUNT_CAP));
        assert_eq!(Total::AtLeast(412).plus(3), Total::AtLeast(400));
        assert_eq!(Total::AtLeast(87).plus(0), Total::AtLeast(80));
        assert_eq!(Total::AtLeast(7).plus(0), Total::AtLeast(7));
        assert_eq!(Total::AtLeast(990).plus(40), Total::AtLeast(COUNT_CAP));
    }
}
