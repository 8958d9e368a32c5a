//! The search itself: hits ranked by tier (root cause, fix, symptom, log), newest first within a
//! tier, counted up to [`COUNT_CAP`], with snippets.
//!
//! Finding "the newest matches" fast over a million reports needs two different walks, and the
//! planner cannot tell which one a query needs: it estimates words as independent, and the
//! words people search for ("illegal memory access") are anything but. A common match is found
//! fastest by walking the reports newest first and testing each row's inline vector (it stops
//! after a few rows); a rare one through the GIN index (a walk would read the whole table). So
//! each search first probes the newest reports of the filtered set ([`PROBE`] rows, a few
//! milliseconds) to measure how common each tier's match is, then sets the access path of every
//! statement from that measure (`enable_bitmapscan` / `enable_indexscan`, local to the search's
//! transaction). The count walks a bounded number of the newest reports, or counts through the
//! index when the matches are few; when neither can prove the total cheaply, it states the
//! lower bound it did prove.

use std::collections::HashMap;

use sqlx::{PgConnection, Row};

use super::{COUNT_CAP, Found, Hit, HitKind, Mode, Query, Segment, Tier, Total, like_escape};
use crate::rules::Category;
use crate::storage::DbError;
use crate::time::Timestamp;

/// Newest reports of the filtered set tested to measure how common a match is.
const PROBE: i64 = 1000;
/// Estimated cost, in microseconds, of testing one row in a newest-first walk (its inline
/// vectors) ...
const WALK_US: f64 = 1.5;
/// ... of one index entry of a bitmap ...
const ENTRY_US: f64 = 0.4;
/// ... and of fetching one row the bitmap points at (a random heap page).
const FETCH_US: f64 = 4.0;

/// A literal match reads the error text (root cause and symptoms); the trigram index covers
/// this expression.
macro_rules! lit {
    () => {
        "(s.root || E'\\n' || s.symptoms)"
    };
}

/// Parameters of every report statement: $1 the query (NULL for a literal search), $2 the LIKE
/// pattern (NULL unless literal), $3 category or NULL, $4 project or NULL, $5 whether the query
/// excludes words (then a tier's own match must not hide what the whole document excludes).
macro_rules! any_match {
    () => {
        concat!(
            "(($1::tsquery IS NOT NULL AND s.doc @@ $1::tsquery) OR ($2::text IS NOT NULL AND ",
            lit!(),
            " ILIKE $2))"
        )
    };
}
/// The root-cause section matches.
macro_rules! root_match {
    () => {
        concat!(
            "((($1::tsquery IS NOT NULL AND s.root_vec @@ $1::tsquery) OR ($2::text IS NOT NULL AND ",
            lit!(),
            " ILIKE $2 AND s.root ILIKE $2)) AND (NOT $5 OR ",
            any_match!(),
            "))"
        )
    };
}
/// The root-cause and symptom sections together match (the expression migration 0016 indexes).
macro_rules! head_match {
    () => {
        concat!(
            "((($1::tsquery IS NOT NULL AND (s.root_vec || s.symptom_vec) @@ $1::tsquery) \
              OR ($2::text IS NOT NULL AND ",
            lit!(),
            " ILIKE $2 AND (s.root ILIKE $2 OR s.symptoms ILIKE $2))) AND (NOT $5 OR ",
            any_match!(),
            "))"
        )
    };
}
macro_rules! filters {
    () => {
        "($3::text IS NULL OR s.category = $3) AND ($4::text IS NULL OR s.project = lower($4))"
    };
}
macro_rules! newest {
    () => {
        " ORDER BY s.created_at DESC, s.report_id DESC"
    };
}
/// Microseconds since the epoch: the key hits of all kinds are merged on.
macro_rules! micros {
    ($col:literal) => {
        concat!("(extract(epoch FROM ", $col, ") * 1000000)::int8")
    };
}

/// The query in the forms the statements bind.
struct Terms {
    /// The tsquery (`None` for a literal search, or when the text holds no word).
    all: Option<String>,
    /// LIKE pattern of the whole text, for a literal search.
    pattern: Option<String>,
    /// The text as typed: a snippet marks it where it appears as such.
    text: String,
    /// The query excludes words (`-word`).
    negated: bool,
    category: Option<&'static str>,
    project: Option<String>,
    mode: Mode,
}

