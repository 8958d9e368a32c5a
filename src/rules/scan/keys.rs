//! Which keys the candidate pass searches for.
//!
//! The required literals (see `rules::literals`) too short for the gram pass (see `grams`) are
//! found by searching whole chunks for *keys*, pieces of them, with SIMD literal searches (see
//! `teddy`): literals that share a long, distinctive piece share one key (`cudaErrorX` and
//! `cudaErrorY` become `cudaError`), and each key starts at its rarest bytes. A key hit is
//! confirmed against the full required literals it stands for before a line becomes a
//! candidate, so a shorter key costs a few compares, not extra candidate lines.

use std::collections::{BinaryHeap, HashMap};

use super::WordMap;
use super::teddy::{FINGERPRINT, fingerprint_cost, frequency};

/// A key is not shortened below this many bytes to start at rarer ones.
const MIN_KEY: usize = 8;
/// Required literals share a key when they share a piece at least this long...
const SHARED_LEN: usize = 8;
/// ...and at least this rare (see `rarity`): `cudaError`, `CUDA_ERROR_`, `_STATUS_`,
/// ` out of memory` qualify, common phrases such as ` of the ` or `xpected ` do not.
const SHARED_RARITY: u32 = 16;

/// The keys to search for: every required literal contains one.
pub(super) fn keys(required: &[impl AsRef<str>]) -> Vec<String> {
    let mut keys: Vec<String> = required.iter().map(|r| r.as_ref().to_owned()).collect();
    minimal(&mut keys);
    share(&mut keys);
    let mut keys = anchor_keys(&keys);
    minimal(&mut keys);
    keys
}

/// The keys (index, offset of the window) that accept one fingerprint.
type Takers = Vec<(usize, usize)>;

/// A window may stand in for a key's rarest one when its estimated frequency is at most this
/// many times higher.
const ANCHOR_SLACK: f64 = 4.0;

/// Each key without the bytes before the window it is searched by. A key starts at one of its
/// windows that are nearly as rare as its rarest (`start_at_rarest`: same class, frequency within
/// [`ANCHOR_SLACK`]), and among those at one that other keys can start at too: Teddy takes 64
/// distinct fingerprints per pass over the log, so with hundreds of keys, fingerprints shared
/// between keys mean fewer passes. Greedy set cover: the window most unassigned keys accept
/// first, the rarer on ties.
fn anchor_keys(keys: &[String]) -> Vec<String> {
    // Every acceptable fingerprint and the keys (with the offset) that accept it.
    let mut takers: HashMap<&[u8], Takers> = HashMap::new();
    for (i, key) in keys.iter().enumerate() {
        for start in acceptable_starts(key) {
            let who = takers.entry(window(key, start)).or_default();
            if who.last().is_none_or(|&(k, _)| k != i) {
                who.push((i, start));
            }
        }
    }
    let mut fingerprints: Vec<(&[u8], Takers)> = takers.into_iter().collect();
    fingerprints.sort_by(|a, b| a.0.cmp(b.0));
    let mut start_of: Vec<Option<usize>> = vec![None; keys.len()];
    // Lazily, as in `share`: a fingerprint's unassigned keys only fall. Costs are positive, so
    // their bits order as they do.
    let free = |start_of: &[Option<usize>], who: &[(usize, usize)]| {
        who.iter().filter(|(i, _)| start_of[*i].is_none()).count()
    };
    let rank = |free: usize, i: usize| {
        let cost = fingerprint_cost(fingerprints[i].0).to_bits();
        (free, std::cmp::Reverse(cost), i)
    };
    let mut queue: BinaryHeap<_> = (0..fingerprints.len())
        .map(|i| rank(fingerprints[i].1.len(), i))
        .collect();
    while let Some((queued, _, i)) = queue.pop() {
        let who = &fingerprints[i].1;
        match free(&start_of, who) {
            0 => continue,
            now if now < queued => queue.push(rank(now, i)),
            _ => {
                for &(k, start) in who {
                    if start_of[k].is_none() {
                        start_of[k] = Some(start);
                    }
                }
            }
        }
    }
    keys.iter()
        .zip(start_of)
        .map(|(key, start)| key[start.unwrap_or(0)..].to_owned())
        .collect()
}

