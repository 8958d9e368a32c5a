//! SECURITY.md item 3: secrets in logs, uploader metadata, file names, fixes and reproduction
//! output never reach the database or search; a script with a secret is refused with 422 and
//! queues nothing.

use axum::http::StatusCode;
use gpu_triage::auth::Scope;
use serde_json::json;

use super::dump;
use crate::support::TestApp;

/// (kind, the text as it appears, a piece of the secret that must appear nowhere afterwards).
const SECRETS: &[(&str, &str, &str)] = &[
    (
        "aws_access_key",
        "aws_access_key_id = AKIAQWERTYUIOPASDF12",
        "QWERTYUIOPASDF12",
    ),
    (
        "aws_secret_key",
        "aws_secret_access_key=wJalrXUtnFEMIK7MDENGbPxRfiCYzEXAMPLEKEY",
        "wJalrXUtnFEMIK7MDENG",
    ),
    (
        "github_token",
        "git clone https://github.com/x/y # ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
        "A1b2C3d4E5f6G7h8I9j0",
    ),
    (
        "github_pat",
        "GH_TOKEN: github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
        "11ABCDEFG0123456789_abcdef",
    ),
    (
        "slack_token",
        "SLACK=xoxb-1234567890-abcdefghijKLMNOPqrst",
        "abcdefghijKLMNOPqrst",
    ),
    (
        "huggingface_token",
        "huggingface_hub login hf_ZyXwVuTsRqPoNmLkJiHgFeDcBa987654",
        "ZyXwVuTsRqPoNmLkJiHg",
    ),
    (
        "private_key",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\nQ2hhbmdlTWVQbGVhc2VUaGlzSXNOb3RBUmVhbEtleQ==\n-----END RSA PRIVATE KEY-----",
        "MIIEvQIBADANBgkqhkiG9w0",
    ),
    (
        "userinfo",
        "fatal: unable to access 'https://deploy:s3cr3tP4ssw0rdXYZ@git.example.com/repo.git/'",
        "s3cr3tP4ssw0rdXYZ",
    ),
    (
        "bearer",
        "curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl'",
        "eyJhbGciOiJIUzI1NiJ9",
    ),
];

fn all_secrets() -> String {
    SECRETS
        .iter()
        .map(|(_, text, _)| format!("{text}\n"))
        .collect()
}

fn assert_nowhere(haystack: &str, place: &str) {
    for (kind, _, needle) in SECRETS {
        if let Some(at) = haystack.find(needle) {
            let from = haystack.floor_char_boundary(at.saturating_sub(1500));
            let to = haystack.ceil_char_boundary((at + 400).min(haystack.len()));
            panic!(
                "the {kind} secret {needle} is in {place}: ...{}...",
                &haystack[from..to]
            );
        }
    }
}

