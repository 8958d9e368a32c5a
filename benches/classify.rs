//! Speed and memory benchmark for `gpu-triage classify` as a whole process.
//!
//! Generates a deterministic (fixed-seed xorshift) GitHub-Actions-style log of `BENCH_LOG_MB`
//! decimal MB (default 100) in a temp dir: timestamped pip/build output, ANSI colours, tqdm runs
//! joined by `\r`, metrics, `[rankN]:` lines and caught (noise) tracebacks, ending with the real
//! failure: a CUDA device-side assert cascade, its traceback and an NCCL watchdog timeout. Then
//! runs `gpu-triage classify --format json <log>` once to warm the page cache and `BENCH_RUNS`
//! (default 5) times measured: wall seconds, MB/s and GB/s (bytes/1e6/s), peak RSS in MiB, per
//! run and best/median, plus the category and root cause found. With `rg` on PATH it measures
//! `rg --no-config -c -f <patterns> <log>` the same way, the patterns being every `[[rule]]` of
//! the built-in ruleset (`src/rules/builtin.toml` and `src/rules/builtin/*.toml`) with capture names dropped (`rg -f` joins them into one regex).
//! Peak RSS comes from `/usr/bin/time -f %M` when that works, else from polling `VmHWM` in
//! `/proc/<pid>/status` every 5 ms; the output says which.
//!
//! Target (median MB/s, largest peak RSS): >= 1000 MB/s and <= 64 MiB on a ~100 MB log. Exits 1
//! when missed, 2 on errors (e.g. `gpu-triage classify` failing or missing).
//!
//! Run: `cargo bench --bench classify` (or `BENCH_LOG_MB=20 BENCH_RUNS=3 cargo bench ...`);
//! `BENCH_LOG_PATH=FILE` writes the log there and keeps it, for profiling the same input.
//! `BENCH_RG_ARGS` (default `--no-unicode`: ASCII `\w`, `\d`, `\s`) sets extra rg flags; with
//! the rules' Unicode classes as-is (`BENCH_RG_ARGS=`) rg's one combined regex falls off its DFA
//! and runs at well under 1 MB/s.

use std::fmt::Write as _;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

const BIN: &str = env!("CARGO_BIN_EXE_gpu-triage");
const TARGET_MBPS: f64 = 1000.0;
const TARGET_RSS_MIB: f64 = 64.0;
/// Median throughput relative to `rg -f` over the same patterns in the same run.
const TARGET_VS_RG: f64 = 1.5;

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("bench classify: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn env_num(name: &str, default: u64) -> anyhow::Result<u64> {
    let v = std::env::var(name).unwrap_or_else(|_| default.to_string());
    v.trim()
        .parse()
        .with_context(|| format!("{name}={v:?} is not a number"))
}

