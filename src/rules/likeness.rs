//! How alike two failure signatures are, and the keys that find alike ones without comparing
//! against every group (issue 42). A signature's trigrams are pg_trgm's: each word (a run of
//! letters and digits) lowercased, padded with two spaces in front and one behind, cut into
//! every three consecutive characters; the likeness of two signatures is the Jaccard index of
//! their trigram sets (what pg_trgm's `similarity` computes for ASCII text).
//!
//! The keys are MinHash bands (Broder 1997; Leskovec, Rajaraman and Ullman, *Mining of Massive
//! Datasets*, ch. 3): [`HASHES`] hash functions each pick the trigram of least hash, and two
//! sets pick the same one with probability equal to their Jaccard index. Taken [`ROWS`] at a
//! time into [`BANDS`] keys, two signatures of likeness s share at least one key with
//! probability 1 - (1 - s²)^16: 0.78 at 0.3, 0.99 at 0.5, 1.0 from 0.7. `storage::groups`
//! keeps each group's keys in a B-tree and reads the groups holding a new failure's keys: a
//! bounded set of candidates whatever the number of groups, ranked here by exact likeness.
//!
//! The keys are stored, so the hashing is fixed here (FNV-1a, then SplitMix64's finalizer with
//! a seed per function), never a hasher that may change between Rust releases: a change to it
//! is a new key space and needs every group keyed again.

/// Hash functions of the MinHash signature.
pub const HASHES: usize = 32;
/// Min-hashes per band key.
pub const ROWS: usize = 2;
/// Band keys per signature.
pub const BANDS: usize = HASHES / ROWS;

/// A signature's trigrams, hashed, sorted and without repeats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trigrams(Vec<u64>);

impl Trigrams {
    /// The trigram set of `signature`.
    #[must_use]
    pub fn of(signature: &str) -> Trigrams {
        let mut set = Vec::new();
        let mut word = String::new();
        let flush = |word: &mut String, set: &mut Vec<u64>| {
            if word.is_empty() {
                return;
            }
            let padded: Vec<char> = "  ".chars().chain(word.chars()).chain([' ']).collect();
            for w in padded.windows(3) {
                let mut buf = [0u8; 12];
                let mut n = 0;
                for c in w {
                    n += c.encode_utf8(&mut buf[n..]).len();
                }
                set.push(fnv1a(&buf[..n]));
            }
            word.clear();
        };
        for c in signature.chars() {
            if c.is_alphanumeric() {
                word.extend(c.to_lowercase());
            } else {
                flush(&mut word, &mut set);
            }
        }
        flush(&mut word, &mut set);
        set.sort_unstable();
        set.dedup();
        Trigrams(set)
    }

