//! Search the knowledge base (issue 18 item 1): checks the request (the same rules for the API
//! and the portal), finds one page of rows, one per group (issue 39 item 6), and helps with what people misremember: a word
//! search does not know gets a "did you mean" (the nearest known word by spelling), and when
//! the words asked find nothing, the corrected words are searched instead and the page says
//! so. Words that find nothing are tried as prefixes of longer words, then as a literal
//! substring.

use std::collections::{BTreeSet, HashMap};

use serde::Deserialize;

pub use crate::storage::search::{Hit, HitGroup, HitKind, Tier, Total};

use super::Error;
use super::upload::search_doc::{is_vocabulary_word, vocabulary_words};
use crate::api_types::ErrorCode;
use crate::rules::Category;
use crate::storage::search::{self as find, Mode};
use crate::storage::{Db, DbError};

/// A search as asked (`GET /api/v1/search`, the portal's search form).
#[derive(Clone, Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SearchRequest {
    /// The words to find, web-search style: all words match, `"quoted words"` as a phrase,
    /// `or` between words, `-word` excludes.
    /// 1-500 characters, not blank, no NUL.
    #[param(
        max_length = 500,
        pattern = r"^[^\u0000]*[^\u0000\u0009-\u000d\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000]*$"
    )]
    pub q: String,
    /// Only this category (any letter case).
    #[param(schema_with = crate::api_types::filters::search_category)]
    pub category: Option<String>,
    /// Only reports of this project (any letter case; at most 200 characters, no NUL).
    #[param(max_length = 200, pattern = r"^[^\u0000]*$")]
    pub project: Option<String>,
    /// 1-based page (1-1000).
    #[param(minimum = 1, maximum = 1000)]
    pub page: Option<u32>,
    /// Rows (groups) per page (1-100, default 20).
    #[param(minimum = 1, maximum = 100)]
    pub per_page: Option<u32>,
}

/// One page of search results.
#[derive(Clone, Debug)]
pub struct HitPage {
    /// The words asked, trimmed.
    pub text: String,
    /// When the words asked found nothing and their spelling correction did: the corrected
    /// words, whose results these are.
    pub corrected: Option<String>,
    /// When some words are unknown and the words asked found something: the same search with
    /// those words corrected.
    pub suggestion: Option<String>,
    pub category: Option<Category>,
    pub project: Option<String>,
    pub page: u32,
    pub per_page: u32,
    /// Groups that match, exact or "at least" ([`find::COUNT_CAP`]).
    pub total: Total,
    /// One row per group: the group's best hit, with the group.
    pub hits: Vec<Hit>,
    pub next_page: Option<u32>,
    pub prev_page: Option<u32>,
}

/// A checked request.
struct Checked {
    text: String,
    category: Option<Category>,
    project: Option<String>,
    page: u32,
    per_page: u32,
}

/// Checks a request; 400 `bad_query` with the reason when it is out of bounds.
fn check(p: &SearchRequest) -> Result<Checked, Error> {
    let bad = |m: &str| Error::Malformed(ErrorCode::BadQuery, m.to_owned());
    // Lengths in characters of the text as sent, as the OpenAPI document states them.
    let text = p.q.trim();
    if text.is_empty() || p.q.chars().count() > 500 || text.contains('\0') {
        return Err(bad("q must be 1-500 characters without NUL"));
    }
    // Categories are typed in any case (`OUT_OF_MEMORY`).
    let category = match p
        .category
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty())
    {
        Some(c) => Some(
            c.to_ascii_lowercase()
                .parse::<Category>()
                .map_err(|e| bad(&e))?,
        ),
        None => None,
    };
    let project = p
        .project
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    if let Some(p) = project {
        super::project::check_name(p).map_err(|why| bad(&why))?;
    }
    let page = p.page.unwrap_or(1);
    let per_page = p.per_page.unwrap_or(20);
    if !(1..=1000).contains(&page) || !(1..=100).contains(&per_page) {
        return Err(bad("page must be 1-1000 and per_page 1-100"));
    }
    Ok(Checked {
        text: text.to_owned(),
        category,
        project: project.map(str::to_owned),
        page,
        per_page,
    })
}

/// Searches reports, groups and fixes, answering one row per group. A page past the last hit is an empty page. When the
/// words asked find nothing, the next tries are, in order: their spelling correction (the page
/// says so), the words as prefixes of longer words (`IndexSelect`, a short commit), the text as
/// a literal substring (at least 3 characters: the trigram index needs them).
#[tracing::instrument(name = "search::search", skip_all, fields(q_chars = request.q.chars().count(), category = ?request.category, project = ?request.project, page = ?request.page))]
pub async fn search(db: &Db, request: &SearchRequest) -> Result<HitPage, Error> {
    let c = check(request)?;
    let words: Vec<String> = vocabulary_words(&c.text)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let unknown = find::unknown_words(db.pool(), &words).await?;
    let corrections: HashMap<String, String> = unknown
        .iter()
        .filter_map(|(w, candidates)| Some((w.clone(), best_correction(w, candidates)?)))
        .collect();
    let suggestion = (!corrections.is_empty()).then(|| corrected_text(&c.text, &corrections));
    let mut found = run(db, &c, &c.text, Mode::Words).await?;
    let mut corrected = None;
    if found.total == Total::Exact(0)
        && let Some(s) = &suggestion
    {
        let again = run(db, &c, s, Mode::Words).await?;
        if again.total != Total::Exact(0) {
            found = again;
            corrected = Some(s.clone());
        }
    }
    for mode in [Mode::Prefix, Mode::Literal] {
        if found.total != Total::Exact(0) || (mode == Mode::Literal && c.text.chars().count() < 3) {
            break;
        }
        found = run(db, &c, &c.text, mode).await?;
    }
    Ok(HitPage {
        suggestion: if corrected.is_some() {
            None
        } else {
            suggestion
        },
        corrected,
        category: c.category,
        project: c.project,
        page: c.page,
        per_page: c.per_page,
        total: found.total,
        next_page: found.more.then_some(c.page + 1),
        prev_page: (c.page > 1).then_some(c.page - 1),
        hits: found.hits,
        text: c.text,
    })
}

