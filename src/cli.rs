//! The command line (clap derive): one binary, one subcommand per job.

use clap::{Parser, Subcommand};

use crate::auth::Scope;
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
    /// Create, list or revoke API tokens.
    #[command(subcommand)]
    Token(TokenCommand),
}

/// `gpu-triage token ...`
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token and print it once.
    Create {
        /// What the token may do (repeat or comma-separate for several): ingest, read, worker, admin.
        #[arg(long, required = true, value_delimiter = ',')]
        scope: Vec<Scope>,
        /// Who or what uses the token (shown in listings and on recorded fixes).
        #[arg(long)]
        name: String,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// List tokens (never their secrets).
    List {
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Revoke a token by id, prefix (gtr_xxxxxxxx) or name.
    Revoke {
        /// The token's id, prefix or name.
        token: String,
        #[command(flatten)]
        database: DatabaseArgs,
    },
}
