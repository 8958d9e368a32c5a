//! Settings shared by the commands that touch the database, read from flags and from the
//! `DATABASE_URL` / `GPU_TRIAGE_*` environment variables (clap does both), in one place so every
//! command resolves "which database" the same way.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::storage::DataLocation;

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
    pub fn location(&self) -> DataLocation {
        match self.database_url.as_deref().filter(|u| !u.is_empty()) {
            Some(url) => DataLocation::Url(url.to_string()),
            None => DataLocation::Embedded(self.data_dir.clone()),
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

    /// Requests per minute one API token may make on average (0: no limit); over it, 429.
    #[arg(long, env = "GPU_TRIAGE_RATE_LIMIT", default_value_t = 1200)]
    pub rate_limit: u32,

    /// Requests one API token may make in a burst above the rate limit.
    #[arg(long, env = "GPU_TRIAGE_RATE_BURST", default_value_t = 100)]
    pub rate_burst: u32,

    /// Requests served at once (0: no cap); beyond it, 503 with `Retry-After: 1`.
    #[arg(long, env = "GPU_TRIAGE_MAX_IN_FLIGHT", default_value_t = 128)]
    pub max_in_flight: usize,

    /// Of those, how many one person may hold at once, all their tokens and portal sessions
    /// together, or one service token (0: no share); beyond it, 429 `token_busy`.
    #[arg(long, env = "GPU_TRIAGE_MAX_IN_FLIGHT_PER_TOKEN", default_value_t = 32)]
    pub max_in_flight_per_token: usize,

    /// Slots beside `--max-in-flight` kept for admins managing people and tokens (their pages
    /// and API), so an admin can stop an abuser however full the server is (0: none).
    #[arg(long, env = "GPU_TRIAGE_ADMIN_RESERVED_SLOTS", default_value_t = 4)]
    pub admin_reserved_slots: usize,

    /// Requests without a valid token or session served at once, apart from `max_in_flight`
    /// (0: no cap); beyond it, 503. No number of such requests can take a token holder's slot.
    #[arg(long, env = "GPU_TRIAGE_MAX_IN_FLIGHT_ANONYMOUS", default_value_t = 32)]
    pub max_in_flight_anonymous: usize,

    /// Of those, how many one client address (an IPv6 /64) may hold (0: no share); beyond it,
    /// 429 `client_busy`.
    #[arg(
        long,
        env = "GPU_TRIAGE_MAX_IN_FLIGHT_PER_ADDRESS",
        default_value_t = 8
    )]
    pub max_in_flight_per_address: usize,

    /// Seconds a connection may take to send a request's headers, and to start the next
    /// request on a kept-alive connection; then it is closed (half-open clients hold nothing).
    #[arg(long = "header-read-timeout-secs", env = "GPU_TRIAGE_HEADER_READ_TIMEOUT_SECS",
          default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub header_read_timeout_secs: u64,

    /// Bytes per second a request body must average over each body window (0: no check);
    /// a slower upload gets 408 and gives its slot back.
    #[arg(
        long = "body-min-rate",
        env = "GPU_TRIAGE_BODY_MIN_RATE",
        default_value_t = 1024
    )]
    pub body_min_rate: u64,

    /// The window, in seconds, over which `--body-min-rate` is measured.
    #[arg(long = "body-window-secs", env = "GPU_TRIAGE_BODY_WINDOW_SECS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub body_window_secs: u64,

    /// Seconds the sign-in form's body (at most 1 KiB) may take to arrive; then 408 and the
    /// anonymous slot is free again.
    #[arg(long = "sign-in-deadline-secs", env = "GPU_TRIAGE_SIGN_IN_DEADLINE_SECS",
          default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub sign_in_deadline_secs: u64,

    /// A labelled corpus (labels.csv + cases/*.log) that rule previews measure accuracy on.
    #[arg(long, env = "GPU_TRIAGE_EVAL_CORPUS", value_name = "DIR")]
    pub eval_corpus: Option<PathBuf>,

    /// Largest log an upload may carry, in bytes (decoded); beyond it, 413 before anything is
    /// stored.
    #[arg(long, env = "GPU_TRIAGE_MAX_LOG_BYTES", default_value_t = 128 << 20,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_log_bytes: u64,

    #[command(flatten)]
    pub database: DatabaseArgs,

    #[command(flatten)]
    pub jobs: JobArgs,

    #[command(flatten)]
    pub webhooks: WebhookArgs,

    #[command(flatten)]
    pub retention: RetentionArgs,

    #[command(flatten)]
    pub oidc: OidcArgs,

    #[command(flatten)]
    pub log_store: LogStoreArgs,

    /// Refuse to start when the log store cannot be written, read and deleted from (else the
    /// server starts, says so, and answers uploads 503 until the store is back).
    #[arg(long = "require-log-store", env = "GPU_TRIAGE_REQUIRE_LOG_STORE")]
    pub require_log_store: bool,

    /// Seconds between sweeps of the log store (objects of uploads that never committed, logs
    /// retention removed).
    #[arg(long = "log-store-sweep-secs", env = "GPU_TRIAGE_LOG_STORE_SWEEP_SECS",
          default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub log_store_sweep_secs: u64,
}