/// How a statement reaches its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    /// Walk a recency index newest first, testing each row.
    Walk,
    /// Build a bitmap from the GIN (and trigram) indexes.
    Index,
    /// Whatever the planner picks (groups and fixes: small tables).
    Planner,
}

/// How common each tier's match is among the newest reports of the filtered set.
#[derive(Clone, Copy, Debug, Default)]
struct Probe {
    /// Rows tested (fewer than [`PROBE`]: that is the whole filtered set).
    rows: i64,
    /// Of those, rows whose root cause matches ...
    root: i64,
    /// ... whose root cause and symptoms together match ...
    head: i64,
    /// ... and whose whole document matches.
    any: i64,
    /// Reports in the table (planner statistics).
    table: f64,
    /// The access path to use whatever the numbers say.
    forced: Option<Access>,
}

impl Probe {
    /// Share of rows matching, smoothed so that no match still means "rare", not "never".
    fn share(&self, matches: i64) -> f64 {
        (matches as f64 + 0.5) / (self.rows.max(1) as f64)
    }

    /// The access path finding the newest `want` rows of a match with share `share`: a walk
    /// tests `want / share` rows; a bitmap fetches and sorts every match.
    fn list_access(&self, share: f64, want: i64) -> Access {
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

    /// The access path of the count. A walk reads at most [`COUNT_WALK_ROWS`] rows: enough to
    /// find [`COUNT_CAP`] matches of a common word; a bitmap counts exactly when its matches are
    /// few. In between (matches thinly spread over a long history) neither proves the total
    /// cheaply, and the walk's matches are a lower bound.
    fn count_access(&self) -> Access {
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

/// A ranked hit before its details are read.
#[derive(Clone, Copy, Debug)]
struct Ranked {
    tier: Tier,
    kind: HitKind,
    id: i64,
    /// Microseconds since the epoch.
    at: i64,
}

/// Searches reports, groups and fixes in the caller's transaction: one page of hits ranked by
/// tier, newest first within a tier, with the total. Its planner settings are local to that
/// transaction: end it (a rollback will do) before running anything else on it.
pub async fn search(tx: &mut PgConnection, q: &Query) -> Result<Found, DbError> {
    // Plans made for the actual words (a generic plan cannot know how common they are); exact
    // bitmaps; no JIT compilation or parallel workers, which cost more than these short
    // statements gain from them.
    sqlx::query(
        "SELECT set_config('plan_cache_mode', 'force_custom_plan', true), \
                set_config('work_mem', '32MB', true), set_config('jit', 'off', true), \
                set_config('max_parallel_workers_per_gather', '0', true)",
    )
    .execute(&mut *tx)
    .await?;
    let terms = terms(tx, q).await?;
    if terms.all.is_none() && terms.pattern.is_none() {
        // No word to look for (only punctuation or operators).
        return Ok(Found {
            hits: Vec::new(),
            total: Total::Exact(0),
            more: false,
        });
    }
    // Hits are ranked up to the cap: a page past it is empty.
    let end = (q.offset + q.limit).min(COUNT_CAP) + 1;
    // A literal search comes after words and prefixes found nothing: what it looks for is rare,
    // and testing substrings row by row costs ten times a vector test, so it uses the trigram
    // index without probing.
    let probe = if terms.mode == Mode::Literal {
        Probe {
            forced: Some(Access::Index),
            ..Probe::default()
        }
    } else {
        probe(tx, &terms).await?
    };
    let mut ranked: Vec<Ranked> = Vec::new();
    let mut exhausted = true;
    for tier in [Tier::RootCause, Tier::Fix, Tier::Symptom, Tier::Log] {
        let want = end - ranked.len() as i64;
        if want <= 0 {
            exhausted = false;
            break;
        }
        let found = tier_hits(tx, &terms, &probe, tier, want).await?;
        exhausted &= (found.len() as i64) < want;
        ranked.extend(found);
    }
    let total = if exhausted {
        Total::Exact(ranked.len() as i64)
    } else {
        count(tx, &terms, &probe).await?
    };
    let more = ranked.len() as i64 > q.offset + q.limit && q.offset + q.limit < COUNT_CAP;
    let page: Vec<Ranked> = ranked
        .into_iter()
        .skip(usize::try_from(q.offset).unwrap_or(usize::MAX))
        .take(usize::try_from(q.limit).unwrap_or(0))
        .collect();
    let hits = details(tx, &terms, &page).await?;
    Ok(Found { hits, total, more })
}

/// The query's tsqueries, as PostgreSQL parses the text: the words, and the terms that hold
/// `.`, `/`, `:` or `\` again as phrases of their parts (documents index those parts too,
/// migration 0016); in prefix mode, every word of three letters or more as a prefix.
async fn terms(tx: &mut PgConnection, q: &Query) -> Result<Terms, DbError> {
    let mut terms = Terms {
        all: None,
        pattern: None,
        text: q.text.clone(),
        negated: false,
        category: q.category.map(Category::as_str),
        project: q.project.clone(),
        mode: q.mode,
    };
    if q.mode == Mode::Literal {
        terms.pattern = Some(format!("%{}%", like_escape(&q.text)));
        return Ok(terms);
    }
    let words: Option<String> = sqlx::query_scalar(
        "SELECT w::text FROM (SELECT CASE WHEN $2::text IS NULL \
                                     THEN websearch_to_tsquery('simple', $1) \
                                     ELSE websearch_to_tsquery('simple', $1) \
                                          || websearch_to_tsquery('simple', $2) END AS w) w0 \
         WHERE numnode(w) > 0",
    )
    .bind(&q.text)
    .bind(parts_query(&q.text))
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(words) = words {
        terms.negated = outside_lexemes(&words).contains('!');
        terms.all = Some(if q.mode == Mode::Prefix {
            // Prefixes of one or two letters would match most words.
            map_lexemes(&words, |l| {
                let star = if l.replace("''", "'").chars().count() >= 3 {
                    ":*"
                } else {
                    ""
                };
                format!("'{l}'{star}")
            })
        } else {
            words
        });
    }
    Ok(terms)
}

/// A tsquery's text form with every lexeme (`'it''s'`) replaced by `f` of its quoted content.
fn map_lexemes(tsquery: &str, mut f: impl FnMut(&str) -> String) -> String {
    let mut out = String::with_capacity(tsquery.len() * 2);
    let mut chars = tsquery.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\'' {
            out.push(c);
            continue;
        }
        let mut lexeme = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\'' if chars.peek() == Some(&'\'') => {
                    chars.next();
                    lexeme.push_str("''");
                }
                '\'' => break,
                '\\' => {
                    lexeme.push(c);
                    lexeme.extend(chars.next());
                }
                c => lexeme.push(c),
            }
        }
        out.push_str(&f(&lexeme));
    }
    out
}

