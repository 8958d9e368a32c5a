//! Merging groups in the portal (issue 30 item 3): "Similar failures" on a report page offers
//! each similar group's merge into the report's group to sessions that may merge, the form is
//! CSRF-checked like every portal form, and afterwards the merged group's page leads to the
//! group it went into, whose page and history say so.

use axum::http::StatusCode;
use gpu_triage::auth::Scope;
use serde_json::Value;

use super::{device_log, upload};
use crate::browse::{Browser, attr, page, sign_in, texts};
use crate::support::{TestApp, TestResponse};

/// Posts the merge form of group `id` with `fields`, plus `origin` when given.
async fn post_merge(
    app: &TestApp,
    b: &Browser,
    id: i64,
    fields: &[(&str, &str)],
    origin: Option<&str>,
) -> TestResponse {
    crate::browse::post_form(app, b, &format!("/groups/{id}/merge"), fields, origin).await
}

async fn merged_into(app: &TestApp, id: i64) -> Option<i64> {
    sqlx::query_scalar("SELECT merged_into FROM groups WHERE id = $1")
        .bind(id)
        .fetch_one(app.db.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn similar_failures_offer_the_merge_and_the_form_needs_its_csrf_token() {
    let app = TestApp::spawn().await;
    let alice = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let reader = app.token("reader", &[Scope::Read]).await;
    let (_, a) = upload(&app, &alice, &device_log("lima"), Value::Null).await;
    let (report, b) = upload(&app, &alice, &device_log("november"), Value::Null).await;
    assert_ne!(a, b);

    // The report page of b lists a as similar, with a form that merges a into b.
    let s = sign_in(&app, &alice).await;
    let shown = page(&app, &s.cookie, &format!("/reports/{report}")).await;
    assert_eq!(shown.status, StatusCode::OK, "{}", shown.body);
    let form = format!("ul.similar details#merge-{a} form.merge-form");
    assert_eq!(
        attr(&shown.body, &form, "action").as_deref(),
        Some(format!("/groups/{a}/merge").as_str())
    );
    assert_eq!(
        attr(&shown.body, &format!("{form} input[name=into]"), "value"),
        Some(b.to_string())
    );
    assert_eq!(
        attr(&shown.body, &format!("{form} input[name=csrf]"), "value"),
        Some(s.csrf.clone())
    );
    assert_eq!(
        texts(&shown.body, &format!("{form} button")),
        [format!("Merge group {a} into group {b}")]
    );
    // A read-only session sees the similar group, not the offer, and cannot post it.
    let r = sign_in(&app, &reader).await;
    let read_only = page(&app, &r.cookie, &format!("/reports/{report}")).await;
    assert_eq!(texts(&read_only.body, "ul.similar > li").len(), 1);
    assert!(texts(&read_only.body, "form.merge-form").is_empty());
    let refused = post_merge(
        &app,
        &r,
        a,
        &[("csrf", r.csrf.as_str()), ("into", &b.to_string())],
        None,
    )
    .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);

    // Without the CSRF token, with another's, or from another site: refused, nothing merged.
    let into = b.to_string();
    for (fields, origin) in [
        (vec![("into", into.as_str())], None),
        (
            vec![("csrf", "not-the-token"), ("into", into.as_str())],
            None,
        ),
        (
            vec![("csrf", s.csrf.as_str()), ("into", into.as_str())],
            Some("https://evil.example"),
        ),
    ] {
        let res = post_merge(&app, &s, a, &fields, origin).await;
        assert_eq!(
            res.status,
            StatusCode::FORBIDDEN,
            "{fields:?}: {}",
            res.body
        );
    }
    assert_eq!(merged_into(&app, a).await, None);
    // Not a group id: the reason, as a page.
    let bad = post_merge(
        &app,
        &s,
        a,
        &[("csrf", s.csrf.as_str()), ("into", "b")],
        None,
    )
    .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.body);
    assert!(
        bad.body.contains("into must be the id of a group"),
        "{}",
        bad.body
    );

    // With it: merged, and the answer is b's page at its history.
    let done = post_merge(
        &app,
        &s,
        a,
        &[("csrf", s.csrf.as_str()), ("into", &into)],
        None,
    )
    .await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    assert_eq!(done.headers["location"], format!("/groups/{b}#history"));
    assert_eq!(merged_into(&app, a).await, Some(b));
    let target = page(&app, &s.cookie, &format!("/groups/{b}")).await;
    let history = texts(&target.body, "ol.history li");
    assert!(
        history[0].contains("alice")
            && history[0].contains(&format!("merged group {a} into group {b}")),
        "{history:?}"
    );
    assert!(
        texts(&target.body, "#merged-groups")[0].contains(&format!("group {a}")),
        "{}",
        target.body
    );
    assert!(texts(&target.body, "#merged-notice").is_empty());
    assert!(texts(&target.body, "p.meta")[0].starts_with("2 reports"));
    // Merging it again from a page left open: the reason, not a second merge.
    let again = post_merge(
        &app,
        &s,
        a,
        &[("csrf", s.csrf.as_str()), ("into", &into)],
        None,
    )
    .await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.body);
    assert!(
        again
            .body
            .contains(&format!("already merged into group {b}"))
    );

    // a's page leads to b's, which names a.
    let old = page(&app, &s.cookie, &format!("/groups/{a}")).await;
    assert_eq!(old.status, StatusCode::SEE_OTHER, "{}", old.body);
    let location = old.headers["location"].to_str().unwrap().to_owned();
    assert_eq!(location, format!("/groups/{b}?merged_from={a}"));
    let landed = page(&app, &s.cookie, &location).await;
    assert_eq!(landed.status, StatusCode::OK, "{}", landed.body);
    assert!(
        texts(&landed.body, "#merged-notice")[0].contains(&format!("Group {a} (")),
        "{}",
        landed.body
    );
    // A made-up `merged_from` names nothing.
    let made_up = page(&app, &s.cookie, &format!("/groups/{b}?merged_from=424242")).await;
    assert!(texts(&made_up.body, "#merged-notice").is_empty());
    // The report page no longer offers a: it is part of b.
    let after = page(&app, &s.cookie, &format!("/reports/{report}")).await;
    assert!(
        texts(&after.body, "ul.similar > li").is_empty(),
        "{}",
        after.body
    );
    // The group list shows b only.
    let list = page(&app, &s.cookie, "/groups").await;
    assert_eq!(texts(&list.body, "tr.group-row").len(), 1);
}
