//! A failure's identity: its signature (the root-cause text with what varies between runs
//! removed, then the user's own frames), the culprit frame it ends with, and the fingerprint
//! that groups reports of the same failure.

use sha2::{Digest, Sha256};

use super::collect::FrameHit;
use super::{FRAME_REACH, SIGNATURE_FRAMES, SIGNATURE_TEXT};
use crate::rules::Category;

/// The signature of a root cause with everything that varies between runs removed: numbers,
/// addresses, paths (kept to their file name), so the same failure in the same place groups.
/// The index of a dimension or axis stays (`at non-singleton dimension 1`): it says which axis
/// of the program's tensors disagree, which a re-run with other sizes does not change.
pub fn normalize_signature(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut after_axis_word = false;
    for token in text.split_inclusive([' ', '\t']) {
        let (word, sep) = match token.strip_suffix([' ', '\t']) {
            Some(w) => (w, &token[w.len()..]),
            None => (token, ""),
        };
        let axis_index = after_axis_word
            && (1..=3).contains(&word.len())
            && word
                .trim_end_matches(['.', ',', ';', ')', ':'])
                .chars()
                .all(|c| c.is_ascii_digit());
        after_axis_word = matches!(
            word.to_ascii_lowercase().as_str(),
            "dimension" | "dim" | "axis"
        );
        if axis_index {
            out.push_str(word);
            out.push_str(sep);
            continue;
        }
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
/// [`SIGNATURE_TEXT`]), then the frames that name the program that failed, as
/// `file.py:function`, innermost last. In order of preference: the user's own frames (not
/// library code) within [`FRAME_REACH`] lines before `anchor`; the user's frames after it (a
/// kernel's assert printed ahead of the Python traceback it causes); and where the log shows
/// no frame of the user's at all (a library's own script, a stack printed from site-packages
/// only), the library frames it failed in, before it or else after it, as Sentry falls back to
/// all frames when none is the application's.
///
/// Also says whether any frame was taken: a signature without one is a failure line alone.
pub(super) fn signature<'f>(
    text: &str,
    frames: impl Iterator<Item = &'f FrameHit>,
    anchor: usize,
) -> (String, bool) {
    let mut out = keep_matmul_dims(text, normalize_signature(text));
    out.truncate(out.floor_char_boundary(SIGNATURE_TEXT));
    let before = |f: &FrameHit| f.line < anchor && f.line + FRAME_REACH >= anchor;
    let after = |f: &FrameHit| f.line > anchor && f.line <= anchor + FRAME_REACH;
    let all: Vec<&FrameHit> = frames.collect();
    let own: Vec<&FrameHit> = (all.iter().copied())
        .filter(|f| !crate::ingest::traceback::is_library(&f.file))
        .collect();
    let mut chosen = pick(&own, before);
    if chosen.is_empty() {
        chosen = pick(&own, after);
    }
    if chosen.is_empty() {
        chosen = pick(&all, before);
    }
    if chosen.is_empty() {
        chosen = pick(&all, after);
    }
    let mut user: Vec<String> = Vec::new();
    for f in chosen {
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
    (out, !user.is_empty())
}

/// A matrix product's mismatch keeps the sizes that come from the model, not the batch:
/// `mat1 and mat2 shapes cannot be multiplied (64x768 and 1152x1152)` says a layer of 1,152
/// inputs was fed 768 features, whatever the batch (the first size). Two programs printing
/// this sentence without a stack are told apart by their layers; the same program re-run with
/// another batch size is not.
fn keep_matmul_dims(text: &str, normalized: String) -> String {
    const SENTENCE: &str = "shapes cannot be multiplied (";
    let Some(at) = text.find(SENTENCE) else {
        return normalized;
    };
    let inner = text[at + SENTENCE.len()..].split(')').next().unwrap_or("");
    let Some((a, b)) = inner.split_once(" and ") else {
        return normalized;
    };
    let dims = |s: &str| -> Option<(String, String)> {
        let (x, y) = s.trim().split_once('x')?;
        let ok = |d: &str| !d.is_empty() && d.len() <= 9 && d.bytes().all(|c| c.is_ascii_digit());
        (ok(x) && ok(y)).then(|| (x.to_owned(), y.to_owned()))
    };
    let (Some((_, a_in)), Some((b_in, b_out))) = (dims(a), dims(b)) else {
        return normalized;
    };
    let generic = format!("{SENTENCE}#x# and #x#)");
    let kept = format!("{SENTENCE}#x{a_in} and {b_in}x{b_out})");
    normalized.replacen(&generic, &kept, 1)
}

/// Lines a library prints with its error that say nothing of the program: CUDA's and HIP's
/// advice after an asynchronous error, NCCL's lead-in to its last error.
const LIBRARY_ADVICE: [&str; 8] = [
    "might be asynchronously reported",
    "CUDA_LAUNCH_BLOCKING",
    "TORCH_USE_CUDA_DSA",
    "TORCH_USE_HIP_DSA",
    "AMD_SERIALIZE_KERNEL",
    "HIP_LAUNCH_BLOCKING",
    "This usually reflects invalid usage",
    "Last error:",
];

/// Whether a whole log (`lines`, numbered) names nothing of its program besides the failure:
/// each line is blank, a code fence or a closing `</details>`, a line a rule matched
/// (`matched`: the failure line and its library's other messages), a copy of the failure line
/// (`failure`, with another thread's or rank's numbers), or the advice its library prints with
/// it. Such a log is the library's generic sentence alone (`CUDA error: an illegal memory
/// access was encountered` and its advice): any program can print it, so it is no evidence
/// that two logs are one failure (issue 39: "unknown" is never a reason to join).
pub(super) fn names_nothing_else<'l>(
    lines: impl IntoIterator<Item = (usize, &'l str)>,
    matched: &[usize],
    failure: &str,
) -> bool {
    let failure = normalize_signature(failure.trim());
    let quote = |c: char| c.is_whitespace() || "`'\"\u{201c}\u{201d}".contains(c);
    lines.into_iter().all(|(number, line)| {
        let fence = line.trim();
        let line = line.trim_matches(quote);
        line.is_empty()
            || fence.starts_with("```")
            || fence == "</details>"
            || fence == "\"\"\""
            || matched.contains(&number)
            || normalize_signature(line) == failure
            || LIBRARY_ADVICE.iter().any(|a| line.contains(a))
    })
}

/// The identity of a log's own text (its lines, trailing blanks removed): what keys a
/// failure whose log [`names_nothing_else`], so that it joins only copies of itself.
pub(super) fn log_identity<'l>(lines: impl IntoIterator<Item = &'l str>) -> String {
    let mut h = Sha256::new();
    for line in lines {
        h.update(line.trim_end());
        h.update([b'\n']);
    }
    hex::encode(h.finalize())
}

/// The frames of `frames` that `keep` takes, in order.
fn pick<'f>(frames: &[&'f FrameHit], keep: impl Fn(&FrameHit) -> bool) -> Vec<&'f FrameHit> {
    frames.iter().copied().filter(|f| keep(f)).collect()
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

