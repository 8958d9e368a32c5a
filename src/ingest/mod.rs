//! Ingest: text in, clean lines out. Pure (no database, no network): size caps, decoding,
//! normalization of what people paste and CI prints, secret scrubbing and traceback parsing.

pub mod normalize;
pub mod scrub;
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

/// Whether a sample (the start of an input) looks like binary data rather than a text log: any
/// NUL byte, or more than 10% bytes that are neither UTF-8 text nor common whitespace.
pub fn looks_binary(sample: &[u8]) -> bool {
    if sample.is_empty() {
        return false;
    }
    if memchr::memchr(0, sample).is_some() {
        return true;
    }
    let text = String::from_utf8_lossy(sample);
    let bad = text
        .chars()
        .filter(|&c| {
            c == '\u{fffd}'
                || (c.is_control() && !matches!(c, '\n' | '\r' | '\t' | '\x1b' | '\x08' | '\x0c'))
        })
        .count();
    bad * 10 > text.chars().count()
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
        ];
        for (input, want) in cases {
            assert_eq!(looks_binary(input), *want, "{input:?}");
        }
    }
}
