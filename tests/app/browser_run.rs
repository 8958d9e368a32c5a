//! In a real browser (issue 41 item 5): the report page of a run of files (the FunASR
//! eight-rank log split per rank, with the node's journal and Slurm's output). It says what to
//! do with the job, names the first failure, shows the timeline with the consequences folded,
//! every file with a link into the log viewer at its first line, opens the first failure in
//! the viewer under its file's heading with its line highlighted, finds a text across all the
//! files with the matches listed per file, fits a phone, and axe-core finds no serious or critical violation on it at desktop or
//! phone width.

use serde_json::json;

use crate::browser::{axe_source, signed_in_browser};
use crate::support::create_token;

/// Posts the run as `log` parts over a real socket; the new report's id.
fn upload_run(base: &str, token: &str) -> i64 {
    let boundary = "gpu-triage-run-boundary-4242";
    let mut body = Vec::new();
    for (name, text) in crate::job_runs::run_files() {
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"log\"; filename=\"{name}\"\r\nContent-Type: text/plain\r\n\r\n")
                .as_bytes(),
        );
        body.extend_from_slice(text.as_bytes());
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut res = agent
        .post(format!("{base}/api/v1/reports"))
        .header("Authorization", format!("Bearer {token}"))
        .header(
            "Content-Type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .send(&body[..])
        .expect("upload");
    let text = res.body_mut().read_to_string().unwrap_or_default();
    assert_eq!(res.status().as_u16(), 201, "{text}");
    let created: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    created["id"].as_i64().expect("id")
}

#[test]
fn a_runs_page_shows_the_action_the_first_failure_the_timeline_and_every_file() {
    let test = "a_runs_page_shows_the_action_the_first_failure_the_timeline_and_every_file";
    let Some(axe) = axe_source(test) else {
        return;
    };
    let Some(s) = signed_in_browser(test) else {
        return;
    };
    let d = &s.d;
    let ingest = create_token(&s.url, "ingest", "ci");
    let id = upload_run(&s.base, &ingest);
    let report = format!("{}/reports/{id}", s.base);
    d.go(&report);
    d.wait_for_page("the run's report page", |_| true, "#run-action");

    let action = d.text("#run-action");
    assert!(
        action.starts_with("Fix the code") && action.contains("rank 2"),
        "{action}"
    );
    let first = d.text("#first-failure");
    assert!(
        first.contains("node-0/rank2.log line 1") && first.contains("rank 2"),
        "{first}"
    );
    assert!(
        d.text("#run-timeline li.event-first")
            .contains("CUDA out of memory"),
        "the first failure leads the timeline"
    );
    // The consequences are folded under the first failure until opened.
    assert_eq!(
        d.js("return document.querySelector('#run-consequences').open;"),
        json!(false)
    );
    d.click("#run-consequences summary");
    let folded = d.text("#run-consequences");
    assert!(
        folded.contains("node-0/rank5.log") && folded.contains("slurm-4242.out"),
        "{folded}"
    );
    assert_eq!(d.count("#run-files > li"), 7);

    // A file's link opens the log viewer at the file's first line.
    d.click("#run-files li.file-consequence a.mono");
    d.wait_for_page(
        "the log at a file",
        |url| url.contains("start="),
        "pre.log .line",
    );
    let first_line = d.text("pre.log .line");
    assert!(first_line.contains("Watchdog caught"), "{first_line}");

    // The first failure's link opens the viewer in its file, its line highlighted.
    d.go(&report);
    d.wait_for_page("the run's report page", |_| true, "#first-failure");
    d.click("#first-failure a");
    d.wait_for_page(
        "the log at the first failure",
        |url| url.contains("line="),
        "pre.log .line.hl",
    );
    let hl = d.text("pre.log .line.hl");
    assert!(hl.contains("OutOfMemoryError"), "{hl}");
    let file_of_hl = d.js(
        "const hl = document.querySelector('pre.log .line.hl'); let e = hl; \
         while (e && !(e.classList && e.classList.contains('file-head'))) e = e.previousElementSibling; \
         return [e ? e.textContent : null, hl.querySelector('.ln').title];",
    );
    assert_eq!(
        file_of_hl,
        json!([
            "node-0/rank2.log · rank 2 · liangxianchen-funasr-15wh-train-lxc0-w-0 · cuda:2",
            "node-0/rank2.log line 1"
        ]),
        "the highlighted line sits under its file's heading"
    );
    // Every file opens in the viewer from the pane.
    assert_eq!(d.count("#run-pane-files a"), 7);

    // Find searches every file of the run, its matches listed per file.
    let find = format!("{report}?grep=Connection+closed#log");
    d.go(&find);
    d.wait_for_page("the find's matches", |_| true, "#find-position");
    let matches = d.count("pre.log .line");
    assert!(
        matches >= 3,
        "matches in rank 0, 4 and 6's files: {matches}"
    );
    let per_file = d.text("#find-files");
    for rank in [0, 4, 6] {
        assert!(
            per_file.contains(&format!("node-0/rank{rank}.log")),
            "{per_file}"
        );
    }
    assert_eq!(
        d.count("#find-files li"),
        d.count("pre.log .file-head"),
        "one heading in the matches per file listed"
    );
    let listed: u64 = d
        .js("return [...document.querySelectorAll('#find-files li .muted')].map(e => parseInt(e.textContent)).reduce((a, b) => a + b, 0);")
        .as_u64()
        .expect("a count");
    assert_eq!(
        listed, matches as u64,
        "every match shown is counted in its file"
    );
    d.click("#find-files li:last-child a");
    d.wait_for_page(
        "the last file's first match",
        |url| url.contains("hit="),
        "#find-position",
    );
    let current = d.text("pre.log .line.current .ln");
    assert!(!current.is_empty());

    let mut problems = Vec::new();
    for width in [1400, 400] {
        d.resize(width, 1000);
        d.go(&report);
        d.wait_for_page("the run's report page", |_| true, "#run-action");
        d.click("#run-consequences summary");
        for v in d.axe(&axe) {
            problems.push(format!("at {width}: {v}"));
        }
        d.go(&find);
        d.wait_for_page("the find's matches", |_| true, "#find-files");
        let wide = d.js(
            "return [...document.querySelectorAll('#run, #run *, #run-pane-files, .find-files')]\
                 .filter(e => e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX !== 'auto')\
                 .map(e => e.id || e.className || e.tagName).slice(0, 5);",
        );
        if wide != json!([]) {
            problems.push(format!("at {width}: overflowing {wide}"));
        }
        for v in d.axe(&axe) {
            problems.push(format!("at {width}: {v}"));
        }
        d.screenshot(&format!("report-run-{width}"));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
