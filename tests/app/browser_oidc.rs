//! Signing in through the identity provider in a real browser (issue 31 "done when"): the real
//! `serve` binary configured for a real OpenID provider (panva's oidc-provider on loopback,
//! `tests/oidc/provider.mjs`), and headless Chromium following the whole flow as a person
//! would: a link opened signed out, "Sign in with Test IdP", the provider's login and consent
//! pages, and back on the page asked for with the header naming the person. A member signs in
//! first; then an admin opens `/people`, sees both, and disables the member there. The sign-in
//! page and the people page pass axe-core (no serious or critical violation).

use std::process::Stdio;

use crate::browser::{Session, axe_source, browser_installed, open_browser};
use crate::oidc::{CLIENT_ID, CLIENT_SECRET, provider_for};
use crate::support::{
    KillOnDrop, binary, database_url, free_port, fresh_database_name, wait_for_status,
};

fn check_axe(s: &Session, axe: Option<&String>, page: &str) {
    if let Some(axe) = axe {
        assert_eq!(s.d.axe(axe), Vec::<String>::new(), "{page}");
    }
}

/// Opens `path` signed out, follows "Sign in with Test IdP", signs in at the provider as
/// `login` (its development login takes any password) and consents; waits for `path` again.
fn sign_in_through_the_provider(s: &Session, path: &str, login: &str, issuer: &str) {
    let d = &s.d;
    d.go(&format!("{}{path}", s.base));
    d.wait_for_page(
        "the sign-in page",
        |u| u.contains("/login?next="),
        "a[href^='/login/oidc']",
    );
    assert_eq!(d.text("a[href^='/login/oidc']"), "Sign in with Test IdP");
    d.click("a[href^='/login/oidc']");
    d.wait_for_page(
        "the provider's login page",
        |u| u.starts_with(issuer),
        "input[name=login]",
    );
    d.type_into("input[name=login]", login);
    d.type_into("input[name=password]", "any password");
    d.click("button[type=submit]");
    d.wait_for_page(
        "the provider's consent page",
        |u| u.starts_with(issuer),
        "input[name=prompt][value=consent]",
    );
    d.click("button[type=submit]");
    let back = format!("{}{path}", s.base);
    d.wait_for_page("the page asked for", |u| u == back, "header .who");
}

#[test]
fn a_person_signs_in_through_the_provider_in_a_real_browser_and_an_admin_disables_another() {
    let test =
        "a_person_signs_in_through_the_provider_in_a_real_browser_and_an_admin_disables_another";
    if !browser_installed(test) {
        return;
    }
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let Some(provider) = provider_for(test, &format!("{base}/login/oidc/callback")) else {
        return;
    };
    provider.set_groups(&[("ana", &["triage-admins"]), ("bo", &["ml-team"])]);
    let axe = axe_source(test);
    let url = database_url(&fresh_database_name());
    let child = binary()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--public-url", &base])
        .args(["--oidc-issuer", &provider.issuer])
        .args(["--oidc-client-id", CLIENT_ID])
        .args(["--oidc-client-secret", CLIENT_SECRET])
        .args(["--oidc-admin-groups", "triage-admins"])
        .args(["--oidc-member-groups", "ml-team"])
        .args(["--oidc-provider-name", "Test IdP"])
        .env("DATABASE_URL", &url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn serve");
    let server = KillOnDrop(child);
    assert!(wait_for_status(port, "/readyz", 200, 60), "server ready");
    let s = open_browser(server, base.clone(), url);
    let d = &s.d;

    // Bo, a member, follows a link while signed out and lands on it, named in the header.
    d.go(&format!("{base}/login?next=/groups"));
    d.wait_for_page("the sign-in page", |_| true, "a[href^='/login/oidc']");
    check_axe(&s, axe.as_ref(), "the sign-in page with a provider");
    sign_in_through_the_provider(&s, "/groups", "bo", &provider.issuer);
    assert_eq!(d.text("header .who"), "Bo");
    assert_eq!(
        d.count("nav.wide a[href='/tokens']"),
        1,
        "a member's tokens"
    );
    assert_eq!(
        d.count("nav.wide a[href='/people']"),
        0,
        "no People for a member"
    );
    // Bo leaves this browser without signing out: his session stays live at the server.
    d.cmd("DELETE", "cookie", None);

    // Ana, an admin, signs in the same way and manages people.
    sign_in_through_the_provider(&s, "/people", "ana", &provider.issuer);
    assert_eq!(d.text("header .who"), "Ana");
    assert_eq!(d.count("tr.person-row"), 2);
    check_axe(&s, axe.as_ref(), "the people page");
    d.screenshot("people");
    let bo_row = d
        .js("return [...document.querySelectorAll('tr.person-row')].find(r => r.querySelector('.person-name').textContent === 'Bo').id;")
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(d.text(&format!("#{bo_row} .person-role")), "member");
    assert_eq!(d.text(&format!("#{bo_row} .person-sessions")), "1");
    let me = d
        .js("return [...document.querySelectorAll('tr.person-row')].find(r => r.querySelector('.person-name').textContent === 'Ana').id;")
        .as_str()
        .unwrap()
        .to_owned();
    assert!(d.text(&format!("#{me}")).contains("(you)"));
    assert_eq!(
        d.count(&format!("#{me} button.danger")),
        0,
        "no self-disable"
    );
    d.click(&format!("#{bo_row} details.confirm summary"));
    d.click(&format!("#{bo_row} button.danger"));
    d.wait_for_page(
        "the people page after disabling Bo",
        |u| u.ends_with(&format!("/people#{bo_row}")),
        &format!("#{bo_row}.disabled"),
    );
    assert_eq!(d.text(&format!("#{bo_row} .person-state")), "disabled");
    assert_eq!(d.text(&format!("#{bo_row} .person-sessions")), "0");
    check_axe(&s, axe.as_ref(), "the people page with a disabled person");

    // At phone width the rows stack and nothing is wider than the screen.
    d.resize(400, 900);
    d.go(&format!("{base}/people"));
    d.wait_for_page("the people page at 400 px", |_| true, "tr.person-row");
    let fits = d
        .js("return document.documentElement.scrollWidth <= document.documentElement.clientWidth;");
    assert_eq!(
        fits,
        serde_json::json!(true),
        "the people page is wider than 400 px"
    );
    check_axe(&s, axe.as_ref(), "the people page at 400 px");
    d.screenshot("people-400");
}
