//! The shapes the locator's features read in a line's text: a word standing alone, an
//! exception class, a stack frame, a status constant or number, an error-level letter, and
//! the key that tells a repeated line (numbers and hex runs blanked).

/// Whether `word` stands in `text` as a word (not inside a longer one).
pub(super) fn has_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
    })
}

/// Where the first exception-class shape starts: a word ending in `Error`, `Exception`,
/// `Fault` or `Failure` (dotted names included: `torch.OutOfMemoryError`).
pub(super) fn exception_class(text: &str) -> Option<usize> {
    let mut start = None;
    for (i, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        if c.is_alphanumeric() || c == '_' || c == '.' || (c == ':' && text[i..].starts_with("::"))
        {
            start.get_or_insert(i);
            continue;
        }
        if c == ':' && start.is_some() && text[..i].ends_with(':') {
            continue;
        }
        if let Some(s) = start.take() {
            let word = text[s..i].trim_end_matches('.');
            let last = word.rsplit(['.', ':']).next().unwrap_or(word);
            let shaped = ["Error", "Exception", "Fault", "Failure"]
                .iter()
                .any(|end| last.len() > end.len() && last.ends_with(end))
                && last.chars().next().is_some_and(char::is_uppercase);
            if shaped {
                return Some(s);
            }
        }
    }
    None
}

/// A stack frame of any language: Python's `File "x.py", line N`, Java/.NET `at a.b(...)`,
/// gdb/glibc `#3 0x...`, Go's `\tpath/file.go:12 +0x1d`, C++ `frame #2:`, Rust's `at src/x.rs:1`.
pub(super) fn is_frame(text: &str, raw: &str) -> bool {
    let t = text.trim_start();
    if t.starts_with("at ") && (t.contains('(') || t.contains(".rs:") || t.contains(".go:")) {
        return true;
    }
    if t.starts_with("frame #") || t.starts_with("@ 0x") {
        return true;
    }
    if let Some(rest) = t.strip_prefix('#') {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && rest[digits..].starts_with(' ') && rest.contains("0x") {
            return true;
        }
    }
    let indented = raw.starts_with('\t') || raw.starts_with("  ");
    let go_frame = indented && (t.contains(".go:") || t.contains(".s:"));
    let c_frame = t.contains(" in ") && t.contains("0x") && t.contains('(');
    let offset_frame = t.contains("+0x") && (t.contains('(') || t.contains(".so"));
    go_frame || c_frame || offset_frame
}

/// An upper-case constant with underscores: `CUDA_ERROR_ILLEGAL_ADDRESS`, `INVALID_ARGUMENT`,
/// `RESOURCE_EXHAUSTED`, `NCCL_SYSTEM_ERROR`.
pub(super) fn status_constant(text: &str) -> bool {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|w| {
            w.len() >= 6
                && w.contains('_')
                && !w.starts_with('_')
                && w.bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
                && w.bytes().filter(u8::is_ascii_uppercase).count() >= 4
        })
}

/// A status or error number: `code 2`, `status: 137`, `errno 12`, `rc=1`, `error 700`.
pub(super) fn status_number(lower: &str) -> bool {
    ["code", "status", "errno", "rc=", "rc:", "error ", "exit "]
        .iter()
        .any(|w| {
            lower.match_indices(w).any(|(at, _)| {
                let rest = lower[at + w.len()..].trim_start_matches([' ', ':', '=', '(', '[']);
                rest.trim_start_matches('-')
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_digit())
            })
        })
}

/// A glog/absl/klog error or fatal header (`E0617 12:00:00`, `F0617 ...`), PyTorch's `[E ...]`
/// or `[E:onnxruntime:...]`, TensorFlow's `E tensorflow/...`, TensorRT's `[E]`.
pub(super) fn error_letter(raw: &str) -> bool {
    let b = raw.trim_start().as_bytes();
    let glog = |s: &[u8]| {
        s.len() > 6
            && matches!(s[0], b'E' | b'F')
            && s[1..5].iter().all(u8::is_ascii_digit)
            && s[5] == b' '
    };
    if glog(b) || (b.first() == Some(&b'[') && glog(&b[1..])) {
        return true;
    }
    [
        "[E:",
        "[E ",
        "] [E] ",
        " E tensorflow/",
        " E external/",
        "[F ",
        " F tensorflow/",
    ]
    .iter()
    .any(|m| raw.find(m).is_some_and(|at| at < 60))
        || raw.starts_with("E ")
        || raw.starts_with("F ")
}

/// A line's text with its numbers and hex runs blanked, for counting repeats (the same message
/// from every rank or every retry).
pub(super) fn repeat_key(lower: &str) -> String {
    let mut out = String::with_capacity(lower.len());
    let mut in_number = false;
    for c in lower.chars() {
        if c.is_ascii_digit() {
            if !in_number {
                out.push('#');
            }
            in_number = true;
        } else {
            in_number = false;
            out.push(c);
        }
    }
    out
}
