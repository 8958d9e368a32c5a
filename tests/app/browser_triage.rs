//! Triage in a real browser (issue 30 "done when"): the groups list with 40 groups at 1400 px
//! (the table inside its card) and at 400 px (stacked rows, nothing wider than the screen), a
//! one-click resolve from the list; find with next/previous; a token created in the portal and
//! its secret shown once; a signed-out link to a report that lands on the report after signing
//! in; and a read-only session's pages with no paste or fix form. Each page passes axe-core (no
//! serious or critical violation) where axe-core is installed.

use serde_json::{Value, json};

use crate::browser::{Session, axe_source, signed_in_browser_as};
use crate::support::create_token;

/// `POST /api/v1/reports` over a real socket with one log; the answer's JSON.
fn upload(base: &str, token: &str, log: &str) -> Value {
    let boundary = "browser-triage-boundary";
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"log\"; filename=\"run.log\"\r\n\
         Content-Type: text/plain\r\n\r\n{log}\r\n--{boundary}--\r\n"
    );
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut res = agent
        .post(format!("{base}/api/v1/reports"))
        .header("Authorization", format!("Bearer {token}"))
        .header(
            "Content-Type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .send(body)
        .unwrap();
    assert_eq!(res.status().as_u16(), 201);
    serde_json::from_str(&res.body_mut().read_to_string().unwrap()).unwrap()
}

/// A failure raised in op `n` from the user's own `file`: a group per `n` (the op's name in
/// letters: numbers are normalized away from a fingerprint).
fn failure(n: usize, file: &str) -> String {
    let op: String = [b'a' + (n / 26) as u8, b'a' + (n % 26) as u8]
        .iter()
        .map(|&c| c as char)
        .collect();
    format!(
        "step {n} loss 0.93\nTraceback (most recent call last):\n  File \"/work/{file}\", line \
         41, in forward\n    out = self.layer_{n}(batch)\nRuntimeError: Expected all tensors to \
         be on the same device, but found at least two devices, cuda:0 and cpu! (when checking \
         argument for argument index in method wrapper_CUDA__op_{op})\n"
    )
}

/// The elements that reach past the window's right edge, for a failure's message.
fn too_wide(s: &Session) -> Value {
    s.d.run_js(
        "return [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth)\
         .slice(0, 8).map(e => e.tagName + '.' + e.className + '#' + e.id + ' ' + Math.round(e.getBoundingClientRect().right));",
        json!([]),
    )
}

fn check_axe(s: &Session, axe: Option<&String>, page: &str) {
    if let Some(axe) = axe {
        assert_eq!(s.d.axe(axe), Vec::<String>::new(), "{page}");
    }
}

/// Whether anything on the page is wider than the window.
fn overflows(s: &Session) -> Value {
    s.d.run_js(
        "return document.documentElement.scrollWidth > document.documentElement.clientWidth;",
        json!([]),
    )
}

