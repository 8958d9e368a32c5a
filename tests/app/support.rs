//! `TestApp`: the application's router built in-process on a fresh database, and helpers to run
//! the real binary. With `DATABASE_URL` unset, the test run starts one private PostgreSQL cluster
//! (the same embedded cluster `serve` uses) and every test gets its own database on it.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use gpu_triage::storage::embedded::{BinarySearch, EmbeddedPostgres, StartOptions};
use gpu_triage::storage::{self, Db};
use gpu_triage::web::{self, AppState};
use http_body_util::BodyExt;
use sqlx::postgres::PgConnectOptions;
use tower::ServiceExt;

/// The server every test's database lives on.
struct TestServer {
    admin: PgConnectOptions,
    /// Kept for the whole run; the cluster's watchdog stops it when the test binary exits.
    _cluster: Option<EmbeddedPostgres>,
}

static SERVER: OnceLock<TestServer> = OnceLock::new();
static NEXT_DB: AtomicU32 = AtomicU32::new(0);

fn server() -> &'static TestServer {
    SERVER.get_or_init(|| match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => TestServer {
            admin: url
                .parse()
                .expect("DATABASE_URL must be a valid PostgreSQL URL"),
            _cluster: None,
        },
        _ => {
            let bins = BinarySearch::from_env()
                .find()
                .expect("PostgreSQL server binaries are needed for the tests");
            let root = shared_cluster_root();
            let cluster = EmbeddedPostgres::start(&root, &bins, &StartOptions { no_sync: true })
                .expect("start the test cluster");
            TestServer {
                admin: cluster.connect_options("postgres"),
                _cluster: Some(cluster),
            }
        }
    })
}

/// One cluster per checkout, reused across runs (initdb once); in /tmp so that the `postgres`
/// user can reach it when tests run as root.
fn shared_cluster_root() -> PathBuf {
    let target = env!("CARGO_TARGET_TMPDIR");
    let tag: u32 = target
        .bytes()
        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b.into()));
    std::env::temp_dir().join(format!("gpu-triage-test-{tag:08x}"))
}

/// A fresh database for a test that starts the real binary: created, its pool closed, its name
/// returned (the binary connects on its own).
pub fn fresh_database_name() -> String {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (db, options) = rt.block_on(fresh_db());
    rt.block_on(db.close());
    options.get_database().unwrap().to_string()
}

/// A fresh, migrated database for one test.
pub async fn fresh_db() -> (Db, PgConnectOptions) {
    let (db, options) = empty_db().await;
    db.migrate().await.expect("migrate test database");
    (db, options)
}

/// A fresh database for one test, not yet migrated.
pub async fn empty_db() -> (Db, PgConnectOptions) {
    let server = server();
    let name = format!(
        "t_{}_{}",
        std::process::id(),
        NEXT_DB.fetch_add(1, Ordering::SeqCst)
    );
    if NEXT_DB.load(Ordering::SeqCst) == 1 {
        drop_stale_databases(&server.admin).await;
    }
    storage::create_database(&server.admin, &name)
        .await
        .expect("create test database");
    let options = server.admin.clone().database(&name);
    let db = Db::connect_lazy(options.clone(), 4);
    (db, options)
}

/// Databases of earlier test runs (their process is gone) are dropped once per run.
async fn drop_stale_databases(admin: &PgConnectOptions) {
    use sqlx::Connection;
    let Ok(mut conn) = sqlx::PgConnection::connect_with(admin).await else {
        return;
    };
    let names: Vec<String> =
        sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 't\\_%\\_%'")
            .fetch_all(&mut conn)
            .await
            .unwrap_or_default();
    for name in names {
        let pid = name.split('_').nth(1).unwrap_or("");
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
        let _ = sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut conn)
            .await;
    }
}

/// The application, in-process, on its own database.
pub struct TestApp {
    pub db: Db,
    pub router: axum::Router,
}

/// A response read whole.
pub struct TestResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl TestResponse {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The `error.code` of a JSON error body.
    pub fn error_code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

impl TestApp {
    pub async fn spawn() -> TestApp {
        let (db, _) = fresh_db().await;
        TestApp::on(db)
    }

    pub fn on(db: Db) -> TestApp {
        TestApp::with_state(db, |state| state)
    }

