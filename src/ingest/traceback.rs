//! Python traceback parsing, so the portal and the GPU reproduction worker can say "reported at
//! train.py:57 `loss.item()`, raised inside model.py:23 `self.emb(idx)`" instead of pointing at a
//! wall of text.
//!
//! Tracebacks arrive pasted, quoted and prefixed: torchrun puts `[rank0]: ` or `0: ` before every
//! line, CI runners a timestamp, chat quoting a `> `, Windows a `\r`. Each line is first peeled of
//! that noise; a frame line with some other prefix still matches (`File "` is searched, not
//! anchored) and its prefix is then peeled from the code line below it. Snippets that start in
//! the middle of a traceback (no header) are accepted, as are IPython/Jupyter frames, old
//! (`~/x.py in f(...)` + `--> 308 code`) and new (`File ~/x.py:308, in f(...)`, `Cell In[5], line 3`).

use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// One stack frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    /// The source file as printed (`/home/u/train.py`, `<frozen runpy>`, `Cell In[5]`).
    pub file: String,
    /// The 1-based line in that file.
    pub line: u32,
    /// The function (`forward`, `Module._call_impl`, `<module>`); empty when not printed.
    pub function: String,
    /// The source line Python printed under the frame, trimmed, when there is one.
    pub code: Option<String>,
    /// The 1-based line of the input where the frame's `File ...` line is.
    pub log_line: usize,
}

/// One traceback: frames outermost first (as Python prints them), then the exception.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Traceback {
    /// The frames, outermost first; the last one raised.
    pub frames: Vec<Frame>,
    /// The first line of the exception (`RuntimeError: CUDA error: ...`), when it was found.
    pub exception: Option<String>,
    /// The 1-based line of the input where the exception is.
    pub exception_line: Option<usize>,
}

const HEADER: &str = "Traceback (most recent call last)";
/// How an exception printed without a message (`KeyboardInterrupt`) is recognised.
const BARE_SUFFIXES: [&str; 6] = [
    "Error",
    "Exception",
    "Interrupt",
    "Exit",
    "Iteration",
    "Warning",
];

#[allow(
    clippy::expect_used,
    reason = "constant patterns; every one is exercised by the unit tests"
)]
fn re(pattern: &str) -> Regex {
    Regex::new(pattern).expect("constant traceback pattern compiles")
}

/// Launcher, CI and quoting prefixes, possibly stacked: `2026-07-30T03:36:29.7333793Z `,
/// `[rank0]: `, `[default1]:`, `[1,0]<stderr>:`, `0: `, `[80746] `, `> `.
static NOISE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^(?:\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)? |\[(?:rank|default)?\d+\]: ?|\[\d+,\d+\]<std(?:out|err)>: ?|\d{1,5}: |\[\d+\] |> ?)*",
    )
});
static PLAIN_FRAME: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r#"(?:^|[\s:>\]|])(?P<at>File) "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+?))?\s*$"#,
    )
});
static IPYTHON_OLD_FRAME: LazyLock<Regex> = LazyLock::new(|| {
    re(r"^(?P<file>(?:~|/|\.|[A-Za-z]:\\)\S*\.py|<ipython-input-[^>]+>) in (?P<func>[^\s(]+)")
});
static IPYTHON_NEW_FRAME: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^(?:File (?P<file>\S.*?):(?P<line>\d+), in (?P<func>[^\s(]+)|(?P<cell>Cell In ?\[\d+\]), line (?P<cline>\d+))",
    )
});
/// `----> 1 model(x)`, `--> 308   return f(x)`, `-> 1501     return forward_call(*args)`.
static ARROW: LazyLock<Regex> =
    LazyLock::new(|| re(r"^\s*-+> ?(?P<line>\d+)(?:\s+(?P<code>.*))?$"));
/// The numbered source lines IPython prints around the arrow.
static CONTEXT: LazyLock<Regex> = LazyLock::new(|| re(r"^\s*\d+(?:\s|$)"));
static EXCEPTION: LazyLock<Regex> =
    LazyLock::new(|| re(r"^(?P<name>(?:[A-Za-z_]\w*\.)*[A-Z]\w*)(?P<colon>:(?:\s.*)?)?$"));

