//! The rule editor (issue 19): every field labelled and full width, the pattern a monospace
//! text area, the preview showing what each example line captures and the typed facts it
//! gives.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpu_triage::auth::Scope;

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
            "devices: cuda:1"
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
