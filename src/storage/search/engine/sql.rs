//! The SQL fragments every report statement of the search shares: what "matches" means for
//! each tier's section, the filters, the newest-first order, and the binding of the shared
//! parameters. They are macros (not functions) so each statement is one `concat!`ed constant
//! that PostgreSQL plans with the actual words; declared first in [`super`] so every sibling
//! that builds a statement sees them.

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
