//! What a pending reproduction is doing, as the report page says it: how long a queued job has
//! waited and whether any worker is there to take it (naming the workers seen recently, or how
//! to start one), and for a running job which worker has it, for how long, which attempt, and
//! its last heartbeat; plus the line the header card shows once a run found the true failing
//! line. Pure: built from the job rows, the workers seen and the page's clock (`Layout::now`,
//! so the page reads one clock; "3 minutes ago" is the portal's [`When`]), so every sentence is
//! unit-tested without a server.

use crate::api_types::{JobState, Needs};
use crate::app::reproduce::JobView;
use crate::app::reproduce::UserFrame;
use crate::app::reproduce::workers::SEEN_WINDOW_SECS;
use crate::app::reproduce::workers::Seen;
use crate::time::Timestamp;

use super::when::When;

/// How often a page with a pending job refreshes itself, in seconds.
pub const REFRESH_SECS: u32 = 10;

/// A heartbeat older than this is overdue (workers send one every ~15 s).
const OVERDUE_SECS: i64 = 60;

/// What a pending job's status needs beyond the job: the workers seen, how to start one, and
/// the page's clock.
#[derive(Clone, Copy, Debug)]
pub struct StatusContext<'a> {
    pub seen: &'a Seen,
    /// Where workers reach this server (`--server`).
    pub server_url: &'a str,
    /// When the page is drawn.
    pub now: Timestamp,
}

/// A moment and how long before the page it was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ago {
    pub at: Timestamp,
    /// "3 minutes ago", "just now" (the portal's [`When`] words).
    pub ago: String,
    /// "3 minutes": how long since.
    pub span: String,
}

impl Ago {
    /// `at` as seen at `now`.
    #[must_use]
    pub fn new(at: Timestamp, now: Timestamp) -> Ago {
        Ago {
            at,
            ago: When::new(at, now).words(),
            span: span(now.unix() - at.unix()),
        }
    }
}

/// "12 seconds", "1 minute", "3 hours", "2 days" (a negative span, clock skew, is 0 seconds).
#[must_use]
pub fn span(secs: i64) -> String {
    let secs = secs.max(0);
    let (n, unit) = match secs {
        0..=59 => (secs, "second"),
        60..=3599 => (secs / 60, "minute"),
        3600..=86_399 => (secs / 3600, "hour"),
        _ => (secs / 86_400, "day"),
    };
    if n == 1 {
        format!("1 {unit}")
    } else {
        format!("{n} {unit}s")
    }
}

/// A worker as the status names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenName {
    pub name: String,
    /// "NVIDIA H100 80GB HBM3", "no GPU"; none when it never said.
    pub gear: Option<String>,
}

/// Who could take a queued job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkersLine {
    /// The window "recently" means, in minutes.
    pub minutes: u32,
    /// Workers seen in the window.
    pub count: i64,
    /// The most recent of them.
    pub named: Vec<SeenName>,
    /// Seen but not named.
    pub more: i64,
    /// Workers were seen, but none can run this job (it needs a GPU; they have none).
    pub none_able: bool,
    /// The command that starts a worker against this server.
    pub command: String,
    /// The job may also run on a worker without a GPU (`--no-gpu`).
    pub cpu_ok: bool,
}

impl WorkersLine {
    /// Say how to start a worker: nobody seen, or nobody who can take the job.
    #[must_use]
    pub fn needs_one(&self) -> bool {
        self.count == 0 || self.none_able
    }
}

/// What a pending job is doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobStatus {
    /// Waiting for a worker.
    Queued {
        /// When it (last) entered the queue.
        since: Ago,
        /// Back in the queue after a failed attempt.
        again: bool,
        attempts: u32,
        max_attempts: u32,
        workers: WorkersLine,
    },
    /// A worker has it.
    Running {
        worker: String,
        since: Ago,
        attempt: u32,
        max_attempts: u32,
        heartbeat: Option<Ago>,
        /// No sign of life for over a minute: the worker may be gone.
        overdue: bool,
    },
}

impl JobStatus {
    /// The status of pending job `j`; `None` for a finished one.
    #[must_use]
    pub fn of(j: &JobView, ctx: &StatusContext<'_>) -> Option<JobStatus> {
        let now = ctx.now;
        match j.state {
            JobState::Queued => Some(JobStatus::Queued {
                since: Ago::new(j.updated_at, now),
                again: j.attempts > 0,
                attempts: j.attempts,
                max_attempts: j.max_attempts,
                workers: workers_line(ctx, j.needs),
            }),
            JobState::Running => {
                let since = j.claimed_at.unwrap_or(j.updated_at);
                let last_sign = j.heartbeat_at.unwrap_or(since);
                Some(JobStatus::Running {
                    worker: j.worker.clone(),
                    since: Ago::new(since, now),
                    attempt: j.attempts,
                    max_attempts: j.max_attempts,
                    heartbeat: j.heartbeat_at.map(|h| Ago::new(h, now)),
                    overdue: now.unix() - last_sign.unix() > OVERDUE_SECS,
                })
            }
            JobState::Done | JobState::Dead => None,
        }
    }

