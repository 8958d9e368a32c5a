//! Entry point: parse the command line, set up logging, run the subcommand.

use std::process::ExitCode;

use clap::Parser;
use gpu_triage::cli::{Cli, Command};
use gpu_triage::commands;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let result = match cli.command {
        Command::Serve(args) => run_async(commands::serve::serve(*args)),
        Command::Migrate(args) => run_async(commands::db::migrate(args)),
        Command::Db(cmd) => run_async(commands::db::run(cmd)),
        Command::Token(cmd) => run_async(commands::token::run(cmd)),
        Command::Classify(args) => commands::classify::run(args),
        Command::Eval(args) => commands::eval::run(args),
        Command::Rules(cmd) => commands::rules::run(cmd),
        Command::Upload(args) => commands::upload::run(args),
        Command::Worker(args) => commands::worker::run(args),
        Command::Retention(cmd) => run_async(commands::retention::run(cmd)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if err.downcast_ref::<commands::BadInput>().is_some() => {
            eprintln!("gpu-triage: {err:#}");
            ExitCode::from(2)
        }
        Err(err) => {
            eprintln!("gpu-triage: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_async(fut: impl Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(fut)
}

/// Logs go to stderr; `GPU_TRIAGE_LOG` (or `RUST_LOG`) sets the filter, default `info`.
fn init_tracing() {
    let filter = std::env::var("GPU_TRIAGE_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "info,sqlx=warn".into());
    gpu_triage::telemetry::init(&filter);
}