#[test]
fn the_triage_portal_works_in_a_real_browser() {
    let test = "the_triage_portal_works_in_a_real_browser";
    let Some(s) = signed_in_browser_as(test, "admin") else {
        return;
    };
    let axe = axe_source(test);
    let ci = create_token(&s.url, "ingest,read", "ci");
    let mut first_report = 0;
    for n in 0..40 {
        let file = [
            "model.py",
            "train.py",
            "data/loader.py",
            "heads/classifier.py",
        ][n % 4];
        let up = upload(&s.base, &ci, &failure(n, file));
        if n == 0 {
            first_report = up["id"].as_i64().unwrap();
        }
    }
    let d = &s.d;

    // The list at desktop width: 40 groups (two pages), the table inside its card, culprits.
    d.resize(1400, 1000);
    d.go(&format!("{}/groups?per_page=50", s.base));
    d.wait_for_page("the groups list", |u| u.contains("/groups"), "table.groups");
    assert_eq!(d.count("tr.group-row"), 40);
    let fits = d.run_js(
        "const t = document.querySelector('table.groups'); \
         const c = t.closest('.card'); \
         return [t.getBoundingClientRect().right, c.getBoundingClientRect().right, window.innerWidth];",
        json!([]),
    );
    let (table, card, window) = (
        fits[0].as_f64().unwrap(),
        fits[1].as_f64().unwrap(),
        fits[2].as_f64().unwrap(),
    );
    assert!(window >= 1300.0, "the window is {window} px wide");
    assert!(
        table <= card + 0.5,
        "the table ({table} px) spills out of its card ({card} px)"
    );
    assert_eq!(
        overflows(&s),
        json!(false),
        "the page is wider than 1400 px"
    );
    assert!(d.text("tr.group-row .culprit").contains(".py:forward"));
    check_axe(&s, axe.as_ref(), "groups list at 1400 px");
    d.screenshot("groups-40-1400");
    // One click resolves a group and comes back to the list, which shows unresolved groups
    // only: the row is gone.
    let row = d.run_js(
        "return document.querySelector('tr.group-row').id;",
        json!([]),
    );
    let row = row.as_str().unwrap().to_owned();
    d.click(&format!("#{row} button[aria-label^=Resolve]"));
    d.wait_for_page(
        "the list after resolving",
        |u| u.contains("change="),
        "#change-notice",
    );
    assert_eq!(
        d.count(&format!("#{row}")),
        0,
        "a resolved group is not listed"
    );
    assert_eq!(d.count("tr.group-row"), 39);
    // Its notice undoes it: the row is back.
    d.click("#change-notice button");
    d.wait_for_page(
        "the list after the undo",
        |u| u.contains("change="),
        &format!("#{row}"),
    );
    assert!(
        d.text("#change-notice").contains("undone by"),
        "{}",
        d.text("#change-notice")
    );
    assert_eq!(d.count("tr.group-row"), 40);
    // At phone width the rows stack and nothing is wider than the screen.
    d.resize(400, 900);
    d.go(&format!("{}/groups?per_page=50", s.base));
    d.wait_for_page("the groups list", |u| u.contains("/groups"), "table.groups");
    let width = d
        .run_js("return window.innerWidth;", json!([]))
        .as_f64()
        .unwrap();
    assert!(width <= 420.0, "the window is {width} px wide");
    assert_eq!(
        overflows(&s),
        json!(false),
        "the groups list is wider than 400 px"
    );
    check_axe(&s, axe.as_ref(), "groups list at 400 px");
    d.screenshot("groups-40-400");
    d.resize(1400, 1000);

    // Find with next and previous, the position in the URL.
    d.go(&format!("{}/reports/{first_report}?grep=cuda", s.base));
    d.wait_for_page("a find", |u| u.contains("grep=cuda"), "#find-position");
    assert_eq!(d.text("#find-position"), "Match 1 of 1");
    assert!(d.count("pre.log mark") >= 1);
    check_axe(&s, axe.as_ref(), "a find");
    d.go(&format!("{}/reports/{first_report}?grep=e", s.base));
    d.wait_for_page("a find", |u| u.contains("grep=e"), "#find-position");
    d.click("nav.find-nav a[rel=next]");
    d.wait_for_page(
        "the next match",
        |u| u.contains("hit=2"),
        "pre.log .current",
    );
    assert!(
        d.text("#find-position").starts_with("Match 2 of "),
        "{}",
        d.text("#find-position")
    );
    d.click("nav.find-nav a[rel=prev]");
    d.wait_for_page(
        "the previous match",
        |u| u.contains("hit=1"),
        "pre.log .current",
    );
    d.go(&format!(
        "{}/reports/{first_report}?grep=nowhere-at-all",
        s.base
    ));
    d.wait_for_page("an empty find", |u| u.contains("nowhere"), "#find-empty");
    check_axe(&s, axe.as_ref(), "an empty find");

    // A token created in the portal: its secret on the answer only.
    d.go(&format!("{}/tokens", s.base));
    d.wait_for_page(
        "the tokens page",
        |u| u.ends_with("/tokens"),
        "form.token-form",
    );
    check_axe(&s, axe.as_ref(), "the tokens page");
    d.type_into("#token-name", "viewer");
    d.type_into("#token-expiry", "30");
    d.click("form.token-form button[type=submit]");
    d.wait_for_page(
        "the created token",
        |u| u.ends_with("/tokens"),
        "input#secret",
    );
    let secret = d
        .run_js(
            "return document.querySelector('input#secret').value;",
            json!([]),
        )
        .as_str()
        .unwrap()
        .to_owned();
    assert!(secret.starts_with("gtr_"), "{secret}");
    check_axe(&s, axe.as_ref(), "the created token");
    d.go(&format!("{}/tokens", s.base));
    d.wait_for_page(
        "the tokens page",
        |u| u.ends_with("/tokens"),
        "tr.token-row",
    );
    assert!(
        !d.text("table.tokens").contains(&secret[4..]),
        "the secret is shown again"
    );

    // Signed out, a link to a report goes to sign-in and back to the report.
    d.click("form.logout button");
    d.wait_for_page("signed out", |u| u.ends_with("/login"), "input[name=token]");
    let report = format!("{}/reports/{first_report}?grep=cuda", s.base);
    d.go(&report);
    d.wait_for_page(
        "sign-in with a return path",
        |u| u.contains("/login?next="),
        "input[name=next]",
    );
    d.type_into("input[name=token]", &secret);
    d.click("form.login button[type=submit]");
    d.wait_for_page(
        "the report after signing in",
        |u| u == report,
        "#find-position",
    );

    // The read-only session (the new token has `read`): no paste form, no fix form.
    d.go(&format!("{}/", s.base));
    d.wait_for_page("home, read-only", |u| u.ends_with('/'), "#read-only-note");
    assert_eq!(d.count("#new-report"), 0);
    check_axe(&s, axe.as_ref(), "home, read-only");
    d.go(&format!("{}/reports/{first_report}", s.base));
    d.wait_for_page("a report, read-only", |u| u.contains("/reports/"), "#log");
    assert!(!d.text("main").contains("Record one"));
    check_axe(&s, axe.as_ref(), "a report, read-only");
    d.go(&format!("{}/groups", s.base));
    d.wait_for_page(
        "groups, read-only",
        |u| u.contains("/groups"),
        "table.groups",
    );
    assert_eq!(d.count("form.quick"), 0);
    check_axe(&s, axe.as_ref(), "groups, read-only");
}

