//! `gpu-triage rules check FILE`: validate a ruleset before it is used (patterns compile within
//! the limits, examples match, counter-examples do not), naming the rule on each failure.
//! `rules export` / `rules import FILE`: the team rules stored in the database as TOML, so they
//! can live in a repository too.

use anyhow::Context;

use super::BadInput;
use crate::actor::Actor;
use crate::app::team_rules::{self, RulesetHandle, TeamRulesError};
use crate::commands::db::with_database;
use crate::config::DatabaseArgs;
use crate::rules::Ruleset;

/// `gpu-triage rules ...`
#[derive(Debug, clap::Subcommand)]
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

/// Runs `rules ...`.
pub fn run(cmd: RulesCommand) -> anyhow::Result<()> {
    match cmd {
        RulesCommand::Check { file } => {
            let (label, text) = match &file {
                None => (
                    "built-in ruleset".to_owned(),
                    crate::rules::BUILTIN_RULES.to_owned(),
                ),
                Some(p) => (
                    p.display().to_string(),
                    std::fs::read_to_string(p)
                        .map_err(|e| BadInput(format!("{}: cannot read: {e}", p.display())))?,
                ),
            };
            let ruleset =
                Ruleset::from_toml(&text).map_err(|e| BadInput(format!("{label}: {e}")))?;
            let failures = ruleset.check();
            for f in &failures {
                eprintln!("{label}: {f}");
            }
            if failures.is_empty() {
                println!(
                    "{label}: ok ({} rules, {} context extractors)",
                    ruleset.rule_count(),
                    ruleset.context_count()
                );
                Ok(())
            } else {
                Err(anyhow::anyhow!(
                    "{label}: {} check(s) failed",
                    failures.len()
                ))
            }
        }
        RulesCommand::Export { out, database } => block_on(async move {
            let file =
                with_database(&database, async |db| Ok(team_rules::export(db).await?)).await?;
            let text = toml::to_string(&file).context("writing TOML")?;
            match out {
                Some(path) => std::fs::write(&path, text)
                    .with_context(|| format!("writing {}", path.display()))?,
                None => print!("{text}"),
            }
            eprintln!("exported {} team rule(s)", file.rule.len());
            Ok(())
        }),
        RulesCommand::Import { file, database } => {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| BadInput(format!("{}: cannot read: {e}", file.display())))?;
            let label = file.display().to_string();
            let parsed = team_rules::parse_team_file(&text)
                .map_err(|e| BadInput(format!("{label}: {e}")))?;
            block_on(async move {
                let (version, n) = with_database(&database, async |db| {
                    let handle = RulesetHandle::new(std::sync::Arc::new(
                        Ruleset::builtin().context("the built-in ruleset does not compile")?,
                    ));
                    team_rules::import(db, &handle, &parsed, &Actor::Service("cli import"))
                        .await
                        .map_err(|e| match e {
                            e @ (TeamRulesError::Invalid(_) | TeamRulesError::BadInput(_)) => {
                                BadInput(format!("{label}: {e}")).into()
                            }
                            other => anyhow::Error::from(other),
                        })
                })
                .await?;
                println!(
                    "imported {n} team rule entr{}; ruleset version {version}",
                    if n == 1 { "y" } else { "ies" }
                );
                Ok(())
            })
        }
    }
}

fn block_on(fut: impl Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(fut)
}
