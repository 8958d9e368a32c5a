//! `gpu-triage serve`: open the database (starting the embedded cluster when `DATABASE_URL` is
//! unset, and restarting it should it die while serving), apply migrations, run the background
//! tasks (lease reaper, the relay of jobs queued on other replicas, team-rule watcher, webhook delivery, retention passes), serve HTTP until
//! Ctrl-C or SIGTERM, then drain requests and stop the cluster.

use anyhow::Context;
use tokio::net::TcpListener;

use crate::auth;
use crate::config::ServeArgs;
use crate::storage;
use crate::web;
use crate::web::state::AppState;

/// Runs the server until a shutdown signal arrives.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let opened = storage::open(&args.database.location(), args.database.max_connections)
        .await
        .context("opening the database")?;
    tracing::info!(database = %opened.description, "using database");
    let mut db = opened.db.clone();
    let log_store = args.log_store.open().context("the --log-store setting")?;
    if let Some(store) = log_store.clone() {
        check_log_store(&store, args.require_log_store).await?;
        db = db.with_log_store(store);
    }
    let cluster = opened
        .cluster
        .map(storage::embedded::EmbeddedPostgres::supervise);

    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let public_url = match &args.public_url {
        Some(url) => url.trim_end_matches('/').to_string(),
        None => format!("http://{}", listener.local_addr()?),
    };
    let base_url = format!("{public_url}/");
    tracing::info!(url = %base_url, "listening");

    // Migrations retry in the background while the database is unreachable, so the server can
    // start (liveness ok, readiness false) before PostgreSQL does.
    let migrations = {
        let db = db.clone();
        let data_dir = args.database.data_dir.clone();
        tokio::spawn(async move {
            if let Err(e) = db.migrate_with_retry().await {
                tracing::error!(error = %e, "migrations failed; /readyz stays 503");
                return;
            }
            match storage::instance(&db).await {
                Ok(i) => tracing::info!(instance = %i.id, since = %i.created_at, "database ready"),
                Err(e) => tracing::warn!(error = %e, "reading the instance row"),
            }
            if let Err(e) = create_first_admin(&db, &base_url, &data_dir).await {
                tracing::error!(error = %e, "creating the first admin token");
            }
        })
    };

    let ruleset = std::sync::Arc::new(
        crate::rules::Ruleset::builtin().context("the built-in ruleset does not compile")?,
    );
    let load = web::limits::LoadLimits {
        per_token_per_minute: args.rate_limit,
        burst: args.rate_burst,
        max_in_flight: args.max_in_flight,
        max_in_flight_per_token: args.max_in_flight_per_token,
        admin_reserved: args.admin_reserved_slots,
        max_in_flight_anonymous: args.max_in_flight_anonymous,
        max_in_flight_per_address: args.max_in_flight_per_address,
    };
    let mut state = AppState::new(db.clone(), &public_url, ruleset).with_load_limits(&load);
    state.queue.settings = args.jobs.settings();
    state.await_team_rules = true;
    state.limits.upload.max_log_bytes = args.max_log_bytes;
    state.limits.sign_in_deadline = std::time::Duration::from_secs(args.sign_in_deadline_secs);
    state.limits.body_rate = web::limits::BodyRate {
        window: std::time::Duration::from_secs(args.body_window_secs),
        min_bytes_per_sec: args.body_min_rate,
    };
    let reaper = {
        let metrics = state.metrics.clone();
        tokio::spawn(crate::app::reproduce::run_reaper(
            db.clone(),
            state.queue.settings.reaper_interval,
            move |reaped| {
                for r in reaped {
                    metrics.job_event(web::metrics::JobEvent::reaped(r.state));
                }
            },
        ))
    };
    let job_relay = tokio::spawn(crate::app::reproduce::relay_queued_jobs(
        db.clone(),
        state.queue.wake.clone(),
        state.queue.settings.poll,
    ));
    state.webhooks = args.webhooks.settings();
    let webhooks = crate::app::webhooks::deliver::spawn(
        db.clone(),
        state.webhooks.clone(),
        public_url.clone(),
    );
    state.retention = args.retention.settings();
    let retention = crate::app::retention::spawn(db.clone(), state.retention.clone());
    let sweeper = log_store.is_some().then(|| {
        crate::app::log_objects::spawn_sweeper(
            db.clone(),
            std::time::Duration::from_secs(args.log_store_sweep_secs),
        )
    });
    state.ruleset.set_corpus(args.eval_corpus.clone());
    state.oidc = args
        .oidc
        .settings(&public_url)
        .context("the OpenID Connect settings")?
        .map(std::sync::Arc::new);
    if let Some(oidc) = state.oidc.clone() {
        // A provider that does not answer (or a mistyped issuer) is reported now; token
        // sign-in keeps working, and each sign-in through the provider asks it again.
        tokio::spawn(async move {
            match crate::app::oidc::check_issuer(oidc.clone()).await {
                Ok(()) => tracing::info!(issuer = %oidc.issuer, "OpenID Connect sign-in enabled"),
                Err(e) => tracing::error!(
                    issuer = %oidc.issuer,
                    // The provider's words are quoted: they could hold a forged log line.
                    error = ?e.to_string(),
                    "OpenID Connect issuer misconfigured or unreachable; token sign-in still works"
                ),
            }
            if oidc.roles.is_empty() && oidc.default_role.role.is_none() {
                tracing::warn!(
                    "no --oidc-*-groups or --oidc-default-role set: nobody can sign in through \
                     the provider"
                );
            }
        });
    }
    let rules_watch = start_team_rules(db.clone(), state.ruleset.clone());
    let app = web::router(state);
    let connections = web::server::ConnectionLimits {
        header_read_timeout: std::time::Duration::from_secs(args.header_read_timeout_secs),
    };
    web::server::serve(listener, app, connections, shutdown_signal()).await;

    tracing::info!("shutting down");
    migrations.abort();
    reaper.abort();
    job_relay.abort();
    rules_watch.abort();
    webhooks.abort();
    retention.abort();
    if let Some(sweeper) = sweeper {
        sweeper.abort();
    }
    db.close().await;
    if let Some(cluster) = cluster {
        // Supervision ends first, so this stop is not restarted as if it were a crash.
        cluster
            .stop()
            .await
            .context("stopping the embedded PostgreSQL")?;
    }
    Ok(())
}

