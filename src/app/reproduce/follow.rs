//! When a report's headline follows its reproduction: the synchronous run names a more
//! specific root cause than the one the report's category rests on (a kernel assertion naming
//! the index beats "device-side assert triggered"). The decision is pure ([`should_follow`]);
//! [`follow_if_more_specific`] reads the basis under a row lock, decides and writes, inside the
//! caller's transaction.

use sqlx::PgConnection;

use crate::rules::{Category, Classification, Confidence, Ruleset};
use crate::storage::DbError;
use crate::storage::reports::Headline;
use crate::storage::reproductions::{self as reads, Followed};

/// How strongly a classification names its root cause: its rule's specificity, 0 without one.
/// A rule the ruleset no longer has (renamed, a team rule removed) ranks by its confidence.
fn strength(ruleset: &Ruleset, c: &Classification) -> u8 {
    let Some(root) = &c.root_cause else {
        return 0;
    };
    ruleset
        .specificity(&root.rule)
        .unwrap_or(match c.confidence {
            Confidence::High => 80,
            Confidence::Medium => 40,
            // A fallback's guess ranks as the catch-all rule it stands on.
            Confidence::Low | Confidence::Likely => 10,
        })
}

/// Whether a report whose category currently rests on `current` should take `repro`'s: the
/// reproduction names a specific root cause and either the report had none (`unknown`), or only
/// a generic library failure, or the reproduction's root cause ranks strictly higher in the
/// rule engine's specificity order. A run without a GPU that failed for lack of one proves
/// nothing.
#[must_use]
pub fn should_follow(
    ruleset: &Ruleset,
    current: &Classification,
    repro: &Classification,
    no_gpu: bool,
) -> bool {
    if repro.root_cause.is_none() || repro.category == Category::Unknown {
        return false;
    }
    if no_gpu && repro.category == Category::DriverIssue {
        return false;
    }
    let generic = |c: Category| matches!(c, Category::Unknown | Category::LibraryError);
    if current.root_cause.is_none() || current.category == Category::Unknown {
        return true;
    }
    if current.category == Category::LibraryError && !generic(repro.category) {
        return true;
    }
    strength(ruleset, repro) > strength(ruleset, current)
}

/// After a reproduction is recorded, in the same transaction: when it is more specific than
/// what the report's category rests on, the report's category, title and confidence follow it
/// (and the report records that). The report's row is locked while deciding, so two results
/// of one report decide one after the other. Idempotent, so a replayed result may run it again.
/// Returns whether it followed.
#[tracing::instrument(
    name = "reproduce::follow_if_more_specific",
    skip_all,
    fields(report_id, reproduction_id)
)]
pub async fn follow_if_more_specific(
    tx: &mut PgConnection,
    ruleset: &Ruleset,
    report_id: i64,
    reproduction_id: i64,
    repro: &Classification,
    no_gpu: bool,
) -> Result<bool, DbError> {
    let Some(basis) = reads::category_basis(&mut *tx, report_id, true).await? else {
        return Ok(false);
    };
    if basis.reproduction_id == Some(reproduction_id)
        || !should_follow(ruleset, basis.current(), repro, no_gpu)
    {
        return Ok(false);
    }
    let followed = Followed {
        reproduction_id,
        headline: Headline::of(repro),
    };
    reads::follow_reproduction(&mut *tx, report_id, &followed).await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ruleset() -> Ruleset {
        Ruleset::builtin().expect("builtin")
    }

    const ASYNC_LOG: &str = "epoch 3\nTraceback (most recent call last):\n  File \"/work/train.py\", line 57, in <module>\n    loss.item()\nRuntimeError: CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n";
    const SYNC_ERR: &str = "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1231: indexSelectSmallIndex: block: [3,0,0], thread: [1,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\nTraceback (most recent call last):\n  File \"/tmp/job/train.py\", line 41, in <module>\n    out = emb(idx)\nRuntimeError: CUDA error: device-side assert triggered\n";

    #[test]
    fn the_category_follows_only_a_more_specific_reproduction() {
        let rs = ruleset();
        let log = rs.classify_bytes("log", ASYNC_LOG.as_bytes());
        let sync = rs.classify_bytes("sync", SYNC_ERR.as_bytes());
        let unknown = rs.classify_bytes("x", b"all fine\n");
        let oom = rs.classify_bytes("x", b"RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)\n");
        let no_driver = rs.classify_bytes(
            "x",
            b"RuntimeError: Found no NVIDIA driver on your system.\n",
        );
        // A kernel assertion naming the index beats the generic device-side assert.
        assert!(should_follow(&rs, &log, &sync, false));
        // Never towards the generic one, nor towards nothing.
        assert!(!should_follow(&rs, &sync, &log, false));
        assert!(!should_follow(&rs, &log, &unknown, false));
        // Anything specific beats unknown.
        assert!(should_follow(&rs, &unknown, &oom, false));
        // Equal strength keeps the log's.
        assert!(!should_follow(&rs, &sync, &sync.clone(), false));
        // A worker without a GPU failing for lack of a driver proves nothing.
        assert_eq!(no_driver.category, Category::DriverIssue);
        assert!(!should_follow(&rs, &unknown, &no_driver, true));
        assert!(should_follow(&rs, &unknown, &no_driver, false));
    }
}
