//! Normalization of what people paste and CI prints, so rules see the message and not the noise.
//!
//! Two levels, because logs can be hundreds of megabytes:
//! - [`strip_ansi_into`] works on whole chunks of bytes and keeps every newline, so the matcher can
//!   search the chunk in one pass and still count original line numbers;
//! - [`clean_line`] runs only on the few lines a rule hit: it decodes (lossy UTF-8), drops ANSI
//!   sequences, picks the `\r` segment that carries text (tqdm progress bars), and peels CI
//!   timestamps, rank/launcher prefixes, logger prefixes, markdown quoting and `**` markers.

use std::borrow::Cow;

use super::ansi::{self, Token};

const ESC: u8 = 0x1b;

/// Copies `src` into `dst` without ANSI escape sequences (CSI colours and cursor moves, OSC
/// hyperlinks and titles, two-byte escapes), as [`ansi::tokens`] reads them: the log view drops
/// exactly the same bytes. Newlines are never removed, so line numbers survive.
pub fn strip_ansi_into(src: &[u8], dst: &mut Vec<u8>) {
    dst.reserve(src.len());
    for token in ansi::tokens(src) {
        if let Token::Text(text) = token {
            dst.extend_from_slice(text);
        }
    }
}

/// Removes ANSI escape sequences from one line of text.
pub fn strip_ansi(text: &str) -> Cow<'_, str> {
    if !text.as_bytes().contains(&ESC) {
        return Cow::Borrowed(text);
    }
    let mut out = Vec::with_capacity(text.len());
    strip_ansi_into(text.as_bytes(), &mut out);
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

/// The `\r`-separated segment of a raw line that carries the message: the last non-blank one
/// (progress bars redraw with `\r` and the error is printed after the last redraw), or the one
/// that contains `needle` when given.
pub fn pick_segment<'a>(line: &'a str, needle: Option<&str>) -> &'a str {
    let line = line.strip_suffix('\r').unwrap_or(line);
    if !line.contains('\r') {
        return line;
    }
    if let Some(n) = needle
        && let Some(seg) = line.split('\r').find(|s| s.contains(n))
    {
        return seg;
    }
    line.split('\r')
        .rev()
        .find(|s| !s.trim().is_empty())
        .unwrap_or("")
}

/// One line as a person would read it: decoded, without ANSI, without CI/launcher/logger prefixes
/// and markdown decoration, trimmed. Used for finding text, captures and fingerprints.
pub fn clean_line(raw: &[u8]) -> String {
    let decoded = String::from_utf8_lossy(raw);
    let no_ansi = strip_ansi(&decoded);
    let seg = pick_segment(&no_ansi, None);
    strip_decorations(seg).to_owned()
}

/// Peels one round of the prefixes [`strip_decorations`] peels (timestamp, rank prefix, an
/// operations prefix, a quote or fence), for readers that stop at a given prefix.
pub(crate) fn strip_one_prefix(s: &str) -> &str {
    let mut s = strip_timestamp(s.trim());
    s = strip_rank_prefix(s);
    s = super::prefix::strip_operations_prefix_except_host(s);
    for p in ["> ", ">", "```", "`", "**"] {
        if let Some(rest) = s.strip_prefix(p) {
            s = rest;
        }
    }
    s
}

/// The pdsh-style host label (see `prefix::strip_host_label`) a raw line carries, after whatever
/// timestamp, rank or container prefix comes before it: `worker-7` in `2025-01-02T03:04:05Z
/// worker-7: [rank3]: ...`.
pub fn host_label_of(raw: &str) -> Option<&str> {
    let mut s = raw;
    for _ in 0..6 {
        let t = s.trim();
        if let Some(rest) = super::prefix::strip_host_label(t) {
            return Some(t[..t.len() - rest.len()].trim_end().trim_end_matches(':'));
        }
        let peeled = strip_one_prefix(t);
        if peeled.len() == t.len() {
            return None;
        }
        s = peeled;
    }
    None
}

/// Peels prefixes and markdown decoration from a single (already ANSI-free) line.
pub fn strip_decorations(mut s: &str) -> &str {
    loop {
        let before = s.len();
        s = s.trim();
        s = strip_timestamp(s);
        s = strip_rank_prefix(s);
        s = super::prefix::strip_operations_prefix(s);
        for p in ["> ", ">", "```", "`", "**", "“", "\"\"\"", "\u{2060}"] {
            if let Some(rest) = s.strip_prefix(p) {
                s = rest;
            }
        }
        if s.len() == before {
            break;
        }
    }
    loop {
        let before = s.len();
        s = s.trim_end();
        for p in ["```", "`", "**", "”", "\"\"\""] {
            if let Some(rest) = s.strip_suffix(p) {
                s = rest;
            }
        }
        if s.len() == before {
            break;
        }
    }
    s
}

