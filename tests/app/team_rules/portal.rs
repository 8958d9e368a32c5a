//! Team rules in the portal: preview before save, hostile patterns, CSRF, hit counts, the rule
//! page with matching reports and history, enable/disable and override, and Reclassify.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpu_triage::auth::Scope;
use serde_json::Value;

use super::{ILLEGAL_LOG, KERNEL_LOG, app_with_corpus, kernel_rule, upload};
use crate::browse::{Browser, page, sign_in};
use crate::support::{TestApp, TestResponse};

async fn post_form(
    app: &TestApp,
    b: &Browser,
    path: &str,
    fields: &[(&str, &str)],
) -> TestResponse {
    let mut pairs: Vec<(&str, &str)> = vec![("csrf", b.csrf.as_str())];
    pairs.extend_from_slice(fields);
    let body: String = pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&");
    let req = Request::post(path)
        .header("cookie", &b.cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(body))
        .unwrap();
    app.send(req).await
}

fn enc(s: &str) -> String {
    s.bytes()
        .map(|c| match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (c as char).to_string()
            }
            _ => format!("%{c:02X}"),
        })
        .collect()
}

/// Texts (or an attribute's values) of the elements `css` selects.
fn select(html: &str, css: &str, attr: Option<&str>) -> Vec<String> {
    let doc = scraper::Html::parse_document(html);
    let sel = scraper::Selector::parse(css).unwrap();
    doc.select(&sel)
        .filter_map(|e| match attr {
            Some(a) => e.value().attr(a).map(str::to_owned),
            None => Some(e.text().collect::<String>().trim().to_owned()),
        })
        .collect()
}

const FORM: &[(&str, &str)] = &[
    ("id", "team.mykernel"),
    ("category", "library_error"),
    ("title", "MyKernel failed"),
    ("pattern", r"MyKernel failed: code (?P<code>\d+)"),
    ("specificity", "90"),
    ("advice", "MyKernel error code {code}: see the runbook."),
    (
        "examples",
        "MyKernel failed: code 3\nMyKernel failed: code 12 (launch 1)",
    ),
    ("counter_examples", "MyKernel started"),
    ("enabled", "on"),
];

#[tokio::test]
async fn the_portal_previews_before_saving_and_shows_hits_and_history() {
    let app = app_with_corpus().await;
    let admin = app.token("alice", &[Scope::Admin]).await;
    let ingest = app.token("ci", &[Scope::Ingest]).await;
    let stored = upload(&app, &ingest, KERNEL_LOG).await;
    let b = sign_in(&app, &admin).await;

    let mut fields = FORM.to_vec();
    fields.push(("action", "preview"));
    let res = post_form(&app, &b, "/rules", &fields).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert_eq!(select(&res.body, ".newly-matched", None), ["1"]);
    assert_eq!(select(&res.body, ".category-changed", None), ["1"]);
    assert_eq!(select(&res.body, ".scanned", None), ["1 of 1"]);
    assert_eq!(select(&res.body, ".accuracy", None), ["50.0% → 100.0%"]);
    assert_eq!(
        select(&res.body, ".precision", None),
        ["100.0% of 2 case(s)"]
    );
    assert_eq!(select(&res.body, ".examples td.ok", None).len(), 3);
    assert_eq!(
        select(&res.body, "textarea[name=pattern]", None),
        [FORM[3].1]
    );
    assert_eq!(app.count("team_rules").await, 0, "a preview stores nothing");

    // Without the CSRF token nothing is stored.
    let req = Request::post("/rules")
        .header("cookie", &b.cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(
            "id=team.x&category=unknown&title=X&pattern=X+failed&examples=X+failed&action=save",
        ))
        .unwrap();
    assert_eq!(app.send(req).await.status, StatusCode::FORBIDDEN);

    // A hostile pattern is refused with the reason, the form kept.
    let mut hostile = FORM.to_vec();
    hostile[3] = ("pattern", "a{1000}{1000}");
    hostile.push(("action", "save"));
    let res = post_form(&app, &b, "/rules", &hostile).await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY);
    let msg = select(&res.body, ".error-message", None).join("");
    assert!(
        msg.contains("rule team.mykernel") && msg.contains("size limit"),
        "{msg}"
    );
    assert_eq!(app.count("team_rules").await, 0);

    let mut save = FORM.to_vec();
    save.push(("action", "save"));
    let res = post_form(&app, &b, "/rules", &save).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    assert_eq!(res.headers["location"], "/rules/team.mykernel");

    // The stored report still carries its old classification: 0 hits until reclassified.
    let list = page(&app, &b.cookie, "/rules").await;
    assert_eq!(
        select(&list.body, ".rules-team tr.rule-row", Some("data-id")),
        ["team.mykernel"]
    );
    assert_eq!(select(&list.body, ".rules-team .hits", None), ["0"]);
    assert_eq!(select(&list.body, ".history .actor", None), ["alice"]);
    let next = upload(&app, &ingest, b"again\nMyKernel failed: code 5\n").await;
    assert_ne!(next["group_id"], stored["group_id"]);
    let list = page(&app, &b.cookie, "/rules").await;
    assert_eq!(select(&list.body, ".rules-team .hits", None), ["1"]);

    let rule = page(&app, &b.cookie, "/rules/team.mykernel").await;
    assert_eq!(rule.status, StatusCode::OK);
    let url = format!("/reports/{}", next["id"]);
    assert_eq!(select(&rule.body, ".matching a", Some("href")), [url]);
    let changes = select(&rule.body, ".history .change", None).join(" ");
    assert!(
        changes.contains("create") && changes.contains("pattern:"),
        "{changes}"
    );

    // Disable from the rule page, then override a built-in rule from its page.
    let res = post_form(
        &app,
        &b,
        "/rules/team.mykernel/enabled",
        &[("enabled", "false")],
    )
    .await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    let rule = page(&app, &b.cookie, "/rules/team.mykernel").await;
    assert_eq!(select(&rule.body, ".meta .state", None), ["disabled"]);
    let builtin = page(&app, &b.cookie, "/rules/cuda.assert.kernel").await;
    assert_eq!(select(&builtin.body, ".actions a", None), ["Override"]);
    let form = page(&app, &b.cookie, "/rules/new?edit=cuda.assert.kernel").await;
    assert_eq!(
        select(&form.body, "input[name=id]", Some("value")),
        ["cuda.assert.kernel"]
    );
}

