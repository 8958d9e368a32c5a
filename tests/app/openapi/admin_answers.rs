//! The admins' part of the answers story (`answers`): team rules (preview, create, conflict,
//! change, turn a built-in rule off, delete), webhook endpoints (create, list, change, send
//! a test, read the delivery log, delete) and retention (overview, a project's setting, a pass),
//! with refusals, every answer checked by `Checker`.

use axum::http::StatusCode;
use serde_json::json;

use super::Checker;
use super::answers::{Tokens, expect};

pub(super) async fn rules(c: &mut Checker<'_>, t: &Tokens) {
    let rule = json!({"id": "team.mykernel", "category": "library_error", "title": "MyKernel failed",
        "source": "mykernel/launch.cu", "pattern": r"MyKernel failed: code (?P<code>\d+)",
        "specificity": 90, "consequence": false,
        "advice": ["MyKernel error code {code}: see the kernel's runbook."],
        "examples": ["MyKernel failed: code 3 (launch 17)"], "counter_examples": ["MyKernel started"]});
    expect(&c.get(&t.read, "/api/v1/rules").await, StatusCode::OK);
    expect(
        &c.json(&t.admin, "post", "/api/v1/rules/preview", &rule)
            .await,
        StatusCode::OK,
    );
    expect(
        &c.json(&t.admin, "post", "/api/v1/rules", &rule).await,
        StatusCode::CREATED,
    );
    expect(
        &c.json(&t.admin, "post", "/api/v1/rules", &rule).await,
        StatusCode::CONFLICT,
    );
    let mut bad = rule.clone();
    bad["pattern"] = json!("MyKernel (unclosed");
    expect(
        &c.json(&t.admin, "post", "/api/v1/rules/preview", &bad)
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    );
    bad["id"] = json!("team.other");
    expect(
        &c.json(&t.admin, "post", "/api/v1/rules", &bad).await,
        StatusCode::UNPROCESSABLE_ENTITY,
    );
    expect(
        &c.raw(
            &t.admin,
            "post",
            "/api/v1/rules",
            "application/json",
            b"{".to_vec(),
        )
        .await,
        StatusCode::BAD_REQUEST,
    );
    expect(
        &c.raw(
            &t.admin,
            "post",
            "/api/v1/rules/preview",
            "application/json",
            b"[".to_vec(),
        )
        .await,
        StatusCode::BAD_REQUEST,
    );
    let path = "/api/v1/rules/team.mykernel";
    let mut changed = rule.clone();
    changed["title"] = json!("MyKernel launch failed");
    let saved = expect(
        &c.json(&t.admin, "put", path, &changed).await,
        StatusCode::OK,
    );
    assert_eq!(saved["rule"]["title"], "MyKernel launch failed", "{saved}");
    expect(
        &c.json(&t.admin, "put", path, &json!({"enabled": false}))
            .await,
        StatusCode::OK,
    );
    expect(
        &c.json(
            &t.admin,
            "put",
            path,
            &json!({"id": "team.renamed", "enabled": true}),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    );
    expect(
        &c.json(&t.read, "put", path, &json!({"enabled": true}))
            .await,
        StatusCode::FORBIDDEN,
    );
    // A built-in rule can be turned off (an override) and back on.
    expect(
        &c.json(
            &t.admin,
            "put",
            "/api/v1/rules/cuda.assert.index",
            &json!({"enabled": false}),
        )
        .await,
        StatusCode::OK,
    );
    expect(&c.get(&t.read, "/api/v1/rules").await, StatusCode::OK);
    expect(
        &c.bodyless(&t.admin, "delete", "/api/v1/rules/cuda.assert.index")
            .await,
        StatusCode::OK,
    );
    expect(&c.bodyless(&t.admin, "delete", path).await, StatusCode::OK);
    expect(
        &c.bodyless(&t.admin, "delete", path).await,
        StatusCode::NOT_FOUND,
    );
    expect(
        &c.bodyless(&t.read, "delete", path).await,
        StatusCode::FORBIDDEN,
    );
    expect(
        &c.json(&t.read, "post", "/api/v1/rules/preview", &rule)
            .await,
        StatusCode::FORBIDDEN,
    );
    expect(
        &c.json(&t.ingest, "post", "/api/v1/rules", &rule).await,
        StatusCode::FORBIDDEN,
    );
    expect(
        &c.get(&t.worker, "/api/v1/rules").await,
        StatusCode::FORBIDDEN,
    );
}

pub(super) async fn webhooks(c: &mut Checker<'_>, t: &Tokens) {
    let endpoint = json!({"url": "http://127.0.0.1:9/hook", "events": ["new_group", "regression"],
        "format": "json", "projects": ["vision"], "categories": ["out_of_bounds"],
        "description": "on-call", "enabled": true});
    let created = expect(
        &c.json(&t.admin, "post", "/api/v1/webhooks", &endpoint)
            .await,
        StatusCode::CREATED,
    );
    let id = created["id"].as_i64().unwrap();
    assert!(created["secret"].is_string(), "{created}");
    let mut bad = endpoint.clone();
    bad["events"] = json!(["everything"]);
    expect(
        &c.json(&t.admin, "post", "/api/v1/webhooks", &bad).await,
        StatusCode::UNPROCESSABLE_ENTITY,
    );
    expect(
        &c.raw(
            &t.admin,
            "post",
            "/api/v1/webhooks",
            "application/json",
            b"{\"colour\": 1}".to_vec(),
        )
        .await,
        StatusCode::BAD_REQUEST,
    );
    expect(&c.get(&t.admin, "/api/v1/webhooks").await, StatusCode::OK);
    expect(
        &c.get(&t.read, "/api/v1/webhooks").await,
        StatusCode::FORBIDDEN,
    );
    let path = format!("/api/v1/webhooks/{id}");
    expect(&c.get(&t.admin, &path).await, StatusCode::OK);
    expect(
        &c.json(
            &t.admin,
            "patch",
            &path,
            &json!({"format": "slack", "secret": "a-new-secret-of-enough-length"}),
        )
        .await,
        StatusCode::OK,
    );
    expect(
        &c.json(&t.admin, "patch", &path, &json!({"format": "xml"}))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    );
    expect(
        &c.raw(&t.admin, "patch", &path, "application/json", b"{".to_vec())
            .await,
        StatusCode::BAD_REQUEST,
    );
    expect(
        &c.bodyless(&t.admin, "post", &format!("{path}/test")).await,
        StatusCode::ACCEPTED,
    );
    let log = expect(
        &c.get(&t.admin, &format!("{path}/deliveries")).await,
        StatusCode::OK,
    );
    assert!(!log["deliveries"].as_array().unwrap().is_empty(), "{log}");
    expect(
        &c.bodyless(&t.ingest, "post", &format!("{path}/test")).await,
        StatusCode::FORBIDDEN,
    );
    expect(
        &c.get(&t.read, &format!("{path}/deliveries")).await,
        StatusCode::FORBIDDEN,
    );
    expect(&c.bodyless(&t.admin, "delete", &path).await, StatusCode::OK);
    expect(&c.get(&t.admin, &path).await, StatusCode::NOT_FOUND);
    expect(
        &c.bodyless(&t.admin, "delete", &path).await,
        StatusCode::NOT_FOUND,
    );
    expect(
        &c.json(&t.admin, "patch", &path, &json!({"description": "x"}))
            .await,
        StatusCode::NOT_FOUND,
    );
    expect(
        &c.bodyless(&t.admin, "post", &format!("{path}/test")).await,
        StatusCode::NOT_FOUND,
    );
    expect(
        &c.get(&t.admin, &format!("{path}/deliveries")).await,
        StatusCode::NOT_FOUND,
    );
}

/// Retention: the overview, a project's setting read, set (and refused), reset; then a pass
/// removes the story's logs so that the overview's totals and passes and a report's
/// `log_removed` are real values, not nulls.
pub(super) async fn retention(c: &mut Checker<'_>, t: &Tokens, report: i64) {
    let path = "/api/v1/projects/Vision/retention";
    expect(&c.get(&t.admin, "/api/v1/retention").await, StatusCode::OK);
    expect(
        &c.get(&t.read, "/api/v1/retention").await,
        StatusCode::FORBIDDEN,
    );
    expect(&c.get(&t.admin, path).await, StatusCode::OK);
    expect(&c.get(&t.ingest, path).await, StatusCode::FORBIDDEN);
    let set = expect(
        &c.json(
            &t.admin,
            "put",
            path,
            &json!({"log_days": 30, "report_days": null}),
        )
        .await,
        StatusCode::OK,
    );
    assert_eq!(set["set"], json!({"log_days": 30, "report_days": null}));
    expect(
        &c.raw(
            &t.admin,
            "put",
            path,
            "application/json",
            b"{\"log_days\": -1}".to_vec(),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    );
    expect(
        &c.raw(
            &t.admin,
            "put",
            path,
            "application/json",
            b"{\"days\": 1}".to_vec(),
        )
        .await,
        StatusCode::BAD_REQUEST,
    );
    expect(
        &c.json(&t.read, "put", path, &json!({"log_days": 1})).await,
        StatusCode::FORBIDDEN,
    );
    expect(&c.bodyless(&t.admin, "delete", path).await, StatusCode::OK);
    expect(
        &c.bodyless(&t.admin, "delete", path).await,
        StatusCode::NOT_FOUND,
    );
    expect(
        &c.bodyless(&t.worker, "delete", path).await,
        StatusCode::FORBIDDEN,
    );

    // A pass as of two days from now with logs kept one day: every stored log goes.
    let settings = gpu_triage::app::retention::RetentionSettings {
        defaults: gpu_triage::api_types::retention::Days {
            log_days: 1,
            report_days: 0,
        },
        ..Default::default()
    };
    let later = gpu_triage::time::Timestamp::from_unix(
        gpu_triage::app::retention::now().unix() + 2 * 86_400,
    );
    gpu_triage::app::retention::run_pass(&c.app.db, &settings, later)
        .await
        .unwrap();
    let overview = expect(&c.get(&t.admin, "/api/v1/retention").await, StatusCode::OK);
    assert!(
        !overview["runs"].as_array().unwrap().is_empty(),
        "{overview}"
    );
    let shown = expect(
        &c.get(&t.read, &format!("/api/v1/reports/{report}")).await,
        StatusCode::OK,
    );
    assert_eq!(shown["log_removed"]["after_days"], 1, "{shown}");
}

/// `/api/v1/tokens`: create (the secret once), list, refusals, revoke.
pub(super) async fn tokens(c: &mut Checker<'_>, t: &Tokens) {
    let created = expect(
        &c.json(
            &t.admin,
            "post",
            "/api/v1/tokens",
            &json!({"name": "probe-ci", "scopes": ["ingest"], "expires_in_days": 7}),
        )
        .await,
        StatusCode::CREATED,
    );
    let id = created["id"].as_i64().unwrap();
    assert!(created["secret"].is_string(), "{created}");
    expect(
        // Outside the documented enum (sent raw: the checked helper sends only valid bodies).
        &c.raw(
            &t.admin,
            "post",
            "/api/v1/tokens",
            "application/json",
            br#"{"name": "x", "scopes": ["root"]}"#.to_vec(),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    );
    expect(
        &c.raw(
            &t.admin,
            "post",
            "/api/v1/tokens",
            "application/json",
            b"{\"colour\": 1}".to_vec(),
        )
        .await,
        StatusCode::BAD_REQUEST,
    );
    expect(&c.get(&t.admin, "/api/v1/tokens").await, StatusCode::OK);
    expect(
        &c.get(&t.read, "/api/v1/tokens").await,
        StatusCode::FORBIDDEN,
    );
    let path = format!("/api/v1/tokens/{id}");
    expect(&c.bodyless(&t.admin, "delete", &path).await, StatusCode::OK);
    expect(
        &c.bodyless(&t.admin, "delete", &path).await,
        StatusCode::NOT_FOUND,
    );
}

/// `/api/v1/people`: list, disable, enable, end sessions; refusals (another scope, no such
/// person). The person is stored as a sign-in through the provider stores them.
pub(super) async fn people(c: &mut Checker<'_>, t: &Tokens) {
    use gpu_triage::roles::PersonRole;
    use gpu_triage::storage::people::{SignedIn, upsert_signed_in};
    let person = upsert_signed_in(
        c.app.db.pool(),
        SignedIn {
            issuer: "https://idp.example.test",
            subject: "ana",
            email: "ana@example.test",
            name: "Ana",
            role: PersonRole::Member,
        },
    )
    .await
    .unwrap();
    let listed = expect(&c.get(&t.admin, "/api/v1/people").await, StatusCode::OK);
    assert_eq!(listed["people"][0]["name"], "Ana", "{listed}");
    expect(
        &c.get(&t.read, "/api/v1/people").await,
        StatusCode::FORBIDDEN,
    );
    let id = person.id;
    let disabled = expect(
        &c.bodyless(&t.admin, "post", &format!("/api/v1/people/{id}/disable"))
            .await,
        StatusCode::OK,
    );
    assert_eq!(disabled["disabled"], true, "{disabled}");
    expect(
        &c.bodyless(&t.admin, "post", &format!("/api/v1/people/{id}/enable"))
            .await,
        StatusCode::OK,
    );
    expect(
        &c.bodyless(&t.admin, "delete", &format!("/api/v1/people/{id}/sessions"))
            .await,
        StatusCode::OK,
    );
    for (method, path) in [
        ("post", "/api/v1/people/424242/disable"),
        ("post", "/api/v1/people/424242/enable"),
        ("delete", "/api/v1/people/424242/sessions"),
    ] {
        expect(
            &c.bodyless(&t.admin, method, path).await,
            StatusCode::NOT_FOUND,
        );
    }
}
