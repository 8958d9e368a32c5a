//! The query as the statements bind it: the text parsed into a tsquery by PostgreSQL (with the
//! parts of dotted and slashed terms, and prefixes in prefix mode), or a LIKE pattern for a
//! literal search, with the filters. Kept apart from the statements so the rewriting of query
//! text can be read, and tested, on its own.

use sqlx::PgConnection;

use crate::rules::Category;
use crate::storage::DbError;
use crate::storage::search::{Mode, Query, like_escape};

/// The query in the forms the statements bind.
pub(super) struct Terms {
    /// The tsquery (`None` for a literal search, or when the text holds no word).
    pub(super) all: Option<String>,
    /// LIKE pattern of the whole text, for a literal search.
    pub(super) pattern: Option<String>,
    /// The text as typed: a snippet marks it where it appears as such.
    pub(super) text: String,
    /// The query excludes words (`-word`).
    pub(super) negated: bool,
    pub(super) category: Option<&'static str>,
    pub(super) project: Option<String>,
    pub(super) mode: Mode,
}

/// The query's tsqueries, as PostgreSQL parses the text: the words, and the terms that hold
/// `.`, `/`, `:` or `\` again as phrases of their parts (documents index those parts too,
/// migration 0016); in prefix mode, every word of three letters or more as a prefix.
pub(super) async fn terms(tx: &mut PgConnection, q: &Query) -> Result<Terms, DbError> {
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
    let words = sqlx::query_scalar!(
        r#"SELECT w::text AS "words!" FROM (SELECT CASE WHEN $2::text IS NULL
                                     THEN websearch_to_tsquery('simple', $1)
                                     ELSE websearch_to_tsquery('simple', $1)
                                          || websearch_to_tsquery('simple', $2) END AS w) w0
         WHERE numnode(w) > 0"#,
        q.text,
        parts_query(&q.text)
    )
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