/// The offsets a key may be searched from: its rarest window's (see `start_at_rarest`) and any
/// other window of the same class at most [`ANCHOR_SLACK`] times as frequent, each leaving at
/// least `MIN_KEY` bytes.
fn acceptable_starts(key: &str) -> Vec<usize> {
    if key.len() <= MIN_KEY {
        return vec![0];
    }
    let best = key.len() - start_at_rarest(key).len();
    let (best_class, best_cost) = (
        window_class(window(key, best)),
        fingerprint_cost(window(key, best)),
    );
    (0..=key.len() - MIN_KEY)
        .filter(|&s| key.is_char_boundary(s))
        .filter(|&s| {
            let w = window(key, s);
            s == best
                || (window_class(w) == best_class
                    && fingerprint_cost(w) <= best_cost * ANCHOR_SLACK)
        })
        .collect()
}

/// Replaces keys that share a long and rare piece by that piece, the most widely shared first.
fn share(keys: &mut Vec<String>) {
    // Every window of SHARED_LEN bytes held by several keys, widened to all they share. Sorted,
    // each window's places (key, offset) come together, the first key's first place first.
    let mut windows: Vec<(&[u8], usize, usize)> = (keys.iter().enumerate())
        .flat_map(|(i, key)| {
            let windows = key.as_bytes().windows(SHARED_LEN).enumerate();
            windows.map(move |(at, window)| (window, i, at))
        })
        .collect();
    windows.sort_unstable();
    let mut pieces: Vec<(String, Vec<usize>)> = Vec::new();
    for places in windows.chunk_by(|a, b| a.0 == b.0) {
        let mut who: Vec<usize> = places.iter().map(|&(_, i, _)| i).collect();
        who.dedup();
        if who.len() < 2 {
            continue;
        }
        let places = places.iter().map(|&(_, i, at)| (i, at)).collect();
        if let Some(piece) = grow(keys, places, SHARED_LEN)
            && rarity(piece.as_bytes()) >= SHARED_RARITY
        {
            pieces.push((piece, who));
        }
    }
    pieces.sort();
    pieces.dedup();
    // Greedily, each key taking part in one piece at most: the piece with the most free keys,
    // the rarer, then the later on ties. Lazily: a piece's free keys only fall as keys are
    // taken, so one whose recount still equals its queued count outranks every other piece.
    let mut taken = vec![false; keys.len()];
    let mut shared = Vec::new();
    let free = |taken: &[bool], who: &[usize]| who.iter().filter(|&&i| !taken[i]).count();
    let rank = |free: usize, i: usize| {
        let piece = &pieces[i].0;
        (free, rarity(piece.as_bytes()), std::cmp::Reverse(piece), i)
    };
    let mut queue: BinaryHeap<_> = (0..pieces.len())
        .filter(|&i| pieces[i].1.len() > 1)
        .map(|i| rank(pieces[i].1.len(), i))
        .collect();
    while let Some((queued, _, _, i)) = queue.pop() {
        let (piece, who) = &pieces[i];
        match free(&taken, who) {
            now if now < 2 => continue,
            now if now < queued => queue.push(rank(now, i)),
            _ => {
                for &k in who {
                    taken[k] = true;
                }
                shared.push(piece.clone());
            }
        }
    }
    let mut i = 0;
    keys.retain(|_| {
        i += 1;
        !taken[i - 1]
    });
    keys.extend(shared);
    minimal(keys);
}

/// The piece of `len` bytes at `places` (every place it lies in every key that holds it, by key
/// then offset) widened to the longest piece that all those keys contain: first leftwards, then
/// rightwards, around its first place in the first key.
fn grow(keys: &[String], mut places: Vec<(usize, usize)>, len: usize) -> Option<String> {
    let (key, at) = *places.first()?;
    let first = keys[key].as_bytes();
    let (mut start, mut end) = (at, at + len);
    while start > 0 {
        let byte = first[start - 1];
        let before = |key: &[u8], p: usize| p.checked_sub(1).filter(|&q| key[q] == byte);
        if !widen(keys, &mut places, before) {
            break;
        }
        start -= 1;
    }
    while end < first.len() {
        let (byte, width) = (first[end], end - start);
        let after = |key: &[u8], p: usize| (key.get(p + width) == Some(&byte)).then_some(p);
        if !widen(keys, &mut places, after) {
            break;
        }
        end += 1;
    }
    std::str::from_utf8(&first[start..end])
        .ok()
        .map(str::to_owned)
}

