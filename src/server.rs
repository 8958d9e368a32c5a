//! `gpu-triage serve`: open the database (starting the embedded cluster when `DATABASE_URL` is
//! unset), apply migrations, serve HTTP until Ctrl-C or SIGTERM, then drain requests and stop
//! the cluster.

use anyhow::Context;
use tokio::net::TcpListener;

use crate::config::ServeArgs;
use crate::storage;
use crate::web::{self, AppState};

/// Runs the server until a shutdown signal arrives.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let opened = storage::open(&args.database.location(), args.database.max_connections)
        .await
        .context("opening the database")?;
    tracing::info!(database = %opened.description, "using database");
    let db = opened.db.clone();

    // Migrations retry in the background while the database is unreachable, so the server can
    // start (liveness ok, readiness false) before PostgreSQL does.
    let migrations = {
        let db = db.clone();
        tokio::spawn(async move {
            match db.migrate_with_retry().await {
                Ok(()) => match storage::instance(&db).await {
                    Ok(i) => {
                        tracing::info!(instance = %i.id, since = %i.created_at, "database ready")
                    }
                    Err(e) => tracing::warn!(error = %e, "reading the instance row"),
                },
                Err(e) => tracing::error!(error = %e, "migrations failed; /readyz stays 503"),
            }
        })
    };

    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    tracing::info!(url = %format!("http://{}/", listener.local_addr()?), "listening");

    let app = web::router(AppState { db: db.clone() });
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .context("serving HTTP")?;

    tracing::info!("shutting down");
    migrations.abort();
    db.close().await;
    if let Some(cluster) = opened.cluster {
        tokio::task::spawn_blocking(move || cluster.stop())
            .await
            .context("stopping the embedded PostgreSQL")?
            .context("stopping the embedded PostgreSQL")?;
    }
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await
            }
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

/// `gpu-triage migrate`: apply migrations and exit.
pub async fn migrate(args: crate::config::DatabaseArgs) -> anyhow::Result<()> {
    let opened = storage::open(&args.location(), 2)
        .await
        .context("opening the database")?;
    tracing::info!(database = %opened.description, "using database");
    opened.db.migrate().await.context("applying migrations")?;
    let instance = storage::instance(&opened.db).await?;
    println!("migrations applied; instance {}", instance.id);
    opened.db.close().await;
    if let Some(cluster) = opened.cluster {
        tokio::task::spawn_blocking(move || cluster.stop()).await??;
    }
    Ok(())
}