#[tokio::test]
async fn reclassify_moves_stored_reports_to_their_new_category_and_group() {
    let app = TestApp::spawn().await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let ingest = app.token("ci", &[Scope::Ingest]).await;
    let a = upload(&app, &ingest, KERNEL_LOG).await;
    let b2 = upload(
        &app,
        &ingest,
        b"other run\nMyKernel failed: code 99 (launch 5)\nTraceback (most recent call last):\n",
    )
    .await;
    let other = upload(&app, &ingest, ILLEGAL_LOG).await;
    let unknown_group = a["group_id"].as_i64().unwrap();
    // No rule knows them yet: they share the group of logs that end the same way.
    assert_eq!(b2["group_id"], a["group_id"]);
    let res = app.post_json(&admin, "/api/v1/rules", &kernel_rule()).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);

    let b = sign_in(&app, &admin).await;
    let res = post_form(&app, &b, "/rules/reclassify", &[]).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut state = String::new();
    while Instant::now() < deadline {
        state = sqlx::query_scalar("SELECT state FROM reclassify_runs ORDER BY id DESC LIMIT 1")
            .fetch_one(app.db.pool())
            .await
            .unwrap();
        if state != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(state, "done");
    let list = page(&app, &b.cookie, "/rules").await;
    assert_eq!(select(&list.body, ".runs .progress", None), ["3/3 (100%)"]);
    assert_eq!(select(&list.body, ".rules-team .hits", None), ["2"]);

    let rows: Vec<(i64, String, i64)> =
        sqlx::query_as("SELECT id, category, group_id FROM reports ORDER BY id")
            .fetch_all(app.db.pool())
            .await
            .unwrap();
    assert_eq!(rows.len(), 3, "no report lost");
    assert_eq!(rows[0].1, "library_error");
    assert_eq!(rows[1].1, "library_error");
    assert_eq!(rows[0].2, rows[1].2, "same failure, same new group");
    assert_ne!(rows[0].2, unknown_group);
    assert_eq!(rows[2].1, "illegal_memory_access");
    assert_eq!(rows[2].2, other["group_id"].as_i64().unwrap());
    // The groups count their reports; the emptied group is gone.
    let moved_to = gpu_triage::storage::groups::get_group(app.db.pool(), rows[0].2)
        .await
        .unwrap()
        .expect("the new group");
    assert_eq!(moved_to.report_count, 2);
    let old: i64 = sqlx::query_scalar("SELECT count(*) FROM groups WHERE id = $1")
        .bind(unknown_group)
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert_eq!(old, 0);
    let c: Value = sqlx::query_scalar("SELECT classification FROM reports WHERE id = $1")
        .bind(rows[0].0)
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert_eq!(c["root_cause"]["rule"], "team.mykernel");
    // A second run changes nothing.
    let res = post_form(&app, &b, "/rules/reclassify", &[]).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
}
