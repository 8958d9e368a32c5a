//! `gpu-triage retention run`: one retention pass from the server's shell, the same pass `serve`
//! runs on its timer, for operators (after lowering a setting, before a disk fills) and scripts.
//! It prints what it removed, per project, and exits.

use anyhow::Context;

use crate::app::retention;
use crate::commands::db::with_database;
use crate::config::DatabaseArgs;

/// `gpu-triage retention ...`
#[derive(Debug, clap::Subcommand)]
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

/// Runs one `retention` subcommand.
pub async fn run(cmd: RetentionCommand) -> anyhow::Result<()> {
    match cmd {
        RetentionCommand::Run {
            retention: args,
            database,
        } => {
            let settings = args.settings();
            let summary = with_database(&database, async |db| {
                retention::run_pass(db, &settings, retention::now())
                    .await
                    .context("running a retention pass")
            })
            .await?;
            for (project, removed) in &summary.projects {
                let name = if project.is_empty() {
                    "(no project)"
                } else {
                    project
                };
                println!(
                    "{name}: {} reports deleted, {} logs removed, {} bytes",
                    removed.reports, removed.logs, removed.bytes
                );
            }
            let total = summary.removed;
            println!(
                "retention pass done: {} reports deleted, {} logs removed, {} bytes",
                total.reports, total.logs, total.bytes
            );
        }
    }
    Ok(())
}
