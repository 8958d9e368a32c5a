//! `gpu-triage worker`: the GPU reproduction agent's command line (DESIGN.md section 7). It
//! checks everything it can before the first claim (token, server URL, the GPU, the sandbox
//! self-test) and refuses to start with one clear message when something is missing; the loop
//! itself lives in `crate::worker`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use super::BadInput;
use crate::worker::client::Client;
use crate::worker::sandbox::SandboxLauncher;
use crate::worker::{self, Config, probe};

/// `gpu-triage worker`
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// Server base URL.
    #[arg(long, env = "GPU_TRIAGE_URL", default_value = "http://127.0.0.1:8080")]
    pub server: String,
    /// API token with the `worker` scope.
    #[arg(long, env = "GPU_TRIAGE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The Python interpreter scripts run with (a path, or a name looked up on PATH). It must be
    /// readable by uid 65534 when the worker runs as root.
    #[arg(long, value_name = "PATH", default_value = "python3")]
    pub python: PathBuf,
    /// The CUDA device (ordinal) scripts run on.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub gpu: u32,
    /// Upper bound in seconds on a run's wall-clock time (a job's own limit applies when lower).
    #[arg(long, value_name = "SECS", default_value_t = 600,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: u64,
    /// Run jobs without a GPU (CPU-reproducible failures, testing); results are marked so.
    #[arg(long)]
    pub no_gpu: bool,
    /// Without a GPU, run scripts under CPU translation: unchanged, with CUDA redirected to the
    /// CPU (a torch function mode loaded before the script), where PyTorch checks indices
    /// synchronously and names the bad value at the true line. `off` runs them as they are.
    #[arg(long, value_enum, default_value_t = CpuTranslation::Auto)]
    pub cpu_translation: CpuTranslation,
    /// Handle at most one job, then exit (0 also when none was queued).
    #[arg(long)]
    pub once: bool,
    /// Run scripts without the bubblewrap sandbox, as the worker's own user. The server records
    /// and shows it. Only for trusted scripts on a disposable machine.
    #[arg(long)]
    pub unsafe_no_sandbox: bool,
    /// Print the GPU probe as JSON and exit (0 with a GPU, 1 without).
    #[arg(long)]
    pub probe_only: bool,
    /// Bytes kept of a run's stdout and of its stderr, each.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20,
          value_parser = clap::value_parser!(u64).range(1..=(2 << 20)))]
    pub output_cap: u64,
    /// Most processes (and threads) the sandbox user may have (RLIMIT_NPROC via prlimit).
    #[arg(long, value_name = "N", default_value_t = 4096,
          value_parser = clap::value_parser!(u32).range(16..))]
    pub max_procs: u32,
    /// Memory a run may use, in MiB, enforced through a memory cgroup where the worker may
    /// create one (cgroup v1 as root, or a delegated cgroup v2 subtree); 0 turns it off.
    /// Default: 80% of this machine's memory.
    #[arg(long, value_name = "MIB")]
    pub memory_max: Option<u64>,
    /// Name shown in the portal (default: hostname:pid).
    #[arg(long)]
    pub name: Option<String>,
}

/// The memory cgroup and limit for runs, or `None` (said in the log) where there is none.
fn memory_limit(
    memory_max: Option<u64>,
    unsandboxed: bool,
) -> Option<(worker::cgroup::ParentCgroup, u64)> {
    let limit = match memory_max {
        Some(0) => {
            tracing::info!("--memory-max 0: runs have no memory limit");
            return None;
        }
        Some(mib) => mib.saturating_mul(1 << 20),
        None => physical_memory()? / 5 * 4,
    };
    if unsandboxed {
        tracing::warn!("--unsafe-no-sandbox: runs have no memory limit");
        return None;
    }
    match worker::cgroup::detect() {
        Ok(memory) => {
            tracing::info!(
                "runs are limited to {} MiB of memory ({})",
                limit >> 20,
                memory.describe()
            );
            Some((memory, limit))
        }
        Err(why) => {
            tracing::warn!("runs have no memory limit: {why}");
            None
        }
    }
}

/// `MemTotal` from `/proc/meminfo`, in bytes.
fn physical_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Runs the command.
pub fn run(args: WorkerArgs) -> anyhow::Result<()> {
    if args.probe_only {
        let gpu = probe::probe(args.gpu)?;
        println!("{}", serde_json::to_string(&gpu)?);
        return Ok(());
    }
    let token = args.token.as_deref().map(str::trim).unwrap_or_default();
    if token.is_empty() {
        return Err(BadInput("no API token: pass --token or set GPU_TRIAGE_TOKEN".into()).into());
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(BadInput("the API token has characters a header cannot carry".into()).into());
    }
    let server = super::upload::server_base(&args.server)?;
    let gpu = if args.no_gpu {
        tracing::info!("--no-gpu: jobs run without a GPU and their results say so");
        None
    } else {
        let gpu = probe::probe(args.gpu).map_err(|e| {
            anyhow::anyhow!(
                "{e}; this worker will not claim GPU jobs (pass --no-gpu to run jobs without a GPU)"
            )
        })?;
        tracing::info!(
            "GPU {}: {}, {} MiB, compute capability {}, driver CUDA {}",
            gpu.index,
            gpu.name,
            gpu.total_memory_bytes >> 20,
            gpu.compute_capability,
            gpu.driver_version
        );
        Some(gpu)
    };
    let sandbox = SandboxLauncher::new(
        &args.python,
        gpu.as_ref().map(|g| g.index),
        args.max_procs,
        args.unsafe_no_sandbox,
    )
    .context("refusing to start (pass --unsafe-no-sandbox to run scripts without isolation)")?;
    let minor = gpu
        .as_ref()
        .and_then(|g| g.pci_bus_id.as_deref())
        .and_then(|pci| probe::device_minor(std::path::Path::new("/proc/driver/nvidia/gpus"), pci));
    if gpu.is_some() && minor.is_none() {
        tracing::warn!(
            "could not tell which /dev/nvidiaN is this GPU; scripts see every GPU's device node"
        );
    }
    let sandbox = sandbox
        .with_gpu_minor(minor)
        .with_memory_limit(memory_limit(args.memory_max, args.unsafe_no_sandbox));
    if args.unsafe_no_sandbox {
        tracing::warn!(
            "--unsafe-no-sandbox: scripts run unisolated as this user; results say sandbox \"none\""
        );
    } else {
        sandbox.self_test().context(
            "refusing to start (pass --unsafe-no-sandbox to run scripts without isolation)",
        )?;
        if !sandbox.limits_processes() {
            tracing::warn!("prlimit (util-linux) not found: scripts run without a process limit");
        }
        tracing::info!("sandbox self-test passed (bubblewrap)");
    }
    let config = Config {
        worker_name: args
            .name
            .map(|n| n.chars().take(200).collect())
            .unwrap_or_else(worker::default_worker_name),
        gpu,
        max_timeout: Duration::from_secs(args.timeout),
        output_cap: usize::try_from(args.output_cap).unwrap_or(1 << 20),
        once: args.once,
        cpu_translation: args.cpu_translation == CpuTranslation::Auto,
        interpreter: std::sync::OnceLock::new(),
    };
    tracing::info!(
        "worker {} claiming jobs from {server} with {}",
        config.worker_name,
        sandbox.python().display()
    );
    let client = Client::new(server, token.to_owned());
    worker::work(&client, &sandbox, &config)
}

/// `worker --cpu-translation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CpuTranslation {
    /// On a worker without a GPU.
    Auto,
    /// Never: scripts run as they are.
    Off,
}
