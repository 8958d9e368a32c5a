//! Keeps the embedded cluster running under a long-lived owner (`serve`). Without it, a
//! PostgreSQL that dies (a crash, the OOM killer, an operator's `kill`) stays dead and `/readyz`
//! answers 503 until someone restarts the whole service.
//!
//! The watchdog exits with `postgres` and closes its stdout, so the supervisor waits on that pipe
//! (an event, no polling), logs the exit, and restarts the server on the same data directory and
//! socket while the process keeps the cluster lock. The pool needs no help: it tests a connection
//! before handing it out and replaces one whose server died. Restarts after a crash wait 1 s,
//! doubling while the server keeps dying (up to 30 s), so a server that cannot start is retried
//! without spinning. Supervision ends before the cluster is stopped, so a clean stop is never
//! taken for a crash.

use std::process::{ChildStdout, ExitStatus};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::EmbeddedPostgres;
use crate::storage::DbError;

/// The wait before the first restart after a crash.
const FIRST_DELAY: Duration = Duration::from_secs(1);

/// The longest wait between restarts of a server that keeps dying.
const MAX_DELAY: Duration = Duration::from_secs(30);

/// A server that stayed up this long counts as healthy: its next crash waits [`FIRST_DELAY`]
/// again.
const STABLE_AFTER: Duration = Duration::from_secs(60);

/// The cluster handed to its supervising task. Dropping this ends supervision too (and the task
/// then drops the cluster, which stops it); [`Supervised::stop`] does so in order and says how
/// the stop went.
#[derive(Debug)]
pub struct Supervised {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<EmbeddedPostgres, DbError>>,
}

impl EmbeddedPostgres {
    /// Hands the cluster to a background task that restarts its server whenever it dies, for
    /// as long as this process owns it. A cluster attached from another process is only held
    /// (its owner supervises it). Needs a Tokio runtime.
    pub fn supervise(self) -> Supervised {
        let (stop, stopped) = oneshot::channel();
        Supervised {
            stop,
            task: tokio::spawn(supervise(self, stopped)),
        }
    }
}

impl Supervised {
    /// Ends supervision, then stops the cluster (when this process owns it).
    pub async fn stop(self) -> Result<(), DbError> {
        // Should the task have ended already, the send fails harmlessly and the join below
        // tells how it ended.
        let _ = self.stop.send(());
        let cluster = self
            .task
            .await
            .map_err(|e| DbError::Cluster(format!("the supervising task failed: {e}")))??;
        tokio::task::spawn_blocking(move || cluster.stop())
            .await
            .map_err(|e| DbError::Cluster(format!("the stopping task failed: {e}")))?
    }
}

/// The steps of a restart in place, each blocking (run off the async threads).
impl EmbeddedPostgres {
    /// The read end of a pipe from the running server's watchdog, which reaches end-of-file when
    /// the server has exited, whatever the cause. `None` when this process runs no server (it is
    /// attached, or the server exited) or the pipe was taken already.
    fn take_exit_pipe(&mut self) -> Option<ChildStdout> {
        self.server.as_mut()?.watchdog.stdout.take()
    }

    /// Once the exit pipe has reached end-of-file: reaps the exited server and says how it
    /// ended. `None` when no server was running. Blocking.
    fn collect_exit(&mut self) -> Option<ServerExit> {
        let mut server = self.server.take()?;
        drop(server.stdin.take());
        server.watchdog.wait().ok().map(ServerExit)
    }

    /// Starts the server again on the same data directory and socket, after
    /// [`collect_exit`](Self::collect_exit), keeping the lock this process holds. On failure
    /// nothing is left running and the call may be repeated. Blocking.
    fn restart(&mut self) -> Result<(), DbError> {
        if self.lock.is_none() {
            return Err(DbError::Cluster(
                "only the process that owns the cluster can restart it".into(),
            ));
        }
        if self.server.is_some() {
            return Err(DbError::Cluster("the server is still running".into()));
        }
        // The data directory must be there already: initdb here would trade the data for an
        // empty cluster without a word.
        if !self.data_dir().join("PG_VERSION").is_file() {
            return Err(DbError::Cluster(format!(
                "{} is not a cluster any more; not creating an empty one in its place",
                self.data_dir().display()
            )));
        }
        let started = self.prepare_dirs().and_then(|()| {
            self.clear_leftover()?;
            self.server = Some(self.spawn()?);
            self.wait_ready()
        });
        if started.is_err() {
            // A server that started but never became ready is stopped, so a retry starts clean.
            if let Err(e) = self.shutdown() {
                tracing::warn!(error = %e, "stopping a server that did not become ready");
            }
        }
        started
    }
}