    /// One sentence for the report's header card.
    #[must_use]
    pub fn headline(&self) -> String {
        match self {
            JobStatus::Queued { since, workers, .. } => {
                let who = if workers.count == 0 {
                    format!("no worker seen in the last {} minutes", workers.minutes)
                } else if workers.none_able {
                    "no worker with a GPU seen recently".to_owned()
                } else {
                    format!(
                        "{} worker{} seen recently",
                        workers.count,
                        if workers.count == 1 { "" } else { "s" }
                    )
                };
                format!("Reproduction queued {}; {who}.", since.ago)
            }
            JobStatus::Running {
                worker,
                since,
                attempt,
                max_attempts,
                ..
            } => format!(
                "Reproduction running on {worker} for {} (attempt {attempt} of {max_attempts}).",
                since.span
            ),
        }
    }
}

fn workers_line(ctx: &StatusContext<'_>, needs: Needs) -> WorkersLine {
    let seen = ctx.seen;
    let named: Vec<SeenName> = seen
        .workers
        .iter()
        .map(|w| SeenName {
            name: w.name.clone(),
            gear: match (&w.gpu_name, w.no_gpu) {
                (Some(g), false) => Some(g.clone()),
                (_, true) => Some("no GPU".to_owned()),
                (None, false) => None,
            },
        })
        .collect();
    WorkersLine {
        minutes: SEEN_WINDOW_SECS / 60,
        count: seen.count,
        more: (seen.count - named.len() as i64).max(0),
        named,
        none_able: needs == Needs::Gpu && seen.count > 0 && seen.with_gpu == 0,
        command: format!(
            "gpu-triage worker --server {} --token gtr_… --python /path/to/venv/bin/python",
            ctx.server_url
        ),
        cpu_ok: needs == Needs::Any,
    }
}

/// The true failing line a finished run found, for the header card.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrueLine {
    pub job_id: i64,
    /// `repro.py:4`.
    pub at: String,
    /// The source line there, as Python printed it.
    pub code: Option<String>,
    /// The run had CUDA redirected to the CPU (not `CUDA_LAUNCH_BLOCKING=1` on a GPU).
    pub cpu: bool,
    /// The run put the failure elsewhere than the uploaded log does.
    pub moved: bool,
}

