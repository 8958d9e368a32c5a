//! Matching speed with team rules: the built-in ruleset alone versus the built-in ruleset plus
//! 500 generated, distinct, realistic team rules (own kernels, extensions, cluster messages, in
//! four shapes, each with an example the engine verifies), on the same large CI-like log.
//!
//! The log is generated in memory like `benches/classify.rs` builds its own (fixed-seed
//! xorshift; GitHub-Actions timestamps, pip/build output, ANSI colours, tqdm redraws joined by
//! `\r`, metrics, `[rankN]:` lines), with the team's vocabulary (its extension and kernel names)
//! in ordinary lines so the literal prefilter meets near-misses, a few real team failures, and the
//! usual device-side assert cascade at the end. Both rulesets classify it `BENCH_RUNS` times
//! (default 5), interleaved; the median MB/s of each and their ratio are printed, with PASS when
//! the team ruleset keeps at least half the built-in speed (the issue's "within 2x").
//!
//! Run: `cargo bench --bench rules` (`BENCH_LOG_MB`, default 100; `BENCH_TEAM_RULES`, default
//! 500). Exits 1 on FAIL, 2 on errors.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Instant;

use gpu_triage::rules::spec::RuleSpec;
use gpu_triage::rules::team_compile::{TeamEntry, builtin_file, compile_with_team};
use gpu_triage::rules::{Category, Ruleset};

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("bench rules: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn env_num(name: &str, default: u64) -> Result<u64, String> {
    let v = std::env::var(name).unwrap_or_else(|_| default.to_string());
    v.trim()
        .parse()
        .map_err(|_| format!("{name}={v:?} is not a number"))
}

