//! A log no rule matched: the line the learned locator names (`rules::locator`), as the
//! classification shows it, and the same answer for a whole log as `gpu-triage eval` measures
//! the locator by.

use super::super::Ruleset;
use super::super::locator::features::WindowLine;
use super::super::origin::Origin;
use super::{MAX_TEXT, truncate};

/// The title of a failure only the locator found.
pub(super) const LOCATED_TITLE: &str = "Failure no rule knows (line found by the locator)";

/// The line the locator names, as the classification shows it.
pub(super) struct LocatedLine {
    pub(super) line: usize,
    pub(super) text: String,
    pub(super) origin: Origin,
    /// The cleaned lines after it (the fallback's context).
    pub(super) following: Vec<String>,
}

impl Ruleset {
    /// The line the locator names in a whole log as if no rule matched it (what `gpu-triage
    /// eval` measures the locator by): its number, cleaned text and the lines after it.
    #[must_use]
    pub fn locate_alone(&self, log: &[u8]) -> Option<(usize, String, Vec<String>)> {
        let tail: std::collections::VecDeque<(usize, Vec<u8>)> =
            (super::super::locator::train::window_of(log).into_iter())
                .map(|w| (w.line, w.raw.into_bytes()))
                .collect();
        self.locate(&tail).map(|l| (l.line, l.text, l.following))
    }

    /// The failure line of a log no rule matched, from its last lines (see `rules::locator`).
    pub(super) fn locate(
        &self,
        tail: &std::collections::VecDeque<(usize, Vec<u8>)>,
    ) -> Option<LocatedLine> {
        let window: Vec<WindowLine> = tail.iter().map(|(n, t)| WindowLine::new(*n, t)).collect();
        let found = self.locator.locate(&window)?;
        let clean = |w: &WindowLine| crate::ingest::neutralize_controls(&w.cleaned).into_owned();
        let w = &window[found.index];
        Some(LocatedLine {
            line: found.line,
            text: truncate(&clean(w), MAX_TEXT),
            origin: super::super::origin::of_line(&w.raw, &w.cleaned),
            following: (window[found.index + 1..].iter())
                .take(3)
                .map(clean)
                .collect(),
        })
    }
}
