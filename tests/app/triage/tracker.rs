//! The group list as an issue tracker (issue 39 item 4): the unresolved groups by default, any
//! state when asked, and on each row what tells look-alikes apart (the program's own frame,
//! projects, frameworks, environments, ranks), in the API and the portal alike.

use axum::http::StatusCode;
use gpu_triage::auth::Scope;
use serde_json::{Value, json};

use super::{patch, upload};
use crate::browse::{page, sign_in, texts};
use crate::support::TestApp;

/// One failure sentence raised from `file`'s `function`, on ranks 0 and 3: one group per
/// frame.
pub fn ranked(file: &str, function: &str) -> String {
    format!(
        "Traceback (most recent call last):\n[rank3]:   File \"/home/u/{file}\", line 9, in \
         {function}\n[rank3]:     out = self.emb(x)\n[rank3]: RuntimeError: Expected all tensors \
         to be on the same device, but found at least two devices, cuda:0 and cpu! (when \
         checking argument for argument index in method wrapper_CUDA__index_select)\n[rank0]: \
         RuntimeError: Expected all tensors to be on the same device, but found at least two \
         devices, cuda:0 and cpu! (when checking argument for argument index in method \
         wrapper_CUDA__index_select)\n"
    )
}

/// The listed group `id` of a `GET /api/v1/groups` answer.
fn item(list: &Value, id: i64) -> Value {
    (list["groups"].as_array().unwrap().iter())
        .find(|g| g["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("group {id} in {list}"))
}

#[tokio::test]
async fn look_alike_groups_are_told_apart_by_their_frame_projects_environments_and_ranks() {
    let app = TestApp::spawn().await;
    let ci = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let (_, in_model) = upload(
        &app,
        &ci,
        &ranked("model.py", "forward"),
        json!({"project": "vision", "environment": "node-7"}),
    )
    .await;
    let (_, again) = upload(
        &app,
        &ci,
        &ranked("model.py", "forward"),
        json!({"project": "nlp", "environment": "node-7"}),
    )
    .await;
    let (_, in_loader) = upload(
        &app,
        &ci,
        &ranked("loader.py", "collate"),
        json!({"project": "vision", "environment": "PyTorch version: 2.5.0\nOS: Ubuntu"}),
    )
    .await;
    assert_eq!(in_model, again);
    assert_ne!(in_model, in_loader, "the same sentence from other code");

    let list = app.get_as(&ci, "/api/v1/groups").await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.body);
    let list = list.json();
    let (a, b) = (item(&list, in_model), item(&list, in_loader));
    assert_eq!(a["title"], b["title"], "look-alikes by title");
    assert_eq!(a["root_cause_text"], b["root_cause_text"]);
    assert_eq!(a["culprit"], "model.py:forward");
    assert_eq!(b["culprit"], "loader.py:collate");
    assert_eq!(a["projects"], json!(["nlp", "vision"]));
    assert_eq!(a["frameworks"], json!(["pytorch"]));
    assert_eq!(a["environments"], json!(["node-7"]));
    assert_eq!(a["ranks"], json!([0, 3]));
    // collect_env output is no short label: not a place.
    assert_eq!(b["environments"], json!([]));

    // The portal's rows say the same, the root-cause line whole.
    let session = sign_in(&app, &ci).await;
    let html = page(&app, &session.cookie, "/groups").await;
    assert_eq!(html.status, StatusCode::OK, "{}", html.body);
    let cell = |id: i64, css: &str| texts(&html.body, &format!("#group-{id} {css}")).concat();
    assert_eq!(cell(in_model, "td.culprit code"), "model.py:forward");
    assert_eq!(cell(in_loader, "td.culprit code"), "loader.py:collate");
    assert_eq!(cell(in_model, "td.where .projects"), "nlp, vision");
    assert_eq!(cell(in_model, "td.where .environments"), "node-7");
    assert_eq!(cell(in_model, "td.where .ranks"), "ranks 0, 3");
    assert_eq!(cell(in_model, "td.where .framework"), "pytorch");
    let root = cell(in_model, "code.root-line");
    assert!(
        root.len() > 100 && root.ends_with("wrapper_CUDA__index_select)"),
        "the whole line: {root}"
    );
}

#[tokio::test]
async fn the_list_hides_resolved_and_ignored_groups_until_asked_and_keeps_the_filter_in_links() {
    let app = TestApp::spawn().await;
    let ci = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let mut ids = Vec::new();
    for (file, function) in [("a.py", "one"), ("b.py", "two"), ("c.py", "three")] {
        ids.push(
            upload(&app, &ci, &ranked(file, function), json!(null))
                .await
                .1,
        );
    }
    for (id, state) in [(ids[0], "resolved"), (ids[1], "ignored")] {
        let res = patch(&app, &ci, id, json!({ "state": state })).await;
        assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    }
    let listed = |v: Value| -> Vec<i64> {
        (v["groups"].as_array().unwrap().iter())
            .map(|g| g["id"].as_i64().unwrap())
            .collect()
    };
    let default = app.get_as(&ci, "/api/v1/groups").await.json();
    assert_eq!(listed(default), [ids[2]]);
    let any = app.get_as(&ci, "/api/v1/groups?state=any").await.json();
    assert_eq!(listed(any), [ids[2], ids[1], ids[0]]);

    let session = sign_in(&app, &ci).await;
    let html = page(&app, &session.cookie, "/groups").await;
    assert_eq!(texts(&html.body, "tr.group-row").len(), 1);
    let chosen = texts(
        &html.body,
        "#group-filters select[name=state] option[selected]",
    );
    assert_eq!(chosen, ["unresolved (open or regressed)"]);
    let html = page(&app, &session.cookie, "/groups?state=any&per_page=2").await;
    assert_eq!(texts(&html.body, "tr.group-row").len(), 2);
    let next = crate::browse::attr(&html.body, "a[rel=next]", "href");
    assert_eq!(next.as_deref(), Some("/groups?state=any&per_page=2&page=2"));
}
