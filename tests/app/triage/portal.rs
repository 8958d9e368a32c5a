//! The portal's triage: the group list's filter form, sort and page links, the group page's
//! state form (CSRF-checked), history, tag breakdowns and chart.

use axum::http::StatusCode;
use gpu_triage::auth::Scope;
use serde_json::{Value, json};

use super::{device_log, group, upload};
use crate::browse::{Browser, attr, page, sign_in, texts};
use crate::support::{TestApp, TestResponse};

/// Posts the state form of group `id`: `fields` url-encoded, plus `origin` when given.
async fn post_state(
    app: &TestApp,
    b: &Browser,
    id: i64,
    fields: &[(&str, &str)],
    origin: Option<&str>,
) -> TestResponse {
    crate::browse::post_form(app, b, &format!("/groups/{id}/state"), fields, origin).await
}

fn all_attrs(html: &str, css: &str, name: &str) -> Vec<String> {
    let doc = scraper::Html::parse_document(html);
    let sel = scraper::Selector::parse(css).unwrap();
    doc.select(&sel)
        .filter_map(|e| e.value().attr(name).map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn the_groups_page_filters_sorts_and_pages_with_links_that_keep_the_filters() {
    let app = TestApp::spawn().await;
    let token = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let b = sign_in(&app, &token).await;
    let mut vision = Vec::new();
    for name in ["mike", "november", "oscar"] {
        vision.push(
            upload(
                &app,
                &token,
                &device_log(name),
                json!({"project": "vision"}),
            )
            .await
            .1,
        );
    }
    let (_, nlp) = upload(&app, &token, &device_log("papa"), json!({"project": "nlp"})).await;
    // "oscar" gets a second report: the most reports.
    upload(
        &app,
        &token,
        &device_log("oscar"),
        json!({"project": "vision"}),
    )
    .await;

    let all = page(&app, &b.cookie, "/groups").await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.body);
    let headers = texts(&all.body, "table.groups th");
    for column in ["Reports", "Failure", "Culprit", "Where", "State", "Seen"] {
        assert!(headers.iter().any(|h| h == column), "{column}: {headers:?}");
    }
    assert_eq!(texts(&all.body, "tr.group-row").len(), 4);
    assert_eq!(texts(&all.body, "td.state .state"), ["open"; 4]);
    // Every filter is in the form.
    for field in ["state", "category", "has_fix", "assignee", "sort"] {
        assert_eq!(
            texts(&all.body, &format!("#group-filters select[name={field}]")).len(),
            1,
            "{field}"
        );
    }
    assert!(
        texts(&all.body, "#group-filters select[name=assignee] option")
            .contains(&"alice".to_owned())
    );

    // Filtered by project (any letter case), sorted by count, two a page.
    let first = page(
        &app,
        &b.cookie,
        "/groups?project=VISION&sort=count&per_page=2",
    )
    .await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    let ids = all_attrs(&first.body, "tr.group-row", "data-id");
    assert_eq!(ids, [vision[2].to_string(), vision[1].to_string()]);
    assert_eq!(
        attr(&first.body, "#group-filters input[name=project]", "value").as_deref(),
        Some("VISION")
    );
    assert_eq!(
        attr(
            &first.body,
            "#group-filters select[name=sort] option[selected]",
            "value"
        )
        .as_deref(),
        Some("count")
    );
    assert_eq!(
        texts(&first.body, "#group-count"),
        ["3 groups · page 1 of 2"]
    );
    assert!(attr(&first.body, "a[rel=prev]", "href").is_none());
    let next = attr(&first.body, "a[rel=next]", "href").expect("a next page");
    assert_eq!(next, "/groups?project=VISION&sort=count&per_page=2&page=2");
    let second = page(&app, &b.cookie, &next).await;
    assert_eq!(
        all_attrs(&second.body, "tr.group-row", "data-id"),
        [vision[0].to_string()]
    );
    assert!(attr(&second.body, "a[rel=next]", "href").is_none());
    assert_eq!(
        attr(&second.body, "a[rel=prev]", "href").as_deref(),
        Some("/groups?project=VISION&sort=count&per_page=2&page=1")
    );

    // A state filter, after resolving one group through the form.
    let res = post_state(
        &app,
        &b,
        nlp,
        &[
            ("csrf", &b.csrf),
            ("state", "resolved"),
            ("resolved_in", "3.1"),
            ("assignee", "alice"),
        ],
        None,
    )
    .await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    let resolved = page(&app, &b.cookie, "/groups?state=resolved").await;
    assert_eq!(
        all_attrs(&resolved.body, "tr.group-row", "data-id"),
        [nlp.to_string()]
    );
    assert_eq!(texts(&resolved.body, "td.state .assignee"), ["alice"]);
    assert_eq!(texts(&resolved.body, "td.state .muted"), ["in 3.1"]);
    // Resolved, so out of the default (unresolved) list.
    let mine = page(&app, &b.cookie, "/groups?assignee=alice&has_fix=false").await;
    assert!(all_attrs(&mine.body, "tr.group-row", "data-id").is_empty());
    let mine = page(
        &app,
        &b.cookie,
        "/groups?state=any&assignee=alice&has_fix=false",
    )
    .await;
    assert_eq!(
        all_attrs(&mine.body, "tr.group-row", "data-id"),
        [nlp.to_string()]
    );

    // A bad filter is the form again with the reason.
    let bad = page(&app, &b.cookie, "/groups?state=closed").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    let error = texts(&bad.body, "p.error");
    assert!(
        error.len() == 1 && error[0].contains("unknown state"),
        "{error:?}"
    );
}

#[tokio::test]
async fn the_state_form_needs_its_csrf_token_and_records_who_changed_what() {
    let app = TestApp::spawn().await;
    let token = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    app.token("bob", &[Scope::Read]).await;
    let b = sign_in(&app, &token).await;
    let (_, id) = upload(&app, &token, &device_log("quebec"), Value::Null).await;
    let path = format!("/groups/{id}");
    let before = page(&app, &b.cookie, &path).await;
    assert_eq!(texts(&before.body, "#group-state"), ["open"]);
    assert_eq!(
        attr(&before.body, "form.triage-form", "action").as_deref(),
        Some(format!("/groups/{id}/state").as_str())
    );
    // `regressed` is not offered by hand.
    let offered = all_attrs(
        &before.body,
        "form.triage-form select[name=state] option",
        "value",
    );
    assert_eq!(offered, ["open", "resolved", "ignored"]);

    let fields = [
        ("state", "resolved"),
        ("resolved_in", "2.0"),
        ("assignee", "bob"),
    ];
    let without_csrf = post_state(&app, &b, id, &fields, None).await;
    assert_eq!(without_csrf.status, StatusCode::FORBIDDEN);
    let mut with_csrf = vec![("csrf", b.csrf.as_str())];
    with_csrf.extend(fields);
    let cross_site = post_state(&app, &b, id, &with_csrf, Some("https://evil.example")).await;
    assert_eq!(cross_site.status, StatusCode::FORBIDDEN);
    let stale = [("csrf", "not-the-token"), ("state", "resolved")];
    assert_eq!(
        post_state(&app, &b, id, &stale, None).await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(app.count("group_events").await, 0);

    let done = post_state(&app, &b, id, &with_csrf, None).await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    assert_eq!(done.headers["location"], format!("/groups/{id}#triage"));
    let after = page(&app, &b.cookie, &path).await;
    assert_eq!(texts(&after.body, "#group-state"), ["resolved"]);
    assert_eq!(texts(&after.body, "#resolved-in"), ["2.0"]);
    assert_eq!(texts(&after.body, "#assignee"), ["bob"]);
    let history: Vec<String> = texts(&after.body, "ol.history li")
        .iter()
        .map(|l| {
            // After the time ("just now").
            l.split_once("now ")
                .map_or(l.clone(), |(_, rest)| rest.to_owned())
        })
        .collect();
    assert_eq!(
        history,
        [
            "alice assigned bob",
            "alice set the state to resolved in 2.0 (was open)"
        ]
    );

    // Picking another state drops the old "resolved in" (the field still holds it).
    let reopen = [
        ("csrf", b.csrf.as_str()),
        ("state", "open"),
        ("resolved_in", "2.0"),
        ("assignee", "bob"),
    ];
    assert_eq!(
        post_state(&app, &b, id, &reopen, None).await.status,
        StatusCode::SEE_OTHER
    );
    let g = group(&app, &token, id).await;
    assert_eq!(
        (g["state"].clone(), g["resolved_in"].clone()),
        (json!("open"), json!(""))
    );
    // Refusals are pages with the reason.
    let bad = [
        ("csrf", b.csrf.as_str()),
        ("state", "regressed"),
        ("assignee", "bob"),
    ];
    let refused = post_state(&app, &b, id, &bad, None).await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        refused.body.contains("regressed is set by gpu-triage"),
        "{}",
        refused.body
    );
    let unknown = [
        ("csrf", b.csrf.as_str()),
        ("state", "open"),
        ("assignee", "mallory"),
    ];
    assert_eq!(
        post_state(&app, &b, id, &unknown, None).await.status,
        StatusCode::UNPROCESSABLE_ENTITY
    );

    // A read-only user sees the state and history, not the form, and cannot post it.
    let reader = app.token("reader", &[Scope::Read]).await;
    let r = sign_in(&app, &reader).await;
    let seen = page(&app, &r.cookie, &path).await;
    assert_eq!(texts(&seen.body, "#group-state"), ["open"]);
    assert!(texts(&seen.body, "form.triage-form").is_empty());
    assert_eq!(texts(&seen.body, "ol.history li").len(), 3);
    let forbidden = post_state(
        &app,
        &r,
        id,
        &[("csrf", r.csrf.as_str()), ("state", "ignored")],
        None,
    )
    .await;
    assert_eq!(forbidden.status, StatusCode::FORBIDDEN);
    assert_eq!(group(&app, &token, id).await["state"], "open");
}

#[tokio::test]
async fn the_state_form_refuses_a_fix_with_a_control_character_for_that_reason() {
    let app = TestApp::spawn().await;
    let token = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let b = sign_in(&app, &token).await;
    let (_, id) = upload(&app, &token, &device_log("papa"), Value::Null).await;
    let fields = [
        ("csrf", b.csrf.as_str()),
        ("state", "resolved"),
        ("resolved_in", "2.0\u{0}"),
        ("assignee", ""),
    ];
    let refused = post_state(&app, &b, id, &fields, None).await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
    let said = texts(&refused.body, "main").join(" ");
    assert!(
        said.contains("resolved_in") && said.contains("control character"),
        "{said}: {}",
        refused.body
    );
    assert_eq!(group(&app, &token, id).await["state"], "open");
}

#[tokio::test]
async fn a_group_page_shows_tag_breakdowns_and_a_chart_with_both_axes() {
    let app = TestApp::spawn().await;
    let token = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let b = sign_in(&app, &token).await;
    let mut id = 0;
    for (project, branch) in [("vision", "main"), ("vision", "main"), ("nlp", "dev")] {
        id = upload(
            &app,
            &token,
            &device_log("romeo"),
            json!({"project": project, "branch": branch,
                   "environment": "PyTorch version: 2.5.0\nGPU 0: NVIDIA L4"}),
        )
        .await
        .1;
    }
    let g = page(&app, &b.cookie, &format!("/groups/{id}")).await;
    assert_eq!(g.status, StatusCode::OK, "{}", g.body);
    assert_eq!(
        texts(&g.body, "#tags table.tag caption"),
        ["Project", "Branch", "GPU", "torch"]
    );
    assert_eq!(
        texts(&g.body, "#tags td.value"),
        ["vision", "nlp", "main", "dev", "NVIDIA L4", "2.5.0"]
    );
    assert_eq!(
        texts(&g.body, "#tags td.count"),
        ["2", "1", "2", "1", "3", "3"]
    );
    assert_eq!(
        all_attrs(&g.body, "#tags meter", "max"),
        ["3"; 6],
        "each value measured against the group's reports"
    );
    // The chart: both axes, count ticks up to the day's 3 reports, the latest date labelled,
    // and its numbers in words.
    assert_eq!(
        attr(&g.body, "svg.trend-full", "aria-label").as_deref(),
        Some("3 reports in the last 30 days")
    );
    assert_eq!(texts(&g.body, "svg.trend-full line.axis").len(), 2 + 5);
    assert_eq!(
        texts(&g.body, "svg.trend-full text.tick-y"),
        ["0", "1", "2", "3"]
    );
    let dates = texts(&g.body, "svg.trend-full text.tick-x");
    assert_eq!(dates.len(), 5);
    assert!(
        dates
            .iter()
            .all(|d| d.len() == 5 && d.as_bytes()[2] == b'-'),
        "{dates:?}"
    );
    let bars = texts(&g.body, "svg.trend-full rect.bar title");
    assert!(
        bars.len() == 1 && bars[0].ends_with(": 3 reports"),
        "{bars:?}"
    );
    assert_eq!(texts(&g.body, "svg.trend-full desc").len(), 1);
    // The list's compact charts have axes too.
    let list = page(&app, &b.cookie, "/groups").await;
    assert_eq!(
        texts(&list.body, "svg.trend-compact text.tick-y"),
        ["0", "3"]
    );
    assert_eq!(texts(&list.body, "svg.trend-compact text.tick-x").len(), 2);
}

/// Groups you can tell apart and act on (issue 30 item 2): each row names its failure (title,
/// root-cause line, the user's own frame that raised it); a group of unknown failures shows
/// its root-cause line, never an empty link; resolve and ignore are one click from the list
/// (CSRF-checked, back to the same list), and only for sessions that may triage.
#[tokio::test]
async fn the_groups_list_names_each_failure_and_resolves_or_ignores_in_one_click() {
    let app = TestApp::spawn().await;
    let token = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let b = sign_in(&app, &token).await;
    let from = |file: &str, function: &str, error: &str| {
        format!(
            "Traceback (most recent call last):\n  File \"/home/u/{file}\", line 9, in {function}\n    \
             out = self.emb(x)\n  File \"/usr/lib/python3/site-packages/torch/nn/modules/sparse.py\", \
             line 190, in forward\n    return F.embedding(x)\n{error}\n"
        )
    };
    let (_, in_model) = upload(
        &app,
        &token,
        &from(
            "model.py",
            "forward",
            "IndexError: index out of range in self",
        ),
        json!(null),
    )
    .await;
    let (_, in_train) = upload(
        &app,
        &token,
        &from(
            "train.py",
            "step",
            "IndexError: index 7 is out of bounds for dimension 0 with size 3",
        ),
        json!(null),
    )
    .await;
    let (_, unknown) = upload(
        &app,
        &token,
        "starting epoch 1\nwatchdog: the frobnicator stalled after 300 s\n",
        json!(null),
    )
    .await;
    assert_ne!(in_model, in_train);

    let list = page(&app, &b.cookie, "/groups?sort=first_seen").await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.body);
    let row = |id: i64, css: &str| texts(&list.body, &format!("#group-{id} {css}")).concat();
    assert_eq!(row(in_model, ".culprit code"), "model.py:forward");
    assert_eq!(row(in_train, ".culprit code"), "train.py:step");
    assert!(row(in_model, ".root-line").contains("index out of range"));
    assert!(!row(in_model, "a.title").is_empty());
    // The unknown failure: its last line as the root cause, a titled link.
    assert!(
        row(unknown, ".root-line").contains("frobnicator stalled"),
        "{}",
        row(unknown, ".failure")
    );
    assert!(!row(unknown, "a.title").trim().is_empty());
    for link in texts(&list.body, "table.groups a") {
        assert!(!link.trim().is_empty(), "an empty link in the list");
    }

    // One click: resolve from the list, back to the same list at that row.
    let here = attr(
        &list.body,
        &format!("#group-{in_model} input[name=return_to]"),
        "value",
    )
    .expect("return_to");
    assert_eq!(here, "/groups?sort=first_seen&page=1");
    let res = post_state(
        &app,
        &b,
        in_model,
        &[
            ("csrf", &b.csrf),
            ("state", "resolved"),
            ("return_to", &here),
        ],
        None,
    )
    .await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    assert_eq!(
        res.headers["location"],
        format!("/groups?sort=first_seen&page=1#group-{in_model}")
    );
    assert_eq!(group(&app, &token, in_model).await["state"], "resolved");
    // Assigned meanwhile: the one-click ignore leaves the assignee as it is.
    let res = post_state(
        &app,
        &b,
        in_train,
        &[("csrf", &b.csrf), ("state", "open"), ("assignee", "alice")],
        None,
    )
    .await;
    assert_eq!(res.status, StatusCode::SEE_OTHER);
    let res = post_state(
        &app,
        &b,
        in_train,
        &[
            ("csrf", &b.csrf),
            ("state", "ignored"),
            ("return_to", "https://evil.example/"),
        ],
        None,
    )
    .await;
    assert_eq!(
        res.headers["location"],
        format!("/groups/{in_train}#triage")
    );
    let g = group(&app, &token, in_train).await;
    assert_eq!(
        (g["state"].as_str(), g["assignee"].as_str()),
        (Some("ignored"), Some("alice"))
    );
    // Without the CSRF token: refused, nothing changes.
    let res = post_state(&app, &b, unknown, &[("state", "resolved")], None).await;
    assert_eq!(res.status, StatusCode::FORBIDDEN);
    assert_eq!(group(&app, &token, unknown).await["state"], "open");
    // The default list leaves out the resolved and ignored groups.
    let list = page(&app, &b.cookie, "/groups").await;
    assert_eq!(
        all_attrs(&list.body, "tr.group-row", "data-id"),
        [unknown.to_string()]
    );
    // The list offers what each row can still become; a read-only session gets no buttons.
    let list = page(&app, &b.cookie, "/groups?state=any").await;
    for (id, label) in [
        (in_model, "Reopen"),
        (in_train, "Reopen"),
        (unknown, "Resolve"),
    ] {
        assert!(
            attr(
                &list.body,
                &format!("#group-{id} button[aria-label^={label}]"),
                "type"
            )
            .is_some(),
            "{label} {id}"
        );
    }
    assert!(
        attr(
            &list.body,
            &format!("#group-{unknown} button[aria-label^=Reopen]"),
            "type"
        )
        .is_none()
    );
    assert!(
        attr(
            &list.body,
            &format!("#group-{in_model} button[aria-label^=Resolve]"),
            "type"
        )
        .is_none()
    );
    assert!(
        attr(
            &list.body,
            &format!("#group-{in_model} button[aria-label^=Ignore]"),
            "type"
        )
        .is_some()
    );
    let reader = app.token("viewer", &[Scope::Read]).await;
    let r = sign_in(&app, &reader).await;
    let list = page(&app, &r.cookie, "/groups").await;
    assert!(texts(&list.body, "form.quick").is_empty());
}
