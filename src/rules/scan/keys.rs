//! Which keys the candidate pass searches for.
//!
//! Every pattern's required literals (see `rules::literals`) are found by searching whole chunks
//! for *keys*, pieces of the required literals, with SIMD literal searches (see `teddy`):
//! required literals that share a long, distinctive piece share one key (`cudaErrorAssert` and
//! `cudaErrorUnknown` become `cudaError`), and each key starts at its rarest bytes. A key hit is
//! confirmed against the full required literals it stands for before a line becomes a
//! candidate, so a shorter key costs a few compares, not extra candidate lines.

use std::collections::HashMap;

use super::teddy::{FINGERPRINT, fingerprint_cost, frequency};

/// A key is not shortened below this many bytes to start at rarer ones.
const MIN_KEY: usize = 8;
/// Required literals share a key when they share a piece at least this long...
const SHARED_LEN: usize = 8;
/// ...and at least this rare (see `rarity`): `cudaError`, `CUDA_ERROR_`, `_STATUS_`,
/// ` out of memory` qualify, common phrases such as ` of the ` or `xpected ` do not.
const SHARED_RARITY: u32 = 16;

/// The keys to search for: every required literal contains one.
pub(super) fn keys(required: &[String]) -> Vec<String> {
    let mut keys = required.to_vec();
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
    loop {
        let free =
            |who: &[(usize, usize)]| who.iter().filter(|(i, _)| start_of[*i].is_none()).count();
        let best = fingerprints
            .iter()
            .filter(|(_, who)| free(who) > 0)
            .max_by(|a, b| {
                free(&a.1)
                    .cmp(&free(&b.1))
                    .then(fingerprint_cost(b.0).total_cmp(&fingerprint_cost(a.0)))
            });
        let Some((_, who)) = best else { break };
        for &(i, start) in who.clone().iter() {
            if start_of[i].is_none() {
                start_of[i] = Some(start);
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
    // Every window of SHARED_LEN bytes held by several keys, widened to all they share.
    let mut holders: HashMap<&[u8], Vec<usize>> = HashMap::new();
    for (i, key) in keys.iter().enumerate() {
        for window in key.as_bytes().windows(SHARED_LEN) {
            let who = holders.entry(window).or_default();
            if who.last() != Some(&i) {
                who.push(i);
            }
        }
    }
    let mut pieces: Vec<(String, Vec<usize>)> = holders
        .into_iter()
        .filter(|(_, who)| who.len() > 1)
        .filter_map(|(seed, who)| Some((grow(keys, seed, &who)?, who)))
        .filter(|(piece, _)| rarity(piece.as_bytes()) >= SHARED_RARITY)
        .collect();
    pieces.sort();
    pieces.dedup();
    // Greedily, each key taking part in one piece at most.
    let mut taken = vec![false; keys.len()];
    let mut shared = Vec::new();
    loop {
        let free = |who: &[usize]| who.iter().filter(|&&i| !taken[i]).count();
        let Some((piece, who)) =
            pieces
                .iter()
                .filter(|(_, who)| free(who) > 1)
                .max_by_key(|(piece, who)| {
                    (
                        free(who),
                        rarity(piece.as_bytes()),
                        std::cmp::Reverse(piece),
                    )
                })
        else {
            break;
        };
        for &i in who {
            taken[i] = true;
        }
        shared.push(piece.clone());
    }
    let mut i = 0;
    keys.retain(|_| {
        i += 1;
        !taken[i - 1]
    });
    keys.extend(shared);
    minimal(keys);
}

/// `seed` widened to the longest piece that all keys in `who` contain.
fn grow(keys: &[String], seed: &[u8], who: &[usize]) -> Option<String> {
    let first = keys[who[0]].as_bytes();
    let at = memchr::memmem::find(first, seed)?;
    let (mut start, mut end) = (at, at + seed.len());
    let all = |piece: &[u8]| who.iter().all(|&i| contains(keys[i].as_bytes(), piece));
    while start > 0 && all(&first[start - 1..end]) {
        start -= 1;
    }
    while end < first.len() && all(&first[start..=end]) {
        end += 1;
    }
    std::str::from_utf8(&first[start..end])
        .ok()
        .map(str::to_owned)
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
fn window_class(w: &[u8]) -> u8 {
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
fn minimal(lits: &mut Vec<String>) {
    lits.sort();
    lits.dedup();
    let all = lits.clone();
    lits.retain(|l| {
        !all.iter()
            .any(|o| o.len() < l.len() && contains(l.as_bytes(), o.as_bytes()))
    });
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    let Some(&first) = needle.first() else {
        return true;
    };
    haystack
        .windows(needle.len())
        .any(|w| w[0] == first && w == needle)
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
