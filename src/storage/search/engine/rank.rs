//! The ranking: the newest hits of one tier at a time (root cause, fix, symptom, log), reports
//! through the access path the probe chose, groups and fixes through the planner's, as ids,
//! timestamps and groups only (a search row holds its report's group, migration 0049); their
//! titles and snippets are read for the page alone ([`super::details`]).

use sqlx::PgConnection;

use super::plan::{Access, Probe, TIER_WALK_ROWS, TierPath, set_access};
use super::sql::Statement;
use super::terms::Terms;
use crate::storage::DbError;
use crate::storage::search::{HitKind, Tier};

/// A ranked hit before its details are read.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ranked {
    pub(super) tier: Tier,
    pub(super) kind: HitKind,
    pub(super) id: i64,
    /// Microseconds since the epoch.
    at: i64,
    /// The group it belongs to (a group's own id), which the search collapses its rows by.
    pub(super) group: i64,
}

/// The newest `want` hits of one tier, and whether they were looked for among all its rows
/// (false: only among the newest [`TIER_WALK_ROWS`] of the filtered set).
pub(super) async fn tier_hits(
    tx: &mut PgConnection,
    t: &Terms,
    probe: &Probe,
    tier: Tier,
    want: i64,
) -> Result<(Vec<Ranked>, bool), DbError> {
    let report = |r: ReportRow| Ranked {
        tier,
        kind: HitKind::Report,
        id: r.report_id,
        at: r.at,
        group: r.group_id,
    };
    match tier {
        Tier::RootCause => {
            let share = probe.share(probe.root);
            set_access(tx, probe.list_access(share, want)).await?;
            let reports = report_rows(tx, &mut every_row(t, root_only, want)).await?;
            set_access(tx, Access::Planner).await?;
            let groups = group_rows(tx, t, want).await?;
            let mut hits: Vec<Ranked> = reports.into_iter().map(report).collect();
            hits.extend(groups.into_iter().map(|(id, at)| Ranked {
                tier,
                kind: HitKind::Group,
                id,
                at,
                group: id,
            }));
            // Newest first; a report before its group when both were stored at once.
            hits.sort_by(|a, b| {
                b.at.cmp(&a.at)
                    .then((a.kind == HitKind::Group).cmp(&(b.kind == HitKind::Group)))
                    .then(b.id.cmp(&a.id))
            });
            hits.truncate(usize::try_from(want).unwrap_or(0));
            Ok((hits, true))
        }
        Tier::Fix => {
            set_access(tx, Access::Planner).await?;
            let fixes = fix_rows(tx, t, want).await?;
            let fixes = fixes.into_iter().map(|(id, at, group)| Ranked {
                tier,
                kind: HitKind::Fix,
                id,
                at,
                group,
            });
            Ok((fixes.collect(), true))
        }
        // A lower tier's index hands over the rows of the tiers above it as well (their whole
        // document matches too), which are then ruled out one by one.
        Tier::Symptom | Tier::Log => {
            let (own, above, matches): (i64, i64, Matches) = if tier == Tier::Symptom {
                (probe.head - probe.root, probe.head, symptom_only)
            } else {
                (probe.any - probe.head, probe.any, log_only)
            };
            let path = probe.tier_path(probe.share(own), probe.share(above), want);
            let rows = match path {
                TierPath::Full(access) => {
                    set_access(tx, access).await?;
                    report_rows(tx, &mut every_row(t, matches, want)).await?
                }
                TierPath::Bounded => {
                    set_access(tx, Access::Walk).await?;
                    report_rows(tx, &mut newest_rows(t, matches, want)).await?
                }
            };
            let hits = rows.into_iter().map(report).collect();
            Ok((hits, path != TierPath::Bounded))
        }
    }
}

/// A report hit's columns: its id, its time in microseconds since the epoch (the key hits of all
/// kinds are merged on) and its group, from `report_search s`.
const REPORT_HIT: &str = "SELECT s.report_id, \
     (extract(epoch FROM s.created_at) * 1000000)::int8 AS at, s.group_id";

