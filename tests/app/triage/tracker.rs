//! The group list as an issue tracker (issue 39 item 4): the unresolved groups by default, any
//! state when asked, and on each row what tells look-alikes apart (the program's own frame,
//! projects, frameworks, environments, hosts and ranks), in the API and the portal alike.

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

/// The location a portal form answered with, without its fragment.
fn location(res: &crate::support::TestResponse) -> String {
    let to = res.headers["location"].to_str().unwrap();
    to.split('#').next().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn the_list_changes_the_ticked_groups_in_one_form_and_its_notice_undoes_the_change() {
    let app = TestApp::spawn().await;
    let alice = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let mut ids = Vec::new();
    for (file, function) in [
        ("a.py", "one"),
        ("b.py", "two"),
        ("c.py", "three"),
        ("d.py", "four"),
    ] {
        ids.push(
            upload(&app, &alice, &ranked(file, function), json!(null))
                .await
                .1,
        );
    }
    let b = sign_in(&app, &alice).await;
    let list = page(&app, &b.cookie, "/groups?sort=count").await;
    assert_eq!(texts(&list.body, "form#bulk").len(), 1);
    assert_eq!(
        texts(&list.body, "input[type=checkbox][form=bulk]").len(),
        4
    );
    let here = crate::browse::attr(&list.body, "form#bulk input[name=return_to]", "value");
    assert_eq!(here.as_deref(), Some("/groups?sort=count&page=1"));
    let pick = |id: i64| (format!("pick-{id}"), id.to_string());
    let picks: Vec<(String, String)> = ids[..3].iter().map(|id| pick(*id)).collect();
    let form = |action: &str, extra: &[(&str, &str)], picks: &[(String, String)]| {
        let mut fields: Vec<(String, String)> = vec![
            ("csrf".into(), b.csrf.clone()),
            ("action".into(), action.into()),
            ("return_to".into(), "/groups?sort=count&page=1".into()),
        ];
        fields.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        fields.extend(picks.iter().cloned());
        fields
    };
    let post = |fields: Vec<(String, String)>, path: String| {
        let app = &app;
        let b = &b;
        async move {
            let fields: Vec<(&str, &str)> = fields
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            crate::browse::post_form(app, b, &path, &fields, None).await
        }
    };

    // Without the CSRF token: refused, nothing changes.
    let mut no_csrf = form("resolve", &[], &picks);
    no_csrf.remove(0);
    let res = post(no_csrf, "/groups/bulk".into()).await;
    assert_eq!(res.status, StatusCode::FORBIDDEN);
    // Resolve three ticked groups: back to the list with the change's notice.
    let res = post(form("resolve", &[], &picks), "/groups/bulk".into()).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    let back = location(&res);
    assert!(
        back.starts_with("/groups?sort=count&page=1&change="),
        "{back}"
    );
    let list = page(&app, &b.cookie, &back).await;
    assert_eq!(
        texts(&list.body, "tr.group-row").len(),
        1,
        "the resolved groups left the list"
    );
    assert_eq!(
        texts(&list.body, "#change-notice .notice-text"),
        ["alice resolved 3 groups."]
    );
    let undo = crate::browse::attr(&list.body, "#change-notice form", "action").unwrap();
    // The page's own links do not repeat the notice.
    let here = crate::browse::attr(&list.body, "#change-notice input[name=return_to]", "value");
    assert_eq!(here.as_deref(), Some("/groups?sort=count&page=1"));
    let res = post(
        vec![
            ("csrf".into(), b.csrf.clone()),
            ("return_to".into(), here.unwrap()),
        ],
        undo.clone(),
    )
    .await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    let list = page(&app, &b.cookie, &location(&res)).await;
    assert_eq!(texts(&list.body, "tr.group-row").len(), 4);
    assert_eq!(
        texts(&list.body, "#change-notice .notice-text"),
        ["alice resolved 3 groups — undone by alice."]
    );
    assert!(
        texts(&list.body, "#change-notice form").is_empty(),
        "no second undo"
    );

    // Ignore until more reports, assign; refusals are pages with the reason.
    let res = post(
        form("ignore_more", &[("ignore_until", "3")], &picks[..1]),
        "/groups/bulk".into(),
    )
    .await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    let g = super::group(&app, &alice, ids[0]).await;
    assert_eq!(
        (g["state"].as_str(), &g["ignore_reports_left"]),
        (Some("ignored"), &json!(3))
    );
    let res = post(
        form("assign", &[("assignee", "alice")], &picks[1..2]),
        "/groups/bulk".into(),
    )
    .await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    assert_eq!(
        super::group(&app, &alice, ids[1]).await["assignee"],
        "alice"
    );
    for (fields, why) in [
        (form("resolve", &[], &[]), "select at least one group"),
        (form("none", &[], &picks), "choose what to do"),
        (
            form("ignore_more", &[("ignore_until", "")], &picks),
            "how many more reports",
        ),
    ] {
        let res = post(fields, "/groups/bulk".into()).await;
        assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{why}");
        assert!(res.body.contains(why), "{why}: {}", res.body);
    }

    // Merge two from the list: into the one with the most reports (a tie: the oldest).
    let two: Vec<(String, String)> = vec![pick(ids[2]), pick(ids[3])];
    let res = post(form("merge", &[], &two), "/groups/bulk".into()).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    assert_eq!(location(&res), format!("/groups/{}", ids[2]));
    let g = super::group(&app, &alice, ids[2]).await;
    assert_eq!(g["merged_groups"], json!([ids[3]]));

    // A read-only session gets neither the form nor the boxes, and may not post it.
    let reader = app.token("viewer", &[Scope::Read]).await;
    let r = sign_in(&app, &reader).await;
    let list = page(&app, &r.cookie, "/groups?state=any").await;
    assert!(texts(&list.body, "form#bulk").is_empty());
    assert!(texts(&list.body, "input[type=checkbox]").is_empty());
    let fields = [
        ("csrf", r.csrf.as_str()),
        ("action", "resolve"),
        ("pick-1", "1"),
    ];
    let res = crate::browse::post_form(&app, &r, "/groups/bulk", &fields, None).await;
    assert_eq!(res.status, StatusCode::FORBIDDEN);
}

/// A single log's root-cause line that names its host (`gpu-node-12: [rank3]: ...`): the row
/// says which hosts and ranks the group's reports failed on.
fn on_host(host: &str, rank: u32) -> String {
    format!(
        "Traceback (most recent call last):\n{host}: [rank{rank}]:   File \"/home/u/model.py\", \
         line 9, in forward\n{host}: [rank{rank}]:     out = self.emb(x)\n{host}: [rank{rank}]: \
         RuntimeError: Expected all tensors to be on the same device, but found at least two \
         devices, cuda:0 and cpu! (when checking argument for argument index in method \
         wrapper_CUDA__index_select)\n"
    )
}

#[tokio::test]
async fn a_row_names_the_hosts_and_ranks_its_reports_failed_on() {
    let app = TestApp::spawn().await;
    let ci = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let mut group = None;
    for (host, rank) in [("gpu-node-12", 3), ("gpu-node-12", 5), ("gpu-node-4", 3)] {
        let (_, g) = upload(
            &app,
            &ci,
            &on_host(host, rank),
            json!({"project": "vision"}),
        )
        .await;
        assert!(group.is_none_or(|id| id == g), "one failure, one group");
        group = Some(g);
    }
    let g = group.expect("a group");
    let list = app.get_as(&ci, "/api/v1/groups").await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.body);
    let row = item(&list.json(), g);
    assert_eq!(row["hosts"], json!(["gpu-node-12", "gpu-node-4"]));
    assert_eq!(row["ranks"], json!([3, 5]));

    let session = sign_in(&app, &ci).await;
    let html = page(&app, &session.cookie, "/groups").await;
    assert_eq!(html.status, StatusCode::OK, "{}", html.body);
    assert_eq!(
        texts(&html.body, &format!("#group-{g} td.where .ranks")).concat(),
        "hosts gpu-node-12, gpu-node-4 · ranks 3, 5"
    );
}
