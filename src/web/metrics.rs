//! `GET /metrics` in Prometheus text format: reports ingested per category since start, and a
//! request-latency histogram per route class, kept in atomics (no locks on the request path).

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::rules::Category;

/// Upper bounds (seconds) of the latency buckets.
const BUCKETS: [f64; 11] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];
/// Route classes the histogram is split by (bounded label cardinality).
const ROUTES: [&str; 4] = ["api", "portal", "health", "other"];

/// Process-wide counters.
#[derive(Debug, Default)]
pub struct Metrics {
    ingested: [AtomicU64; 10],
    duplicates: AtomicU64,
    shed: AtomicU64,
    rate_limited: AtomicU64,
    latency: [Histogram; 4],
    /// Reproduction jobs: claimed, completed with a result, failed attempts, requeued after an
    /// expired lease, dead.
    jobs: [AtomicU64; 5],
}

/// Events of the reproduction queue counted in `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobEvent {
    /// A worker claimed a job.
    Claimed,
    /// A result was recorded.
    Completed,
    /// A worker reported that an attempt could not run.
    Failed,
    /// An expired lease was taken back and the job queued again.
    Requeued,
    /// A job used all its attempts.
    Dead,
}

impl JobEvent {
    /// The counter a lease the reaper took back moves: re-queued, or dead when out of attempts.
    #[must_use]
    pub fn reaped(state: crate::api_types::JobState) -> JobEvent {
        if state == crate::api_types::JobState::Dead {
            JobEvent::Dead
        } else {
            JobEvent::Requeued
        }
    }
}

const JOB_EVENTS: [(JobEvent, &str); 5] = [
    (JobEvent::Claimed, "claimed"),
    (JobEvent::Completed, "completed"),
    (JobEvent::Failed, "failed"),
    (JobEvent::Requeued, "requeued"),
    (JobEvent::Dead, "dead"),
];

#[derive(Debug, Default)]
struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Metrics {
    /// Counts a stored report (or a duplicate upload of one).
    pub fn report_ingested(&self, category: Category, duplicate: bool) {
        if duplicate {
            self.duplicates.fetch_add(1, Ordering::Relaxed);
        } else if let Some(i) = Category::ALL.iter().position(|c| *c == category) {
            self.ingested[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a request refused with 503 because too many were in flight.
    pub fn request_shed(&self) {
        self.shed.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request refused with 429 by a token's rate limit.
    pub fn request_rate_limited(&self) {
        self.rate_limited.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an event of the reproduction queue.
    pub fn job_event(&self, event: JobEvent) {
        if let Some(i) = JOB_EVENTS.iter().position(|(e, _)| *e == event) {
            self.jobs[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    fn observe(&self, route: usize, secs: f64) {
        let h = &self.latency[route];
        for (i, le) in BUCKETS.iter().enumerate() {
            if secs <= *le {
                h.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        h.count.fetch_add(1, Ordering::Relaxed);
        h.sum_micros
            .fetch_add((secs * 1e6) as u64, Ordering::Relaxed);
    }

    /// The Prometheus exposition text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP gpu_triage_reports_ingested_total Reports stored since start, by category."
        );
        let _ = writeln!(out, "# TYPE gpu_triage_reports_ingested_total counter");
        for (i, c) in Category::ALL.iter().enumerate() {
            let _ = writeln!(
                out,
                "gpu_triage_reports_ingested_total{{category=\"{c}\"}} {}",
                self.ingested[i].load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP gpu_triage_duplicate_uploads_total Uploads that matched a stored report."
        );
        let _ = writeln!(out, "# TYPE gpu_triage_duplicate_uploads_total counter");
        let _ = writeln!(
            out,
            "gpu_triage_duplicate_uploads_total {}",
            self.duplicates.load(Ordering::Relaxed)
        );
        for (name, help, value) in [
            (
                "gpu_triage_requests_shed_total",
                "Requests refused with 503 because too many were in flight.",
                &self.shed,
            ),
            (
                "gpu_triage_requests_rate_limited_total",
                "Requests refused with 429 by a token's rate limit.",
                &self.rate_limited,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
        }
        let _ = writeln!(
            out,
            "# HELP gpu_triage_jobs_total Reproduction job events since start."
        );
        let _ = writeln!(out, "# TYPE gpu_triage_jobs_total counter");
        for (i, (_, name)) in JOB_EVENTS.iter().enumerate() {
            let _ = writeln!(
                out,
                "gpu_triage_jobs_total{{event=\"{name}\"}} {}",
                self.jobs[i].load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP gpu_triage_http_request_duration_seconds Request latency."
        );
        let _ = writeln!(
            out,
            "# TYPE gpu_triage_http_request_duration_seconds histogram"
        );
        for (r, route) in ROUTES.iter().enumerate() {
            let h = &self.latency[r];
            for (i, le) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "gpu_triage_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"{le}\"}} {}",
                    h.buckets[i].load(Ordering::Relaxed)
                );
            }
            let count = h.count.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "gpu_triage_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {count}"
            );
            let sum = h.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
            let _ = writeln!(
                out,
                "gpu_triage_http_request_duration_seconds_sum{{route=\"{route}\"}} {sum}"
            );
            let _ = writeln!(
                out,
                "gpu_triage_http_request_duration_seconds_count{{route=\"{route}\"}} {count}"
            );
        }
        out
    }
}

/// Middleware: times every request.
pub async fn track(State(metrics): State<Arc<Metrics>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let route = if path.starts_with("/api/") {
        0
    } else if path == "/healthz" || path == "/readyz" || path == "/metrics" {
        2
    } else if path.starts_with("/static/") {
        3
    } else {
        1
    };
    let start = Instant::now();
    let res = next.run(req).await;
    metrics.observe(route, start.elapsed().as_secs_f64());
    res
}

/// `GET /metrics`: the counters in the Prometheus text format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "probes",
    responses((status = 200, description = "Prometheus text exposition format 0.0.4: reports \
        ingested by category, job events, requests shed and rate-limited, request latency.",
        content_type = "text/plain", body = String)),
)]
pub async fn show_metrics(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        metrics.render(),
    )
}
