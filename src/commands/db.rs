//! Running a short command against the database: open it (the embedded cluster is shared with a
//! running `serve`, or started and stopped around the command), migrate, run, close.

use anyhow::Context;

use crate::config::DatabaseArgs;
use crate::storage::{self, Db};

/// Opens the database `args` names, applies migrations, runs `work`, and closes everything,
/// stopping an embedded cluster this command started.
pub async fn with_database<T, F>(args: &DatabaseArgs, work: F) -> anyhow::Result<T>
where
    F: AsyncFnOnce(&Db) -> anyhow::Result<T>,
{
    let opened = storage::open(&args.location(), 2)
        .await
        .context("opening the database")?;
    tracing::debug!(database = %opened.description, "using database");
    let result = async {
        opened.db.migrate().await.context("applying migrations")?;
        work(&opened.db).await
    }
    .await;
    opened.db.close().await;
    if let Some(cluster) = opened.cluster {
        tokio::task::spawn_blocking(move || cluster.stop())
            .await
            .context("stopping the embedded PostgreSQL")??;
    }
    result
}

/// `gpu-triage migrate`: apply migrations and exit.
pub async fn migrate(args: DatabaseArgs) -> anyhow::Result<()> {
    let instance = with_database(&args, async |db| Ok(storage::instance(db).await?)).await?;
    println!("migrations applied; instance {}", instance.id);
    Ok(())
}

/// `gpu-triage db ...`: maintenance of the stored data.
#[derive(Debug, clap::Subcommand)]
pub enum DbCommand {
    /// Move stored raw logs and reproduction scripts between PostgreSQL and an S3-compatible
    /// object store, one report at a time, each chunk and script verified by its SHA-256.
    /// Interrupted, it loses nothing: run it again to go on. Objects it leaves behind are removed at its end (and by `serve`'s
    /// sweeper).
    MoveLogs {
        /// `s3://BUCKET/PREFIX` to move the logs stored in PostgreSQL into that store, or
        /// `postgres` to move the logs in the store (--log-store) back into PostgreSQL.
        #[arg(long, value_name = "s3://BUCKET/PREFIX|postgres")]
        to: String,
        #[command(flatten)]
        log_store: crate::config::LogStoreArgs,
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

/// Runs one `db` subcommand.
pub async fn run(cmd: DbCommand) -> anyhow::Result<()> {
    match cmd {
        DbCommand::MoveLogs {
            to,
            log_store,
            database,
        } => move_logs(&to, &log_store, &database).await,
    }
}

async fn move_logs(
    to: &str,
    log_store: &crate::config::LogStoreArgs,
    database: &DatabaseArgs,
) -> anyhow::Result<()> {
    use crate::app::log_objects::moving::{Destination, move_logs};
    let (destination, url) = match to {
        "postgres" | "postgresql" => (Destination::Database, log_store.log_store_url.as_deref()),
        url if url.starts_with("s3://") => (Destination::Store, Some(url)),
        other => {
            return Err(super::BadInput(format!(
                "--to must be s3://BUCKET/PREFIX or postgres, got {other:?}"
            ))
            .into());
        }
    };
    let Some(store) = log_store.open_url(url).context("the log store")? else {
        return Err(super::BadInput(
            "--to postgres reads the logs from the store named by --log-store \
             (GPU_TRIAGE_LOG_STORE), which is unset"
                .into(),
        )
        .into());
    };
    crate::app::log_objects::check(&store)
        .await
        .with_context(|| format!("checking the log store {}", store.url()))?;
    let url = store.url().to_owned();
    let moved = with_database(database, async |db| {
        let db = db.clone().with_log_store(store);
        move_logs(&db, destination, |id, so_far| {
            tracing::debug!(report_id = id, reports = so_far.reports, "moved");
        })
        .await
        .context("moving logs")
    })
    .await?;
    let place = match destination {
        Destination::Store => url.as_str(),
        Destination::Database => "PostgreSQL",
    };
    println!(
        "moved the logs of {} reports ({} chunks) and {} reproduction scripts, each verified \
         by SHA-256, to {place}; {} skipped (changed meanwhile), {} object prefixes removed",
        moved.reports, moved.chunks, moved.scripts, moved.skipped, moved.swept
    );
    Ok(())
}
