//! Full-text search over reports, groups and fixes: `websearch_to_tsquery` on the tsvector
//! columns, plus a literal substring match (pg_trgm index) for paths, op and kernel names that
//! the text parser splits. User input is only ever a bound parameter; LIKE wildcards in it are
//! escaped so `%` and `_` match themselves.

use super::DbError;
use super::reports::rfc3339;
use sqlx::PgExecutor;

/// What to search for.
#[derive(Clone, Debug, Default)]
pub struct Query {
    /// The user's words (web-search syntax: quotes, `-word`, `or`).
    pub text: String,
    /// Only this category.
    pub category: Option<String>,
    /// Only this project, in any letter case (reports only).
    pub project: Option<String>,
    /// Page size.
    pub limit: i64,
    /// Rows to skip.
    pub offset: i64,
}

/// One hit.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Hit {
    /// `report`, `group` or `fix`.
    pub kind: String,
    /// The row's id.
    pub id: i64,
    /// For a fix, its group; otherwise the same as `id` for groups and the group of a report.
    pub group_id: i64,
    pub title: String,
    pub category: String,
    pub project: String,
    /// The matching text (root cause, fix summary).
    pub text: String,
    #[sqlx(rename = "created")]
    pub created_at: crate::time::Timestamp,
    /// Text-search rank.
    pub rank: f32,
}

/// Escapes `\`, `%` and `_` for a LIKE pattern.
pub fn like_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    for c in s.chars() {
        if matches!(c, '\\' | '%' | '_') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Searches reports, groups and fixes; best and newest first. Reports are ranked among their
/// 1,000 most recent matches: a common word matches most of a large table, and
/// ranking every match made such a search take seconds; the newest matches stop an index scan
/// on `created_at` early, and a rare word's matches come from the GIN indexes.
pub async fn search(ex: impl PgExecutor<'_>, q: &Query) -> Result<Vec<Hit>, DbError> {
    let like = format!("%{}%", like_escape(&q.text));
    let sql = concat!(
        "WITH q AS (SELECT websearch_to_tsquery('simple', $1) AS tsq) \
         SELECT * FROM ( \
           SELECT 'report' AS kind, r.id, r.group_id, r.title, r.category, r.project, \
                  r.root_cause_text AS text, ",
        rfc3339!("r.created_at"),
        " AS created, \
                  ts_rank(r.search, q.tsq) + CASE WHEN r.search_text ILIKE $2 THEN 0.5::real ELSE 0::real END AS rank, \
                  r.created_at AS at \
             FROM (SELECT r.* FROM reports r, q \
                    WHERE (r.search @@ q.tsq OR r.search_text ILIKE $2) \
                      AND ($3::text IS NULL OR r.category = $3) \
                      AND ($4::text IS NULL OR lower(r.project) = lower($4)) \
                    ORDER BY r.created_at DESC LIMIT 1000) r, q \
           UNION ALL \
           SELECT 'group', g.id, g.id, g.title, g.category, '', g.root_cause_text, ",
        rfc3339!("g.seen"),
        ", \
                  ts_rank(g.search, q.tsq) + CASE WHEN g.root_cause_text ILIKE $2 THEN 0.5::real ELSE 0::real END, \
                  g.seen \
             FROM (SELECT g.*, coalesce((SELECT max(r.created_at) FROM reports r \
                                         WHERE r.group_id = g.id), g.first_seen) AS seen \
                     FROM groups g) g, q \
            WHERE (g.search @@ q.tsq OR g.root_cause_text ILIKE $2 OR g.title ILIKE $2) \
              AND ($3::text IS NULL OR g.category = $3) \
              AND $4::text IS NULL \
           UNION ALL \
           SELECT 'fix', f.id, f.group_id, f.summary, g.category, '', f.details, ",
        rfc3339!("f.created_at"),
        ", \
                  ts_rank(f.search, q.tsq) + CASE WHEN f.summary ILIKE $2 THEN 0.5::real ELSE 0::real END, \
                  f.created_at \
             FROM fixes f JOIN groups g ON g.id = f.group_id, q \
            WHERE (f.search @@ q.tsq OR f.summary ILIKE $2 OR f.details ILIKE $2) \
              AND ($3::text IS NULL OR g.category = $3) \
              AND $4::text IS NULL \
         ) hits ORDER BY rank DESC, at DESC, id DESC LIMIT $5 OFFSET $6"
    );
    Ok(sqlx::query_as::<_, Hit>(sql)
        .bind(&q.text)
        .bind(&like)
        .bind(&q.category)
        .bind(&q.project)
        .bind(q.limit)
        .bind(q.offset)
        .fetch_all(ex)
        .await?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn like_wildcards_are_escaped() {
        assert_eq!(super::like_escape(r"50%_a\b"), r"50\%\_a\\b");
        assert_eq!(super::like_escape("plain"), "plain");
    }
}