/// Every traceback in `text`, in order. Chained exceptions ("During handling of the above
/// exception...") come out as separate tracebacks.
#[must_use]
pub fn parse(text: &str) -> Vec<Traceback> {
    // Notebook outputs carry ANSI colours; stripping keeps every newline, so line numbers hold.
    let decolored;
    let text = if text.contains('\x1b') {
        let mut buf = Vec::with_capacity(text.len());
        super::normalize::strip_ansi_into(text.as_bytes(), &mut buf);
        decolored = String::from_utf8_lossy(&buf).into_owned();
        decolored.as_str()
    } else {
        text
    };
    let mut parser = Parser {
        lines: text.lines().collect(),
        at: 0,
        open: None,
        out: Vec::new(),
    };
    while parser.at < parser.lines.len() {
        parser.step();
    }
    parser.close();
    parser.out
}

/// The frame to show as "where it happened": the last frame in the user's own code (not in
/// site-packages, dist-packages, the standard library, torch, conda `pkgs` or `<frozen ...>`),
/// else the last frame.
#[must_use]
pub fn user_frame(tb: &Traceback) -> Option<&Frame> {
    tb.frames
        .iter()
        .rev()
        .find(|f| !is_library(&f.file))
        .or(tb.frames.last())
}

/// Whether `file` belongs to a library (site-packages, the standard library, torch and its C++
/// sources `c10/` and `aten/`, conda `pkgs`, `<frozen ...>`) rather than the user's own code.
#[must_use]
pub fn is_library(file: &str) -> bool {
    let path = file.replace('\\', "/").to_ascii_lowercase();
    path.starts_with("<frozen")
        || path.contains("site-packages/")
        || path.contains("dist-packages/")
        || path.contains("/lib/python3")
        || path
            .split('/')
            .any(|part| matches!(part, "torch" | "pkgs" | "c10" | "aten"))
}

/// A traceback being read, and the unknown prefix its frame lines carried.
#[derive(Default)]
struct Open {
    tb: Traceback,
    residue: String,
    ipython: bool,
}

struct Parser<'t> {
    lines: Vec<&'t str>,
    /// The index of the next line to read.
    at: usize,
    open: Option<Open>,
    out: Vec<Traceback>,
}

