//! The total, in groups (one search row each): the groups of the matching reports, found up to
//! [`COUNT_CAP`] reports by a bounded newest-first walk or through the index, whichever the
//! probe says proves it cheaply (else the lower bound the walk did prove), with the groups and
//! the fixes' groups that match; and how such a total adds up and reads.

use sqlx::PgConnection;

use super::plan::{Access, COUNT_WALK_ROWS, Probe, set_access};
use super::sql::Statement;
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
    let mut counted = if access == Access::Walk {
        // Newest first (the recent pages are the ones in memory), a bounded number of rows.
        walk_statement(t)
    } else {
        // In physical order, stopping after enough rows of the bitmap.
        index_statement(t)
    };
    let Counted {
        reports,
        mut groups,
    } = counted.query_as().fetch_one(&mut *tx).await?;
    // Every matching report was read: fewer than the cap, and (for a walk) the walk read the
    // whole filtered set.
    let complete = reports < COUNT_CAP
        && (access != Access::Walk
            || filtered_rows(tx, t, COUNT_WALK_ROWS + 1).await? <= COUNT_WALK_ROWS);
    set_access(tx, Access::Planner).await?;
    groups.extend(other_groups(tx, t).await?);
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

/// Matching reports (up to the cap) and their groups, as the count statements read them.
#[derive(sqlx::FromRow)]
struct Counted {
    reports: i64,
    groups: Vec<i64>,
}

/// [`Counted`] among the newest [`COUNT_WALK_ROWS`] of the filtered set.
fn walk_statement(t: &Terms) -> Statement<'_> {
    let mut s = Statement::new(
        t,
        "SELECT count(*)::int8 AS reports, \
             coalesce(array_agg(DISTINCT x.group_id), '{}') AS groups \
         FROM (SELECT s.group_id FROM (SELECT * FROM report_search s WHERE ",
    );
    s.filters()
        .newest()
        .push(" LIMIT ")
        .bind(COUNT_WALK_ROWS)
        .push(") s WHERE ")
        .any_match()
        .push(" LIMIT ")
        .bind(COUNT_CAP)
        .push(") x");
    s
}

/// [`Counted`] among every row.
fn index_statement(t: &Terms) -> Statement<'_> {
    let mut s = Statement::new(
        t,
        "SELECT count(*)::int8 AS reports, \
             coalesce(array_agg(DISTINCT x.group_id), '{}') AS groups \
         FROM (SELECT s.group_id FROM report_search s WHERE ",
    );
    s.any_match()
        .push(" AND ")
        .filters()
        .push(" LIMIT ")
        .bind(COUNT_CAP)
        .push(") x");
    s
}

/// Rows of the filtered set, up to `limit` (from the recency indexes).
async fn filtered_rows(tx: &mut PgConnection, t: &Terms, limit: i64) -> Result<i64, DbError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT count(*)::int8 AS "rows!" FROM (SELECT 1 FROM report_search s
         WHERE ($1::text IS NULL OR s.category = $1) AND ($2::text IS NULL OR s.project = lower($2))
         LIMIT $3) x"#,
        t.category,
        t.project.as_deref(),
        limit
    )
    .fetch_one(&mut *tx)
    .await?)
}

/// The matching groups, and the groups of the matching fixes (up to [`COUNT_CAP`] each).
async fn other_groups(tx: &mut PgConnection, t: &Terms) -> Result<Vec<i64>, DbError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT array(
             SELECT g.id FROM groups g
             WHERE (($1::text::tsquery IS NOT NULL AND g.search @@ $1::text::tsquery)
                    OR ($2::text IS NOT NULL AND (g.title ILIKE $2 OR g.root_cause_text ILIKE $2)))
               AND g.merged_into IS NULL
               AND ($3::text IS NULL OR g.category = $3) AND $4::text IS NULL LIMIT $5)
         || array(
             SELECT f.group_id FROM fixes f JOIN groups g ON g.id = f.group_id
             WHERE (($1::text::tsquery IS NOT NULL AND f.search @@ $1::text::tsquery)
                    OR ($2::text IS NOT NULL AND (f.summary ILIKE $2 OR f.details ILIKE $2)))
               AND ($3::text IS NULL OR g.category = $3) AND $4::text IS NULL LIMIT $5)
         AS "groups!""#,
        t.all.as_deref(),
        t.pattern.as_deref(),
        t.category,
        t.project.as_deref(),
        COUNT_CAP
    )
    .fetch_one(&mut *tx)
    .await?)
}

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
