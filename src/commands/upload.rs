//! `gpu-triage upload`: the CI client. It posts each failed run's log (plus an optional repro
//! script and metadata) to `POST /api/v1/reports` (DESIGN.md section 5) and prints what the server
//! made of it. Transient failures are retried with backoff under the same `Idempotency-Key`, so a
//! retry after a lost response never files a second report. Bodies stream from disk: a 100 MB log
//! is never held in memory. `--summary markdown` also writes a Markdown summary for CI pages
//! ([`summary`]).

use std::fs::{self, File};
use std::io::{self, Cursor, Read};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use ureq::{Agent, SendBody};

use super::BadInput;
use crate::api_types::ReportCreated;

pub mod run;
pub mod summary;

/// The metadata keys the server accepts (`--project` and `--version` set theirs, `--meta` any
/// of them).
const META_KEYS: [&str; 7] = [
    "project",
    "job_url",
    "commit",
    "branch",
    "environment",
    "version",
    "needs",
];
const ATTEMPTS: u32 = 6;
const FIRST_DELAY: Duration = Duration::from_millis(500);
const MAX_DELAY: Duration = Duration::from_secs(8);
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// `gpu-triage upload`
#[derive(Debug, clap::Args)]
pub struct UploadArgs {
    /// Server base URL.
    #[arg(long, env = "GPU_TRIAGE_URL", default_value = "http://127.0.0.1:8080")]
    pub server: String,
    /// API token with the `ingest` scope.
    #[arg(long, env = "GPU_TRIAGE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Project the reports belong to.
    #[arg(long)]
    pub project: Option<String>,
    /// Version of the build under test (`2.1.0`, `v2.1.0rc1`): a group resolved in a version is
    /// reopened as regressed only by reports of that version or later.
    #[arg(long, value_name = "VERSION")]
    pub version: Option<String>,
    /// A minimal Python script that reproduces the failure (queued for a GPU worker).
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,
    /// Runs of the script a worker makes (1-5), to tell a deterministic failure from a flaky
    /// one ("fails 5/5 at repro.py:13", "flaky: fails 2/5").
    #[arg(long, value_name = "N", requires = "script",
          value_parser = clap::value_parser!(u8).range(1..=i64::from(crate::api_types::MAX_REPEATS)))]
    pub repeats: Option<u8>,
    /// Metadata as key=value (job_url, commit, branch, environment, version, and needs=gpu|any
    /// for the reproduction); repeatable. Empty values are skipped.
    #[arg(long = "meta", value_name = "KEY=VALUE")]
    pub meta: Vec<String>,
    /// Print a summary in this format on stdout (for `$GITHUB_STEP_SUMMARY` or a PR comment);
    /// the usual lines then go to stderr, so the CI log still shows them.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub summary: Option<SummaryFormat>,
    /// Send the log files given as one run (one report with its files' story: first failure,
    /// consequences, action); without it each file is a report of its own. A directory or an
    /// archive is always one run.
    #[arg(long)]
    pub run: bool,
    /// In a directory, send only the files whose path matches this glob (`*.log`,
    /// `node-*/stderr`, `**/rank*.txt`); repeatable.
    #[arg(long, value_name = "GLOB")]
    pub include: Vec<String>,
    /// In a directory, leave out the files whose path matches this glob; repeatable.
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// Log files, directories (each one run of its text files) or archives (`.tar.gz`, `.tgz`,
    /// `.zip`: each one run) to upload.
    #[arg(required = true, value_name = "LOG")]
    pub logs: Vec<PathBuf>,
}

/// Formats of `upload --summary`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SummaryFormat {
    /// One Markdown block per log: category, title, root-cause line, next steps, known fix,
    /// report link.
    Markdown,
}

