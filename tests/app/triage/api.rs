//! `PATCH /api/v1/groups/{id}`, `GET /api/v1/groups` and the group answer's triage fields.

use axum::http::StatusCode;
use gpu_triage::auth::Scope;
use serde_json::{Value, json};

use super::{device_log, group, history, patch, patch_raw, upload};
use crate::support::TestApp;

const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 \
                   has a total capacity of 79.15 GiB of which 1.06 GiB is free.\n";

fn tuple(
    actor: &str,
    action: &str,
    from: &str,
    to: &str,
    detail: &str,
) -> (String, String, String, String, String) {
    (
        actor.into(),
        action.into(),
        from.into(),
        to.into(),
        detail.into(),
    )
}

#[tokio::test]
async fn a_group_is_resolved_assigned_and_reopened_with_each_change_in_its_history() {
    let app = TestApp::spawn().await;
    let alice = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    app.token("bob", &[Scope::Read]).await;
    let (_, id) = upload(&app, &alice, &device_log("alpha"), Value::Null).await;
    let fresh = group(&app, &alice, id).await;
    assert_eq!(
        (&fresh["state"], &fresh["assignee"], &fresh["resolved_in"]),
        (&json!("open"), &json!(""), &json!(""))
    );
    assert_eq!(fresh["history"], json!([]));
    assert_eq!(fresh["tags"]["project"], json!([]));

    let res = patch(
        &app,
        &alice,
        id,
        json!({"state": "resolved", "resolved_in": "2.0", "assignee": "bob"}),
    )
    .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let resolved = res.json();
    assert_eq!(
        (
            &resolved["state"],
            &resolved["resolved_in"],
            &resolved["assignee"]
        ),
        (&json!("resolved"), &json!("2.0"), &json!("bob"))
    );
    // One entry per change, written together (the later one first).
    assert_eq!(
        history(&resolved),
        [
            tuple("alice", "assignee", "", "bob", ""),
            tuple("alice", "state", "open", "resolved", "in 2.0"),
        ]
    );
    assert_eq!(resolved["history"][0]["at"], resolved["history"][1]["at"]);

    // Reopening clears the fix; unassigning takes "".
    let reopened = patch(&app, &alice, id, json!({"state": "open", "assignee": ""}))
        .await
        .json();
    assert_eq!(
        (
            &reopened["state"],
            &reopened["resolved_in"],
            &reopened["assignee"]
        ),
        (&json!("open"), &json!(""), &json!(""))
    );
    // A change to what is already so writes nothing.
    let same = patch(&app, &alice, id, json!({"state": "open"})).await;
    assert_eq!(same.status, StatusCode::OK);
    let ignored = patch(&app, &alice, id, json!({"state": "ignored"}))
        .await
        .json();
    assert_eq!(
        history(&ignored)[0],
        tuple("alice", "state", "open", "ignored", "")
    );
    assert_eq!(history(&ignored).len(), 5);
    assert_eq!(app.count("group_events").await, 5);
    // The read answer is the same as the change's.
    assert_eq!(group(&app, &alice, id).await, ignored);
}

