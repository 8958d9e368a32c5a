//! Arranging fingerprints for Teddy, the SIMD searcher of the aho-corasick crate (the one the
//! regex crate uses for a few dozen literals).
//!
//! The candidate pass hands Teddy the *fingerprints* of its keys, their first four bytes, and
//! confirms each fingerprint hit against the required literals itself. Teddy spreads the
//! fingerprints over 8 buckets (16 beyond 32 of them), the n-th going to bucket `buckets - 1 - n
//! % buckets`, and for each bucket keeps, per fingerprint position, which low and which high
//! halves of a byte occur there. A log position is looked at further when its bytes pass one
//! bucket's halves at every position, so a bucket that mixes `CUDA` with `torch` lets through
//! `CUrch`-like byte soup, and lowercase keys let through most text. Ordering the fingerprints so
//! that similar ones share buckets, estimated with typical byte frequencies of CI logs, made the
//! searches of the built-in rules up to twice as fast on a CI log (`cargo bench --bench
//! classify`); the order changes nothing else (any fingerprint hit is confirmed the same way).

/// Most fingerprints one search takes (Teddy's limit).
const PER_SEARCH: usize = 64;
/// Teddy's fingerprint length.
pub(super) const FINGERPRINT: usize = 4;

/// Distinct fingerprints split into searches, each ordered for Teddy's buckets. A search holds
/// fingerprints of one length: Teddy looks at as many bytes as its shortest one has, and of two
/// fingerprints where one starts the other it would report only one.
pub(super) fn arrange(mut fingerprints: Vec<&[u8]>) -> Vec<Vec<&[u8]>> {
    // Fingerprints with more bytes whose high half is rare in logs (uppercase, `_`, brackets)
    // first, so that a split keeps the slow, lowercase-looking ones together.
    let rank = |fp: &[u8]| {
        let rare_halves = fp.iter().filter(|&&b| b >> 4 == 4 || b >> 4 == 5).count();
        (std::cmp::Reverse(rare_halves), fingerprint_cost(fp))
    };
    fingerprints.sort_by(|a, b| {
        let (ra, rb) = (rank(a), rank(b));
        ra.0.cmp(&rb.0).then(ra.1.total_cmp(&rb.1))
    });
    // As few searches as possible, the last one of each length (of the worst fingerprints)
    // the smallest.
    let mut searches = Vec::new();
    for len in (1..=FINGERPRINT).rev() {
        let same: Vec<&[u8]> = fingerprints
            .iter()
            .copied()
            .filter(|fp| fp.len() == len)
            .collect();
        searches.extend(same.chunks(PER_SEARCH).map(order_for_buckets));
    }
    searches
}

/// The fingerprints in the order that puts similar ones in the same bucket: a greedy placement
/// (most permissive fingerprints first, each where it adds the least) refined by swaps.
fn order_for_buckets<'a>(fingerprints: &[&'a [u8]]) -> Vec<&'a [u8]> {
    let n = fingerprints.len();
    let buckets = if n > 32 { 16 } else { 8 };
    // Teddy fills the last buckets first: with `n % buckets` left over, those get one more.
    let capacity = |b: usize| n / buckets + usize::from(b >= buckets - n % buckets);
    let halves: Vec<Halves> = fingerprints.iter().map(|fp| Halves::of(fp)).collect();
    let mut placed: Vec<Vec<usize>> = vec![Vec::new(); buckets];
    let mut union = vec![Halves::NONE; buckets];
    let mut by_cost: Vec<usize> = (0..n).collect();
    by_cost.sort_by(|&a, &b| {
        fingerprint_cost(fingerprints[b]).total_cmp(&fingerprint_cost(fingerprints[a]))
    });
    for fp in by_cost {
        let mut best: Option<(f64, usize)> = None;
        for b in 0..buckets {
            let len = placed[b].len();
            if len >= capacity(b) {
                continue;
            }
            let added = union[b].with(halves[fp]).cost(len + 1) - union[b].cost(len);
            if best.is_none_or(|(c, _)| added < c) {
                best = Some((added, b));
            }
        }
        if let Some((_, b)) = best {
            placed[b].push(fp);
            union[b] = union[b].with(halves[fp]);
        }
    }
    improve_by_swaps(&mut placed, &halves);
    // The n-th fingerprint goes to bucket `buckets - 1 - n % buckets`.
    let mut next = vec![0; buckets];
    (0..n)
        .filter_map(|i| {
            let b = buckets - 1 - i % buckets;
            next[b] += 1;
            placed[b].get(next[b] - 1).map(|&fp| fingerprints[fp])
        })
        .collect()
}

