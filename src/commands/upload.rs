//! `gpu-triage upload`: the CI client. It posts each failed run's log (plus an optional repro
//! script and metadata) to `POST /api/v1/reports` (DESIGN.md section 5) and prints what the server
//! made of it. Transient failures are retried with backoff under the same `Idempotency-Key`, so a
//! retry after a lost response never files a second report. Bodies stream from disk: a 100 MB log
//! is never held in memory.

use std::fs::{self, File};
use std::io::{self, Cursor, Read};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use serde::Deserialize;
use ureq::{Agent, SendBody};

use super::BadInput;

/// The metadata keys the server accepts (`--project` sets the first, `--meta` any of them).
const META_KEYS: [&str; 5] = ["project", "job_url", "commit", "branch", "environment"];
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
    /// A minimal Python script that reproduces the failure (queued for a GPU worker).
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,
    /// Metadata as key=value (job_url, commit, branch, environment); repeatable.
    #[arg(long = "meta", value_name = "KEY=VALUE")]
    pub meta: Vec<String>,
    /// Log files to upload.
    #[arg(required = true, value_name = "LOG")]
    pub logs: Vec<PathBuf>,
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
        return Err(
            BadInput("the API token contains characters a header cannot carry".into()).into(),
        );
    }
    let server = server_base(&args.server)?;
    let meta = build_meta(args.project.as_deref(), &args.meta)?;
    for path in args.script.iter().chain(&args.logs) {
        check_readable(path)?;
    }
    let agent: Agent = Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_connect(Some(Duration::from_secs(10)))
        .timeout_global(Some(Duration::from_secs(600)))
        .user_agent(concat!("gpu-triage/", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    let endpoint = format!("{server}/api/v1/reports");
    let mut failed = 0;
    for log in &args.logs {
        let mut parts = Vec::new();
        if !meta.is_empty() {
            let value = serde_json::Value::Object(meta.clone()).to_string();
            parts.push(Part::Text {
                name: "meta",
                value,
            });
        }
        if let Some(script) = &args.script {
            parts.push(Part::File {
                name: "script",
                path: script.clone(),
            });
        }
        parts.push(Part::File {
            name: "log",
            path: log.clone(),
        });
        let body = Multipart {
            boundary: format!("gpu-triage-{}", random_hex()?),
            parts,
        };
        let request = Request {
            agent: &agent,
            endpoint: &endpoint,
            token,
            key: random_hex()?,
        };
        match request.send_with_retries(&body, log) {
            Ok(created) => print!("{}", render_created(log, &created, &server)),
            Err(message) => {
                eprintln!("{}: {message}", log.display());
                failed += 1;
            }
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} uploads failed", args.logs.len());
    }
    Ok(())
}

/// Validates `--server` and drops trailing slashes, so paths can be appended to it.
fn server_base(raw: &str) -> Result<String, BadInput> {
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

/// Builds the `meta` object from `--project` and `--meta key=value`. An empty value is skipped
/// (CI templates expand unset variables to nothing, which must not fail the upload); an unknown
/// key, a pair without `=` or a key given twice is a usage error.
fn build_meta(
    project: Option<&str>,
    pairs: &[String],
) -> Result<serde_json::Map<String, serde_json::Value>, BadInput> {
    let allowed = META_KEYS.join(", ");
    let mut entries = Vec::new();
    entries.extend(project.map(|p| ("project", p)));
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
    let cannot = |e: io::Error| BadInput(format!("{}: cannot read: {e}", path.display()));
    let metadata = fs::metadata(path).map_err(cannot)?;
    if metadata.is_dir() {
        return Err(BadInput(format!(
            "{}: is a directory, not a log file",
            path.display()
        )));
    }
    if !metadata.is_file() {
        return Err(BadInput(format!(
            "{}: is not a regular file",
            path.display()
        )));
    }
    File::open(path).map(drop).map_err(cannot)
}

/// 32 hex characters from the OS generator (idempotency keys and multipart boundaries).
fn random_hex() -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness from the OS: {e}"))?;
    Ok(hex::encode(bytes))
}

/// One field of a `multipart/form-data` body.
enum Part {
    Text { name: &'static str, value: String },
    File { name: &'static str, path: PathBuf },
}

/// A `multipart/form-data` body whose files are read lazily, each time it is sent.
struct Multipart {
    boundary: String,
    parts: Vec<Part>,
}

impl Multipart {
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
                Part::Text { name, value } => {
                    pending += &format!("name=\"{name}\"\r\n\r\n{value}\r\n");
                }
                Part::File { name, path } => {
                    let file = File::open(path)?;
                    let size = file.metadata()?.len();
                    let filename = quoted_filename(path);
                    pending += &format!(
                        "name=\"{name}\"; filename=\"{filename}\"\r\nContent-Type: text/plain\r\n\r\n"
                    );
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
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    name.replace('"', "%22")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// One log's upload: the same key on every attempt.
struct Request<'a> {
    agent: &'a Agent,
    endpoint: &'a str,
    token: &'a str,
    key: String,
}

/// What one attempt came to.
#[derive(Debug)]
enum Outcome {
    Created(Created),
    Retry {
        reason: String,
        retry_after: Option<Duration>,
    },
    Failed(String),
}

impl Request<'_> {
    fn send_with_retries(&self, body: &Multipart, log: &Path) -> Result<Created, String> {
        let mut attempt = 1;
        loop {
            match self.send(body) {
                Outcome::Created(created) => return Ok(created),
                Outcome::Failed(message) => return Err(message),
                Outcome::Retry { reason, .. } if attempt == ATTEMPTS => {
                    return Err(format!("upload failed after {ATTEMPTS} attempts: {reason}"));
                }
                Outcome::Retry {
                    reason,
                    retry_after,
                } => {
                    let jitter = Duration::from_millis(getrandom::u32().unwrap_or(0) as u64 % 250);
                    let delay = retry_delay(attempt, retry_after) + jitter;
                    attempt += 1;
                    eprintln!(
                        "{}: {reason}; retrying in {:.1} s (attempt {attempt} of {ATTEMPTS})",
                        log.display(),
                        delay.as_secs_f64()
                    );
                    thread::sleep(delay);
                }
            }
        }
    }

    fn send(&self, body: &Multipart) -> Outcome {
        let (len, reader) = match body.open() {
            Ok(opened) => opened,
            Err(e) => return Outcome::Failed(format!("cannot read: {e}")),
        };
        let result = self
            .agent
            .post(self.endpoint)
            .header("Authorization", format!("Bearer {}", self.token))
            .header("Idempotency-Key", &self.key)
            .header("Content-Type", body.content_type())
            .header("Content-Length", len)
            // Lets the server refuse (bad token, too large) before the body is sent.
            .header("Expect", "100-continue")
            .send(SendBody::from_owned_reader(reader));
        let mut response = match result {
            Ok(response) => response,
            Err(e) => return error_outcome(e),
        };
        let header = |name| response.headers().get(name).and_then(|v| v.to_str().ok());
        let reply = Reply {
            status: response.status().as_u16(),
            retry_after: header("retry-after").and_then(|v| v.trim().parse().ok()),
            location: header("location").map(str::to_owned),
            body: None,
        };
        let body = response
            .body_mut()
            .with_config()
            .limit(1 << 20)
            .read_to_string();
        Reply {
            body: body.ok(),
            ..reply
        }
        .outcome()
    }
}

/// Connection-level failures are worth retrying; TLS, URL and protocol-misuse errors are not.
fn error_outcome(e: ureq::Error) -> Outcome {
    use ureq::Error as E;
    match e {
        E::Io(_) | E::Timeout(_) | E::HostNotFound | E::ConnectionFailed | E::Protocol(_) => {
            Outcome::Retry {
                reason: e.to_string(),
                retry_after: None,
            }
        }
        e => Outcome::Failed(format!("request failed: {e}")),
    }
}

/// The parts of a response that decide the outcome (`body` is `None` if it could not be read).
struct Reply {
    status: u16,
    retry_after: Option<u64>,
    location: Option<String>,
    body: Option<String>,
}

impl Reply {
    fn outcome(self) -> Outcome {
        let status = self.status;
        let body = self.body.unwrap_or_default();
        let (code, message) = match serde_json::from_str::<ErrorBody>(&body) {
            Ok(ErrorBody { error }) => (error.code, error.message),
            Err(_) => (
                reason_code(status),
                body.lines().next().unwrap_or("").to_owned(),
            ),
        };
        match status {
            200..=299 => match serde_json::from_str(&body) {
                Ok(created) => Outcome::Created(created),
                Err(_) if body.is_empty() => {
                    let reason = format!("the {status} response was empty or cut off");
                    Outcome::Retry {
                        reason,
                        retry_after: None,
                    }
                }
                Err(e) => Outcome::Failed(format!(
                    "unexpected {status} response ({e}); is --server a gpu-triage server?"
                )),
            },
            408 | 429 | 500..=599 => Outcome::Retry {
                reason: format!("server answered {status} {code}: {message}"),
                retry_after: self.retry_after.map(Duration::from_secs),
            },
            _ => {
                let message = match (status, self.location) {
                    (401, _) => "the token is missing, unknown or revoked".to_owned(),
                    (403, _) => "the token lacks the ingest scope".to_owned(),
                    (300..=399, Some(to)) => format!("redirected to {to}; pass that as --server"),
                    _ => message,
                };
                Outcome::Failed(format!("rejected ({status} {code}): {message}"))
            }
        }
    }
}

/// A status's reason phrase as a snake_case code, for error bodies that are not ours.
fn reason_code(status: u16) -> String {
    let reason = ureq::http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason());
    reason
        .unwrap_or("http_error")
        .to_ascii_lowercase()
        .replace([' ', '-'], "_")
}

/// Delay before retrying after `attempt` (1-based) failed: the server's `Retry-After` capped
/// at 30 s, else 0.5 s doubling up to 8 s. Jitter is added by the caller.
fn retry_delay(attempt: u32, retry_after: Option<Duration>) -> Duration {
    match retry_after {
        Some(wait) => wait.min(MAX_RETRY_AFTER),
        None => FIRST_DELAY
            .saturating_mul(1 << attempt.saturating_sub(1).min(16))
            .min(MAX_DELAY),
    }
}

/// `{"error": {"code", "message"}}` (DESIGN.md section 5).
#[derive(Deserialize)]
struct ErrorBody {
    error: ApiError,
}

#[derive(Deserialize)]
struct ApiError {
    code: String,
    message: String,
}

/// The fields of the 201 response that are printed.
#[derive(Debug, Deserialize)]
struct Created {
    url: String,
    #[serde(default)]
    duplicate: bool,
    classification: Summary,
    repro: Option<Repro>,
}

#[derive(Debug, Deserialize)]
struct Summary {
    category: String,
    root_cause: Option<RootCause>,
}

#[derive(Debug, Deserialize)]
struct RootCause {
    line: u64,
    text: String,
}

#[derive(Debug, Deserialize)]
struct Repro {
    job_id: i64,
}

/// A report URL as printed: a path is joined to the server URL, an absolute URL kept.
fn report_url(server: &str, url: &str) -> String {
    if url.starts_with('/') {
        format!("{server}{url}")
    } else {
        url.to_owned()
    }
}

fn render_created(log: &Path, created: &Created, server: &str) -> String {
    let Summary {
        category,
        root_cause,
    } = &created.classification;
    let cause = match root_cause {
        Some(RootCause { line, text }) => format!("line {line}: {}", text.trim_end()),
        None => "no root-cause line".to_owned(),
    };
    let mut out = format!("{}: {category} ({cause})\n", log.display());
    out += &format!("  {}", report_url(server, &created.url));
    if created.duplicate {
        out += " (duplicate of an existing report)";
    }
    out += "\n";
    if let Some(repro) = &created.repro {
        out += &format!("  reproduction queued (job {})\n", repro.job_id);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_built_from_flags_or_rejected_with_the_allowed_keys() {
        let cases: &[(Option<&str>, &[&str], Result<&str, &str>)] = &[
            (None, &[], Ok("{}")),
            (Some("vision"), &[], Ok(r#"{"project":"vision"}"#)),
            (
                Some("p"),
                &["commit=abc", "branch=main", "job_url=https://ci/1?a=b"],
                Ok(
                    r#"{"branch":"main","commit":"abc","job_url":"https://ci/1?a=b","project":"p"}"#,
                ),
            ),
            (
                None,
                &["environment=torch 2.5\nCUDA 12.4"],
                Ok(r#"{"environment":"torch 2.5\nCUDA 12.4"}"#),
            ),
            (None, &["project=p"], Ok(r#"{"project":"p"}"#)),
            (Some(""), &["commit=", "branch= "], Ok("{}")),
            (None, &["commit=", "commit=abc"], Ok(r#"{"commit":"abc"}"#)),
            (
                None,
                &["owner=me"],
                Err(r#"unknown key "owner"; allowed keys: project, job_url"#),
            ),
            (
                None,
                &["commit"],
                Err(r#"--meta "commit" is not key=value; allowed keys: project"#),
            ),
            (None, &["=abc"], Err(r#"unknown key """#)),
            (None, &["Commit=abc"], Err("unknown key")),
            (
                Some("a"),
                &["project=b"],
                Err(r#""project" is given more than once"#),
            ),
        ];
        for (project, pairs, want) in cases {
            let pairs: Vec<String> = pairs.iter().map(|s| s.to_string()).collect();
            let got =
                build_meta(*project, &pairs).map(|m| serde_json::Value::Object(m).to_string());
            match (got, want) {
                (Ok(got), Ok(want)) => assert_eq!(got, *want, "{pairs:?}"),
                (Err(BadInput(got)), Err(want)) => {
                    assert!(got.contains(want), "{pairs:?}: {got}");
                    assert!(!got.contains('\n'), "one line: {got}");
                }
                (got, want) => panic!("{pairs:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn retries_back_off_exponentially_and_honour_a_capped_retry_after() {
        let ms = Duration::from_millis;
        let cases = [
            (1, None, ms(500)),
            (2, None, ms(1000)),
            (3, None, ms(2000)),
            (4, None, ms(4000)),
            (5, None, ms(8000)),
            (6, None, ms(8000)),
            (40, None, ms(8000)),
            (1, Some(ms(3000)), ms(3000)),
            (5, Some(ms(0)), ms(0)),
            (2, Some(ms(120_000)), ms(30_000)),
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
    fn the_multipart_body_has_the_exact_layout_and_announced_length() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let log = dir.path().join("train \"rank0\".log");
        fs::write(&log, "line 1\nCUDA error: out of memory\n")?;
        let script = dir.path().join("repro.py");
        fs::write(&script, "import torch\n")?;
        let body = Multipart {
            boundary: "XYZ".into(),
            parts: vec![
                Part::Text {
                    name: "meta",
                    value: r#"{"project":"p"}"#.into(),
                },
                Part::File {
                    name: "script",
                    path: script,
                },
                Part::File {
                    name: "log",
                    path: log,
                },
            ],
        };
        let (len, mut reader) = body.open()?;
        let mut bytes = String::new();
        reader.read_to_string(&mut bytes)?;
        let want = "--XYZ\r\nContent-Disposition: form-data; name=\"meta\"\r\n\r\n\
            {\"project\":\"p\"}\r\n\
            --XYZ\r\nContent-Disposition: form-data; name=\"script\"; filename=\"repro.py\"\r\n\
            Content-Type: text/plain\r\n\r\nimport torch\n\r\n\
            --XYZ\r\nContent-Disposition: form-data; name=\"log\"; \
            filename=\"train %22rank0%22.log\"\r\nContent-Type: text/plain\r\n\r\n\
            line 1\nCUDA error: out of memory\n\r\n--XYZ--\r\n";
        assert_eq!(bytes, want);
        assert_eq!(len, want.len() as u64);
        assert_eq!(body.content_type(), "multipart/form-data; boundary=XYZ");
        Ok(())
    }

    #[test]
    fn server_urls_are_validated_and_report_paths_joined_to_them() {
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

    fn reply(status: u16, retry_after: Option<u64>, body: &str) -> Reply {
        Reply {
            status,
            retry_after,
            location: None,
            body: Some(body.to_owned()),
        }
    }

    #[test]
    fn responses_are_sorted_into_created_retry_and_rejected() {
        let api =
            |code: &str, msg: &str| format!(r#"{{"error":{{"code":"{code}","message":"{msg}"}}}}"#);
        let cases = [
            (
                reply(401, None, &api("unauthorized", "bad token")),
                "rejected (401 unauthorized): the token is missing, unknown or revoked",
            ),
            (
                reply(403, None, &api("forbidden", "scope")),
                "rejected (403 forbidden): the token lacks the ingest scope",
            ),
            (
                reply(422, None, &api("invalid_meta", "unknown key \\\"x\\\"")),
                "rejected (422 invalid_meta): unknown key \"x\"",
            ),
            (
                reply(413, None, "<html>too big</html>\nmore"),
                "rejected (413 payload_too_large): <html>too big</html>",
            ),
            (reply(404, None, ""), "rejected (404 not_found): "),
            (reply(201, None, "<html>"), "unexpected 201 response"),
            (
                reply(503, Some(7), &api("unavailable", "database down")),
                "retry 7: server answered 503 unavailable: database down",
            ),
            (
                reply(429, None, ""),
                "retry -: server answered 429 too_many_requests: ",
            ),
            (
                reply(502, None, "Bad Gateway"),
                "retry -: server answered 502 bad_gateway: Bad Gateway",
            ),
            (
                reply(201, None, ""),
                "retry -: the 201 response was empty or cut off",
            ),
            (
                Reply {
                    location: Some("https://t/".into()),
                    ..reply(308, None, "")
                },
                "rejected (308 permanent_redirect): redirected to https://t/; pass that as --server",
            ),
        ];
        for (reply, want) in cases {
            let got = match reply.outcome() {
                Outcome::Failed(m) => m,
                Outcome::Retry {
                    reason,
                    retry_after,
                } => {
                    let after = retry_after.map_or("-".into(), |d| d.as_secs().to_string());
                    format!("retry {after}: {reason}")
                }
                Outcome::Created(c) => format!("created {c:?}"),
            };
            assert!(got.starts_with(want), "got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn created_reports_print_category_root_cause_url_and_repro() {
        let with_cause = r#"{"id":1,"url":"/reports/1","group_id":3,"duplicate":false,
            "classification":{"category":"cuda_oom","title":"t",
              "root_cause":{"line":42,"text":"CUDA out of memory. \n","rule":"oom"}},"repro":null}"#;
        let duplicate = r#"{"id":2,"url":"http://x/reports/2","group_id":3,"duplicate":true,
            "classification":{"category":"nccl_timeout","root_cause":null},
            "repro":{"job_id":9,"state":"queued"}}"#;
        let cases = [
            (
                with_cause,
                "run.log: cuda_oom (line 42: CUDA out of memory.)\n  http://s/reports/1\n",
            ),
            (
                duplicate,
                "run.log: nccl_timeout (no root-cause line)\n  http://x/reports/2 \
                 (duplicate of an existing report)\n  reproduction queued (job 9)\n",
            ),
        ];
        for (body, want) in cases {
            let Outcome::Created(created) = reply(201, None, body).outcome() else {
                panic!("not created: {body}");
            };
            assert_eq!(
                render_created(Path::new("run.log"), &created, "http://s"),
                want
            );
        }
    }

    #[test]
    fn directories_and_missing_files_are_usage_errors() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let BadInput(msg) = check_readable(dir.path())
            .err()
            .ok_or(io::ErrorKind::Other)?;
        assert!(msg.ends_with("is a directory, not a log file"), "{msg}");
        let BadInput(msg) = check_readable(&dir.path().join("nope.log"))
            .err()
            .ok_or(io::ErrorKind::Other)?;
        assert!(msg.contains("nope.log: cannot read:"), "{msg}");
        let file = dir.path().join("ok.log");
        fs::write(&file, "x")?;
        assert!(check_readable(&file).is_ok());
        Ok(())
    }
}