/// The fingerprint of a program's failure (issue 39 item 1): its category, the rule that named
/// it, and its [`signature`] (the failure line normalized, then the program's own innermost
/// frames), so the same error sentence raised by two programs makes two groups, and the same
/// failure re-run (other times, addresses, pids, sizes, line numbers) makes one.
pub(super) fn fingerprint(category: Category, rule: &str, signature: &str) -> String {
    let mut h = Sha256::new();
    h.update(category.as_str());
    h.update([0]);
    h.update(rule);
    h.update([0]);
    h.update(signature);
    hex::encode(h.finalize())
}

/// The fingerprint of an environment's failure: its category and rule, the message as the
/// library said it (`message`: the sentence the rule's pattern matched in, from where it
/// matched, so a logger's prefix, a log level, advice after it or a closing mark does not
/// split a group), and what decides its fix
/// where the log says it: the versions the line names (`libcudart.so.12`, `sm_90`,
/// `compute_86`), the GPU's architecture and, for a library's failure, the library's own source
/// site that printed it ([`library_site`]). Whatever code ran into it joins; the driver or
/// CUDA version a log happens to print does not split it (a driver too old is one remedy,
/// whichever old version it was).
pub(super) fn environment_fingerprint(
    category: Category,
    rule: &str,
    message: &str,
    line: &str,
    arch: Option<&str>,
) -> String {
    let mut h = Sha256::new();
    h.update("environment");
    h.update([0]);
    h.update(category.as_str());
    h.update([0]);
    h.update(rule);
    h.update([0]);
    h.update(normalize_signature(message));
    if category == Category::LibraryError {
        let prefix = line.find(message).map_or("", |at| &line[..at]);
        if let Some(site) = library_site(prefix) {
            h.update([0]);
            h.update(site);
        }
    }
    for token in deciding_versions(line) {
        h.update([0]);
        h.update(token);
    }
    h.update([0]);
    h.update(arch.unwrap_or(""));
    hex::encode(h.finalize())
}

