//! Where a traceback puts the failure: the user's last frame in the uploaded log's traceback
//! and in the synchronous run's, and the plain sentence saying where the run moved the error.
//!
//! CUDA reports kernel errors asynchronously, so the traceback in an uploaded log often points
//! at a later, innocent line (`loss.item()`); the worker re-runs the script with
//! `CUDA_LAUNCH_BLOCKING=1` and the synchronous traceback names the real one (`emb(idx)`).

use crate::ingest::traceback;

/// The script's output as one log: stderr (where tracebacks go) then stdout. Line numbers in a
/// reproduction's classification are lines of this text.
#[must_use]
pub fn combined_output(stderr: &str, stdout: &str) -> String {
    let mut out = String::with_capacity(stderr.len() + stdout.len() + 1);
    out.push_str(stderr);
    if !stderr.is_empty() && !stderr.ends_with('\n') && !stdout.is_empty() {
        out.push('\n');
    }
    out.push_str(stdout);
    out
}

/// Where a traceback says the failure happened: the last frame in the user's own code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserFrame {
    /// The file's name without its directories (`train.py`).
    pub file: String,
    pub line: u32,
    /// The source line Python printed, if any.
    pub code: Option<String>,
    /// 1-based line of the text where the frame is.
    pub log_line: usize,
}

impl std::fmt::Display for UserFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)?;
        if let Some(code) = &self.code {
            write!(f, " {code}")?;
        }
        Ok(())
    }
}

/// The traceback of `text` that a person would read as "the" error: the last one with frames.
#[must_use]
pub fn main_traceback(text: &str) -> Option<traceback::Traceback> {
    traceback::parse(text)
        .into_iter()
        .rev()
        .find(|tb| !tb.frames.is_empty())
}

/// The user's failing line in a traceback.
#[must_use]
pub fn location(tb: &traceback::Traceback) -> Option<UserFrame> {
    let frame = traceback::user_frame(tb)?;
    let file = frame
        .file
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or(&frame.file)
        .to_owned();
    Some(UserFrame {
        file,
        line: frame.line,
        code: frame.code.clone(),
        log_line: frame.log_line,
    })
}

/// The plain sentence for the report page when the synchronous run moved the error, e.g.
/// "reported at train.py:57 loss.item(), actually raised at train.py:41 emb(idx)"; `None` when
/// both name the same line.
#[must_use]
pub fn moved_sentence(reported: &UserFrame, actual: &UserFrame) -> Option<String> {
    if reported.file == actual.file && reported.line == actual.line {
        return None;
    }
    Some(format!(
        "reported at {reported}, actually raised at {actual}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ASYNC_LOG: &str = "epoch 3\nTraceback (most recent call last):\n  File \"/work/train.py\", line 57, in <module>\n    loss.item()\nRuntimeError: CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n";
    const SYNC_ERR: &str = "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1231: indexSelectSmallIndex: block: [3,0,0], thread: [1,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\nTraceback (most recent call last):\n  File \"/tmp/job/train.py\", line 41, in <module>\n    out = emb(idx)\n  File \"/usr/lib/python3/dist-packages/torch/nn/modules/module.py\", line 1532, in _wrapped_call_impl\n    return self._call_impl(*args, **kwargs)\nRuntimeError: CUDA error: device-side assert triggered\n";

    #[test]
    fn combined_output_puts_stderr_first_on_its_own_lines() {
        assert_eq!(combined_output("a\nb", "c\n"), "a\nb\nc\n");
        assert_eq!(combined_output("a\n", "c"), "a\nc");
        assert_eq!(combined_output("", "c"), "c");
        assert_eq!(combined_output("a", ""), "a");
    }

    #[test]
    fn the_moved_line_is_named_plainly() {
        let reported = location(&main_traceback(ASYNC_LOG).expect("tb")).expect("frame");
        let actual = location(&main_traceback(SYNC_ERR).expect("tb")).expect("frame");
        assert_eq!(reported.log_line, 3);
        assert_eq!(actual.log_line, 3);
        assert_eq!(
            moved_sentence(&reported, &actual).as_deref(),
            Some(
                "reported at train.py:57 loss.item(), actually raised at train.py:41 out = emb(idx)"
            )
        );
        assert_eq!(moved_sentence(&actual, &actual), None);
    }
}
