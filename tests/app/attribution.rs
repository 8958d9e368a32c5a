//! Actions name their person (issue 31 item 3): people signed in through a real OpenID provider
//! (see `oidc`) record fixes under their names, are assigned groups from the people picker,
//! find their own groups under "assigned to me" and "recorded by me", and the history names
//! them; token sessions and API tokens are named as tokens, and installations without people
//! keep token names as assignees.

use axum::http::StatusCode;
use gpu_triage::auth::Scope;
use serde_json::{Value, json};

use crate::browse::{Browser, attr, page, post_form, sign_in, texts};
use crate::oidc::{app_for, person_browser, provider};
use crate::support::TestApp;
use crate::triage::{device_log, group, patch, upload};

/// Every value of attribute `name` on the elements `css` selects.
fn all_attrs(html: &str, css: &str, name: &str) -> Vec<String> {
    let doc = scraper::Html::parse_document(html);
    let sel = scraper::Selector::parse(css).unwrap();
    doc.select(&sel)
        .filter_map(|e| e.value().attr(name).map(str::to_owned))
        .collect()
}

/// The ids of the groups a list page shows.
async fn listed(app: &TestApp, b: &Browser, path: &str) -> Vec<i64> {
    let res = page(app, &b.cookie, path).await;
    assert_eq!(res.status, StatusCode::OK, "{path}: {}", res.body);
    all_attrs(&res.body, "tr.group-row", "data-id")
        .iter()
        .map(|id| id.parse().unwrap())
        .collect()
}

/// Records a fix for group `id` through the portal's form.
async fn record_fix(app: &TestApp, b: &Browser, id: i64, summary: &str) {
    let res = post_form(
        app,
        b,
        &format!("/groups/{id}/fixes"),
        &[("csrf", &b.csrf), ("summary", summary)],
        None,
    )
    .await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
}

/// Posts group `id`'s state form as it is on the page, with `changes` in place of its values.
async fn post_triage(app: &TestApp, b: &Browser, id: i64, changes: &[(&str, &str)]) {
    let mut fields: Vec<(&str, &str)> = vec![("csrf", &b.csrf), ("state", "open")];
    fields.extend_from_slice(changes);
    let res = post_form(app, b, &format!("/groups/{id}/state"), &fields, None).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
}

/// The people picker's choices on group `id`'s page: (value, label).
async fn picker(app: &TestApp, b: &Browser, id: i64) -> Vec<(String, String)> {
    let res = page(app, &b.cookie, &format!("/groups/{id}")).await;
    let doc = scraper::Html::parse_document(&res.body);
    let sel = scraper::Selector::parse("form.triage-form select[name=assignee_id] option").unwrap();
    doc.select(&sel)
        .map(|o| {
            (
                o.value().attr("value").unwrap_or_default().to_owned(),
                o.text().collect(),
            )
        })
        .collect()
}

/// (name, kind, tooltip) of each actor `css` selects (`.who` elements).
fn who(html: &str, css: &str) -> Vec<(String, String, String)> {
    let doc = scraper::Html::parse_document(html);
    let sel = scraper::Selector::parse(css).unwrap();
    doc.select(&sel)
        .map(|e| {
            let a = |n: &str| e.value().attr(n).unwrap_or_default().to_owned();
            (e.text().collect(), a("data-kind"), a("title"))
        })
        .collect()
}