/// Runs the command. Everything that can be checked locally (token, server URL, metadata,
/// readable files) is checked before the first request, as `BadInput` (exit 2). Then every log
/// is tried; if any upload failed the result is an error summarising how many (exit 1).
pub fn run(args: UploadArgs) -> anyhow::Result<()> {
    let token = args.token.as_deref().map(str::trim).unwrap_or_default();
    if token.is_empty() {
        return Err(BadInput("no API token: pass --token or set GPU_TRIAGE_TOKEN".into()).into());
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(BadInput("the API token has characters a header cannot carry".into()).into());
    }
    let server = server_base(&args.server)?;
    let mut meta = build_meta(args.project.as_deref(), args.version.as_deref(), &args.meta)?;
    if let Some(n) = args.repeats {
        meta.insert("repeats".into(), n.into());
    }
    if let Some(script) = &args.script {
        check_readable(script)?;
    }
    let filter = run::Filter {
        include: args.include.clone(),
        exclude: args.exclude.clone(),
    };
    let jobs = run::plan(&args.logs, args.run, &filter)?;
    for job in &jobs {
        if let run::Job::Single(path) | run::Job::Archive(path) = job {
            check_readable(path)?;
        }
    }
    let agent = Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_connect(Some(Duration::from_secs(10)))
        .timeout_global(Some(Duration::from_secs(600)))
        .user_agent(concat!("gpu-triage/", env!("CARGO_PKG_VERSION")))
        .build()
        .new_agent();
    let endpoint = format!("{server}/api/v1/reports");
    let client = UploadClient {
        agent,
        endpoint,
        token,
    };
    let mut failed = 0;
    for job in &jobs {
        // Small parts first, so a streaming server knows the metadata before the log arrives.
        let mut parts = Vec::new();
        if !meta.is_empty() {
            parts.push(Part::Text(
                "meta",
                serde_json::Value::Object(meta.clone()).to_string(),
            ));
        }
        parts.extend(args.script.iter().map(|s| Part::File("script", s.clone())));
        // A large run is packed here; the packed file lives until its upload ends.
        let mut _packed = None;
        let log: &Path = match job {
            run::Job::Single(path) => {
                parts.push(Part::File("log", path.clone()));
                path
            }
            run::Job::Archive(path) => {
                parts.push(Part::File("archive", path.clone()));
                path
            }
            run::Job::Run { label, files } if files.len() <= run::MAX_PARTS => {
                for (path, name) in files {
                    parts.push(Part::Named("log", path.clone(), name.clone()));
                }
                label
            }
            run::Job::Run { label, files } => {
                let packed = run::pack(files)
                    .map_err(|e| anyhow::anyhow!("{}: packing the run: {e}", label.display()))?;
                let name = format!("{}.tar.gz", quoted_filename(label));
                parts.push(Part::Named("archive", packed.path().to_owned(), name));
                _packed = Some(packed);
                label
            }
        };
        let (body, key) = (Multipart::new(parts)?, random_hex()?);
        match client.upload(&body, &key, log) {
            Ok(created) => match args.summary {
                None => print!("{}", render_created(log, &created, &server)),
                Some(SummaryFormat::Markdown) => {
                    eprint!("{}", render_created(log, &created, &server));
                    let url = report_url(&server, &created.url);
                    print!("{}", summary::render(log, &created, &url));
                }
            },
            Err(message) => {
                eprintln!("{}: {message}", log.display());
                failed += 1;
            }
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} uploads failed", jobs.len());
    }
    Ok(())
}

/// Validates `--server` and drops trailing slashes, so paths can be appended to it.
pub(crate) fn server_base(raw: &str) -> Result<String, BadInput> {
    let base = raw.trim().trim_end_matches('/');
    let valid = (base.starts_with("http://") || base.starts_with("https://"))
        && base
            .parse::<ureq::http::Uri>()
            .is_ok_and(|u| u.host().is_some_and(|h| !h.is_empty()));
    if valid {
        Ok(base.to_owned())
    } else {
        Err(BadInput(format!(
            "--server must be an http:// or https:// URL, got {raw:?}"
        )))
    }
}

