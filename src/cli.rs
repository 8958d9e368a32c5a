//! The command line (clap derive): one binary, one subcommand per job.

use clap::{Parser, Subcommand};

use crate::config::{DatabaseArgs, ServeArgs};

/// gpu-triage: tells ML teams why their GPU job crashed.
#[derive(Debug, Parser)]
#[command(name = "gpu-triage", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the web portal and API.
    Serve(ServeArgs),
    /// Apply database migrations and exit.
    Migrate(DatabaseArgs),
}
