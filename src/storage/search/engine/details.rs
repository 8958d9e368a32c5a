//! The page's rows made readable: titles, categories and dates of each row's best hit and the
//! row's group (its report count, state and signature), read for the page alone, and snippets
//! with the matches marked, split into segments the pages and the API render without parsing
//! markup.

use std::collections::HashMap;

use sqlx::PgConnection;

use super::plan::{Access, set_access};
use super::rank::Ranked;
use super::terms::Terms;
use crate::api_types::GroupState;
use crate::rules::Category;
use crate::storage::DbError;
use crate::storage::search::{Hit, HitGroup, HitKind, SnippetPiece, Tier};
use crate::time::Timestamp;

/// A best hit's details, as each kind's statement reads them.
struct DetailRow {
    id: i64,
    group_id: i64,
    title: String,
    category: Category,
    project: String,
    created_at: Timestamp,
    /// The matching text with the matches marked.
    snippet: String,
}

/// Reads [`DetailRow`]s: `$columns` (up to the snippet), the snippet of the text `$text`, then
/// `$from`, checked against the schema like every fixed statement. The snippet is a window
/// around the first occurrence of the text as typed ($2), when it appears as such; else
/// `ts_headline` for the words ($1). The marks are control characters, which documents never
/// hold (and other texts have replaced).
macro_rules! details {
    ($columns:tt, $text:tt, $from:tt, $($args:tt)*) => {
        sqlx::query_as!(
            DetailRow,
            $columns
                + "(SELECT CASE WHEN at > 0 THEN \
                     substr(x, greatest(1, at - 60), at - greatest(1, at - 60)) || E'\\x01' \
                     || substr(x, at, length($2)) || E'\\x02' || substr(x, at + length($2), 120) \
                 ELSE coalesce(ts_headline('simple', x, $1::text::tsquery, \
                     'StartSel=\x01, StopSel=\x02, MaxWords=24, MinWords=10, ShortWord=1, \
                      MaxFragments=2, FragmentDelimiter=\" … \"'), left(x, 200)) END \
                 FROM (SELECT x, strpos(lower(x), lower($2)) AS at \
                       FROM (SELECT translate("
                + $text
                + ", E'\\x01\\x02', '  ') AS x) x0) x1) AS \"snippet!\""
                + $from,
            $($args)*
        )
    };
}

/// The page's rows: each best hit with its title and snippet and its group, in rank order.
pub(super) async fn details(
    tx: &mut PgConnection,
    t: &Terms,
    page: &[Ranked],
) -> Result<Vec<Hit>, DbError> {
    set_access(tx, Access::Planner).await?;
    let mut rows: HashMap<(HitKind, i64), DetailRow> = HashMap::new();
    for kind in [HitKind::Report, HitKind::Group, HitKind::Fix] {
        let of_kind: Vec<&Ranked> = page.iter().filter(|r| r.kind == kind).collect();
        if of_kind.is_empty() {
            continue;
        }
        let ids: Vec<i64> = of_kind.iter().map(|r| r.id).collect();
        let found = match kind {
            HitKind::Report => {
                let tiers: Vec<i16> = of_kind.iter().map(|r| tier_code(r.tier)).collect();
                report_details(tx, t, &ids, &tiers).await?
            }
            HitKind::Group => group_details(tx, t, &ids).await?,
            HitKind::Fix => fix_details(tx, t, &ids).await?,
        };
        rows.extend(found.into_iter().map(|row| ((kind, row.id), row)));
    }
    let mut groups = groups_of(tx, page).await?;
    // A row gone since it was ranked (a group deleted by reclassification) is left out.
    Ok(page
        .iter()
        .filter_map(|r| {
            let row = rows.remove(&(r.kind, r.id))?;
            let group = groups.remove(&r.group)?;
            Some(Hit {
                kind: r.kind,
                id: row.id,
                group_id: row.group_id,
                title: row.title,
                category: row.category,
                project: row.project,
                created_at: row.created_at,
                tier: r.tier,
                snippet: segments(&row.snippet),
                group,
            })
        })
        .collect())
}

/// How a report statement's `p.tier` names a tier.
fn tier_code(tier: Tier) -> i16 {
    match tier {
        Tier::RootCause => 0,
        Tier::Fix => 1,
        Tier::Symptom => 2,
        Tier::Log => 3,
    }
}

/// Reports `ids` with the snippet of the section their tier (`tiers`, in the same order)
/// matched.
async fn report_details(
    tx: &mut PgConnection,
    t: &Terms,
    ids: &[i64],
    tiers: &[i16],
) -> Result<Vec<DetailRow>, DbError> {
    Ok(details!(
        r#"SELECT r.id, r.group_id, r.title, r.category AS "category: Category", r.project,
             r.created_at AS "created_at: Timestamp", "#,
        "CASE p.tier WHEN 0 THEN s.root WHEN 2 THEN s.symptoms \
         ELSE s.names || E'\\n' || s.excerpt END",
        r#" FROM unnest($3::int8[], $4::int2[]) AS p(id, tier)
         JOIN report_search s ON s.report_id = p.id JOIN reports r ON r.id = p.id"#,
        t.all.as_deref(),
        t.text,
        ids,
        tiers
    )
    .fetch_all(&mut *tx)
    .await?)
}