/// One search for `text` in `mode`, in its own read-only transaction (the search sets planner
/// options local to it).
async fn run(db: &Db, c: &Checked, text: &str, mode: Mode) -> Result<find::Found, Error> {
    let query = find::Query {
        text: text.to_owned(),
        mode,
        category: c.category,
        project: c.project.clone(),
        offset: i64::from(c.page - 1) * i64::from(c.per_page),
        limit: i64::from(c.per_page),
    };
    let mut tx = db.pool().begin().await.map_err(DbError::from)?;
    let found = find::search(&mut tx, &query).await?;
    tx.rollback().await.map_err(DbError::from)?;
    Ok(found)
}

/// The known word to offer for `word`: among its candidates, the one fewest edits away (a swap
/// of two letters is one edit: "memroy"), at most 1 edit for words of up to 4 letters, 2 up to
/// 8, 3 beyond; among equals, one of the same length ("modle" is "model" before "module"), then
/// the first in alphabetical order.
fn best_correction(word: &str, candidates: &[String]) -> Option<String> {
    let most = match word.len() {
        0..=4 => 1,
        5..=8 => 2,
        _ => 3,
    };
    candidates
        .iter()
        .filter(|c| c.as_str() != word)
        .map(|c| (edits(word, c), c.len().abs_diff(word.len()), c))
        .filter(|(e, _, _)| *e <= most)
        .min()
        .map(|(_, _, c)| c.clone())
}

/// Edit distance counting insertions, deletions, substitutions and swaps of adjacent letters
/// (optimal string alignment).
fn edits(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// `text` with every word that has a correction replaced by it; the rest kept as typed.
fn corrected_text(text: &str, corrections: &HashMap<String, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        let lower = word.to_ascii_lowercase();
        match corrections.get(&lower) {
            Some(c) if is_vocabulary_word(word) => out.push_str(c),
            _ => out.push_str(word),
        }
        word.clear();
    };
    for ch in text.chars() {
        if ch.is_ascii_alphanumeric() {
            word.push(ch);
        } else {
            flush(&mut word, &mut out);
            out.push(ch);
        }
    }
    flush(&mut word, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidates(list: &[&str]) -> Vec<String> {
        list.iter().map(|w| (*w).to_owned()).collect()
    }

    #[test]
    fn corrections_take_the_fewest_edits_then_the_same_length() {
        let near = candidates(&["memo", "memcpy", "memory", "memoryx"]);
        assert_eq!(best_correction("memroy", &near).as_deref(), Some("memory"));
        let near = candidates(&["illegal", "legal"]);
        assert_eq!(best_correction("ilegal", &near).as_deref(), Some("illegal"));
        let near = candidates(&["module", "model"]);
        assert_eq!(best_correction("modle", &near).as_deref(), Some("model"));
        // Too far: nothing to offer.
        assert_eq!(best_correction("xyz", &candidates(&["abc"])), None);
        assert_eq!(best_correction("segfault", &candidates(&["segment"])), None);
    }

    #[test]
    fn edits_count_swaps_as_one() {
        assert_eq!(edits("memroy", "memory"), 1);
        assert_eq!(edits("ilegal", "illegal"), 1);
        assert_eq!(edits("", "abc"), 3);
        assert_eq!(edits("kitten", "sitting"), 3);
    }

    #[test]
    fn corrected_text_replaces_only_the_corrected_words() {
        let fixes = HashMap::from([
            ("ilegal".to_owned(), "illegal".to_owned()),
            ("acess".to_owned(), "access".to_owned()),
        ]);
        assert_eq!(
            corrected_text("Ilegal memory acess -oom", &fixes),
            "illegal memory access -oom"
        );
    }

    #[test]
    fn requests_out_of_bounds_are_refused_and_categories_take_any_case() {
        let ok = |r: SearchRequest| check(&r).map(|c| c.category);
        let req = |category: &str| SearchRequest {
            q: "memory".into(),
            category: Some(category.into()),
            ..SearchRequest::default()
        };
        assert_eq!(
            ok(req("OUT_OF_MEMORY")).ok().flatten(),
            Some(Category::OutOfMemory)
        );
        assert!(ok(req("bogus")).is_err());
        assert!(ok(req("OUT_OF_BOUNDS'")).is_err());
        let paged = SearchRequest {
            q: "x".into(),
            per_page: Some(101),
            ..SearchRequest::default()
        };
        assert!(check(&paged).is_err());
    }
}
