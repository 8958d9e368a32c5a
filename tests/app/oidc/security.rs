//! What the portal refuses from a provider that misbehaves (issue 31 item 5): an ID token that
//! has expired and one issued to another client (both real tokens, signed with the provider's
//! keys by its own ID token model; see `tests/oidc/provider.mjs`), and an issuer that does not
//! match the provider's discovery document at `serve` start (logged; token sign-in works on).

use std::io::BufRead;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;

use super::{CLIENT_ID, CLIENT_SECRET, app_for, provider, sign_in, signed_in};
use crate::support::{
    KillOnDrop, binary, create_token, database_url, free_port, fresh_database_name, http_get,
    wait_for_status, wait_until,
};

#[tokio::test]
async fn an_expired_id_token_is_refused() {
    let Some(provider) = provider("oidc::security::expired") else {
        return;
    };
    provider.set_groups(&[("eve", &["triage-admins"])]);
    let app = app_for(&provider.issuer).await;
    // Issued an hour past its expiry: far beyond the 60 s of clock skew allowed.
    provider.set_quirk("eve", "expired_id_token");
    let mut jar = super::Jar::default();
    let res = sign_in(&app, &provider, &mut jar, "eve").await;
    assert_eq!(res.status, StatusCode::BAD_REQUEST, "{}", res.body);
    let body = res.body.to_lowercase();
    assert!(body.contains("the id token was refused"), "{}", res.body);
    assert!(body.contains("expired"), "{}", res.body);
    assert!(jar.get("gt_session").is_none());
    assert_eq!(app.count("people").await, 0);
    assert_eq!(app.count("sessions").await, 0);

    // The same person with a token issued as it should be signs in: the refusal was the expiry.
    provider.set_quirk("nobody", "expired_id_token");
    signed_in(&app, &provider, "eve").await;
}

#[tokio::test]
async fn an_id_token_issued_to_another_client_is_refused() {
    let Some(provider) = provider("oidc::security::audience") else {
        return;
    };
    provider.set_groups(&[("mal", &["triage-admins"])]);
    let app = app_for(&provider.issuer).await;
    // The code is ours and redeemed by us, but the ID token in the answer names the
    // provider's other client as its audience (a token substitution).
    provider.set_quirk("mal", "other_audience");
    let mut jar = super::Jar::default();
    let res = sign_in(&app, &provider, &mut jar, "mal").await;
    assert_eq!(res.status, StatusCode::BAD_REQUEST, "{}", res.body);
    let body = res.body.to_lowercase();
    assert!(body.contains("the id token was refused"), "{}", res.body);
    assert!(body.contains("audience"), "{}", res.body);
    assert!(
        res.body.contains(&format!("{CLIENT_ID}-other")),
        "{}",
        res.body
    );
    assert!(jar.get("gt_session").is_none());
    assert_eq!(app.count("people").await, 0);
}

/// Everything `child` writes to stderr, collected as it comes.
fn collect_stderr(child: &mut std::process::Child) -> Arc<Mutex<String>> {
    let log = Arc::new(Mutex::new(String::new()));
    let stderr = child.stderr.take().expect("stderr piped");
    let sink = log.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let mut log = sink.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
    log
}

#[test]
fn a_misconfigured_issuer_is_logged_at_serve_start_and_token_sign_in_keeps_working() {
    let Some(provider) = provider("oidc::security::misconfigured_issuer") else {
        return;
    };
    let url = database_url(&fresh_database_name());
    let token = create_token(&url, "admin", "first-admin");
    // A trailing slash: the provider's discovery document answers, but names its issuer
    // without one, and issuers compare exactly.
    let wrong = format!("{}/", provider.issuer);
    let port = free_port();
    let mut child = binary()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--oidc-issuer", &wrong, "--oidc-client-id", CLIENT_ID])
        .args(["--oidc-client-secret", CLIENT_SECRET])
        .args(["--oidc-admin-groups", "triage-admins"])
        .env("DATABASE_URL", &url)
        .env("GPU_TRIAGE_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let log = collect_stderr(&mut child);
    let _server = KillOnDrop(child);
    assert!(wait_for_status(port, "/readyz", 200, 60), "server ready");
    wait_until(
        Duration::from_secs(30),
        "serve to log the misconfigured issuer",
        || log.lock().unwrap().contains("issuer misconfigured"),
    );
    let logged = log.lock().unwrap().clone();
    let line = logged
        .lines()
        .find(|l| l.contains("issuer misconfigured"))
        .unwrap();
    assert!(line.contains("ERROR"), "{line}");
    assert!(
        line.contains("unexpected issuer"),
        "names the cause: {line}"
    );
    assert!(line.contains(&wrong), "names the issuer: {line}");

    // Token sign-in works; provider sign-in says why it cannot, and offers the token form.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .max_redirects(0)
        .http_status_as_error(false)
        .build()
        .into();
    let base = format!("http://127.0.0.1:{port}");
    let res = agent
        .post(format!("{base}/login"))
        .send_form([("token", token.as_str())])
        .unwrap();
    assert_eq!(res.status().as_u16(), 303);
    let cookie = res
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with("gt_session="))
        .expect("a session cookie")
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let mut home = agent
        .get(format!("{base}/people"))
        .header("cookie", &cookie)
        .call()
        .unwrap();
    assert_eq!(home.status().as_u16(), 200);
    let body = home.body_mut().read_to_string().unwrap();
    assert!(body.contains("first-admin"), "signed in with the token");
    let (status, body) = http_get(port, "/login/oidc").unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("unexpected issuer"), "{body}");
    assert!(body.contains("name=\"token\""), "{body}");
}