fn run() -> anyhow::Result<bool> {
    let mb = env_num("BENCH_LOG_MB", 100)?.max(1);
    let runs = env_num("BENCH_RUNS", 5)?.max(1) as usize;
    let dir = tempfile::tempdir().context("creating temp dir")?;
    // BENCH_LOG_PATH keeps the generated log (for profiling the same input).
    let log = std::env::var_os("BENCH_LOG_PATH")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| dir.path().join("actions.log"));
    let t = Instant::now();
    let (bytes, lines) = generate(&log, mb * 1_000_000)?;
    let (size, secs, shown) = (bytes as f64 / 1e6, t.elapsed().as_secs_f64(), log.display());
    println!("generated {shown} ({bytes} bytes = {size:.1} MB, {lines} lines) in {secs:.2} s");
    let runner = Runner::new(dir.path(), runs, bytes);
    println!("peak RSS method: {}", runner.rss_method());

    let log_s = log.to_string_lossy().into_owned();
    let args = ["classify", "--format", "json", log_s.as_str()];
    println!("\n== gpu-triage classify --format json <log>  ({runs} runs + 1 warm-up)");
    report_classification(&runner.measure(BIN, &args, &[0])?.2);
    let ours = runner.bench(BIN, &args, &[0])?;

    let mut rows = vec![("gpu-triage", ours)];
    match rg_setup(dir.path())? {
        Err(why) => println!("\n(skipping the ripgrep comparison: {why})"),
        Ok((rg, patterns)) => {
            let p = patterns.to_string_lossy().into_owned();
            let extra = std::env::var("BENCH_RG_ARGS").unwrap_or_else(|_| "--no-unicode".into());
            let mut args: Vec<&str> = vec!["--no-config", "-c"];
            args.extend(
                extra
                    .split_whitespace()
                    .chain(["-f", p.as_str(), log_s.as_str()]),
            );
            let shown = args[..args.len() - 2].join(" ");
            println!("\n== rg {shown} <builtin patterns> <log>  ({runs} runs + 1 warm-up)");
            let out = runner.measure(&rg, &args, &[0, 1])?.2; // 1: nothing matched
            println!("matching lines: {}", String::from_utf8_lossy(&out).trim());
            rows.push(("rg", runner.bench(&rg, &args, &[0, 1])?));
        }
    }

    println!(
        "\n== summary ({size:.1} MB log, {runs} runs; peak RSS: {})",
        runner.rss_method()
    );
    println!(
        "tool           best s  median s  best MB/s  median MB/s  median GB/s  max RSS MiB  median RSS MiB"
    );
    for (name, s) in &rows {
        let (bm, mm) = (mbps(bytes, s.best), mbps(bytes, s.median));
        let (best, median, max_rss, med_rss, gb) =
            (s.best, s.median, s.max_rss, s.med_rss, mm / 1e3);
        println!(
            "{name:<12} {best:>8.3} {median:>9.3} {bm:>10.1} {mm:>12.1} {gb:>12.3} {max_rss:>12.1} {med_rss:>15.1}"
        );
    }
    let (median, max_rss) = (mbps(bytes, rows[0].1.median), rows[0].1.max_rss);
    let pass = median >= TARGET_MBPS && max_rss <= TARGET_RSS_MIB;
    let verdict = if pass { "PASS" } else { "FAIL" };
    println!(
        "target: >= {TARGET_MBPS:.0} MB/s and <= {TARGET_RSS_MIB:.0} MiB peak RSS: {verdict}  \
         (gpu-triage median {median:.1} MB/s, max peak RSS {max_rss:.1} MiB)"
    );
    // The same patterns through ripgrep in the same run: a target that holds on any machine.
    if let Some((_, rg)) = rows.iter().find(|(name, _)| *name == "rg") {
        let ratio = median / mbps(bytes, rg.median);
        let verdict = if ratio >= TARGET_VS_RG {
            "PASS"
        } else {
            "FAIL"
        };
        println!(
            "target: >= {TARGET_VS_RG:.1}x ripgrep's median over the same patterns: {verdict}  \
             ({ratio:.2}x)"
        );
    }
    Ok(pass)
}

// ───────────────────────────── log generator ─────────────────────────────

/// xorshift64* with a fixed seed: the same log on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// One word of a space-separated list.
    fn pick(&mut self, words: &'static str) -> &'static str {
        let n = words.split(' ').count() as u64;
        words.split(' ').nth(self.below(n) as usize).unwrap_or("")
    }
}

const PKGS: &str = "torch==2.4.0 numpy>=1.24 transformers==4.44.2 accelerate datasets safetensors \
                    triton==3.0.0 sentencepiece flash-attn einops tokenizers pyarrow";
const WORDS: &str = "checkpoint shard dataloader tokenizer optimizer scheduler warmup cache";

