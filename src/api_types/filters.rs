//! OpenAPI schemas of the list and search filters in query strings. A filter is one of a fixed
//! set of names, or empty for "any" (the portal's forms send an empty field for their "any"
//! choice), and the server trims white space around it; the search takes categories in any
//! letter case. A plain enum would call `""`, `" open "` or `OOM` invalid while the server takes
//! them, so these are patterns built from the types' own lists, with exactly the server's
//! white space (Rust's `trim`, Unicode `White_Space`) and letter case.

use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};

use super::groups::GroupState;
use crate::rules::Category;

/// Unicode `White_Space`, as `str::trim` strips it, in a regular-expression class body.
const WHITE_SPACE: &str =
    r"\u0009-\u000d\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000";

/// A string that is empty, white space, or one of `names` with white space around it.
fn choice(names: &[String], description: &str) -> RefOr<Schema> {
    let pattern = format!("^[{WHITE_SPACE}]*({})?[{WHITE_SPACE}]*$", names.join("|"));
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(pattern))
        .description(Some(description))
        .into()
}

/// `name` in any letter case, as a pattern (`oom` gives `[oO][oO][mM]`).
fn any_case(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphabetic() {
                format!("[{}{}]", c.to_ascii_lowercase(), c.to_ascii_uppercase())
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn categories() -> impl Iterator<Item = &'static str> {
    Category::ALL.into_iter().map(Category::as_str)
}

/// The state filter's words beyond the states (`app::group_triage::UNRESOLVED` and
/// `ANY_STATE`; a test holds them equal).
const STATE_WORDS: [&str; 2] = ["unresolved", "any"];

/// `GET /api/v1/groups?state=`.
pub fn group_state() -> RefOr<Schema> {
    let mut names: Vec<String> = GroupState::ALL.map(|s| s.as_str().to_owned()).to_vec();
    names.extend(STATE_WORDS.map(str::to_owned));
    choice(
        &names,
        "`unresolved` (open or regressed), `open`, `resolved`, `ignored`, `regressed` or `any`; \
         empty: `unresolved`.",
    )
}

/// `GET /api/v1/groups?category=`: a category of the taxonomy, as spelt.
pub fn group_category() -> RefOr<Schema> {
    let names: Vec<String> = categories().map(str::to_owned).collect();
    choice(&names, "A category of the taxonomy; empty: any.")
}

/// `GET /api/v1/search?category=`: a category of the taxonomy, in any letter case.
pub fn search_category() -> RefOr<Schema> {
    let names: Vec<String> = categories().map(any_case).collect();
    choice(
        &names,
        "A category of the taxonomy, in any letter case; empty: any.",
    )
}

/// `GET /api/v1/groups?has_fix=`.
pub fn has_fix() -> RefOr<Schema> {
    choice(
        &["true".into(), "false".into()],
        "`true` or `false`; empty: any.",
    )
}

/// `GET /api/v1/groups?mine=` (`app::group_triage::MINE`; a test holds them equal).
const MINE: [&str; 2] = ["assigned", "recorded"];

/// `GET /api/v1/groups?mine=`.
pub fn mine() -> RefOr<Schema> {
    let names: Vec<String> = MINE.map(str::to_owned).to_vec();
    choice(
        &names,
        "`assigned`: the groups assigned to the caller (the signed-in person, or the token by \
         its name); `recorded`: the groups with a fix the caller recorded; empty: anyone's.",
    )
}

/// `GET /api/v1/groups?assignee_id=`: a person's id, or empty for any.
pub fn person_id() -> RefOr<Schema> {
    let pattern = format!("^[{WHITE_SPACE}]*([1-9][0-9]{{0,17}})?[{WHITE_SPACE}]*$");
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(pattern))
        .description(Some("A person's id (a positive integer); empty: any."))
        .into()
}

/// The group list's orders (`app::group_triage::SORTS`; a test holds them equal).
const SORTS: [&str; 3] = ["last_seen", "count", "first_seen"];

/// `GET /api/v1/groups?sort=`.
pub fn group_sort() -> RefOr<Schema> {
    let names: Vec<String> = SORTS.map(str::to_owned).to_vec();
    choice(
        &names,
        "`last_seen` (default), `count` or `first_seen`, newest or largest first; empty: the \
         default.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sort_filter_names_every_order_the_group_list_knows() {
        let server: Vec<&str> = crate::app::group_triage::SORTS.map(|(n, _)| n).to_vec();
        assert_eq!(server, SORTS.to_vec());
    }

    #[test]
    fn the_state_filter_names_the_words_the_group_list_knows() {
        use crate::app::group_triage::{ANY_STATE, UNRESOLVED};
        assert_eq!(STATE_WORDS, [UNRESOLVED, ANY_STATE]);
    }

    #[test]
    fn the_mine_filter_names_every_choice_the_group_list_knows() {
        let server: Vec<&str> = crate::app::group_triage::MINE.map(|(n, _)| n).to_vec();
        assert_eq!(server, MINE.to_vec());
    }

    #[test]
    fn a_name_in_any_case_matches_each_letter_both_ways() {
        assert_eq!(any_case("oom_1"), "[oO][oO][mM]_1");
    }
}
