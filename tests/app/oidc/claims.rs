//! What the provider says about a person is untrusted input (issue 38, SECURITY.md item 26):
//! claims cannot forge log lines, hostile names and emails are cleaned and capped (never a
//! 500), groups are read from the userinfo answer when the ID token has none, a provider
//! without groups can give a default role to verified emails of allowed domains, and a refusal
//! names what was received and is logged.

use axum::http::StatusCode;
use gpu_triage::roles::PersonRole;
use serde_json::json;

use super::{
    Jar, ProviderOptions, app_for, app_get, app_with, header_user, provider, provider_with,
    sign_in, signed_in,
};
use crate::support::{Captured, TestApp};

async fn stored(app: &TestApp, subject: &str) -> (String, String, String) {
    sqlx::query_as("SELECT name, email, role FROM people WHERE subject = $1")
        .bind(subject)
        .fetch_one(app.db.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_name_claim_cannot_forge_a_log_line() {
    let Some(provider) = provider("oidc::claims::forged_log_line") else {
        return;
    };
    provider.set_groups(&[("mallory", &["everyone"])]);
    let forged = "Mallory\" role=admin x=\"\n2030-01-01T00:00:00.000000Z  INFO request{actor=\"root\"}: \
                  signed in through the provider person=root role=admin\u{1b}[2K";
    provider.set_claims(&[("mallory", json!({ "name": forged }))]);
    let app = app_for(&provider.issuer).await;
    let (log, _guard) = Captured::start();
    signed_in(&app, &provider, "mallory").await;

    let text = log.text();
    let line = log.line_with("signed in through the provider");
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("signed in through the provider"))
            .count(),
        1,
        "one sign-in, one line:\n{text}"
    );
    assert!(
        !text.lines().any(|l| l.starts_with("2030-01-01")),
        "a forged line:\n{text}"
    );
    assert!(!text.contains('\u{1b}'), "a raw escape reached the log");
    // The name is one quoted field: its quotes escaped, so it adds no `role=admin` field.
    assert!(
        line.contains(r#"person="Mallory\" role=admin x=\"2030-01-01"#),
        "{line}"
    );
    assert!(line.ends_with("role=viewer"), "{line}");
}

#[tokio::test]
async fn hostile_claims_are_cleaned_and_capped_and_never_a_500() {
    let Some(provider) = provider("oidc::claims::hostile") else {
        return;
    };
    let long_name = format!("\u{202e}Zed\u{0}\u{2066} {}", "x".repeat(200_000));
    provider.set_claims(&[(
        "zed",
        json!({
            "name": long_name,
            "email": "zed\u{0}@example.test",
            // A name that, with its override stripped, would be the admins' group.
            "groups": ["everyone", "triage\u{202e}-admins", "y".repeat(300), "\u{0}"],
        }),
    )]);
    let app = app_for(&provider.issuer).await;
    let mut jar = signed_in(&app, &provider, "zed").await;
    let (name, email, role) = stored(&app, "zed").await;
    assert!(name.starts_with("Zed x"), "{name:?}");
    assert_eq!(name.chars().count(), 200, "capped");
    assert!(
        !name
            .chars()
            .any(|c| c.is_control() || ('\u{2066}'..='\u{2069}').contains(&c)),
        "{name:?}"
    );
    assert!(!name.contains('\u{202e}'));
    assert_eq!(email, "", "an email with a NUL is dropped, not repaired");
    assert_eq!(role, "viewer", "the disguised admins' group gives nothing");

    let home = app_get(&app, &mut jar, "/").await;
    assert_eq!(home.status, StatusCode::OK);
    let shown = header_user(&home.body);
    assert!(shown.contains("Zed x"), "{shown}");
    assert!(shown.len() < 1000, "the header shows the capped name");
    assert!(!home.body.contains('\u{202e}'));

    // A NUL in the email alone (the name is fine) is no 500 either.
    provider.set_claims(&[("zoe", json!({ "email": "zoe@example.test\u{0}" }))]);
    provider.set_groups(&[("zoe", &["ml-team"])]);
    signed_in(&app, &provider, "zoe").await;
    assert_eq!(
        stored(&app, "zoe").await,
        ("Zoe".into(), String::new(), "member".into())
    );
}

#[tokio::test]
async fn groups_sent_only_in_the_userinfo_answer_give_the_role() {
    let redirect = format!("{}/login/oidc/callback", super::PUBLIC_URL);
    let options = ProviderOptions {
        claims_at_userinfo_only: true,
    };
    let Some(provider) = provider_with("oidc::claims::userinfo_groups", &redirect, options) else {
        return;
    };
    provider.set_groups(&[("ana", &["ml-team"]), ("bo", &["contractors"])]);
    let app = app_for(&provider.issuer).await;
    signed_in(&app, &provider, "ana").await;
    assert_eq!(
        stored(&app, "ana").await,
        ("Ana".into(), "ana@example.test".into(), "member".into()),
        "groups, name and email from userinfo"
    );
    // Refused where the userinfo groups give nothing, saying where they came from.
    let res = sign_in(&app, &provider, &mut Jar::default(), "bo").await;
    assert_eq!(res.status, StatusCode::FORBIDDEN, "{}", res.body);
    assert!(res.body.contains("contractors"), "{}", res.body);
    assert!(res.body.contains("the userinfo answer"), "{}", res.body);
}

#[tokio::test]
async fn a_refusal_names_the_groups_received_and_the_groups_needed_and_is_logged() {
    let Some(provider) = provider("oidc::claims::refusal") else {
        return;
    };
    provider.set_groups(&[("bo", &["contractors", "qa \"night\""])]);
    let app = app_for(&provider.issuer).await;
    let (log, _guard) = Captured::start();
    let res = sign_in(&app, &provider, &mut Jar::default(), "bo").await;
    assert_eq!(res.status, StatusCode::FORBIDDEN, "{}", res.body);
    let page = scraper::Html::parse_document(&res.body)
        .root_element()
        .text()
        .collect::<String>();
    for wanted in [
        "your groups are \u{201c}contractors\u{201d}, \u{201c}qa \"night\"\u{201d} (in the ID token)",
        "admin (group triage-admins)",
        "member (group ml-team)",
        "viewer (group everyone)",
    ] {
        assert!(page.contains(wanted), "{wanted:?} not in {page}");
    }
    let line = log.line_with("sign-in refused: no role");
    assert!(line.contains("WARN"), "{line}");
    assert!(line.contains(r#"subject="bo""#), "{line}");
    assert!(
        // The list is one quoted value in the server's format (`telemetry::SafeFields`).
        line.contains(r#"groups="[\"contractors\", \"qa \\\"night\\\"\"]""#),
        "{line}"
    );
    assert!(line.contains(r#"groups_from="id_token""#), "{line}");
    assert_eq!(app.count("people").await, 0);
}

#[tokio::test]
async fn without_groups_the_default_role_goes_to_verified_emails_of_allowed_domains() {
    let Some(provider) = provider("oidc::claims::default_role") else {
        return;
    };
    // Like Google: no groups claim at all, in the ID token or at userinfo.
    provider.set_claims(&[
        ("gus", json!({ "groups": null })),
        (
            "hal",
            json!({ "groups": null, "email": "hal@elsewhere.test" }),
        ),
        ("ivy", json!({ "groups": null, "email_verified": false })),
    ]);
    let without = app_for(&provider.issuer).await;
    let res = sign_in(&without, &provider, &mut Jar::default(), "gus").await;
    assert_eq!(
        res.status,
        StatusCode::FORBIDDEN,
        "no default role: {}",
        res.body
    );
    assert!(res.body.contains("sent no groups claim"), "{}", res.body);

    let app = app_with(&provider.issuer, |settings, _| {
        settings.default_role.role = Some(PersonRole::Viewer);
        settings.default_role.allowed_domains = vec!["example.test".into()];
    })
    .await;
    let (log, _guard) = Captured::start();
    signed_in(&app, &provider, "gus").await;
    assert_eq!(stored(&app, "gus").await.2, "viewer");

    let res = sign_in(&app, &provider, &mut Jar::default(), "hal").await;
    assert_eq!(res.status, StatusCode::FORBIDDEN, "{}", res.body);
    assert!(res.body.contains("hal@elsewhere.test"), "{}", res.body);
    assert!(res.body.contains("example.test"), "{}", res.body);
    let line = log.line_with(r#"email="hal@elsewhere.test""#);
    assert!(line.contains("sign-in refused: no role"), "{line}");
    assert!(line.contains("no_default=OtherDomain"), "{line}");

    let res = sign_in(&app, &provider, &mut Jar::default(), "ivy").await;
    assert_eq!(res.status, StatusCode::FORBIDDEN, "{}", res.body);
    assert!(
        res.body.contains("ivy@example.test is verified"),
        "{}",
        res.body
    );
    assert_eq!(app.count("people").await, 1, "only gus");

    // Without domains, the default role goes to everyone the provider signs in.
    let open = app_with(&provider.issuer, |settings, _| {
        settings.default_role.role = Some(PersonRole::Member);
    })
    .await;
    signed_in(&open, &provider, "hal").await;
    assert_eq!(stored(&open, "hal").await.2, "member");
}
