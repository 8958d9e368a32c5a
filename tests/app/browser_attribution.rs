//! In a real browser (issue 31 item 3): what a token session does is named as the token's, a
//! fix "by token browser" and a history entry "token browser assigned browser", the word drawn
//! by the stylesheet before the name (the pages' text keeps the name alone, which is what
//! filters and older tests read).

use serde_json::json;

use crate::browser::{LOG, signed_in_browser};

/// The text Chromium draws for the first element `css` selects: its `::before` content, then
/// its text.
const DRAWN: &str = "const e = document.querySelector(arguments[0]);\
    const before = getComputedStyle(e, '::before').content;\
    return [before, e.textContent];";

#[test]
fn a_token_sessions_fix_and_history_read_as_the_tokens_in_a_real_browser() {
    let test = "a_token_sessions_fix_and_history_read_as_the_tokens_in_a_real_browser";
    let Some(s) = signed_in_browser(test) else {
        return;
    };
    let d = &s.d;
    s.paste(LOG);
    d.click(".columns a[href^='/groups/']");
    d.wait_for_page("the group page", |u| u.contains("/groups/"), "#group-state");
    d.type_into("#fix-summary", "lower the batch size to 16");
    d.click("form.fix-form button[type=submit]");
    d.wait_for_page(
        "the group with its fix",
        |u| u.contains("#fixes"),
        ".fixes .who",
    );
    assert_eq!(
        d.run_js(DRAWN, json!(["ul.fixes .who"])),
        json!(["\"token \"", "browser"])
    );
    // Assigned to the token itself from the state form: the history names the token.
    d.run_js(
        "document.querySelector('form.triage-form select[name=assignee]').value = 'browser';\
         return true;",
        json!([]),
    );
    d.click("form.triage-form button[type=submit]");
    d.wait_for_page(
        "the group with its history",
        |u| u.contains("#triage"),
        "ol.history .who",
    );
    assert_eq!(
        d.run_js(DRAWN, json!(["ol.history .who"])),
        json!(["\"token \"", "browser"])
    );
    assert!(
        d.text("ol.history li").contains("browser assigned browser"),
        "{}",
        d.text("ol.history li")
    );
}
