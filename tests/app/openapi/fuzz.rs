//! The API and its description agree (SECURITY.md item 22, issue 28 item 5), checked by a
//! spec-driven fuzzer: schemathesis reads the served document and sends what it describes,
//! valid and invalid, to the real `serve` binary on a fresh database, with every check it has
//! (no 5xx; statuses, content types, headers and bodies as documented; schema-valid requests
//! accepted, schema-violating ones refused; authentication really required). Any failure it
//! reports fails the test, with its report.
//!
//! schemathesis is Python (PyPI), installed by `.ci/run` into its cache directory and named by
//! `GPU_TRIAGE_SCHEMATHESIS`; without it the test prints `SKIPPED`, except where
//! `GPU_TRIAGE_REQUIRE_SCHEMATHESIS` is set (CI), where it fails.
//!
//! The run is bounded: a fixed number of cases per operation and phase (`MAX_EXAMPLES`), a
//! fixed seed so that CI runs are repeatable, and the claim's long-poll pinned to `wait=0` so
//! that no case waits. Webhook writes are left out: saving or testing an endpoint makes the
//! server dial the generated address. Revoking a token is left out: a generated id can be the
//! fuzzer's own token, after which every case is a 401 and tests nothing.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::support::{
    KillOnDrop, binary, create_token, database_url, free_port, fresh_database_name, shared_tempdir,
    wait_for_status,
};

/// Cases generated per operation in each phase: enough to reach every documented constraint,
/// few enough that the run takes a minute or two.
const MAX_EXAMPLES: u32 = 30;

/// The seed of every run (change it to explore other inputs; failures name their own).
const SEED: u32 = 28;

/// schemathesis's settings. `positive_data_acceptance` lets through the statuses with which an
/// operation refuses schema-valid input for reasons no JSON Schema states, and only there:
/// - a rule's pattern must compile and match its examples, and built-in rules cannot be
///   deleted (422); which fields a rule body needs is declared (`web::api::constraints`);
/// - an upload's log must be text and its script UTF-8 (415, 422), a classified log text (415;
///   that it is not empty or blank is declared);
/// - a triage change must change something, name an active token or an enabled person as
///   assignee (not both ways at once) and give `resolved_in` only with `resolved` (422), and a
///   group merged away is triaged, given fixes or merged no more (409) and its URL answers with
///   the group it went into (308); a merge names another group that exists (404, 422);
/// - a bulk change or merge names existing groups and is refused whole when one group refuses
///   it (422, 409); an undo names a change not undone yet whose groups did not change since
///   (404, 409); an unmerge names a merged group (404, 409);
/// - a worker without a GPU must say so with `no_gpu` (a rule across two fields, 422).
///
/// Token creation has no such list: its scopes (the four names, at least one) and its name (not
/// blank, no control characters) are declared, so every schema-valid token request is accepted.
///
/// `use_after_free` is off for a project's retention: `DELETE` removes the project's own
/// setting, after which `GET` rightly shows the defaults in force (200), which the check reads
/// as a deleted resource still there. Everything a schema can state is declared in the
/// document instead.
const CONFIG: &str = r#"
request-timeout = 20

[[operations]]
include-name = ["POST /api/v1/webhooks", "PATCH /api/v1/webhooks/{id}", "POST /api/v1/webhooks/{id}/test"]
enabled = false

[[operations]]
include-name = "DELETE /api/v1/tokens/{id}"
enabled = false

[[operations]]
include-name = "POST /api/v1/jobs/claim"
parameters = { "query.wait" = 0 }
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422"]

[[operations]]
include-name-regex = "^(POST|PUT|DELETE) /api/v1/rules"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422"]

[[operations]]
include-name = "POST /api/v1/reports"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "413", "415", "422"]

[[operations]]
include-name = "POST /api/v1/classify"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "413", "415"]

