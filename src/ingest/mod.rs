//! Ingest: text in, clean lines out. Pure (no database, no network): size caps, decoding,
//! terminal escape sequences, normalization of what people paste and CI prints, secret
//! scrubbing, operations prefixes and log levels, traceback parsing, and the block-wise reading,
//! checking and scrubbing of a log as it streams in.

pub mod ansi;
pub mod archive;
pub mod file_scan;
pub mod normalize;
pub mod origin;
pub mod pickle;
pub mod prefix;
pub mod scrub;
pub mod stamp;
pub mod stream;
pub mod traceback;

/// How much of a line the matcher looks at: a minified JSON blob or a base64 line of megabytes
/// must not make rule captures expensive. Lines longer than this are matched on a window around
/// the candidate hit.
pub const MAX_MATCH_LINE: usize = 16 * 1024;

/// Why an input was refused before classification.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Reject {
    /// Nothing to classify.
    #[error("the log is empty")]
    Empty,
    /// Only whitespace: nothing a failure could be read from.
    #[error("the log is blank: it holds only whitespace")]
    Blank,
    /// Larger than the configured cap.
    #[error("the log is larger than the {limit}-byte limit")]
    TooLarge {
        /// The cap in bytes.
        limit: u64,
    },
    /// Not text (NUL bytes or mostly undecodable).
    #[error("the input looks binary, not a text log")]
    Binary,
}

/// Whether a sample (the start of an input) looks like binary data rather than a text log: more
/// than 10% of its characters are neither UTF-8 text nor common whitespace. NUL bytes are left
/// out of the measure: a log padded with NULs after a node died is still a text log (its NULs
/// are neutralized wherever text is stored), while real binaries (ELF, PNG, archives) are full of
/// other non-text bytes.
pub fn looks_binary(sample: &[u8]) -> bool {
    let text = String::from_utf8_lossy(sample);
    let (mut bad, mut total) = (0usize, 0usize);
    for c in text.chars().filter(|&c| c != '\0') {
        total += 1;
        if c == '\u{fffd}'
            || (c.is_control() && !matches!(c, '\n' | '\r' | '\t' | '\x1b' | '\x08' | '\x0c'))
        {
            bad += 1;
        }
    }
    bad * 10 > total
}

/// Text safe to store in PostgreSQL and show: NUL and the other C0 control characters become
/// U+FFFD, except tab, newline, carriage return and ESC (ANSI colours, which views map to CSS
/// classes). PostgreSQL's `text` and `jsonb` refuse NUL, so every untrusted text that reaches a
/// column goes through this (logs' finding texts, worker output, metadata).
pub fn neutralize_controls(text: &str) -> std::borrow::Cow<'_, str> {
    let bad = |c: char| c.is_ascii_control() && !matches!(c, '\t' | '\n' | '\r' | '\x1b' | '\x7f');
    if !text.contains(bad) {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(
        text.chars()
            .map(|c| {
                if bad(c) {
                    char::REPLACEMENT_CHARACTER
                } else {
                    c
                }
            })
            .collect(),
    )
}

/// [`neutralize_controls`] on every string (and key) of a JSON value.
pub fn neutralize_json(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::String(s) => {
            if let std::borrow::Cow::Owned(clean) = neutralize_controls(s) {
                *s = clean;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(neutralize_json),
        Value::Object(map) => {
            let entries = std::mem::take(map);
            for (k, mut v) in entries {
                neutralize_json(&mut v);
                map.insert(neutralize_controls(&k).into_owned(), v);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_detection() {
        let cases: &[(&[u8], bool)] = &[
            (b"RuntimeError: CUDA error\n", false),
            (b"\x1b[31mred\x1b[0m\r\n", false),
            (b"\x7fELF\x02\x01\x01\x00\x00", true),
            (b"\x89PNG\r\n\x1a\n\x00\x00", true),
            (&[0xff, 0xfe, 0xfd, 0xfc, 0xfb, b'a'], true),
            (b"caf\xc3\xa9 \xe2\x96\x88\xe2\x96\x88 45%", false),
            (b"", false),
            (
                b"RuntimeError: CUDA error\n\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
                false,
            ),
            (b"\0\0\0\0", false),
        ];
        for (input, want) in cases {
            assert_eq!(looks_binary(input), *want, "{input:?}");
        }
    }

    #[test]
    fn control_characters_are_neutralized_but_layout_and_colours_kept() {
        assert_eq!(neutralize_controls("a\0b\x07c"), "a\u{fffd}b\u{fffd}c");
        assert_eq!(
            neutralize_controls("\x1b[31mred\x1b[0m\ttab\r\n"),
            "\x1b[31mred\x1b[0m\ttab\r\n"
        );
        assert!(matches!(
            neutralize_controls("plain"),
            std::borrow::Cow::Borrowed(_)
        ));
        let mut v = serde_json::json!({"name\u{0}": ["H100\u{0}", 3, {"k": "v\u{1}"}]});
        neutralize_json(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"name\u{fffd}": ["H100\u{fffd}", 3, {"k": "v\u{fffd}"}]})
        );
    }
}
