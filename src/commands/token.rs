//! `gpu-triage token create|list|revoke`: manage API tokens from the server's shell.

use anyhow::bail;

use crate::app::tokens::{self, TokenSelector};
use crate::auth::Scope;
use crate::commands::db::with_database;
use crate::config::DatabaseArgs;

/// `gpu-triage token ...`
#[derive(Debug, clap::Subcommand)]
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
    /// Revoke one token by id or prefix (gtr_xxxxxxxx), or every active token of one name. An
    /// id is only ever an id: a token named "14" is revoked with --name 14.
    #[command(group(clap::ArgGroup::new("which").required(true).args(["token", "name"])))]
    Revoke {
        /// The token's id (as `token list` shows it), its prefix, or its name when that is
        /// neither.
        token: Option<String>,
        /// Revoke the active tokens with exactly this name instead.
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

/// Runs one `token` subcommand.
pub async fn run(cmd: TokenCommand) -> anyhow::Result<()> {
    match cmd {
        TokenCommand::Create {
            scope,
            name,
            expires_in_days,
            database,
        } => {
            let new = tokens::CreateToken {
                name,
                scopes: scope,
                expires_in_days,
                created_by: String::new(),
                owner_person_id: None,
            };
            let (record, secret) =
                with_database(&database, async |db| Ok(tokens::create(db, new).await?)).await?;
            eprintln!(
                "created token {} ({}) with scope {}; it is shown only once:",
                record.id,
                record.name,
                join(&record.scopes)
            );
            println!("{secret}");
        }
        TokenCommand::List { database } => {
            let all = with_database(&database, async |db| Ok(tokens::list(db).await?)).await?;
            println!(
                "{:>5}  {:<14} {:<22} {:<20} {:<20} name",
                "id", "prefix", "scopes", "created", "last used"
            );
            for t in all {
                let name = if t.revoked {
                    format!("{} (revoked)", t.name)
                } else if t.expired {
                    format!("{} (expired)", t.name)
                } else if let Some(at) = t.expires_at {
                    format!("{} (expires {at})", t.name)
                } else {
                    t.name.clone()
                };
                let name = match &t.owner {
                    Some(owner) => format!("{name} [owner: {}]", owner.name),
                    None => name,
                };
                println!(
                    "{:>5}  {:<14} {:<22} {:<20} {:<20} {}",
                    t.id,
                    t.prefix,
                    join(&t.scopes),
                    t.created_at.to_string(),
                    t.last_used_at
                        .map_or_else(|| "never".to_owned(), |t| t.to_string()),
                    name
                );
            }
        }
        TokenCommand::Revoke {
            token,
            name,
            database,
        } => {
            let which = selector(token.as_deref(), name.as_deref())?;
            let revoked =
                with_database(&database, async |db| Ok(tokens::revoke(db, which).await?)).await?;
            if revoked.is_empty() {
                bail!("no active token has {}", describe(which));
            }
            for t in revoked {
                println!("revoked token {} ({}, {})", t.id, t.prefix, t.name);
            }
        }
    }
    Ok(())
}

/// What `token revoke` was asked to revoke: `--name`, else an id in its canonical spelling, else
/// a prefix, else a name. An id is only ever an id: a token named "14" needs `--name 14`.
fn selector<'a>(
    token: Option<&'a str>,
    name: Option<&'a str>,
) -> anyhow::Result<TokenSelector<'a>> {
    match (token, name) {
        (_, Some(name)) => Ok(TokenSelector::Name(name)),
        (Some(t), None) if t.starts_with(crate::auth::TOKEN_PREFIX) => Ok(TokenSelector::Prefix(t)),
        (Some(t), None) => {
            Ok(crate::ids::parse(t).map_or(TokenSelector::Name(t), TokenSelector::Id))
        }
        (None, None) => bail!("name the token to revoke: its id, its prefix, or --name NAME"),
    }
}

fn describe(which: TokenSelector<'_>) -> String {
    match which {
        TokenSelector::Id(id) => format!("id {id}"),
        TokenSelector::Prefix(p) => format!("prefix {p:?}"),
        TokenSelector::Name(n) => format!("name {n:?}"),
    }
}

fn join(scopes: &[Scope]) -> String {
    scopes
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::{TokenSelector, selector};

    #[test]
    fn an_argument_is_an_id_only_in_its_canonical_spelling_and_a_name_is_never_an_id() {
        let cases = [
            ((Some("14"), None), TokenSelector::Id(14)),
            (
                (Some("gtr_ab12cd34"), None),
                TokenSelector::Prefix("gtr_ab12cd34"),
            ),
            (
                (Some("nightly-ci"), None),
                TokenSelector::Name("nightly-ci"),
            ),
            ((Some("014"), None), TokenSelector::Name("014")),
            ((None, Some("14")), TokenSelector::Name("14")),
        ];
        for ((token, name), want) in cases {
            assert_eq!(selector(token, name).ok(), Some(want), "{token:?} {name:?}");
        }
        assert!(selector(None, None).is_err());
    }
}