/// Builds the `meta` object from `--project`, `--version` and `--meta key=value`. An empty value
/// is skipped (CI templates expand unset variables to nothing, which must not fail the upload);
/// an unknown key, a pair without `=`, a key given twice or a version the server would refuse
/// is a usage error.
fn build_meta(
    project: Option<&str>,
    version: Option<&str>,
    pairs: &[String],
) -> Result<serde_json::Map<String, serde_json::Value>, BadInput> {
    let allowed = META_KEYS.join(", ");
    let mut entries = Vec::new();
    entries.extend(project.map(|p| ("project", p)));
    entries.extend(version.map(|v| ("version", v)));
    for pair in pairs {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(BadInput(format!(
                "--meta {pair:?} is not key=value; allowed keys: {allowed}"
            )));
        };
        if !META_KEYS.contains(&key) {
            return Err(BadInput(format!(
                "--meta: unknown key {key:?}; allowed keys: {allowed}"
            )));
        }
        entries.push((key, value));
    }
    let mut meta = serde_json::Map::new();
    for (key, value) in entries.into_iter().filter(|(_, v)| !v.trim().is_empty()) {
        if key == "version" && crate::app::group_triage::regression::Version::parse(value).is_none()
        {
            return Err(BadInput(format!(
                "version {value:?} is not a version such as 2.1, 2.1.0 or v2.1.0rc1"
            )));
        }
        if meta.insert(key.to_owned(), value.into()).is_some() {
            return Err(BadInput(format!(
                "metadata {key:?} is given more than once"
            )));
        }
    }
    Ok(meta)
}

/// Fails early on a file that would only fail mid-upload. Regular files only: the body's
/// Content-Length is computed from the file sizes.
fn check_readable(path: &Path) -> Result<(), BadInput> {
    let bad = |what: String| BadInput(format!("{}: {what}", path.display()));
    let metadata = fs::metadata(path).map_err(|e| bad(format!("cannot read: {e}")))?;
    if metadata.is_dir() {
        return Err(bad("is a directory, not a log file".into()));
    } else if !metadata.is_file() {
        return Err(bad("is not a regular file".into()));
    }
    File::open(path)
        .map(drop)
        .map_err(|e| bad(format!("cannot read: {e}")))
}

/// 32 hex characters from the OS generator (idempotency keys and multipart boundaries).
fn random_hex() -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness from the OS: {e}"))?;
    Ok(hex::encode(bytes))
}