/// Moves `places` (by key) to where the piece one byte wider lies (`to`: its place in a key, if
/// that key holds it there), when every key still holds it somewhere; says whether it did. A
/// wider piece lies only where the narrower one does, so nothing is searched again.
fn widen(
    keys: &[String],
    places: &mut Vec<(usize, usize)>,
    to: impl Fn(&[u8], usize) -> Option<usize>,
) -> bool {
    let held = |&(key, at): &(usize, usize)| to(keys[key].as_bytes(), at);
    let every_key =
        (places.chunk_by(|a, b| a.0 == b.0)).all(|key| key.iter().any(|p| held(p).is_some()));
    if every_key {
        places.retain_mut(|place| match held(place) {
            Some(at) => {
                place.1 = at;
                true
            }
            None => false,
        });
    }
    every_key
}

/// The key without the bytes before its rarest fingerprint (keeping at least `MIN_KEY`):
/// Teddy looks further at every position where a fingerprint could start.
///
/// Byte frequencies alone rate a piece of a common word as rare (`quir` of the `Requirement` on
/// every pip line, `comp` of `compute`), so pieces that no single word holds come first: with a
/// capital, digit or sign inside (`d_fn`, `(unb`), then across two words (`d me` of `shared
/// memory`, which takes that word pair), then the rest; byte frequencies only order each class.
fn start_at_rarest(key: &str) -> String {
    if key.len() <= MIN_KEY {
        return key.to_owned();
    }
    let class = window_class;
    let start = (0..=key.len() - MIN_KEY)
        .filter(|&s| key.is_char_boundary(s))
        .min_by(|&a, &b| {
            let (wa, wb) = (window(key, a), window(key, b));
            class(wa)
                .cmp(&class(wb))
                .then(fingerprint_cost(wa).total_cmp(&fingerprint_cost(wb)))
                .then(a.cmp(&b))
        })
        .unwrap_or(0);
    key[start..].to_owned()
}

/// How likely a window is to occur in ordinary words (see `start_at_rarest`): 0 with a capital,
/// digit or sign inside, 1 across two words, 2 inside a lowercase word.
pub(super) fn window_class(w: &[u8]) -> u8 {
    if w.iter().any(|&b| !b.is_ascii_lowercase() && b != b' ') {
        0
    } else if w[1..w.len() - 1].contains(&b' ') {
        1
    } else {
        2
    }
}

/// The fingerprint window of `key` at `start`: a key shorter than a fingerprint (a 3-byte
/// required literal such as `.h:`) is its own window.
fn window(key: &str, start: usize) -> &[u8] {
    &key.as_bytes()[start..(start + FINGERPRINT).min(key.len())]
}

/// Sorted, deduplicated, and without literals that contain another (the shorter one finds them).
pub(super) fn minimal(lits: &mut Vec<String>) {
    lits.sort();
    lits.dedup();
    // Deduplicated, so a shorter literal inside one is another.
    let mut contains_another = vec![false; lits.len()];
    occurrences(lits, lits, |hay, needle, _| {
        contains_another[hay] |= lits[needle].len() < lits[hay].len();
    });
    let mut i = 0;
    lits.retain(|_| {
        i += 1;
        !contains_another[i - 1]
    });
}

