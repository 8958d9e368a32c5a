//! What a worker posts is untrusted text that may quote secrets: its outputs are scrubbed
//! before storage and before classification (so no finding quotes a secret), and its error
//! message is cut, neutralised and scrubbed the same way.

use super::traces::combined_output;
use crate::ingest::scrub;
use crate::rules::{Classification, Ruleset};

/// Longest worker-reported error kept.
const MAX_ERROR_CHARS: usize = 4000;

/// A result's outputs scrubbed of secrets, and their classification.
#[derive(Debug)]
pub struct ScrubbedOutputs {
    pub stdout: String,
    pub stderr: String,
    pub classification: Classification,
}

/// Scrubs both outputs (before storage and before classification, so no finding quotes a
/// secret) and classifies them. CPU work: call from a blocking thread.
#[must_use]
pub fn scrub_and_classify(ruleset: &Ruleset, stdout: &str, stderr: &str) -> ScrubbedOutputs {
    let stdout = scrub::scrub(&crate::ingest::neutralize_controls(stdout))
        .text
        .into_owned();
    let stderr = scrub::scrub(&crate::ingest::neutralize_controls(stderr))
        .text
        .into_owned();
    let combined = combined_output(&stderr, &stdout);
    let classification = ruleset.classify_bytes("reproduction", combined.as_bytes());
    ScrubbedOutputs {
        stdout,
        stderr,
        classification,
    }
}

pub(super) fn scrub_error(error: &str) -> String {
    let cut: String = error.chars().take(MAX_ERROR_CHARS).collect();
    let cut = crate::ingest::neutralize_controls(&cut);
    scrub::scrub(&cut).text.into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::Category;

    const SYNC_ERR: &str = "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1231: indexSelectSmallIndex: block: [3,0,0], thread: [1,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\nTraceback (most recent call last):\n  File \"/tmp/job/train.py\", line 41, in <module>\n    out = emb(idx)\nRuntimeError: CUDA error: device-side assert triggered\n";

    #[test]
    fn outputs_are_scrubbed_before_classification_and_storage() {
        let rs = Ruleset::builtin().expect("builtin");
        let s = scrub_and_classify(
            &rs,
            "HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567\n",
            SYNC_ERR,
        );
        assert!(!s.stdout.contains("hf_AbCdEf"), "{}", s.stdout);
        assert!(s.stdout.contains("[REDACTED:"), "{}", s.stdout);
        assert_eq!(s.classification.category, Category::OutOfBounds);
        let root = s.classification.root_cause.expect("root cause");
        assert_eq!((root.line, root.rule.as_str()), (1, "cuda.assert.index"));
    }
}