fn run() -> Result<bool, String> {
    let mb = env_num("BENCH_LOG_MB", 100)?.max(1);
    let runs = env_num("BENCH_RUNS", 5)?.max(1) as usize;
    let n_team = env_num("BENCH_TEAM_RULES", 500)? as usize;

    let t = Instant::now();
    let log = generate(mb * 1_000_000);
    println!(
        "generated a {:.1} MB CI log in {:.2} s",
        log.len() as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    let builtin = Ruleset::builtin().map_err(|e| e.to_string())?;
    let t = Instant::now();
    let team: Vec<TeamEntry> = team_rules(n_team)
        .into_iter()
        .map(|spec| TeamEntry {
            id: spec.id.clone(),
            spec: Some(spec),
            enabled: true,
        })
        .collect();
    let file = builtin_file().map_err(|e| e.to_string())?;
    let with_team = compile_with_team(&file, &team).map_err(|e| e.to_string())?;
    println!(
        "compiled {} built-in + {} team rules (every example verified) in {:.2} s",
        builtin.rule_count(),
        with_team.rule_count() - builtin.rule_count(),
        t.elapsed().as_secs_f64()
    );

    // Warm-up, and the classifications must agree on the log's real failure.
    let a = builtin.classify_bytes("-", &log);
    let b = with_team.classify_bytes("-", &log);
    println!(
        "built-in: {} via {:?}; with team rules: {} via {:?} ({} findings)",
        a.category,
        a.root_cause.as_ref().map(|r| &r.rule),
        b.category,
        b.root_cause.as_ref().map(|r| &r.rule),
        b.findings.len()
    );
    let team_hits = b
        .findings
        .iter()
        .filter(|f| f.rule.starts_with("team."))
        .count();
    if team_hits == 0 {
        return Err("the team rules found none of the team failures in the log".into());
    }

    let (mut base, mut more) = (Vec::new(), Vec::new());
    for i in 0..runs {
        base.push(mbps(&builtin, &log));
        more.push(mbps(&with_team, &log));
        println!(
            "run {}: built-in {:>7.1} MB/s   +{n_team} team rules {:>7.1} MB/s",
            i + 1,
            base[i],
            more[i]
        );
    }
    let (b, m) = (median(&mut base), median(&mut more));
    let ratio = b / m;
    let pass = ratio <= 2.0;
    println!(
        "\nmedian: built-in {b:.1} MB/s, built-in + {n_team} team rules {m:.1} MB/s; \
         slowdown {ratio:.2}x (target <= 2x): {}",
        if pass { "PASS" } else { "FAIL" }
    );
    Ok(pass)
}

fn mbps(rules: &Ruleset, log: &[u8]) -> f64 {
    let t = Instant::now();
    let c = rules.classify_bytes("-", log);
    let secs = t.elapsed().as_secs_f64();
    std::hint::black_box(c);
    log.len() as f64 / 1e6 / secs
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

// ───────────────────────────── team rules ─────────────────────────────

const COMPONENTS: [&str; 10] = [
    "FlashAttn",
    "FusedAdam",
    "RingAllGather",
    "PagedKV",
    "MoeRouter",
    "QuantMatmul",
    "RotaryEmb",
    "LayerNormFwd",
    "TopKSampler",
    "SparseConv",
];
const SNAKE: [&str; 10] = [
    "flash_attn",
    "fused_adam",
    "ring_allgather",
    "paged_kv",
    "moe_router",
    "quant_matmul",
    "rotary_emb",
    "layernorm_fwd",
    "topk_sampler",
    "sparse_conv",
];

/// `n` distinct team rules in four shapes; rule `i` also has a line in the log (see `failure`).
fn team_rules(n: usize) -> Vec<RuleSpec> {
    (0..n)
        .map(|i| {
            let (camel, snake) = (COMPONENTS[i % 10], SNAKE[i % 10]);
            let (pattern, example) = match i % 4 {
                0 => (
                    format!(r"{camel}Kernel{i} failed: code (?P<code>\d+)"),
                    format!("{camel}Kernel{i} failed: code 700"),
                ),
                1 => (
                    format!(r"\[{snake}_{i}\] CUDA launch error: (?P<err>\w+)"),
                    format!("[{snake}_{i}] CUDA launch error: cudaErrorLaunchOutOfResources"),
                ),
                2 => (
                    format!(r"{snake}_op_{i}\(\) returned status (?P<status>-?\d+)"),
                    format!("{snake}_op_{i}() returned status -3"),
                ),
                _ => (
                    format!(r"E{i:04} {camel}Error: (?P<what>.+) on rank (?P<rank>\d+)"),
                    format!("E{i:04} {camel}Error: bad tile size on rank 3"),
                ),
            };
            RuleSpec {
                id: format!("team.gen.{i}"),
                category: Category::ALL[i % 9],
                title: format!("{camel} failure #{i}"),
                source: String::new(),
                pattern,
                specificity: 60 + (i % 30) as u8,
                consequence: false,
                kind: None,
                advice: vec!["See the team runbook for this kernel.".into()],
                examples: vec![example],
                counter_examples: vec![format!("{camel} ready")],
            }
        })
        .collect()
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
}

const PKGS: [&str; 8] = [
    "torch==2.4.0",
    "numpy>=1.24",
    "transformers==4.44.2",
    "accelerate",
    "triton==3.0.0",
    "flash-attn",
    "einops",
    "safetensors",
];
const WORDS: [&str; 6] = [
    "checkpoint",
    "shard",
    "dataloader",
    "tokenizer",
    "optimizer",
    "cache",
];

/// One ordinary line; some name the team's kernels and extensions without failing.
fn noise_line(rng: &mut Rng, out: &mut String) {
    let w = WORDS[rng.below(6) as usize];
    let c = rng.below(10) as usize;
    let k = rng.below(500);
    let _ = match rng.below(12) {
        0 => write!(out, "Collecting {}", PKGS[rng.below(8) as usize]),
        1 => write!(
            out,
            "Requirement already satisfied: {} in /opt/conda/lib/python3.11/site-packages",
            PKGS[rng.below(8) as usize]
        ),
        2 => write!(
            out,
            "[{k}/4096] /usr/local/cuda/bin/nvcc -c csrc/{}_kernel.cu -o build/{}_{k}.o -O3 -gencode arch=compute_90,code=sm_90",
            SNAKE[c], SNAKE[c]
        ),
        3 => write!(
            out,
            "\x1b[32m✓ {w} test_{}_{k} passed\x1b[0m in {:.2}s",
            SNAKE[c],
            rng.unit() * 3.0
        ),
        4 => write!(
            out,
            "step {} | epoch {} | loss {:.4} | lr 3.00e-04 | grad_norm {:.3} | tok/s {}",
            rng.below(200_000),
            rng.below(8),
            rng.unit() * 3.0,
            rng.unit(),
            rng.below(90_000)
        ),
        5 => write!(
            out,
            "{{\"epoch\": {}, \"step\": {}, \"train/loss\": {:.4}, \"gpu_mem_gb\": {:.1}}}",
            rng.below(8),
            rng.below(200_000),
            rng.unit() * 3.0,
            rng.unit() * 80.0
        ),
        6 => write!(
            out,
            "[rank{}]: {w} step {}: loaded {k} samples in {:.1} ms",
            rng.below(8),
            rng.below(200_000),
            rng.unit() * 900.0
        ),
        7 => write!(
            out,
            "[rank{}]: {}Kernel{k} ready ({} blocks, {} threads)",
            rng.below(8),
            COMPONENTS[c],
            rng.below(4096),
            rng.below(1024)
        ),
        8 => write!(
            out,
            "[{}_{k}] launch ok in {:.3} ms",
            SNAKE[c],
            rng.unit() * 5.0
        ),
        9 => write!(out, "{}_op_{k}() done in {} us", SNAKE[c], rng.below(900)),
        10 => write!(
            out,
            "I{k:04} {}: tile size {} on rank {}",
            COMPONENTS[c],
            rng.below(256),
            rng.below(8)
        ),
        _ => tqdm(rng, out),
    };
}

fn tqdm(rng: &mut Rng, out: &mut String) -> std::fmt::Result {
    let redraws = 2 + rng.below(30);
    for i in 0..redraws {
        let done = (i + 1) * 1000 / redraws;
        let bar = "█".repeat((done / 100) as usize);
        let sep = if i == 0 { "" } else { "\r" };
        write!(
            out,
            "{sep}Epoch {}: {:>3}%|{bar:<10}| {done}/1000 [{:.2}it/s]",
            rng.below(20),
            done / 10,
            4.0 + rng.unit() * 2.0
        )?;
    }
    Ok(())
}

/// A real failure of team rule `i` (see `team_rules`).
fn failure(i: u64) -> String {
    let (camel, snake) = (COMPONENTS[(i % 10) as usize], SNAKE[(i % 10) as usize]);
    match i % 4 {
        0 => format!("{camel}Kernel{i} failed: code 719"),
        1 => format!("[{snake}_{i}] CUDA launch error: cudaErrorIllegalAddress"),
        2 => format!("{snake}_op_{i}() returned status -7"),
        _ => format!("E{i:04} {camel}Error: misaligned tile on rank 5"),
    }
}

const TAIL: &str = "/opt/conda/conda-bld/pytorch/work/aten/src/ATen/native/cuda/Indexing.cu:1231: indexSelectSmallIndex: block: [0,0,0], thread: [1,0,0] Assertion `srcIndex < srcSelectDimSize` failed.
Traceback (most recent call last):
  File \"/workspace/train.py\", line 412, in <module>
RuntimeError: CUDA error: device-side assert triggered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
##[error]Process completed with exit code 1.";

/// About `target` bytes of timestamped CI log.
fn generate(target: u64) -> Vec<u8> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut out = String::with_capacity(target as usize + 4096);
    let mut body = String::new();
    let mut ticks = 129_897_333_793u64;
    let mut n = 0u64;
    while (out.len() as u64) + 2_000 < target {
        body.clear();
        n += 1;
        // One team failure per 50k lines: rare, as real failures are.
        if n % 50_000 == 1_000 {
            body.push_str(&failure(rng.below(500)));
        } else {
            noise_line(&mut rng, &mut body);
        }
        ticks += rng.below(200_000);
        let secs = ticks / 10_000_000;
        let _ = writeln!(
            out,
            "2026-07-30T{:02}:{:02}:{:02}.{:07}Z {body}",
            secs / 3600 % 24,
            secs / 60 % 60,
            secs % 60,
            ticks % 10_000_000
        );
    }
    out.push_str(TAIL);
    out.push('\n');
    out.into_bytes()
}