/// The operators of a tsquery's text form (its lexemes left out).
fn outside_lexemes(tsquery: &str) -> String {
    map_lexemes(tsquery, |_| String::new())
}

/// `text` with every term that holds `.`, `/`, `:` or `\` as a phrase of its parts
/// (`x/train.py` becomes `"x train py"`), or `None` when no term does. Documents index those
/// parts (migration 0016's `search_parts`), so a path or a dotted name matches its pieces.
#[must_use]
pub fn parts_query(text: &str) -> Option<String> {
    let split = |c: char| matches!(c, '.' | '/' | ':' | '\\');
    if !text.contains(split) {
        return None;
    }
    let mut out = Vec::new();
    let mut in_quotes = false;
    for word in text.split_whitespace() {
        let quotes = word.matches('"').count();
        let parts: String = word
            .chars()
            .map(|c| if split(c) { ' ' } else { c })
            .collect();
        if in_quotes || quotes > 0 || !word.contains(split) {
            out.push(parts);
        } else {
            let (minus, rest) = match parts.strip_prefix('-') {
                Some(rest) => ("-", rest),
                None => ("", parts.as_str()),
            };
            out.push(format!("{minus}\"{}\"", rest.trim()));
        }
        in_quotes ^= quotes % 2 == 1;
    }
    Some(out.join(" "))
}

