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