impl<'t> Parser<'t> {
    /// Line `i` without launcher/CI/quoting noise nor the open traceback's own prefix.
    fn clean(&self, i: usize) -> Option<&'t str> {
        let line = strip_noise(self.lines.get(i)?);
        let residue = self.open.as_ref().map_or("", |o| o.residue.as_str());
        Some(if residue.is_empty() {
            line
        } else {
            line.strip_prefix(residue).unwrap_or(line)
        })
    }

    fn step(&mut self) {
        let base = strip_noise(self.lines[self.at]);
        if let Some(at) = base.find(HEADER) {
            self.close();
            // IPython's header starts with the exception name: `OutOfMemoryError   Traceback (...`.
            let ipython = is_exception(base[..at].trim());
            self.open = Some(Open {
                ipython,
                ..Open::default()
            });
            self.at += 1;
        } else if let Some(frame) = self.plain_frame(base) {
            self.push(frame, false);
        } else if !self.ipython_frame(base) {
            self.other_line();
        }
    }

    /// `  File "path", line N, in func` plus the code and caret lines under it.
    fn plain_frame(&mut self, base: &str) -> Option<Frame> {
        let caps = PLAIN_FRAME.captures(base)?;
        let line = caps["line"].parse().ok()?;
        let prefix = &base[..caps.name("at")?.start()];
        let residue = prefix.trim_end();
        let indent = prefix.len() - residue.len();
        self.open.get_or_insert_default().residue = residue.to_string();
        let mut frame = Frame {
            file: caps["file"].to_string(),
            line,
            function: caps.name("func").map_or("", |m| m.as_str()).to_string(),
            code: None,
            log_line: self.at + 1,
        };
        self.at += 1;
        // Everything indented deeper is this frame's: the code, its continuation lines (3.13
        // prints whole multi-line statements) and the `^^^^`/`~~~~` markers.
        while let Some(next) = self.clean(self.at) {
            let text = next.trim();
            let next_indent = next.len() - next.trim_start().len();
            let unindented_code = indent == 0 && frame.code.is_none() && !is_exception(text);
            let stop = text.is_empty() || next.contains(HEADER) || PLAIN_FRAME.is_match(next);
            if stop || !(next_indent > indent || unindented_code) {
                break;
            }
            if frame.code.is_none() && !text.chars().all(|c| matches!(c, '^' | '~' | ' ')) {
                frame.code = Some(text.to_string());
            }
            self.at += 1;
        }
        Some(frame)
    }

    /// An IPython frame header and the numbered context lines under it; the arrow line gives the
    /// code (and, in the old style, the line number). A header without a line number is dropped.
    fn ipython_frame(&mut self, base: &str) -> bool {
        let Some((file, function, line)) = ipython_header(base) else {
            return false;
        };
        let (mut line, mut code) = (line.unwrap_or(0), None);
        let log_line = self.at + 1;
        self.at += 1;
        while let Some(next) = self.clean(self.at) {
            if let Some(arrow) = ARROW.captures(next) {
                line = arrow["line"].parse().unwrap_or(line);
                code = arrow.name("code").map(|m| m.as_str().trim().to_string());
            } else if !CONTEXT.is_match(next) {
                break;
            }
            self.at += 1;
        }
        if line != 0 {
            let (file, function) = (file.to_string(), function.to_string());
            let frame = Frame {
                file,
                line,
                function,
                code,
                log_line,
            };
            self.push(frame, true);
        }
        true
    }

    fn push(&mut self, frame: Frame, ipython: bool) {
        let open = self.open.get_or_insert_default();
        open.ipython |= ipython;
        open.tb.frames.push(frame);
    }

    /// Inside a traceback: the exception closes it, elision lines are skipped, anything else
    /// ends it without an exception.
    fn other_line(&mut self) {
        let line = self.clean(self.at);
        self.at += 1;
        let (Some(line), Some(open)) = (line, self.open.as_mut()) else {
            return;
        };
        let text = line.trim();
        if is_exception(text) {
            open.tb.exception = Some(text.to_string());
            open.tb.exception_line = Some(self.at);
            self.close();
            return;
        }
        let elided = text.starts_with("[Previous line repeated") || text == "...";
        let ipython_filler = open.ipython && text.chars().all(|c| c == '-');
        if !(elided || ipython_filler) {
            self.close();
        }
    }

    fn close(&mut self) {
        if let Some(open) = self.open.take()
            && (!open.tb.frames.is_empty() || open.tb.exception.is_some())
        {
            self.out.push(open.tb);
        }
    }
}

/// `(file, function, line)` of an IPython frame header; the old style has no line number.
fn ipython_header(base: &str) -> Option<(&str, &str, Option<u32>)> {
    if let Some(c) = IPYTHON_NEW_FRAME.captures(base) {
        return Some(match c.name("cell") {
            Some(cell) => (cell.as_str(), "<module>", c["cline"].parse().ok()),
            None => (
                c.name("file")?.as_str(),
                c.name("func")?.as_str(),
                c["line"].parse().ok(),
            ),
        });
    }
    let c = IPYTHON_OLD_FRAME.captures(base)?;
    Some((c.name("file")?.as_str(), c.name("func")?.as_str(), None))
}

fn strip_noise(line: &str) -> &str {
    NOISE.find(line).map_or(line, |m| &line[m.end()..])
}

