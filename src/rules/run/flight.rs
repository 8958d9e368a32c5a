//! PyTorch's flight recorder (issue 41 item 7): each rank keeps a ring of the collectives it
//! entered and can dump it as a pickle (`TORCH_FR_DUMP_TEMP_FILE<rank>`; the gloo backend
//! records too, and a program dumps it with `_dump_fr_trace_file(rank)` when a collective
//! times out). Read together, the ranks' dumps say where a hang began: the first collective of
//! a process group that some ranks entered and others never did (or entered as another
//! operation), and which ranks those were. Pure: dumps in (read by [`crate::ingest::pickle`]),
//! a [`Divergence`] out.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::ingest::pickle::{self, Value};

/// One collective as a rank recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The process group's name (`0` for the default group).
    pub group: String,
    /// The collective's number in its group (1 first).
    pub seq: u64,
    /// `gloo:all_reduce`, `nccl:broadcast`, ...
    pub op: String,
}

/// One rank's dump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dump {
    /// The dump format's version (`2.10`).
    pub version: String,
    /// Each group's member ranks, as its configuration says.
    pub groups: BTreeMap<String, Vec<u32>>,
    /// The collectives recorded (point-to-point operations left out), oldest first.
    pub entries: Vec<Entry>,
}

/// Why a file is not a flight-recorder dump.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error(transparent)]
    Pickle(#[from] pickle::PickleError),
    #[error("not a flight-recorder dump: {0}")]
    Shape(&'static str),
}

impl Dump {
    /// Reads a dump's pickle.
    ///
    /// # Errors
    /// Not a pickle this reader reads, or not shaped like a dump (no `entries` list).
    pub fn read(data: &[u8]) -> Result<Dump, DumpError> {
        let v = pickle::read(data)?;
        let entries = v.get("entries").ok_or(DumpError::Shape("no entries"))?;
        if !matches!(entries, Value::List(_)) {
            return Err(DumpError::Shape("entries is not a list"));
        }
        let groups = (v.get("pg_config").map(Value::pairs).unwrap_or_default())
            .iter()
            .filter_map(|(name, config)| {
                let ranks = config.get("ranks")?.as_str()?;
                let ranks = ranks
                    .trim_matches(|c| c == '[' || c == ']')
                    .split(',')
                    .filter_map(|r| r.trim().parse().ok())
                    .collect();
                // The gloo backend writes the default group's configuration with no name.
                let name = match name.as_str()? {
                    "" => "0",
                    name => name,
                };
                Some((name.to_owned(), ranks))
            })
            .collect();
        let entries = entries
            .items()
            .iter()
            .filter(|e| e.get("is_p2p").and_then(Value::as_bool) != Some(true))
            .filter_map(|e| {
                let group = match e.get("process_group")?.items().first()? {
                    Value::Str(s) => s.clone(),
                    _ => return None,
                };
                Some(Entry {
                    group,
                    seq: u64::try_from(e.get("collective_seq_id")?.as_int()?).ok()?,
                    op: e.get("profiling_name")?.as_str()?.to_owned(),
                })
            })
            .collect();
        Ok(Dump {
            version: v
                .get("version")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            groups,
            entries,
        })
    }
}

/// The rank a dump's file name gives: its trailing digits (`rank_3`, `fr_trace3`,
/// `nccl_trace_rank_12.pkl`).
#[must_use]
pub fn rank_of(name: &str) -> Option<u32> {
    let base = name.rsplit('/').next().unwrap_or(name);
    let base = base.strip_suffix(".pkl").unwrap_or(base);
    let digits = base.len() - base.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    base[base.len() - digits..].parse().ok()
}

/// Where the ranks' dumps part.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Divergence {
    /// The process group's name (`0` for the default group).
    pub group: String,
    /// The collective's number in its group.
    pub seq: u64,
    /// The operation the ranks that entered it recorded (`gloo:all_reduce`).
    pub op: String,
    /// Ranks that entered it.
    pub entered: Vec<u32>,
    /// Ranks (with a dump) that never entered it.
    pub missing: Vec<u32>,
    /// Ranks that recorded another operation as this collective.
    pub mismatched: Vec<Mismatch>,
}

/// A rank that recorded another operation as the collective.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Mismatch {
    pub rank: u32,
    pub op: String,
}