/// Swaps fingerprints (indices into `halves`) between buckets while that lowers the estimated
/// cost (a few rounds).
fn improve_by_swaps(placed: &mut [Vec<usize>], halves: &[Halves]) {
    let union = |bucket: &[usize]| (bucket.iter()).fold(Halves::NONE, |u, &fp| u.with(halves[fp]));
    let mut cost: Vec<f64> = placed.iter().map(|b| union(b).cost(b.len())).collect();
    for _ in 0..3 {
        let mut improved = false;
        for a in 0..placed.len() {
            for b in a + 1..placed.len() {
                for i in 0..placed[a].len() {
                    for j in 0..placed[b].len() {
                        let (x, y) = (placed[a][i], placed[b][j]);
                        placed[a][i] = y;
                        placed[b][j] = x;
                        let ca = union(&placed[a]).cost(placed[a].len());
                        let cb = union(&placed[b]).cost(placed[b].len());
                        if ca + cb < (cost[a] + cost[b]) * 0.999 {
                            (cost[a], cost[b]) = (ca, cb);
                            improved = true;
                        } else {
                            placed[a][i] = x;
                            placed[b][j] = y;
                        }
                    }
                }
            }
        }
        if !improved {
            break;
        }
    }
}

/// What Teddy keeps of a fingerprint, or of a bucket's fingerprints together: per position, the
/// low and the high halves of the bytes there (bit `b & 15` of the first mask, bit `b >> 4` of
/// the second). A position past the end of a short fingerprint takes any byte.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Halves([(u16, u16); FINGERPRINT]);

impl Halves {
    /// No fingerprint: an empty bucket.
    const NONE: Halves = Halves([(0, 0); FINGERPRINT]);

    fn of(fp: &[u8]) -> Halves {
        let mut out = Halves([(u16::MAX, u16::MAX); FINGERPRINT]);
        for (pos, &b) in fp.iter().take(FINGERPRINT).enumerate() {
            out.0[pos] = (1 << (b & 15), 1 << (b >> 4));
        }
        out
    }

    fn with(self, other: Halves) -> Halves {
        let mut out = self;
        for (o, p) in out.0.iter_mut().zip(other.0) {
            *o = (o.0 | p.0, o.1 | p.1);
        }
        out
    }

    /// Estimated share of log positions a bucket of `len` fingerprints with these halves lets
    /// through: per position, the total frequency of the bytes whose low and high halves both
    /// occur there; a little more per fingerprint for the confirming that follows.
    fn cost(&self, len: usize) -> f64 {
        if len == 0 {
            return 0.0;
        }
        let mut pass = 1.0;
        for &(lows, highs) in &self.0 {
            let (low8, high8) = (usize::from(lows as u8), usize::from(lows >> 8));
            let share: u32 = bits(highs)
                .map(|hi| {
                    let hi = usize::from(hi);
                    u32::from(SHARE_LOW[hi][low8]) + u32::from(SHARE_HIGH[hi][high8])
                })
                .sum();
            pass *= f64::from(share) / f64::from(TOTAL);
        }
        pass * (1.0 + 0.2 * len as f64)
    }
}

/// The estimated cost of one bucket (see [`Halves::cost`]).
#[cfg(test)]
fn bucket_cost(bucket: &[&[u8]]) -> f64 {
    let union = (bucket.iter()).fold(Halves::NONE, |u, fp| u.with(Halves::of(fp)));
    union.cost(bucket.len())
}

/// The set bits of `set`, lowest first.
fn bits(mut set: u16) -> impl Iterator<Item = u8> {
    std::iter::from_fn(move || {
        let bit = set.trailing_zeros() as u8;
        set &= set.wrapping_sub(1);
        (bit < 16).then_some(bit)
    })
}

/// `SHARE_LOW[hi][m]`: the total `frequency` of the bytes with high half `hi` and a low half
/// among the set bits of `m` (low halves 0-7); `SHARE_HIGH` the same for low halves 8-15. A
/// bucket position's share is then two look-ups per high half, not one per byte.
const SHARE_LOW: [[u16; 256]; 16] = share_table(0);
const SHARE_HIGH: [[u16; 256]; 16] = share_table(8);

const fn share_table(first_low: usize) -> [[u16; 256]; 16] {
    let mut table = [[0; 256]; 16];
    let mut hi = 0;
    while hi < 16 {
        let mut m = 0;
        while m < 256 {
            let mut sum = 0;
            let mut lo = 0;
            while lo < 8 {
                if m & (1 << lo) != 0 {
                    sum += FREQUENCY[(hi << 4) | (first_low + lo)];
                }
                lo += 1;
            }
            table[hi][m] = sum;
            m += 1;
        }
        hi += 1;
    }
    table
}

/// How often a key's fingerprint alone would occur in a log.
pub(super) fn fingerprint_cost(key: &[u8]) -> f64 {
    text_cost(&key[..key.len().min(FINGERPRINT)])
}

