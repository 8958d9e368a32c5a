//! `gpu-triage rules check FILE`: validate a ruleset before it is used (patterns compile within
//! the limits, examples match, counter-examples do not), naming the rule on each failure.

use super::BadInput;
use crate::cli::RulesCommand;
use crate::rules::Ruleset;

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
    }
}