/// The versions in an environment failure's line that decide its fix: a shared library's
/// (`.so.12`) and a GPU architecture's (`sm_90`, `compute_86`, `gfx1032`), in line order.
fn deciding_versions(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for (at, _) in line.match_indices(".so.") {
        let rest = &line[at..];
        let end = 4 + rest[4..]
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len() - 4);
        out.push(rest[..end].trim_end_matches('.'));
    }
    for prefix in ["sm_", "compute_", "gfx"] {
        for (at, _) in line.match_indices(prefix) {
            let rest = &line[at..];
            let end = prefix.len()
                + rest[prefix.len()..]
                    .find(|c: char| !c.is_ascii_alphanumeric())
                    .unwrap_or(rest.len() - prefix.len());
            if end > prefix.len() {
                out.push(&rest[..end]);
            }
        }
    }
    out
}

/// The library's own source site on an environment failure's line, before its message
/// (`cuda_dnn.cc:334` in `E tensorflow/stream_executor/cuda/cuda_dnn.cc:334] Could not create
/// cudnn handle`), as `file:line`: the line a library build prints its error from changes with
/// the build, so it says which build failed where the log prints no version (TensorFlow 1.13's
/// and jaxlib 0.4's cuDNN handle failures are fixed in different builds).
fn library_site(prefix: &str) -> Option<String> {
    // The last site before the message: scanned from the end.
    prefix
        .rsplit(|c: char| c.is_whitespace() || "[](),".contains(c))
        .find_map(|token| {
            let (path, line) = token.rsplit_once(':')?;
            let file = path.rsplit(['/', '\\']).next().unwrap_or(path);
            let (_, ext) = file.rsplit_once('.')?;
            let source = ["cc", "cpp", "cu", "c", "h", "hpp"].contains(&ext);
            let number =
                !line.is_empty() && line.len() <= 6 && line.bytes().all(|b| b.is_ascii_digit());
            (source && number).then(|| format!("{file}:{line}"))
        })
}

/// Messages whose fix depends on the GPU's architecture: a build without kernels for it
/// (`no kernel image is available`, HIP's `invalid device function`, a GPU "not compatible
/// with the current PyTorch installation"). Lowercase.
const ARCH_DECIDES: [&str; 4] = [
    "no kernel image is available",
    "invalid device function",
    "not compatible with the current pytorch",
    "no binary for gpu",
];

/// Whether an environment failure's `line` needs a fact the log does not give to say which
/// fix applies: a message of [`ARCH_DECIDES`] with no architecture in the line (`sm_86`,
/// `gfx1032`) nor among the log's facts (`arch`). A missing kernel image on an A40 under
/// torch 1.6 and one on an RTX 5070 Ti under a cu128 wheel are two fixes; without the GPU
/// named, the code that met the failure is all that tells them apart.
pub(super) fn undecided_environment(line: &str, arch: Option<&str>) -> bool {
    let lower = line.to_ascii_lowercase();
    ARCH_DECIDES.iter().any(|m| lower.contains(m))
        && arch.is_none_or(|a| a.trim().is_empty())
        && !deciding_versions(line)
            .iter()
            .any(|v| ["sm_", "compute_", "gfx"].iter().any(|p| v.starts_with(p)))
}

#[cfg(test)]
mod tests {
    use super::{culprit, normalize_signature};

    #[test]
    fn the_index_of_a_dimension_stays_and_sizes_go() {
        let at = |a: u32, b: u32, dim: u32| {
            normalize_signature(&format!(
                "The size of tensor a ({a}) must match the size of tensor b ({b}) at non-singleton dimension {dim}"
            ))
        };
        assert_eq!(at(4015, 8030, 1), at(40, 56, 1));
        assert_ne!(at(40, 56, 1), at(40, 56, 0));
        assert!(at(4, 3, 2).ends_with("dimension 2"), "{}", at(4, 3, 2));
        assert_eq!(
            normalize_signature(
                "Dimension out of range (expected to be in range of [-2, 1], but got 3) on dim 1, axis 0."
            ),
            "Dimension out of range (expected to be in range of [-#, #], but got #) on dim 1, axis 0."
        );
        // A count after the word is not an index.
        assert_eq!(
            normalize_signature("dimension 12345 too large"),
            "dimension # too large"
        );
    }

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
