//! The log pane of the report page: one page of a (possibly huge, already secret-scrubbed) log,
//! with ANSI colours turned into CSS classes from a fixed set.
//!
//! Logs can be hundreds of megabytes, so the page's line range is worked out from the stored
//! line count (`app::reports::page_range`, where the page view reads them) and only those
//! lines are read from storage and decoded ([`render`]). Escape sequences are read by
//! [`ansi::tokens`], the tokenizer normalization uses too, so the view shows exactly the text
//! the rules matched. Only SGR colour/attribute codes have an effect, and they can only select
//! class names from the fixed tables of `style`, so nothing from the input ever reaches an
//! attribute. Everything else (cursor moves, OSC titles and hyperlinks, charset designations,
//! DCS/APC/PM strings) is dropped. Span text stays raw: the template escapes it.

mod style;

use style::Style;

use crate::app::reports::PAGE_LINES;
#[cfg(test)]
use crate::app::reports::page_range;
use crate::ingest::ansi::{self, Token};

/// A run of text with one set of CSS classes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Span {
    /// Raw text (the template escapes it).
    pub text: String,
    /// Space-separated class names from a fixed set (`fg-red bold`); empty when plain.
    pub class: String,
    /// Part of a find's match (shown marked).
    pub mark: bool,
}

/// One log line as shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// 1-based line number in the whole log.
    pub number: usize,
    /// The visible text, split where the style changes.
    pub spans: Vec<Span>,
    /// Root-cause line or one of its repeats.
    pub highlight: bool,
    /// Fragment id of the line (`L123`).
    pub anchor: String,
}

/// A page of the log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogWindow {
    /// The page's lines, in order.
    pub lines: Vec<LogLine>,
    /// Number of the first line shown (0 for an empty log).
    pub first: usize,
    /// Number of the last line shown (0 for an empty log).
    pub last: usize,
    /// Lines in the whole log; a final line without newline counts.
    pub total_lines: usize,
    /// Start line of the previous page, if any.
    pub prev_start: Option<usize>,
    /// Start line of the next page, if any.
    pub next_start: Option<usize>,
    /// Lines of this page whose display was cut at [`MAX_LINE_CHARS`].
    pub truncated_lines: usize,
}

/// Characters shown per line; longer lines end with `…` (the raw download has them whole).
pub const MAX_LINE_CHARS: usize = 2000;

/// Renders `page`, the lines `first..` of a log of `total` lines (as `app::reports::page_range`
/// chose them). Lines in `highlight` (1-based) are marked. Colours carry across lines but each
/// page starts from a clean state.
#[must_use]
pub fn render(page: &[u8], first: usize, total: usize, highlight: &[usize]) -> LogWindow {
    if total == 0 {
        return LogWindow::default();
    }
    let mut style = Style::default();
    let mut truncated_lines = 0;
    let wanted = (first + PAGE_LINES - 1).min(total) + 1 - first.min(total);
    let lines: Vec<LogLine> = page_lines(page, 1, wanted)
        .into_iter()
        .zip(first..)
        .map(|(raw, number)| {
            let (spans, cut) = render_line(raw, &mut style);
            truncated_lines += usize::from(cut);
            LogLine {
                number,
                spans,
                highlight: highlight.contains(&number),
                anchor: format!("L{number}"),
            }
        })
        .collect();
    let last = first + lines.len().saturating_sub(1);
    LogWindow {
        lines,
        first,
        last,
        total_lines: total,
        prev_start: (first > 1).then(|| first.saturating_sub(PAGE_LINES).max(1)),
        next_start: (last < total).then_some(last + 1),
        truncated_lines,
    }
}

/// Renders lines picked out of a log of `total` lines (a find, the findings only): each line
/// starts from a clean style, since the lines between them are not read. No pages.
#[must_use]
pub fn render_picked(picked: &[(usize, Vec<u8>)], total: usize, highlight: &[usize]) -> LogWindow {
    let mut truncated_lines = 0;
    let lines: Vec<LogLine> = picked
        .iter()
        .map(|(number, raw)| {
            let (spans, cut) = render_line(raw, &mut Style::default());
            truncated_lines += usize::from(cut);
            LogLine {
                number: *number,
                spans,
                highlight: highlight.contains(number),
                anchor: format!("L{number}"),
            }
        })
        .collect();
    LogWindow {
        first: lines.first().map_or(0, |l| l.number),
        last: lines.last().map_or(0, |l| l.number),
        lines,
        total_lines: total,
        prev_start: None,
        next_start: None,
        truncated_lines,
    }
}

