//! Triage changes under concurrency (issue 28 item 2, SECURITY.md item 19): state changes,
//! assignments and the regression rule on upload, fired side by side at one group, all answer
//! and leave a history that is a chain: each entry's "from" is the previous entry's "to", and
//! the last "to" is what the group shows.

use std::sync::Arc;

use axum::http::StatusCode;
use gpu_triage::auth::Scope;
use gpu_triage::storage::Db;
use serde_json::{Value, json};

use super::{device_log, group, history, patch, upload};
use crate::support::{TestApp, fresh_db};

/// Token names that change the group; each is also a name the group can be assigned to.
const PEOPLE: [&str; 5] = ["alice", "bob", "carol", "dave", "erin"];

/// The application with a pool large enough that the changes meet in the database (the test
/// pool of 4 would queue most of them before they reach it).
async fn app_with_wide_pool() -> Arc<TestApp> {
    let (narrow, options) = fresh_db().await;
    narrow.close().await;
    Arc::new(TestApp::on(Db::connect_lazy(options, 24)))
}

/// One token per person, with the scopes to upload, read and change groups.
async fn people(app: &TestApp) -> Vec<String> {
    let mut tokens = Vec::new();
    for name in PEOPLE {
        tokens.push(app.token(name, &[Scope::Ingest, Scope::Read]).await);
    }
    tokens
}

/// The state a change asks for, by its number: open, resolved (in a version, or in nothing)
/// and ignored in turn, so that most changes change something.
fn state_change(i: usize) -> Value {
    match i % 4 {
        0 => json!({"state": "resolved", "resolved_in": format!("2.{i}")}),
        1 => json!({"state": "open"}),
        2 => json!({"state": "resolved"}),
        _ => json!({"state": "ignored"}),
    }
}

/// Checks that group `g`'s history (newest first, as the API lists it) is a chain for states
/// and for assignees, starting from a new group's open and unassigned, and ending where the
/// group is; returns the number of state entries.
fn assert_chained(g: &Value) -> usize {
    let entries = history(g);
    assert!(entries.len() < 100, "the whole history is shown");
    let (mut state, mut assignee) = ("open".to_owned(), String::new());
    let (mut states, mut broken) = (0, Vec::new());
    let mut log = Vec::new();
    for (actor, action, from, to, _) in entries.iter().rev() {
        log.push(format!("{actor}: {action} {from:?} -> {to:?}"));
        let held = match action.as_str() {
            "state" => {
                states += 1;
                &mut state
            }
            "assignee" => &mut assignee,
            _ => continue,
        };
        if from != held {
            broken.push(log.len() - 1);
        }
        held.clone_from(to);
    }
    assert!(
        broken.is_empty(),
        "{} of {} entries do not follow the one before them (entries {broken:?}), oldest \
         first:\n{}",
        broken.len(),
        log.len(),
        log.join("\n")
    );
    assert_eq!(g["state"], json!(state), "{log:#?}");
    assert_eq!(g["assignee"], json!(assignee), "{log:#?}");
    states
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_state_and_assignee_changes_leave_a_chained_history() {
    let app = app_with_wide_pool().await;
    let tokens = people(&app).await;
    let (_, id) = upload(&app, &tokens[0], &device_log("mike"), Value::Null).await;
    let mut tasks = Vec::new();
    for i in 0..50 {
        let (app, token) = (app.clone(), tokens[i % tokens.len()].clone());
        let mut body = state_change(i);
        if i % 3 == 0 {
            body["assignee"] = json!(PEOPLE[(i / 3) % PEOPLE.len()]);
        }
        tasks.push(tokio::spawn(async move {
            let res = patch(&app, &token, id, body.clone()).await;
            (body, res.status, res.body)
        }));
    }
    for task in tasks {
        let (body, status, answer) = task.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}: {answer}");
    }
    let g = group(&app, &tokens[0], id).await;
    let states = assert_chained(&g);
    assert!(
        states > 1,
        "the changes changed the state: {:#?}",
        history(&g)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn uploads_that_reopen_a_group_during_state_changes_leave_a_chained_history() {
    let app = app_with_wide_pool().await;
    let tokens = people(&app).await;
    let (_, id) = upload(&app, &tokens[0], &device_log("november"), Value::Null).await;
    let mut changes = Vec::new();
    let mut uploads = Vec::new();
    for i in 0..50 {
        let (app, token) = (app.clone(), tokens[i % tokens.len()].clone());
        if i % 5 == 4 {
            uploads.push(tokio::spawn(async move {
                upload(&app, &token, &device_log("november"), Value::Null)
                    .await
                    .1
            }));
        } else {
            // No fix named: a report that lands after the resolution regresses it.
            let body = match i % 3 {
                0 => json!({"state": "resolved"}),
                1 => json!({"state": "open"}),
                _ => json!({"state": "ignored"}),
            };
            changes.push(tokio::spawn(async move {
                let res = patch(&app, &token, id, body.clone()).await;
                (body, res.status, res.body)
            }));
        }
    }
    for task in changes {
        let (body, status, answer) = task.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}: {answer}");
    }
    for task in uploads {
        assert_eq!(task.await.unwrap(), id, "every upload lands in the group");
    }
    let g = group(&app, &tokens[0], id).await;
    assert_eq!(g["count"], 11);
    assert!(assert_chained(&g) > 1, "{:#?}", history(&g));
}