impl TrueLine {
    /// The header line for run `job_id`'s synchronous failing frame.
    #[must_use]
    pub fn new(job_id: i64, frame: &UserFrame, cpu: bool, moved: bool) -> TrueLine {
        TrueLine {
            job_id,
            at: format!("{}:{}", frame.file, frame.line),
            code: frame.code.clone(),
            cpu,
            moved,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::reproduce::workers::SeenWorker;

    const NOW: i64 = 1_800_000_000;

    fn at(secs_before: i64) -> Timestamp {
        Timestamp::from_unix(NOW - secs_before)
    }

    fn seen(workers: &[(&str, Option<&str>, bool)], count: i64) -> Seen {
        Seen {
            count,
            with_gpu: workers.iter().filter(|w| !w.2).count() as i64,
            workers: workers
                .iter()
                .map(|(name, gpu, no_gpu)| SeenWorker {
                    name: (*name).to_owned(),
                    gpu_name: gpu.map(str::to_owned),
                    no_gpu: *no_gpu,
                    last_seen_at: at(10),
                })
                .collect(),
        }
    }

    fn job(state: JobState, needs: Needs) -> JobView {
        JobView {
            id: 7,
            state,
            attempts: 0,
            max_attempts: 3,
            last_error: String::new(),
            dead_reason: String::new(),
            worker: String::new(),
            created_at: at(600),
            updated_at: at(180),
            claimed_at: None,
            heartbeat_at: None,
            needs,
            requeued_from: None,
            requeued_by: String::new(),
            history: Vec::new(),
            reproduction: None,
        }
    }

    #[test]
    fn spans_read_in_the_largest_whole_unit() {
        let cases = [
            (-3, "0 seconds"),
            (0, "0 seconds"),
            (1, "1 second"),
            (59, "59 seconds"),
            (60, "1 minute"),
            (179, "2 minutes"),
            (3600, "1 hour"),
            (7300, "2 hours"),
            (86_400, "1 day"),
            (3 * 86_400 + 5, "3 days"),
        ];
        for (secs, want) in cases {
            assert_eq!(span(secs), want, "{secs}");
        }
    }

    #[test]
    fn a_queued_job_says_since_when_and_who_could_take_it() {
        let nobody = seen(&[], 0);
        let ctx = StatusContext {
            seen: &nobody,
            server_url: "https://triage.example.com",
            now: at(0),
        };
        let status = JobStatus::of(&job(JobState::Queued, Needs::Any), &ctx).expect("pending");
        let JobStatus::Queued {
            since,
            again,
            workers,
            ..
        } = &status
        else {
            panic!("{status:?}")
        };
        assert_eq!(since.ago, "3 minutes ago");
        assert!(!again);
        assert_eq!((workers.count, workers.minutes), (0, 5));
        assert!(workers.needs_one() && workers.cpu_ok);
        assert!(
            workers
                .command
                .starts_with("gpu-triage worker --server https://triage.example.com --token "),
            "{}",
            workers.command
        );
        assert_eq!(
            status.headline(),
            "Reproduction queued 3 minutes ago; no worker seen in the last 5 minutes."
        );

        let two = seen(
            &[
                ("gpu-box-1", Some("NVIDIA H100"), false),
                ("cpu-box", None, true),
            ],
            3,
        );
        let ctx = StatusContext {
            seen: &two,
            server_url: "http://x",
            now: at(0),
        };
        let Some(JobStatus::Queued { workers, .. }) =
            JobStatus::of(&job(JobState::Queued, Needs::Gpu), &ctx)
        else {
            panic!("queued")
        };
        assert_eq!(
            workers.named,
            vec![
                SeenName {
                    name: "gpu-box-1".into(),
                    gear: Some("NVIDIA H100".into())
                },
                SeenName {
                    name: "cpu-box".into(),
                    gear: Some("no GPU".into())
                }
            ]
        );
        assert_eq!(workers.more, 1);
        assert!(!workers.none_able && !workers.needs_one() && !workers.cpu_ok);
    }

    #[test]
    fn a_gpu_job_with_only_cpu_workers_about_says_none_can_take_it() {
        let cpu_only = seen(&[("cpu-box", None, true)], 1);
        let ctx = StatusContext {
            seen: &cpu_only,
            server_url: "http://x",
            now: at(0),
        };
        let gpu_job = JobStatus::of(&job(JobState::Queued, Needs::Gpu), &ctx).expect("pending");
        let JobStatus::Queued { workers, .. } = &gpu_job else {
            panic!("queued")
        };
        assert!(workers.none_able && workers.needs_one());
        assert_eq!(
            gpu_job.headline(),
            "Reproduction queued 3 minutes ago; no worker with a GPU seen recently."
        );
        let any_job = JobStatus::of(&job(JobState::Queued, Needs::Any), &ctx).expect("pending");
        assert_eq!(
            any_job.headline(),
            "Reproduction queued 3 minutes ago; 1 worker seen recently."
        );
    }

    #[test]
    fn a_running_job_names_its_worker_attempt_and_heartbeat() {
        let nobody = seen(&[], 0);
        let ctx = StatusContext {
            seen: &nobody,
            server_url: "http://x",
            now: at(0),
        };
        let mut j = job(JobState::Running, Needs::Gpu);
        j.worker = "gpu-box-1".into();
        j.attempts = 2;
        j.claimed_at = Some(at(125));
        j.heartbeat_at = Some(at(12));
        let status = JobStatus::of(&j, &ctx).expect("pending");
        let JobStatus::Running {
            worker,
            since,
            attempt,
            max_attempts,
            heartbeat,
            overdue,
        } = &status
        else {
            panic!("{status:?}")
        };
        assert_eq!(worker, "gpu-box-1");
        assert_eq!((since.span.as_str(), since.at), ("2 minutes", at(125)));
        assert_eq!((*attempt, *max_attempts), (2, 3));
        assert_eq!(heartbeat.as_ref().map(|h| h.ago.as_str()), Some("just now"));
        assert!(!overdue);
        assert_eq!(
            status.headline(),
            "Reproduction running on gpu-box-1 for 2 minutes (attempt 2 of 3)."
        );
        // No heartbeat for over a minute since the claim: overdue.
        j.heartbeat_at = None;
        let Some(JobStatus::Running {
            heartbeat, overdue, ..
        }) = JobStatus::of(&j, &ctx)
        else {
            panic!("running")
        };
        assert!(heartbeat.is_none() && overdue);
        assert!(JobStatus::of(&job(JobState::Done, Needs::Any), &ctx).is_none());
    }

    #[test]
    fn the_true_line_names_file_line_and_code() {
        let frame = UserFrame {
            file: "repro.py".into(),
            line: 4,
            code: Some("x = t[idx]".into()),
            log_line: 3,
        };
        let t = TrueLine::new(9, &frame, false, true);
        assert_eq!(
            (t.at.as_str(), t.code.as_deref()),
            ("repro.py:4", Some("x = t[idx]"))
        );
    }
}