/// A report hit as the tier statements read it ([`REPORT_HIT`]).
#[derive(sqlx::FromRow)]
struct ReportRow {
    report_id: i64,
    /// Microseconds since the epoch.
    at: i64,
    group_id: i64,
}

/// What a report tier's rows match: its own section, and not a tier above it.
type Matches = fn(&mut Statement<'_>);

fn root_only(s: &mut Statement<'_>) {
    s.root_match();
}

fn symptom_only(s: &mut Statement<'_>) {
    s.head_match().push(" AND NOT ").root_match();
}

fn log_only(s: &mut Statement<'_>) {
    s.any_match().push(" AND NOT ").head_match();
}

/// A report tier's newest `want` matches, among every row ...
fn every_row(t: &Terms, matches: Matches, want: i64) -> Statement<'_> {
    let mut s = Statement::new(t, REPORT_HIT);
    s.push(" FROM report_search s WHERE ");
    matches(&mut s);
    s.push(" AND ")
        .filters()
        .newest()
        .push(" LIMIT ")
        .bind(want);
    s
}

/// ... or among the newest [`TIER_WALK_ROWS`] rows of the filtered set.
fn newest_rows(t: &Terms, matches: Matches, want: i64) -> Statement<'_> {
    let mut s = Statement::new(t, REPORT_HIT);
    s.push(" FROM (SELECT * FROM report_search s WHERE ")
        .filters()
        .newest()
        .push(" LIMIT ")
        .bind(TIER_WALK_ROWS)
        .push(") s WHERE ");
    matches(&mut s);
    s.newest().push(" LIMIT ").bind(want);
    s
}

async fn report_rows(
    tx: &mut PgConnection,
    statement: &mut Statement<'_>,
) -> Result<Vec<ReportRow>, DbError> {
    Ok(statement.query_as().fetch_all(&mut *tx).await?)
}

/// Groups match on their title, category and root cause (root-cause tier); they belong to no
/// project, so a project filter leaves them out. A merged group is no hit of its own: its
/// target, which holds its reports now, is. The newest `want`, as (id, microseconds).
async fn group_rows(
    tx: &mut PgConnection,
    t: &Terms,
    want: i64,
) -> Result<Vec<(i64, i64)>, DbError> {
    let rows = sqlx::query!(
        r#"SELECT g.id, (extract(epoch FROM g.last_seen) * 1000000)::int8 AS "at!"
         FROM groups g
         WHERE (($1::text::tsquery IS NOT NULL AND g.search @@ $1::text::tsquery)
                OR ($2::text IS NOT NULL AND (g.title ILIKE $2 OR g.root_cause_text ILIKE $2)))
           AND g.merged_into IS NULL
           AND ($3::text IS NULL OR g.category = $3) AND $4::text IS NULL
         ORDER BY g.last_seen DESC, g.id DESC LIMIT $5"#,
        t.all.as_deref(),
        t.pattern.as_deref(),
        t.category,
        t.project.as_deref(),
        want
    )
    .fetch_all(&mut *tx)
    .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.at)).collect())
}

/// The newest `want` fixes that match (as the groups do), as (id, microseconds, group).
async fn fix_rows(
    tx: &mut PgConnection,
    t: &Terms,
    want: i64,
) -> Result<Vec<(i64, i64, i64)>, DbError> {
    let rows = sqlx::query!(
        r#"SELECT f.id, (extract(epoch FROM f.created_at) * 1000000)::int8 AS "at!", f.group_id
         FROM fixes f JOIN groups g ON g.id = f.group_id
         WHERE (($1::text::tsquery IS NOT NULL AND f.search @@ $1::text::tsquery)
                OR ($2::text IS NOT NULL AND (f.summary ILIKE $2 OR f.details ILIKE $2)))
           AND ($3::text IS NULL OR g.category = $3) AND $4::text IS NULL
         ORDER BY f.created_at DESC, f.id DESC LIMIT $5"#,
        t.all.as_deref(),
        t.pattern.as_deref(),
        t.category,
        t.project.as_deref(),
        want
    )
    .fetch_all(&mut *tx)
    .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.at, r.group_id)).collect())
}
