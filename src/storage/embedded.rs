//! A private PostgreSQL cluster started from the system's PostgreSQL binaries, so that
//! `gpu-triage serve` (and the test suite) work on a fresh machine with no database set up.
//!
//! Layout under the data root (`GPU_TRIAGE_DATA`, default `./.gpu-triage`):
//! `pg/` the cluster, `run/` its unix socket (no TCP listener) and `postgres.log`,
//! `cluster.lock` held by the process that owns the running cluster.
//!
//! Ownership and recovery: the owner starts `postgres` under a tiny `sh` watchdog whose stdin is
//! a pipe from the owner. When the owner exits for any reason, even `kill -9`, the pipe closes and
//! the watchdog shuts the cluster down (fast mode), so no cluster outlives its owner. Another
//! gpu-triage process (`migrate`, `token`) that finds the lock held attaches to the running
//! cluster instead of starting a second one. A cluster that is running with nobody holding the
//! lock (its watchdog was killed too) is stopped and restarted under a new owner; a stale
//! `postmaster.pid` from a crash is removed. When started as root, `initdb` and `postgres` run as
//! the `postgres` system user, as PostgreSQL refuses to run as root.
//!
//! The watchdog also exits when `postgres` does (a crash, an OOM kill), and its stdout is a second
//! pipe to the owner that reaches end-of-file then: an event a long-running owner (`serve`) waits
//! on to restart the server in place, holding the lock all along ([`supervise`]).

use std::ffi::OsString;
use std::fs::{self, File, TryLockError};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use sqlx::postgres::PgConnectOptions;

use super::DbError;

mod run_as;
pub mod supervise;

use run_as::{create_data_root, postgres_user_if_root};

/// The database gpu-triage keeps its data in, inside the embedded cluster.
pub const DATABASE_NAME: &str = "gpu_triage";

/// The port number only names the socket file (`.s.PGSQL.5432`): there is no TCP listener, and
/// the socket lives in our own directory, so it never clashes with a system server.
const SOCKET_PORT: u16 = 5432;

/// How long a cluster may take to accept connections after `postgres` starts.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Where to look for `initdb` and `postgres`, in order. Tests build their own to check the
/// message given when nothing is found.
#[derive(Clone, Debug)]
pub struct BinarySearch {
    /// An explicit directory (`GPU_TRIAGE_PG_BINDIR`): when set, it is the only place looked at.
    pub bindir: Option<PathBuf>,
    /// Whether to ask `pg_config --bindir`.
    pub use_pg_config: bool,
    /// The `PATH` value to search.
    pub path: Option<OsString>,
    /// Parents of versioned installs, e.g. `/usr/lib/postgresql` (its `*/bin`, newest first).
    pub versioned_roots: Vec<PathBuf>,
}

impl BinarySearch {
    /// The search used by the program: `GPU_TRIAGE_PG_BINDIR`, `pg_config --bindir`, `PATH`,
    /// then `/usr/lib/postgresql/*/bin` and `/usr/local/pgsql/bin`.
    pub fn from_env() -> BinarySearch {
        BinarySearch {
            bindir: std::env::var_os("GPU_TRIAGE_PG_BINDIR").map(PathBuf::from),
            use_pg_config: true,
            path: std::env::var_os("PATH"),
            versioned_roots: vec![
                PathBuf::from("/usr/lib/postgresql"),
                PathBuf::from("/usr/local/pgsql"),
            ],
        }
    }

    /// Finds a directory holding both `initdb` and `postgres`.
    pub fn find(&self) -> Result<PgBinaries, DbError> {
        if let Some(dir) = &self.bindir {
            return PgBinaries::in_dir(dir).ok_or_else(|| DbError::NoBinaries {
                searched: format!("GPU_TRIAGE_PG_BINDIR={}", dir.display()),
            });
        }
        let mut searched = Vec::new();
        if self.use_pg_config {
            searched.push("`pg_config --bindir`".to_string());
            if let Some(found) = pg_config_bindir().and_then(|d| PgBinaries::in_dir(&d)) {
                return Ok(found);
            }
        }
        if let Some(path) = &self.path {
            searched.push("PATH".to_string());
            for dir in std::env::split_paths(path) {
                if let Some(found) = PgBinaries::in_dir(&dir) {
                    return Ok(found);
                }
            }
        }
        for root in &self.versioned_roots {
            searched.push(format!("{}/*/bin", root.display()));
            let mut candidates: Vec<PathBuf> = fs::read_dir(root)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path().join("bin"))
                .collect();
            candidates.push(root.join("bin"));
            // Newest major version first: "17" sorts after "9" only numerically.
            candidates.sort_by_key(|p| std::cmp::Reverse(version_key(p)));
            if let Some(found) = candidates.iter().find_map(|d| PgBinaries::in_dir(d)) {
                return Ok(found);
            }
        }
        Err(DbError::NoBinaries {
            searched: searched.join(", "),
        })
    }
}

