//! Placeholder while the log view is being written (see helper task); replaced wholesale.

/// A run of text with one set of CSS classes.
pub struct Span {
    pub text: String,
    pub class: String,
}

/// One log line.
pub struct LogLine {
    pub number: usize,
    pub spans: Vec<Span>,
    pub highlight: bool,
    pub anchor: String,
}

/// A page of the log.
pub struct LogWindow {
    pub lines: Vec<LogLine>,
    pub first: usize,
    pub last: usize,
    pub total_lines: usize,
    pub prev_start: Option<usize>,
    pub next_start: Option<usize>,
    pub truncated_lines: usize,
}

/// Lines per page.
pub const PAGE_LINES: usize = 400;

/// The window of `log` to show.
pub fn window(
    log: &[u8],
    start: Option<usize>,
    focus: Option<usize>,
    highlight: &[usize],
) -> LogWindow {
    let text = String::from_utf8_lossy(log);
    let all: Vec<&str> = text.lines().collect();
    let total = all.len();
    let first = start
        .or(focus.map(|f| f.saturating_sub(PAGE_LINES / 4)))
        .unwrap_or(1)
        .max(1);
    let last = (first + PAGE_LINES - 1).min(total);
    let lines = (first..=last)
        .map(|n| LogLine {
            number: n,
            spans: vec![Span {
                text: crate::ingest::normalize::strip_ansi(all[n - 1]).into_owned(),
                class: String::new(),
            }],
            highlight: highlight.contains(&n),
            anchor: format!("L{n}"),
        })
        .collect();
    LogWindow {
        lines,
        first,
        last,
        total_lines: total,
        prev_start: (first > 1).then(|| first.saturating_sub(PAGE_LINES).max(1)),
        next_start: (last < total).then_some(last + 1),
        truncated_lines: 0,
    }
}
