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
    Serve(Box<ServeArgs>),
    /// Apply database migrations and exit.
    Migrate(DatabaseArgs),
    /// Create, list or revoke API tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Classify crash logs (files, or stdin with `-` or no argument).
    Classify(ClassifyArgs),
    /// Measure the ruleset on a labelled corpus (labels.csv + cases/*.log).
    Eval(EvalArgs),
    /// Validate rulesets.
    #[command(subcommand)]
    Rules(RulesCommand),
    /// Upload crash logs from CI to a gpu-triage server.
    Upload(crate::commands::upload::UploadArgs),
    /// Run scripts of reports on this host's GPU, sandboxed, and report back (reproduction agent).
    Worker(crate::commands::worker::WorkerArgs),
    /// Apply retention: delete raw logs and reports past their time.
    #[command(subcommand)]
    Retention(RetentionCommand),
}

/// `gpu-triage retention ...`
#[derive(Debug, Subcommand)]
pub enum RetentionCommand {
    /// Run one retention pass now (what `serve` runs every --retention-interval-secs) and print
    /// what it removed. Takes the same defaults as `serve`; per-project settings come from the
    /// database.
    Run {
        #[command(flatten)]
        retention: crate::config::RetentionArgs,
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

/// Output format of `classify`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// One JSON object per input, one per line (DESIGN.md section 3).
    Json,
    /// A short human summary.
    Text,
}

/// `gpu-triage classify`
#[derive(Debug, clap::Args)]
pub struct ClassifyArgs {
    /// Output format.
    #[arg(long, value_enum, default_value = "json")]
    pub format: OutputFormat,
    /// Use this TOML ruleset instead of the built-in one.
    #[arg(long, value_name = "FILE")]
    pub rules: Option<std::path::PathBuf>,
    /// Log files; `-` or nothing reads stdin.
    #[arg(value_name = "FILE")]
    pub inputs: Vec<String>,
}

/// `gpu-triage eval`
#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// Corpus directory with labels.csv, cases/*.log and optionally evidence.csv.
    pub dir: std::path::PathBuf,
    /// Use this TOML ruleset instead of the built-in one.
    #[arg(long, value_name = "FILE")]
    pub rules: Option<std::path::PathBuf>,
    /// List every miss.
    #[arg(long, short)]
    pub verbose: bool,
}

/// `gpu-triage rules ...`
#[derive(Debug, Subcommand)]
pub enum RulesCommand {
    /// Check a ruleset: patterns compile within limits, examples match, counter-examples do
    /// not. Without FILE, checks the built-in ruleset.
    Check {
        /// A TOML ruleset.
        file: Option<std::path::PathBuf>,
    },
    /// Print the team rules stored in the database as TOML (builtin.toml's format, plus a
    /// `disabled` list when entries are disabled).
    Export {
        /// Write to this file instead of stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<std::path::PathBuf>,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Replace the stored team rules with those of FILE (as written by `rules export`); every
    /// rule is validated before anything is written.
    Import {
        /// A TOML file of team rules.
        file: std::path::PathBuf,
        #[command(flatten)]
        database: DatabaseArgs,
    },
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
        /// Days until the token stops working (1 to 3650; default: it never expires).
        #[arg(long)]
        expires_in_days: Option<u32>,
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

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::{Cli, Command};

    #[test]
    fn the_command_line_is_well_formed() {
        // Duplicate argument ids across flattened settings panic only when parsed.
        Cli::command().debug_assert();
    }

    #[test]
    fn webhook_flags_give_delivery_settings() {
        use std::time::Duration;
        let parse = |args: &[&str]| match Cli::try_parse_from(args).map(|c| c.command) {
            Ok(Command::Serve(s)) => Some(s.webhooks.settings()),
            _ => None,
        };
        let default = parse(&["gpu-triage", "serve"]).expect("serve parses");
        assert!(!default.allow_private);
        assert_eq!(default.max_attempts(), 6);
        assert_eq!(default.backoff[2], Duration::from_secs(120));
        let set = parse(&[
            "gpu-triage",
            "serve",
            "--webhook-allow-private",
            "--webhook-backoff",
            "1,2",
            "--webhook-timeout-secs",
            "3",
        ])
        .expect("flags parse");
        assert!(set.allow_private);
        assert_eq!(
            set.backoff,
            [Duration::from_secs(1), Duration::from_secs(2)]
        );
        assert_eq!(set.timeout, Duration::from_secs(3));
        assert!(parse(&["gpu-triage", "serve", "--webhook-backoff", "0"]).is_none());
    }

    #[test]
    fn retention_flags_give_retention_settings() {
        use std::time::Duration;
        let parse = |args: &[&str]| match Cli::try_parse_from(args).map(|c| c.command) {
            Ok(Command::Serve(s)) => Some(s.retention.settings()),
            _ => None,
        };
        let default = parse(&["gpu-triage", "serve"]).expect("serve parses");
        assert_eq!(
            (default.defaults.log_days, default.defaults.report_days),
            (0, 0)
        );
        assert_eq!(default.interval, Duration::from_secs(3600));
        assert_eq!(default.batch, 500);
        let set = parse(&[
            "gpu-triage",
            "serve",
            "--log-retention-days",
            "30",
            "--report-retention-days",
            "365",
            "--retention-interval-secs",
            "60",
            "--retention-batch",
            "100",
        ])
        .expect("flags parse");
        assert_eq!((set.defaults.log_days, set.defaults.report_days), (30, 365));
        assert_eq!(set.interval, Duration::from_secs(60));
        assert_eq!(set.batch, 100);
        for bad in [
            ["--log-retention-days", "-1"],
            ["--report-retention-days", "36501"],
            ["--retention-batch", "0"],
            ["--retention-interval-secs", "soon"],
        ] {
            let args = ["gpu-triage", "serve", bad[0], bad[1]];
            assert!(parse(&args).is_none(), "{bad:?}");
        }
        match Cli::try_parse_from([
            "gpu-triage",
            "retention",
            "run",
            "--report-retention-days",
            "7",
        ])
        .map(|c| c.command)
        {
            Ok(Command::Retention(super::RetentionCommand::Run { retention, .. })) => {
                assert_eq!(retention.settings().defaults.report_days, 7);
            }
            other => panic!("retention run parses: {other:?}"),
        }
    }
}
