//! One claimed job, from the sandboxed run to the posted result. A heartbeat thread keeps the
//! lease alive for the whole time (the run and the result's retries); when the server says the
//! lease is gone (409) the run is killed and the job dropped, since another worker owns it now.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::Duration;

use super::client::{self, Client, Job, JobResult, Reply};
use super::run::{self, RunLimits};
use super::sandbox::{self, SandboxKind, SandboxLauncher};
use super::{Config, peak_rss_bytes, probe};
use crate::api_types::{CpuRun, MAX_REPEATS, RunEnvironment, RunOutcome, Sandbox};
use crate::rules::outcome::{Decision, Outcome};
use crate::rules::{Category, Ruleset};

/// Result post attempts before giving up.
const RESULT_ATTEMPTS: u32 = 8;
const MAX_RESULT_BACKOFF: Duration = Duration::from_secs(8);
/// Heartbeats go out every quarter lease, at most every 15 s.
const MAX_HEARTBEAT: Duration = Duration::from_secs(15);

/// Runs `job` and reports it. `abandon` is set by a second Ctrl-C/SIGTERM. An error means the
/// result could not be delivered.
pub(super) fn handle(
    client: &Client,
    sandbox: &SandboxLauncher,
    config: &Config,
    job: &Job,
    abandon: &Arc<AtomicBool>,
) -> anyhow::Result<()> {
    tracing::info!(
        "claimed job {} (report {}, attempt {} of {}, {})",
        job.job_id,
        job.report_id,
        job.attempt,
        job.max_attempts,
        job.script_name
    );
    let lease_lost = Arc::new(AtomicBool::new(false));
    let (stop, heartbeat) = start_heartbeat(client.clone(), job.clone(), Arc::clone(&lease_lost));
    let result = execute_all(sandbox, config, job, &|| {
        lease_lost.load(Ordering::SeqCst) || abandon.load(Ordering::SeqCst)
    });
    let delivered = if lease_lost.load(Ordering::SeqCst) {
        tracing::warn!(
            "job {}: the lease was lost; the run was killed and the job dropped",
            job.job_id
        );
        Ok(())
    } else {
        let result = if abandon.load(Ordering::SeqCst) {
            JobResult {
                error: Some("the worker was stopped; the run was abandoned".into()),
                ..result
            }
        } else {
            result
        };
        post_result(client, job, &result, &lease_lost)
    };
    drop(stop);
    let _ = heartbeat.join();
    delivered
}

/// Runs the script as many times as the job asks (each run in a fresh sandbox), then, after a
/// GPU failure worth it, once more on the CPU. The result carries the first failing run's
/// output (else the last run's) and, with repeats, every run's outcome.
fn execute_all(
    sandbox: &SandboxLauncher,
    config: &Config,
    job: &Job,
    cancel: &dyn Fn() -> bool,
) -> JobResult {
    let repeats = job.repeats.clamp(1, MAX_REPEATS);
    let outcome = |r: &JobResult| RunOutcome {
        exit_code: r.exit_code,
        signal: r.signal,
        timed_out: r.timed_out,
        duration_ms: r.duration_ms,
        failing_line: failing_line(r),
        outcome: Some(decide(r).outcome),
    };
    // The output sent is the first failing run's, else the last run's.
    let mut result = execute(sandbox, config, job, cancel);
    let mut runs = vec![outcome(&result)];
    for n in 2..=repeats {
        if result.error.is_some() || cancel() {
            break;
        }
        let next = execute(sandbox, config, job, cancel);
        if next.error.is_some() {
            return next; // A worker-side failure ends the attempt.
        }
        let this = outcome(&next);
        tracing::info!(
            "job {}: run {n} of {repeats} {}",
            job.job_id,
            if this.failed() { "failed" } else { "passed" }
        );
        let keep = !runs.iter().any(RunOutcome::failed) && (this.failed() || n == repeats);
        runs.push(this);
        if keep {
            result = next;
        }
    }
    if result.error.is_some() || cancel() {
        return result; // A worker-side failure or a stop ends the attempt.
    }
    if repeats > 1 {
        result.runs = runs;
    }
    // Said where the worker's operator looks: a run its environment stopped shows nothing.
    let decided = decide(&result);
    if decided.outcome == Outcome::EnvironmentError {
        tracing::warn!(
            "job {}: environment error: {}. {}",
            job.job_id,
            decided.reason,
            decided.fix
        );
    }
    result.cpu = cpu_follow_up(sandbox, config, job, limits(config, job), cancel, &result);
    result
}