    /// The application on a fresh database, its state adjusted by `adjust` (limits, ...).
    pub async fn spawn_with(adjust: impl FnOnce(AppState) -> AppState) -> TestApp {
        let (db, _) = fresh_db().await;
        TestApp::with_state(db, adjust)
    }

    /// The application on `db` (shared with another `TestApp`, as replicas share one
    /// database), its state adjusted by `adjust`.
    pub fn on_with(db: Db, adjust: impl FnOnce(AppState) -> AppState) -> TestApp {
        TestApp::with_state(db, adjust)
    }

    fn with_state(db: Db, adjust: impl FnOnce(AppState) -> AppState) -> TestApp {
        let ruleset =
            std::sync::Arc::new(gpu_triage::rules::Ruleset::builtin().expect("builtin rules"));
        let state = adjust(AppState::new(db.clone(), "http://gpu-triage.test", ruleset));
        TestApp {
            db,
            router: web::router(state),
        }
    }

    /// A new token with these scopes, as the raw secret.
    pub async fn token(&self, name: &str, scopes: &[gpu_triage::auth::Scope]) -> String {
        let secret = gpu_triage::auth::generate().expect("random");
        gpu_triage::storage::tokens::insert_token(
            self.db.pool(),
            gpu_triage::storage::tokens::NewToken {
                name,
                scopes,
                prefix: &secret.prefix,
                hash: &secret.hash,
                expires_in_days: None,
                created_by: "",
                owner_person_id: None,
            },
        )
        .await
        .expect("insert token");
        secret.token
    }

    /// `GET` with a bearer token.
    pub async fn get_as(&self, token: &str, path: &str) -> TestResponse {
        let req = Request::get(path)
            .header("authorization", format!("Bearer {token}"))
            .body(Body::empty())
            .expect("valid request");
        self.send(req).await
    }

    /// `POST` a JSON body with a bearer token.
    pub async fn post_json(
        &self,
        token: &str,
        path: &str,
        body: &serde_json::Value,
    ) -> TestResponse {
        let req = Request::post(path)
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .expect("valid request");
        self.send(req).await
    }