#[tokio::test]
async fn triage_changes_are_refused_with_clear_errors_and_change_nothing() {
    let app = TestApp::spawn().await;
    let ingest = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let read = app.token("reader", &[Scope::Read]).await;
    let gone = app.token("gone", &[Scope::Read]).await;
    gpu_triage::storage::tokens::revoke_tokens(
        app.db.pool(),
        gpu_triage::storage::tokens::TokenSelector::Name("gone"),
    )
    .await
    .unwrap();
    drop(gone);
    let (_, id) = upload(&app, &ingest, &device_log("beta"), Value::Null).await;
    let cases: &[(&str, i64, &str, StatusCode, &str, &str)] = &[
        (
            "read-only token",
            id,
            r#"{"state":"resolved"}"#,
            StatusCode::FORBIDDEN,
            "forbidden",
            "ingest",
        ),
        (
            "unknown group",
            id + 100,
            r#"{"state":"resolved"}"#,
            StatusCode::NOT_FOUND,
            "not_found",
            "group",
        ),
        (
            "unknown state",
            id,
            r#"{"state":"closed"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_triage",
            "unknown state \"closed\"",
        ),
        (
            "regressed by hand",
            id,
            r#"{"state":"regressed"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_triage",
            "regressed is set by gpu-triage",
        ),
        (
            "a fix without resolving",
            id,
            r#"{"resolved_in":"2.0"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_triage",
            "resolved_in goes only with the resolved state",
        ),
        (
            "a fix that is neither commit nor version",
            id,
            r#"{"state":"resolved","resolved_in":"next sprint"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_triage",
            "commit (7-40 hex digits) or a version",
        ),
        (
            "nobody by that name",
            id,
            r#"{"assignee":"mallory"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_triage",
            "no active token is named \"mallory\"",
        ),
        (
            "a revoked token's name",
            id,
            r#"{"assignee":"gone"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_triage",
            "no active token is named \"gone\"",
        ),
        (
            "nothing to change",
            id,
            "{}",
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_triage",
            "nothing to change",
        ),
        (
            "malformed JSON",
            id,
            r#"{"state":"#,
            StatusCode::BAD_REQUEST,
            "bad_json",
            "",
        ),
        (
            "an unknown field",
            id,
            r#"{"status":"resolved"}"#,
            StatusCode::BAD_REQUEST,
            "bad_json",
            "status",
        ),
        (
            "a state that is not a string",
            id,
            r#"{"state":1}"#,
            StatusCode::BAD_REQUEST,
            "bad_json",
            "",
        ),
    ];
    for (what, group_id, body, status, code, said) in cases {
        let token = if *what == "read-only token" {
            &read
        } else {
            &ingest
        };
        let res = patch_raw(&app, token, *group_id, body).await;
        assert_eq!(res.status, *status, "{what}: {}", res.body);
        assert_eq!(res.error_code(), *code, "{what}");
        let message = res.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.contains(said), "{what}: {message}");
    }
    let anonymous = app
        .send(
            axum::http::Request::patch(format!("/api/v1/groups/{id}"))
                .header("content-type", "application/json")
                .body(axum::body::Body::from(r#"{"state":"resolved"}"#))
                .unwrap(),
        )
        .await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    let after = group(&app, &read, id).await;
    assert_eq!(
        (&after["state"], &after["assignee"]),
        (&json!("open"), &json!(""))
    );
    assert_eq!(app.count("group_events").await, 0);
}

/// `GET /api/v1/groups?...` answered 200: the ids of the page, in order.
async fn listed(app: &TestApp, token: &str, query: &str) -> (Vec<i64>, Value) {
    let res = app.get_as(token, &format!("/api/v1/groups?{query}")).await;
    assert_eq!(res.status, StatusCode::OK, "{query}: {}", res.body);
    let v = res.json();
    let ids = (v["groups"].as_array().unwrap().iter())
        .map(|g| g["id"].as_i64().unwrap())
        .collect();
    (ids, v)
}

#[tokio::test]
async fn the_group_list_filters_by_state_project_category_fix_and_assignee() {
    let app = TestApp::spawn().await;
    let alice = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    app.token("bob", &[Scope::Read]).await;
    let (_, a) = upload(
        &app,
        &alice,
        &device_log("gamma"),
        json!({"project": "Vision"}),
    )
    .await;
    let (_, b) = upload(&app, &alice, OOM, json!({"project": "nlp"})).await;
    let (_, c) = upload(
        &app,
        &alice,
        &device_log("delta"),
        json!({"project": "vision"}),
    )
    .await;
    assert_eq!(
        patch(&app, &alice, a, json!({"state": "resolved"}))
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        patch(&app, &alice, b, json!({"assignee": "bob"}))
            .await
            .status,
        StatusCode::OK
    );
    let fix = app
        .post_json(
            &alice,
            &format!("/api/v1/groups/{c}/fixes"),
            &json!({"summary": "move the index to cuda"}),
        )
        .await;
    assert_eq!(fix.status, StatusCode::CREATED, "{}", fix.body);

    let mut cases: Vec<(&str, Vec<i64>)> = vec![
        // Unresolved (open or regressed) unless another state, or any, is asked for.
        ("", vec![c, b]),
        ("state=unresolved", vec![c, b]),
        ("state=any", vec![c, b, a]),
        ("state=resolved", vec![a]),
        ("state=open", vec![c, b]),
        ("state=regressed", vec![]),
        ("state=any&project=VISION", vec![c, a]),
        ("project=VISION", vec![c]),
        ("project=nlp", vec![b]),
        ("project=none", vec![]),
        ("category=out_of_memory", vec![b]),
        ("state=any&category=device_mismatch", vec![c, a]),
        ("has_fix=true", vec![c]),
        ("state=any&has_fix=false", vec![b, a]),
        ("assignee=bob", vec![b]),
        ("assignee=alice", vec![]),
        ("state=open&project=vision", vec![c]),
        (
            "state=&project=&category=&has_fix=&assignee=&sort=",
            vec![c, b],
        ),
    ];
    for (query, want) in cases.drain(..) {
        let (ids, v) = listed(&app, &alice, query).await;
        assert_eq!(ids, want, "{query}");
        assert_eq!(v["total"], json!(want.len()), "{query}");
    }
    let (_, all) = listed(&app, &alice, "state=any").await;
    let first = &all["groups"][2];
    assert_eq!(
        (
            &first["state"],
            &first["has_fix"],
            &first["count"],
            &first["category"]
        ),
        (
            &json!("resolved"),
            &json!(false),
            &json!(1),
            &json!("device_mismatch")
        )
    );
    assert_eq!(all["groups"][0]["has_fix"], json!(true));
    assert_eq!(all["groups"][1]["assignee"], json!("bob"));
    assert_eq!(
        all["groups"][0]["url"],
        json!(format!("http://gpu-triage.test/groups/{c}"))
    );
    assert!(all["groups"][0]["first_seen"].is_string());

    for bad in [
        "state=closed",
        "state=all",
        "category=bogus",
        "has_fix=yes",
        "sort=title",
        "page=0",
        "per_page=101",
        "page=abc",
        "owner=me",
    ] {
        let res = app.get_as(&alice, &format!("/api/v1/groups?{bad}")).await;
        assert_eq!(res.status, StatusCode::BAD_REQUEST, "{bad}: {}", res.body);
        assert_eq!(res.error_code(), "bad_query", "{bad}");
    }
    let worker = app.token("gpu-1", &[Scope::Worker]).await;
    assert_eq!(
        app.get_as(&worker, "/api/v1/groups").await.status,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn the_group_list_sorts_by_last_seen_count_and_first_seen() {
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    // x first (2 reports, the latest at the end), then y (3 reports), then z (1 report).
    let (_, x) = upload(&app, &t, &device_log("xray"), Value::Null).await;
    let (_, y) = upload(&app, &t, &device_log("yankee"), Value::Null).await;
    let (_, z) = upload(&app, &t, &device_log("zulu"), Value::Null).await;
    upload(&app, &t, &device_log("yankee"), Value::Null).await;
    upload(&app, &t, &device_log("yankee"), Value::Null).await;
    upload(&app, &t, &device_log("xray"), Value::Null).await;
    for (sort, want) in [
        ("", vec![x, y, z]),
        ("sort=last_seen", vec![x, y, z]),
        ("sort=count", vec![y, x, z]),
        ("sort=first_seen", vec![z, y, x]),
    ] {
        assert_eq!(listed(&app, &t, sort).await.0, want, "{sort}");
    }
    let (_, v) = listed(&app, &t, "sort=count").await;
    let counts: Vec<i64> = (v["groups"].as_array().unwrap().iter())
        .map(|g| g["count"].as_i64().unwrap())
        .collect();
    assert_eq!(counts, [3, 2, 1]);
}

#[tokio::test]
async fn pages_cover_every_group_once_in_order_with_the_total() {
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let names = ["aa", "bb", "cc", "dd", "ee", "ff", "gg"];
    for name in names {
        upload(&app, &t, &device_log(name), json!({"project": "p"})).await;
    }
    for sort in ["last_seen", "count", "first_seen"] {
        let (everything, _) = listed(&app, &t, &format!("sort={sort}&per_page=100")).await;
        assert_eq!(everything.len(), names.len());
        let mut paged = Vec::new();
        let mut page = Some(1);
        let mut pages = 0;
        while let Some(n) = page {
            let (ids, v) = listed(
                &app,
                &t,
                &format!("sort={sort}&project=p&per_page=3&page={n}"),
            )
            .await;
            assert_eq!(v["total"], json!(7), "{sort} page {n}");
            assert_eq!(
                (v["page"].clone(), v["per_page"].clone()),
                (json!(n), json!(3))
            );
            assert!(
                ids.len() == 3 || v["next_page"].is_null(),
                "{sort} page {n}"
            );
            paged.extend(ids);
            page = v["next_page"].as_u64();
            pages += 1;
        }
        assert_eq!(pages, 3, "{sort}");
        assert_eq!(
            paged, everything,
            "{sort}: no duplicate, no gap, same order"
        );
    }
    let (past, v) = listed(&app, &t, "per_page=3&page=4").await;
    assert!(past.is_empty());
    assert_eq!(
        (v["total"].clone(), v["next_page"].clone()),
        (json!(7), Value::Null)
    );
}

#[tokio::test]
async fn a_group_answer_counts_its_reports_by_project_branch_environment_gpu_and_torch() {
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let collect_env = "Collecting environment information...\nPyTorch version: 2.3.1+cu121\n\
                       CUDA used to build PyTorch: 12.1\nGPU models and configuration: \n\
                       GPU 0: NVIDIA A100-SXM4-80GB\nGPU 1: NVIDIA A100-SXM4-80GB\n";
    let metas = [
        json!({"project": "vision", "branch": "main", "environment": "staging"}),
        json!({"project": "vision", "branch": "main", "environment": collect_env}),
        json!({"project": "nlp", "branch": "dev", "environment": "GPU models and configuration: NVIDIA H100 80GB HBM3\nPyTorch version: 2.4.0"}),
        json!({"project": "vision"}),
    ];
    let mut id = 0;
    for meta in metas {
        id = upload(&app, &t, &device_log("tango"), meta).await.1;
    }
    let g = group(&app, &t, id).await;
    let tags = &g["tags"];
    let counts = |tag: &str| -> Vec<(String, i64)> {
        (tags[tag].as_array().unwrap().iter())
            .map(|c| {
                (
                    c["value"].as_str().unwrap().to_owned(),
                    c["count"].as_i64().unwrap(),
                )
            })
            .collect()
    };
    let pairs = |v: &[(&str, i64)]| -> Vec<(String, i64)> {
        v.iter().map(|(s, n)| (s.to_string(), *n)).collect()
    };
    assert_eq!(counts("project"), pairs(&[("vision", 3), ("nlp", 1)]));
    assert_eq!(counts("branch"), pairs(&[("main", 2), ("dev", 1)]));
    // Only a one-line environment is a label; collect_env output gives GPU and torch instead.
    assert_eq!(counts("environment"), pairs(&[("staging", 1)]));
    assert_eq!(
        counts("gpu"),
        pairs(&[("NVIDIA A100-SXM4-80GB", 1), ("NVIDIA H100 80GB HBM3", 1)])
    );
    assert_eq!(
        counts("torch_version"),
        pairs(&[("2.3.1+cu121", 1), ("2.4.0", 1)])
    );
    // The other fields are still there.
    assert_eq!(g["count"], json!(4));
    assert_eq!(g["reports"].as_array().unwrap().len(), 4);
}

#[tokio::test]
async fn tag_breakdowns_keep_the_ten_most_frequent_values() {
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let mut id = 0;
    for (i, branch) in "abcdefghijkl".chars().enumerate() {
        // Branch "a" twice, every other once.
        for _ in 0..if i == 0 { 2 } else { 1 } {
            id = upload(
                &app,
                &t,
                &device_log("echo"),
                json!({"branch": format!("b-{branch}")}),
            )
            .await
            .1;
        }
    }
    let g = group(&app, &t, id).await;
    let branches = g["tags"]["branch"].as_array().unwrap();
    assert_eq!(branches.len(), 10);
    assert_eq!(branches[0], json!({"value": "b-a", "count": 2}));
    assert_eq!(branches[1], json!({"value": "b-b", "count": 1}));
    assert_eq!(g["tags"]["gpu"], json!([]));
}

#[tokio::test]
async fn a_triaged_group_emptied_by_reclassification_keeps_its_state_and_history() {
    use gpu_triage::storage::reclassify_runs::{Applied, Reclassified};
    use gpu_triage::storage::reports::Headline;
    let app = TestApp::spawn().await;
    let t = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let (report, id) = upload(&app, &t, &device_log("sierra"), Value::Null).await;
    let (other_report, other) = upload(&app, &t, &device_log("tango"), Value::Null).await;
    assert_eq!(
        patch(&app, &t, id, json!({"state": "ignored"}))
            .await
            .status,
        StatusCode::OK
    );
    // New rules put both reports in another group.
    let classification = gpu_triage::rules::Ruleset::builtin()
        .unwrap()
        .classify_bytes("x.log", OOM.as_bytes());
    let moved = Reclassified {
        headline: Headline::of(&classification),
        classification,
        search: gpu_triage::storage::search::Document {
            root: "moved".into(),
            ..Default::default()
        },
        search_words: vec!["moved".into()],
        story: None,
    };
    for r in [report, other_report] {
        let applied = gpu_triage::app::team_rules::reclassify::apply(&app.db, r, &moved)
            .await
            .unwrap();
        assert_eq!(applied, Applied::Regrouped);
    }
    // The untouched group is gone as before; the triaged one stays, empty, with its history.
    assert_eq!(
        app.get_as(&t, &format!("/api/v1/groups/{other}"))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let g = group(&app, &t, id).await;
    assert_eq!(
        (g["state"].clone(), g["count"].clone()),
        (json!("ignored"), json!(0))
    );
    assert_eq!(history(&g).len(), 1);
}

#[tokio::test]
async fn a_fix_with_a_control_character_is_refused_for_that_reason() {
    let app = TestApp::spawn().await;
    let alice = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let (_, id) = upload(&app, &alice, &device_log("oscar"), Value::Null).await;
    for resolved_in in ["2.0\u{0}", "\u{0}", "abcdef1\u{7}", "2.\u{1b}[31m1"] {
        let body = json!({"state": "resolved", "resolved_in": resolved_in});
        let res = patch(&app, &alice, id, body).await;
        assert_eq!(
            res.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{resolved_in:?}: {}",
            res.body
        );
        assert_eq!(res.error_code(), "bad_triage");
        let message = res.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(
            message.contains("resolved_in") && message.contains("control character"),
            "{resolved_in:?}: {message}"
        );
        assert!(!message.contains("100 characters"), "{message}");
    }
    assert_eq!(group(&app, &alice, id).await["state"], "open");
    assert_eq!(app.count("group_events").await, 0);
}
