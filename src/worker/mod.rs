//! The GPU reproduction agent (DESIGN.md section 7): claims jobs from the server over HTTP,
//! runs each script in the sandbox under `CUDA_LAUNCH_BLOCKING=1`, keeps the lease alive while
//! it runs, and posts what happened. The loop is thin; the parts live in `probe` (the GPU),
//! `sandbox` (isolation), `run` (process control and output caps), `client` (the wire contract)
//! and `job` (one job from claim to posted result).

pub mod cgroup;
pub mod client;
pub mod interpreter;
mod job;
pub mod probe;
pub mod run;
pub mod sandbox;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use anyhow::Context;

use client::{ClaimRequest, Client, Reply};
use sandbox::SandboxLauncher;

/// Long-poll length of a claim.
const CLAIM_WAIT_SECS: u64 = 20;
/// Longest pause between claims when the server is unreachable.
const MAX_CLAIM_BACKOFF: Duration = Duration::from_secs(30);
/// With `--once`, how many transient claim failures in a row end the run.
const ONCE_CLAIM_ATTEMPTS: u32 = 5;

/// Everything the loop needs besides the server and the sandbox.
#[derive(Debug, Clone)]
pub struct Config {
    /// Shown in the portal.
    pub worker_name: String,
    /// The probed GPU; `None` with `--no-gpu`.
    pub gpu: Option<probe::GpuInfo>,
    /// Upper bound on any job's wall-clock limit.
    pub max_timeout: Duration,
    /// Bytes kept of stdout and of stderr, each.
    pub output_cap: usize,
    /// Handle at most one job, then exit.
    pub once: bool,
    /// Without a GPU, run scripts under CPU translation ([`sandbox::Launch::CpuTranslation`]).
    pub cpu_translation: bool,
    /// The interpreter's versions and build, asked before the first job runs (not at start:
    /// an idle worker runs nothing).
    pub interpreter: std::sync::OnceLock<Option<crate::api_types::RunEnvironment>>,
}

/// Shared between the loop and the signal thread: whether a job is running, and the flags a
/// signal sets.
#[derive(Default)]
pub struct Control {
    busy: Mutex<bool>,
    stopping: AtomicBool,
    abandon: Arc<AtomicBool>,
}

impl Control {
    /// First signal: exit at once when idle (nothing to lose: an in-flight claim that was
    /// granted is requeued when its lease expires), else finish the job and stop. Second
    /// signal: abandon the job (kill it and report the attempt as failed).
    fn on_signal(&self, name: &str) {
        let busy = self.busy.lock().map(|b| *b).unwrap_or(true);
        if !busy {
            tracing::info!("{name}: no job running, worker stopped");
            std::process::exit(0);
        }
        if self.stopping.swap(true, Ordering::SeqCst) {
            tracing::warn!("{name} again: abandoning the running job");
            self.abandon.store(true, Ordering::SeqCst);
        } else {
            tracing::warn!(
                "{name}: finishing the running job, then stopping (send it again to abandon the job)"
            );
        }
    }

    fn set_busy(&self, busy: bool) {
        if let Ok(mut b) = self.busy.lock() {
            *b = busy;
        }
    }
}

/// Runs the claim loop until `--once` is satisfied or a signal stops it.
pub fn work(client: &Client, sandbox: &SandboxLauncher, config: &Config) -> anyhow::Result<()> {
    let control = Arc::new(Control::default());
    watch_signals(Arc::clone(&control))?;
    let mut failures = 0u32;
    loop {
        if control.stopping.load(Ordering::SeqCst) {
            tracing::info!("worker stopped");
            return Ok(());
        }
        let request = ClaimRequest {
            worker: config.worker_name.clone(),
            wait_secs: CLAIM_WAIT_SECS,
            gpu: config
                .gpu
                .as_ref()
                .and_then(|g| serde_json::to_value(g).ok()),
            no_gpu: config.gpu.is_none(),
            sandbox: sandbox.kind().into(),
        };
        let job = match client.claim(&request) {
            Reply::Ok(job) => job,
            Reply::Empty if config.once => {
                println!("no job was queued; nothing to do (--once)");
                return Ok(());
            }
            Reply::Empty => continue,
            Reply::Transient(why, retry_after) => {
                failures += 1;
                if config.once && failures >= ONCE_CLAIM_ATTEMPTS {
                    anyhow::bail!("cannot claim a job: {why}");
                }
                let delay = client::backoff(failures, retry_after, MAX_CLAIM_BACKOFF);
                tracing::warn!(
                    "claim failed ({why}); retrying in {:.1} s",
                    delay.as_secs_f64()
                );
                thread::sleep(delay);
                continue;
            }
            Reply::LeaseLost(why) | Reply::Rejected(why) => {
                anyhow::bail!("the server refused the claim: {why}");
            }
        };
        failures = 0;
        // Everything logged about this job, by this loop, the run and the heartbeat thread,
        // names it and its report.
        let span = tracing::info_span!(
            "job",
            job_id = job.job_id,
            report_id = job.report_id,
            attempt = job.attempt,
        );
        let _in_job = span.enter();
        control.set_busy(true);
        let outcome = job::handle(client, sandbox, config, &job, &control.abandon);
        control.set_busy(false);
        let outcome = outcome.with_context(|| format!("job {}", job.job_id));
        if config.once {
            return outcome;
        }
        // A result that could not be delivered costs that job an attempt (its lease runs out
        // and it is requeued), not the worker: a long-running worker goes on claiming.
        if let Err(e) = outcome {
            tracing::error!("{e:#}; the job will be retried when its lease expires");
        }
    }
}

/// Ctrl-C and SIGTERM go to `control.on_signal` from a small runtime on its own thread.
fn watch_signals(control: Arc<Control>) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .context("signal runtime")?;
    let (mut term, mut int) = runtime
        .block_on(async {
            Ok::<_, std::io::Error>((
                signal(SignalKind::terminate())?,
                signal(SignalKind::interrupt())?,
            ))
        })
        .context("cannot watch SIGTERM and SIGINT")?;
    thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            runtime.block_on(async move {
                loop {
                    let name = tokio::select! {
                        _ = term.recv() => "SIGTERM",
                        _ = int.recv() => "SIGINT",
                    };
                    control.on_signal(name);
                }
            });
        })
        .context("signal thread")?;
    Ok(())
}

/// `hostname:pid`, at most 200 characters.
pub fn default_worker_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".to_owned());
    let mut name = format!("{host}:{}", std::process::id());
    name.truncate(name.floor_char_boundary(200));
    name
}

/// The worker's peak resident memory (VmHWM) in bytes, for the job log line.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
