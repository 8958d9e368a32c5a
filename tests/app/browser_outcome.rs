//! In a real browser (issue 30 item 1): a report whose reproduction ran on a worker without
//! torch. The page says "Environment error", names the missing module and the `--python` fix,
//! claims no true failing line, keeps the log's category, offers the re-queue, fits a phone,
//! and axe-core finds no serious or critical violation on it at desktop or phone width.

use std::time::Duration;

use serde_json::json;

use crate::browser::{LOG, PAGE_WAIT, axe_source, signed_in_browser, worker_post};
use crate::support::{create_token, wait_until};

/// What a worker without torch posts, under CPU translation.
const NO_TORCH: &str = "gpu-triage: CPU translation run (CUDA redirected to the CPU); torch is not importable, the script runs unchanged\nTraceback (most recent call last):\n  File \"/tmp/repro.py\", line 1, in <module>\n    import torch\nModuleNotFoundError: No module named 'torch'\n";

#[test]
fn a_reproduction_without_torch_reads_as_an_environment_error_in_a_real_browser() {
    let test = "a_reproduction_without_torch_reads_as_an_environment_error_in_a_real_browser";
    let Some(axe) = axe_source(test) else {
        return;
    };
    let Some(s) = signed_in_browser(test) else {
        return;
    };
    let d = &s.d;
    let worker = create_token(&s.url, "worker", "cpu-host");
    // A log with its script, pasted on the start page: its job is queued.
    d.go(&format!("{}/", s.base));
    d.wait_for_page("the home page", |_| true, "#new-report #log_text");
    d.run_js(
        "document.querySelector('#log_text').value = arguments[0];\
         document.querySelector('#script_text').value = arguments[1]; return true;",
        json!([
            LOG,
            "import torch\nx = torch.zeros(3).cuda()[torch.tensor([5]).cuda()]\n"
        ]),
    );
    d.click("#new-report button[type=submit]");
    let reports = format!("{}/reports/", s.base);
    d.wait_for_page(
        "the report page with a queued job",
        |url| url.starts_with(&reports),
        "#reproduction[data-pending]",
    );
    let report = d.current_url();
    let category = d.text("h1 .cat");

    // A worker whose interpreter has no torch runs it.
    let claim = json!({"worker": "cpu-box-1", "wait_secs": 0, "no_gpu": true, "gpu": null,
                       "sandbox": "bwrap"});
    let (status, job) = worker_post(&s.base, &worker, "/api/v1/jobs/claim", &claim);
    assert_eq!(status, 200, "{job}");
    let result = json!({"lease_token": job["lease_token"], "exit_code": 1, "duration_ms": 300,
        "stdout": "", "stderr": NO_TORCH, "gpu": null, "no_gpu": true, "cpu_translation": true,
        "sandbox": "bwrap",
        "environment": {"python": "3.11.2", "torch": null, "cuda_build": null, "hip_build": null,
                        "device": "cpu"}});
    let path = format!("/api/v1/jobs/{}/result", job["job_id"]);
    let (status, body) = worker_post(&s.base, &worker, &path, &result);
    assert_eq!(status, 200, "{body}");
    // The pending page reloads itself with the result.
    wait_until(PAGE_WAIT, "the page to reload with the outcome", || {
        d.count("#repro-outcome") == 1
    });

    let head = d.text("#repro-outcome");
    assert!(
        head.starts_with("Environment error in reproduction job")
            && head.contains("no module named 'torch'")
            && head.contains("the classification above is the log's"),
        "{head}"
    );
    assert_eq!(d.count("#true-line"), 0, "no true line in the header");
    let body_text = d.js("return document.body.innerText;");
    let body_text = body_text.as_str().unwrap_or_default();
    for said in [
        "true failing line",
        "actually raised at",
        "Reproduced on the CPU",
    ] {
        assert!(!body_text.contains(said), "the page says {said:?}");
    }
    assert_eq!(d.text("h1 .cat"), category, "the log's category stays");
    let line = d.text(".outcome-environment_error.outcome");
    assert!(line.starts_with("Environment error:"), "{line}");
    // The header's link leads to the fix, which names the flag and the module.
    d.click("#repro-outcome a");
    wait_until(Duration::from_secs(10), "the fix to be the target", || {
        d.js("const t = document.querySelector(':target'); return t ? t.className : '';")
            == json!("outcome-fix")
    });
    let fix = d.text(".outcome-fix");
    assert!(
        fix.contains("--python") && fix.contains("torch") && fix.contains("re-queue"),
        "{fix}"
    );
    assert!(d.text(".run-env").contains("no torch"));
    assert_eq!(
        d.count("form.requeue button"),
        1,
        "the job may be re-queued"
    );

    // It reads at desktop and phone widths, without overflow, and passes axe-core.
    let mut problems = Vec::new();
    for width in [1400, 400] {
        d.resize(width, 1000);
        d.go(&report);
        d.wait_for_page("the report page", |_| true, "#repro-outcome");
        let wide = d.js(
            "return [...document.querySelectorAll('#repro-outcome, .outcome, .outcome-fix')]\
                 .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.id || e.className);",
        );
        if wide != json!([]) {
            problems.push(format!("at {width}: overflowing {wide}"));
        }
        for v in d.axe(&axe) {
            problems.push(format!("at {width}: {v}"));
        }
        d.screenshot(&format!("report-environment-error-{width}"));
        d.js("document.getElementById('reproduction').scrollIntoView(); return true;");
        d.screenshot(&format!("report-environment-error-job-{width}"));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // Re-queued once the worker is fixed: a new job is queued for the report.
    d.click("form.requeue button");
    d.wait_for_page(
        "the report with the re-queued job",
        |url| url.starts_with(&report),
        "#reproduction[data-pending]",
    );
    assert_eq!(d.count(".job .state-queued"), 1);
}
