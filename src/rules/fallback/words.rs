//! The words of a log line as the learned fallback sees them: what varies between runs and
//! between wordings of the same failure (letter case, `camelCase` and `snake_case` joins,
//! numbers, addresses, paths, plural and tense endings) is taken out, so an unseen wording of a
//! known family shares its words with the rule examples the model learned from.

/// One word of a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Word {
    /// The normalised form the model counts (`allocation`, `allocating` → `alloc`).
    pub stem: String,
    /// The word as the line spells it, lowercased: what a person is shown as the basis.
    pub surface: String,
}

/// Words that say nothing about a failure's kind: kept out of the model so a long sentence of
/// glue words cannot outvote the one word that matters. The last row is the boilerplate every
/// traceback and re-raise prints (`Traceback (most recent call last)`, `see above for
/// traceback`, `for details`), whatever failed.
const STOP: &[&str] = &[
    "a",
    "an",
    "and",
    "are",
    "as",
    "at",
    "be",
    "been",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "for",
    "from",
    "had",
    "has",
    "have",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "may",
    "might",
    "on",
    "or",
    "please",
    "so",
    "that",
    "the",
    "then",
    "there",
    "this",
    "to",
    "was",
    "were",
    "when",
    "which",
    "while",
    "will",
    "with",
    "you",
    "your",
    "above",
    "below",
    "call",
    "details",
    "last",
    "most",
    "recent",
    "see",
    "traceback",
];

/// Endings removed from a word of at least four letters more than the ending, longest first:
/// `allocation`, `allocating`, `allocated` and `allocate` are one word to the model.
const ENDINGS: &[&str] = &[
    "ations", "ation", "ating", "ated", "ate", "ings", "ing", "ed", "s",
];

/// Most words taken from one line (a giant line must not cost more than a normal one).
const MAX_WORDS: usize = 64;

/// The words of `line`, in order.
pub(crate) fn words(line: &str) -> Vec<Word> {
    let mut out = Vec::new();
    for chunk in line.split_whitespace() {
        if is_path_or_url(chunk) {
            continue;
        }
        for piece in chunk.split(|c: char| !c.is_alphanumeric()) {
            for part in split_identifier(piece) {
                let lower = part.to_lowercase();
                if !keep(&lower) {
                    continue;
                }
                out.push(Word {
                    stem: stem(&lower),
                    surface: lower,
                });
                if out.len() == MAX_WORDS {
                    return out;
                }
            }
        }
    }
    out
}

/// A file path or URL names where, not what: `/opt/conda/lib/...`, `C:\Users\...`,
/// `../src/foo.cc`, `https://...`. A single slash between words (`nvidia.com/gpu`,
/// `PyTorch/CUDA`) is kept.
fn is_path_or_url(chunk: &str) -> bool {
    let trimmed = chunk.trim_start_matches(['(', '[', '\'', '"', '`', '<']);
    trimmed.contains("://")
        || trimmed.contains('\\')
        || trimmed.starts_with(['/', '~'])
        || trimmed.starts_with("./")
        || trimmed.starts_with("../")
        || trimmed.matches('/').count() >= 2
}

/// Splits `cudaErrorMemoryAllocation` into `cuda`, `Error`, `Memory`, `Allocation` and
/// `CUDAError` into `CUDA`, `Error`; digits stay with the letters before them (`float16`).
fn split_identifier(piece: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = piece.char_indices().collect();
    let mut parts = Vec::new();
    let mut start = 0;
    for i in 1..chars.len() {
        let (pos, c) = chars[i];
        let prev = chars[i - 1].1;
        let next_lower = chars.get(i + 1).is_some_and(|(_, n)| n.is_lowercase());
        let boundary = c.is_uppercase()
            && (prev.is_lowercase()
                || prev.is_ascii_digit()
                || (prev.is_uppercase() && next_lower));
        if boundary {
            parts.push(&piece[start..pos]);
            start = pos;
        }
    }
    if start < piece.len() {
        parts.push(&piece[start..]);
    }
    parts
}

/// Whether a lowercased word can tell failures apart: not a glue word, not a number, not a
/// hex address or hash, not a glog header (`e0617`), at least two letters.
fn keep(word: &str) -> bool {
    let letters = word.chars().filter(|c| c.is_alphabetic()).count();
    if letters < 2 || STOP.contains(&word) {
        return false;
    }
    let digits = word.chars().filter(char::is_ascii_digit).count();
    let hexlike = word.chars().all(|c| c.is_ascii_hexdigit());
    // `0x7f3a...`, `deadbeef12` and sha-like runs are addresses; `float16` and `sm80` are not.
    !(word.starts_with("0x") || (hexlike && digits > 0 && word.len() >= 6))
}

fn stem(word: &str) -> String {
    for ending in ENDINGS {
        if let Some(base) = word.strip_suffix(ending)
            && base.chars().count() >= 4
            && !(*ending == "s" && (base.ends_with('s') || base.ends_with('u')))
        {
            return base.to_owned();
        }
    }
    word.to_owned()
}

#[cfg(test)]
mod tests {
    use super::words;

    fn stems(line: &str) -> Vec<String> {
        words(line).into_iter().map(|w| w.stem).collect()
    }

    #[test]
    fn identifiers_split_into_their_words_and_lose_case() {
        assert_eq!(
            stems("cudaErrorMemoryAllocation CUDA_ERROR_OUT_OF_MEMORY CUDAError"),
            [
                "cuda", "error", "memory", "alloc", "cuda", "error", "out", "of", "memory", "cuda",
                "error"
            ]
        );
    }

    #[test]
    fn numbers_addresses_paths_and_glog_headers_are_dropped() {
        assert_eq!(
            stems(
                "E0617 12:01:02.123 /opt/conda/lib/rmm/mr.hpp:42 at 0x7f3a9c00 failed 4096 bytes"
            ),
            ["fail", "byte"]
        );
        assert_eq!(
            stems("look https://example.org/a/b and C:\\x\\y.dll"),
            ["look"]
        );
    }

    #[test]
    fn tense_and_plural_endings_meet_in_one_stem() {
        let got = stems("allocation allocating allocated allocate devices device");
        assert_eq!(
            got,
            ["alloc", "alloc", "alloc", "alloc", "device", "device"]
        );
        // The surface form is what a person reads.
        assert_eq!(words("Allocating")[0].surface, "allocating");
    }

    #[test]
    fn dtype_names_with_digits_are_kept() {
        assert_eq!(
            stems("expected float16 but got int64"),
            ["expect", "float16", "got", "int64"]
        );
    }
}
