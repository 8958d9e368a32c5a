//! Sign-in through a real OpenID provider (panva's oidc-provider, started from
//! `tests/oidc/provider.mjs` on loopback): the authorize → login → consent → callback
//! redirects driven over HTTP with a cookie-keeping client, against the in-process app.
//! Skipped (with a note) only where the provider is not installed and not required.
//! Admins managing people, people's own tokens and the refusals of a misbehaving provider are
//! in the submodules; the full flow in Chromium is in `browser_oidc`. The provider, the sign-in
//! and [`person_browser`] are shared with the tests of what signed-in people do
//! (`attribution`).

mod claims;
mod people;
mod security;
mod starts;
mod tokens;

use std::collections::HashMap;
use std::io::BufRead;
use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpu_triage::app::oidc::{DefaultRole, MAX_PENDING, OidcSettings};
use gpu_triage::roles::{RoleMap, parse_groups};
use gpu_triage::web::AppState;

use crate::browse::Browser;
use crate::support::{KillOnDrop, TestApp, TestResponse};

pub(crate) const CLIENT_ID: &str = "gpu-triage";
pub(crate) const CLIENT_SECRET: &str = "test-client-secret";
const PUBLIC_URL: &str = "http://gpu-triage.test";

/// A running provider.
pub(crate) struct Provider {
    _child: KillOnDrop,
    /// The provider's issuer URL.
    pub(crate) issuer: String,
    groups_file: PathBuf,
    quirks_file: PathBuf,
    claims_file: PathBuf,
    _dir: tempfile::TempDir,
}

/// How the provider is started.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ProviderOptions {
    /// oidc-provider's default: the scopes' claims (email, name, groups) only in the userinfo
    /// answer, not in the ID token.
    pub(crate) claims_at_userinfo_only: bool,
}

impl Provider {
    /// Makes the provider misbehave when it issues `login`'s next ID tokens (see
    /// `tests/oidc/provider.mjs`: `expired_id_token`, `other_audience`).
    fn set_quirk(&self, login: &str, quirk: &str) {
        let map: HashMap<&str, &str> = [(login, quirk)].into_iter().collect();
        std::fs::write(&self.quirks_file, serde_json::to_vec(&map).unwrap()).unwrap();
    }

    /// Replaces claims of logins from their next sign-in on (`null` leaves a claim out).
    pub(crate) fn set_claims(&self, claims: &[(&str, serde_json::Value)]) {
        let map: serde_json::Map<String, serde_json::Value> = claims
            .iter()
            .map(|(login, c)| ((*login).to_owned(), c.clone()))
            .collect();
        std::fs::write(&self.claims_file, serde_json::to_vec(&map).unwrap()).unwrap();
    }

    /// Sets the groups each login gets from its next sign-in on.
    pub(crate) fn set_groups(&self, groups: &[(&str, &[&str])]) {
        let map: HashMap<&str, &[&str]> = groups.iter().copied().collect();
        std::fs::write(&self.groups_file, serde_json::to_vec(&map).unwrap()).unwrap();
    }
}

/// Starts the provider, or `None` (printing SKIPPED) where it is not installed and not
/// required (`GPU_TRIAGE_REQUIRE_OIDC_PROVIDER`, set by `.ci/run`).
pub(crate) fn provider(test: &str) -> Option<Provider> {
    provider_for(test, &format!("{PUBLIC_URL}/login/oidc/callback"))
}

/// [`provider`] for a portal whose callback is `redirect_uri`.
pub(crate) fn provider_for(test: &str, redirect_uri: &str) -> Option<Provider> {
    provider_with(test, redirect_uri, ProviderOptions::default())
}