/// Ordinary lines (a template appears as often as it should be picked): `%p` a package, `%w`
/// and `%v` words, `%n`, `%k` and `%s` integers, `%f` a float, `%g` a small float.
const NOISE: [&str; 12] = [
    "Collecting %p",
    "  Downloading %w-%n.%k.0-py3-none-any.whl (%f MB)",
    "Requirement already satisfied: %p in /opt/conda/lib/python3.11/site-packages (from -r requirements.txt (line %n))",
    "[%k/4096] /usr/local/cuda/bin/nvcc -c csrc/%w_kernel.cu -o build/%v_kernel.o -O3 -gencode arch=compute_90,code=sm_90 --use_fast_math",
    "\x1b[32m✓ %w test_%v_%s passed\x1b[0m in %gs",
    "\x1b[1;31m[notice]\x1b[0m A new release of pip is available: \x1b[31;49m24.0\x1b[39;49m -> \x1b[32;49m24.2\x1b[0m",
    "\x1b[36m##[group]\x1b[0mRun python train.py --config configs/%w.yaml --seed %n",
    "step %s | epoch %n | loss %g | lr 3.00e-04 | grad_norm %g | tok/s %s",
    "step %s | epoch %n | loss %g | lr 2.97e-04 | grad_norm %g | tok/s %s",
    "{\"epoch\": %n, \"step\": %s, \"train/loss\": %g, \"eval/accuracy\": %g, \"gpu_mem_gb\": %f}",
    "[rank%n]: %w step %s: loaded %k samples from %v in %f ms",
    "[rank%n]: %w: %v ready after %f ms",
];

/// One ordinary line from `NOISE`, placeholders filled in.
fn noise_line(rng: &mut Rng) -> String {
    let template = NOISE[rng.below(NOISE.len() as u64) as usize];
    let mut out = String::with_capacity(template.len() + 40);
    let mut parts = template.split('%');
    out.push_str(parts.next().unwrap_or(""));
    for part in parts {
        let _ = match part.as_bytes().first() {
            Some(b'p') => write!(out, "{}", rng.pick(PKGS)),
            Some(b'w' | b'v') => write!(out, "{}", rng.pick(WORDS)),
            Some(b'n') => write!(out, "{}", rng.below(8)),
            Some(b'k') => write!(out, "{}", rng.below(4096)),
            Some(b's') => write!(out, "{}", rng.below(200_000)),
            Some(b'f') => write!(out, "{:.1}", rng.unit() * 900.0),
            _ => write!(out, "{:.4}", rng.unit() * 3.0),
        };
        out.push_str(part.get(1..).unwrap_or(""));
    }
    out
}

/// A tqdm bar redrawn several times on one line, the redraws joined by `\r`.
fn tqdm_line(rng: &mut Rng) -> String {
    const PARTS: [&str; 8] = [" ", "▏", "▎", "▍", "▌", "▋", "▊", "▉"];
    let (epoch, total, mut s) = (rng.below(20), 1000u64, String::new());
    let long = rng.below(100) == 0; // now and then a very long line
    let redraws = 2 + rng.below(if long { 1000 } else { 40 });
    for i in 0..redraws {
        let done = (i + 1) * total / redraws;
        let eighths = (done * 80 / total) as usize;
        let mut bar = "█".repeat(eighths / 8);
        if eighths < 80 {
            bar.push_str(PARTS[eighths % 8]);
            bar.push_str(&" ".repeat(9 - eighths / 8));
        }
        let sep = if i == 0 { "" } else { "\r" };
        let (pct, el, left) = (done / 10, done / 6, (total - done) / 6);
        let (em, es, lm, ls) = (el / 60, el % 60, left / 60, left % 60);
        let (rate, loss) = (4.0 + rng.unit() * 2.0, rng.unit());
        let _ = write!(
            s,
            "{sep}Epoch {epoch}: {pct:>3}%|{bar}| {done}/{total} [{em:02}:{es:02}<{lm:02}:{ls:02}, {rate:>5.2}it/s, loss={loss:.3}]"
        );
    }
    s
}