/// Groups `ids`, with the snippet of their root cause (else their title), dated when last seen.
async fn group_details(
    tx: &mut PgConnection,
    t: &Terms,
    ids: &[i64],
) -> Result<Vec<DetailRow>, DbError> {
    Ok(details!(
        r#"SELECT g.id, g.id AS group_id, g.title, g.category AS "category: Category",
             '' AS "project!", g.last_seen AS "created_at: Timestamp", "#,
        "CASE WHEN g.root_cause_text = '' THEN g.title ELSE g.root_cause_text END",
        " FROM groups g WHERE g.id = ANY($3)",
        t.all.as_deref(),
        t.text,
        ids
    )
    .fetch_all(&mut *tx)
    .await?)
}

/// Fixes `ids`, titled by their summary, in their group's category.
async fn fix_details(
    tx: &mut PgConnection,
    t: &Terms,
    ids: &[i64],
) -> Result<Vec<DetailRow>, DbError> {
    Ok(details!(
        r#"SELECT f.id, f.group_id, f.summary AS title, g.category AS "category: Category",
             '' AS "project!", f.created_at AS "created_at: Timestamp", "#,
        "f.summary || E'\\n' || f.details",
        " FROM fixes f JOIN groups g ON g.id = f.group_id WHERE f.id = ANY($3)",
        t.all.as_deref(),
        t.text,
        ids
    )
    .fetch_all(&mut *tx)
    .await?)
}

/// The groups of the page's rows, by id, counted as the group page counts them (the columns
/// and joins of a group as `storage::groups` reads it, those a row shows).
async fn groups_of(
    tx: &mut PgConnection,
    page: &[Ranked],
) -> Result<HashMap<i64, HitGroup>, DbError> {
    let ids: Vec<i64> = page.iter().map(|r| r.group).collect();
    let groups = sqlx::query_as!(
        HitGroup,
        r#"SELECT g.id, g.title, g.category AS "category: Category",
             g.state AS "state: GroupState", s.report_count AS "report_count!",
             coalesce(s.last_seen, g.first_seen) AS "last_seen!: Timestamp", g.signature
         FROM groups g
         CROSS JOIN LATERAL (SELECT sum(e.reports)::int8 AS reports,
             max(e.last_seen) AS last_seen FROM group_expired_reports e WHERE e.group_id = g.id) x
         CROSS JOIN LATERAL (SELECT count(*) + coalesce(x.reports, 0) AS report_count,
             coalesce(x.reports, 0) AS removed_count,
             GREATEST(max(r.created_at), x.last_seen) AS last_seen
             FROM reports r WHERE r.group_id = g.id) s
         WHERE g.id = ANY($1)"#,
        &ids
    )
    .fetch_all(&mut *tx)
    .await?;
    Ok(groups.into_iter().map(|g| (g.id, g)).collect())
}

/// Splits a marked snippet (`\x01` starts a match, `\x02` ends it) into segments, with runs of
/// whitespace (line breaks included) as single spaces and adjacent marks joined.
fn segments(marked: &str) -> Vec<SnippetPiece> {
    // Pieces as delimited, whitespace collapsed.
    let mut pieces: Vec<SnippetPiece> = vec![SnippetPiece {
        text: String::new(),
        marked: false,
    }];
    let mut last_space = true;
    for c in marked.chars() {
        match c {
            '\x01' | '\x02' => pieces.push(SnippetPiece {
                text: String::new(),
                marked: c == '\x01',
            }),
            c if c.is_whitespace() => {
                if !last_space && let Some(p) = pieces.last_mut() {
                    p.text.push(' ');
                }
                last_space = true;
            }
            c => {
                if let Some(p) = pieces.last_mut() {
                    p.text.push(c);
                }
                last_space = false;
            }
        }
    }
    let mut out: Vec<SnippetPiece> = Vec::new();
    for piece in pieces.into_iter().filter(|p| !p.text.is_empty()) {
        let n = out.len();
        // A space between two marks joins them ("out of memory" is one mark).
        if piece.marked
            && n >= 2
            && out[n - 2].marked
            && !out[n - 1].marked
            && out[n - 1].text.trim().is_empty()
        {
            let space = out.pop().map(|s| s.text).unwrap_or_default();
            if let Some(prev) = out.last_mut() {
                prev.text.push_str(&space);
                prev.text.push_str(&piece.text);
            }
        } else if let Some(prev) = out.last_mut().filter(|p| p.marked == piece.marked) {
            prev.text.push_str(&piece.text);
        } else {
            out.push(piece);
        }
    }
    if let Some(last) = out.last_mut() {
        let trimmed = last.text.trim_end().len();
        last.text.truncate(trimmed);
    }
    out.retain(|s| !s.text.is_empty());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(segments: &[SnippetPiece]) -> String {
        segments
            .iter()
            .map(|s| {
                if s.marked {
                    format!("[{}]", s.text)
                } else {
                    s.text.clone()
                }
            })
            .collect()
    }

    #[test]
    fn snippets_become_segments_with_adjacent_marks_joined() {
        let s = segments("torch: CUDA \x01out\x02 \x01of\x02 \x01memory\x02.\nTried   again");
        assert_eq!(show(&s), "torch: CUDA [out of memory]. Tried again");
        assert_eq!(s.iter().filter(|s| s.marked).count(), 1);
        assert_eq!(show(&segments("\x01a\x02 b \x01c\x02")), "[a] b [c]");
        assert!(segments("").is_empty());
    }
}