/// [`provider_for`], started with `options`.
pub(crate) fn provider_with(
    test: &str,
    redirect_uri: &str,
    options: ProviderOptions,
) -> Option<Provider> {
    let dir = std::env::var_os("GPU_TRIAGE_OIDC_PROVIDER_DIR").map(PathBuf::from);
    let installed = dir
        .as_ref()
        .filter(|d| d.join("node_modules/oidc-provider/package.json").exists());
    let Some(dir) = installed else {
        assert!(
            std::env::var_os("GPU_TRIAGE_REQUIRE_OIDC_PROVIDER").is_none(),
            "GPU_TRIAGE_OIDC_PROVIDER_DIR must name an oidc-provider install here (.ci/run installs it)"
        );
        eprintln!("SKIPPED {test}: GPU_TRIAGE_OIDC_PROVIDER_DIR is not set (.ci/run sets it)");
        return None;
    };
    let tmp = tempfile::tempdir().unwrap();
    let groups_file = tmp.path().join("groups.json");
    std::fs::write(&groups_file, "{}").unwrap();
    let quirks_file = tmp.path().join("quirks.json");
    std::fs::write(&quirks_file, "{}").unwrap();
    let claims_file = tmp.path().join("claims.json");
    std::fs::write(&claims_file, "{}").unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/oidc/provider.mjs");
    let mut child = std::process::Command::new("node")
        .arg(script)
        .env("OIDC_PROVIDER_DIR", dir)
        .env("OIDC_PORT", "0")
        .env("OIDC_CLIENT_ID", CLIENT_ID)
        .env("OIDC_CLIENT_SECRET", CLIENT_SECRET)
        .env("OIDC_REDIRECT_URI", redirect_uri)
        .env("OIDC_GROUPS_FILE", &groups_file)
        .env("OIDC_QUIRKS_FILE", &quirks_file)
        .env("OIDC_CLAIMS_FILE", &claims_file)
        .env(
            "OIDC_CONFORM_ID_TOKEN_CLAIMS",
            if options.claims_at_userinfo_only {
                "1"
            } else {
                "0"
            },
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("node runs");
    let stdout = child.stdout.take().unwrap();
    let child = KillOnDrop(child);
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .unwrap();
    let issuer = line
        .trim()
        .strip_prefix("listening ")
        .unwrap_or_else(|| panic!("the provider did not start: {line:?}"))
        .to_owned();
    Some(Provider {
        _child: child,
        issuer,
        groups_file,
        quirks_file,
        claims_file,
        _dir: tmp,
    })
}

fn settings(issuer: &str) -> OidcSettings {
    OidcSettings {
        issuer: issuer.to_owned(),
        client_id: CLIENT_ID.to_owned(),
        client_secret: CLIENT_SECRET.to_owned(),
        scopes: parse_groups("email,profile,groups"),
        roles: RoleMap {
            admin: parse_groups("triage-admins"),
            member: parse_groups("ml-team"),
            viewer: parse_groups("everyone"),
        },
        default_role: DefaultRole::default(),
        provider_name: "Test IdP".to_owned(),
        redirect_url: format!("{PUBLIC_URL}/login/oidc/callback"),
        max_pending: MAX_PENDING,
    }
}

/// An in-process app whose portal signs people in through the provider at `issuer`.
pub(crate) async fn app_for(issuer: &str) -> TestApp {
    app_with(issuer, |_, _| {}).await
}

/// [`app_for`] with its sign-in settings and state adjusted.
pub(crate) async fn app_with(
    issuer: &str,
    adjust: impl FnOnce(&mut OidcSettings, &mut AppState),
) -> TestApp {
    let mut oidc = settings(issuer);
    TestApp::spawn_with(move |mut state| {
        adjust(&mut oidc, &mut state);
        state.oidc = Some(Arc::new(oidc));
        state
    })
    .await
}

/// A browser's cookie jar, one for the app and one for the provider.
#[derive(Default)]
struct Jar(HashMap<String, String>);

impl Jar {
    fn keep<'a>(&mut self, set_cookies: impl Iterator<Item = &'a str>) {
        for c in set_cookies {
            let pair = c.split(';').next().unwrap_or("");
            if let Some((k, v)) = pair.split_once('=') {
                if v.is_empty() {
                    self.0.remove(k.trim());
                } else {
                    self.0.insert(k.trim().to_owned(), v.to_owned());
                }
            }
        }
    }
    fn header(&self) -> String {
        let pairs: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
        pairs.join("; ")
    }
    fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }
}

/// `GET path` on the app with the jar's cookies; keeps what it sets.
async fn app_get(app: &TestApp, jar: &mut Jar, path: &str) -> TestResponse {
    let req = Request::get(path)
        .header("cookie", jar.header())
        .body(Body::empty())
        .unwrap();
    let res = app.send(req).await;
    jar.keep(
        res.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok()),
    );
    res
}

fn location(res: &TestResponse) -> String {
    res.headers
        .get("location")
        .unwrap_or_else(|| panic!("no Location ({}): {}", res.status, res.body))
        .to_str()
        .unwrap()
        .to_owned()
}

