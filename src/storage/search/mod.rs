//! Search over reports, groups and fixes (migration 0016): each report's bounded search
//! document in `report_search`, the vocabulary behind "did you mean" in `search_words`, and the
//! search itself ([`engine`]), which answers one row per group: the group's best match, with
//! the group's report count, state and culprit (issue 39 item 6). User input is only ever a bound parameter: words go through
//! `websearch_to_tsquery`, and a literal substring match escapes LIKE wildcards so `%` and `_`
//! match themselves.

mod engine;

use sqlx::{PgConnection, PgExecutor};

pub use engine::{parts_query, search};

use super::DbError;
use crate::api_types::GroupState;
use crate::rules::Category;
use crate::time::Timestamp;

/// A report's search document, in sections that rank differently (migration 0016). Every
/// section is plain text without control characters (newlines separate lines): snippets mark
/// matches with control characters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Document {
    /// The title and the root-cause line: a match here ranks first.
    pub root: String,
    /// The other findings.
    pub symptoms: String,
    /// Traceback frames, file name, project, branch, commit, job URL.
    pub names: String,
    /// Log lines: the head, the lines around every finding, the tail.
    pub excerpt: String,
}

/// What to search for.
#[derive(Clone, Debug, Default)]
pub struct Query {
    /// The words, in web-search syntax (quotes, `-word`, `or`).
    pub text: String,
    /// How the text matches.
    pub mode: Mode,
    /// Only this category.
    pub category: Option<Category>,
    /// Only this project, in any letter case (reports only).
    pub project: Option<String>,
    /// Hits to skip (the ranks before the page).
    pub offset: i64,
    /// Hits on the page.
    pub limit: i64,
}

/// How a search's text matches, from the most precise to the loosest: the search tries the
/// next only when one finds nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Whole words (and the parts of `a.b/c:d` terms, as phrases).
    #[default]
    Words,
    /// Words of three letters or more also match as the start of a longer word (`IndexSelect`,
    /// a short commit).
    Prefix,
    /// The whole text as a literal substring of the error text (root cause and symptoms).
    Literal,
}

/// How many hits a search has: exact, or at least this many when counting further would cost
/// more than it tells ([`COUNT_CAP`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Total {
    Exact(i64),
    AtLeast(i64),
}

/// Groups are counted up to this many, and ranked and paged up to this many; each tier ranks
/// up to this many hits to find them.
pub const COUNT_CAP: i64 = 1000;

/// What a hit is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HitKind {
    Report,
    Group,
    Fix,
}

impl HitKind {
    /// The wire and CSS spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            HitKind::Report => "report",
            HitKind::Group => "group",
            HitKind::Fix => "fix",
        }
    }
}

/// Where a hit matched, best first: results are ranked by tier, then newest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    /// The root cause (a report's title and root-cause line, a group's).
    RootCause,
    /// A recorded fix.
    Fix,
    /// Another finding of the report.
    Symptom,
    /// The log lines, frames, file name or metadata.
    Log,
}

impl Tier {
    /// The wire spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::RootCause => "root_cause",
            Tier::Fix => "fix",
            Tier::Symptom => "symptom",
            Tier::Log => "log",
        }
    }
}

/// A piece of a snippet; `marked` pieces are what matched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnippetPiece {
    pub text: String,
    pub marked: bool,
}

/// The group a search row stands for, as the row shows it.
#[derive(Clone, Debug)]
pub struct HitGroup {
    pub id: i64,
    pub title: String,
    pub category: Category,
    pub state: GroupState,
    /// Its reports, those retention deleted included (as the group page counts them).
    pub report_count: i64,
    pub last_seen: Timestamp,
    /// The failure's signature: normalized text, then the program's own frames.
    pub signature: String,
}

impl HitGroup {
    /// The program's innermost frame in the failure (`train.py:forward`), if its signature
    /// names one: what tells look-alike groups apart.
    #[must_use]
    pub fn culprit(&self) -> Option<&str> {
        crate::rules::culprit(&self.signature)
    }
}