/// Checks the log store at start. With `require`, a store that fails stops the start with the
/// error naming what failed; without, the error is logged, the server starts (uploads answer
/// 503 while the store is unreachable) and a background task says when the store answers.
async fn check_log_store(
    store: &std::sync::Arc<storage::objects::LogObjects>,
    require: bool,
) -> anyhow::Result<()> {
    match crate::app::log_objects::check(store).await {
        Ok(()) => {
            tracing::info!(store = store.url(), "raw logs go to the object store");
            Ok(())
        }
        Err(e) if require => Err(anyhow::Error::new(e).context(format!(
            "the log store {} (--require-log-store)",
            store.url()
        ))),
        Err(e) => {
            tracing::error!(error = %e, "the log store failed its check; uploads answer 503 until it works");
            let store = store.clone();
            tokio::spawn(async move {
                let mut delay = std::time::Duration::from_secs(1);
                loop {
                    tokio::time::sleep(delay).await;
                    if crate::app::log_objects::check(&store).await.is_ok() {
                        tracing::info!(store = store.url(), "the log store works now");
                        return;
                    }
                    delay = (delay * 2).min(std::time::Duration::from_secs(60));
                }
            });
            Ok(())
        }
    }
}

/// Loads the stored team rules once the database is migrated, then keeps them current
/// (notifications from other replicas, periodic version check).
fn start_team_rules(
    db: storage::Db,
    handle: crate::app::team_rules::RulesetHandle,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut delay = std::time::Duration::from_millis(250);
        loop {
            if db.ping().await.is_ok() {
                match crate::app::team_rules::reload(&db, &handle).await {
                    Ok(version) => {
                        tracing::info!(version, "team rules loaded");
                        break;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "loading team rules; /readyz stays 503");
                        delay = (delay * 2).min(std::time::Duration::from_secs(30));
                    }
                }
            }
            tokio::time::sleep(delay).await;
        }
        // Reports stored before an upgrade that groups failures differently move to their
        // groups now, in the background (uploads go on meanwhile).
        let regroup = {
            let (db, handle) = (db.clone(), handle.clone());
            tokio::spawn(async move {
                if let Err(e) =
                    crate::app::team_rules::reclassify::regroup_if_needed(&db, &handle).await
                {
                    tracing::error!(error = %e, "regrouping stored reports failed; the next start tries again");
                }
            })
        };
        // Groups stored before similar failures were found by band keys get theirs.
        let key_groups = {
            let db = db.clone();
            tokio::spawn(async move {
                match crate::app::similar::key_groups(&db).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(groups = n, "groups keyed for similar failures"),
                    Err(e) => {
                        tracing::error!(error = %e, "keying groups for similar failures failed; the next start tries again")
                    }
                }
            })
        };
        crate::app::team_rules::watch_loop(db, handle).await;
        regroup.abort();
        key_groups.abort();
    })
}

/// On the very first start (no token at all), creates an admin token so a new deployment can be
/// used without a shell on the database. The token never goes to the service log (journald,
/// `docker logs`): on a terminal it is printed once; otherwise it is written once to
/// `DATA_DIR/initial-admin-token` (mode 0600) and only that path is logged.
async fn create_first_admin(
    db: &storage::Db,
    base_url: &str,
    data_dir: &std::path::Path,
) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    let secret = auth::generate().context("reading the system's random source")?;
    if !storage::tokens::insert_first_admin(db, "initial-admin", &secret.prefix, &secret.hash)
        .await?
    {
        return Ok(());
    }
    if std::io::stdout().is_terminal() {
        println!(
            "\nNo tokens existed, so an admin token was created. It is shown only this once:\n\n    {}\n\nSign in at {}login with it, and create narrower tokens with `gpu-triage token create`.\n",
            secret.token, base_url
        );
        return Ok(());
    }
    let path = data_dir.join(FIRST_ADMIN_FILE);
    write_private(&path, &format!("{}\n", secret.token))
        .with_context(|| format!("writing the first admin token to {}", path.display()))?;
    tracing::warn!(
        path = %path.display(),
        "no tokens existed, so an admin token was created and written to this file (mode 0600); \
         sign in at {base_url}login with it, then delete the file"
    );
    Ok(())
}

/// The file in the data directory that receives the first admin token when no terminal does.
pub const FIRST_ADMIN_FILE: &str = "initial-admin-token";

/// Creates `path` (never overwriting one) readable by its owner only, and writes `text`.
fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(text.as_bytes())
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