    /// `POST /api/v1/reports` with the given multipart parts (name, filename, bytes).
    pub async fn upload(
        &self,
        token: &str,
        parts: &[(&str, Option<&str>, &[u8])],
        key: Option<&str>,
    ) -> TestResponse {
        let boundary = "gpu-triage-test-boundary-7f3a";
        let mut body = Vec::new();
        for (name, filename, bytes) in parts {
            body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
            match filename {
                Some(f) => body.extend_from_slice(
                    format!("Content-Disposition: form-data; name=\"{name}\"; filename=\"{f}\"\r\nContent-Type: text/plain\r\n\r\n").as_bytes(),
                ),
                None => body.extend_from_slice(format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes()),
            }
            body.extend_from_slice(bytes);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
        let mut req = Request::post("/api/v1/reports")
            .header("authorization", format!("Bearer {token}"))
            .header(
                "content-type",
                format!("multipart/form-data; boundary={boundary}"),
            );
        if let Some(k) = key {
            req = req.header("idempotency-key", k);
        }
        self.send(req.body(Body::from(body)).expect("valid request"))
            .await
    }

    /// Rows in a table.
    pub async fn count(&self, table: &str) -> i64 {
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
            .fetch_one(self.db.pool())
            .await
            .expect("count")
    }

    pub async fn get(&self, path: &str) -> TestResponse {
        let req = Request::get(path)
            .body(Body::empty())
            .expect("valid request");
        self.send(req).await
    }

    pub async fn send(&self, req: Request<Body>) -> TestResponse {
        send_to(self.router.clone(), req).await
    }
}

/// Sends `req` through `router` and reads the response whole (for tasks that run requests
/// side by side).
pub async fn send_to(router: axum::Router, req: Request<Body>) -> TestResponse {
    let res = router.oneshot(req).await.expect("infallible router");
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect().await.expect("body").to_bytes();
    TestResponse {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// A temporary directory the `postgres` user can enter (tests may run as root, and a cluster
/// started as root runs as `postgres`).
pub fn shared_tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("gpu-triage-")
        .tempdir_in(std::env::temp_dir())
        .expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

/// Starts a private cluster of its own under `root` (for tests that stop or restart it).
pub fn own_cluster(root: &Path) -> EmbeddedPostgres {
    let bins = BinarySearch::from_env()
        .find()
        .expect("PostgreSQL binaries");
    EmbeddedPostgres::start(root, &bins, &StartOptions { no_sync: true }).expect("start cluster")
}

/// A `DATABASE_URL` for database `name` on the test server.
pub fn database_url(name: &str) -> String {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => {
            let (base, query) = url
                .split_once('?')
                .map_or((url.as_str(), None), |(b, q)| (b, Some(q)));
            let scheme_end = base.find("://").map_or(0, |i| i + 3);
            let base = match base[scheme_end..].find('/') {
                Some(slash) => &base[..scheme_end + slash],
                None => base,
            };
            match query {
                Some(q) => format!("{base}/{name}?{q}"),
                None => format!("{base}/{name}"),
            }
        }
        _ => {
            let admin = &server().admin;
            let socket = admin
                .get_socket()
                .expect("the test cluster listens on a socket");
            format!(
                "postgres://postgres@localhost:{}/{name}?host={}",
                admin.get_port(),
                socket.display()
            )
        }
    }
}

/// The real `gpu-triage` executable, with a clean environment for the database settings and a
/// data directory of its own under the system's temp dir (where a first start writes its admin
/// token), never the checkout's `./.gpu-triage`. Tests that need another set `GPU_TRIAGE_DATA`.
pub fn binary() -> std::process::Command {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let data =
        std::env::temp_dir().join(format!("gpu-triage-test-data-{}-{n}", std::process::id()));
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gpu-triage"));
    cmd.env_remove("DATABASE_URL")
        .env("GPU_TRIAGE_DATA", data)
        .env_remove("GPU_TRIAGE_PG_BINDIR")
        .env("GPU_TRIAGE_LOG", "warn");
    cmd
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral port")
}

/// A minimal HTTP/1.1 GET over a real socket: (status, body). `None` when nothing listens.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    http_get_with(port, path, &[])
}

/// `GET path` with extra request headers: (status, body).
pub fn http_get_with(port: u16, path: &str, headers: &[(&str, &str)]) -> Option<(u16, String)> {
    let raw = http_get_raw(port, path, headers)?;
    let status = raw.split(' ').nth(1)?.parse().ok()?;
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

/// `GET path` with extra request headers: the whole answer as text, head included.
pub fn http_get_raw(port: u16, path: &str, headers: &[(&str, &str)]) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .ok()?;
    let extra: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\n{extra}Connection: close\r\n\r\n"
    )
    .ok()?;
    // A server that answers before reading the whole request (a 431) may reset the
    // connection after its answer: keep what arrived.
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    (!raw.is_empty()).then(|| String::from_utf8_lossy(&raw).into_owned())
}

/// How often the waits below look at their condition again.
const POLL: Duration = Duration::from_millis(20);

/// Polls `condition` until it holds; fails the test, naming `what` it waited for, once `within`
/// has passed without it. The wait a test uses instead of a sleep before acting on a state.
pub fn wait_until(within: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        std::thread::sleep(POLL);
    }
}