/// Calls `found(hay, needle, offset)` for every place one of `needles` (none empty) occurs in one
/// of `hays`, by index. The needles are looked up by their first bytes at each position of each
/// haystack, so the work follows the haystacks' total length: comparing every pair, as this
/// once did, grew with the square of the ruleset's literals and took longer than the rest of its
/// compile.
pub(super) fn occurrences(
    needles: &[impl AsRef<[u8]>],
    hays: &[impl AsRef<[u8]>],
    mut found: impl FnMut(usize, usize, usize),
) {
    let Some(head) = needles.iter().map(|n| n.as_ref().len()).min() else {
        return;
    };
    let head = head.clamp(1, 3);
    let word = |bytes: &[u8]| bytes.iter().fold(0u32, |w, &b| w << 8 | u32::from(b));
    let mut by_head: WordMap<u32, Vec<usize>> = WordMap::default();
    for (i, needle) in needles.iter().enumerate() {
        if let Some(start) = needle.as_ref().get(..head) {
            by_head.entry(word(start)).or_default().push(i);
        }
    }
    for (h, hay) in hays.iter().enumerate() {
        let hay = hay.as_ref();
        for at in 0..hay.len().saturating_sub(head - 1) {
            let Some(candidates) = by_head.get(&word(&hay[at..at + head])) else {
                continue;
            };
            for &n in candidates {
                if hay[at..].starts_with(needles[n].as_ref()) {
                    found(h, n, at);
                }
            }
        }
    }
}

/// How rare a piece of text is in logs: the sum of its bytes' rarity, from 0 (space and the
/// most frequent letters) to 8 (uppercase, brackets and other rare signs).
fn rarity(piece: &[u8]) -> u32 {
    piece
        .iter()
        .map(|&b| match frequency(b) {
            400.. => 0,
            150..400 => 3,
            60..150 => 5,
            _ => 8,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::literals::LiteralPlan;

    #[test]
    fn a_required_literal_shorter_than_a_fingerprint_is_its_own_key() {
        let required = vec![
            ".h:".to_owned(),
            ".cc:".to_owned(),
            "ptxas error".to_owned(),
        ];
        let got = keys(&required);
        assert!(got.contains(&".h:".to_owned()), "{got:?}");
        assert_eq!(got.len(), 3, "{got:?}");
    }

    #[test]
    fn every_required_literal_contains_a_key() {
        let required: Vec<String> = [
            "cudaErrorAssert",
            "cudaErrorUnknown",
            "CUDA_ERROR_ASSERT",
            "CUDA_ERROR_UNKNOWN",
            "index out of range in self",
            "Error: ",
            "IndexError: ",
            "torch==",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let keys = keys(&required);
        for r in &required {
            assert!(keys.iter().any(|k| r.contains(k.as_str())), "{r}: {keys:?}");
        }
        assert!(keys.contains(&"CUDA_ERROR_".to_owned()), "{keys:?}");
        assert!(keys.iter().any(|k| k.ends_with("daError")), "{keys:?}");
        assert!(keys.contains(&"Error: ".to_owned()), "{keys:?}");
        assert!(!keys.iter().any(|k| k.contains("IndexError")), "{keys:?}");
    }

    #[test]
    fn keys_share_fingerprints_so_hundreds_of_rules_need_fewer_passes() {
        let file: crate::rules::spec::RuleFile =
            toml::from_str(crate::rules::BUILTIN_RULES).expect("builtin parses");
        let mut required: Vec<String> = file
            .rule
            .iter()
            .map(|r| r.pattern.as_str())
            .chain(file.context.iter().map(|c| c.pattern.as_str()))
            .filter_map(|p| LiteralPlan::of(p).literals().map(<[String]>::to_vec))
            .flatten()
            .collect();
        minimal(&mut required);
        share(&mut required);
        let anchored = anchor_keys(&required);
        for (key, out) in required.iter().zip(&anchored) {
            assert!(
                key.ends_with(out.as_str()),
                "{out:?} is not a suffix of {key:?}"
            );
            assert!(
                out.len() >= MIN_KEY.min(key.len()),
                "{out:?} of {key:?} is too short"
            );
        }
        let distinct = |keys: &[String]| {
            let mut fps: Vec<&[u8]> = keys
                .iter()
                .map(|k| &k.as_bytes()[..k.len().min(FINGERPRINT)])
                .collect();
            fps.sort();
            fps.dedup();
            fps.len()
        };
        let alone: Vec<String> = required.iter().map(|k| start_at_rarest(k)).collect();
        assert!(
            distinct(&anchored) < distinct(&alone),
            "shared anchoring gives {} fingerprints, anchoring each key alone {}",
            distinct(&anchored),
            distinct(&alone)
        );
    }
}
