//! Ids as people and clients write them. An id is exact (SECURITY.md item 25): only the
//! canonical decimal spelling of a positive number names a row, so `01`, `+1`, ` 1` and `1.0`
//! are no id at all rather than a second spelling of id 1 (a path, a form field or the CLI
//! would otherwise reach the same row by several names, and a log or an audit line could not
//! be matched against the id it acted on).

/// The id `raw` spells: ASCII digits with no leading zero, at most what an `i64` holds, above
/// zero. `None` for anything else.
#[must_use]
pub fn parse(raw: &str) -> Option<i64> {
    let canonical =
        !raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit()) && !raw.starts_with('0');
    canonical.then(|| raw.parse::<i64>().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn only_the_canonical_spelling_is_an_id() {
        for (raw, id) in [("1", 1), ("14", 14), ("9223372036854775807", i64::MAX)] {
            assert_eq!(parse(raw), Some(id), "{raw}");
        }
        for raw in [
            "",
            "0",
            "01",
            "007",
            "+1",
            "-1",
            " 1",
            "1 ",
            "1.0",
            "1e3",
            "0x1",
            "١",
            "9223372036854775808",
            "gtr_abc",
            "fourteen",
        ] {
            assert_eq!(parse(raw), None, "{raw:?}");
        }
    }
}