/// Binds the parameters every report statement shares ($1-$5).
macro_rules! bind_terms {
    ($query:expr, $t:expr) => {
        $query
            .bind(&$t.all)
            .bind(&$t.pattern)
            .bind($t.category)
            .bind(&$t.project)
            .bind($t.negated)
    };
}

async fn set_access(tx: &mut PgConnection, access: Access) -> Result<(), DbError> {
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
    sqlx::query(
        "SELECT set_config('enable_bitmapscan', $1, true), \
                set_config('enable_indexscan', $2, true), set_config('enable_seqscan', $3, true)",
    )
    .bind(bitmap)
    .bind(index)
    .bind(seq)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

async fn probe(tx: &mut PgConnection, t: &Terms) -> Result<Probe, DbError> {
    set_access(tx, Access::Walk).await?;
    let row = bind_terms!(
        sqlx::query(concat!(
            "SELECT count(*)::int8, \
                    count(*) FILTER (WHERE ",
            root_match!(),
            ")::int8, count(*) FILTER (WHERE ",
            head_match!(),
            ")::int8, count(*) FILTER (WHERE ",
            any_match!(),
            ")::int8, \
                    (SELECT greatest(reltuples, 0)::float8 FROM pg_class \
                     WHERE oid = 'report_search'::regclass) \
             FROM (SELECT * FROM report_search s WHERE ",
            filters!(),
            newest!(),
            " LIMIT $6) s"
        )),
        t
    )
    .bind(PROBE)
    .fetch_one(&mut *tx)
    .await?;
    Ok(Probe {
        rows: row.try_get(0)?,
        root: row.try_get(1)?,
        head: row.try_get(2)?,
        any: row.try_get(3)?,
        table: row.try_get(4)?,
        forced: None,
    })
}

/// The newest `want` hits of one tier.
async fn tier_hits(
    tx: &mut PgConnection,
    t: &Terms,
    probe: &Probe,
    tier: Tier,
    want: i64,
) -> Result<Vec<Ranked>, DbError> {
    let report = |id: i64, at: i64| Ranked {
        tier,
        kind: HitKind::Report,
        id,
        at,
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
            let mut hits: Vec<Ranked> = reports.into_iter().map(|(i, a)| report(i, a)).collect();
            hits.extend(groups.into_iter().map(|(id, at)| Ranked {
                tier,
                kind: HitKind::Group,
                id,
                at,
            }));
            // Newest first; a report before its group when both were stored at once.
            hits.sort_by(|a, b| {
                b.at.cmp(&a.at)
                    .then((a.kind == HitKind::Group).cmp(&(b.kind == HitKind::Group)))
                    .then(b.id.cmp(&a.id))
            });
            hits.truncate(usize::try_from(want).unwrap_or(0));
            Ok(hits)
        }
        Tier::Fix => {
            set_access(tx, Access::Planner).await?;
            let fixes: Vec<(i64, i64)> = bind_terms!(sqlx::query_as(FIX_ROWS), t)
                .bind(want)
                .fetch_all(&mut *tx)
                .await?;
            Ok(fixes
                .into_iter()
                .map(|(id, at)| Ranked {
                    tier,
                    kind: HitKind::Fix,
                    id,
                    at,
                })
                .collect())
        }
        Tier::Symptom => {
            let share = probe.share(probe.head - probe.root);
            set_access(tx, probe.list_access(share, want)).await?;
            let rows = report_rows(tx, t, SYMPTOM_ROWS, want).await?;
            Ok(rows.into_iter().map(|(i, a)| report(i, a)).collect())
        }
        Tier::Log => {
            let share = probe.share(probe.any - probe.head);
            set_access(tx, probe.list_access(share, want)).await?;
            let rows = report_rows(tx, t, LOG_ROWS, want).await?;
            Ok(rows.into_iter().map(|(i, a)| report(i, a)).collect())
        }
    }
}