/// How often a piece of text would occur in a log, from its bytes' frequencies alone.
pub(super) fn text_cost(piece: &[u8]) -> f64 {
    (piece.iter())
        .map(|&b| f64::from(frequency(b)) / f64::from(TOTAL))
        .product()
}

/// Sum of `frequency` over all bytes.
const TOTAL: u32 = 10_860;

/// `frequency` of every byte.
const FREQUENCY: [u16; 256] = {
    let mut table = [0; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = frequency_of(b as u8);
        b += 1;
    }
    table
};

/// Approximate frequency of a byte in English-language CI logs, per ten thousand bytes
/// (measured on real CUDA/PyTorch failure logs, rounded).
pub(super) fn frequency(b: u8) -> u32 {
    u32::from(FREQUENCY[usize::from(b)])
}

const fn frequency_of(b: u8) -> u16 {
    match b {
        b' ' => 1400,
        b'e' => 670,
        b'r' => 490,
        b'n' => 460,
        b't' => 450,
        b'o' => 440,
        b'i' => 430,
        b'a' => 410,
        b's' => 350,
        b'l' => 340,
        b'c' => 300,
        b'd' => 240,
        b'/' => 200,
        b'u' | b'p' => 190,
        b'm' => 170,
        b'h' => 160,
        b'.' => 150,
        b',' => 140,
        b'_' => 130,
        b'g' | b'\n' => 120,
        b'y' | b'b' | b'f' | b':' | b'0'..=b'9' => 100,
        b'k' | b'-' => 70,
        b'w' | b'v' | b')' | b'"' => 60,
        b'(' => 50,
        b'=' => 40,
        b'x' | b'A'..=b'Z' => 30,
        b'q' | b'j' | b'z' => 10,
        b'!'..=b'~' => 20,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frequency_table_sums_to_its_total() {
        let sum: u32 = (0..=255u8).map(frequency).sum();
        assert_eq!(sum, TOTAL);
    }

    #[test]
    fn every_fingerprint_is_searched_once_with_others_of_its_length() {
        let keys: Vec<String> = (0..300)
            .map(|i| format!("{}{i:03}", ["C", "t", "_"][i % 3]))
            .chain([".h:".to_owned(), ".go".to_owned()])
            .collect();
        let fingerprints: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
        let searches = arrange(fingerprints.clone());
        assert!(searches.len() >= 6);
        for s in &searches {
            assert!(s.len() <= PER_SEARCH);
            assert!(s.iter().all(|fp| fp.len() == s[0].len()), "{s:?}");
        }
        let mut all: Vec<&[u8]> = searches.concat();
        all.sort();
        let mut want = fingerprints;
        want.sort();
        assert_eq!(all, want);
    }

    #[test]
    fn the_bucket_cost_tables_give_the_byte_by_byte_sum() {
        let bucket: Vec<&[u8]> = vec![b"CUDA", b"cuda", b"torc", b"_ST", b"\xff\x00ab"];
        let mut want = 1.0;
        for pos in 0..FINGERPRINT {
            let (mut lows, mut highs) = (0u16, 0u16);
            for fp in &bucket {
                let Some(&b) = fp.get(pos) else {
                    (lows, highs) = (u16::MAX, u16::MAX);
                    break;
                };
                (lows, highs) = (lows | 1 << (b & 15), highs | 1 << (b >> 4));
            }
            let share: u32 = (0..=255u8)
                .filter(|b| lows & 1 << (b & 15) != 0 && highs & 1 << (b >> 4) != 0)
                .map(frequency)
                .sum();
            want *= f64::from(share) / f64::from(TOTAL);
        }
        want *= 1.0 + 0.2 * bucket.len() as f64;
        assert_eq!(bucket_cost(&bucket), want);
    }

    #[test]
    fn similar_fingerprints_share_buckets() {
        let fps: Vec<&[u8]> = vec![
            b"CUDA", b"NCCL", b"CUFF", b"torc", b"tens", b"devi", b"CUBL", b"memo", b"NVRM",
            b"shap", b"_STA", b"dtyp", b"CUSO", b"size", b"GPU ", b"erro", b"Asse",
        ];
        let ordered = order_for_buckets(&fps);
        assert_eq!(ordered.len(), fps.len());
        let mut placed: Vec<Vec<&[u8]>> = vec![Vec::new(); 8];
        for (i, fp) in ordered.iter().enumerate() {
            placed[7 - i % 8].push(fp);
        }
        let arranged: f64 = placed.iter().map(|b| bucket_cost(b)).sum();
        let mut naive: Vec<Vec<&[u8]>> = vec![Vec::new(); 8];
        for (i, fp) in fps.iter().enumerate() {
            naive[7 - i % 8].push(fp);
        }
        let given: f64 = naive.iter().map(|b| bucket_cost(b)).sum();
        assert!(arranged < given, "{arranged} vs {given}");
    }
}
