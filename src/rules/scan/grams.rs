//! The candidate pass for the longer required literals: one look-up per four bytes of the log,
//! in one pass for all of them.
//!
//! Wherever a literal of at least [`MIN_LEN`] bytes occurs, it covers a whole *piece* of
//! [`PIECE`] bytes that starts at a multiple of [`STEP`] from the start of the searched text,
//! and which of its pieces that is depends only on where the literal starts, modulo `STEP`. So
//! one piece of each literal per offset modulo `STEP`, the rarest (see `keys`), finds every
//! occurrence when the piece at every such place is looked up among the chosen ones. A piece of
//! the log is first tested against a small bit set of hashed pieces (a few instructions, the
//! set in the core's cache), and only one that passes is looked up and confirmed against the
//! literals it may lie in.
//!
//! Teddy (see `teddy`) looks at every byte and takes 64 fingerprints per pass: the built-in
//! rules needed six passes over the log, most of the scan's time, where this makes one look-up
//! per four bytes; Teddy keeps the literals too short for it.

use super::WordMap;
use super::keys::{occurrences, window_class};
use super::teddy::text_cost;

/// Bytes in a piece: eight bytes of a message are rarely in ordinary log lines by chance.
pub(super) const PIECE: usize = 8;
/// Bytes between the places looked up.
pub(super) const STEP: usize = 4;
/// Shortest literal that covers a piece at a looked-up place wherever it occurs.
pub(super) const MIN_LEN: usize = PIECE + STEP - 1;
/// Bits of the hashed-piece filter: 32 KiB; with a few thousand pieces in it, about one place
/// in a hundred that holds none passes.
const FILTER_BITS: u32 = 18;
const FILTER_WORDS: usize = 1 << (FILTER_BITS - 6);

/// The chosen pieces, and where each lies in the required literals.
#[derive(Debug)]
pub(super) struct Grams {
    /// Bit `slot(piece)` is set for every chosen piece.
    filter: Box<[u64; FILTER_WORDS]>,
    /// For each chosen piece, every place it lies in a required literal: (index, offset).
    places: WordMap<u64, Vec<(usize, usize)>>,
}

impl Grams {
    /// The pass for `long` (literals of at least [`MIN_LEN`] bytes, none containing another
    /// required literal), confirming against every one of `texts` (all required literals) that
    /// contains a chosen piece; `None` when there is no long literal.
    pub fn new(long: &[&str], texts: &[String]) -> Option<Grams> {
        let mut chosen: Vec<[u8; PIECE]> = long.iter().flat_map(|l| rarest(l.as_bytes())).collect();
        chosen.sort_unstable();
        chosen.dedup();
        if chosen.is_empty() {
            return None;
        }
        let mut places = vec![Vec::new(); chosen.len()];
        occurrences(&chosen, texts, |ri, piece, at| places[piece].push((ri, at)));
        let mut filter = Box::new([0u64; FILTER_WORDS]);
        for piece in &chosen {
            let s = slot(u64::from_le_bytes(*piece));
            filter[s >> 6] |= 1 << (s & 63);
        }
        let places = (chosen.iter())
            .map(|&p| u64::from_le_bytes(p))
            .zip(places)
            .collect();
        Some(Grams { filter, places })
    }

    /// The first place at or after `from` (a multiple of [`STEP`]) whose piece may be a chosen
    /// one.
    pub fn next_place(&self, hay: &[u8], from: usize) -> Option<usize> {
        let passes = |at: usize| {
            let s = slot(read(hay, at));
            self.filter[s >> 6] & (1 << (s & 63)) != 0
        };
        let mut at = from;
        // Four places a round, one branch for them all.
        while at + 3 * STEP + PIECE <= hay.len() {
            if passes(at) | passes(at + STEP) | passes(at + 2 * STEP) | passes(at + 3 * STEP) {
                break;
            }
            at += 4 * STEP;
        }
        while at + PIECE <= hay.len() {
            if passes(at) {
                return Some(at);
            }
            at += STEP;
        }
        None
    }

    /// The places in the required literals that the piece at `at` stands for: where it lies in
    /// them, none when it is not a chosen piece.
    pub fn places_at(&self, hay: &[u8], at: usize) -> &[(usize, usize)] {
        if at + PIECE > hay.len() {
            return &[];
        }
        self.places.get(&read(hay, at)).map_or(&[], Vec::as_slice)
    }
}

/// The piece at `at` (the caller checks that it is inside `hay`).
fn read(hay: &[u8], at: usize) -> u64 {
    let mut piece = [0; PIECE];
    piece.copy_from_slice(&hay[at..at + PIECE]);
    u64::from_le_bytes(piece)
}

/// The filter bit of a piece (multiplicative hashing: its top bits).
fn slot(piece: u64) -> usize {
    (piece.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - FILTER_BITS)) as usize
}

/// For each offset modulo [`STEP`], the literal's rarest piece starting at such an offset
/// (ordered as `keys` orders key windows: by class, then by byte frequencies).
fn rarest(literal: &[u8]) -> Vec<[u8; PIECE]> {
    let rank = |p: &[u8]| (window_class(p), text_cost(p));
    let mut best: Vec<Option<&[u8]>> = vec![None; STEP];
    for (at, piece) in literal.windows(PIECE).enumerate() {
        let slot = &mut best[at % STEP];
        let rarer = |b: &&[u8]| {
            let (rb, rp) = (rank(b), rank(piece));
            rp.0.cmp(&rb.0).then(rp.1.total_cmp(&rb.1)).is_lt()
        };
        if slot.is_none_or(|b| rarer(&b)) {
            *slot = Some(piece);
        }
    }
    (best.into_iter().flatten())
        .filter_map(|p| p.try_into().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grams(long: &[&str]) -> (Grams, Vec<String>) {
        let texts: Vec<String> = long.iter().map(|s| s.to_string()).collect();
        (Grams::new(long, &texts).expect("long literals"), texts)
    }

    /// Places where a piece confirms one of `texts`, as the candidate pass walks them.
    fn found(g: &Grams, texts: &[String], hay: &[u8]) -> Vec<usize> {
        let mut out = Vec::new();
        let mut pos = 0;
        while let Some(at) = g.next_place(hay, pos) {
            let hit = g
                .places_at(hay, at)
                .iter()
                .any(|&(ri, off)| at >= off && hay[at - off..].starts_with(texts[ri].as_bytes()));
            if hit {
                out.push(at);
            }
            pos = at + STEP;
        }
        out
    }

    #[test]
    fn a_long_literal_is_found_wherever_it_starts() {
        let (g, texts) = grams(&["device-side assert", "torch==2.4.0"]);
        for text in &texts {
            for start in 0..12 {
                for tail in ["", "!", " and more text after it"] {
                    let hay = format!("{}{text}{tail}", "x".repeat(start));
                    let at = found(&g, &texts, hay.as_bytes());
                    assert!(!at.is_empty(), "{hay:?}");
                    assert!(at.iter().all(|&a| a >= start), "{hay:?}: {at:?}");
                }
            }
        }
        assert!(found(&g, &texts, b"a device-side asser, torch==2.4.").is_empty());
    }

    #[test]
    fn every_offset_class_has_a_piece_of_the_literal() {
        for literal in ["torch==2.4.", "index out of range in self", "CUDA error: "] {
            let pieces = rarest(literal.as_bytes());
            assert_eq!(pieces.len(), STEP, "{literal}");
            for piece in &pieces {
                let at = literal.as_bytes().windows(PIECE).position(|w| w == piece);
                assert!(at.is_some(), "{piece:?} of {literal}");
            }
        }
    }
}
