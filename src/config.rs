//! Settings shared by the commands that touch the database, read from flags and from the
//! `DATABASE_URL` / `GPU_TRIAGE_*` environment variables (clap does both), in one place so every
//! command resolves "which database" the same way.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::storage::Location;

/// Which database to use: `DATABASE_URL`, or the private cluster under `GPU_TRIAGE_DATA`.
#[derive(Clone, Debug, clap::Args)]
pub struct DatabaseArgs {
    /// PostgreSQL URL of an existing server. When unset, a private cluster is started from the
    /// system's PostgreSQL binaries under --data-dir.
    #[arg(long = "database-url", env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// Directory for the private PostgreSQL cluster (used when DATABASE_URL is unset).
    #[arg(
        long = "data-dir",
        env = "GPU_TRIAGE_DATA",
        default_value = "./.gpu-triage"
    )]
    pub data_dir: PathBuf,

    /// Maximum connections in the database pool.
    #[arg(
        long = "db-max-connections",
        env = "GPU_TRIAGE_DB_MAX_CONNECTIONS",
        default_value_t = 16
    )]
    pub max_connections: u32,
}

impl DatabaseArgs {
    /// The database these settings name.
    pub fn location(&self) -> Location {
        match self.database_url.as_deref().filter(|u| !u.is_empty()) {
            Some(url) => Location::Url(url.to_string()),
            None => Location::Embedded(self.data_dir.clone()),
        }
    }
}

/// Settings of `gpu-triage serve`.
#[derive(Clone, Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "GPU_TRIAGE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// The URL users reach this server at (behind a proxy: its https URL); used for links in
    /// API responses and to mark cookies `Secure`. Default: http://LISTEN.
    #[arg(long, env = "GPU_TRIAGE_PUBLIC_URL")]
    pub public_url: Option<String>,

    /// A labelled corpus (labels.csv + cases/*.log) that rule previews measure accuracy on.
    #[arg(long, env = "GPU_TRIAGE_EVAL_CORPUS", value_name = "DIR")]
    pub eval_corpus: Option<PathBuf>,

    #[command(flatten)]
    pub database: DatabaseArgs,
}
