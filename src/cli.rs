//! The command line (clap derive): one binary, one subcommand per job. Each subcommand's
//! arguments are declared beside its body in `commands/`, so this file only assembles them and
//! nothing below it imports it back.

use clap::{Parser, Subcommand};

use crate::commands::classify::ClassifyArgs;
use crate::commands::eval::EvalArgs;
use crate::commands::retention::RetentionCommand;
use crate::commands::rules::RulesCommand;
use crate::commands::token::TokenCommand;
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
    /// Maintain the stored data (move raw logs between PostgreSQL and an object store).
    #[command(subcommand)]
    Db(crate::commands::db::DbCommand),
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
    fn oidc_default_role_flags_give_the_default_role_and_its_domains() {
        use crate::roles::PersonRole;
        let parse = |args: &[&str]| match Cli::try_parse_from(args).map(|c| c.command) {
            Ok(Command::Serve(s)) => Some(s.oidc.settings("https://t.example")),
            _ => None,
        };
        let base = [
            "gpu-triage",
            "serve",
            "--oidc-issuer",
            "https://idp.example",
            "--oidc-client-id",
            "c",
            "--oidc-client-secret",
            "s",
        ];
        let with = |extra: &[&'static str]| {
            let mut args = base.to_vec();
            args.extend_from_slice(extra);
            parse(&args)
        };
        let none = with(&[])
            .expect("parses")
            .expect("valid")
            .expect("configured");
        assert_eq!(none.default_role, crate::app::oidc::DefaultRole::default());
        let set = with(&[
            "--oidc-default-role",
            "viewer",
            "--oidc-allowed-domains",
            "Example.com, b.org",
        ])
        .expect("parses")
        .expect("valid")
        .expect("configured");
        assert_eq!(set.default_role.role, Some(PersonRole::Viewer));
        assert_eq!(set.default_role.allowed_domains, ["example.com", "b.org"]);
        assert!(
            with(&["--oidc-default-role", "owner"]).is_none(),
            "no such role"
        );
        let domains_alone = with(&["--oidc-allowed-domains", "a.com"]).expect("parses");
        assert!(
            domains_alone.is_err(),
            "domains without a default role say nothing"
        );
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