/// Plays the person at the provider: from the authorize URL through the development login
/// (as `login`) and consent, to the redirect back to the app; returns that URL.
fn at_provider(issuer: &str, authorize_url: &str, login: &str) -> String {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .max_redirects(0)
        .http_status_as_error(false)
        .build()
        .into();
    let mut jar = Jar::default();
    let absolute = |l: &str| {
        if l.starts_with('/') {
            format!("{issuer}{l}")
        } else {
            l.to_owned()
        }
    };
    let mut next = authorize_url.to_owned();
    let mut logged_in = false;
    for _ in 0..12 {
        if next.starts_with(PUBLIC_URL) {
            return next;
        }
        let res = if let Some(uid_path) = next.strip_prefix(&format!("{issuer}/interaction/")) {
            let form: &[(&str, &str)] = if logged_in {
                &[("prompt", "consent")]
            } else {
                &[("prompt", "login"), ("login", login), ("password", "any")]
            };
            logged_in = true;
            agent
                .post(format!("{issuer}/interaction/{uid_path}"))
                .header("cookie", jar.header())
                .send_form(form.iter().copied())
                .unwrap()
        } else {
            agent
                .get(&next)
                .header("cookie", jar.header())
                .call()
                .unwrap()
        };
        jar.keep(
            res.headers()
                .get_all("set-cookie")
                .iter()
                .filter_map(|v| v.to_str().ok()),
        );
        let status = res.status().as_u16();
        let loc = res
            .headers()
            .get("location")
            .map(|l| l.to_str().unwrap().to_owned());
        match loc {
            Some(l) if (300..400).contains(&status) => next = absolute(&l),
            _ => {
                let body = res.into_body().read_to_string().unwrap_or_default();
                panic!("the provider stopped at {next} with {status}: {body}");
            }
        }
    }
    panic!("too many redirects at the provider");
}

/// Starts a sign-in at the app; the provider's authorize URL.
async fn start(app: &TestApp, jar: &mut Jar, next: &str) -> String {
    let res = app_get(app, jar, &format!("/login/oidc{next}")).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    assert!(
        jar.get("gt_oidc").is_some(),
        "the pending sign-in cookie is set"
    );
    location(&res)
}

/// The full sign-in as `login`; the callback's response.
async fn sign_in(app: &TestApp, provider: &Provider, jar: &mut Jar, login: &str) -> TestResponse {
    let authorize = start(app, jar, "").await;
    let back = at_provider(&provider.issuer, &authorize, login);
    app_get(app, jar, back.strip_prefix(PUBLIC_URL).unwrap()).await
}

/// `login` signed in through the provider, as a portal browser (session cookie and CSRF token)
/// for the `browse` helpers.
pub(crate) async fn person_browser(app: &TestApp, provider: &Provider, login: &str) -> Browser {
    let mut jar = Jar::default();
    let res = sign_in(app, provider, &mut jar, login).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    let session = jar.get("gt_session").expect("a session cookie");
    let cookie = format!("gt_session={session}");
    let home = crate::browse::page(app, &cookie, "/").await;
    let csrf = crate::browse::attr(&home.body, "input[name=csrf]", "value").expect("csrf field");
    Browser { cookie, csrf }
}

fn header_user(body: &str) -> String {
    let doc = scraper::Html::parse_document(body);
    let sel = scraper::Selector::parse("header").unwrap();
    doc.select(&sel)
        .next()
        .map(|h| h.text().collect::<String>())
        .unwrap_or_default()
}

/// Signs `login` in with a fresh browser and checks a session was opened; its jar.
async fn signed_in(app: &TestApp, provider: &Provider, login: &str) -> Jar {
    let mut jar = Jar::default();
    let res = sign_in(app, provider, &mut jar, login).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{login}: {}", res.body);
    assert!(jar.get("gt_session").is_some(), "{login} has a session");
    jar
}

/// Posts a portal form as the jar's session: its CSRF token (read from `/`), then `fields`.
async fn app_post(
    app: &TestApp,
    jar: &mut Jar,
    path: &str,
    fields: &[(&str, &str)],
) -> TestResponse {
    let home = app_get(app, jar, "/").await;
    let csrf = crate::browse::attr(&home.body, "input[name=csrf]", "value")
        .unwrap_or_else(|| panic!("no CSRF field: not signed in? {}", home.body));
    let mut all = vec![("csrf", csrf.as_str())];
    all.extend_from_slice(fields);
    let req = Request::post(path)
        .header("cookie", jar.header())
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(serde_urlencoded::to_string(&all).unwrap()))
        .unwrap();
    let res = app.send(req).await;
    jar.keep(
        res.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok()),
    );
    res
}

