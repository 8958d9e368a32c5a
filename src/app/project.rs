//! The one rule for a project name (issue 28 item 6), applied wherever a request names a
//! project: the upload's `meta.project` (how a project comes to exist), the project filters of
//! search and the group list, and retention settings (API and portal form). One function, so no
//! route refuses a name that another stores, and none takes a name that no report could carry.

/// The longest project name, in bytes of UTF-8 (not characters: 200 letters of a non-Latin
/// script are up to 800 bytes, and every route counts the same way).
pub const MAX_BYTES: usize = 200;

/// `Err(reason)` when `name` cannot be a project's name: longer than [`MAX_BYTES`], or holding a
/// NUL (which PostgreSQL's `text` cannot store). The empty name is "no project" and passes;
/// callers that need a project named say so themselves.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.len() > MAX_BYTES || name.contains('\0') {
        return Err(format!(
            "project must be at most {MAX_BYTES} bytes of UTF-8 without NUL (got {} bytes{})",
            name.len(),
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
    fn names_are_bounded_in_bytes_and_free_of_nul() {
        let cases = [
            ("", true),
            ("vision", true),
            ("team/Vision a\u{7}b", true),
            (&*"p".repeat(200), true),
            (&*"é".repeat(100), true),
            (&*"p".repeat(201), false),
            (&*"é".repeat(101), false),
            ("a\u{0}b", false),
        ];
        for (name, ok) in cases {
            assert_eq!(check_name(name).is_ok(), ok, "{name:?}");
        }
        let why = check_name(&"é".repeat(101)).err().unwrap_or_default();
        assert_eq!(
            why,
            "project must be at most 200 bytes of UTF-8 without NUL (got 202 bytes)"
        );
    }
}