const ROOT_ROWS: &str = concat!(
    "SELECT s.report_id, ",
    micros!("s.created_at"),
    " FROM report_search s WHERE ",
    root_match!(),
    " AND ",
    filters!(),
    newest!(),
    " LIMIT $6"
);
const SYMPTOM_ROWS: &str = concat!(
    "SELECT s.report_id, ",
    micros!("s.created_at"),
    " FROM report_search s WHERE ",
    head_match!(),
    " AND NOT ",
    root_match!(),
    " AND ",
    filters!(),
    newest!(),
    " LIMIT $6"
);
const LOG_ROWS: &str = concat!(
    "SELECT s.report_id, ",
    micros!("s.created_at"),
    " FROM report_search s WHERE ",
    any_match!(),
    " AND NOT ",
    head_match!(),
    " AND ",
    filters!(),
    newest!(),
    " LIMIT $6"
);
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
    " FROM fixes f JOIN groups g ON g.id = f.group_id \
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
) -> Result<Vec<(i64, i64)>, DbError> {
    Ok(bind_terms!(sqlx::query_as(sql), t)
        .bind(want)
        .fetch_all(&mut *tx)
        .await?)
}

/// The total, counting reports up to [`COUNT_CAP`] (then "at least").
async fn count(tx: &mut PgConnection, t: &Terms, probe: &Probe) -> Result<Total, DbError> {
    let access = probe.count_access();
    set_access(tx, access).await?;
    let reports = if access == Access::Walk {
        // Newest first (the recent pages are the ones in memory), a bounded number of rows.
        let found: i64 = bind_terms!(sqlx::query_scalar(COUNT_WALK), t)
            .bind(COUNT_CAP)
            .bind(COUNT_WALK_ROWS)
            .fetch_one(&mut *tx)
            .await?;
        // Fewer matches than the cap: exact when the walk read the whole filtered set.
        let complete = found >= COUNT_CAP
            || sqlx::query_scalar::<_, i64>(COUNT_ROWS)
                .bind(t.category)
                .bind(&t.project)
                .bind(COUNT_WALK_ROWS + 1)
                .fetch_one(&mut *tx)
                .await?
                <= COUNT_WALK_ROWS;
        if complete {
            Total::Exact(found)
        } else {
            Total::AtLeast(found)
        }
    } else {
        // In physical order, stopping after enough rows of the bitmap.
        Total::Exact(
            bind_terms!(sqlx::query_scalar(COUNT_INDEX), t)
                .bind(COUNT_CAP)
                .fetch_one(&mut *tx)
                .await?,
        )
    };
    set_access(tx, Access::Planner).await?;
    let others: i64 = bind_terms!(sqlx::query_scalar(COUNT_OTHERS), t)
        .bind(COUNT_CAP)
        .fetch_one(&mut *tx)
        .await?;
    Ok(reports.plus(others))
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

/// Rows at most a count walks: about ten milliseconds.
const COUNT_WALK_ROWS: i64 = 12_000;
/// Matches at most a bitmap counts exactly (each costs an index entry, the first thousand a row
/// fetch): about ten milliseconds.
const COUNT_INDEX_MATCHES: f64 = 20_000.0;

const COUNT_WALK: &str = concat!(
    "SELECT count(*)::int8 FROM (SELECT 1 FROM (SELECT * FROM report_search s WHERE ",
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
const COUNT_INDEX: &str = concat!(
    "SELECT count(*)::int8 FROM (SELECT 1 FROM report_search s WHERE ",
    any_match!(),
    " AND ",
    filters!(),
    " LIMIT $6) x"
);
const COUNT_OTHERS: &str = concat!(
    "SELECT (SELECT count(*) FROM (",
    "SELECT 1 FROM groups g \
     WHERE (($1::tsquery IS NOT NULL AND g.search @@ $1::tsquery) OR ($2::text IS NOT NULL \
            AND (g.title ILIKE $2 OR g.root_cause_text ILIKE $2))) \
       AND g.merged_into IS NULL \
       AND ($3::text IS NULL OR g.category = $3) AND $4::text IS NULL LIMIT $6) x) \
     + (SELECT count(*) FROM (\
     SELECT 1 FROM fixes f JOIN groups g ON g.id = f.group_id \
     WHERE (($1::tsquery IS NOT NULL AND f.search @@ $1::tsquery) OR ($2::text IS NOT NULL \
            AND (f.summary ILIKE $2 OR f.details ILIKE $2))) \
       AND ($3::text IS NULL OR g.category = $3) AND $4::text IS NULL LIMIT $6) y)"
);

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
    crate::storage::reports::rfc3339!("r.created_at"),
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
    crate::storage::reports::rfc3339!("g.last_seen"),
    ", ",
    snippet!("CASE WHEN g.root_cause_text = '' THEN g.title ELSE g.root_cause_text END"),
    " FROM groups g WHERE g.id = ANY($3)"
);
const FIX_DETAILS: &str = concat!(
    "SELECT f.id, f.group_id, f.summary, g.category, '', ",
    crate::storage::reports::rfc3339!("f.created_at"),
    ", ",
    snippet!("f.summary || E'\\n' || f.details"),
    " FROM fixes f JOIN groups g ON g.id = f.group_id \
     WHERE f.id = ANY($3)"
);

type DetailRow = (i64, i64, String, Category, String, Timestamp, String);

/// The page's hits with their titles and snippets, in rank order.
async fn details(tx: &mut PgConnection, t: &Terms, page: &[Ranked]) -> Result<Vec<Hit>, DbError> {
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
    // A row gone since it was ranked (a group deleted by reclassification) is left out.
    Ok(page
        .iter()
        .filter_map(|r| {
            let (id, group_id, title, category, project, created_at, snippet) =
                rows.remove(&(r.kind, r.id))?;
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
            })
        })
        .collect())
}

