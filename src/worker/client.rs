//! The worker's side of the jobs wire contract (`POST /api/v1/jobs/claim`, `.../heartbeat`,
//! `.../result`): request and response types, and each response sorted into what the worker
//! does next. Blocking `ureq`: the worker has one job at a time and a heartbeat thread.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use ureq::Agent;

use crate::api_types::LeaseRequest;
pub use crate::api_types::{
    ClaimRequest, ClaimedJob as Job, HeartbeatReply as Heartbeat, JobResult,
};

/// What a request came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply<T> {
    /// Success with its value.
    Ok(T),
    /// 204 on a claim: nothing queued.
    Empty,
    /// 409 (or 404): the lease is gone; drop the job.
    LeaseLost(String),
    /// Worth retrying (connection failure, 408, 429, 5xx): why, and `Retry-After`.
    Transient(String, Option<Duration>),
    /// Retrying will not help (401, 403, 413, 422, ...).
    Rejected(String),
}

/// The server and the token.
#[derive(Clone)]
pub struct Client {
    agent: Agent,
    server: String,
    token: String,
}

impl Client {
    /// A client for `server` (validated base URL without a trailing slash).
    pub fn new(server: String, token: String) -> Client {
        let agent = Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_connect(Some(Duration::from_secs(10)))
            // Above the longest long-poll (30 s) and a 2 MiB upload on a slow link.
            .timeout_global(Some(Duration::from_secs(120)))
            .user_agent(concat!("gpu-triage-worker/", env!("CARGO_PKG_VERSION")))
            .build()
            .new_agent();
        Client {
            agent,
            server,
            token,
        }
    }

    /// Long-polls for a job.
    pub fn claim(&self, request: &ClaimRequest) -> Reply<Job> {
        // The wait goes in the query, where the API documents it (0-30 s); the body's
        // `wait_secs` stays for servers that predate the parameter.
        let path = format!("/api/v1/jobs/claim?wait={}", request.wait_secs);
        self.post(&path, request)
    }

    /// Extends the lease of `job`.
    pub fn heartbeat(&self, job: &Job) -> Reply<Heartbeat> {
        let path = format!("/api/v1/jobs/{}/heartbeat", job.job_id);
        let request = LeaseRequest {
            lease_token: job.lease_token.clone(),
        };
        self.post(&path, &request)
    }

    /// Posts the result once (the caller retries).
    /// The reply is read as JSON only for the log line: the worker needs nothing from it.
    pub fn result(&self, job_id: i64, result: &JobResult) -> Reply<serde_json::Value> {
        self.post(&format!("/api/v1/jobs/{job_id}/result"), result)
    }

    fn post<T: for<'de> Deserialize<'de>>(&self, path: &str, body: &impl Serialize) -> Reply<T> {
        let body = match serde_json::to_vec(body) {
            Ok(body) => body,
            Err(e) => return Reply::Rejected(format!("cannot encode the request: {e}")),
        };
        let sent = self
            .agent
            .post(format!("{}{path}", self.server))
            .header("Authorization", format!("Bearer {}", self.token))
            .header("Content-Type", "application/json")
            .send(&body[..]);
        let mut response = match sent {
            Ok(response) => response,
            Err(e) => return Reply::Transient(format!("cannot reach the server: {e}"), None),
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok())
            .map(Duration::from_secs);
        let text = response
            .body_mut()
            .with_config()
            .limit(4 << 20)
            .read_to_string()
            .unwrap_or_default();
        sort_reply(status, retry_after, &text)
    }
}

/// Sorts a response into the worker's next step.
fn sort_reply<T: for<'de> Deserialize<'de>>(
    status: u16,
    retry_after: Option<Duration>,
    body: &str,
) -> Reply<T> {
    let said = || {
        let value: Option<serde_json::Value> = serde_json::from_str(body).ok();
        let field = |name: &str| {
            value
                .as_ref()?
                .get("error")?
                .get(name)?
                .as_str()
                .map(str::to_owned)
        };
        match (field("code"), field("message")) {
            (Some(code), Some(message)) => format!("{status} {code}: {message}"),
            _ => format!("{status}: {}", body.lines().next().unwrap_or("").trim()),
        }
    };
    match status {
        204 => Reply::Empty,
        200..=299 => match serde_json::from_str(body) {
            Ok(value) => Reply::Ok(value),
            Err(e) => Reply::Transient(format!("unreadable {status} response: {e}"), None),
        },
        404 | 409 => Reply::LeaseLost(said()),
        408 | 429 | 500..=599 => {
            Reply::Transient(format!("server answered {}", said()), retry_after)
        }
        401 => Reply::Rejected(format!(
            "{}; the token is missing, unknown or revoked",
            said()
        )),
        403 => Reply::Rejected(format!("{}; the token needs the worker scope", said())),
        _ => Reply::Rejected(said()),
    }
}

/// Delay before attempt `attempt + 1` (`attempt` is 1-based): `Retry-After` capped at 30 s,
/// else 0.5 s doubling up to `max`.
pub fn backoff(attempt: u32, retry_after: Option<Duration>, max: Duration) -> Duration {
    let doubled = Duration::from_millis(500).saturating_mul(1 << attempt.saturating_sub(1).min(16));
    retry_after.map_or(doubled.min(max), |d| d.min(Duration::from_secs(30)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(status: u16, body: &str) -> Reply<Heartbeat> {
        sort_reply(status, None, body)
    }

    #[test]
    fn responses_are_sorted_by_what_the_worker_does_next() {
        let err = |code: &str| format!(r#"{{"error":{{"code":"{code}","message":"m"}}}}"#);
        assert_eq!(
            sorted(200, r#"{"lease_secs":60}"#),
            Reply::Ok(Heartbeat { lease_secs: 60 })
        );
        assert_eq!(sorted(204, ""), Reply::Empty);
        assert_eq!(
            sorted(409, &err("stale_lease")),
            Reply::LeaseLost("409 stale_lease: m".into())
        );
        assert!(matches!(sorted(404, ""), Reply::LeaseLost(_)));
        assert_eq!(
            sort_reply::<Heartbeat>(503, Some(Duration::from_secs(2)), &err("db")),
            Reply::Transient(
                "server answered 503 db: m".into(),
                Some(Duration::from_secs(2))
            )
        );
        assert!(matches!(sorted(200, "<html>"), Reply::Transient(..)));
        assert!(matches!(sorted(502, "Bad Gateway"), Reply::Transient(..)));
        assert!(
            matches!(sorted(403, &err("forbidden")), Reply::Rejected(m) if m.contains("worker scope"))
        );
        assert_eq!(
            sorted(422, &err("gpu_required")),
            Reply::Rejected("422 gpu_required: m".into())
        );
    }

    #[test]
    fn retries_back_off_and_honour_retry_after() {
        let ms = Duration::from_millis;
        let max = Duration::from_secs(8);
        assert_eq!(backoff(1, None, max), ms(500));
        assert_eq!(backoff(3, None, max), ms(2000));
        assert_eq!(backoff(30, None, max), max);
        assert_eq!(backoff(2, Some(ms(0)), max), ms(0));
        assert_eq!(
            backoff(2, Some(Duration::from_secs(600)), max),
            Duration::from_secs(30)
        );
    }
}