/// The first collective where the ranks' dumps (`(rank, dump)`) disagree: in each process group
/// (the default one first), from the newest of the ranks' oldest kept entries (older ones may
/// have left a rank's ring), the lowest collective number not every dumped member entered as
/// the same operation. `None` when they agree throughout.
#[must_use]
pub fn diverged(dumps: &[(u32, Dump)]) -> Option<Divergence> {
    // group -> rank -> seq -> op
    let mut seen: BTreeMap<&str, BTreeMap<u32, BTreeMap<u64, &str>>> = BTreeMap::new();
    for (rank, dump) in dumps {
        for (group, members) in &dump.groups {
            if members.contains(rank) {
                seen.entry(group).or_default().entry(*rank).or_default();
            }
        }
        for e in &dump.entries {
            (seen.entry(e.group.as_str()).or_default())
                .entry(*rank)
                .or_default()
                .insert(e.seq, e.op.as_str());
        }
    }
    let mut groups: Vec<&str> = seen.keys().copied().collect();
    groups.sort_by_key(|g| (*g != "0", *g));
    for group in groups {
        let ranks = &seen[group];
        if ranks.len() < 2 {
            continue;
        }
        let from = ranks
            .values()
            .map(|s| s.keys().next().copied().unwrap_or(0))
            .max()
            .unwrap_or(0);
        let all: BTreeSet<u64> = ranks
            .values()
            .flat_map(|s| s.range(from..).map(|(k, _)| *k))
            .collect();
        for seq in all {
            let mut ops: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
            let mut missing = Vec::new();
            for (rank, s) in ranks {
                match s.get(&seq) {
                    Some(op) => ops.entry(op).or_default().push(*rank),
                    None => missing.push(*rank),
                }
            }
            if missing.is_empty() && ops.len() == 1 {
                continue;
            }
            // The operation most ranks recorded is the collective; the others mismatched.
            let (op, entered) = ops
                .iter()
                .max_by_key(|(op, r)| (r.len(), std::cmp::Reverse(**op)))
                .map(|(op, r)| ((*op).to_owned(), r.clone()))
                .unwrap_or_default();
            let mismatched = ops
                .iter()
                .filter(|(o, _)| **o != op)
                .flat_map(|(o, r)| {
                    r.iter().map(|r| Mismatch {
                        rank: *r,
                        op: (*o).to_owned(),
                    })
                })
                .collect();
            return Some(Divergence {
                group: group.to_owned(),
                seq,
                op,
                entered,
                missing,
                mismatched,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dump(entries: &[(u64, &str)]) -> Dump {
        Dump {
            version: "2.10".into(),
            groups: [("0".to_owned(), vec![0, 1, 2, 3])].into(),
            entries: entries
                .iter()
                .map(|(seq, op)| Entry {
                    group: "0".into(),
                    seq: *seq,
                    op: (*op).into(),
                })
                .collect(),
        }
    }

    #[test]
    fn the_first_collective_a_rank_never_entered_is_named_with_its_ranks() {
        let full = [
            (1, "gloo:all_reduce"),
            (2, "gloo:broadcast"),
            (3, "gloo:all_reduce"),
        ];
        let short = &full[..2];
        let dumps = vec![
            (0, dump(&full)),
            (1, dump(&full[1..])), // its ring lost collective 1
            (2, dump(short)),
            (3, dump(&full)),
        ];
        let d = diverged(&dumps).expect("diverged");
        assert_eq!(
            (d.seq, d.op.as_str(), d.entered, d.missing),
            (3, "gloo:all_reduce", vec![0, 1, 3], vec![2])
        );
        let same: Vec<(u32, Dump)> = (0..4).map(|r| (r, dump(&full))).collect();
        assert_eq!(diverged(&same), None);
        let mut other = full.to_vec();
        other[1].1 = "gloo:all_gather";
        let mixed = vec![(0, dump(&full)), (1, dump(&other)), (2, dump(&full))];
        let d = diverged(&mixed).expect("diverged");
        assert_eq!(
            (d.seq, d.mismatched),
            (
                2,
                vec![Mismatch {
                    rank: 1,
                    op: "gloo:all_gather".to_owned()
                }]
            )
        );
    }

    #[test]
    fn ranks_come_from_the_dumps_file_names() {
        assert_eq!(rank_of("fr/rank_3"), Some(3));
        assert_eq!(rank_of("nccl_trace_rank_12.pkl"), Some(12));
        assert_eq!(rank_of("dump"), None);
    }
}
