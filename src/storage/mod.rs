//! All SQL lives here. The rest of the program talks to PostgreSQL only through the small,
//! documented functions of this module and its children, which take an executor (or the
//! [`Db`] handle) and return domain types, so the schema can change in one place.

mod attempts;
pub mod embedded;
pub mod group_changes;
pub mod group_facets;
pub mod group_list;
pub mod group_merge;
pub mod group_triage;
pub mod groups;
pub mod job_runs;
pub mod jobs;
pub mod log_objects;
pub mod objects;
pub mod people;
pub mod reclassify_runs;
pub mod reports;
pub mod reproductions;
pub mod retention;
pub mod rules;
pub mod search;
pub mod sessions;
pub mod tokens;
mod types;
pub mod webhooks;
pub mod workers;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

/// The schema migrations in `migrations/`, embedded in the binary and applied at start.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// The storage layer's one error type.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// No PostgreSQL server binaries could be found for the embedded cluster.
    #[error(
        "no PostgreSQL server binaries (initdb, postgres) found; searched {searched}. \
         Install the PostgreSQL server package (Debian/Ubuntu: `apt-get install postgresql`) \
         or set DATABASE_URL to use an existing PostgreSQL server"
    )]
    NoBinaries {
        /// Where the search looked, for the message.
        searched: String,
    },
    /// The embedded cluster could not be created, started or stopped.
    #[error("embedded PostgreSQL: {0}")]
    Cluster(String),
    /// The database could not be reached (down, restarting, or out of connections).
    #[error("database unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    /// A migration failed.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A stored value this build cannot read (an unknown enum spelling).
    #[error("stored data not understood: {0}")]
    Corrupt(String),
    /// Any other database error.
    #[error("database error: {0}")]
    Sqlx(sqlx::Error),
    /// The object store that holds raw logs failed (`--log-store`).
    #[error(transparent)]
    LogStore(#[from] objects::StoreError),
}

impl DbError {
    /// Whether the statement lost a race that running the transaction again can win: a
    /// deadlock PostgreSQL broke by failing this side (40P01), or a serialization failure
    /// (40001).
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        match self {
            DbError::Sqlx(sqlx::Error::Database(e)) => {
                matches!(e.code().as_deref(), Some("40P01" | "40001"))
            }
            _ => false,
        }
    }

    /// Whether the database is not there right now (down, restarting, out of connections),
    /// which the edges answer with 503 and `Retry-After` rather than 500.
    #[must_use]
    pub fn is_unavailable(&self) -> bool {
        match self {
            DbError::Unavailable(_) => true,
            DbError::LogStore(e) => e.is_transient(),
            _ => false,
        }
    }
}

impl From<sqlx::Error> for DbError {
    fn from(err: sqlx::Error) -> Self {
        if is_unavailable(&err) {
            DbError::Unavailable(err)
        } else {
            DbError::Sqlx(err)
        }
    }
}

/// True for errors that mean "the database is not there right now" rather than "this query is
/// wrong": callers map these to 503 with `Retry-After`.
fn is_unavailable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => true,
        sqlx::Error::Database(db) => {
            // Class 57 (operator intervention: admin shutdown, cannot connect now) and class 08
            // (connection exceptions) are transient.
            db.code()
                .is_some_and(|c| c.starts_with("57") || c.starts_with("08"))
        }
        _ => false,
    }
}

/// The application's handle on PostgreSQL: a pool plus whether migrations have been applied,
/// and the object store raw logs go to when one is configured (`--log-store`).
#[derive(Clone, Debug)]
pub struct Db {
    pool: PgPool,
    migrated: Arc<AtomicBool>,
    logs: Option<Arc<objects::LogObjects>>,
    /// Similar-groups answers remembered between uploads (`groups::NearestMemo`).
    nearest: Arc<groups::NearestMemo>,
}