/// How a server this process started ended, in words for the log.
#[derive(Clone, Copy, Debug)]
struct ServerExit(ExitStatus);

impl std::fmt::Display for ServerExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::os::unix::process::ExitStatusExt;
        // The watchdog exits with postgres's status, which `sh` gives as 128 + N for signal N.
        match (self.0.code(), self.0.signal()) {
            (Some(code), _) if code > 128 => write!(f, "killed by signal {}", code - 128),
            (Some(code), _) => write!(f, "exit code {code}"),
            (None, Some(signal)) => write!(f, "its watchdog was killed by signal {signal}"),
            (None, None) => write!(f, "{}", self.0),
        }
    }
}

/// The supervising task: hands the cluster back, still running, once told to stop. An error
/// only when a blocking step failed without returning the cluster (which stopped it).
async fn supervise(
    mut cluster: EmbeddedPostgres,
    mut stop: oneshot::Receiver<()>,
) -> Result<EmbeddedPostgres, DbError> {
    let mut delay = FIRST_DELAY;
    loop {
        let Some(pipe) = cluster.take_exit_pipe() else {
            // Not ours to restart (attached to another process's cluster).
            let _ = (&mut stop).await;
            return Ok(cluster);
        };
        let up_since = Instant::now();
        tokio::select! {
            _ = &mut stop => return Ok(cluster),
            () = server_exited(pipe) => {}
        }
        let exit;
        (cluster, exit) = blocking(cluster, EmbeddedPostgres::collect_exit).await?;
        if up_since.elapsed() >= STABLE_AFTER {
            delay = FIRST_DELAY;
        }
        tracing::warn!(
            "embedded PostgreSQL exited ({}); restarting it in {} s (its log: {})",
            exit.map_or_else(|| "status unknown".to_string(), |e| e.to_string()),
            delay.as_secs(),
            cluster.socket_dir().join("postgres.log").display()
        );
        loop {
            tokio::select! {
                _ = &mut stop => return Ok(cluster),
                () = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(MAX_DELAY);
            let restarted;
            (cluster, restarted) = blocking(cluster, EmbeddedPostgres::restart).await?;
            match restarted {
                Ok(()) => {
                    tracing::info!(
                        dir = %cluster.data_dir().display(),
                        "embedded PostgreSQL restarted and ready"
                    );
                    break;
                }
                Err(e) => tracing::error!(
                    error = %e,
                    "restarting the embedded PostgreSQL failed; trying again in {} s",
                    delay.as_secs()
                ),
            }
        }
    }
}

/// Resolves when the watchdog behind `pipe` has exited (end-of-file). Should the pipe not be
/// watchable, supervision cannot see an exit: that is logged and this never resolves.
async fn server_exited(pipe: ChildStdout) {
    let mut pipe = match tokio::process::ChildStdout::from_std(pipe) {
        Ok(pipe) => pipe,
        Err(e) => {
            tracing::error!(
                error = %e,
                "cannot watch the embedded PostgreSQL; it will not be restarted if it dies"
            );
            return std::future::pending().await;
        }
    };
    let mut buf = [0u8; 64];
    // The watchdog writes nothing: any read but end-of-file (or an error) is waited past.
    while let Ok(1..) = pipe.read(&mut buf).await {}
}

/// Runs a blocking cluster operation off the async threads and hands the cluster back with its
/// result. Should the operation panic, or the runtime refuse the job while shutting down, the
/// cluster is dropped (which stops it) and the error says so.
async fn blocking<T: Send + 'static>(
    mut cluster: EmbeddedPostgres,
    op: fn(&mut EmbeddedPostgres) -> T,
) -> Result<(EmbeddedPostgres, T), DbError> {
    tokio::task::spawn_blocking(move || {
        let out = op(&mut cluster);
        (cluster, out)
    })
    .await
    .map_err(|e| {
        tracing::error!(error = %e, "supervising the embedded PostgreSQL stopped");
        DbError::Cluster(format!(
            "a supervision step failed, stopping the cluster: {e}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    #[test]
    fn exits_are_told_in_words() {
        // (wait status as the kernel gives it, the words for the log)
        let cases = [
            (137 << 8, "killed by signal 9"),
            (1 << 8, "exit code 1"),
            (0, "exit code 0"),
            (9, "its watchdog was killed by signal 9"),
        ];
        for (raw, words) in cases {
            assert_eq!(ServerExit(ExitStatus::from_raw(raw)).to_string(), words);
        }
    }
}
