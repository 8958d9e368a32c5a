//! The one rule for a project name (issue 28 item 6), applied wherever a request names a
//! project: the upload's `meta.project` (how a project comes to exist), the project filters of
//! search and the group list, and retention settings (API and portal form). One function, so no
//! route refuses a name that another stores, and none takes a name that no report could carry.

/// The longest project name, in characters: what the OpenAPI document can declare
/// (`maxLength` counts characters), so a client that follows the document is never refused.
pub const MAX_CHARS: usize = 200;

/// `Err(reason)` when `name` cannot be a project's name: longer than [`MAX_CHARS`], or holding a
/// NUL (which PostgreSQL's `text` cannot store). The empty name is "no project" and passes;
/// callers that need a project named say so themselves.
pub fn check_name(name: &str) -> Result<(), String> {
    let chars = name.chars().count();
    if chars > MAX_CHARS || name.contains('\0') {
        return Err(format!(
            "project must be at most {MAX_CHARS} characters without NUL (got {chars} characters{})",
            if name.contains('\0') {
                " with a NUL"
            } else {
                ""
            }
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_bounded_in_characters_and_free_of_nul() {
        let cases = [
            ("", true),
            ("vision", true),
            ("team/Vision a\u{7}b", true),
            (&*"p".repeat(200), true),
            (&*"é".repeat(200), true),
            (&*"p".repeat(201), false),
            (&*"é".repeat(201), false),
            ("a\u{0}b", false),
        ];
        for (name, ok) in cases {
            assert_eq!(check_name(name).is_ok(), ok, "{name:?}");
        }
        let why = check_name(&"é".repeat(201)).err().unwrap_or_default();
        assert_eq!(
            why,
            "project must be at most 200 characters without NUL (got 201 characters)"
        );
    }
}