impl Db {
    /// A lazy pool: no connection is opened until first use, so the server can start (and answer
    /// liveness) while the database is still down.
    pub fn connect_lazy(options: PgConnectOptions, max_connections: u32) -> Db {
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(3))
            // sqlx's default, stated because recovery depends on it: a pooled connection whose
            // server died (a restarted embedded cluster, a failover) is found and replaced
            // before use instead of failing one request each.
            .test_before_acquire(true)
            .connect_lazy_with(options);
        Db {
            pool,
            migrated: Arc::new(AtomicBool::new(false)),
            logs: None,
            nearest: Arc::default(),
        }
    }

    /// The same handle, with new logs written to `store` (and stored logs read from it).
    #[must_use]
    pub fn with_log_store(mut self, store: Arc<objects::LogObjects>) -> Db {
        self.logs = Some(store);
        self
    }

    /// The similar-groups answers this handle (and its clones) remember.
    pub fn nearest_memo(&self) -> &groups::NearestMemo {
        &self.nearest
    }

    /// The object store for raw logs, when one is configured.
    pub fn log_store(&self) -> Option<&Arc<objects::LogObjects>> {
        self.logs.as_ref()
    }

    /// The object store for raw logs, or the error saying none is configured.
    pub fn require_log_store(&self) -> Result<&Arc<objects::LogObjects>, DbError> {
        Ok(self
            .logs
            .as_ref()
            .ok_or(objects::StoreError::NotConfigured)?)
    }

    /// The underlying pool, for the storage functions.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Applies every pending migration.
    pub async fn migrate(&self) -> Result<(), DbError> {
        MIGRATOR.run(&self.pool).await.map_err(|e| match e {
            sqlx::migrate::MigrateError::Execute(inner) => DbError::from(inner),
            other => DbError::Migrate(other),
        })?;
        self.migrated.store(true, Ordering::Release);
        Ok(())
    }

    /// Retries [`Db::migrate`] with capped exponential backoff until it succeeds or fails for a
    /// reason other than the database being unreachable.
    pub async fn migrate_with_retry(&self) -> Result<(), DbError> {
        let mut delay = Duration::from_millis(250);
        loop {
            match self.migrate().await {
                Err(DbError::Unavailable(e)) => {
                    tracing::warn!(error = %e, retry_in = ?delay, "database not reachable yet");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
                other => return other,
            }
        }
    }

    /// Readiness: migrations are applied and the database answers a trivial query.
    pub async fn ping(&self) -> Result<(), DbError> {
        if !self.migrated.load(Ordering::Acquire) {
            return Err(DbError::Cluster("migrations not applied yet".into()));
        }
        sqlx::query_scalar!("SELECT 1 AS ok")
            .fetch_one(&self.pool)
            .await?;
        Ok(())
    }

    /// Closes every connection; used on shutdown before the embedded cluster stops.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Facts about this installation, created by the first migration's first start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instance {
    /// A random identifier, stable across restarts: tells apart two deployments' data.
    pub id: String,
    /// When the database was first initialised, RFC 3339.
    pub created_at: crate::time::Timestamp,
}

/// Reads the installation's identity row (created by the first migration).
pub async fn instance(db: &Db) -> Result<Instance, DbError> {
    Ok(sqlx::query_as!(
        Instance,
        r#"SELECT id::text AS "id!", created_at AS "created_at: crate::time::Timestamp"
         FROM instance"#
    )
    .fetch_one(db.pool())
    .await?)
}

/// Creates database `name` on the server `admin` points at, if it does not exist yet.
///
/// `name` must be a plain identifier (letters, digits, `_`); it cannot be a bound parameter in
/// `CREATE DATABASE`, so it is checked here instead.
pub async fn create_database(admin: &PgConnectOptions, name: &str) -> Result<(), DbError> {
    use sqlx::Connection;
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(DbError::Cluster(format!("invalid database name {name:?}")));
    }
    let mut conn = sqlx::PgConnection::connect_with(admin).await?;
    let exists = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1) AS "exists!""#,
        name
    )
    .fetch_one(&mut conn)
    .await?;
    if !exists {
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
            .execute(&mut conn)
            .await?;
    }
    conn.close().await?;
    Ok(())
}

/// Where the data lives: an existing server, or the private cluster under a data directory.
#[derive(Clone, Debug)]
pub enum DataLocation {
    /// `DATABASE_URL`: an existing PostgreSQL server.
    Url(String),
    /// The embedded cluster under this data root (`GPU_TRIAGE_DATA`).
    Embedded(std::path::PathBuf),
}

/// An opened database: the handle, the embedded cluster when one was started (dropping it stops
/// the cluster), and a one-line description for the startup log (no password).
#[derive(Debug)]
pub struct Opened {
    /// The pool handle (lazy: connects on first use).
    pub db: Db,
    /// The embedded cluster, when `DataLocation::Embedded`.
    pub cluster: Option<embedded::EmbeddedPostgres>,
    /// Which database this is, for logs.
    pub description: String,
}

/// Opens `location`: starts (or attaches to) the embedded cluster and creates its database, or
/// prepares a lazy pool on `DATABASE_URL`. Migrations are left to the caller.
pub async fn open(location: &DataLocation, max_connections: u32) -> Result<Opened, DbError> {
    match location {
        DataLocation::Url(url) => {
            let options: PgConnectOptions = url
                .parse()
                .map_err(|e| DbError::Cluster(format!("DATABASE_URL is not a valid URL: {e}")))?;
            let description = format!(
                "PostgreSQL at {}:{} database {} (DATABASE_URL)",
                options.get_host(),
                options.get_port(),
                options.get_database().unwrap_or("(default)")
            );
            Ok(Opened {
                db: Db::connect_lazy(options, max_connections),
                cluster: None,
                description,
            })
        }
        DataLocation::Embedded(root) => {
            let root = root.clone();
            let cluster = tokio::task::spawn_blocking(move || {
                let bins = embedded::BinarySearch::from_env().find()?;
                embedded::EmbeddedPostgres::start(&root, &bins, &embedded::StartOptions::default())
            })
            .await
            .map_err(|e| DbError::Cluster(format!("start task failed: {e}")))??;
            create_database(
                &cluster.connect_options("postgres"),
                embedded::DATABASE_NAME,
            )
            .await?;
            let description = format!(
                "embedded PostgreSQL in {} (unix socket in {}, {})",
                cluster.data_dir().display(),
                cluster.socket_dir().display(),
                if cluster.is_owner() {
                    "started by this process"
                } else {
                    "shared with a running gpu-triage"
                }
            );
            Ok(Opened {
                db: Db::connect_lazy(
                    cluster.connect_options(embedded::DATABASE_NAME),
                    max_connections,
                ),
                cluster: Some(cluster),
                description,
            })
        }
    }
}
