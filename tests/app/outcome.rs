//! What each reproduction showed (issue 30 item 1), driven as a worker drives the queue over
//! the in-process router: every outcome in the API, a run stopped by the worker's environment
//! (a missing module) that leaves the report's classification alone and says on the page how to
//! fix the worker, the re-queue that follows the fix, repeats and the CPU run under the same
//! rule, and reproductions stored before outcomes were.

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::browse::{attr, page, sign_in, texts};
use crate::jobs::{
    ASYNC_LOG, SYNC_STDERR, claim_ok, post_form, report_with_script, result_body, tokens,
};
use crate::support::TestApp;

/// What a worker whose interpreter lacks torch sends back, under CPU translation.
const NO_TORCH: &str = "gpu-triage: CPU translation run (CUDA redirected to the CPU); torch is not importable, the script runs unchanged\nTraceback (most recent call last):\n  File \"/tmp/repro.py\", line 1, in <module>\n    import torch\nModuleNotFoundError: No module named 'torch'\n";

/// A worker without a GPU, running under CPU translation, posts `stderr` with `exit_code`.
fn cpu_result(lease: &str, exit_code: Value, stderr: &str) -> Value {
    let mut body = result_body(lease, "", stderr);
    body["exit_code"] = exit_code;
    body["gpu"] = Value::Null;
    body["no_gpu"] = json!(true);
    body["cpu_translation"] = json!(true);
    body
}

async fn post_result(app: &TestApp, worker: &str, job: i64, body: &Value) {
    let res = app
        .post_json(worker, &format!("/api/v1/jobs/{job}/result"), body)
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
}

async fn report_json(app: &TestApp, token: &str, report: i64) -> Value {
    let res = app
        .get_as(token, &format!("/api/v1/reports/{report}"))
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    res.json()
}

