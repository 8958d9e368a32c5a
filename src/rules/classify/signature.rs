//! A failure's identity: its signature (the root-cause text with what varies between runs
//! removed, then the user's own frames), the culprit frame it ends with, and the fingerprint
//! that groups reports of the same failure.

use sha2::{Digest, Sha256};

use super::{FRAME_REACH, FrameHit, SIGNATURE_FRAMES, SIGNATURE_TEXT};
use crate::rules::Category;

/// The signature of a root cause with everything that varies between runs removed: numbers,
/// addresses, paths (kept to their file name), so the same failure in the same place groups.
pub fn normalize_signature(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for token in text.split_inclusive([' ', '\t']) {
        let (word, sep) = match token.strip_suffix([' ', '\t']) {
            Some(w) => (w, &token[w.len()..]),
            None => (token, ""),
        };
        // Units of byte counts vary with the count (512.00 MiB vs 2.00 GiB).
        let unit = word.trim_end_matches(['.', ',', ';', ')']);
        if matches!(
            unit,
            "B" | "KiB" | "MiB" | "GiB" | "TiB" | "KB" | "MB" | "GB" | "TB" | "bytes"
        ) {
            out.push('B');
            out.push_str(&word[unit.len()..]);
            out.push_str(sep);
            continue;
        }
        let word = if word.contains('/') || word.contains('\\') {
            let trimmed = word.trim_start_matches(['(', '\'', '"', '`', '[']);
            trimmed.rsplit(['/', '\\']).next().unwrap_or(trimmed)
        } else {
            word
        };
        let mut prev_digit = false;
        let mut chars = word.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '0' && chars.peek() == Some(&'x') {
                chars.next();
                while chars.peek().is_some_and(char::is_ascii_hexdigit) {
                    chars.next();
                }
                out.push_str("0x#");
                prev_digit = false;
                continue;
            }
            if c.is_ascii_digit() {
                if !prev_digit {
                    out.push('#');
                }
                prev_digit = true;
                continue;
            }
            prev_digit = false;
            out.push(c);
        }
        out.push_str(sep);
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The failure's shape: `text` normalized as for the fingerprint (cut to
/// [`SIGNATURE_TEXT`]), then the user's own frames (not library code) among those within
/// [`FRAME_REACH`] lines before `anchor`, as `file.py:function`, innermost last.
pub(super) fn signature<'f>(
    text: &str,
    frames: impl Iterator<Item = &'f FrameHit>,
    anchor: usize,
) -> String {
    let mut out = normalize_signature(text);
    out.truncate(out.floor_char_boundary(SIGNATURE_TEXT));
    let mut user: Vec<String> = Vec::new();
    for f in frames.filter(|f| f.line < anchor && f.line + FRAME_REACH >= anchor) {
        if crate::ingest::traceback::is_library(&f.file) {
            continue;
        }
        let base = f.file.rsplit(['/', '\\']).next().unwrap_or(&f.file);
        let name = format!("{base}:{}", f.function);
        // A frame repeated (recursion, every rank's copy of the stack) counts once, at its
        // innermost place.
        user.retain(|n| *n != name);
        user.push(name);
    }
    let skip = user.len().saturating_sub(SIGNATURE_FRAMES);
    for name in &user[skip..] {
        out.push(' ');
        out.push_str(name);
    }
    out
}

/// The innermost of the user's own frames that a [`signature`] ends with (`train.py:forward`),
/// if it names one.
#[must_use]
pub fn culprit(signature: &str) -> Option<&str> {
    let last = signature.rsplit(' ').next()?;
    let (file, function) = last.split_once(':')?;
    let (stem, ext) = file.rsplit_once('.')?;
    let word = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_alphanumeric() || "_-<>.".contains(c))
    };
    (word(stem) && word(ext) && ext.chars().all(char::is_alphanumeric) && word(function))
        .then_some(last)
}

pub(super) fn fingerprint(category: Category, rule: &str, text: &str) -> String {
    let mut h = Sha256::new();
    h.update(category.as_str());
    h.update([0]);
    h.update(rule);
    h.update([0]);
    h.update(normalize_signature(text));
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::culprit;

    #[test]
    fn the_culprit_is_the_innermost_user_frame_a_signature_ends_with() {
        assert_eq!(
            culprit(
                "runtimeerror: cuda error: device-side assert triggered train.py:main model.py:forward"
            ),
            Some("model.py:forward")
        );
        assert_eq!(culprit("x repro.py:<module>"), Some("repro.py:<module>"));
        assert_eq!(culprit("runtimeerror: cuda error: out of memory"), None);
        assert_eq!(culprit("error at line #: foo"), None);
        assert_eq!(culprit(""), None);
        assert_eq!(culprit("see https://x.org:443"), None);
    }
}