/// Splits a marked snippet (`\x01` starts a match, `\x02` ends it) into segments, with runs of
/// whitespace (line breaks included) as single spaces and adjacent marks joined.
fn segments(marked: &str) -> Vec<Segment> {
    // Pieces as delimited, whitespace collapsed.
    let mut pieces: Vec<Segment> = vec![Segment {
        text: String::new(),
        marked: false,
    }];
    let mut last_space = true;
    for c in marked.chars() {
        match c {
            '\x01' | '\x02' => pieces.push(Segment {
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
    let mut out: Vec<Segment> = Vec::new();
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

    fn show(segments: &[Segment]) -> String {
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

    #[test]
    fn lexemes_are_rewritten_and_operators_kept() {
        let q = "'it' <-> 's' & 'o''k' & !'a\\\\b'";
        assert_eq!(
            map_lexemes(q, |l| format!("'{l}':A")),
            "'it':A <-> 's':A & 'o''k':A & !'a\\\\b':A"
        );
        assert_eq!(outside_lexemes(q), " <->  &  & !");
    }

    #[test]
    fn terms_with_dots_slashes_and_colons_become_phrases_of_their_parts() {
        assert_eq!(parts_query("train.py").as_deref(), Some("\"train py\""));
        assert_eq!(
            parts_query("x/train.py:42 loss").as_deref(),
            Some("\"x train py 42\" loss")
        );
        assert_eq!(parts_query("-foo.bar").as_deref(), Some("-\"foo bar\""));
        assert_eq!(
            parts_query("\"torch.cuda error\" x").as_deref(),
            Some("\"torch cuda error\" x")
        );
        assert_eq!(parts_query("out of memory"), None);
    }

    #[test]
    fn totals_add_up_to_the_cap_and_lower_bounds_read_at_a_glance() {
        assert_eq!(Total::Exact(3).plus(2), Total::Exact(5));
        assert_eq!(Total::Exact(999).plus(1), Total::AtLeast(COUNT_CAP));
        assert_eq!(Total::AtLeast(412).plus(3), Total::AtLeast(400));
        assert_eq!(Total::AtLeast(87).plus(0), Total::AtLeast(80));
        assert_eq!(Total::AtLeast(7).plus(0), Total::AtLeast(7));
        assert_eq!(Total::AtLeast(990).plus(40), Total::AtLeast(COUNT_CAP));
    }

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
    }
}