#[tokio::test]
async fn a_missing_module_keeps_the_logs_classification_and_the_fixed_worker_reruns_the_job() {
    let app = TestApp::spawn().await;
    let (ingest, worker) = tokens(&app).await;
    let (report, job) = report_with_script(&app, &ingest, ASYNC_LOG).await;
    let before = report_json(&app, &ingest, report).await;
    let (_, lease, _) = claim_ok(&app, &worker, "cpu-host").await;
    post_result(&app, &worker, job, &cpu_result(&lease, json!(1), NO_TORCH)).await;

    let api = report_json(&app, &ingest, report).await;
    let r = &api["reproductions"][0];
    assert_eq!(r["outcome"], "environment_error", "{r}");
    let reason = r["outcome_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("no module named 'torch'"), "{reason}");
    let fix = r["outcome_fix"].as_str().unwrap_or_default();
    assert!(fix.contains("--python") && fix.contains("torch"), "{fix}");
    // The report keeps what the log said: category, title, root-cause line, source.
    for field in ["category", "title", "category_source", "original_category"] {
        assert_eq!(api[field], before[field], "{field}");
    }
    assert_eq!(api["category"], "out_of_bounds");
    assert_eq!(api["category_source"], "log");
    assert_eq!(
        api["classification"]["root_cause"],
        before["classification"]["root_cause"]
    );
    let group = api["group_id"].as_i64().unwrap();
    let g = app
        .get_as(&ingest, &format!("/api/v1/groups/{group}"))
        .await
        .json();
    assert_eq!(g["category"], "out_of_bounds", "{g}");

    // The page: no true line anywhere, the missing module and the fix said in words.
    let b = sign_in(&app, &ingest).await;
    let path = format!("/reports/{report}");
    let html = page(&app, &b.cookie, &path).await.body;
    assert!(texts(&html, "#true-line").is_empty(), "no header claim");
    for said in [
        "true failing line",
        "actually raised at",
        "Reproduced on the CPU",
    ] {
        assert!(!html.contains(said), "the page says {said:?}");
    }
    assert_eq!(texts(&html, "h1 .cat"), ["Out of bounds"]);
    let head = texts(&html, "#repro-outcome").join(" ");
    assert!(
        head.contains("Environment error") && head.contains("no module named 'torch'"),
        "{head}"
    );
    assert!(
        head.contains("the classification above is the log's"),
        "{head}"
    );
    let line = texts(&html, &format!("#outcome-{job}")).join(" ");
    assert!(line.starts_with("Environment error:"), "{line}");
    let fix = texts(&html, &format!("#outcome-fix-{job}")).join(" ");
    assert!(
        fix.contains("--python") && fix.contains("re-queue"),
        "{fix}"
    );
    assert!(
        texts(&html, ".trace-sync .mark")
            .iter()
            .any(|m| m.contains("where the run stopped")),
        "{html}"
    );
    assert!(texts(&html, "#category-followed").is_empty());

    // Once the worker has torch, the job is re-queued from the page and this time reproduces.
    let action = attr(&html, "form.requeue", "action").expect("a re-queue button");
    let res = post_form(&app, &b.cookie, &action, format!("csrf={}", b.csrf)).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    let (new_job, lease, _) = claim_ok(&app, &worker, "gpu-host").await;
    assert_ne!(new_job, job);
    post_result(
        &app,
        &worker,
        new_job,
        &result_body(&lease, "", SYNC_STDERR),
    )
    .await;
    let api = report_json(&app, &ingest, report).await;
    let outcomes: Vec<&Value> = api["reproductions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["outcome"])
        .collect();
    assert_eq!(
        outcomes,
        [&json!("environment_error"), &json!("reproduced")]
    );
    assert_eq!(api["reproductions"][1]["outcome_reason"], Value::Null);
    let html = page(&app, &b.cookie, &path).await.body;
    let true_line = texts(&html, "#true-line").join(" ");
    assert!(true_line.contains("train.py:41"), "{true_line}");
    assert!(texts(&html, "#repro-outcome").is_empty(), "{html}");
}

/// Posts one result for a fresh report and returns that report's first reproduction.
async fn outcome_of(app: &TestApp, body: impl FnOnce(&str) -> Value) -> Value {
    let (ingest, worker) = tokens(app).await;
    let (report, job) = report_with_script(app, &ingest, ASYNC_LOG).await;
    let (_, lease, _) = claim_ok(app, &worker, "host").await;
    post_result(app, &worker, job, &body(&lease)).await;
    report_json(app, &ingest, report).await["reproductions"][0].clone()
}

#[tokio::test]
async fn each_run_says_what_it_showed() {
    let syntax = "  File \"/tmp/repro.py\", line 3\n    print \"loss\", loss\n    ^^^^^^^^^^^^^^^^^^^\nSyntaxError: Missing parentheses in call to 'print'. Did you mean print(...)?\n";
    let denied = "Traceback (most recent call last):\n  File \"/tmp/repro.py\", line 4, in <module>\n    open(\"/data/cache.pt\", \"wb\")\nPermissionError: [Errno 13] Permission denied: '/data/cache.pt'\n";
    let cases: [(&str, Value, bool, &str); 5] = [
        (SYNC_STDERR, json!(1), false, "reproduced"),
        ("loss 2.31\n", json!(0), false, "did_not_fail"),
        ("", Value::Null, true, "timed_out"),
        (syntax, json!(1), false, "environment_error"),
        (denied, json!(1), false, "environment_error"),
    ];
    for (n, (stderr, exit, timed_out, want)) in cases.into_iter().enumerate() {
        // Each upload is its own report.
        let app = TestApp::spawn().await;
        let r = outcome_of(&app, |lease| {
            let mut body = result_body(lease, "", stderr);
            body["exit_code"] = exit.clone();
            body["timed_out"] = json!(timed_out);
            body
        })
        .await;
        assert_eq!(r["outcome"], want, "case {n}: {r}");
        let informative = want != "environment_error";
        assert_eq!(r["outcome_fix"].is_null(), informative, "case {n}: {r}");
    }
}

#[tokio::test]
async fn a_job_the_sandbox_never_started_dies_with_a_sandbox_error() {
    let app = TestApp::spawn().await;
    let (ingest, worker) = tokens(&app).await;
    let (report, job) = report_with_script(&app, &ingest, ASYNC_LOG).await;
    for _ in 1..=3 {
        let (_, lease, _) = claim_ok(&app, &worker, "host-a").await;
        let mut body = result_body(&lease, "", "");
        body["exit_code"] = Value::Null;
        body["error"] = json!(
            "the sandbox could not start the script: bwrap: setting up uid map: Permission denied"
        );
        post_result(&app, &worker, job, &body).await;
    }
    let r = &report_json(&app, &ingest, report).await["reproductions"][0];
    assert_eq!(r["state"], "dead", "{r}");
    assert_eq!(r["outcome"], "sandbox_error", "{r}");
    assert!(
        r["outcome_reason"]
            .as_str()
            .is_some_and(|s| s.contains("setting up uid map")),
        "{r}"
    );
    // A queued or running job has no outcome yet.
    let (other, _) = report_with_script(&app, &ingest, &format!("epoch 9\n{ASYNC_LOG}")).await;
    let r = &report_json(&app, &ingest, other).await["reproductions"][0];
    assert_eq!(
        (&r["state"], &r["outcome"]),
        (&json!("queued"), &Value::Null)
    );
    let b = sign_in(&app, &ingest).await;
    let html = page(&app, &b.cookie, &format!("/reports/{report}"))
        .await
        .body;
    let line = texts(&html, &format!("#outcome-{job}")).join(" ");
    assert!(line.starts_with("Sandbox error:"), "{line}");
    assert!(
        texts(&html, "#repro-outcome")
            .join(" ")
            .contains("Sandbox error")
    );
}

#[tokio::test]
async fn repeats_and_the_cpu_run_follow_the_same_rule() {
    let app = TestApp::spawn().await;
    let (ingest, worker) = tokens(&app).await;
    let meta = json!({"repeats": 3}).to_string();
    let res = app
        .upload(
            &ingest,
            &[
                ("log", Some("train.log"), ASYNC_LOG.as_bytes()),
                ("script", Some("repro.py"), b"import torch\n".as_slice()),
                ("meta", None, meta.as_bytes()),
            ],
            None,
        )
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let (report, job) = (
        res.json()["id"].as_i64().unwrap(),
        res.json()["repro"]["job_id"].as_i64().unwrap(),
    );
    let (_, lease, _) = claim_ok(&app, &worker, "cpu-host").await;
    // A worker that decided its runs' outcomes, and one that did not (an older worker): the
    // server gives the latter the outcome of the run it kept.
    let env_run = json!({"exit_code": 1, "duration_ms": 90, "failing_line": "repro.py:1",
                         "outcome": "environment_error"});
    let old_run = json!({"exit_code": 1, "duration_ms": 90, "failing_line": "repro.py:1"});
    let mut body = cpu_result(&lease, json!(1), NO_TORCH);
    body["runs"] = json!([env_run.clone(), old_run, env_run]);
    post_result(&app, &worker, job, &body).await;
    let api = report_json(&app, &ingest, report).await;
    let r = &api["reproductions"][0];
    let outcomes: Vec<&Value> = r["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["outcome"])
        .collect();
    assert_eq!(outcomes, [&json!("environment_error"); 3], "{r}");
    assert_eq!(
        r["verdict"], "environment error 3/3: no run reached the failure",
        "{r}"
    );
    // Not "fails 3/3 at repro.py:1" on the group either.
    let group = api["group_id"].as_i64().unwrap();
    let g = app
        .get_as(&ingest, &format!("/api/v1/groups/{group}"))
        .await
        .json();
    assert!(
        !g["verdict"].as_str().unwrap_or_default().contains("fails"),
        "{g}"
    );

    // A GPU run that reproduced, whose CPU follow-up could not import torch.
    let (report, job) = report_with_script(&app, &ingest, &format!("epoch 2\n{ASYNC_LOG}")).await;
    let (_, lease, _) = claim_ok(&app, &worker, "gpu-host").await;
    let mut body = result_body(&lease, "", SYNC_STDERR);
    body["cpu"] = json!({"exit_code": 1, "duration_ms": 50, "stdout": "", "stderr": NO_TORCH});
    post_result(&app, &worker, job, &body).await;
    let api = report_json(&app, &ingest, report).await;
    let r = &api["reproductions"][0];
    assert_eq!(r["outcome"], "reproduced", "{r}");
    assert_eq!(r["cpu_run"]["outcome"], "environment_error", "{r}");
    let b = sign_in(&app, &ingest).await;
    let html = page(&app, &b.cookie, &format!("/reports/{report}"))
        .await
        .body;
    let cpu = texts(&html, ".cpu-line").join(" ");
    assert!(
        cpu.contains("stopped by the worker's environment") && cpu.contains("'torch'"),
        "{cpu}"
    );
    assert!(
        !texts(&html, ".trace-cpu .mark")
            .iter()
            .any(|m| m.contains("failing line on the CPU")),
        "{html}"
    );
}

#[tokio::test]
async fn a_reproduction_stored_before_outcomes_gets_one_when_read() {
    let app = TestApp::spawn().await;
    let (ingest, worker) = tokens(&app).await;
    let (report, job) = report_with_script(&app, &ingest, ASYNC_LOG).await;
    let (_, lease, _) = claim_ok(&app, &worker, "cpu-host").await;
    let mut body = cpu_result(&lease, json!(1), NO_TORCH);
    body["cpu"] = json!({"exit_code": 0, "duration_ms": 5, "stdout": "ok\n", "stderr": ""});
    body["runs"] = json!([{"exit_code": 1, "duration_ms": 9}, {"exit_code": 0, "duration_ms": 9}]);
    post_result(&app, &worker, job, &body).await;
    // As migration 22 leaves a row written before it: no outcome anywhere.
    sqlx::query(
        "UPDATE reproductions SET outcome = NULL, outcome_reason = '', outcome_fix = '', \
             cpu_run = cpu_run - 'outcome', \
             runs = (SELECT jsonb_agg(r - 'outcome') FROM jsonb_array_elements(runs) r) \
         WHERE job_id = $1",
    )
    .bind(job)
    .execute(app.db.pool())
    .await
    .unwrap();
    let stored: Option<String> =
        sqlx::query_scalar("SELECT outcome FROM reproductions WHERE job_id = $1")
            .bind(job)
            .fetch_one(app.db.pool())
            .await
            .unwrap();
    assert_eq!(stored, None);
    let r = &report_json(&app, &ingest, report).await["reproductions"][0];
    assert_eq!(r["outcome"], "environment_error", "{r}");
    assert!(
        r["outcome_reason"]
            .as_str()
            .is_some_and(|s| s.contains("'torch'")),
        "{r}"
    );
    assert_eq!(r["cpu_run"]["outcome"], "did_not_fail", "{r}");
    let runs: Vec<&Value> = r["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["outcome"])
        .collect();
    assert_eq!(runs, [&json!("environment_error"), &json!("did_not_fail")]);
}

#[tokio::test]
async fn an_environment_error_never_moves_the_reports_category() {
    // torch cannot load its CUDA libraries on the worker: a specific, high-confidence driver
    // failure that would outrank the log's unknown one, were it the user's failure.
    let libs = "Traceback (most recent call last):\n  File \"/tmp/repro.py\", line 1, in <module>\n    import torch\n  File \"/venv/lib/python3.11/site-packages/torch/__init__.py\", line 290, in <module>\n    _load_global_deps()\nOSError: libcudnn.so.9: cannot open shared object file: No such file or directory\n";
    let app = TestApp::spawn().await;
    let (ingest, worker) = tokens(&app).await;
    let log = "step 7\nTraceback (most recent call last):\n  File \"/home/u/train.py\", line 12, in <module>\n    step()\nSegmentation fault (core dumped)\n";
    let (report, job) = report_with_script(&app, &ingest, log).await;
    assert_eq!(
        report_json(&app, &ingest, report).await["category"],
        "unknown"
    );
    let (_, lease, _) = claim_ok(&app, &worker, "gpu-host").await;
    post_result(&app, &worker, job, &result_body(&lease, "", libs)).await;
    let api = report_json(&app, &ingest, report).await;
    let r = &api["reproductions"][0];
    assert_eq!(r["outcome"], "environment_error", "{r}");
    assert_eq!(r["classification"]["category"], "driver_issue", "{r}");
    assert_eq!(
        (&api["category"], &api["category_source"]),
        (&json!("unknown"), &json!("log")),
        "{api}"
    );
    let fix = r["outcome_fix"].as_str().unwrap_or_default();
    assert!(fix.contains("`import torch` works"), "{fix}");
}
