//! Team rules across processes: another replica follows a save, a restarted `serve` loads the
//! stored rules, and `rules export` / `rules import` round-trip them through a file.

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use gpu_triage::auth::Scope;
use gpu_triage::web::AppState;
use serde_json::{Value, json};

use super::{KERNEL_LOG, kernel_rule, send_json};
use crate::support::{TestApp, binary, database_url, fresh_db};

#[tokio::test]
async fn another_replica_picks_up_a_saved_rule_without_a_restart() {
    let app = TestApp::spawn().await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let ruleset = std::sync::Arc::new(gpu_triage::rules::Ruleset::builtin().unwrap());
    let other = AppState::new(app.db.clone(), "http://replica.test", ruleset);
    let watcher = gpu_triage::app::team_rules::watch(app.db.clone(), other.ruleset.clone());
    let res = app.post_json(&admin, "/api/v1/rules", &kernel_rule()).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut category = String::new();
    while Instant::now() < deadline {
        let c = other.ruleset.current().classify_bytes("-", KERNEL_LOG);
        category = c.category.to_string();
        if category == "library_error" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    watcher.abort();
    assert_eq!(category, "library_error");
}

#[tokio::test]
async fn import_validates_everything_and_export_round_trips() {
    let app = TestApp::spawn().await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let res = app.post_json(&admin, "/api/v1/rules", &kernel_rule()).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let builtin_id = "cuda.assert.kernel";
    let res = send_json(
        &app,
        "PUT",
        &admin,
        &format!("/api/v1/rules/{builtin_id}"),
        &json!({"enabled": false}),
    )
    .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    let name: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("team.toml");
    let out = binary()
        .args(["rules", "export", "--out"])
        .arg(&file)
        .env("DATABASE_URL", database_url(&name))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("[[rule]]") && text.contains("id = \"team.mykernel\""),
        "{text}"
    );
    assert!(
        text.contains("disabled = [\"cuda.assert.kernel\"]"),
        "{text}"
    );

    let (other_db, _) = fresh_db().await;
    let other: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(other_db.pool())
        .await
        .unwrap();
    // A broken file is refused whole: nothing is written.
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, format!("{text}\n[[rule]]\nid = \"team.bad\"\ncategory = \"unknown\"\ntitle = \"B\"\npattern = \"a{{1000}}{{1000}}\"\nexamples = [\"a\"]\n")).unwrap();
    let out = binary()
        .args(["rules", "import"])
        .arg(&bad)
        .env("DATABASE_URL", database_url(&other))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rule team.bad") && err.contains("size limit"),
        "{err}"
    );
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM team_rules")
        .fetch_one(other_db.pool())
        .await
        .unwrap();
    assert_eq!(stored, 0);

    let out = binary()
        .args(["rules", "import"])
        .arg(&file)
        .env("DATABASE_URL", database_url(&other))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = binary()
        .args(["rules", "export"])
        .env("DATABASE_URL", database_url(&other))
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), text);
    let rows: Vec<(String, bool)> =
        sqlx::query_as("SELECT rule_id, enabled FROM team_rules ORDER BY rule_id")
            .fetch_all(other_db.pool())
            .await
            .unwrap();
    assert_eq!(
        rows,
        [
            (builtin_id.to_owned(), false),
            ("team.mykernel".to_owned(), true)
        ]
    );
    let actions: Vec<String> = sqlx::query_scalar("SELECT action FROM rule_history")
        .fetch_all(other_db.pool())
        .await
        .unwrap();
    assert_eq!(actions, ["import", "import"]);
}

/// A minimal HTTP/1.1 POST over a real socket: (status, body).
fn http_post(port: u16, path: &str, token: &str, body: &[u8]) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    stream.write_all(body).unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let status = raw.split(' ').nth(1).unwrap().parse().unwrap();
    (status, raw.split_once("\r\n\r\n").unwrap().1.to_owned())
}

#[tokio::test]
async fn serve_loads_the_stored_team_rules_at_start() {
    let app = TestApp::spawn().await;
    let admin = app.token("admin", &[Scope::Admin]).await;
    let res = app.post_json(&admin, "/api/v1/rules", &kernel_rule()).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let name: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    let url = database_url(&name);
    let (_server, port) = tokio::task::spawn_blocking(move || crate::support::spawn_server(&url))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut body = String::new();
    while Instant::now() < deadline {
        let admin = admin.clone();
        let (status, b) = tokio::task::spawn_blocking(move || {
            http_post(port, "/api/v1/classify", &admin, KERNEL_LOG)
        })
        .await
        .unwrap();
        assert_eq!(status, 200, "{b}");
        body = b;
        if body.contains("team.mykernel") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let c: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(c["category"], "library_error", "{body}");
    assert_eq!(c["root_cause"]["rule"], "team.mykernel");
}