#[tokio::test]
async fn a_signed_in_person_is_named_on_their_fixes_assignments_and_history_and_finds_their_own() {
    let Some(provider) = provider("attribution::a_signed_in_person") else {
        return;
    };
    provider.set_groups(&[("ana", &["ml-team"]), ("bo", &["ml-team"])]);
    let app = app_for(&provider.issuer).await;
    let ci = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let (_, mine) = upload(&app, &ci, &device_log("alpha"), Value::Null).await;
    let (_, theirs) = upload(&app, &ci, &device_log("beta"), Value::Null).await;
    let ana = person_browser(&app, &provider, "ana").await;
    let bo = person_browser(&app, &provider, "bo").await;
    let id_of = |login: &'static str| {
        let db = app.db.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT id FROM people WHERE subject = $1")
                .bind(login)
                .fetch_one(db.pool())
                .await
                .unwrap()
        }
    };
    let (ana_id, bo_id) = (id_of("ana").await, id_of("bo").await);

    // The groups page links the user's own groups.
    let list = page(&app, &ana.cookie, "/groups").await;
    assert_eq!(
        all_attrs(&list.body, "#mine-links a", "href"),
        ["/groups?mine=assigned", "/groups?mine=recorded"]
    );
    // Its assignee filter lists people by id, not token names.
    assert_eq!(
        texts(&list.body, "#group-filters select[name=assignee_id] option"),
        ["anyone or nobody", "Ana", "Bo"]
    );
    assert!(texts(&list.body, "#group-filters select[name=assignee]").is_empty());

    // A fix Ana records shows her name.
    record_fix(&app, &ana, mine, "pin the tensors to cuda:0").await;
    let g = page(&app, &ana.cookie, &format!("/groups/{mine}")).await;
    assert_eq!(
        who(&g.body, "ul.fixes .who"),
        [("Ana".into(), "person".into(), "Ana".into())]
    );
    let api = group(&app, &ci, mine).await;
    assert_eq!(
        (
            &api["fixes"][0]["author"],
            &api["fixes"][0]["author_kind"],
            &api["fixes"][0]["author_person_id"]
        ),
        (&json!("Ana"), &json!("person"), &json!(ana_id))
    );

    // The picker lists enabled people by name, valued by id; Ana assigns herself one group and
    // Bo the other.
    assert_eq!(
        picker(&app, &ana, mine).await,
        [
            (String::new(), "nobody".to_owned()),
            (ana_id.to_string(), "Ana".to_owned()),
            (bo_id.to_string(), "Bo".to_owned()),
        ]
    );
    post_triage(&app, &ana, mine, &[("assignee_id", &ana_id.to_string())]).await;
    post_triage(&app, &ana, theirs, &[("assignee_id", &bo_id.to_string())]).await;
    let g = page(&app, &ana.cookie, &format!("/groups/{mine}")).await;
    assert_eq!(texts(&g.body, "#assignee"), ["Ana"]);
    assert_eq!(
        attr(
            &g.body,
            "select[name=assignee_id] option[selected]",
            "value"
        ),
        Some(ana_id.to_string())
    );
    let stored: (String, Option<i64>) =
        sqlx::query_as("SELECT assignee, assignee_person_id FROM groups WHERE id = $1")
            .bind(mine)
            .fetch_one(app.db.pool())
            .await
            .unwrap();
    assert_eq!(stored, ("Ana".to_owned(), Some(ana_id)));

    // The history says who.
    let lines = texts(&g.body, "ol.history li");
    assert!(lines[0].contains("Ana assigned Ana"), "{lines:?}");
    assert_eq!(
        who(&g.body, "ol.history .who"),
        [("Ana".into(), "person".into(), "Ana".into())]
    );

    // "Assigned to me" and "recorded by me", for each of them.
    assert_eq!(listed(&app, &ana, "/groups?mine=assigned").await, [mine]);
    assert_eq!(listed(&app, &bo, "/groups?mine=assigned").await, [theirs]);
    assert_eq!(listed(&app, &ana, "/groups?mine=recorded").await, [mine]);
    assert!(listed(&app, &bo, "/groups?mine=recorded").await.is_empty());
    // The filter keeps to the form and its page links.
    let filtered = page(&app, &ana.cookie, "/groups?mine=assigned&per_page=1").await;
    assert_eq!(
        attr(
            &filtered.body,
            "#group-filters select[name=mine] option[selected]",
            "value"
        )
        .as_deref(),
        Some("assigned")
    );
    // And the assignee filter takes the person's id.
    let by_id = format!("/groups?assignee_id={bo_id}");
    assert_eq!(listed(&app, &ana, &by_id).await, [theirs]);

    // Over the API, the assignee is a person's id too; an unknown one is named in a 422.
    let res = patch(&app, &ci, theirs, json!({"assignee_id": ana_id})).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let answer = res.json();
    assert_eq!(
        (&answer["assignee"], &answer["assignee_id"]),
        (&json!("Ana"), &json!(ana_id))
    );
    assert_eq!(
        (
            &answer["history"][0]["actor"],
            &answer["history"][0]["actor_kind"],
            &answer["history"][0]["actor_person_id"]
        ),
        (&json!("ci"), &json!("token"), &Value::Null)
    );
    let unknown = patch(&app, &ci, theirs, json!({"assignee_id": 987_654})).await;
    assert_eq!(unknown.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(unknown.error_code(), "bad_triage");
    assert!(
        unknown.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("987654"),
        "{}",
        unknown.body
    );
    let list = app
        .get_as(&ci, &format!("/api/v1/groups?assignee_id={ana_id}"))
        .await
        .json();
    let ids: Vec<i64> = (list["groups"].as_array().unwrap().iter())
        .map(|g| g["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{list}");
    assert!(
        list["groups"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["assignee_id"] == json!(ana_id))
    );
    // The token is assigned nothing and recorded nothing itself.
    let none = app.get_as(&ci, "/api/v1/groups?mine=assigned").await.json();
    assert_eq!(none["total"], 0, "{none}");

    // A person removed later is still named on what they did.
    sqlx::query("DELETE FROM people WHERE id = $1")
        .bind(ana_id)
        .execute(app.db.pool())
        .await
        .unwrap();
    let g = page(&app, &bo.cookie, &format!("/groups/{mine}")).await;
    assert_eq!(
        who(&g.body, "ul.fixes .who"),
        [("Ana".into(), "person".into(), "Ana".into())]
    );
    assert_eq!(texts(&g.body, "#assignee"), ["Ana"]);
    assert!(texts(&g.body, "ol.history li")[0].contains("Ana assigned Ana"));
}

#[tokio::test]
async fn a_token_session_is_named_as_a_token_and_finds_its_own_groups_by_its_name() {
    let app = TestApp::spawn().await;
    let admin = app.token("ci", &[Scope::Admin]).await;
    let (_, fixed) = upload(&app, &admin, &device_log("gamma"), Value::Null).await;
    let (_, assigned) = upload(&app, &admin, &device_log("delta"), Value::Null).await;
    let (_, older) = upload(&app, &admin, &device_log("epsilon"), Value::Null).await;
    let b = sign_in(&app, &admin).await;

    // Without people, the picker offers token names, as before.
    let g = page(&app, &b.cookie, &format!("/groups/{assigned}")).await;
    assert!(texts(&g.body, "form.triage-form select[name=assignee] option").contains(&"ci".into()));
    assert!(texts(&g.body, "select[name=assignee_id]").is_empty());
    post_triage(&app, &b, assigned, &[("assignee", "ci")]).await;
    record_fix(&app, &b, fixed, "upgrade the driver").await;
    // A fix stored before actors were typed, under the token's name.
    sqlx::query("INSERT INTO fixes (group_id, summary, author) VALUES ($1, 'old fix', 'ci')")
        .bind(older)
        .execute(app.db.pool())
        .await
        .unwrap();

    let g = page(&app, &b.cookie, &format!("/groups/{assigned}")).await;
    assert_eq!(
        who(&g.body, "ol.history .who"),
        [("ci".into(), "token".into(), "token ci".into())]
    );
    let g = page(&app, &b.cookie, &format!("/groups/{fixed}")).await;
    assert_eq!(
        who(&g.body, "ul.fixes .who"),
        [("ci".into(), "token".into(), "token ci".into())]
    );
    let g = page(&app, &b.cookie, &format!("/groups/{older}")).await;
    assert_eq!(
        who(&g.body, "ul.fixes .who"),
        [("ci".into(), String::new(), "ci".into())],
        "an old fix shows its name as stored"
    );

    assert_eq!(listed(&app, &b, "/groups?mine=assigned").await, [assigned]);
    let mut recorded = listed(&app, &b, "/groups?mine=recorded").await;
    recorded.sort_unstable();
    assert_eq!(recorded, [fixed, older]);
    // The API answers the same for the token.
    let api = app.get_as(&admin, "/api/v1/groups?mine=assigned").await;
    assert_eq!(api.status, StatusCode::OK, "{}", api.body);
    assert_eq!(api.json()["groups"][0]["id"], json!(assigned));
    assert_eq!(api.json()["groups"][0]["assignee_id"], Value::Null);
    // Another token of the same name did not record those fixes (they are the first one's by
    // id), but is assigned what is assigned to the name.
    let other = app.token("ci", &[Scope::Read]).await;
    let theirs = app
        .get_as(&other, "/api/v1/groups?mine=recorded")
        .await
        .json();
    let ids: Vec<&Value> = (theirs["groups"].as_array().unwrap().iter())
        .map(|g| &g["id"])
        .collect();
    assert_eq!(
        ids,
        [&json!(older)],
        "only the untyped old fix goes by name"
    );
    assert_eq!(
        app.get_as(&other, "/api/v1/groups?mine=assigned")
            .await
            .json()["total"],
        1
    );
    // Bad filters are refused with the reason.
    for bad in ["mine=theirs", "assignee_id=abc", "assignee_id=0"] {
        let res = app.get_as(&admin, &format!("/api/v1/groups?{bad}")).await;
        assert_eq!(res.status, StatusCode::BAD_REQUEST, "{bad}: {}", res.body);
        assert_eq!(res.error_code(), "bad_query");
    }
    let res = page(&app, &b.cookie, "/groups?mine=theirs").await;
    assert_eq!(res.status, StatusCode::BAD_REQUEST);
    assert!(
        res.body.contains("expected assigned or recorded"),
        "{}",
        res.body
    );
}

#[tokio::test]
async fn rule_edits_reclassification_and_retention_name_a_token_as_a_token() {
    let app = TestApp::spawn().await;
    let admin = app.token("root", &[Scope::Admin]).await;
    let b = sign_in(&app, &admin).await;
    let rule = json!({
        "id": "team.attrib",
        "category": "library_error",
        "title": "Attribution test",
        "pattern": "AttribError: \\d+",
        "examples": ["AttribError: 5"],
    });
    let res = app.post_json(&admin, "/api/v1/rules", &rule).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let res = post_form(
        &app,
        &b,
        "/rules/team.attrib/enabled",
        &[("csrf", &b.csrf), ("enabled", "false")],
        None,
    )
    .await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    let res = post_form(&app, &b, "/rules/reclassify", &[("csrf", &b.csrf)], None).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);

    let rules = page(&app, &b.cookie, "/rules/team.attrib").await;
    assert_eq!(
        who(&rules.body, ".history .actor .who"),
        [
            ("root".into(), "token".into(), "token root".into()),
            ("root".into(), "token".into(), "token root".into()),
        ]
    );
    let kinds: Vec<(String, Option<String>, Option<i64>)> =
        sqlx::query_as("SELECT actor, actor_kind, actor_token_id FROM rule_history ORDER BY id")
            .fetch_all(app.db.pool())
            .await
            .unwrap();
    let token_id: i64 = sqlx::query_scalar("SELECT id FROM tokens WHERE name = 'root'")
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    let want = ("root".to_owned(), Some("token".to_owned()), Some(token_id));
    assert_eq!(kinds, [want.clone(), want]);
    let run: (String, Option<String>, Option<i64>) = sqlx::query_as(
        "SELECT started_by, started_by_kind, started_by_token_id FROM reclassify_runs",
    )
    .fetch_one(app.db.pool())
    .await
    .unwrap();
    assert_eq!(
        run,
        ("root".to_owned(), Some("token".to_owned()), Some(token_id))
    );
    // A project's retention, set over the API, records the token too.
    let req = axum::http::Request::put("/api/v1/projects/vision/retention")
        .header("authorization", format!("Bearer {admin}"))
        .header("content-type", "application/json")
        .body(axum::body::Body::from(r#"{"log_days": 30}"#))
        .unwrap();
    let res = app.send(req).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let set: (String, Option<String>, Option<i64>) = sqlx::query_as(
        "SELECT updated_by, updated_by_kind, updated_by_token_id FROM project_retention",
    )
    .fetch_one(app.db.pool())
    .await
    .unwrap();
    assert_eq!(
        set,
        ("root".to_owned(), Some("token".to_owned()), Some(token_id))
    );

    let list = page(&app, &b.cookie, "/rules").await;
    assert!(
        who(&list.body, "tr.run .who").contains(&(
            "root".into(),
            "token".into(),
            "token root".into()
        )),
        "{}",
        list.body
    );
}