/// Where raw logs are kept: PostgreSQL (the default), or an S3-compatible object store with
/// endpoint, region and credentials from the AWS environment variables.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct LogStoreArgs {
    /// `s3://BUCKET/PREFIX`: new logs go to this object store (PostgreSQL keeps the reports,
    /// their index and the chunk map). Unset: logs stay in PostgreSQL.
    #[arg(
        long = "log-store",
        env = "GPU_TRIAGE_LOG_STORE",
        value_name = "s3://BUCKET/PREFIX"
    )]
    pub log_store_url: Option<String>,

    /// Seconds one request to the log store may take (then it is retried twice, and the
    /// upload or page answers 503).
    #[arg(long = "log-store-timeout-secs", env = "GPU_TRIAGE_LOG_STORE_TIMEOUT_SECS",
          default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub log_store_timeout_secs: u64,

    /// Seconds an upload's objects may wait for its report to be stored before the sweeper
    /// removes them as those of an upload that never committed.
    #[arg(long = "log-store-grace-secs", env = "GPU_TRIAGE_LOG_STORE_GRACE_SECS",
          default_value_t = 3600, value_parser = clap::value_parser!(u64).range(0..=604_800))]
    pub log_store_grace_secs: u64,
}

impl LogStoreArgs {
    /// The store these flags name, opened (nothing sent yet), or `None` without `--log-store`.
    pub fn open(
        &self,
    ) -> Result<
        Option<std::sync::Arc<crate::storage::objects::LogObjects>>,
        crate::storage::objects::StoreError,
    > {
        self.open_url(self.log_store_url.as_deref())
    }

    /// Like [`LogStoreArgs::open`], for the store at `url`.
    pub fn open_url(
        &self,
        url: Option<&str>,
    ) -> Result<
        Option<std::sync::Arc<crate::storage::objects::LogObjects>>,
        crate::storage::objects::StoreError,
    > {
        let Some(url) = url.filter(|u| !u.is_empty()) else {
            return Ok(None);
        };
        let store = crate::storage::objects::LogObjects::open(
            url,
            std::time::Duration::from_secs(self.log_store_timeout_secs),
        )?
        .with_grace(std::time::Duration::from_secs(self.log_store_grace_secs));
        Ok(Some(std::sync::Arc::new(store)))
    }
}

/// Signing people in through an OpenID Connect provider (issue 31); off unless `--oidc-issuer`
/// is given. The provider's client must allow the redirect URI `{public-url}/login/oidc/callback`.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct OidcArgs {
    /// The provider's issuer URL (its discovery document is at
    /// `ISSUER/.well-known/openid-configuration`).
    #[arg(long, env = "GPU_TRIAGE_OIDC_ISSUER", value_name = "URL")]
    pub oidc_issuer: Option<String>,

    /// The client id registered at the provider.
    #[arg(long, env = "GPU_TRIAGE_OIDC_CLIENT_ID")]
    pub oidc_client_id: Option<String>,

    /// The client secret (prefer `--oidc-client-secret-file`: values in the environment or on
    /// the command line are visible to other processes).
    #[arg(long, env = "GPU_TRIAGE_OIDC_CLIENT_SECRET", hide_env_values = true)]
    pub oidc_client_secret: Option<String>,

    /// A file holding the client secret (surrounding whitespace is ignored).
    #[arg(
        long,
        env = "GPU_TRIAGE_OIDC_CLIENT_SECRET_FILE",
        value_name = "FILE",
        conflicts_with = "oidc_client_secret"
    )]
    pub oidc_client_secret_file: Option<PathBuf>,

    /// Scopes asked for besides `openid`, comma-separated (the groups claim often needs one).
    #[arg(
        long,
        env = "GPU_TRIAGE_OIDC_SCOPES",
        default_value = "email,profile,groups"
    )]
    pub oidc_scopes: String,

    /// Provider groups whose members are admins, comma-separated.
    #[arg(long, env = "GPU_TRIAGE_OIDC_ADMIN_GROUPS", default_value = "")]
    pub oidc_admin_groups: String,

    /// Provider groups whose members are members (upload, fixes, triage), comma-separated.
    #[arg(long, env = "GPU_TRIAGE_OIDC_MEMBER_GROUPS", default_value = "")]
    pub oidc_member_groups: String,

    /// Provider groups whose members are viewers (read only), comma-separated.
    #[arg(long, env = "GPU_TRIAGE_OIDC_VIEWER_GROUPS", default_value = "")]
    pub oidc_viewer_groups: String,

    /// The provider's name on the sign-in button ("Sign in with NAME"); default: the issuer's
    /// host.
    #[arg(long, env = "GPU_TRIAGE_OIDC_PROVIDER_NAME")]
    pub oidc_provider_name: Option<String>,

    /// The role (admin, member or viewer) of people whose groups give none, for providers that
    /// send no groups (Google); with `--oidc-allowed-domains`, only people whose verified email
    /// is in one of those domains get it.
    #[arg(long, env = "GPU_TRIAGE_OIDC_DEFAULT_ROLE", value_name = "ROLE")]
    pub oidc_default_role: Option<crate::roles::PersonRole>,

    /// Email domains (comma-separated, compared exactly: `example.com` is not
    /// `sub.example.com`) whose people get `--oidc-default-role`; empty: everyone who signs in.
    #[arg(long, env = "GPU_TRIAGE_OIDC_ALLOWED_DOMAINS", default_value = "")]
    pub oidc_allowed_domains: String,
}

