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

fn check_axe(s: &Session, axe: Option<&String>, page: &str) {
    if let Some(axe) = axe {
        assert_eq!(s.d.axe(axe), Vec::<String>::new(), "{page}");
    }
}

/// Whether anything on the page is wider than the window.
fn overflows(s: &Session) -> Value {
    s.d.run_js(
        "return document.documentElement.scrollWidth > window.innerWidth + 1;",
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
    // One click resolves a group and comes back to the list at its row.
    let row = d.run_js(
        "return document.querySelector('tr.group-row').id;",
        json!([]),
    );
    let row = row.as_str().unwrap().to_owned();
    d.click(&format!("#{row} button[aria-label^=Resolve]"));
    d.wait_for_page(
        "the list after resolving",
        |u| u.ends_with(&format!("#{row}")),
        &format!("#{row} span.state-resolved"),
    );
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