#[tokio::test]
async fn secrets_in_logs_meta_fixes_and_worker_output_reach_neither_database_nor_search() {
    let app = TestApp::spawn().await;
    let admin = app.token("root", &[Scope::Admin]).await;
    let secrets = all_secrets();
    let log = format!(
        "epoch 1\n{secrets}RuntimeError: CUDA error: an illegal memory access was encountered\n"
    );
    let meta = json!({
        "project": "vision ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
        "branch": "feature/hf_ZyXwVuTsRqPoNmLkJiHgFeDcBa987654",
        "commit": "AKIAQWERTYUIOPASDF12",
        "job_url": "https://deploy:s3cr3tP4ssw0rdXYZ@ci.example/job/1",
        "environment": secrets,
    })
    .to_string();
    let up = app
        .upload(
            &admin,
            &[
                (
                    "log",
                    Some("xoxb-1234567890-abcdefghijKLMNOPqrst.log"),
                    log.as_bytes(),
                ),
                ("meta", None, meta.as_bytes()),
                ("script", Some("repro.py"), b"import torch\n"),
            ],
            Some("key-1"),
        )
        .await;
    assert_eq!(up.status, StatusCode::CREATED, "{}", up.body);
    assert_nowhere(&up.body, "the upload's answer");
    let up = up.json();
    let (report, group, job) = (
        up["id"].as_i64().unwrap(),
        up["group_id"].as_i64().unwrap(),
        up["repro"]["job_id"].as_i64().unwrap(),
    );
    // The same through the portal's paste form.
    let b = super::sign_in(&app, &admin).await;
    let (ct, body) = portal_form(&b.csrf, &format!("pasted\n{log}"));
    let req = axum::http::Request::post("/reports")
        .header("cookie", &b.cookie)
        .header("content-type", ct)
        .body(axum::body::Body::from(body))
        .unwrap();
    let res = app.send(req).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);

    // A fix with a secret pasted in, and a worker whose run printed secrets.
    let fix = app
        .post_json(
            &admin,
            &format!("/api/v1/groups/{group}/fixes"),
            &json!({"summary": format!("rotate {}", SECRETS[5].1), "details": secrets,
                    "link": "https://deploy:s3cr3tP4ssw0rdXYZ@wiki.example/fix"}),
        )
        .await;
    // A valid fix (an http(s) link, even one with credentials in it): stored, scrubbed.
    assert_eq!(fix.status, StatusCode::CREATED, "{}", fix.body);
    assert_nowhere(&fix.body, "the fix's answer");
    let claim = app
        .post_json(
            &admin,
            "/api/v1/jobs/claim",
            &json!({"worker": "host", "wait_secs": 0, "gpu": {"name": "Test GPU"}, "no_gpu": false, "sandbox": "none"}),
        )
        .await;
    assert_eq!(claim.status, StatusCode::OK, "{}", claim.body);
    let lease = claim.json()["lease_token"].as_str().unwrap().to_owned();
    let result = app
        .post_json(
            &admin,
            &format!("/api/v1/jobs/{job}/result"),
            &json!({"lease_token": lease, "exit_code": 1, "signal": null, "timed_out": false,
                    "duration_ms": 10, "stdout": secrets, "stderr": log,
                    "truncated": false, "gpu": null, "no_gpu": true, "sandbox": "none",
                    "error": format!("bwrap failed: {}", SECRETS[0].1)}),
        )
        .await;
    assert_eq!(result.status, StatusCode::OK, "{}", result.body);
    assert_nowhere(&result.body, "the result's answer");

    let stored = dump(&app.db).await;
    assert_nowhere(&stored, "the database");
    assert!(stored.contains("[REDACTED:"), "markers are kept");
    assert!(
        stored.contains("illegal memory access"),
        "the log itself is kept"
    );

    // Search finds none of them, by any piece; the reads answer with markers only.
    for (kind, _, needle) in SECRETS {
        let q: String = needle.chars().filter(char::is_ascii_alphanumeric).collect();
        let res = app.get_as(&admin, &format!("/api/v1/search?q={q}")).await;
        assert_eq!(res.status, StatusCode::OK, "{kind}: {}", res.body);
        assert_eq!(
            res.json()["results"].as_array().unwrap().len(),
            0,
            "{kind}: {}",
            res.body
        );
        let html = super::page(&app, &b.cookie, &format!("/search?q={q}")).await;
        assert_eq!(html.status, StatusCode::OK);
        // The page echoes the query itself in its search box; no hit may show it.
        assert_eq!(
            super::texts(&html.body, ".hit"),
            Vec::<String>::new(),
            "{kind}"
        );
    }
    for path in [
        format!("/api/v1/reports/{report}"),
        format!("/api/v1/groups/{group}"),
    ] {
        assert_nowhere(&app.get_as(&admin, &path).await.body, &path);
    }
    for path in [
        format!("/reports/{report}"),
        format!("/reports/{report}/raw"),
    ] {
        assert_nowhere(&super::page(&app, &b.cookie, &path).await.body, &path);
    }
}

fn portal_form(csrf: &str, log: &str) -> (String, Vec<u8>) {
    let boundary = "sec-boundary";
    let mut body = String::new();
    for (name, value) in [("csrf", csrf), ("project", "p"), ("log_text", log)] {
        body.push_str(&format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
        ));
    }
    body.push_str(&format!("--{boundary}--\r\n"));
    (
        format!("multipart/form-data; boundary={boundary}"),
        body.into_bytes(),
    )
}

#[tokio::test]
async fn a_script_with_any_kind_of_secret_is_refused_and_queues_nothing() {
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    // First use records the token's last-used time; after that the dump must not move.
    assert_eq!(
        app.get_as(&t, "/api/v1/search?q=x").await.status,
        StatusCode::OK
    );
    let before = dump(&app.db).await;
    for (kind, text, needle) in SECRETS {
        let script = format!("import os\n# {text}\nprint(1)\n");
        let res = app
            .upload(
                &t,
                &[
                    (
                        "log",
                        Some("a.log"),
                        b"RuntimeError: CUDA error: out of memory\n",
                    ),
                    ("script", Some("repro.py"), script.as_bytes()),
                ],
                Some(&format!("script-{kind}")),
            )
            .await;
        assert_eq!(
            res.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{kind}: {}",
            res.body
        );
        assert_eq!(res.error_code(), "bad_script", "{kind}");
        assert!(!res.body.contains(needle), "the refusal quotes the secret");
    }
    assert_eq!(dump(&app.db).await, before, "nothing stored, no job queued");
    assert_eq!(app.count("jobs").await, 0);
}
