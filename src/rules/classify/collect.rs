//! What the streaming pass collects from a log before the classification is decided: the
//! rule hits (one per matching line, before ranking), the facts and hints met on the way, and
//! the Python stack frames, bounded at both ends of a long log.

use std::collections::HashMap;

use super::super::Facts;
use super::super::origin::Origin;

/// Stack frames kept from the start of a log, and again from its end.
const MAX_FRAMES: usize = 2048;

/// A rule hit on one line, before ranking.
#[derive(Debug)]
pub(super) struct RuleHit {
    pub(super) rule: usize,
    pub(super) line: usize,
    pub(super) text: String,
    /// Named captures, in line order: (name, value).
    pub(super) captures: Vec<(String, String)>,
    pub(super) rank_prefix: Option<u32>,
    /// The line announces info or warning level (see `ingest::prefix::level`).
    pub(super) quiet: bool,
    /// The line only summarises a failure printed elsewhere (see `ingest::prefix::is_summary`).
    pub(super) summary: bool,
    /// The cleaned lines after it: the learned fallback's and the framework's context.
    pub(super) following: Vec<String>,
    /// The rank, host and GPU the line names.
    pub(super) origin: Origin,
}

/// Everything the streaming pass collects.
#[derive(Default)]
pub(super) struct Collector {
    pub(super) hits: Vec<RuleHit>,
    pub(super) per_rule: HashMap<usize, usize>,
    pub(super) facts: Facts,
    pub(super) async_hint: bool,
    pub(super) context_advice: Vec<String>,
    /// For each context (by its index), whether another match could no longer change anything
    /// (see `context_settled`).
    pub(super) settled: Vec<bool>,
    /// The line of the first Python traceback header, when the log has one.
    pub(super) first_traceback: Option<usize>,
    /// Python stack frames (line, file, function): the first [`MAX_FRAMES`], then the last
    /// [`MAX_FRAMES`] after them (a log no rule matched is signed by how it ends).
    pub(super) frames: Vec<FrameHit>,
    pub(super) tail_frames: std::collections::VecDeque<FrameHit>,
}

/// A Python stack frame line.
#[derive(Debug, Clone)]
pub(super) struct FrameHit {
    pub(super) line: usize,
    pub(super) file: String,
    pub(super) function: String,
}

impl Collector {
    pub(super) fn push_frame(&mut self, frame: FrameHit) {
        if self.frames.len() < MAX_FRAMES {
            self.frames.push(frame);
        } else {
            if self.tail_frames.len() == MAX_FRAMES {
                self.tail_frames.pop_front();
            }
            self.tail_frames.push_back(frame);
        }
    }
}