/// `2026-07-30T03:36:29.7333793Z ` (GitHub Actions), `2026-07-30 03:36:29,733 ` (Python logging),
/// `[2026-07-30 03:36:29] `.
fn strip_timestamp(s: &str) -> &str {
    let b = s.as_bytes();
    let start = usize::from(b.first() == Some(&b'['));
    let digits = |r: std::ops::Range<usize>| {
        b.get(r.clone())
            .is_some_and(|x| x.iter().all(u8::is_ascii_digit))
    };
    if !(digits(start..start + 4)
        && b.get(start + 4) == Some(&b'-')
        && digits(start + 5..start + 7)
        && b.get(start + 7) == Some(&b'-')
        && digits(start + 8..start + 10)
        && matches!(b.get(start + 10), Some(b'T') | Some(b' ')))
    {
        return s;
    }
    // Consume the time part: digits, ':', '.', ',', 'Z', '+', '-' up to a space or ']'.
    let mut i = start + 11;
    while let Some(&c) = b.get(i) {
        if c.is_ascii_digit() || matches!(c, b':' | b'.' | b',' | b'Z' | b'+' | b'-') {
            i += 1;
        } else {
            break;
        }
    }
    if start == 1 && b.get(i) == Some(&b']') {
        i += 1;
    }
    match b.get(i) {
        Some(b' ') | Some(b'\t') | Some(b'|') => s[i + 1..].trim_start_matches(['|', ' ']),
        None => "",
        _ => s,
    }
}

/// `[rank3]:`, `[default0]:`, `[1,0]<stderr>:`, `0: ` / `12: ` (torchrun `--tee`), `[80746] `
/// (pid), `ERROR:root:`-style logger prefixes are left alone because they can carry meaning.
fn strip_rank_prefix(s: &str) -> &str {
    let b = s.as_bytes();
    if b.first() == Some(&b'[')
        && let Some(close) = s.find(']')
    {
        let inner = &s[1..close];
        let tail = &s[close + 1..];
        let is_rank = inner
            .strip_prefix("rank")
            .or_else(|| inner.strip_prefix("default"))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()));
        let is_mpi = inner.split(',').count() == 2
            && inner
                .split(',')
                .all(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()));
        let is_pid = !inner.is_empty() && inner.bytes().all(|c| c.is_ascii_digit());
        if is_rank || is_mpi {
            let tail = tail
                .strip_prefix("<stderr>")
                .or_else(|| tail.strip_prefix("<stdout>"))
                .unwrap_or(tail);
            return tail.strip_prefix(':').unwrap_or(tail);
        }
        if is_pid && tail.starts_with(' ') {
            return tail;
        }
    }
    // `0: ` .. `9999: ` at the very start (torchrun --tee / slurm --label).
    let digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
    if (1..=4).contains(&digits) && s[digits..].starts_with(": ") {
        return &s[digits + 2..];
    }
    s
}