/// Marks every occurrence of `needle` (ASCII letters in any case, as a find matches) in the
/// shown text of `lines`: spans are split at the matches' ends and the parts inside are
/// marked, keeping their colours. Text a line shows differently from its raw bytes (escape
/// codes dropped, a progress bar's last frame) is marked where it shows the needle.
pub fn mark_matches(lines: &mut [LogLine], needle: &str) {
    if needle.is_empty() {
        return;
    }
    let needle = needle.to_ascii_lowercase();
    for line in lines {
        let text: String = line.spans.iter().map(|s| s.text.as_str()).collect();
        // ASCII lowercasing keeps every byte offset, so matches cut `text` at char boundaries.
        let lower = text.to_ascii_lowercase();
        let found: Vec<(usize, usize)> = (lower.match_indices(&needle))
            .map(|(at, m)| (at, at + m.len()))
            .collect();
        if found.is_empty() {
            continue;
        }
        let mut spans = Vec::with_capacity(line.spans.len() + 2 * found.len());
        let mut begin = 0;
        for span in std::mem::take(&mut line.spans) {
            let end = begin + span.text.len();
            let mut cuts: Vec<usize> = (found.iter())
                .flat_map(|&(a, b)| [a, b])
                .filter(|&c| c > begin && c < end)
                .collect();
            cuts.push(begin);
            cuts.push(end);
            cuts.sort_unstable();
            cuts.dedup();
            for piece in cuts.windows(2) {
                let (a, b) = (piece[0], piece[1]);
                spans.push(Span {
                    text: text[a..b].to_owned(),
                    class: span.class.clone(),
                    mark: found.iter().any(|&(x, y)| x <= a && b <= y),
                });
            }
            begin = end;
        }
        line.spans = spans;
    }
}

/// The page of a whole `log` in memory (what a page view reads in two steps).
#[cfg(test)]
pub fn window(
    log: &[u8],
    start: Option<usize>,
    focus: Option<usize>,
    highlight: &[usize],
) -> LogWindow {
    let total = memchr::memchr_iter(b'\n', log).count()
        + usize::from(log.last().is_some_and(|&b| b != b'\n'));
    let Some((first, last)) = page_range(total, start, focus) else {
        return LogWindow::default();
    };
    // As storage hands them over: each line followed by a newline.
    let page: Vec<u8> = page_lines(log, first, last)
        .into_iter()
        .flat_map(|l| l.iter().chain(b"\n"))
        .copied()
        .collect();
    render(&page, first, total, highlight)
}

/// Byte slices of lines `first..=last` (1-based, without their `\n`), found by scanning newlines.
fn page_lines(log: &[u8], first: usize, last: usize) -> Vec<&[u8]> {
    let mut out = Vec::with_capacity(last + 1 - first);
    let (mut begin, mut number) = (0, 1);
    for nl in memchr::memchr_iter(b'\n', log) {
        if number >= first {
            out.push(&log[begin..nl]);
        }
        if number == last {
            return out;
        }
        begin = nl + 1;
        number += 1;
    }
    if begin < log.len() && number >= first {
        out.push(&log[begin..]);
    }
    out
}

/// One `\r`-separated segment being built.
#[derive(Default)]
struct Segment {
    spans: Vec<Span>,
    text: String,
    style: Style,
    chars: usize,
    /// Holds a non-whitespace character (even past the cut).
    visible: bool,
    cut: bool,
}

impl Segment {
    /// Appends `c`, neutralizing control characters other than tab.
    fn push(&mut self, c: char, style: Style) {
        let c = match c {
            '\t' => c,
            c if c.is_control() => char::REPLACEMENT_CHARACTER,
            c => c,
        };
        self.visible |= !c.is_whitespace();
        if self.chars >= MAX_LINE_CHARS {
            self.cut = true;
            return;
        }
        if style != self.style {
            self.flush();
            self.style = style;
        }
        self.text.push(c);
        self.chars += 1;
    }

    fn flush(&mut self) {
        if !self.text.is_empty() {
            let text = std::mem::take(&mut self.text);
            self.spans.push(Span {
                text,
                class: self.style.class(),
                mark: false,
            });
        }
    }

    fn finish(mut self) -> (Vec<Span>, bool) {
        self.flush();
        if self.cut {
            self.spans.push(Span {
                text: "…".into(),
                class: String::new(),
                mark: false,
            });
        }
        (self.spans, self.cut)
    }
}