/// One field of a `multipart/form-data` body.
enum Part {
    /// Field name and value.
    Text(&'static str, String),
    /// Field name and the file streamed as its content.
    File(&'static str, PathBuf),
    /// Field name, the file streamed as its content, and the file name to send (a run's file
    /// by its path in the run).
    Named(&'static str, PathBuf, String),
}

/// A `multipart/form-data` body whose files are read lazily, each time it is sent.
struct Multipart {
    boundary: String,
    parts: Vec<Part>,
}

impl Multipart {
    /// A body with a random boundary (a collision with file content is out of reach).
    fn new(parts: Vec<Part>) -> anyhow::Result<Self> {
        let boundary = format!("gpu-triage-{}", random_hex()?);
        Ok(Self { boundary, parts })
    }

    fn content_type(&self) -> String {
        format!("multipart/form-data; boundary={}", self.boundary)
    }

    /// Opens the files afresh (every attempt re-sends from the start) and returns the exact
    /// body length with a reader that streams it: header bytes, file, header bytes, ...
    fn open(&self) -> io::Result<(u64, Box<dyn Read + Send>)> {
        let mut reader: Box<dyn Read + Send> = Box::new(io::empty());
        let mut len = 0;
        let mut pending = String::new();
        for part in &self.parts {
            pending += &format!("--{}\r\nContent-Disposition: form-data; ", self.boundary);
            match part {
                Part::Text(name, value) => {
                    pending += &format!("name=\"{name}\"\r\n\r\n{value}\r\n")
                }
                Part::File(name, path) | Part::Named(name, path, _) => {
                    let file = File::open(path)?;
                    let size = file.metadata()?.len();
                    let filename = match part {
                        Part::Named(_, _, given) => quoted(given),
                        _ => quoted_filename(path),
                    };
                    pending += &format!("name=\"{name}\"; filename=\"{filename}\"\r\n");
                    pending += "Content-Type: text/plain\r\n\r\n";
                    let head = std::mem::replace(&mut pending, "\r\n".to_owned());
                    len += head.len() as u64 + size;
                    // `take` keeps the body at the announced length if the file grows meanwhile.
                    reader = Box::new(reader.chain(Cursor::new(head)).chain(file.take(size)));
                }
            }
        }
        pending += &format!("--{}--\r\n", self.boundary);
        len += pending.len() as u64;
        Ok((len, Box::new(reader.chain(Cursor::new(pending)))))
    }
}

/// The file's base name, escaped the way browsers do for a quoted `filename=`.
fn quoted_filename(path: &Path) -> String {
    quoted(&path.file_name().unwrap_or_default().to_string_lossy())
}

/// A name escaped the way browsers do for a quoted `filename=`.
fn quoted(name: &str) -> String {
    name.replace('"', "%22")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// What one attempt came to.
#[derive(Debug)]
enum UploadReply {
    Created(Box<ReportCreated>),
    /// Worth another attempt: why, and the server's `Retry-After`.
    Retry(String, Option<Duration>),
    /// Final: the line to print.
    Failed(String),
}

/// Where and as whom reports are posted.
struct UploadClient<'a> {
    agent: Agent,
    endpoint: String,
    token: &'a str,
}

impl UploadClient<'_> {
    /// Posts one log, retrying transient failures with the same `Idempotency-Key`.
    fn upload(
        &self,
        body: &Multipart,
        key: &str,
        log: &Path,
    ) -> Result<Box<ReportCreated>, String> {
        let mut attempt = 1;
        loop {
            match self.send(body, key) {
                UploadReply::Created(created) => return Ok(created),
                UploadReply::Failed(message) => return Err(message),
                UploadReply::Retry(reason, _) if attempt == ATTEMPTS => {
                    return Err(format!("upload failed after {ATTEMPTS} attempts: {reason}"));
                }
                UploadReply::Retry(reason, retry_after) => {
                    let jitter = Duration::from_millis(getrandom::u64().unwrap_or(0) % 250);
                    let delay = retry_delay(attempt, retry_after) + jitter;
                    attempt += 1;
                    let (log, secs) = (log.display(), delay.as_secs_f64());
                    eprintln!("{log}: {reason}; attempt {attempt} of {ATTEMPTS} in {secs:.1} s");
                    thread::sleep(delay);
                }
            }
        }
    }

    fn send(&self, body: &Multipart, key: &str) -> UploadReply {
        let (len, reader) = match body.open() {
            Ok(opened) => opened,
            Err(e) => return UploadReply::Failed(format!("cannot read: {e}")),
        };
        let request = self.agent.post(&self.endpoint);
        let result = request
            .header("Authorization", format!("Bearer {}", self.token))
            .header("Idempotency-Key", key)
            .header("Content-Type", body.content_type())
            .header("Content-Length", len)
            // Lets the server refuse (bad token, too large) before the body is sent.
            .header("Expect", "100-continue")
            .send(SendBody::from_owned_reader(reader));
        let mut response = match result {
            Ok(response) => response,
            Err(e) if is_transient(&e) => {
                return UploadReply::Retry(format!("cannot reach the server: {e}"), None);
            }
            Err(e) => return UploadReply::Failed(format!("request failed: {e}")),
        };
        let status = response.status().as_u16();
        let header = |name| response.headers().get(name).and_then(|v| v.to_str().ok());
        let retry_after = header("retry-after").and_then(|v| v.trim().parse().ok());
        let location = header("location").map(str::to_owned);
        let body = response
            .body_mut()
            .with_config()
            .limit(1 << 20)
            .read_to_string();
        outcome(status, retry_after, location, body.ok())
    }
}

/// Connection-level failures are worth retrying; TLS, URL and protocol-use errors are not.
fn is_transient(e: &ureq::Error) -> bool {
    use ureq::Error as E;
    matches!(
        e,
        E::Io(_) | E::Timeout(_) | E::HostNotFound | E::ConnectionFailed | E::Protocol(_)
    )
}

/// Sorts a response into created, retry or failed. `body` is `None` when it could not be read.
fn outcome(
    status: u16,
    retry_after: Option<u64>,
    location: Option<String>,
    body: Option<String>,
) -> UploadReply {
    let body = body.unwrap_or_default();
    // `{"error": {"code", "message"}}` (DESIGN.md section 5), else the status and first line.
    let error = serde_json::from_str::<serde_json::Value>(&body).ok();
    let field = |name| {
        error
            .as_ref()?
            .get("error")?
            .get(name)?
            .as_str()
            .map(str::to_owned)
    };
    let code = field("code").unwrap_or_else(|| reason_code(status));
    let message = field("message").unwrap_or_else(|| body.lines().next().unwrap_or("").into());
    match status {
        200..=299 => match serde_json::from_str(&body) {
            Ok(created) => UploadReply::Created(created),
            // A response lost mid-way: the retry gets the stored one back (same key).
            Err(_) if body.is_empty() => {
                UploadReply::Retry(format!("empty {status} response"), None)
            }
            Err(e) => UploadReply::Failed(format!(
                "unexpected {status} response ({e}); is --server a gpu-triage server?"
            )),
        },
        408 | 429 | 500..=599 => {
            let reason = format!("server answered {status} {code}: {message}");
            UploadReply::Retry(reason, retry_after.map(Duration::from_secs))
        }
        _ => {
            let message = match (status, location) {
                (401, _) => "the token is missing, unknown or revoked".to_owned(),
                (403, _) => "the token lacks the ingest scope".to_owned(),
                (300..=399, Some(to)) => format!("redirected to {to}; pass that as --server"),
                _ => message,
            };
            UploadReply::Failed(format!("rejected ({status} {code}): {message}"))
        }
    }
}

/// A status's reason phrase as a snake_case code, for error bodies that are not ours.
fn reason_code(status: u16) -> String {
    let status = ureq::http::StatusCode::from_u16(status).ok();
    let reason = status
        .and_then(|s| s.canonical_reason())
        .unwrap_or("http_error");
    reason.to_ascii_lowercase().replace([' ', '-'], "_")
}

/// Delay before retrying after `attempt` (1-based) failed: the server's `Retry-After` capped
/// at 30 s, else 0.5 s doubling up to 8 s. Jitter is added by the caller.
fn retry_delay(attempt: u32, retry_after: Option<Duration>) -> Duration {
    let backoff = FIRST_DELAY.saturating_mul(1 << attempt.saturating_sub(1).min(16));
    retry_after.map_or(backoff.min(MAX_DELAY), |wait| wait.min(MAX_RETRY_AFTER))
}

/// A report URL as printed: a path is appended to the server URL, an absolute URL kept.
fn report_url(server: &str, url: &str) -> String {
    if url.starts_with('/') {
        format!("{server}{url}")
    } else {
        url.to_owned()
    }
}

fn render_created(log: &Path, created: &ReportCreated, server: &str) -> String {
    let summary = &created.classification;
    let cause = match &summary.root_cause {
        Some(cause) => format!("line {}: {}", cause.line, cause.text.trim_end()),
        None => "no root-cause line".to_owned(),
    };
    let mut out = format!("{}: {} ({cause})\n", log.display(), summary.category);
    out += &format!("  {}", report_url(server, &created.url));
    if created.duplicate {
        out += " (duplicate of an existing report)";
    }
    out += "\n";
    if let Some(fix) = &created.known_fix {
        out += &format!("  fixed before: {}", fix.summary.trim());
        out += &format!(" ({}, {})", fix.author, fix.created_at);
        if !fix.link.is_empty() {
            out += &format!(" {}", fix.link);
        }
        out += "\n";
        if fix.group_id != created.group_id
            && let Some(s) = created.similar.iter().find(|s| s.group_id == fix.group_id)
        {
            out += &format!(
                "    recorded for a similar failure ({:.0}% alike): {}\n",
                s.similarity * 100.0,
                report_url(server, &s.url)
            );
        }
    }
    if let Some(repro) = &created.repro {
        out += &format!("  reproduction queued (job {})\n", repro.job_id);
    }
    out += &render_run(&created.run);
    out
}

/// A run's first failure and action, for the upload's output.
fn render_run(run: &crate::api_types::RunFields) -> String {
    let mut out = String::new();
    if let Some(first) = &run.first_failure {
        let place: Vec<String> = [
            first.rank.map(|r| format!("rank {r}")),
            first.host.clone(),
            first.gpu.clone(),
        ]
        .into_iter()
        .flatten()
        .collect();
        out += &format!("  first failure: {}:{}", first.file, first.line);
        if !place.is_empty() {
            out += &format!(" ({})", place.join(", "));
        }
        out += "\n";
    }
    if let Some(action) = &run.action {
        out += &format!("  action: {}: {}\n", action.kind.as_str(), action.reason);
    }
    if !run.files.is_empty() {
        out += &format!("  {} files", run.files.len());
        if !run.skipped.is_empty() {
            out += &format!(", {} skipped", run.skipped.len());
        }
        out += "\n";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(project: Option<&str>, pairs: &[&str]) -> Result<String, String> {
        let pairs: Vec<String> = pairs.iter().map(|s| s.to_string()).collect();
        let meta = build_meta(project, None, &pairs).map_err(|BadInput(message)| message)?;
        Ok(serde_json::Value::from(meta).to_string())
    }

    #[test]
    fn metadata_is_built_from_the_project_flag_and_key_value_pairs() {
        let all = r#"{"branch":"main","commit":"abc","job_url":"http://ci/1?a=b","project":"p"}"#;
        let cases: &[(Option<&str>, &[&str], &str)] = &[
            (None, &[], "{}"),
            (
                Some("p"),
                &["commit=abc", "branch=main", "job_url=http://ci/1?a=b"],
                all,
            ),
            (
                None,
                &["environment=torch\nCUDA 12"],
                r#"{"environment":"torch\nCUDA 12"}"#,
            ),
            (None, &["project=p"], r#"{"project":"p"}"#),
            (Some(""), &["commit=", "branch= "], "{}"),
            (None, &["commit=", "commit=abc"], r#"{"commit":"abc"}"#),
            (None, &["version=v2.1.0"], r#"{"version":"v2.1.0"}"#),
        ];
        for (project, pairs, want) in cases {
            assert_eq!(meta(*project, pairs).as_deref(), Ok(*want), "{pairs:?}");
        }
    }

    #[test]
    fn bad_metadata_is_a_one_line_usage_error_naming_the_allowed_keys() {
        let cases: &[(Option<&str>, &[&str], &str)] = &[
            (
                None,
                &["owner=me"],
                r#"unknown key "owner"; allowed keys: project, job_url, "#,
            ),
            (
                None,
                &["commit"],
                r#"--meta "commit" is not key=value; allowed keys: project"#,
            ),
            (None, &["=abc"], r#"unknown key """#),
            (None, &["Commit=abc"], r#"unknown key "Commit""#),
            (
                Some("a"),
                &["project=b"],
                r#""project" is given more than once"#,
            ),
            (
                None,
                &["version=nightly"],
                r#"version "nightly" is not a version such as 2.1"#,
            ),
        ];
        for (project, pairs, want) in cases {
            let got = meta(*project, pairs).err().unwrap_or_default();
            assert!(
                got.contains(want) && !got.contains('\n'),
                "{pairs:?}: {got}"
            );
        }
    }

    #[test]
    fn retries_back_off_exponentially_and_honour_a_capped_retry_after() {
        let s = Duration::from_millis;
        let cases = [
            (1, None, s(500)),
            (2, None, s(1000)),
            (3, None, s(2000)),
            (4, None, s(4000)),
            (5, None, s(8000)),
            (40, None, s(8000)),
            (1, Some(s(3000)), s(3000)),
            (5, Some(s(0)), s(0)),
            (2, Some(s(120_000)), s(30_000)),
        ];
        for (attempt, retry_after, want) in cases {
            assert_eq!(
                retry_delay(attempt, retry_after),
                want,
                "{attempt} {retry_after:?}"
            );
        }
    }

    #[test]
    fn the_multipart_body_has_the_exact_layout_and_announced_length() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let (log, script) = (
            dir.path().join("train \"0\".log"),
            dir.path().join("repro.py"),
        );
        fs::write(&log, "line 1\nCUDA error: out of memory\n")?;
        fs::write(&script, "import torch\n")?;
        let parts = vec![
            Part::Text("meta", r#"{"project":"p"}"#.into()),
            Part::File("script", script),
            Part::File("log", log),
        ];
        let body = Multipart {
            boundary: "XYZ".into(),
            ..Multipart::new(parts)?
        };
        let (len, mut reader) = body.open()?;
        let mut bytes = String::new();
        reader.read_to_string(&mut bytes)?;
        let want = "--XYZ\r\nContent-Disposition: form-data; name=\"meta\"\r\n\r\n\
            {\"project\":\"p\"}\r\n\
            --XYZ\r\nContent-Disposition: form-data; name=\"script\"; filename=\"repro.py\"\r\n\
            Content-Type: text/plain\r\n\r\nimport torch\n\r\n\
            --XYZ\r\nContent-Disposition: form-data; name=\"log\"; filename=\"train %220%22.log\"\
            \r\nContent-Type: text/plain\r\n\r\nline 1\nCUDA error: out of memory\n\r\n--XYZ--\r\n";
        assert_eq!((bytes.as_str(), len), (want, want.len() as u64));
        assert_eq!(body.content_type(), "multipart/form-data; boundary=XYZ");
        Ok(())
    }

    #[test]
    fn server_urls_are_validated_and_report_paths_appended_to_them() {
        let cases = [
            ("http://triage:8080/", Some("http://triage:8080")),
            (
                " https://ci.example.com/triage// ",
                Some("https://ci.example.com/triage"),
            ),
            ("triage:8080", None),
            ("ftp://triage", None),
            ("http://", None),
        ];
        for (raw, want) in cases {
            assert_eq!(server_base(raw).ok().as_deref(), want, "{raw}");
        }
        let server = "https://ci.example.com/triage";
        assert_eq!(
            report_url(server, "/reports/7"),
            "https://ci.example.com/triage/reports/7"
        );
        assert_eq!(
            report_url(server, "https://t.example/r/7"),
            "https://t.example/r/7"
        );
    }

    /// The outcome of a response, as one comparable line.
    fn sorted(status: u16, retry_after: Option<u64>, location: Option<&str>, body: &str) -> String {
        let location = location.map(str::to_owned);
        match outcome(status, retry_after, location, Some(body.to_owned())) {
            UploadReply::Failed(message) => message,
            UploadReply::Retry(reason, after) => format!("retry {after:?}: {reason}"),
            UploadReply::Created(created) => format!("created {}", created.url),
        }
    }

    #[test]
    fn responses_are_sorted_into_created_retry_and_rejected() {
        let api = |code, msg| format!(r#"{{"error":{{"code":"{code}","message":"{msg}"}}}}"#);
        let created = response("/r/1", None, false, None);
        let cases = [
            (201, None, None, created, "created /r/1"),
            (
                401,
                None,
                None,
                api("unauthorized", "x"),
                "rejected (401 unauthorized): the token",
            ),
            (
                403,
                None,
                None,
                api("forbidden", "x"),
                "rejected (403 forbidden): the token lacks",
            ),
            (
                422,
                None,
                None,
                api("bad_meta", "no"),
                "rejected (422 bad_meta): no",
            ),
            (
                413,
                None,
                None,
                "<p>big</p>\n<p>".into(),
                "rejected (413 payload_too_large): <p>big",
            ),
            (
                308,
                None,
                Some("https://t/"),
                "".into(),
                "rejected (308 permanent_redirect): redir",
            ),
            (
                201,
                None,
                None,
                "<html>".into(),
                "unexpected 201 response (expected value",
            ),
            (201, None, None, "".into(), "retry None: empty 201 response"),
            (
                503,
                Some(7),
                None,
                api("db_down", "later"),
                "retry Some(7s): server answered 503",
            ),
            (
                429,
                None,
                None,
                "".into(),
                "retry None: server answered 429 too_many_requests: ",
            ),
            (
                502,
                None,
                None,
                "Bad Gateway".into(),
                "retry None: server answered 502 bad_gateway",
            ),
        ];
        for (status, retry_after, location, body, want) in cases {
            let got = sorted(status, retry_after, location, &body);
            assert!(got.starts_with(want), "got {got:?}, want {want:?}");
        }
    }

    /// A 201 body as the server writes it: a real classification of `log`.
    fn response(url: &str, log: Option<&str>, duplicate: bool, job: Option<i64>) -> String {
        let ruleset = crate::rules::Ruleset::builtin().expect("builtin rules");
        let classification = ruleset.classify_bytes("a.log", log.unwrap_or("fine\n").as_bytes());
        let created = ReportCreated {
            id: 1,
            url: url.to_owned(),
            group_id: 3,
            duplicate,
            classification,
            repro: job.map(|job_id| crate::api_types::QueuedJob {
                job_id,
                state: crate::api_types::JobState::Queued,
            }),
            known_fix: None,
            group_state: None,
            similar: Vec::new(),
            run: Default::default(),
        };
        serde_json::to_string(&created).unwrap_or_default()
    }

    #[test]
    fn created_reports_print_category_root_cause_url_and_repro() -> anyhow::Result<()> {
        let oom = "step 1\nRuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB \n";
        let cases = [
            (
                response("/reports/1", Some(oom), false, None),
                "a.log: out_of_memory (line 2: RuntimeError: CUDA out of memory. Tried to allocate \
                 2.00 GiB)\n  http://s/reports/1\n",
            ),
            (
                response("http://x/reports/2", None, true, Some(9)),
                "a.log: unknown (no root-cause line)\n  http://x/reports/2 (duplicate of \
                 an existing report)\n  reproduction queued (job 9)\n",
            ),
        ];
        for (body, want) in cases {
            let created: ReportCreated = serde_json::from_str(&body)?;
            assert_eq!(
                render_created(Path::new("a.log"), &created, "http://s"),
                want
            );
        }
        // A known fix is printed where the CI log shows it.
        let mut created: ReportCreated =
            serde_json::from_str(&response("/reports/1", Some(oom), false, None))?;
        created.known_fix = Some(crate::api_types::Fix {
            id: 1,
            group_id: 3,
            summary: "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True".into(),
            details: String::new(),
            link: "https://github.com/org/repo/pull/12".into(),
            author: "alice".into(),
            author_kind: None,
            author_person_id: None,
            created_at: crate::time::Timestamp::from_unix(1_780_000_000),
        });
        let printed = render_created(Path::new("a.log"), &created, "http://s");
        assert!(
            printed.contains(
                "\n  fixed before: set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (alice, "
            ) && printed.contains(") https://github.com/org/repo/pull/12\n"),
            "{printed}"
        );
        // A fix recorded for a similar failure's group says so, with that group's page.
        if let Some(fix) = created.known_fix.as_mut() {
            fix.group_id = 5;
        }
        created.similar = vec![crate::api_types::SimilarFailure {
            group_id: 5,
            url: "/groups/5".into(),
            category: crate::rules::Category::OutOfMemory,
            title: "CUDA out of memory".into(),
            root_cause: String::new(),
            report_count: 4,
            similarity: 0.724,
            fixes: created.known_fix.iter().cloned().collect(),
        }];
        let printed = render_created(Path::new("a.log"), &created, "http://s");
        assert!(
            printed
                .ends_with("\n    recorded for a similar failure (72% alike): http://s/groups/5\n"),
            "{printed}"
        );
        Ok(())
    }

    #[test]
    fn directories_and_missing_files_are_usage_errors() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let message = |path: &Path| check_readable(path).err().map(|BadInput(m)| m);
        let is_dir = message(dir.path()).unwrap_or_default();
        assert!(
            is_dir.ends_with(": is a directory, not a log file"),
            "{is_dir}"
        );
        let missing = message(&dir.path().join("nope.log")).unwrap_or_default();
        assert!(missing.contains("nope.log: cannot read: "), "{missing}");
        fs::write(dir.path().join("ok.log"), "x")?;
        assert_eq!(message(&dir.path().join("ok.log")), None);
        Ok(())
    }
}
