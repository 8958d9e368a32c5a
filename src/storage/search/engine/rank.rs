//! The ranking: the newest hits of one tier at a time (root cause, fix, symptom, log), reports
//! through the access path the probe chose, groups and fixes through the planner's, as ids,
//! timestamps and groups only (a search row holds its report's group, migration 0049); their
//! titles and snippets are read for the page alone ([`super::details`]).

use sqlx::PgConnection;

use super::plan::{Access, Probe, TIER_WALK_ROWS, TierPath, set_access};
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
    let report = |(id, at, group): (i64, i64, i64)| Ranked {
        tier,
        kind: HitKind::Report,
        id,
        at,
        group,
    };
    match tier {
        Tier::RootCause => {
            let share = probe.share(probe.root);
            set_access(tx, probe.list_access(share, want)).await?;
            let reports = report_rows(tx, t, ROOT_ROWS, want).await?;
            set_access(tx, Access::Planner).await?;
            let groups: Vec<(i64, i64)> = bind_terms!(sqlx::query_as(GROUP_ROWS), t)
                .bind(want)
                .fetch_all(&mut *tx)
                .await?;
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
            let fixes: Vec<(i64, i64, i64)> = bind_terms!(sqlx::query_as(FIX_ROWS), t)
                .bind(want)
                .fetch_all(&mut *tx)
                .await?;
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
            let (own, above, full, bounded) = if tier == Tier::Symptom {
                (
                    probe.head - probe.root,
                    probe.head,
                    SYMPTOM_ROWS,
                    SYMPTOM_ROWS_BOUNDED,
                )
            } else {
                (
                    probe.any - probe.head,
                    probe.any,
                    LOG_ROWS,
                    LOG_ROWS_BOUNDED,
                )
            };
            let path = probe.tier_path(probe.share(own), probe.share(above), want);
            let rows = match path {
                TierPath::Full(access) => {
                    set_access(tx, access).await?;
                    report_rows(tx, t, full, want).await?
                }
                TierPath::Bounded => {
                    set_access(tx, Access::Walk).await?;
                    bind_terms!(sqlx::query_as(bounded), t)
                        .bind(want)
                        .bind(TIER_WALK_ROWS)
                        .fetch_all(&mut *tx)
                        .await?
                }
            };
            let hits = rows.into_iter().map(report).collect();
            Ok((hits, path != TierPath::Bounded))
        }
    }
}

const ROOT_ROWS: &str = concat!(
    "SELECT s.report_id, ",
    micros!("s.created_at"),
    ", s.group_id FROM report_search s WHERE ",
    root_match!(),
    " AND ",
    filters!(),
    newest!(),
    " LIMIT $6"
);
/// A lower tier's rows: its newest `$6` matches, among every row ...
macro_rules! tier_rows {
    ($matches:expr) => {
        concat!(
            "SELECT s.report_id, ",
            micros!("s.created_at"),
            ", s.group_id FROM report_search s WHERE ",
            $matches,
            " AND ",
            filters!(),
            newest!(),
            " LIMIT $6"
        )
    };
}
/// ... or among the newest `$7` rows of the filtered set.
macro_rules! tier_rows_bounded {
    ($matches:expr) => {
        concat!(
            "SELECT s.report_id, ",
            micros!("s.created_at"),
            ", s.group_id FROM (SELECT * FROM report_search s WHERE ",
            filters!(),
            newest!(),
            " LIMIT $7) s WHERE ",
            $matches,
            newest!(),
            " LIMIT $6"
        )
    };
}
const SYMPTOM_ROWS: &str = tier_rows!(concat!(head_match!(), " AND NOT ", root_match!()));
const SYMPTOM_ROWS_BOUNDED: &str =
    tier_rows_bounded!(concat!(head_match!(), " AND NOT ", root_match!()));
const LOG_ROWS: &str = tier_rows!(concat!(any_match!(), " AND NOT ", head_match!()));
const LOG_ROWS_BOUNDED: &str =
    tier_rows_bounded!(concat!(any_match!(), " AND NOT ", head_match!()));
/// Groups match on their title, category and root cause (root-cause tier); they belong to no
/// project, so a project filter leaves them out. A merged group is no hit of its own: its
/// target, which holds its reports now, is.
const GROUP_ROWS: &str = concat!(
    "SELECT g.id, ",
    micros!("g.last_seen"),
    " FROM groups g \
     WHERE (($1::tsquery IS NOT NULL AND g.search @@ $1::tsquery) OR ($2::text IS NOT NULL \
            AND (g.title ILIKE $2 OR g.root_cause_text ILIKE $2))) \
       AND g.merged_into IS NULL \
       AND ($3::text IS NULL OR g.category = $3) AND $4::text IS NULL \
     ORDER BY g.last_seen DESC, g.id DESC LIMIT $6"
);
const FIX_ROWS: &str = concat!(
    "SELECT f.id, ",
    micros!("f.created_at"),
    ", f.group_id FROM fixes f JOIN groups g ON g.id = f.group_id \
     WHERE (($1::tsquery IS NOT NULL AND f.search @@ $1::tsquery) OR ($2::text IS NOT NULL \
            AND (f.summary ILIKE $2 OR f.details ILIKE $2))) \
       AND ($3::text IS NULL OR g.category = $3) AND $4::text IS NULL \
     ORDER BY f.created_at DESC, f.id DESC LIMIT $6"
);

async fn report_rows(
    tx: &mut PgConnection,
    t: &Terms,
    sql: &'static str,
    want: i64,
) -> Result<Vec<(i64, i64, i64)>, DbError> {
    Ok(bind_terms!(sqlx::query_as(sql), t)
        .bind(want)
        .fetch_all(&mut *tx)
        .await?)
}