/// Caught, logged and survived: the job carried on after each of these.
const CAUGHT: [&str; 3] = [
    r#"Traceback (most recent call last):
  File "/workspace/data/cache.py", line 88, in load_index
    with open(path, "rb") as f:
FileNotFoundError: [Errno 2] No such file or directory: '/cache/shard_00017.idx'
WARNING:data.cache:index missing, rebuilding it (this is expected on a fresh runner)"#,
    r#"Traceback (most recent call last):
  File "/workspace/train/metrics.py", line 41, in log_optional
    value = stats["eval/bleu"]
KeyError: 'eval/bleu'
WARNING:train.metrics:optional metric eval/bleu not computed this epoch, skipping"#,
    r"/opt/conda/lib/python3.11/site-packages/torch/utils/data/dataloader.py:558: UserWarning: This DataLoader will create 16 worker processes in total. Our suggested max number of worker in current system is 8, which is smaller than what this DataLoader is going to create.
  warnings.warn(_create_warning_msg(",
];

const ASSERT_AT: &str = "/opt/conda/conda-bld/pytorch_1720538643151/work/aten/src/ATen/native/cuda/Indexing.cu:1231: indexSelectSmallIndex:";
const ASSERT: &str = "Assertion `srcIndex < srcSelectDimSize` failed.";

/// The real failure, after the assert cascade: the traceback, then the NCCL watchdog.
const FAILURE: &str = r#"Traceback (most recent call last):
  File "/workspace/train.py", line 412, in <module>
    main()
  File "/workspace/train.py", line 398, in main
    loss = trainer.step(batch)
  File "/workspace/train/trainer.py", line 131, in step
    hidden = self.model.embed(batch["input_ids"])
  File "/opt/conda/lib/python3.11/site-packages/torch/nn/modules/sparse.py", line 164, in forward
    return F.embedding(
RuntimeError: CUDA error: device-side assert triggered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1.
Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.

[rank1]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.
##[error]Process completed with exit code 1."#;

/// Writes about `target` bytes of log to `path`, each line with a GitHub Actions timestamp;
/// returns (bytes, lines).
fn generate(path: &Path, target: u64) -> anyhow::Result<(u64, u64)> {
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    // Time since 2026-07-30T00:00:00Z in 100 ns ticks, starting at 03:36:29.7333793.
    let (mut ticks, mut buf) = (129_897_333_793u64, String::new());
    let mut line = |rng: &mut Rng, body: &str| -> std::io::Result<u64> {
        ticks += rng.below(200_000); // up to 20 ms between lines
        let (secs, frac) = (ticks / 10_000_000, ticks % 10_000_000);
        let d = secs / 86_400 + 29; // days since 2026-07-01 (months taken as 31 days)
        let (month, day) = (7 + d / 31, d % 31 + 1);
        let (h, m, s) = (secs / 3600 % 24, secs / 60 % 60, secs % 60);
        buf.clear();
        let _ = writeln!(
            buf,
            "2026-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{frac:07}Z {body}"
        );
        out.write_all(buf.as_bytes())?;
        Ok(buf.len() as u64)
    };
    let (mut bytes, mut lines) = (0u64, 0u64);
    while bytes + 3_000 < target {
        let body = match rng.below(1000) {
            0..=24 => tqdm_line(&mut rng),
            25 if rng.below(20) == 0 => CAUGHT[rng.below(3) as usize].to_owned(),
            _ => noise_line(&mut rng),
        };
        for l in body.split('\n') {
            bytes += line(&mut rng, l)?;
            lines += 1;
        }
    }
    for t in [29, 30, 31, 0, 1, 2, 3, 4] {
        let b = if t > 4 { 31 } else { 0 };
        let l = format!("{ASSERT_AT} block: [{b},0,0], thread: [{t},0,0] {ASSERT}");
        bytes += line(&mut rng, &l)?;
        lines += 1;
    }
    for l in FAILURE.lines() {
        bytes += line(&mut rng, l)?;
        lines += 1;
    }
    out.flush().context("writing the log")?;
    Ok((bytes, lines))
}

// ───────────────────────────── measuring ─────────────────────────────

/// The last number in `/usr/bin/time -o` output (KiB).
fn read_kib(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().rev().find_map(|l| l.trim().parse().ok())
}

fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn mbps(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / 1e6 / secs
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    f64::midpoint(v[(v.len() - 1) / 2], v[v.len() / 2])
}

/// Best and median wall seconds, largest and median peak RSS (MiB) of the measured runs.
struct Stats {
    best: f64,
    median: f64,
    max_rss: f64,
    med_rss: f64,
}

/// One run: wall seconds, peak RSS in MiB, stdout.
type Sample = (f64, f64, Vec<u8>);

struct Runner {
    /// `Some(file)`: `/usr/bin/time -o file -f %M` works here; `None`: poll `/proc`.
    time_out: Option<PathBuf>,
    /// Where the child's stdout goes (a file: no pipe to drain while polling).
    stdout: PathBuf,
    runs: usize,
    bytes: u64,
}

impl Runner {
    fn new(dir: &Path, runs: usize, bytes: u64) -> Self {
        let out = dir.join("time.out");
        let ok = Command::new("/usr/bin/time")
            .args(["-o", &out.to_string_lossy(), "-f", "%M", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let time_out = (ok && read_kib(&out).is_some()).then_some(out);
        let stdout = dir.join("stdout");
        Runner {
            time_out,
            stdout,
            runs,
            bytes,
        }
    }

    fn rss_method(&self) -> &'static str {
        match self.time_out {
            Some(_) => "/usr/bin/time -f %M (max resident set size of the child)",
            None => "polling VmHWM in /proc/<pid>/status every 5 ms",
        }
    }

    /// Runs `prog args` once, stdout captured and stderr inherited; `ok`: accepted exit codes.
    fn measure(&self, prog: &str, args: &[&str], ok: &[i32]) -> anyhow::Result<Sample> {
        let mut cmd = Command::new(self.time_out.as_ref().map_or(prog, |_| "/usr/bin/time"));
        if let Some(out) = &self.time_out {
            cmd.args(["-o", &out.to_string_lossy(), "-f", "%M", prog]);
        }
        let stdout_file = std::fs::File::create(&self.stdout).context("creating stdout file")?;
        cmd.args(args).stdin(Stdio::null()).stdout(stdout_file); // stderr: inherited
        let start = Instant::now();
        let mut child = cmd.spawn().with_context(|| format!("starting {prog}"))?;
        let mut hwm = 0;
        let status = loop {
            if self.time_out.is_some() {
                break child.wait()?; // no polling: exact wall time
            }
            hwm = hwm.max(vm_hwm_kib(child.id()).unwrap_or(0));
            if let Some(status) = child.try_wait()? {
                break status; // (wall time rounded up to the 5 ms poll)
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let secs = start.elapsed().as_secs_f64();
        let stdout = std::fs::read(&self.stdout).context("reading the child's stdout")?;
        if !ok.contains(&status.code().unwrap_or(-1)) {
            let head: String = String::from_utf8_lossy(&stdout).chars().take(300).collect();
            bail!(
                "`{prog} {}` exited with {status}; stdout starts: {head:?}",
                args.join(" ")
            );
        }
        let kib = match &self.time_out {
            Some(out) => read_kib(out).context("no %M figure from /usr/bin/time")?,
            None => hwm,
        };
        Ok((secs, kib as f64 / 1024.0, stdout))
    }

    /// The measured runs of `prog args`, each printed, then best and median.
    fn bench(&self, prog: &str, args: &[&str], ok: &[i32]) -> anyhow::Result<Stats> {
        let (mut secs, mut rsses) = (Vec::new(), Vec::new());
        for i in 1..=self.runs {
            let (s, r, _) = self.measure(prog, args, ok)?;
            let (m, g) = (mbps(self.bytes, s), mbps(self.bytes, s) / 1000.0);
            println!("run {i}: {s:>8.3} s  {m:>9.1} MB/s  {g:>6.3} GB/s  peak RSS {r:>7.1} MiB");
            secs.push(s);
            rsses.push(r);
        }
        let best = secs.iter().copied().fold(f64::INFINITY, f64::min);
        let max_rss = rsses.iter().copied().fold(0.0, f64::max);
        let (median, med_rss) = (median(&mut secs), median(&mut rsses));
        let (bm, mm) = (mbps(self.bytes, best), mbps(self.bytes, median));
        println!(
            "best {best:.3} s ({bm:.1} MB/s), median {median:.3} s ({mm:.1} MB/s, {:.3} GB/s), \
             peak RSS median {med_rss:.1} MiB, max {max_rss:.1} MiB",
            mm / 1000.0
        );
        Ok(Stats {
            best,
            median,
            max_rss,
            med_rss,
        })
    }
}

/// Prints the category and root cause from the first JSON line, or the raw start of stdout.
fn report_classification(stdout: &[u8]) {
    let text = String::from_utf8_lossy(stdout);
    let json: serde_json::Value =
        serde_json::from_str(text.lines().next().unwrap_or("")).unwrap_or_default();
    let (category, root) = (&json["category"], &json["root_cause"]);
    if category.is_null() || json.get("root_cause").is_none() {
        let head: String = text.chars().take(300).collect();
        println!("classify output has no category/root_cause; it starts: {head:?}");
        return;
    }
    let s = |v: &serde_json::Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
    println!("category: {}  (expected out_of_bounds)", s(category));
    if root.is_object() {
        let (line, rule, text) = (&root["line"], s(&root["rule"]), s(&root["text"]));
        println!("root_cause: line {line} [{rule}] {text}");
    } else {
        println!("root_cause: {root}");
    }
}

/// Finds `rg` and writes the builtin rule patterns, one per line; `Err` says why not.
fn rg_setup(dir: &Path) -> anyhow::Result<Result<(String, PathBuf), String>> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let Some(rg) = std::env::split_paths(&path)
        .map(|d| d.join("rg"))
        .find(|c| c.is_file())
    else {
        return Ok(Err("rg is not on PATH".into()));
    };
    // The ruleset the binary embeds: builtin.toml and the per-library files under builtin/.
    let value: toml::Value =
        toml::from_str(gpu_triage::rules::BUILTIN_RULES).context("parsing the built-in ruleset")?;
    let rules = value
        .get("rule")
        .and_then(|r| r.as_array())
        .map_or(&[][..], Vec::as_slice);
    // `rg -f` joins the patterns with `|` into one regex, and the rules reuse capture names,
    // which is an error there: make every named group non-capturing.
    let unname = regex::Regex::new(r"\(\?P?<[A-Za-z_][A-Za-z0-9_]*>")?;
    let (mut patterns, mut count) = (String::new(), 0);
    // (`-f` takes one pattern a line; an empty one would match every line.)
    let usable = |p: &&str| !p.is_empty() && !p.contains('\n');
    for p in rules
        .iter()
        .filter_map(|r| r.get("pattern")?.as_str())
        .filter(usable)
    {
        patterns.push_str(&unname.replace_all(p, "(?:"));
        patterns.push('\n');
        count += 1;
    }
    if count == 0 {
        return Ok(Err("no [[rule]] patterns in the built-in ruleset".into()));
    }
    let file = dir.join("patterns.txt");
    std::fs::write(&file, patterns).context("writing the patterns file")?;
    println!("\n(rg baseline: {count} patterns of the built-in ruleset, capture names dropped)");
    Ok(Ok((rg.to_string_lossy().into_owned(), file)))
}