/// [`wait_until`] for async tests: `condition` is awaited each round.
pub async fn wait_until_async(
    within: Duration,
    what: &str,
    mut condition: impl AsyncFnMut() -> bool,
) {
    let deadline = Instant::now() + within;
    while !condition().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Waits (30 s at most) until another session on `db`'s database is blocked on a lock while
/// running a statement that contains `statement`, as PostgreSQL reports it
/// (`pg_stat_activity.wait_event_type = 'Lock'`): a race test lets the lock go only then, so
/// the waiting side really waited.
pub async fn wait_for_lock_wait(db: &Db, statement: &str) {
    wait_for_session(db, statement, true).await;
}

/// Waits (30 s at most) until another session on `db`'s database has run (or is running) a
/// statement that contains `statement` (`pg_stat_activity.query` keeps a session's latest
/// statement): how a test sees that a background task reached a step that leaves no row behind.
pub async fn wait_for_statement(db: &Db, statement: &str) {
    wait_for_session(db, statement, false).await;
}

async fn wait_for_session(db: &Db, statement: &str, lock_wait: bool) {
    use sqlx::Connection;
    // A connection of its own, outside the pool, so that the observed sessions keep their
    // latest statement and the observer is told apart by its pid.
    let mut observer = sqlx::PgConnection::connect_with(&db.pool().connect_options())
        .await
        .expect("connect the observer session");
    let within = Duration::from_secs(30);
    let what = if lock_wait {
        format!("a session blocked on a lock in `{statement}`")
    } else {
        format!("a session that ran `{statement}`")
    };
    let deadline = Instant::now() + within;
    loop {
        let seen: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid() \
                   AND strpos(query, $1) > 0 AND (NOT $2 OR wait_event_type = 'Lock'))",
        )
        .bind(statement)
        .bind(lock_wait)
        .fetch_one(&mut observer)
        .await
        .expect("read pg_stat_activity");
        if seen {
            break;
        }
        if Instant::now() > deadline {
            let sessions: Vec<(Option<String>, Option<String>, Option<String>)> = sqlx::query_as(
                "SELECT state, wait_event_type, query FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid()",
            )
            .fetch_all(&mut observer)
            .await
            .unwrap_or_default();
            panic!("timed out after {within:?} waiting for {what}; sessions: {sessions:#?}");
        }
        tokio::time::sleep(POLL).await;
    }
    let _ = observer.close().await;
}

/// Polls `path` until it answers `want` or `secs` pass.
pub fn wait_for_status(port: u16, path: &str, want: u16, secs: u64) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if http_get(port, path).is_some_and(|(s, _)| s == want) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    false
}

/// A child process killed (and reaped) when dropped, so a failing test leaves nothing behind.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `token create` with the real binary against `url`; the printed secret.
pub fn create_token(url: &str, scopes: &str, name: &str) -> String {
    let out = binary()
        .args(["token", "create", "--scope", scopes, "--name", name])
        .env("DATABASE_URL", url)
        .output()
        .expect("run token create");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .find(|w| w.starts_with("gtr_") && w.len() > 60)
        .expect("token printed")
        .to_owned()
}

/// The real `serve` binary on `DATABASE_URL=url`, ready on the returned port.
pub fn spawn_server(url: &str) -> (KillOnDrop, u16) {
    spawn_server_with(url, &[])
}

/// [`spawn_server`] with more `serve` flags.
pub fn spawn_server_with(url: &str, flags: &[&str]) -> (KillOnDrop, u16) {
    let port = free_port();
    let child = binary()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(flags)
        .env("DATABASE_URL", url)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn serve");
    let guard = KillOnDrop(child);
    assert!(wait_for_status(port, "/readyz", 200, 60), "server ready");
    (guard, port)
}

/// Log output written to memory, for this test's thread, in the server's own format
/// (`gpu_triage::telemetry::SafeFields`).
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// Captures what this thread logs at info and above until the guard is dropped (the
    /// runtime of a `tokio::test` is this thread: the app's handlers log here).
    pub fn start() -> (Captured, tracing::subscriber::DefaultGuard) {
        // While only one dispatcher is registered, tracing-core computes a callsite's interest
        // from the dispatcher of the thread that meets it first (`has_just_one`): with this
        // test's the only one, another test's thread meeting `signed in through the provider`
        // first cached "never" for it, and the line was lost once in a full run. A second
        // dispatcher, kept for the life of the process, makes interest computed over all.
        static SECOND: OnceLock<tracing::Dispatch> = OnceLock::new();
        SECOND.get_or_init(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default()));
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .fmt_fields(gpu_triage::telemetry::SafeFields)
            .finish();
        let guard = tracing::subscriber::set_default(subscriber);
        // Interest cached by another thread while this subscriber was registered would be
        // "never" for good (see `request_id`): compute it again.
        tracing::callsite::rebuild_interest_cache();
        (captured, guard)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Every line captured so far.
    pub fn lines(&self) -> Vec<String> {
        self.text().lines().map(str::to_owned).collect()
    }

    pub fn line_with(&self, what: &str) -> String {
        let text = self.text();
        text.lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no line with {what:?} in:\n{text}"))
            .to_owned()
    }
}