    /// Whether the signature has no word at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The Jaccard index of the two sets, 0 to 1 (0 when either is empty).
    #[must_use]
    pub fn likeness(&self, other: &Trigrams) -> f32 {
        let (a, b) = (&self.0, &other.0);
        let (mut i, mut j, mut common) = (0, 0, 0usize);
        while i < a.len() && j < b.len() {
            match a[i].cmp(&b[j]) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    common += 1;
                    i += 1;
                    j += 1;
                }
            }
        }
        let union = a.len() + b.len() - common;
        if union == 0 {
            return 0.0;
        }
        #[allow(
            clippy::cast_precision_loss,
            reason = "trigram counts of a signature are far below 2^24"
        )]
        let ratio = common as f32 / union as f32;
        ratio
    }

    /// The band keys of this set: [`BANDS`] of them (fewer when two bands hash alike), none
    /// for an empty set.
    #[must_use]
    pub fn band_keys(&self) -> Vec<i64> {
        if self.0.is_empty() {
            return Vec::new();
        }
        let mut mins = [u64::MAX; HASHES];
        for &t in &self.0 {
            for (seed, min) in (0u64..).zip(mins.iter_mut()) {
                *min = (*min).min(mix(t ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
            }
        }
        let mut keys: Vec<i64> = (0u64..)
            .zip(mins.chunks(ROWS))
            .map(|(band, rows)| {
                let key = rows.iter().fold(mix(band), |acc, &h| mix(acc ^ h));
                i64::from_ne_bytes(key.to_ne_bytes())
            })
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }
}

/// FNV-1a, 64 bits.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// SplitMix64's finalizer: a bijection of 64-bit values that spreads every input bit.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigrams_are_pg_trgms_words_padded() {
        // pg_trgm: show_trgm('Conv x') = {"  c","  x"," co"," x ",con,"nv ",onv}
        assert_eq!(Trigrams::of("Conv x").0.len(), 7);
        assert_eq!(Trigrams::of("conv, X"), Trigrams::of("CONV x"));
        assert!(Trigrams::of(" ,;: ").is_empty());
        assert_eq!(Trigrams::of("a").0.len(), 2, "'  a' and ' a '");
    }

    #[test]
    fn likeness_is_the_jaccard_index_of_the_trigram_sets() {
        let a = Trigrams::of("ValueError: unknown layer kind conv_hkpq");
        assert!((a.likeness(&a) - 1.0).abs() < f32::EPSILON);
        // pg_trgm: similarity('word', 'words') = 4/7 ("  w", " wo", wor, ord shared of the
        // seven: "rd ", rds and "ds " apart).
        let (w, ws) = (Trigrams::of("word"), Trigrams::of("words"));
        assert!(
            (w.likeness(&ws) - 4.0 / 7.0).abs() < 1e-6,
            "{}",
            w.likeness(&ws)
        );
        assert!(a.likeness(&Trigrams::of("NCCL timeout")) < 0.1);
        assert!((a.likeness(&Trigrams::of("")) - 0.0).abs() < f32::EPSILON);
    }

    #[test]
    fn alike_signatures_share_band_keys_and_unlike_ones_do_not() {
        let keys = |s: &str| Trigrams::of(s).band_keys();
        let a =
            keys("ValueError: unknown layer kind conv_hkpq train.py:<module> model_b.py:forward");
        assert_eq!(a.len(), BANDS);
        assert_eq!(
            a,
            keys("valueerror unknown layer kind conv hkpq train py module model b py forward")
        );
        let near =
            keys("ValueError: unknown layer kind conv_hkpq train.py:<module> model_c.py:forward");
        assert!(
            a.iter().any(|k| near.contains(k)),
            "a near twin shares a key"
        );
        let far = keys("NCCL error in: ProcessGroupNCCL.cpp, unhandled system error");
        assert!(
            !a.iter().any(|k| far.contains(k)),
            "an unrelated one shares none"
        );
        assert!(keys("").is_empty());
    }

    #[test]
    fn the_share_of_signatures_with_a_common_key_follows_their_likeness() {
        // Pairs of word lists sharing `kept` of 30 words: over 300 pairs, the share that has a
        // key in common is near the mean of 1 - (1 - s^2)^16 for their exact likeness s.
        let word = |n: u64| -> String {
            let mut z = mix(n);
            (0..7)
                .map(|_| {
                    let c = char::from(b'a' + u8::try_from(z % 26).unwrap_or(0));
                    z /= 26;
                    c
                })
                .collect()
        };
        for kept in [8u64, 12, 18] {
            let (mut shared, mut expected) = (0.0f64, 0.0f64);
            for n in 0..300u64 {
                let base = n * 1000;
                let a: Vec<String> = (0..30).map(|i| word(base + i)).collect();
                let b: Vec<String> = (0..30)
                    .map(|i| word(if i < kept { base + i } else { base + 500 + i }))
                    .collect();
                let (a, b) = (Trigrams::of(&a.join(" ")), Trigrams::of(&b.join(" ")));
                let s = f64::from(a.likeness(&b));
                expected += 1.0 - (1.0 - s * s).powi(16);
                let keys = b.band_keys();
                if a.band_keys().iter().any(|k| keys.contains(k)) {
                    shared += 1.0;
                }
            }
            let (shared, expected) = (shared / 300.0, expected / 300.0);
            assert!(
                (shared - expected).abs() < 0.08,
                "{kept} of 30 words kept: {shared:.2} share a key, {expected:.2} expected"
            );
        }
    }
}