/// The smaller portal items of issue 30 item 8, each in the browser: a failure printed after a
/// progress bar is named without the bar; a long fix link does not widen the phone layout;
/// underscores in linked monospace text stay visible (the underline sits below them); the
/// rules list filters; a rule no report names says how reclassifying applies it; a delete sits
/// behind a confirming disclosure; a regressed group says it was resolved in that version.
#[test]
fn the_smaller_portal_items_work_in_a_real_browser() {
    let test = "the_smaller_portal_items_work_in_a_real_browser";
    let Some(s) = signed_in_browser_as(test, "admin") else {
        return;
    };
    let axe = axe_source(test);
    let d = &s.d;
    d.resize(1400, 1000);
    let log = "Epoch 1:  45%|████▌     | 45/100 [00:10<00:12, 4.50it/s]torch.OutOfMemoryError: \
               CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 \
               GiB of which 1.20 GiB is free.\n";
    // A line of the run's own: a log that is the library's sentence alone joins only its copies.
    let report = s.paste(&format!("run 1\n{log}"));
    let root = d.text("#root-cause");
    assert!(root.starts_with("torch.OutOfMemoryError"), "{root}");

    // Resolved in 2.0.0 with a long fix link, from the group page's forms.
    d.click(".columns a[href^='/groups/']");
    d.wait_for_page("the group page", |u| u.contains("/groups/"), "#group-state");
    let group = d.current_url();
    let link = format!(
        "https://wiki.example.com/{}",
        "a-very-long-path-segment-".repeat(12)
    );
    d.type_into("#fix-summary", "lower the batch size to 16");
    d.type_into("#fix-link", &link);
    d.click("form.fix-form button[type=submit]");
    d.wait_for_page(
        "the group with its fix",
        |u| u.contains("#fixes"),
        ".fixes strong",
    );
    d.run_js(
        "const f = document.querySelector('form.triage-form'); \
         f.querySelector('[name=state]').value = 'resolved'; \
         f.querySelector('[name=resolved_in]').value = '2.0.0'; \
         f.submit(); return true;",
        json!([]),
    );
    d.wait_for_page(
        "the resolved group",
        |u| u.contains("#triage"),
        "#group-state.state-resolved",
    );
    // The failure again: regressed, and the page says in which version it had been resolved.
    s.paste(&format!("run 2\n{log}"));
    d.go(&group);
    d.wait_for_page(
        "the regressed group",
        |u| u == group,
        "#group-state.state-regressed",
    );
    assert!(
        d.text("p.state-line")
            .contains("failing again after it was resolved in 2.0.0"),
        "{}",
        d.text("p.state-line")
    );
    check_axe(&s, axe.as_ref(), "a regressed group");

    // On a phone, the report with the long fix link is no wider than the screen.
    d.resize(390, 900);
    d.go(&report);
    d.wait_for_page("the report", |u| u == report, "#fixed-before, .fixes");
    d.screenshot("report-long-fix-390");
    assert_eq!(
        overflows(&s),
        json!(false),
        "the report is wider than 390 px: {}",
        too_wide(&s)
    );
    d.resize(1400, 1000);

    // Linked monospace: the underline sits below underscores.
    d.go(&format!("{}/rules?q=illegal_address", s.base));
    d.wait_for_page(
        "the filtered rules",
        |u| u.contains("q=illegal_address"),
        "tr.rule-row",
    );
    let offset = d.run_js(
        "return parseFloat(getComputedStyle(document.querySelector('td.mono a')).textUnderlineOffset);",
        json!([]),
    );
    assert!(offset.as_f64().unwrap() >= 3.5, "underline offset {offset}");
    // The filter: every row holds what was typed.
    d.go(&format!("{}/rules", s.base));
    d.wait_for_page("the rules", |u| u.ends_with("/rules"), "#rule-filters");
    let all = d.count("tr.rule-row");
    d.type_into("#rule-filters input[name=q]", "nccl");
    d.click("#rule-filters button[type=submit]");
    d.wait_for_page(
        "the filtered rules",
        |u| u.contains("q=nccl"),
        "#rule-count",
    );
    let shown = d.count("tr.rule-row");
    assert!(shown > 0 && shown < all, "{shown} of {all}");
    let rows = d.run_js(
        "return [...document.querySelectorAll('tr.rule-row')].every(r => r.textContent.toLowerCase().includes('nccl'));",
        json!([]),
    );
    assert_eq!(rows, json!(true));
    check_axe(&s, axe.as_ref(), "the filtered rules");

    // A team rule no stored report names: the hint, and a delete behind its disclosure.
    let admin = crate::support::create_token(&s.url, "admin", "api");
    let (status, _) = crate::browser::worker_post(
        &s.base,
        &admin,
        "/api/v1/rules",
        &json!({"id": "team.frob", "category": "library_error", "title": "Frobnicator failed",
                "pattern": "FrobKernel failed: code (?P<code>\\d+)",
                "examples": ["FrobKernel failed: code 3"], "counter_examples": ["FrobKernel ok"]}),
    );
    assert_eq!(status, 201);
    d.go(&format!("{}/rules/team.frob", s.base));
    d.wait_for_page(
        "the rule",
        |u| u.ends_with("/rules/team.frob"),
        "#no-matching",
    );
    assert!(d.text("#no-matching").contains("Reclassify"));
    let visible = |css: &str| {
        d.run_js(
            "const e = document.querySelector(arguments[0]); return !!e && e.checkVisibility();",
            json!([css]),
        )
    };
    assert_eq!(
        visible("#delete-rule button.danger"),
        json!(false),
        "delete in one click"
    );
    d.click("#delete-rule summary");
    assert_eq!(visible("#delete-rule button.danger"), json!(true));
    check_axe(&s, axe.as_ref(), "a rule, delete opened");
    d.click("#delete-rule button.danger");
    d.wait_for_page(
        "the rules after the delete",
        |u| !u.ends_with("team.frob"),
        "h1",
    );
}