[[operations]]
include-name = ["PATCH /api/v1/groups/{id}", "POST /api/v1/groups/{id}/merge", "POST /api/v1/groups/{id}/unmerge", "POST /api/v1/groups/bulk", "POST /api/v1/groups/merge", "POST /api/v1/groups/changes/{id}/undo"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422"]

[[operations]]
include-name = "POST /api/v1/groups/{id}/fixes"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409"]

[[operations]]
include-name = "GET /api/v1/groups/{id}"
checks.positive_data_acceptance.expected-statuses = ["2xx", "308", "401", "403", "404"]

[[operations]]
include-path = "/api/v1/projects/{project}/retention"
checks.use_after_free.enabled = false
"#;

/// The schemathesis executable, or `None` (skip) where it is not installed and not required.
fn schemathesis() -> Option<PathBuf> {
    let found = std::env::var_os("GPU_TRIAGE_SCHEMATHESIS")
        .map(PathBuf::from)
        .filter(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("GPU_TRIAGE_REQUIRE_SCHEMATHESIS").is_none(),
            "GPU_TRIAGE_REQUIRE_SCHEMATHESIS is set but GPU_TRIAGE_SCHEMATHESIS names no \
             schemathesis executable"
        );
        eprintln!(
            "SKIPPED the schemathesis run: GPU_TRIAGE_SCHEMATHESIS is not set (.ci/run installs \
             schemathesis)"
        );
    }
    found
}

#[test]
fn schemathesis_finds_no_difference_between_the_api_and_its_document() {
    let Some(schemathesis) = schemathesis() else {
        return;
    };
    let url = database_url(&fresh_database_name());
    let admin = create_token(&url, "admin", "fuzz");
    let dir = shared_tempdir();
    let port = free_port();
    let log = std::fs::File::create(dir.path().join("serve.log")).expect("serve log");
    let server = KillOnDrop(
        binary()
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            // Thousands of requests on one token in a minute: the rate limit would answer
            // most of them 429, which tests nothing.
            .args(["--rate-limit", "0"])
            .env("DATABASE_URL", &url)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn serve"),
    );
    assert!(wait_for_status(port, "/readyz", 200, 60), "server ready");
    let config = dir.path().join("schemathesis.toml");
    std::fs::write(&config, CONFIG).expect("write the schemathesis config");

    let started = Instant::now();
    let out = Command::new(&schemathesis)
        .arg("--config-file")
        .arg(&config)
        .arg("--no-color")
        .arg("run")
        .arg(format!("http://127.0.0.1:{port}/api/v1/openapi.json"))
        .args(["--checks", "all"])
        .args(["--max-examples", &MAX_EXAMPLES.to_string()])
        .args(["--seed", &SEED.to_string()])
        .args(["--header", &format!("Authorization: Bearer {admin}")])
        .current_dir(dir.path())
        .output()
        .expect("run schemathesis");
    let report = String::from_utf8_lossy(&out.stdout);
    let summary = report
        .rsplit_once("SUMMARY")
        .map_or(report.as_ref(), |(_, s)| s);
    println!(
        "schemathesis ran {:.0?} on {} cases:{summary}",
        started.elapsed(),
        cases(&report).unwrap_or(0)
    );
    drop(server);
    let serve_log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "schemathesis reported failures:\n{report}\n{}\nserve's log:\n{serve_log}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A run that tested little (an unreachable document, filters gone wrong) is no pass.
    let cases = cases(&report).expect("the report counts its test cases");
    assert!(cases > 500, "only {cases} cases ran:\n{report}");
    let selected = summary_number(&report, "Selected:");
    assert!(
        selected.is_some() && selected == summary_number(&report, "Tested:"),
        "every selected operation is tested:\n{summary}"
    );
}

/// The number in the summary's "N generated" line.
fn cases(report: &str) -> Option<u64> {
    let line = report.lines().rev().find(|l| {
        let mut words = l.split_whitespace();
        words.next().is_some_and(|n| n.parse::<u64>().is_ok()) && words.next() == Some("generated,")
    })?;
    line.split_whitespace().next()?.parse().ok()
}

/// The number after `label` in the summary ("Selected: 27/30" gives 27).
fn summary_number(report: &str, label: &str) -> Option<u64> {
    let line = report
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with(label))?;
    let value = line.trim_start().strip_prefix(label)?.trim();
    value.split('/').next()?.parse().ok()
}