/// One search row: a group, through its best hit (the report, the group itself or a fix whose
/// match ranks first among the group's).
#[derive(Clone, Debug)]
pub struct Hit {
    pub kind: HitKind,
    /// The report's, group's or fix's id.
    pub id: i64,
    /// The report's or fix's group; a group's own id.
    pub group_id: i64,
    /// A report's or group's title, a fix's summary.
    pub title: String,
    pub category: Category,
    /// A report's project (empty for groups and fixes).
    pub project: String,
    /// When the report or fix was stored, when the group was last seen.
    pub created_at: Timestamp,
    pub tier: Tier,
    /// The matching text around the match, with the match marked.
    pub snippet: Vec<SnippetPiece>,
    /// The group the hit belongs to: what the row stands for.
    pub group: HitGroup,
}

/// One page of rows, one per group.
#[derive(Clone, Debug)]
pub struct Found {
    pub hits: Vec<Hit>,
    /// Groups that match, exact or "at least".
    pub total: Total,
    /// Rows follow this page (within [`COUNT_CAP`]).
    pub more: bool,
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

/// Stores the search document of report `report_id` (just inserted in this transaction) and
/// adds its words to the vocabulary. `words` must be sorted: concurrent uploads then take the
/// vocabulary's row locks in one order and cannot deadlock.
pub async fn insert_document(
    tx: &mut PgConnection,
    report_id: i64,
    doc: &Document,
    words: &[String],
) -> Result<(), DbError> {
    sqlx::query!(
        "INSERT INTO report_search (report_id, created_at, category, project, group_id, root, \
             symptoms, names, excerpt) \
         SELECT id, created_at, category, lower(project), group_id, $2, $3, $4, $5 \
         FROM reports WHERE id = $1",
        report_id,
        doc.root,
        doc.symptoms,
        doc.names,
        doc.excerpt
    )
    .execute(&mut *tx)
    .await?;
    add_words(&mut *tx, words).await
}

/// Adds `words` (sorted) to the vocabulary.
pub async fn add_words(ex: impl PgExecutor<'_>, words: &[String]) -> Result<(), DbError> {
    if words.is_empty() {
        return Ok(());
    }
    sqlx::query!(
        "INSERT INTO search_words (word) SELECT w FROM unnest($1::text[]) AS w \
         ON CONFLICT DO NOTHING",
        words
    )
    .execute(ex)
    .await?;
    Ok(())
}

/// For each of `words` the vocabulary does not hold: the known words that could be its
/// correction (within two letters of its length, starting or ending with the same two letters),
/// in order. Known words are left out.
pub async fn unknown_words(
    ex: impl PgExecutor<'_>,
    words: &[String],
) -> Result<Vec<(String, Vec<String>)>, DbError> {
    if words.is_empty() {
        return Ok(Vec::new());
    }
    let rows = sqlx::query!(
        r#"SELECT w.word AS "word!", c.word AS "candidate?"
         FROM unnest($1::text[]) AS w(word)
         LEFT JOIN LATERAL (
             SELECT k.word FROM search_words k
             WHERE k.word >= left(w.word, 2) AND k.word < left(w.word, 2) || '~'
               AND length(k.word) BETWEEN length(w.word) - 2 AND length(w.word) + 2
             UNION
             SELECT k.word FROM search_words k
             WHERE reverse(k.word) >= reverse(right(w.word, 2))
               AND reverse(k.word) < reverse(right(w.word, 2)) || '~'
               AND length(k.word) BETWEEN length(w.word) - 2 AND length(w.word) + 2
         ) c ON true
         WHERE NOT EXISTS (SELECT 1 FROM search_words k WHERE k.word = w.word)
         ORDER BY 1, 2"#,
        words
    )
    .fetch_all(ex)
    .await?;
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for row in rows {
        let (word, candidate) = (row.word, row.candidate);
        if out.last().is_none_or(|(w, _)| *w != word) {
            out.push((word, Vec::new()));
        }
        if let (Some(c), Some((_, list))) = (candidate, out.last_mut()) {
            list.push(c);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn like_wildcards_are_escaped() {
        assert_eq!(super::like_escape(r"50%_a\b"), r"50\%\_a\\b");
        assert_eq!(super::like_escape("plain"), "plain");
    }
}