/// Cuts `text` to at most `cap` bytes at a character boundary; whether it cut. The sandbox's
/// start-marker allowance is not the script's: its stderr keeps the same cap as its stdout.
fn cut_to(text: &mut String, cap: usize) -> bool {
    if text.len() <= cap {
        return false;
    }
    text.truncate(text.floor_char_boundary(cap));
    true
}

/// What a run showed (the same decision the server makes for the run it stores).
fn decide(result: &JobResult) -> Decision {
    let output = format!("{}\n{}", result.stderr, result.stdout);
    crate::rules::outcome::of_output(result.exit_code, result.signal, result.timed_out, &output)
}

/// The user's failing line of a run (`repro.py:13`), from its traceback.
fn failing_line(result: &JobResult) -> Option<String> {
    let output = format!("{}\n{}", result.stderr, result.stdout);
    let tb = crate::ingest::traceback::parse(&output)
        .into_iter()
        .rev()
        .find(|tb| !tb.frames.is_empty())?;
    let frame = crate::ingest::traceback::user_frame(&tb)?;
    let file = frame.file.rsplit(['/', '\\']).next().unwrap_or(&frame.file);
    Some(format!("{file}:{}", frame.line))
}

/// What a run launched as `launch` runs on: the interpreter's facts and the device.
fn environment(
    sandbox: &SandboxLauncher,
    config: &Config,
    launch: sandbox::Launch,
) -> Option<RunEnvironment> {
    let mut env = config
        .interpreter
        .get_or_init(|| super::interpreter::facts(sandbox))
        .clone()?;
    env.device = match (&config.gpu, launch) {
        (Some(g), sandbox::Launch::Script) => format!("{}, sm {}", g.name, g.compute_capability),
        _ => "cpu".into(),
    };
    Some(env)
}

/// The limits of one run of `job`.
fn limits(config: &Config, job: &Job) -> RunLimits {
    let timeout = match job.timeout_secs {
        0 => config.max_timeout,
        secs => Duration::from_secs(u64::from(secs)).min(config.max_timeout),
    };
    RunLimits {
        timeout,
        output_cap: config.output_cap,
        // The sandbox's start marker line, stripped before the result is sent.
        stderr_extra: 128,
    }
}