impl OidcArgs {
    /// The sign-in settings, `None` when no issuer is set; an error naming what is missing or
    /// unreadable when the issuer is set without a client.
    pub fn settings(
        &self,
        public_url: &str,
    ) -> anyhow::Result<Option<crate::app::oidc::OidcSettings>> {
        use crate::roles::{RoleMap, parse_groups};
        use anyhow::Context as _;
        let Some(issuer) = self
            .oidc_issuer
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
        else {
            return Ok(None);
        };
        let client_id = (self.oidc_client_id.as_deref().map(str::trim))
            .filter(|s| !s.is_empty())
            .context(
                "--oidc-issuer is set but --oidc-client-id (GPU_TRIAGE_OIDC_CLIENT_ID) is not",
            )?;
        let client_secret = match (&self.oidc_client_secret, &self.oidc_client_secret_file) {
            (Some(secret), _) => secret.trim().to_owned(),
            (None, Some(file)) => std::fs::read_to_string(file)
                .with_context(|| format!("reading --oidc-client-secret-file {}", file.display()))?
                .trim()
                .to_owned(),
            (None, None) => String::new(),
        };
        anyhow::ensure!(
            !client_secret.is_empty(),
            "--oidc-issuer is set but no client secret is (--oidc-client-secret or \
             --oidc-client-secret-file)"
        );
        let mut scopes = parse_groups(&self.oidc_scopes);
        scopes.retain(|s| s != "openid");
        let allowed_domains = crate::app::oidc::claims::parse_domains(&self.oidc_allowed_domains);
        anyhow::ensure!(
            allowed_domains.is_empty() || self.oidc_default_role.is_some(),
            "--oidc-allowed-domains (GPU_TRIAGE_OIDC_ALLOWED_DOMAINS) only says who gets \
             --oidc-default-role, which is not set"
        );
        let provider_name = self.oidc_provider_name.clone().unwrap_or_else(|| {
            url::Url::parse(issuer)
                .ok()
                .and_then(|u| u.host_str().map(str::to_owned))
                .unwrap_or_else(|| issuer.to_owned())
        });
        Ok(Some(crate::app::oidc::OidcSettings {
            issuer: issuer.to_owned(),
            client_id: client_id.to_owned(),
            client_secret,
            scopes,
            roles: RoleMap {
                admin: parse_groups(&self.oidc_admin_groups),
                member: parse_groups(&self.oidc_member_groups),
                viewer: parse_groups(&self.oidc_viewer_groups),
            },
            default_role: crate::app::oidc::DefaultRole {
                role: self.oidc_default_role,
                allowed_domains,
            },
            provider_name,
            redirect_url: format!("{}/login/oidc/callback", public_url.trim_end_matches('/')),
            max_pending: crate::app::oidc::MAX_PENDING,
        }))
    }
}

/// Retention settings (`serve`, `retention run`): the instance defaults that projects without
/// their own setting follow, and how the background pass runs.
#[derive(Clone, Debug, clap::Args)]
pub struct RetentionArgs {
    /// Days to keep raw logs (the report and its classification stay); 0 keeps them forever.
    /// Projects may set their own (portal /retention, API).
    #[arg(long = "log-retention-days", env = "GPU_TRIAGE_LOG_RETENTION_DAYS", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=i64::from(crate::api_types::retention::MAX_DAYS)))]
    pub log_days: u32,