/// The rank a launcher prefix names, for typed facts: `[rank3]:` and `[default1]:` → 3 and 1,
/// Open MPI's `[1,3]<stderr>:` (job, rank) → 3, and `3: ` (torchrun `--tee`, `srun --label`) → 3.
pub fn rank_prefix(raw: &str) -> Option<u32> {
    let s = strip_timestamp(raw.trim_start());
    if let Some(rest) = s.strip_prefix('[') {
        let inner = rest.split(']').next()?;
        if let Some((_, rank)) = inner.split_once(',') {
            return rank.parse().ok();
        }
        let n = inner
            .strip_prefix("rank")
            .or_else(|| inner.strip_prefix("default"))?;
        return n.parse().ok();
    }
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if (1..=4).contains(&digits) && s[digits..].starts_with(": ") {
        return s[..digits].parse().ok();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_labels_are_read_behind_other_prefixes() {
        assert_eq!(host_label_of("worker-7: RuntimeError: x"), Some("worker-7"));
        assert_eq!(
            host_label_of("2025-01-02T03:04:05.1Z node017: [rank3]: x"),
            Some("node017")
        );
        assert_eq!(host_label_of("python3: can't open file"), None);
        assert_eq!(host_label_of("RuntimeError: worker-7: x"), None);
    }

    #[test]
    fn ansi_sequences_are_removed_and_newlines_kept() {
        let cases: &[(&[u8], &[u8])] = &[
            (b"\x1b[31mRuntimeError\x1b[0m: x", b"RuntimeError: x"),
            (b"\x1b[1;31mred\x1b[m\nnext", b"red\nnext"),
            (
                b"\x1b]8;;javascript:alert(1)\x07click\x1b]8;;\x07",
                b"click",
            ),
            (b"a\x1b]0;title\x1b\\b", b"ab"),
            (b"broken \x1b[12\nline two", b"broken \nline two"),
            (b"\x1b(Bplain", b"plain"),
            (b"no escapes at all", b"no escapes at all"),
        ];
        for (input, want) in cases {
            let mut out = Vec::new();
            strip_ansi_into(input, &mut out);
            assert_eq!(
                &out[..],
                *want,
                "input {:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn clean_line_peels_ci_rank_and_markdown_noise() {
        let cases = [
            (
                "2026-07-30T03:36:29.7333793Z RuntimeError: CUDA error: out of memory",
                "RuntimeError: CUDA error: out of memory",
            ),
            ("[rank3]: RuntimeError: boom", "RuntimeError: boom"),
            (
                "[default0]:IndexError: index out of range in self",
                "IndexError: index out of range in self",
            ),
            ("[1,0]<stderr>:NCCL WARN x", "NCCL WARN x"),
            (
                "0: torch.OutOfMemoryError: CUDA",
                "torch.OutOfMemoryError: CUDA",
            ),
            (
                "**RuntimeError: CUDA out of memory.** Tried",
                "RuntimeError: CUDA out of memory.** Tried",
            ),
            (
                "`RuntimeError: expected scalar type Long but found Int`",
                "RuntimeError: expected scalar type Long but found Int",
            ),
            (
                "> RuntimeError: \"addmm_impl_cpu_\" not implemented for 'Half'",
                "RuntimeError: \"addmm_impl_cpu_\" not implemented for 'Half'",
            ),
            (
                "“RuntimeError: CUDA error: an illegal memory access was encountered      ",
                "RuntimeError: CUDA error: an illegal memory access was encountered",
            ),
            (
                "[80746] [rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] x",
                "[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] x",
            ),
            (
                "2020-08-03 10:20:25,123 | ERROR: bus error",
                "ERROR: bus error",
            ),
            ("RuntimeError: x\r", "RuntimeError: x"),
            (
                "  45%|████▌ | 450/1000\r 46%|████▋ | 460/1000\rRuntimeError: late",
                "RuntimeError: late",
            ),
            ("\x1b[31mERROR\x1b[0m: failed", "ERROR: failed"),
        ];
        for (input, want) in cases {
            assert_eq!(clean_line(input.as_bytes()), want, "input {input:?}");
        }
    }

    #[test]
    fn clean_line_survives_invalid_utf8() {
        assert_eq!(
            clean_line(b"bad \xff\xfe byte"),
            "bad \u{fffd}\u{fffd} byte"
        );
    }

    #[test]
    fn numbers_that_are_not_prefixes_stay() {
        assert_eq!(clean_line(b"2112x1000 and 96x96"), "2112x1000 and 96x96");
        assert_eq!(clean_line(b"12345: not a rank"), "12345: not a rank");
        assert_eq!(
            clean_line(b"[E ProcessGroupNCCL.cpp:458] x"),
            "[E ProcessGroupNCCL.cpp:458] x"
        );
    }

    #[test]
    fn rank_prefix_is_read() {
        assert_eq!(rank_prefix("[rank3]: boom"), Some(3));
        assert_eq!(rank_prefix("2026-07-30T03:36:29Z [default1]:x"), Some(1));
        assert_eq!(rank_prefix("[E321 02:07:08] x"), None);
        assert_eq!(rank_prefix("[1,3]<stderr>:RuntimeError: x"), Some(3));
        assert_eq!(rank_prefix("12: RuntimeError: x"), Some(12));
        assert_eq!(rank_prefix("RuntimeError: 12: x"), None);
        assert_eq!(rank_prefix("20260730: x"), None);
    }

    #[test]
    fn pick_segment_prefers_the_needle() {
        assert_eq!(
            pick_segment("a\rRuntimeError: x\rb", Some("Error")),
            "RuntimeError: x"
        );
        assert_eq!(pick_segment("a\rb\r  ", None), "b");
    }
}