/// The stored id of the person the provider knows as `subject`.
async fn person_id(app: &TestApp, subject: &str) -> i64 {
    sqlx::query_scalar("SELECT id FROM people WHERE subject = $1")
        .bind(subject)
        .fetch_one(app.db.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_person_signs_in_and_their_role_follows_their_groups_at_every_sign_in() {
    let Some(provider) = provider("oidc::a_person_signs_in") else {
        return;
    };
    provider.set_groups(&[("ana", &["ml-team", "unrelated"])]);
    let app = app_for(&provider.issuer).await;

    let login_page = app.get("/login").await;
    assert!(
        login_page.body.contains("Sign in with Test IdP"),
        "{}",
        login_page.body
    );
    assert!(login_page.body.contains("href=\"/login/oidc\""));

    let mut jar = Jar::default();
    let authorize = start(&app, &mut jar, "?next=/groups").await;
    assert!(
        authorize.starts_with(&format!("{}/auth?", provider.issuer)),
        "{authorize}"
    );
    for param in [
        "code_challenge_method=S256",
        "nonce=",
        "state=",
        "scope=openid",
    ] {
        assert!(authorize.contains(param), "{param} in {authorize}");
    }
    let back = at_provider(&provider.issuer, &authorize, "ana");
    let res = app_get(&app, &mut jar, back.strip_prefix(PUBLIC_URL).unwrap()).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    assert_eq!(location(&res), "/groups", "lands on the page asked for");
    assert!(jar.get("gt_session").is_some());
    assert!(
        jar.get("gt_oidc").is_none(),
        "the pending cookie is cleared"
    );

    let home = app_get(&app, &mut jar, "/").await;
    assert_eq!(home.status, StatusCode::OK);
    assert!(
        header_user(&home.body).contains("Ana"),
        "{}",
        header_user(&home.body)
    );
    // A member reads, uploads and keeps tokens of their own, but is no admin.
    assert_eq!(
        app_get(&app, &mut jar, "/people").await.status,
        StatusCode::FORBIDDEN
    );
    let (role, email): (String, String) =
        sqlx::query_as("SELECT role, email FROM people WHERE subject = 'ana'")
            .fetch_one(app.db.pool())
            .await
            .unwrap();
    assert_eq!(
        (role.as_str(), email.as_str()),
        ("member", "ana@example.test")
    );

    // Made an admin at the provider: the next sign-in says so.
    provider.set_groups(&[("ana", &["triage-admins", "everyone"])]);
    let mut jar = Jar::default();
    let res = sign_in(&app, &provider, &mut jar, "ana").await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    assert_eq!(
        app_get(&app, &mut jar, "/people").await.status,
        StatusCode::OK
    );
    assert_eq!(
        app.count("people").await,
        1,
        "the same person, not a second one"
    );

    // Sign-out ends the session.
    let csrf: String = {
        let page = app_get(&app, &mut jar, "/").await;
        let doc = scraper::Html::parse_document(&page.body);
        let sel = scraper::Selector::parse("form.logout input[name=csrf]").unwrap();
        doc.select(&sel)
            .next()
            .unwrap()
            .attr("value")
            .unwrap()
            .to_owned()
    };
    let cookie = jar.header();
    let req = Request::post("/logout")
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(format!("csrf={csrf}")))
        .unwrap();
    let out = app.send(req).await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    let req = Request::get("/people")
        .header("cookie", &cookie)
        .body(Body::empty())
        .unwrap();
    let after = app.send(req).await;
    assert_ne!(
        after.status,
        StatusCode::OK,
        "the old session cookie no longer works"
    );
}

#[tokio::test]
async fn a_person_without_a_mapped_group_gets_a_403_naming_the_roles_not_a_loop() {
    let Some(provider) = provider("oidc::no_mapped_group") else {
        return;
    };
    provider.set_groups(&[("bo", &["contractors"])]);
    let app = app_for(&provider.issuer).await;
    let mut jar = Jar::default();
    let res = sign_in(&app, &provider, &mut jar, "bo").await;
    assert_eq!(res.status, StatusCode::FORBIDDEN, "{}", res.body);
    assert!(res.body.contains("viewer (group everyone)"), "{}", res.body);
    assert!(
        res.body.contains("name=\"token\""),
        "token sign-in is still offered"
    );
    assert!(jar.get("gt_session").is_none());
    assert_eq!(app.count("people").await, 0);
}

#[tokio::test]
async fn a_tampered_state_and_a_replayed_code_are_refused() {
    let Some(provider) = provider("oidc::tampered_state") else {
        return;
    };
    provider.set_groups(&[("cy", &["everyone"])]);
    let app = app_for(&provider.issuer).await;

    // The state the provider echoes is changed on the way back.
    let mut jar = Jar::default();
    let authorize = start(&app, &mut jar, "").await;
    let back = at_provider(&provider.issuer, &authorize, "cy");
    let tampered = back.replacen("state=", "state=x", 1);
    let res = app_get(&app, &mut jar, tampered.strip_prefix(PUBLIC_URL).unwrap()).await;
    assert_eq!(res.status, StatusCode::BAD_REQUEST, "{}", res.body);
    assert!(res.body.contains("state differs"), "{}", res.body);
    assert!(jar.get("gt_session").is_none());

    // A good sign-in, then the same callback again (same browser, same code).
    let mut jar = Jar::default();
    let authorize = start(&app, &mut jar, "").await;
    let back = at_provider(&provider.issuer, &authorize, "cy");
    let path = back.strip_prefix(PUBLIC_URL).unwrap().to_owned();
    let pending = jar.get("gt_oidc").unwrap().to_owned();
    let first = app_get(&app, &mut jar, &path).await;
    assert_eq!(first.status, StatusCode::SEE_OTHER, "{}", first.body);
    let mut replay = Jar::default();
    replay.0.insert("gt_oidc".into(), pending);
    let again = app_get(&app, &mut replay, &path).await;
    assert_eq!(again.status, StatusCode::BAD_REQUEST, "{}", again.body);
    assert!(replay.get("gt_session").is_none());

    // A callback from a browser that never started a sign-in.
    let mut stranger = Jar::default();
    let res = app_get(&app, &mut stranger, &path).await;
    assert_eq!(res.status, StatusCode::BAD_REQUEST, "{}", res.body);
}

#[tokio::test]
async fn a_code_issued_to_another_client_is_refused() {
    let Some(provider) = provider("oidc::another_client") else {
        return;
    };
    provider.set_groups(&[("dee", &["triage-admins"])]);
    let app = app_for(&provider.issuer).await;
    let mut jar = Jar::default();
    let authorize = start(&app, &mut jar, "").await;
    // Same state, nonce and PKCE challenge, but the provider's other client (the audience of
    // the resulting tokens is not this portal).
    let other = authorize.replace(
        &format!("client_id={CLIENT_ID}&"),
        &format!("client_id={CLIENT_ID}-other&"),
    );
    assert_ne!(other, authorize);
    let back = at_provider(&provider.issuer, &other, "dee");
    let res = app_get(&app, &mut jar, back.strip_prefix(PUBLIC_URL).unwrap()).await;
    assert_eq!(res.status, StatusCode::BAD_REQUEST, "{}", res.body);
    assert!(
        res.body.contains("refused the sign-in code"),
        "{}",
        res.body
    );
    assert!(jar.get("gt_session").is_none());
    assert_eq!(app.count("people").await, 0);
}

#[tokio::test]
async fn a_provider_that_is_down_gives_503_and_token_sign_in_still_works() {
    let port = crate::support::free_port();
    let app = app_for(&format!("http://127.0.0.1:{port}")).await;
    let mut jar = Jar::default();
    let res = app_get(&app, &mut jar, "/login/oidc").await;
    assert_eq!(res.status, StatusCode::SERVICE_UNAVAILABLE, "{}", res.body);
    assert!(res.body.contains("unavailable"), "{}", res.body);
    assert!(
        res.body.contains(&format!("127.0.0.1:{port}")),
        "names the reason: {}",
        res.body
    );
    assert!(
        res.body.contains("name=\"token\""),
        "token sign-in is still offered"
    );
    assert!(jar.get("gt_oidc").is_none());
}

#[tokio::test]
async fn without_a_provider_there_is_no_provider_sign_in() {
    let app = TestApp::spawn().await;
    let page = app.get("/login").await;
    assert!(!page.body.contains("/login/oidc"), "{}", page.body);
    assert_eq!(app.get("/login/oidc").await.status, StatusCode::NOT_FOUND);
}