/// The spans of one raw line (without `\n`) and whether it was cut. `style` carries in and out.
fn render_line(raw: &[u8], style: &mut Style) -> (Vec<Span>, bool) {
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    let (mut seg, mut shown) = (Segment::default(), None);
    for token in ansi::tokens(raw) {
        match token {
            Token::Text(text) => {
                for (n, piece) in text.split(|&b| b == b'\r').enumerate() {
                    if n > 0 {
                        // Progress bars redraw with `\r`: keep the last segment that shows
                        // something.
                        let done = std::mem::take(&mut seg);
                        if shown.is_none() || done.visible {
                            shown = Some(done);
                        }
                    }
                    for c in String::from_utf8_lossy(piece).chars() {
                        seg.push(c, *style);
                    }
                }
            }
            Token::Sgr(params) => style.apply_sgr(params),
            Token::Other => {}
        }
    }
    if shown.is_none() || seg.visible {
        shown = Some(seg);
    }
    shown.map(Segment::finish).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first page as text, `␛` standing for ESC in `log`: one line per log line, spans as
    /// `[class]text` (plain spans bare).
    fn show(log: &str) -> String {
        let log = log.replace('␛', "\x1b");
        let page = window(log.as_bytes(), None, None, &[]).lines;
        let span = |s: &Span| match s.class.as_str() {
            "" => s.text.clone(),
            class => format!("[{class}]{}", s.text),
        };
        let line = |l: &LogLine| l.spans.iter().map(span).collect::<String>();
        page.iter().map(line).collect::<Vec<_>>().join("\n")
    }

    fn check(cases: &[(&str, &str)]) {
        for (input, want) in cases {
            assert_eq!(show(input), *want, "{input:?}");
        }
    }

    fn numbered(n: usize, final_newline: bool) -> Vec<u8> {
        let log: String = (1..=n).map(|i| format!("line {i}\n")).collect();
        log.as_bytes()[..log.len() - usize::from(!final_newline)].to_vec()
    }

    #[test]
    fn sgr_codes_map_to_fixed_classes() {
        check(&[
            ("␛[31mred␛[0m plain", "[fg-red]red plain"),
            ("␛[1;32mok␛[22m still", "[fg-green bold]ok[fg-green] still"),
            ("␛[1m␛[34mA␛[mB", "[fg-blue bold]AB"),
            ("␛[91mb␛[39mx", "[fg-bright-red]bx"),
            ("␛[44mbg␛[49m", "[bg-blue]bg"),
            ("␛[30;103mY", "[fg-black bg-bright-yellow]Y"),
            (
                "␛[2;3;4;7mz␛[23;24;27mw",
                "[dim italic underline inverse]z[dim]w",
            ),
            ("␛[1;2mz␛[22mw", "[bold dim]zw"),
            ("␛[4:3mu␛[0mv", "uv"),
            ("a␛[0mb␛[5mc", "abc"),
            (
                "␛[31mone\ntwo␛[0m\nthree",
                "[fg-red]one\n[fg-red]two\nthree",
            ),
        ]);
    }

    #[test]
    fn extended_colours_map_to_the_nearest_basic_colour_or_are_dropped() {
        check(&[
            ("␛[38;5;1mx", "[fg-red]x"),
            ("␛[38;5;196mx", "[fg-bright-red]x"),
            ("␛[38;5;160mx", "[fg-red]x"),
            ("␛[48;5;21mx", "[bg-blue]x"),
            ("␛[38;5;232mx", "[fg-black]x"),
            ("␛[38;5;255mx", "[fg-white]x"),
            ("␛[38;5;196;1mx", "[fg-bright-red bold]x"),
            ("␛[38;2;250;250;250mx", "[fg-bright-white]x"),
            ("␛[48;2;0;200;0mx", "[bg-green]x"),
            ("␛[38;2;255;0;255mx", "[fg-bright-magenta]x"),
            ("␛[38;5;46mx", "[fg-bright-green]x"),
            ("␛[38:5:46mx", "x"),
            ("␛[38;5;300mx", "x"),
            ("␛[38;5mx", "x"),
            ("␛[38;2;1mx", "x"),
            ("␛[38;9;1;31mx", "x"),
            ("␛[31m␛[38;5;999mx", "[fg-red]x"),
        ]);
    }

    #[test]
    fn hostile_and_malformed_escapes_are_dropped_and_text_kept_raw() {
        check(&[
            ("<script>alert(1)</script>", "<script>alert(1)</script>"),
            ("␛]8;;javascript:alert(1)\x07click␛]8;;\x07 me", "click me"),
            ("␛]8;;https://x/␛\\link␛]8;;␛\\", "link"),
            ("␛]0;title\x07t␛(Bx␛)0y␛7␛=z", "txyz"),
            ("␛P1$r␛\\d␛_apc␛\\a␛^pm\x07p", "dap"),
            ("␛[2J␛[1;1H␛[K␛[?25lx␛[>4;1my", "xy"),
            ("␛[999;999mx", "x"),
            ("x␛[", "x"),
            ("x␛[31", "x"),
            ("x␛", "x"),
            ("x␛]8;;http://unterminated", "x"),
            ("a␛␛[31mb", "a[fg-red]b"),
            ("a␛]0;t␛[32mb", "a[fg-green]b"),
            (&format!("␛[{}31mx", "1;".repeat(200)), "x"),
            (
                "a\0b\x07c\x7fd\u{9b}e\tf",
                "a\u{fffd}b\u{fffd}c\u{fffd}d\u{fffd}e\tf",
            ),
        ]);
    }

    #[test]
    fn no_input_leaks_escapes_control_bytes_or_unknown_classes() {
        let alphabet = b"\x1b[];:?(P\\\x07\r\0\xffm0123458aB< ";
        let known = regex::Regex::new(
            "^((fg|bg)-(bright-)?(black|red|green|yellow|blue|magenta|cyan|white)\
             |bold|dim|italic|underline|inverse)$",
        )
        .unwrap();
        for input in crate::ingest::ansi::random_inputs(alphabet, 0x2545_f491_4f6c_dd1d_u64, 3000) {
            for span in window(&input, None, None, &[])
                .lines
                .iter()
                .flat_map(|l| &l.spans)
            {
                let bad_char = span.text.chars().any(|c| c.is_control() && c != '\t');
                let bad_class = span.class.split(' ').any(|c| !known.is_match(c));
                assert!(
                    !bad_char && (span.class.is_empty() || !bad_class),
                    "{input:?}"
                );
            }
        }
    }

    #[test]
    fn the_view_shows_exactly_the_text_normalization_keeps() {
        // Both read escapes with `ingest::ansi`, so every sequence ends at the same byte for the
        // rules and for the reader. These cases used to end at different bytes: an OSC cut short
        // by another escape, an ESC before an ESC, a CSI broken by a non-ASCII byte.
        let visible = |log: &[u8]| -> String {
            let page = window(log, None, None, &[]).lines;
            page.iter()
                .flat_map(|l| &l.spans)
                .map(|s| s.text.as_str())
                .collect()
        };
        let normalized = |log: &[u8]| -> String {
            let text = crate::ingest::normalize::strip_ansi(std::str::from_utf8(log).unwrap_or(""))
                .into_owned();
            let neutral = |c: char| c.is_control() && c != '\t';
            text.replace(neutral, "\u{fffd}")
        };
        let cases = [
            "a␛]0;t␛[32mb",
            "x␛]8;;http://unterminated",
            "a␛]8;;https://x/␛\\link␛]8;;␛\\ b",
            "a␛␛[31mb",
            "␛[3é1mx",
            "␛[1 qx␛(␛7y",
        ];
        for case in cases {
            let log = case.replace('␛', "\x1b");
            assert_eq!(
                visible(log.as_bytes()),
                normalized(log.as_bytes()),
                "{case:?}"
            );
        }
        let alphabet = b"\x1b[];:?(P^_X\\\x07\0m0123458aB< ";
        for input in crate::ingest::ansi::random_inputs(alphabet, 0x2545_f491_4f6c_dd1d_u64, 3000) {
            assert_eq!(visible(&input), normalized(&input), "{input:?}");
        }
    }

    #[test]
    fn line_endings_progress_bars_and_tabs() {
        check(&[
            ("10%\r50%\r100%", "100%"),
            ("done\r   \r\n", "done"),
            ("abc\r␛[K", "abc"),
            ("␛[32m10%\rok", "[fg-green]ok"),
            ("   ", "   "),
            ("a\r\nb\r\n", "a\nb"),
            ("a\tb", "a\tb"),
        ]);
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        let lines = |log: &[u8]| window(log, None, None, &[]).lines;
        assert_eq!(
            lines(b"caf\xc3\xa9 \xff ok")[0].spans[0].text,
            "café \u{fffd} ok"
        );
        assert_eq!(lines(b"\x1b[3\xff1mx")[0].spans[0].text, "\u{fffd}1mx");
    }

    #[test]
    fn total_lines_counts_a_final_line_without_newline() {
        for (input, want) in [("", 0), ("\n", 1), ("a", 1), ("a\nb", 2), ("a\nb\n", 2)] {
            let w = window(input.as_bytes(), None, None, &[]);
            assert_eq!(
                [w.total_lines, w.lines.len(), w.last],
                [want; 3],
                "{input:?}"
            );
        }
    }

    #[test]
    fn pages_start_explicitly_around_the_focus_or_at_the_top() {
        let log = numbered(1000, true);
        // (start, focus) -> (first, last, prev_start, next_start)
        let cases = [
            ((None, None), (1, 400, None, Some(401))),
            ((Some(401), Some(10)), (401, 800, Some(1), Some(801))),
            ((Some(801), None), (801, 1000, Some(401), None)),
            ((Some(0), None), (1, 400, None, Some(401))),
            ((Some(5000), None), (601, 1000, Some(201), None)),
            ((None, Some(500)), (400, 799, Some(1), Some(800))),
            ((None, Some(10)), (1, 400, None, Some(401))),
            ((None, Some(990)), (601, 1000, Some(201), None)),
        ];
        for ((start, focus), want) in cases {
            let w = window(&log, start, focus, &[]);
            let got = (w.first, w.last, w.prev_start, w.next_start);
            assert_eq!(got, want, "{start:?} {focus:?}");
            assert_eq!(w.lines.len(), w.last - w.first + 1);
            assert_eq!(w.lines[0].spans[0].text, format!("line {}", w.first));
        }
        let w = window(&log, None, Some(500), &[500, 2000]);
        let marked: Vec<_> = w.lines.iter().filter(|l| l.highlight).collect();
        assert_eq!((marked.len(), marked[0].number), (1, 500));
        assert_eq!(
            (marked[0].anchor.as_str(), w.lines[0].anchor.as_str()),
            ("L500", "L400")
        );
    }

    #[test]
    fn each_page_starts_from_a_clean_style() {
        let mut log = b"\x1b[31mred\n".to_vec();
        log.extend(numbered(500, true));
        let class = |start| {
            window(&log, start, None, &[]).lines[1].spans[0]
                .class
                .clone()
        };
        assert_eq!(
            (class(None), class(Some(401))),
            ("fg-red".into(), String::new())
        );
    }

    #[test]
    fn long_lines_are_cut_and_counted() {
        for (len, cut) in [
            (MAX_LINE_CHARS, false),
            (MAX_LINE_CHARS + 1, true),
            (50_000, true),
        ] {
            let log = format!("\x1b[31m{}\nshort", "é".repeat(len));
            let w = window(log.as_bytes(), None, None, &[]);
            let text: String = w.lines[0].spans.iter().map(|s| s.text.as_str()).collect();
            let shown = MAX_LINE_CHARS.min(len) + usize::from(cut);
            assert_eq!((text.chars().count(), text.ends_with('…')), (shown, cut));
            assert_eq!(w.truncated_lines, usize::from(cut));
            assert_eq!(w.lines[1].spans[0].class, "fg-red");
        }
    }

    #[test]
    fn a_million_line_log_is_windowed() {
        for final_newline in [true, false] {
            let log = numbered(1_000_000, final_newline);
            let w = window(&log, None, Some(999_999), &[999_999]);
            let got = (w.total_lines, w.first, w.last, w.next_start);
            assert_eq!(got, (1_000_000, 999_601, 1_000_000, None));
            assert_eq!((w.lines.len(), w.lines[398].highlight), (PAGE_LINES, true));
            assert_eq!(w.lines[398].spans[0].text, "line 999999");
        }
    }

    #[test]
    fn a_finds_matches_are_marked_in_any_case_and_keep_their_colours() {
        let mut lines = render_picked(
            &[(
                3,
                b"\x1b[31mCUDA error: an Illegal\x1b[0m memory access; illegal memory".to_vec(),
            )],
            10,
            &[],
        )
        .lines;
        mark_matches(&mut lines, "illegal memory");
        let parts: Vec<(&str, &str, bool)> = lines[0]
            .spans
            .iter()
            .map(|s| (s.text.as_str(), s.class.as_str(), s.mark))
            .collect();
        assert_eq!(
            parts,
            [
                ("CUDA error: an ", "fg-red", false),
                ("Illegal", "fg-red", true),
                (" memory", "", true),
                (" access; ", "", false),
                ("illegal memory", "", true),
            ]
        );
        let mut none = render_picked(&[(1, "ünïcode ok".as_bytes().to_vec())], 1, &[]).lines;
        mark_matches(&mut none, "code");
        assert_eq!(none[0].spans.iter().filter(|s| s.mark).count(), 1);
        assert_eq!(
            none[0]
                .spans
                .iter()
                .map(|s| s.text.as_str())
                .collect::<String>(),
            "ünïcode ok"
        );
    }
}
