//! The SQL fragments every report statement of the search shares: what "matches" means for
//! each tier's section, the filters and the newest-first order. The report statements are the
//! one place where SQL is assembled at run time: the same fragments make the probe, the count
//! and each tier's list, in a shape the probe chose (every row or a bounded walk). A
//! [`Statement`] is built from them with sqlx's `QueryBuilder`: its text is only ever these
//! constants, and each fragment binds the query's terms where it reads them, so user input only
//! ever travels as a bound parameter. PostgreSQL plans each statement with the actual words (the
//! search's transaction forces custom plans), so a term bound in several places plans as one.

use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::QueryAs;
use sqlx::{Encode, FromRow, Postgres, QueryBuilder, Type};

use super::terms::Terms;

/// A literal match reads the error text (root cause and symptoms); the trigram index covers
/// this expression.
const LIT: &str = "(s.root || E'\\n' || s.symptoms)";

/// A report statement being assembled over the query's [`Terms`].
pub(super) struct Statement<'t> {
    sql: QueryBuilder<Postgres>,
    terms: &'t Terms,
}

impl<'t> Statement<'t> {
    /// A statement over `terms` that starts with `sql`.
    pub(super) fn new(terms: &'t Terms, sql: &'static str) -> Self {
        Statement {
            sql: QueryBuilder::new(sql),
            terms,
        }
    }

    /// Appends fixed text (a constant: nothing typed by a user is ever pushed).
    pub(super) fn push(&mut self, sql: &'static str) -> &mut Self {
        self.sql.push(sql);
        self
    }

    /// Appends a placeholder bound to `value`.
    pub(super) fn bind<'v, T>(&mut self, value: T) -> &mut Self
    where
        T: Encode<'v, Postgres> + Type<Postgres>,
    {
        self.sql.push_bind(value);
        self
    }

    /// The words as a tsquery's text (NULL for a literal search): cast where read.
    fn words(&mut self) -> &mut Self {
        let t = self.terms;
        self.bind(t.all.as_deref())
    }

    /// The LIKE pattern of a literal search (NULL otherwise).
    fn pattern(&mut self) -> &mut Self {
        let t = self.terms;
        self.bind(t.pattern.as_deref())
    }

    /// Any section matches.
    pub(super) fn any_match(&mut self) -> &mut Self {
        self.push("((")
            .words()
            .push("::tsquery IS NOT NULL AND s.doc @@ ")
            .words()
            .push("::tsquery) OR (")
            .pattern()
            .push("::text IS NOT NULL AND ")
            .push(LIT)
            .push(" ILIKE ")
            .pattern()
            .push("))")
    }

    /// The root-cause section matches; when the query excludes words, the whole document must
    /// match too (a tier's own match must not hide what the whole document excludes).
    pub(super) fn root_match(&mut self) -> &mut Self {
        self.push("(((")
            .words()
            .push("::tsquery IS NOT NULL AND s.root_vec @@ ")
            .words()
            .push("::tsquery) OR (")
            .pattern()
            .push("::text IS NOT NULL AND ")
            .push(LIT)
            .push(" ILIKE ")
            .pattern()
            .push(" AND s.root ILIKE ")
            .pattern()
            .push(")) AND (NOT ")
            .negated()
            .push(" OR ")
            .any_match()
            .push("))")
    }

    /// The root-cause and symptom sections together match (the expression migration 0016
    /// indexes), with the whole document as in [`Statement::root_match`].
    pub(super) fn head_match(&mut self) -> &mut Self {
        self.push("(((")
            .words()
            .push("::tsquery IS NOT NULL AND (s.root_vec || s.symptom_vec) @@ ")
            .words()
            .push("::tsquery) OR (")
            .pattern()
            .push("::text IS NOT NULL AND ")
            .push(LIT)
            .push(" ILIKE ")
            .pattern()
            .push(" AND (s.root ILIKE ")
            .pattern()
            .push(" OR s.symptoms ILIKE ")
            .pattern()
            .push("))) AND (NOT ")
            .negated()
            .push(" OR ")
            .any_match()
            .push("))")
    }

    /// Whether the query excludes words (`-word`).
    fn negated(&mut self) -> &mut Self {
        let t = self.terms;
        self.bind(t.negated)
    }

    /// The category and project filters.
    pub(super) fn filters(&mut self) -> &mut Self {
        let t = self.terms;
        self.push("(")
            .bind(t.category)
            .push("::text IS NULL OR s.category = ")
            .bind(t.category)
            .push(") AND (")
            .bind(t.project.as_deref())
            .push("::text IS NULL OR s.project = lower(")
            .bind(t.project.as_deref())
            .push("))")
    }

    /// Newest first.
    pub(super) fn newest(&mut self) -> &mut Self {
        self.push(" ORDER BY s.created_at DESC, s.report_id DESC")
    }

    /// The statement, its rows read as `T` (by column name).
    pub(super) fn query_as<T>(&mut self) -> QueryAs<'_, Postgres, T, PgArguments>
    where
        T: for<'r> FromRow<'r, PgRow>,
    {
        self.sql.build_query_as()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::search::Mode;

    #[test]
    fn fragments_bind_each_term_where_they_read_it() {
        let terms = Terms {
            all: Some("'oom'".into()),
            pattern: None,
            text: "oom".into(),
            negated: false,
            category: None,
            project: None,
            mode: Mode::Words,
        };
        let mut s = Statement::new(&terms, "SELECT 1 FROM report_search s WHERE ");
        s.any_match().push(" AND ").filters().newest();
        assert_eq!(
            s.sql.sql().as_str(),
            "SELECT 1 FROM report_search s WHERE \
             (($1::tsquery IS NOT NULL AND s.doc @@ $2::tsquery) \
             OR ($3::text IS NOT NULL AND (s.root || E'\\n' || s.symptoms) ILIKE $4)) \
             AND ($5::text IS NULL OR s.category = $6) \
             AND ($7::text IS NULL OR s.project = lower($8)) \
             ORDER BY s.created_at DESC, s.report_id DESC"
        );
    }
}