/// `RuntimeError: ...`, `torch.cuda.OutOfMemoryError: ...`, a bare `KeyboardInterrupt`. The last
/// name segment must have a lower-case letter (so `ERROR: ...` or `NCCL: ...` are not exceptions),
/// and a name without a message must end like an exception class.
fn is_exception(line: &str) -> bool {
    let Some(caps) = EXCEPTION.captures(line) else {
        return false;
    };
    let name = &caps["name"];
    let last = name.rsplit('.').next().unwrap_or(name);
    let bare_ok = BARE_SUFFIXES.iter().any(|suffix| last.ends_with(suffix));
    last.chars().any(|c| c.is_ascii_lowercase()) && (caps.name("colon").is_some() || bare_ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One expected traceback: frame count, exception (prefix) and its line, and the user frame
    /// as (file suffix, line, code).
    type Want = (usize, &'static str, usize, &'static str, u32, &'static str);

    const EMBEDDING_ASSERT: &[&str] = &[
        "../aten/src/ATen/native/cuda/Indexing.cu:1289: indexSelectLargeIndex: block: [0,0,0], thread: [0,0,0] Assertion `srcIndex < srcSelectDimSize` failed.",
        "Traceback (most recent call last):",
        "  File \"/home/ana/proj/train.py\", line 57, in <module>",
        "    main()",
        "  File \"/home/ana/proj/train.py\", line 41, in main",
        "    logits = model(idx)",
        "             ^^^^^^^^^^",
        "  File \"/home/ana/proj/model.py\", line 23, in forward",
        "    x = self.emb(idx)",
        "        ^^^^^^^^^^^^^",
        "  File \"/opt/conda/lib/python3.11/site-packages/torch/nn/functional.py\", line 2264, in embedding",
        "    return torch.embedding(weight, input, padding_idx, scale_grad_by_freq, sparse)",
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        "RuntimeError: CUDA error: device-side assert triggered",
        "CUDA kernel errors might be asynchronously reported at some other API call.",
    ];

    const DDP_NCCL: &[&str] = &[
        "[rank1]: Traceback (most recent call last):",
        "[rank1]:   File \"/workspace/ddp_train.py\", line 88, in <module>",
        "[rank1]:     main()",
        "[rank1]:   File \"/workspace/ddp_train.py\", line 62, in main",
        "[rank1]:     model = DDP(model, device_ids=[local_rank])",
        "[rank1]:   File \"/usr/local/lib/python3.10/dist-packages/torch/nn/parallel/distributed.py\", line 822, in __init__",
        "[rank1]:     _verify_param_shape_across_processes(self.process_group, parameters)",
        "[rank1]:   File \"/usr/local/lib/python3.10/dist-packages/torch/distributed/utils.py\", line 286, in _verify_param_shape_across_processes",
        "[rank1]:     return dist._verify_params_across_processes(process_group, tensors, logger)",
        "[rank1]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled system error, NCCL version 2.20.5",
        "[rank1]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
        "E0730 03:36:30.123000 140 torch/distributed/elastic/multiprocessing/api.py:833] failed (exitcode: 1)",
    ];

    /// A CI excerpt cut mid-traceback (no header), Python 3.13 multi-line statements.
    const OOM_BACKWARD_CI: &[&str] = &[
        "2026-07-30T03:36:29.7333793Z   File \"/home/runner/work/lm/lm/train.py\", line 120, in train_step",
        "2026-07-30T03:36:29.7333901Z     loss.backward()",
        "2026-07-30T03:36:29.7334012Z   File \"/opt/hostedtoolcache/Python/3.13.1/x64/lib/python3.13/site-packages/torch/_tensor.py\", line 581, in backward",
        "2026-07-30T03:36:29.7334100Z     torch.autograd.backward(",
        "2026-07-30T03:36:29.7334150Z     ~~~~~~~~~~~~~~~~~~~~~~~^",
        "2026-07-30T03:36:29.7334200Z         self, gradient, retain_graph, create_graph, inputs=inputs",
        "2026-07-30T03:36:29.7334250Z         ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        "2026-07-30T03:36:29.7334300Z     )",
        "2026-07-30T03:36:29.7334350Z     ^",
        "2026-07-30T03:36:29.7334400Z   File \"/opt/hostedtoolcache/Python/3.13.1/x64/lib/python3.13/site-packages/torch/autograd/graph.py\", line 825, in _engine_run_backward",
        "2026-07-30T03:36:29.7334500Z     return Variable._execution_engine.run_backward(  # Calls into the C++ engine",
        "2026-07-30T03:36:29.7334700Z torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 14.58 GiB",
        "2026-07-30T03:36:29.7334800Z ##[error]Process completed with exit code 1.",
    ];

    /// Pasted in a chat with `> ` quoting, from `torchrun --tee 3` (`0: ` prefixes).
    const QUOTED_TORCHRUN: &[&str] = &[
        "> 0:   File \"/data/exp/run.py\", line 12, in <module>",
        "> 0:     out = model(batch)",
        "> 0:   File \"<frozen runpy>\", line 88, in _run_code",
        "> 0: IndexError: index out of range in self",
    ];

    /// A logger prefix the noise filter does not know, peeled from the lines after the frame.
    const LOGGER_PREFIX: &[&str] = &[
        "ERROR trainer | Traceback (most recent call last):",
        "ERROR trainer |   File \"/srv/app/step.py\", line 7, in step",
        "ERROR trainer |     torch.cuda.synchronize()",
        "ERROR trainer | RuntimeError: CUDA error: unspecified launch failure",
    ];

    const IPYTHON_OLD: &[&str] = &[
        "---------------------------------------------------------------------------",
        "RuntimeError                              Traceback (most recent call last)",
        "<ipython-input-5-2b1c7f0a9d3e> in <module>",
        "      1 x = torch.randint(0, 50000, (8, 128), device='cuda')",
        "----> 2 y = model(x)",
        "",
        "~/anaconda3/lib/python3.8/site-packages/torch/nn/modules/module.py in _call_impl(self, *input, **kwargs)",
        "    887             result = self._slow_forward(*input, **kwargs)",
        "    888         else:",
        "--> 889             result = self.forward(*input, **kwargs)",
        "    890         for hook in itertools.chain(",
        "",
        "RuntimeError: CUDA error: device-side assert triggered",
    ];

    const IPYTHON_NEW: &[&str] = &[
        "\x1b[0;31mOutOfMemoryError\x1b[0m                          Traceback (most recent call last)",
        "Cell \x1b[0;32mIn[7], line 3\x1b[0m",
        "\x1b[1;32m      1\x1b[0m model \x1b[38;5;241m=\x1b[39m Net()\x1b[38;5;241m.\x1b[39mcuda()",
        "\x1b[0;32m----> 3\x1b[0m out \x1b[38;5;241m=\x1b[39m model(x)",
        "",
        "File \x1b[0;32m~/miniconda3/lib/python3.10/site-packages/torch/nn/modules/module.py:1501\x1b[0m, in \x1b[0;36mModule._call_impl\x1b[0;34m(self, *args, **kwargs)\x1b[0m",
        "\x1b[1;32m   1497\x1b[0m \x1b[38;5;66;03m# If we don't have any hooks\x1b[39;00m",
        "\x1b[0;32m-> 1501\x1b[0m     \x1b[38;5;28;01mreturn\x1b[39;00m forward_call(\x1b[38;5;241m*\x1b[39margs)",
        "",
        "\x1b[0;31mOutOfMemoryError\x1b[0m: CUDA out of memory. Tried to allocate 2.00 GiB.",
    ];

    const CHAINED: &[&str] = &[
        "Traceback (most recent call last):",
        "  File \"/srv/bench.py\", line 9, in run",
        "    torch.cuda.synchronize()",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        "  File \"/srv/bench.py\", line 14, in <module>",
        "    run()",
        "  File \"/srv/bench.py\", line 11, in run",
        "    torch.cuda.empty_cache()",
        "KeyboardInterrupt",
    ];

    #[test]
    fn tracebacks_are_parsed_from_real_shapes_of_logs() {
        #[rustfmt::skip]
        let cases: &[(&str, &[&str], &str, &[Want])] = &[
            ("embedding assert", EMBEDDING_ASSERT, "\n",
             &[(4, "RuntimeError: CUDA error: device-side assert", 14, "proj/model.py", 23, "x = self.emb(idx)")]),
            ("ddp nccl, rank prefixes, CRLF", DDP_NCCL, "\r\n",
             &[(4, "torch.distributed.DistBackendError: NCCL error in:", 10, "ddp_train.py", 62, "model = DDP(model, device_ids=[local_rank])")]),
            ("oom in backward, CI timestamps", OOM_BACKWARD_CI, "\n",
             &[(3, "torch.OutOfMemoryError: CUDA out of memory. Tried", 12, "lm/train.py", 120, "loss.backward()")]),
            ("quoted torchrun", QUOTED_TORCHRUN, "\n",
             &[(2, "IndexError: index out of range in self", 4, "/data/exp/run.py", 12, "out = model(batch)")]),
            ("unknown logger prefix", LOGGER_PREFIX, "\n",
             &[(1, "RuntimeError: CUDA error: unspecified launch failure", 4, "step.py", 7, "torch.cuda.synchronize()")]),
            ("ipython old style", IPYTHON_OLD, "\n",
             &[(2, "RuntimeError: CUDA error: device-side", 13, "<ipython-input-5-2b1c7f0a9d3e>", 2, "y = model(x)")]),
            ("ipython new style, coloured", IPYTHON_NEW, "\n",
             &[(2, "OutOfMemoryError: CUDA out of memory.", 10, "Cell In[7]", 3, "out = model(x)")]),
            ("chained", CHAINED, "\n", &[
                (1, "RuntimeError: CUDA error: an illegal memory access", 4, "bench.py", 9, "torch.cuda.synchronize()"),
                (2, "KeyboardInterrupt", 13, "bench.py", 11, "torch.cuda.empty_cache()"),
            ]),
        ];
        for (name, lines, sep, want) in cases {
            let got = parse(&lines.join(sep));
            assert_eq!(got.len(), want.len(), "{name}: {got:#?}");
            for (tb, &(frames, exception, at, file, line, code)) in got.iter().zip(want.iter()) {
                let user = user_frame(tb).map(|f| (f.file.as_str(), f.line, f.code.as_deref()));
                let ok = tb.frames.len() == frames
                    && tb
                        .exception
                        .as_deref()
                        .is_some_and(|e| e.starts_with(exception))
                    && tb.exception_line == Some(at)
                    && user
                        .is_some_and(|(f, l, c)| f.ends_with(file) && l == line && c == Some(code));
                assert!(ok, "{name}: user frame {user:?} in {tb:#?}");
            }
        }
    }

    #[test]
    fn frames_record_where_they_are_in_the_log() {
        let got = parse(&EMBEDDING_ASSERT.join("\n"));
        let frames: Vec<_> = got[0]
            .frames
            .iter()
            .map(|f| (f.line, &*f.function, f.log_line))
            .collect();
        let want = [
            (57, "<module>", 3),
            (41, "main", 5),
            (23, "forward", 8),
            (2264, "embedding", 11),
        ];
        assert_eq!(frames, want);
        let last = got[0].frames.last().and_then(|f| f.code.as_deref());
        let call = "return torch.embedding(weight, input, padding_idx, scale_grad_by_freq, sparse)";
        assert_eq!(last, Some(call));
        let ci = parse(&OOM_BACKWARD_CI.join("\n"));
        let code = ci[0].frames[1].code.as_deref();
        assert_eq!(
            code,
            Some("torch.autograd.backward("),
            "continuation and marker lines skipped"
        );
    }

    #[test]
    fn text_without_a_traceback_gives_none() {
        let cases: &[&str] = &[
            "",
            "NCCL version 2.7.8+cuda11.1\nRuntimeError: CUDA error: out of memory\n",
            "Traceback (most recent call last):\n(no frames were printed)\n",
            "/home/u/x.py in 3 places\nnothing else\n",
            "ERROR: File not found\nWARNING: retrying",
        ];
        for input in cases {
            assert_eq!(parse(input), Vec::new(), "{input:?}");
        }
    }

    #[test]
    fn pytorchs_cpp_sources_are_library_code_and_a_users_are_not() {
        for file in [
            "../c10/cuda/CUDAException.cpp",
            "/pytorch/c10/hip/HIPFunctions.cpp",
            "../aten/src/ATen/native/cuda/Indexing.cu",
        ] {
            assert!(is_library(file), "{file}");
        }
        for file in [
            "csrc/my_kernel.cu",
            "/srv/ext/ops.cpp",
            "/home/u/catena/train.py",
        ] {
            assert!(!is_library(file), "{file}");
        }
    }

    #[test]
    fn user_frame_skips_library_code_and_falls_back_to_the_last_frame() {
        #[rustfmt::skip]
        let cases: &[(&[&str], Option<u32>)] = &[
            (&["/app/train.py", "/usr/lib/python3.10/runpy.py"], Some(0)),
            (&["<frozen runpy>", "/app/train.py", "/opt/conda/pkgs/foo/x.py", "/src/torch/nn/functional.py"], Some(1)),
            (&["C:\\Users\\me\\proj\\main.py", "C:\\Users\\me\\anaconda3\\Lib\\site-packages\\torch\\nn\\module.py"], Some(0)),
            (&["/venv/lib/python3.12/site-packages/a.py", "/usr/local/lib/python3.12/dist-packages/b.py"], Some(1)),
            (&[], None),
        ];
        for (files, want) in cases {
            let frame = |(file, line): (&&str, u32)| Frame {
                file: file.to_string(),
                line,
                function: "f".to_string(),
                code: None,
                log_line: 1,
            };
            let tb = Traceback {
                frames: files.iter().zip(0..).map(frame).collect(),
                ..Traceback::default()
            };
            assert_eq!(user_frame(&tb).map(|f| f.line), *want, "{files:?}");
        }
    }
}
