//! The rule editor (issue 19): every field labelled and full width, the pattern a monospace
//! text area, the preview showing what each example line captures and the typed facts it
//! gives; and disabling a built-in rule through a preview of its impact and a confirm step,
//! never in one click.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpu_triage::auth::Scope;

use super::{ILLEGAL_LOG, app_with_corpus, classify, upload};
use crate::browse::{Browser, page, sign_in};
use crate::support::{TestApp, TestResponse};

async fn post_form(
    app: &TestApp,
    b: &Browser,
    path: &str,
    fields: &[(&str, &str)],
) -> TestResponse {
    let mut pairs: Vec<(&str, &str)> = vec![("csrf", b.csrf.as_str())];
    pairs.extend_from_slice(fields);
    let body = serde_urlencoded::to_string(&pairs).unwrap();
    let req = Request::post(path)
        .header("cookie", &b.cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(body))
        .unwrap();
    app.send(req).await
}

/// Texts (whitespace collapsed) or an attribute's values of the elements `css` selects.
fn select(html: &str, css: &str, attr: Option<&str>) -> Vec<String> {
    let doc = scraper::Html::parse_document(html);
    let sel = scraper::Selector::parse(css).unwrap();
    doc.select(&sel)
        .filter_map(|e| match attr {
            Some(a) => e.value().attr(a).map(str::to_owned),
            None => Some(
                e.text()
                    .collect::<String>()
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
        })
        .collect()
}

/// Every visible form control of `html` has a label: a `<label for>` naming its id, or a
/// `<label>` around it.
fn assert_every_control_is_labelled(html: &str) {
    let doc = scraper::Html::parse_document(html);
    let controls = scraper::Selector::parse("form input, form select, form textarea").unwrap();
    let labels = scraper::Selector::parse("label").unwrap();
    let fors: Vec<&str> = doc
        .select(&labels)
        .filter_map(|l| l.value().attr("for"))
        .collect();
    for c in doc.select(&controls) {
        if c.value().attr("type") == Some("hidden") {
            continue;
        }
        let by_for = c.value().attr("id").is_some_and(|id| fors.contains(&id));
        let wrapped = c
            .ancestors()
            .filter_map(scraper::ElementRef::wrap)
            .any(|a| a.value().name() == "label");
        assert!(
            by_for || wrapped,
            "unlabelled control: {:?}",
            c.value().attr("name")
        );
    }
}

const OOM_PATTERN: &str =
    r"MyAlloc failed: (?P<requested>[\d.]+ [KMG]iB) on (?P<device>cuda:\d+) \(code (?P<code>\d+)\)";

#[tokio::test]
async fn the_editor_labels_every_field_and_its_preview_shows_what_each_example_captures() {
    let app = TestApp::spawn().await;
    let admin = app.token("alice", &[Scope::Admin]).await;
    let b = sign_in(&app, &admin).await;

    let form = page(&app, &b.cookie, "/rules/new").await;
    assert_eq!(form.status, StatusCode::OK);
    assert_every_control_is_labelled(&form.body);
    assert_eq!(
        select(&form.body, "textarea#rule-pattern", Some("maxlength")),
        ["1024"]
    );
    let help = select(&form.body, "label[for=rule-pattern]", None).join("");
    assert!(
        help.contains("requested") && help.contains("torch_version"),
        "the help names the capture names that become facts: {help}"
    );
    assert!(select(&form.body, "input[name=pattern]", None).is_empty());

    let fields = [
        ("id", "team.myalloc"),
        ("category", "out_of_memory"),
        ("title", "MyAlloc ran out of memory"),
        ("pattern", OOM_PATTERN),
        ("specificity", "90"),
        ("advice", "MyAlloc code {code}: see the runbook."),
        (
            "examples",
            "MyAlloc failed: 86.00 MiB on cuda:1 (code 7)\nMyAlloc failed: 2.00 GiB on cuda:0 (code 9)",
        ),
        ("counter_examples", "MyAlloc started"),
        ("enabled", "on"),
        ("action", "preview"),
    ];
    let res = post_form(&app, &b, "/rules", &fields).await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert_every_control_is_labelled(&res.body);
    // The pattern comes back in its text area, as typed.
    assert_eq!(
        select(&res.body, "textarea#rule-pattern", None),
        [OOM_PATTERN]
    );
    assert_eq!(
        select(&res.body, ".preview .groups", None),
        ["Named groups: requested → memory.requested_bytes, device → devices, code → advice only"]
    );
    let rows = select(&res.body, ".examples tbody tr", None);
    assert_eq!(rows.len(), 3, "{rows:?}");
    let first_captures = {
        let doc = scraper::Html::parse_document(&res.body);
        let row = scraper::Selector::parse(".examples tbody tr").unwrap();
        let cap = scraper::Selector::parse(".capture").unwrap();
        let fact = scraper::Selector::parse(".fact").unwrap();
        let tr = doc.select(&row).next().unwrap();
        let text = |e: scraper::ElementRef| {
            e.text()
                .collect::<String>()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        (
            tr.select(&cap).map(text).collect::<Vec<_>>(),
            tr.select(&fact).map(text).collect::<Vec<_>>(),
        )
    };
    assert_eq!(
        first_captures.0,
        [
            "requested = 86.00 MiB → memory.requested_bytes",
            "device = cuda:1 → devices",
            "code = 7 → advice only"
        ]
    );
    assert_eq!(
        first_captures.1,
        [
            "memory requested: 86.00 MiB (90177536 bytes)",
            "devices: cuda:1",
            // The line's own GPU, read from the matched line as the failing GPU (issue 40
            // item 4), whatever the rule captures.
            "failing gpu: cuda:1"
        ]
    );
    // The counter-example matches nothing and captures nothing; results read as words.
    assert!(
        rows[2].contains("MyAlloc started") && rows[2].contains("none"),
        "{rows:?}"
    );
    assert_eq!(
        select(&res.body, ".examples td.result-ok", None),
        ["ok", "ok", "ok"]
    );
    assert_eq!(app.count("team_rules").await, 0, "a preview stores nothing");
}

#[tokio::test]
async fn disabling_a_builtin_rule_shows_its_impact_first_and_needs_confirmation() {
    let app = app_with_corpus().await;
    let admin = app.token("alice", &[Scope::Admin]).await;
    let reader = app.token("viewer", &[Scope::Read]).await;
    let ingest = app.token("ci", &[Scope::Ingest]).await;
    let stored = upload(&app, &ingest, ILLEGAL_LOG).await;
    let id = "cuda.illegal_address";
    let rule_path = format!("/rules/{id}");
    let b = sign_in(&app, &admin).await;

    // The rule page offers a link to the preview, not a one-click disable form.
    let rule = page(&app, &b.cookie, &rule_path).await;
    assert_eq!(
        select(&rule.body, "a.disable-link", Some("href")),
        [format!("/rules/{id}/disable")]
    );
    assert!(select(&rule.body, "input[name=enabled][value=false]", None).is_empty());

    // A one-click post without confirmation disables nothing: it is sent to the preview.
    let res = post_form(
        &app,
        &b,
        &format!("{rule_path}/enabled"),
        &[("enabled", "false")],
    )
    .await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    assert_eq!(res.headers["location"], format!("/rules/{id}/disable"));
    assert_eq!(app.count("team_rules").await, 0);
    let c = classify(&app, &reader, ILLEGAL_LOG).await;
    assert_eq!(c["root_cause"]["rule"], id);

    // The preview: the stored report it would stop naming, its examples, the corpus.
    let preview = page(&app, &b.cookie, &format!("/rules/{id}/disable")).await;
    assert_eq!(preview.status, StatusCode::OK, "{}", preview.body);
    let html = &preview.body;
    assert_eq!(select(html, ".scanned", None), ["1 of 1"]);
    assert_eq!(select(html, ".no-longer-matched", None), ["1"]);
    // Its category stays: with the rule off, the learned fallback still reads the line as a
    // likely illegal memory access (the rule stops naming it all the same).
    assert_eq!(select(html, ".category-changed", None), ["0"]);
    // So no stored report is listed as changing category.
    assert!(select(html, ".changed a", Some("href")).is_empty());
    let _ = &stored;
    let lost = select(html, ".example-impact tr.lost", None);
    let all = select(html, ".example-impact tbody tr", None);
    assert!(!all.is_empty() && lost.len() == all.len(), "{all:?}");
    assert!(lost[0].contains(&format!("{id} (")), "{lost:?}");
    assert_eq!(
        select(html, ".examples-lost", None),
        [format!(
            "{n} of {n} example line{s} would no longer be named by this rule.",
            n = all.len(),
            s = if all.len() == 1 { "" } else { "s" }
        )]
    );
    let accuracy = select(html, ".accuracy", None).join("");
    // The labelled corpus keeps its score for the same reason: the fallback still names the
    // line's category, so the preview does not call the change lower.
    assert_eq!(accuracy, "50.0% → 50.0%", "{accuracy}");
    assert_eq!(app.count("team_rules").await, 0, "a preview stores nothing");
    // Only admins see it.
    let rb = sign_in(&app, &reader).await;
    let res = page(&app, &rb.cookie, &format!("/rules/{id}/disable")).await;
    assert_eq!(res.status, StatusCode::FORBIDDEN);
    assert_eq!(
        page(&app, &b.cookie, "/rules/no.such.rule/disable")
            .await
            .status,
        StatusCode::NOT_FOUND
    );

    // Confirmed: disabled, and the next classification no longer uses it.
    let action = select(html, "form.confirm-actions", Some("action"));
    assert_eq!(action, [format!("{rule_path}/enabled")]);
    let confirm: Vec<(String, String)> = select(html, "form.confirm-actions input", Some("name"))
        .into_iter()
        .zip(select(html, "form.confirm-actions input", Some("value")))
        .filter(|(name, _)| name != "csrf")
        .collect();
    assert_eq!(
        confirm,
        [
            ("enabled".to_owned(), "false".to_owned()),
            ("confirm".to_owned(), "yes".to_owned())
        ]
    );
    let res = post_form(
        &app,
        &b,
        &action[0],
        &[("enabled", "false"), ("confirm", "yes")],
    )
    .await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    assert_eq!(res.headers["location"], rule_path);
    let c = classify(&app, &reader, ILLEGAL_LOG).await;
    assert_ne!(c["root_cause"]["rule"], id, "{c}");
    let rule = page(&app, &b.cookie, &rule_path).await;
    assert_eq!(select(&rule.body, ".meta .state", None), ["disabled"]);
    assert_eq!(
        select(&rule.body, ".rule-actions button", None),
        ["Enable", "Restore the shipped rule"]
    );
    let again = page(&app, &b.cookie, &format!("/rules/{id}/disable")).await;
    assert_eq!(select(&again.body, ".already", None).len(), 1);
    assert!(select(&again.body, "form.confirm-actions", None).is_empty());

    // Turning it back on needs no confirmation.
    let res = post_form(
        &app,
        &b,
        &format!("{rule_path}/enabled"),
        &[("enabled", "true")],
    )
    .await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    let c = classify(&app, &reader, ILLEGAL_LOG).await;
    assert_eq!(c["root_cause"]["rule"], id);
}