    /// Days to keep whole reports (their groups keep counting them); 0 keeps them forever.
    #[arg(long = "report-retention-days", env = "GPU_TRIAGE_REPORT_RETENTION_DAYS", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=i64::from(crate::api_types::retention::MAX_DAYS)))]
    pub report_days: u32,

    /// Seconds between retention passes of `serve`'s background task.
    #[arg(long = "retention-interval-secs", env = "GPU_TRIAGE_RETENTION_INTERVAL_SECS",
          default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..=604_800))]
    pub interval_secs: u64,

    /// Reports removed per transaction (each batch holds its row locks only while it runs).
    #[arg(long = "retention-batch", env = "GPU_TRIAGE_RETENTION_BATCH", default_value_t = 500,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub batch: u32,
}

impl RetentionArgs {
    /// The retention settings these flags give.
    pub fn settings(&self) -> crate::app::retention::RetentionSettings {
        crate::app::retention::RetentionSettings {
            defaults: crate::api_types::retention::Days {
                log_days: self.log_days,
                report_days: self.report_days,
            },
            interval: std::time::Duration::from_secs(self.interval_secs),
            batch: self.batch,
        }
    }
}

/// Settings of webhook delivery (`serve`).
#[derive(Clone, Debug, clap::Args)]
pub struct WebhookArgs {
    /// Let webhook endpoints reach loopback, private and link-local addresses (receivers on the
    /// internal network); off, such URLs are refused when saved and when delivered.
    #[arg(
        long = "webhook-allow-private",
        env = "GPU_TRIAGE_WEBHOOK_ALLOW_PRIVATE"
    )]
    pub webhook_allow_private: bool,

    /// Seconds to wait after each failed delivery attempt, in order; after the last wait one
    /// more attempt is made, then the delivery is dead.
    #[arg(long = "webhook-backoff", env = "GPU_TRIAGE_WEBHOOK_BACKOFF", value_name = "SECS,...",
          value_delimiter = ',', default_value = "10,30,120,600,3600",
          value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub webhook_backoff_secs: Vec<u64>,

    /// Seconds one delivery attempt may take, connecting included.
    #[arg(long = "webhook-timeout-secs", env = "GPU_TRIAGE_WEBHOOK_TIMEOUT_SECS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=300))]
    pub webhook_timeout_secs: u64,

    /// Seconds between looks at the outbox when no notification arrives (a replica's enqueue
    /// notifies at once; retries wake when due).
    #[arg(long = "webhook-poll-secs", env = "GPU_TRIAGE_WEBHOOK_POLL_SECS", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub webhook_poll_secs: u64,
}

impl WebhookArgs {
    /// The delivery settings these flags give.
    pub fn settings(&self) -> crate::app::webhooks::WebhookSettings {
        use std::time::Duration;
        crate::app::webhooks::WebhookSettings {
            allow_private: self.webhook_allow_private,
            backoff: self
                .webhook_backoff_secs
                .iter()
                .map(|s| Duration::from_secs(*s))
                .collect(),
            timeout: Duration::from_secs(self.webhook_timeout_secs),
            poll: Duration::from_secs(self.webhook_poll_secs),
            ..crate::app::webhooks::WebhookSettings::default()
        }
    }
}

/// Settings of the reproduction queue (`serve`).
#[derive(Clone, Debug, clap::Args)]
pub struct JobArgs {
    /// Seconds a worker's lease on a job lasts without a heartbeat (workers heartbeat every
    /// ~15 s); an expired lease is taken back and the job requeued.
    #[arg(long = "job-lease-secs", env = "GPU_TRIAGE_JOB_LEASE_SECS", default_value_t = 90,
          value_parser = clap::value_parser!(u32).range(5..=3600))]
    pub lease_secs: u32,

    /// Seconds a worker lets a reproduction script run before killing it (sent with each job).
    #[arg(long = "job-timeout-secs", env = "GPU_TRIAGE_JOB_TIMEOUT_SECS", default_value_t = 600,
          value_parser = clap::value_parser!(u32).range(1..=86400))]
    pub timeout_secs: u32,

    /// Seconds between passes of the reaper that requeues jobs with expired leases (claims
    /// also reap first).
    #[arg(long = "job-reaper-secs", env = "GPU_TRIAGE_JOB_REAPER_SECS", default_value_t = 15,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub reaper_secs: u64,
}

impl JobArgs {
    /// The queue settings these flags give.
    pub fn settings(&self) -> crate::app::reproduce::JobSettings {
        crate::app::reproduce::JobSettings {
            lease_secs: self.lease_secs,
            timeout_secs: self.timeout_secs,
            reaper_interval: std::time::Duration::from_secs(self.reaper_secs),
            ..crate::app::reproduce::JobSettings::default()
        }
    }
}