/// Runs the script once and builds the result (a worker-side failure goes into `error`).
fn execute(
    sandbox: &SandboxLauncher,
    config: &Config,
    job: &Job,
    cancel: &dyn Fn() -> bool,
) -> JobResult {
    let limits = limits(config, job);
    let sandboxed = sandbox.kind() == SandboxKind::Bwrap;
    let launch = if config.gpu.is_none() && config.cpu_translation {
        sandbox::Launch::CpuTranslation
    } else {
        sandbox::Launch::Script
    };
    let mut result = JobResult {
        lease_token: job.lease_token.clone(),
        exit_code: None,
        signal: None,
        timed_out: false,
        duration_ms: 0,
        stdout: String::new(),
        stderr: String::new(),
        truncated: false,
        gpu: None,
        no_gpu: config.gpu.is_none(),
        cpu_translation: launch == sandbox::Launch::CpuTranslation,
        cpu: None,
        runs: Vec::new(),
        environment: environment(sandbox, config, launch),
        sandbox: Sandbox::from(sandbox.kind()),
        error: None,
        worker: None,
    };
    let outcome = sandbox
        .prepare(&job.script_name, &job.script, launch)
        .map_err(|e| e.to_string())
        .and_then(|prepared| {
            let marker = prepared.started_marker;
            run::run(prepared.command, limits, cancel, prepared.gate)
                .map(|out| (out, marker))
                .map_err(|e| e.to_string())
        });
    result.gpu = reprobe(config).and_then(|g| serde_json::to_value(g).ok());
    let (mut out, marker) = match outcome {
        Ok(done) => done,
        Err(e) => {
            tracing::error!("job {}: the run could not start: {e}", job.job_id);
            result.error = Some(format!("the run could not start: {e}"));
            return result;
        }
    };
    let (exit_code, signal) = run::code_and_signal(out.status, sandboxed);
    result.exit_code = exit_code;
    result.signal = signal;
    result.timed_out = out.timed_out;
    result.duration_ms = u64::try_from(out.duration.as_millis()).unwrap_or(u64::MAX);
    result.truncated = out.stdout.truncated || out.stderr.truncated;
    // bubblewrap's own failures (bad bind, interpreter missing) come before the start
    // marker; a script printing the same words comes after it.
    if let Some(m) = marker.as_deref()
        && let Some(why) = sandbox::sandbox_failure(&mut out.stderr.text, m, exit_code)
    {
        result.error = Some(format!("the sandbox could not start the script: {why}"));
    }
    // Said where the user reads the traceback; the kernel's kill leaves no message of its own.
    let oom_note = out.oom_limit.map(|limit| {
        format!(
            "\ngpu-triage: the run was killed at its memory limit ({} MiB; worker --memory-max)\n",
            limit >> 20
        )
    });
    let room = config
        .output_cap
        .saturating_sub(oom_note.as_ref().map_or(0, String::len));
    // The allowance for the marker is not the script's: its stderr keeps the same cap.
    if cut_to(&mut out.stderr.text, room) {
        result.truncated = true;
    }
    if let Some(note) = oom_note {
        out.stderr.text.push_str(&note);
    }
    result.stdout = out.stdout.text;
    result.stderr = out.stderr.text;
    let rss = peak_rss_bytes().map_or("?".into(), |b| format!("{}", b >> 20));
    tracing::info!(
        "job {}: exit code {:?}, signal {:?}, timed out {}, {} ms, stdout {} B, stderr {} B, \
         truncated {}; worker peak RSS {rss} MiB",
        job.job_id,
        result.exit_code,
        result.signal,
        result.timed_out,
        result.duration_ms,
        result.stdout.len(),
        result.stderr.len(),
        result.truncated,
    );
    result
}

/// After a GPU run that ended in a device-side assert or an illegal memory access, the same
/// script again under CPU translation: on the CPU PyTorch checks indices synchronously and names
/// the bad value at the true line, the best next step for such a failure.
fn cpu_follow_up(
    sandbox: &SandboxLauncher,
    config: &Config,
    job: &Job,
    limits: RunLimits,
    cancel: &dyn Fn() -> bool,
    first: &JobResult,
) -> Option<CpuRun> {
    if config.gpu.is_none() || !config.cpu_translation || first.error.is_some() || cancel() {
        return None;
    }
    let ruleset = Ruleset::builtin()
        .inspect_err(|e| tracing::warn!("the built-in ruleset does not compile: {e}"))
        .ok()?;
    let output = format!("{}\n{}", first.stderr, first.stdout);
    let category = ruleset.classify_bytes("run", output.as_bytes()).category;
    if !matches!(
        category,
        Category::OutOfBounds | Category::IllegalMemoryAccess
    ) {
        return None;
    }
    tracing::info!(
        "job {}: {} on the GPU; running the script again under CPU translation",
        job.job_id,
        category.as_str()
    );
    let ran = sandbox
        .prepare(
            &job.script_name,
            &job.script,
            sandbox::Launch::CpuTranslation,
        )
        .map_err(|e| e.to_string())
        .and_then(|prepared| {
            let marker = prepared.started_marker;
            run::run(prepared.command, limits, cancel, prepared.gate)
                .map(|out| (out, marker))
                .map_err(|e| e.to_string())
        });
    let (mut out, marker) = match ran {
        Ok(done) => done,
        Err(e) => {
            tracing::warn!("job {}: the CPU run could not start: {e}", job.job_id);
            return None;
        }
    };
    let (exit_code, signal) =
        run::code_and_signal(out.status, sandbox.kind() == SandboxKind::Bwrap);
    if let Some(m) = marker.as_deref()
        && let Some(why) = sandbox::sandbox_failure(&mut out.stderr.text, m, exit_code)
    {
        tracing::warn!("job {}: the CPU run did not start: {why}", job.job_id);
        return None;
    }
    let mut truncated = out.stdout.truncated || out.stderr.truncated;
    if cut_to(&mut out.stderr.text, config.output_cap) {
        truncated = true;
    }
    Some(CpuRun {
        exit_code,
        signal,
        timed_out: out.timed_out,
        duration_ms: u64::try_from(out.duration.as_millis()).unwrap_or(u64::MAX),
        stdout: out.stdout.text,
        stderr: out.stderr.text,
        truncated,
        classification: None,
        outcome: None,
    })
}