fn version_key(bin: &Path) -> u32 {
    bin.parent()
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .and_then(|n| n.split('.').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn pg_config_bindir() -> Option<PathBuf> {
    let out = Command::new("pg_config")
        .arg("--bindir")
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    out.status
        .success()
        .then(|| PathBuf::from(text.trim()))
        .filter(|p| !p.as_os_str().is_empty())
}

/// A directory with the PostgreSQL server programs.
#[derive(Clone, Debug)]
pub struct PgBinaries {
    /// The directory holding `initdb`, `postgres` and `pg_ctl`.
    pub bindir: PathBuf,
}

impl PgBinaries {
    fn in_dir(dir: &Path) -> Option<PgBinaries> {
        let ok = |name: &str| {
            fs::metadata(dir.join(name)).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
        };
        (ok("initdb") && ok("postgres")).then(|| PgBinaries {
            bindir: dir.to_path_buf(),
        })
    }

    fn program(&self, name: &str) -> PathBuf {
        self.bindir.join(name)
    }
}

/// Options for starting a cluster.
#[derive(Clone, Debug, Default)]
pub struct StartOptions {
    /// Skip fsync in `initdb` and the server: for throw-away test clusters only.
    pub no_sync: bool,
}

/// A running (or attached) private cluster. Dropping it stops a cluster it owns.
#[derive(Debug)]
pub struct EmbeddedPostgres {
    root: PathBuf,
    socket_dir: PathBuf,
    bins: PgBinaries,
    run_as: Option<(u32, u32)>,
    opts: StartOptions,
    /// `Some` when this process owns the cluster (started it, restarts and stops it): the lock
    /// stays held across restarts, so no other process takes the cluster over meanwhile.
    lock: Option<File>,
    /// The server this process started, while it has not been seen to exit.
    server: Option<Server>,
}

/// One run of `postgres` under its watchdog.
#[derive(Debug)]
struct Server {
    watchdog: Child,
    stdin: Option<ChildStdin>,
}

impl EmbeddedPostgres {
    /// Starts the cluster under `root` (creating it on first use), or attaches to the one another
    /// gpu-triage process is running there. Blocking: call it from `spawn_blocking` or before the
    /// async runtime has work.
    pub fn start(
        root: &Path,
        bins: &PgBinaries,
        opts: &StartOptions,
    ) -> Result<EmbeddedPostgres, DbError> {
        let run_as = postgres_user_if_root()?;
        create_data_root(root, run_as.is_some())
            .map_err(|e| cluster_err(root, "create data directory", e))?;
        let root = fs::canonicalize(root).map_err(|e| cluster_err(root, "resolve", e))?;
        let socket_dir = socket_dir_for(&root);
        let mut cluster = EmbeddedPostgres {
            root: root.clone(),
            socket_dir,
            bins: bins.clone(),
            run_as,
            opts: opts.clone(),
            lock: None,
            server: None,
        };
        let lock_path = root.join("cluster.lock");
        let lock = File::create(&lock_path).map_err(|e| cluster_err(&lock_path, "open", e))?;
        match lock.try_lock() {
            Ok(()) => {
                cluster.lock = Some(lock);
                cluster.prepare_dirs()?;
                cluster.init_if_needed()?;
                cluster.clear_leftover()?;
                cluster.server = Some(cluster.spawn()?);
            }
            Err(TryLockError::WouldBlock) => {
                tracing::info!(root = %root.display(), "attaching to the embedded PostgreSQL another gpu-triage process runs");
            }
            Err(TryLockError::Error(e)) => return Err(cluster_err(&lock_path, "lock", e)),
        }
        cluster.wait_ready()?;
        Ok(cluster)
    }

    /// Connection options for `database` on this cluster (over its unix socket).
    pub fn connect_options(&self, database: &str) -> PgConnectOptions {
        PgConnectOptions::new_without_pgpass()
            .socket(&self.socket_dir)
            .port(SOCKET_PORT)
            .username("postgres")
            .database(database)
    }

    /// The data root this cluster lives under.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory holding the cluster's unix socket.
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// The cluster's data directory (`PGDATA`).
    pub fn data_dir(&self) -> PathBuf {
        self.root.join("pg")
    }

    /// The `pg_ctl` program of the binaries this cluster runs on (tests use it to restart the
    /// server under a running application).
    pub fn pg_ctl(&self) -> Command {
        self.command("pg_ctl")
    }

    /// Whether this process started the cluster (and will stop it).
    pub fn is_owner(&self) -> bool {
        self.lock.is_some()
    }

    /// Stops the cluster if this process owns it, waiting for a clean (fast) shutdown.
    pub fn stop(mut self) -> Result<(), DbError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), DbError> {
        let Some(mut server) = self.server.take() else {
            return Ok(());
        };
        // Closing the pipe is the stop signal: the watchdog asks postgres for a fast shutdown.
        drop(server.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match server.watchdog.try_wait() {
                Ok(Some(_)) => return Ok(()),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => break,
            }
        }
        tracing::warn!("embedded PostgreSQL did not stop in 30 s; stopping it immediately");
        let status = self
            .pg_ctl()
            .args(["stop", "-m", "immediate", "-D"])
            .arg(self.data_dir())
            .stdout(Stdio::null())
            .status();
        let _ = server.watchdog.kill();
        let _ = server.watchdog.wait();
        match status {
            Ok(s) if s.success() => Ok(()),
            _ => Err(DbError::Cluster("could not stop the cluster".into())),
        }
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bins.program(program));
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid);
        }
        cmd.env("LC_ALL", "C").env_remove("PGDATA");
        cmd
    }

    fn prepare_dirs(&self) -> Result<(), DbError> {
        if let Some((uid, gid)) = self.run_as {
            // A data root under a private home (/root is 0700) is out of the postgres user's
            // reach: say so plainly instead of letting initdb fail obscurely.
            let reachable = Command::new("/bin/sh")
                .args(["-c", "test -r \"$1\" && test -x \"$1\"", "sh"])
                .arg(&self.root)
                .uid(uid)
                .gid(gid)
                .status()
                .is_ok_and(|s| s.success());
            if !reachable {
                return Err(DbError::Cluster(format!(
                    "the postgres system user cannot reach {}; set GPU_TRIAGE_DATA to a \
                     directory it can reach (e.g. /var/lib/gpu-triage) or set DATABASE_URL",
                    self.root.display()
                )));
            }
        }
        fs::create_dir_all(&self.socket_dir)
            .map_err(|e| cluster_err(&self.socket_dir, "create", e))?;
        self.give_to_postgres(&self.socket_dir)
    }

    fn give_to_postgres(&self, path: &Path) -> Result<(), DbError> {
        use std::os::unix::fs::PermissionsExt;
        if let Some((uid, gid)) = self.run_as {
            std::os::unix::fs::chown(path, Some(uid), Some(gid))
                .map_err(|e| cluster_err(path, "chown to the postgres user", e))?;
        }
        fs::set_permissions(path, fs::Permissions::from_mode(0o700))
            .map_err(|e| cluster_err(path, "chmod", e))
    }

    fn init_if_needed(&self) -> Result<(), DbError> {
        let data = self.data_dir();
        if data.join("PG_VERSION").is_file() {
            return Ok(());
        }
        // initdb into a scratch directory and rename it into place, so a run killed during
        // initdb leaves nothing that looks like a cluster.
        let scratch = self.root.join("pg.init");
        if scratch.exists() {
            fs::remove_dir_all(&scratch).map_err(|e| cluster_err(&scratch, "remove", e))?;
        }
        fs::create_dir_all(&scratch).map_err(|e| cluster_err(&scratch, "create", e))?;
        self.give_to_postgres(&scratch)?;
        tracing::info!(dir = %data.display(), "creating the embedded PostgreSQL cluster");
        let mut cmd = self.command("initdb");
        cmd.arg("-D").arg(&scratch).args([
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-locale",
        ]);
        if self.opts.no_sync {
            cmd.arg("--no-sync");
        }
        let out = cmd
            .output()
            .map_err(|e| cluster_err(&self.bins.program("initdb"), "run", e))?;
        if !out.status.success() {
            return Err(DbError::Cluster(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        fs::rename(&scratch, &data).map_err(|e| cluster_err(&data, "move into place", e))
    }

    /// Makes the data directory startable after a crash: stops an orphaned server (one nobody
    /// holds the lock for) and removes a stale `postmaster.pid`.
    fn clear_leftover(&self) -> Result<(), DbError> {
        let pid_file = self.data_dir().join("postmaster.pid");
        let Some(pid) = read_postmaster_pid(&pid_file) else {
            return Ok(());
        };
        if is_postgres_process(pid) {
            tracing::warn!(
                pid,
                "stopping an orphaned embedded PostgreSQL left by a killed run"
            );
            let status = self
                .pg_ctl()
                .args(["stop", "-w", "-m", "fast", "-D"])
                .arg(self.data_dir())
                .stdout(Stdio::null())
                .status()
                .map_err(|e| cluster_err(&self.bins.program("pg_ctl"), "run", e))?;
            // The killed run's watchdog may be stopping it too (it does when its parent dies):
            // then `pg_ctl` finds the server gone, which is what was wanted.
            // (A pid reused by another server, or a zombie, still reads `postgres`; the PID file
            // naming it is what says the server is still there.)
            if !status.success()
                && read_postmaster_pid(&pid_file) == Some(pid)
                && is_postgres_process(pid)
            {
                return Err(DbError::Cluster(format!(
                    "could not stop the orphaned server (pid {pid})"
                )));
            }
            if read_postmaster_pid(&pid_file) == Some(pid) && !is_postgres_process(pid) {
                fs::remove_file(&pid_file).map_err(|e| cluster_err(&pid_file, "remove", e))?;
            }
        } else {
            tracing::info!(pid, "removing a stale postmaster.pid left by a crash");
            fs::remove_file(&pid_file).map_err(|e| cluster_err(&pid_file, "remove", e))?;
        }
        Ok(())
    }

    fn spawn(&self) -> Result<Server, DbError> {
        // postgres runs in the background; a reader subshell turns the owner's pipe closing
        // into a fast shutdown, while the watchdog itself waits for postgres and exits with it,
        // closing its stdout: the owner's sign that the server is gone. Only the watchdog holds
        // that stdout (postgres writes to its log, the reader to /dev/null), and the reader is
        // ended with it, so nothing it left behind holds the owner's pipes.
        const WATCHDOG: &str = r#"
exec 3<&0
"$1" -D "$2" -k "$3" -p "$4" -c listen_addresses= -c unix_socket_permissions=0700 $6 </dev/null >>"$5" 2>&1 3<&- &
pid=$!
trap 'kill -INT "$pid" 2>/dev/null' INT TERM HUP
( read -r _ <&3 || true; kill -INT "$pid" 2>/dev/null ) </dev/null >/dev/null 2>&1 &
reader=$!
exec 3<&-
wait "$pid"
status=$?
# A trapped signal ends `wait` early (status > 128) while postgres is still stopping.
while [ "$status" -gt 128 ] && kill -0 "$pid" 2>/dev/null; do
    wait "$pid"
    status=$?
done
kill "$reader" 2>/dev/null
exit "$status"
"#;
        let log = self.socket_dir.join("postgres.log");
        let extra = if self.opts.no_sync {
            "-c fsync=off"
        } else {
            ""
        };
        let mut cmd = Command::new("/bin/sh");
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid);
        }
        cmd.arg("-c")
            .arg(WATCHDOG)
            .arg("gpu-triage-pg-watchdog")
            .arg(self.bins.program("postgres"))
            .arg(self.data_dir())
            .arg(&self.socket_dir)
            .arg(SOCKET_PORT.to_string())
            .arg(&log)
            .arg(extra)
            .env("LC_ALL", "C")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            // Own process group: a Ctrl-C in the terminal reaches the server, which then stops
            // the cluster after draining requests, not the cluster first.
            .process_group(0);
        let mut watchdog = cmd
            .spawn()
            .map_err(|e| cluster_err(Path::new("/bin/sh"), "spawn", e))?;
        let stdin = watchdog.stdin.take();
        Ok(Server { watchdog, stdin })
    }

    fn wait_ready(&mut self) -> Result<(), DbError> {
        let pid_file = self.data_dir().join("postmaster.pid");
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if postmaster_status(&pid_file).as_deref() == Some("ready") {
                return Ok(());
            }
            if let Some(server) = &mut self.server
                && let Ok(Some(status)) = server.watchdog.try_wait()
            {
                self.server = None;
                return Err(DbError::Cluster(format!(
                    "postgres exited during start ({status}); its log says: {}",
                    log_tail(&self.socket_dir.join("postgres.log"))
                )));
            }
            if Instant::now() > deadline {
                return Err(DbError::Cluster(format!(
                    "not ready after {} s; its log says: {}",
                    START_TIMEOUT.as_secs(),
                    log_tail(&self.socket_dir.join("postgres.log"))
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for EmbeddedPostgres {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::error!(error = %e, "stopping the embedded PostgreSQL");
        }
    }
}

fn cluster_err(path: &Path, what: &str, err: std::io::Error) -> DbError {
    DbError::Cluster(format!("{what} {}: {err}", path.display()))
}

/// Unix socket paths are limited to 107 bytes; a deep data directory gets its socket in a
/// short per-directory folder under /tmp instead.
fn socket_dir_for(root: &Path) -> PathBuf {
    let preferred = root.join("run");
    if preferred.as_os_str().len() + "/.s.PGSQL.5432.lock".len() < 100 {
        return preferred;
    }
    use sha2::Digest;
    let digest = sha2::Sha256::digest(root.as_os_str().as_encoded_bytes());
    let short: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    std::env::temp_dir().join(format!("gpu-triage-{short}"))
}

/// When running as root, the uid/gid of the `postgres` system user (PostgreSQL refuses root).
fn read_postmaster_pid(pid_file: &Path) -> Option<u32> {
    fs::read_to_string(pid_file)
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// The status word on line 8 of `postmaster.pid` (`starting`, `ready`, `stopping`).
fn postmaster_status(pid_file: &Path) -> Option<String> {
    let text = fs::read_to_string(pid_file).ok()?;
    let pid: u32 = text.lines().next()?.trim().parse().ok()?;
    if !is_postgres_process(pid) {
        return None;
    }
    text.lines().nth(7).map(|s| s.trim().to_string())
}

fn is_postgres_process(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "postgres")
}

fn log_tail(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(5).collect();
    let tail: Vec<&str> = lines.into_iter().rev().collect();
    if tail.is_empty() {
        format!("(nothing in {})", log.display())
    } else {
        tail.join(" | ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binaries_name_the_package_and_database_url() {
        let search = BinarySearch {
            bindir: None,
            use_pg_config: false,
            path: Some(OsString::from("/nonexistent/bin")),
            versioned_roots: vec![PathBuf::from("/nonexistent/postgresql")],
        };
        let msg = search.find().unwrap_err().to_string();
        assert!(msg.contains("apt-get install postgresql"), "{msg}");
        assert!(msg.contains("DATABASE_URL"), "{msg}");
        assert!(msg.contains("/nonexistent/postgresql/*/bin"), "{msg}");
    }

    #[test]
    fn an_explicit_bindir_without_postgres_is_reported() {
        let search = BinarySearch {
            bindir: Some(PathBuf::from("/tmp")),
            use_pg_config: true,
            path: None,
            versioned_roots: vec![],
        };
        let msg = search.find().unwrap_err().to_string();
        assert!(msg.contains("GPU_TRIAGE_PG_BINDIR=/tmp"), "{msg}");
    }

    #[test]
    fn newest_major_version_sorts_first() {
        let mut dirs = [
            PathBuf::from("/x/9.6/bin"),
            PathBuf::from("/x/17/bin"),
            PathBuf::from("/x/15/bin"),
        ];
        dirs.sort_by_key(|p| std::cmp::Reverse(version_key(p)));
        assert_eq!(dirs[0], PathBuf::from("/x/17/bin"));
        assert_eq!(dirs[2], PathBuf::from("/x/9.6/bin"));
    }

    #[test]
    fn long_data_roots_get_a_short_socket_dir() {
        let short = socket_dir_for(Path::new("/srv/gt"));
        assert_eq!(short, PathBuf::from("/srv/gt/run"));
        let deep = PathBuf::from(format!("/srv/{}", "d".repeat(120)));
        let dir = socket_dir_for(&deep);
        assert!(dir.as_os_str().len() < 60, "{}", dir.display());
        assert_eq!(dir, socket_dir_for(&deep), "stable for the same root");
    }
}
