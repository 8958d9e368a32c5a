//! The page's rows made readable: titles, categories and dates of each row's best hit and the
//! row's group (its report count, state and signature), read for the page alone, and snippets
//! with the matches marked, split into segments the pages and the API render without parsing
//! markup.

use std::collections::HashMap;

use sqlx::PgConnection;

use super::plan::{Access, set_access};
use super::rank::Ranked;
use super::terms::Terms;
use crate::rules::Category;
use crate::storage::DbError;
use crate::storage::groups::{GROUP_COLUMNS, GROUP_STATS};
use crate::storage::search::{Hit, HitGroup, HitKind, SnippetPiece, Tier};
use crate::time::Timestamp;

/// Marks a snippet's matches: a window around the first occurrence of the text as typed, when it
/// appears as such; else `ts_headline` for the words. The delimiters are control characters, which documents never hold (and
/// other texts have replaced).
macro_rules! snippet {
    ($text:literal) => {
        concat!(
            "(SELECT CASE WHEN at > 0 THEN \
                 substr(x, greatest(1, at - 60), at - greatest(1, at - 60)) || E'\\x01' \
                 || substr(x, at, length($2)) || E'\\x02' || substr(x, at + length($2), 120) \
             ELSE coalesce(ts_headline('simple', x, $1::tsquery, \
                 'StartSel=\x01, StopSel=\x02, MaxWords=24, MinWords=10, ShortWord=1, \
                  MaxFragments=2, FragmentDelimiter=\" … \"'), left(x, 200)) END \
             FROM (SELECT x, strpos(lower(x), lower($2)) AS at \
                   FROM (SELECT translate(",
            $text,
            ", E'\\x01\\x02', '  ') AS x) x0) x1)"
        )
    };
}

const REPORT_DETAILS: &str = concat!(
    "SELECT r.id, r.group_id, r.title, r.category, r.project, ",
    "r.created_at",
    ", ",
    snippet!(
        "CASE p.tier WHEN 0 THEN s.root WHEN 2 THEN s.symptoms \
         ELSE s.names || E'\\n' || s.excerpt END"
    ),
    " FROM unnest($3::int8[], $4::int2[]) AS p(id, tier) \
     JOIN report_search s ON s.report_id = p.id JOIN reports r ON r.id = p.id"
);
const GROUP_DETAILS: &str = concat!(
    "SELECT g.id, g.id, g.title, g.category, '', ",
    "g.last_seen",
    ", ",
    snippet!("CASE WHEN g.root_cause_text = '' THEN g.title ELSE g.root_cause_text END"),
    " FROM groups g WHERE g.id = ANY($3)"
);
const FIX_DETAILS: &str = concat!(
    "SELECT f.id, f.group_id, f.summary, g.category, '', ",
    "f.created_at",
    ", ",
    snippet!("f.summary || E'\\n' || f.details"),
    " FROM fixes f JOIN groups g ON g.id = f.group_id \
     WHERE f.id = ANY($3)"
);

type DetailRow = (i64, i64, String, Category, String, Timestamp, String);

/// The page's rows: each best hit with its title and snippet and its group, in rank order.
pub(super) async fn details(
    tx: &mut PgConnection,
    t: &Terms,
    page: &[Ranked],
) -> Result<Vec<Hit>, DbError> {
    set_access(tx, Access::Planner).await?;
    let mut rows: HashMap<(HitKind, i64), DetailRow> = HashMap::new();
    for (kind, sql) in [
        (HitKind::Report, REPORT_DETAILS),
        (HitKind::Group, GROUP_DETAILS),
        (HitKind::Fix, FIX_DETAILS),
    ] {
        let of_kind: Vec<&Ranked> = page.iter().filter(|r| r.kind == kind).collect();
        if of_kind.is_empty() {
            continue;
        }
        let ids: Vec<i64> = of_kind.iter().map(|r| r.id).collect();
        let tiers: Vec<i16> = of_kind
            .iter()
            .map(|r| match r.tier {
                Tier::RootCause => 0,
                Tier::Fix => 1,
                Tier::Symptom => 2,
                Tier::Log => 3,
            })
            .collect();
        let query = sqlx::query_as(sql).bind(&t.all).bind(&t.text).bind(&ids);
        let found: Vec<DetailRow> = if kind == HitKind::Report {
            query.bind(&tiers).fetch_all(&mut *tx).await?
        } else {
            query.fetch_all(&mut *tx).await?
        };
        rows.extend(found.into_iter().map(|row| ((kind, row.0), row)));
    }
    let mut groups = groups_of(tx, page).await?;
    // A row gone since it was ranked (a group deleted by reclassification) is left out.
    Ok(page
        .iter()
        .filter_map(|r| {
            let (id, group_id, title, category, project, created_at, snippet) =
                rows.remove(&(r.kind, r.id))?;
            let group = groups.remove(&r.group)?;
            Some(Hit {
                kind: r.kind,
                id,
                group_id,
                title,
                category,
                project,
                created_at,
                tier: r.tier,
                snippet: segments(&snippet),
                group,
            })
        })
        .collect())
}

/// The groups of the page's rows, by id, counted as the group page counts them.
async fn groups_of(
    tx: &mut PgConnection,
    page: &[Ranked],
) -> Result<HashMap<i64, HitGroup>, DbError> {
    let ids: Vec<i64> = page.iter().map(|r| r.group).collect();
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {GROUP_COLUMNS}, g.state FROM groups g {GROUP_STATS} WHERE g.id = ANY($1)"
    )))
    .bind(&ids)
    .fetch_all(&mut *tx)
    .await?;
    let mut out = HashMap::with_capacity(rows.len());
    for row in &rows {
        use sqlx::Row;
        let g: crate::storage::groups::Group = sqlx::FromRow::from_row(row)?;
        out.insert(
            g.id,
            HitGroup {
                id: g.id,
                title: g.title,
                category: g.category,
                state: row.try_get("state")?,
                report_count: g.report_count,
                last_seen: g.last_seen,
                signature: g.signature,
            },
        );
    }
    Ok(out)
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