/// The GPU facts sent with a result: probed again (DESIGN.md section 7), else those of start.
fn reprobe(config: &Config) -> Option<probe::GpuInfo> {
    let gpu = config.gpu.as_ref()?;
    match probe::probe(gpu.index) {
        Ok(now) => Some(now),
        Err(e) => {
            tracing::warn!("GPU probe after the run failed ({e}); sending the facts of start");
            Some(gpu.clone())
        }
    }
}

/// Posts the result, retrying transient failures with backoff while the heartbeat keeps the
/// lease. The server records a repeated post of the same lease once.
fn post_result(
    client: &Client,
    job: &Job,
    result: &JobResult,
    lease_lost: &AtomicBool,
) -> anyhow::Result<()> {
    for attempt in 1..=RESULT_ATTEMPTS {
        match client.result(job.job_id, result) {
            Reply::Ok(reply) => {
                let state = reply.get("state").and_then(|s| s.as_str()).unwrap_or("?");
                tracing::info!("job {}: result recorded (state {state})", job.job_id);
                return Ok(());
            }
            Reply::Empty => {
                tracing::info!("job {}: result recorded", job.job_id);
                return Ok(());
            }
            Reply::LeaseLost(why) => {
                tracing::warn!("job {}: result refused, lease lost ({why})", job.job_id);
                return Ok(());
            }
            Reply::Rejected(why) => anyhow::bail!("the server rejected the result: {why}"),
            Reply::Transient(why, _) if attempt == RESULT_ATTEMPTS => {
                anyhow::bail!("the result could not be posted after {attempt} attempts: {why}")
            }
            Reply::Transient(why, retry_after) => {
                if lease_lost.load(Ordering::SeqCst) {
                    tracing::warn!("job {}: lease lost while posting the result", job.job_id);
                    return Ok(());
                }
                let delay = client::backoff(attempt, retry_after, MAX_RESULT_BACKOFF);
                tracing::warn!(
                    "job {}: posting the result failed ({why}); attempt {} of {RESULT_ATTEMPTS} in {:.1} s",
                    job.job_id,
                    attempt + 1,
                    delay.as_secs_f64()
                );
                thread::sleep(delay);
            }
        }
    }
    Ok(())
}

/// Heartbeats every quarter lease until the returned sender is dropped; sets `lease_lost` on
/// 409/404. Transient failures are logged and retried at the next beat.
fn start_heartbeat(
    client: Client,
    job: Job,
    lease_lost: Arc<AtomicBool>,
) -> (mpsc::Sender<()>, thread::JoinHandle<()>) {
    let (stop, stopped) = mpsc::channel::<()>();
    let interval = |lease_secs: u32| {
        Duration::from_secs(u64::from(lease_secs) / 4).clamp(Duration::from_secs(1), MAX_HEARTBEAT)
    };
    // The heartbeat's warnings belong to the job's span, like the run's.
    let span = tracing::Span::current();
    let handle = thread::spawn(move || {
        let _in_job = span.enter();
        let mut every = interval(job.lease_secs);
        loop {
            match stopped.recv_timeout(every) {
                Err(RecvTimeoutError::Timeout) => {}
                _ => return,
            }
            match client.heartbeat(&job) {
                Reply::Ok(beat) => every = interval(beat.lease_secs),
                Reply::Empty => {}
                Reply::LeaseLost(why) => {
                    tracing::warn!("job {}: heartbeat refused, lease lost ({why})", job.job_id);
                    lease_lost.store(true, Ordering::SeqCst);
                    return;
                }
                Reply::Transient(why, _) | Reply::Rejected(why) => {
                    tracing::warn!("job {}: heartbeat failed: {why}", job.job_id);
                }
            }
        }
    });
    (stop, handle)
}
