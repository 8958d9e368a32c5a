//! The CI side of issue 20: `gpu-triage upload --summary markdown` through the real binary
//! against a spawned `serve`, and the repository's `action.yml` (a composite GitHub Action)
//! parsed and its steps' `run:` scripts executed with bash as a runner would, inputs and the
//! runner's variables substituted, against the same local server.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value};

use crate::support::{binary, create_token, database_url, spawn_server};

const OOB_LOG: &str = "step 9\nIndexError: Target 10 is out of bounds.\n";

/// A spawned server on a fresh database and an ingest token: (db, server guard, base URL, token).
fn server() -> (
    tokio::runtime::Runtime,
    gpu_triage::storage::Db,
    crate::support::KillOnDrop,
    String,
    String,
) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (db, options) = rt.block_on(crate::support::fresh_db());
    let url = database_url(options.get_database().unwrap());
    let token = create_token(&url, "ingest", "ci");
    let (guard, port) = spawn_server(&url);
    (rt, db, guard, format!("http://127.0.0.1:{port}"), token)
}

#[test]
fn upload_summary_markdown_prints_a_block_per_log_and_keeps_the_lines_on_stderr() {
    let (_rt, _db, _server, base, token) = server();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("train.log");
    std::fs::write(&log, OOB_LOG).unwrap();
    let other = dir.path().join("oom.log");
    std::fs::write(
        &other,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n",
    )
    .unwrap();
    let out = binary()
        .args(["upload", "--summary", "markdown", "--project", "vision"])
        .arg(&log)
        .arg(&other)
        .env("GPU_TRIAGE_URL", &base)
        .env("GPU_TRIAGE_TOKEN", &token)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    let blocks: Vec<&str> = stdout.split("### ").filter(|b| !b.is_empty()).collect();
    assert_eq!(blocks.len(), 2, "{stdout}");
    assert!(blocks[0].starts_with("Out of bounds: "), "{stdout}");
    assert!(
        blocks[0].contains("**Root cause** (line 2): `IndexError: Target 10 is out of bounds.`"),
        "{stdout}"
    );
    assert!(blocks[0].contains("**Next steps**\n\n- "), "{stdout}");
    assert!(
        blocks[0].contains(&format!("· [Report 1]({base}/reports/1)")),
        "{stdout}"
    );
    assert!(blocks[1].starts_with("Out of memory: "), "{stdout}");
    // The usual lines still reach the CI log, on stderr.
    assert!(stderr.contains("out_of_bounds (line 2: "), "{stderr}");
    assert!(!stdout.contains("out_of_bounds (line 2"), "{stdout}");
    // An unknown format is a usage error.
    let bad = binary()
        .args(["upload", "--summary", "html"])
        .arg(&log)
        .env("GPU_TRIAGE_TOKEN", &token)
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

/// The YAML subset `action.yml` is written in: two-space indentation, `key: value` mappings,
/// `- ` sequences of mappings, `|` and `>-` block scalars, quoted or plain scalars, comments.
fn parse_yaml(text: &str) -> Value {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut at = 0;
    skip_blank(&lines, &mut at);
    block(&mut lines, &mut at, 0)
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

fn skip_blank(lines: &[String], at: &mut usize) {
    while *at < lines.len() && {
        let t = lines[*at].trim();
        t.is_empty() || t.starts_with('#')
    } {
        *at += 1;
    }
}

fn block(lines: &mut Vec<String>, at: &mut usize, indent: usize) -> Value {
    if lines[*at][indent..].starts_with("- ") {
        let mut items = Vec::new();
        while *at < lines.len()
            && indent_of(&lines[*at]) == indent
            && lines[*at][indent..].starts_with("- ")
        {
            // The item's first key sits two columns in, like the keys below it.
            lines[*at] = format!("{}{}", " ".repeat(indent + 2), &lines[*at][indent + 2..]);
            items.push(block(lines, at, indent + 2));
            skip_blank(lines, at);
        }
        return Value::Array(items);
    }
    let mut map = Map::new();
    while *at < lines.len() && indent_of(&lines[*at]) == indent {
        let line = lines[*at].trim().to_owned();
        let (key, rest) = line.split_once(':').expect("a `key: value` line");
        let rest = rest.trim();
        *at += 1;
        let value = match rest {
            "|" | ">-" => {
                let mut body = Vec::new();
                while *at < lines.len()
                    && (lines[*at].trim().is_empty() || indent_of(&lines[*at]) > indent)
                {
                    body.push(lines[*at].clone());
                    *at += 1;
                }
                let cut = body
                    .iter()
                    .filter(|l| !l.trim().is_empty())
                    .map(|l| indent_of(l))
                    .min()
                    .unwrap_or(0);
                let body: Vec<&str> = body
                    .iter()
                    .map(|l| l.get(cut..).unwrap_or("").trim_end())
                    .collect();
                let text = if rest == "|" {
                    format!("{}\n", body.join("\n").trim_end())
                } else {
                    body.join(" ").trim().to_owned()
                };
                Value::String(text)
            }
            "" => {
                skip_blank(lines, at);
                let inner = indent_of(&lines[*at]);
                assert!(inner > indent, "nested block under {key}");
                block(lines, at, inner)
            }
            scalar => {
                let unquoted = scalar
                    .strip_prefix('\'')
                    .and_then(|s| s.strip_suffix('\''))
                    .or_else(|| scalar.strip_prefix('"').and_then(|s| s.strip_suffix('"')))
                    .unwrap_or(scalar);
                Value::String(unquoted.to_owned())
            }
        };
        map.insert(key.trim().to_owned(), value);
        skip_blank(lines, at);
    }
    Value::Object(map)
}

/// `${{ inputs.NAME }}` and `${{ github.NAME }}` replaced as a runner would.
fn expand(
    text: &str,
    inputs: &BTreeMap<String, String>,
    github: &BTreeMap<&str, String>,
) -> String {
    let mut out = text.to_owned();
    while let Some(start) = out.find("${{") {
        let end = out[start..].find("}}").expect("closed expression") + start;
        let expr = out[start + 3..end].trim().to_owned();
        let value = if let Some(name) = expr.strip_prefix("inputs.") {
            inputs.get(name).cloned().unwrap_or_default()
        } else if let Some(name) = expr.strip_prefix("github.") {
            github.get(name).cloned().expect("a github context value")
        } else {
            panic!("unexpected expression {expr}")
        };
        out.replace_range(start..end + 2, &value);
    }
    out
}

/// Runs the Action's `run:` steps with bash in `work` as a runner would, `inputs` and
/// `github` substituted into their `env:`; each must succeed.
fn run_steps(
    action: &Value,
    inputs: &BTreeMap<String, String>,
    github: &BTreeMap<&str, String>,
    work: &Path,
    summary: &Path,
    github_path: &Path,
) {
    let steps = action["runs"]["steps"].as_array().unwrap();
    assert!(steps.len() >= 2);
    for step in steps {
        let Some(run) = step["run"].as_str() else {
            continue;
        };
        assert_eq!(
            step["shell"], "bash",
            "a composite run step names its shell"
        );
        // Inputs reach scripts through `env:` only, never spliced into the script text.
        assert!(!run.contains("${{"), "{run}");
        let mut cmd = std::process::Command::new("bash");
        cmd.args(["--noprofile", "--norc", "-eo", "pipefail", "-c", run])
            .current_dir(work)
            .env_remove("GPU_TRIAGE_URL")
            .env_remove("GPU_TRIAGE_TOKEN")
            .env("GITHUB_STEP_SUMMARY", summary)
            .env("GITHUB_PATH", github_path)
            .env("GITHUB_REPOSITORY", "org/vision")
            .env("GITHUB_SERVER_URL", "https://github.example.com")
            .env("GITHUB_RUN_ID", "4242")
            .env("GITHUB_SHA", "0123abcd")
            .env("GITHUB_REF_NAME", "main")
            .env("GITHUB_HEAD_REF", "")
            .env("RUNNER_TEMP", work);
        for (name, value) in step["env"].as_object().into_iter().flatten() {
            cmd.env(name, expand(value.as_str().unwrap(), inputs, github));
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "step {}: {}{}",
            step["name"],
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_github_action_uploads_the_failed_logs_and_writes_the_job_summary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let action = parse_yaml(&std::fs::read_to_string(root.join("action.yml")).unwrap());
    assert_eq!(action["runs"]["using"], "composite");
    let declared = action["inputs"].as_object().unwrap();
    for name in [
        "server-url",
        "token",
        "logs",
        "project",
        "script",
        "summary",
        "gpu-triage",
    ] {
        assert!(declared.contains_key(name), "input {name}");
    }
    for name in ["server-url", "token", "logs"] {
        assert_eq!(declared[name]["required"], "true", "{name}");
    }

    let (rt, db, _server, base, token) = server();
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(work.path().join("logs/rank0")).unwrap();
    std::fs::write(work.path().join("logs/rank0/train.log"), OOB_LOG).unwrap();
    std::fs::write(work.path().join("logs/notes.txt"), "not a log\n").unwrap();
    let summary = work.path().join("step-summary.md");
    std::fs::write(&summary, "earlier content\n").unwrap();
    let github_path = work.path().join("github-path");

    // The caller's `with:`; the rest come from the defaults.
    let mut inputs: BTreeMap<String, String> = declared
        .iter()
        .map(|(k, v)| (k.clone(), v["default"].as_str().unwrap_or("").to_owned()))
        .collect();
    inputs.insert("server-url".into(), base.clone());
    inputs.insert("token".into(), token);
    inputs.insert("logs".into(), "logs/**/*.log\nmissing/*.log".into());
    inputs.insert(
        "gpu-triage".into(),
        env!("CARGO_BIN_EXE_gpu-triage").to_owned(),
    );
    let github: BTreeMap<&str, String> = [("action_path", root.display().to_string())]
        .into_iter()
        .collect();

    run_steps(
        &action,
        &inputs,
        &github,
        work.path(),
        &summary,
        &github_path,
    );

    // One report, from the log the glob found, with the runner's metadata.
    let rows: Vec<(String, String, String, String, String)> = rt
        .block_on(
            sqlx::query_as("SELECT project, job_url, commit_sha, branch, filename FROM reports")
                .fetch_all(db.pool()),
        )
        .unwrap();
    assert_eq!(
        rows,
        [(
            "org/vision".to_owned(),
            "https://github.example.com/org/vision/actions/runs/4242".to_owned(),
            "0123abcd".to_owned(),
            "main".to_owned(),
            "train.log".to_owned()
        )]
    );
    let written = std::fs::read_to_string(&summary).unwrap();
    assert!(
        written.starts_with("earlier content\n### Out of bounds: "),
        "{written}"
    );
    assert!(
        written.contains("**Root cause** (line 2): `IndexError: Target 10 is out of bounds.`"),
        "{written}"
    );
    assert!(
        written.contains(&format!("({base}/reports/1)")),
        "{written}"
    );
}

/// The Action given a directory (issue 41): its text files are one run, one report whose
/// summary names the first failure and the action, with the runner's metadata.
#[test]
fn the_github_action_uploads_a_directory_as_one_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let action = parse_yaml(&std::fs::read_to_string(root.join("action.yml")).unwrap());
    let declared = action["inputs"].as_object().unwrap();
    let (rt, db, _server, base, token) = server();
    let work = tempfile::tempdir().unwrap();
    for (name, text) in crate::job_runs::run_files() {
        let path = work.path().join("artifacts").join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    // Not text: not part of the run.
    std::fs::write(
        work.path().join("artifacts/core.bin"),
        [0u8, 159, 146, 150, 0, 1],
    )
    .unwrap();
    let summary = work.path().join("step-summary.md");
    let github_path = work.path().join("github-path");
    let mut inputs: BTreeMap<String, String> = declared
        .iter()
        .map(|(k, v)| (k.clone(), v["default"].as_str().unwrap_or("").to_owned()))
        .collect();
    inputs.insert("server-url".into(), base.clone());
    inputs.insert("token".into(), token);
    inputs.insert("logs".into(), "artifacts".into());
    inputs.insert(
        "gpu-triage".into(),
        env!("CARGO_BIN_EXE_gpu-triage").to_owned(),
    );
    let github: BTreeMap<&str, String> = [("action_path", root.display().to_string())]
        .into_iter()
        .collect();
    run_steps(
        &action,
        &inputs,
        &github,
        work.path(),
        &summary,
        &github_path,
    );

    let (reports, runs): (i64, i64) = rt
        .block_on(
            sqlx::query_as(
                "SELECT (SELECT count(*) FROM reports), (SELECT count(*) FROM job_runs)",
            )
            .fetch_one(db.pool()),
        )
        .unwrap();
    assert_eq!((reports, runs), (1, 1), "one directory, one run");
    let (project, job_url, files, first): (String, String, i32, String) = rt
        .block_on(
            sqlx::query_as(
                "SELECT r.project, r.job_url, j.files, j.story -> 'first_failure' ->> 'file' \
                 FROM reports r JOIN job_runs j ON j.report_id = r.id",
            )
            .fetch_one(db.pool()),
        )
        .unwrap();
    assert_eq!(project, "org/vision");
    assert_eq!(
        job_url,
        "https://github.example.com/org/vision/actions/runs/4242"
    );
    let want = i32::try_from(crate::job_runs::run_files().len()).unwrap();
    assert_eq!(files, want, "the rank logs, the journal and Slurm's output");
    assert_eq!(first, "node-0/rank2.log");
    let written = std::fs::read_to_string(&summary).unwrap();
    assert!(written.contains("**Action: Fix the code**"), "{written}");
    assert!(written.contains("node-0/rank2.log"), "{written}");
    assert!(
        written.contains(&format!("({base}/reports/1)")),
        "{written}"
    );
}
