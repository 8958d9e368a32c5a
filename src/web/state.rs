//! What every handler can reach: the database, the ruleset, the caps and limits, the queue
//! and the settings of the background tasks (`AppState`), built once by `serve` (or a test)
//! and cloned into each request. Apart from the router (`router.rs`) so that handlers, which
//! all need the state, do not depend on the module that lists them.

use std::sync::Arc;

use super::{limits, metrics, sign_in_rate};
use crate::app::Db;
use crate::app::team_rules::RulesetHandle;
use crate::app::upload::Limits;
use crate::rules::Ruleset;

/// What every handler can reach.
#[derive(Clone, Debug)]
pub struct AppState {
    /// The database handle.
    pub db: Db,
    /// Where users reach this server, for links in API responses (no trailing slash).
    pub public_url: String,
    /// Whether cookies get the `Secure` attribute (the portal is served over TLS).
    pub secure_cookies: bool,
    /// The compiled ruleset every classification uses (`current()`), swapped when team rules
    /// change.
    pub ruleset: RulesetHandle,
    /// Input caps.
    pub limits: ApiLimits,
    /// Counters for `/metrics`.
    pub metrics: Arc<metrics::Metrics>,
    /// Whether `/readyz` waits for the stored team rules to be loaded (`serve` loads them in the
    /// background once the database answers; until then uploads would miss them).
    pub await_team_rules: bool,
    /// Per-token request rate limit.
    pub rate: Arc<limits::RateLimiter>,
    /// Global cap on requests in flight.
    pub shed: Arc<limits::Shed>,
    /// The reproduction queue: its settings (lease, caps, long-poll) and the signal that wakes
    /// long-polling claims when this server queues a job.
    pub queue: crate::app::reproduce::Queue,
    /// Webhook settings (whether endpoints may reach private addresses; delivery itself runs
    /// in the background task `serve` starts).
    pub webhooks: crate::app::webhooks::WebhookSettings,
    /// Retention defaults and pass settings (shown on the retention page; the pass itself runs
    /// in the background task `serve` starts).
    pub retention: crate::app::retention::RetentionSettings,
    /// Finds in report logs in flight and recently answered (shared by concurrent readers).
    pub finds: crate::app::logfind::FindCache,
    /// Sign-in through an OpenID Connect provider, when configured.
    pub oidc: Option<Arc<crate::app::oidc::OidcSettings>>,
    /// How often sign-ins through the provider may start, per address and in total.
    pub sign_in_rate: Arc<sign_in_rate::SignInRate>,
}

/// Caps of the HTTP layer: the upload pipeline's, plus the classify-only body.
#[derive(Clone, Copy, Debug)]
pub struct ApiLimits {
    /// Upload caps (log, script, meta).
    pub upload: Limits,
    /// Largest body `POST /api/v1/classify` accepts.
    pub max_classify_bytes: usize,
    /// The least rate request bodies must keep.
    pub body_rate: limits::BodyRate,
    /// How long the sign-in form's body may take to arrive (SECURITY.md item 18).
    pub sign_in_deadline: std::time::Duration,
}

impl std::ops::Deref for ApiLimits {
    type Target = Limits;
    fn deref(&self) -> &Limits {
        &self.upload
    }
}

impl Default for ApiLimits {
    fn default() -> Self {
        ApiLimits {
            upload: Limits::default(),
            max_classify_bytes: 16 << 20,
            body_rate: limits::BodyRate::default(),
            sign_in_deadline: std::time::Duration::from_secs(5),
        }
    }
}

impl AppState {
    /// State for a server reached at `public_url` (e.g. `https://triage.example.com`).
    pub fn new(db: Db, public_url: &str, ruleset: Arc<Ruleset>) -> AppState {
        let public_url = public_url.trim_end_matches('/').to_string();
        AppState {
            secure_cookies: public_url.starts_with("https://"),
            public_url,
            ruleset: RulesetHandle::new(ruleset),
            limits: ApiLimits::default(),
            metrics: Arc::default(),
            await_team_rules: false,
            rate: Arc::new(limits::RateLimiter::new(&limits::LoadLimits::default())),
            shed: Arc::new(limits::Shed::new(&limits::LoadLimits::default())),
            queue: crate::app::reproduce::Queue {
                db: db.clone(),
                settings: crate::app::reproduce::JobSettings::default(),
                wake: Arc::default(),
            },
            webhooks: crate::app::webhooks::WebhookSettings::default(),
            retention: crate::app::retention::RetentionSettings::default(),
            finds: crate::app::logfind::FindCache::default(),
            oidc: None,
            sign_in_rate: Arc::default(),
            db,
        }
    }

    /// The same state with other rate and concurrency limits.
    #[must_use]
    pub fn with_load_limits(mut self, load: &limits::LoadLimits) -> AppState {
        self.rate = Arc::new(limits::RateLimiter::new(load));
        self.shed = Arc::new(limits::Shed::new(load));
        self
    }
}

/// The counters, for the handlers that need nothing else (`GET /metrics`).
impl axum::extract::FromRef<AppState> for Arc<metrics::Metrics> {
    fn from_ref(state: &AppState) -> Self {
        state.metrics.clone()
    }
}
