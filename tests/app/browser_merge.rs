//! Merging groups in a real browser (issue 30 item 3): two pastes of one failure raised in two
//! ops are two groups; the second report's "Similar failures" offers the first group's merge,
//! a person opens the offer and clicks it, and lands on the report's group, whose page names
//! the merged group and whose history records who merged it. The old group's link leads there
//! too. Each page passes axe-core (no serious or critical violation) where axe-core is
//! installed.

use serde_json::json;

use crate::browser::{axe_source, signed_in_browser};

/// One failure (a tensor on the wrong device) raised in op `op`: a group per op.
fn device_log(op: &str) -> String {
    format!(
        "step 12 loss 0.93\nTraceback (most recent call last):\n  File \"train.py\", line 41, \
         in <module>\n    out = model(batch)\nRuntimeError: Expected all tensors to be on the \
         same device, but found at least two devices, cuda:0 and cpu! (when checking argument \
         for argument index in method wrapper_CUDA__{op})\n"
    )
}

#[test]
fn a_similar_failure_is_merged_from_the_report_page_in_a_real_browser() {
    let test = "a_similar_failure_is_merged_from_the_report_page_in_a_real_browser";
    let Some(s) = signed_in_browser(test) else {
        return;
    };
    let axe = axe_source(test);
    let d = &s.d;
    let first = s.paste(&device_log("index_select"));
    let group_of = || {
        d.run_js(
            "return document.querySelector(\".columns a[href^='/groups/']\").getAttribute('href');",
            json!([]),
        )
        .as_str()
        .expect("the report's group link")
        .to_owned()
    };
    let merged_group = group_of();
    s.paste(&device_log("gather"));
    let target_group = group_of();
    assert_ne!(merged_group, target_group, "two ops, two groups");
    let merged_id = merged_group.trim_start_matches("/groups/").to_owned();
    let target_id = target_group.trim_start_matches("/groups/").to_owned();

    // The offer is folded away until opened; opened, it names both groups.
    let offer = format!("ul.similar details#merge-{merged_id}");
    assert_eq!(d.count(&offer), 1, "the first group is offered for merging");
    assert_eq!(
        d.run_js(
            "return document.querySelector(arguments[0]).open;",
            json!([offer])
        ),
        json!(false)
    );
    d.click(&format!("{offer} summary"));
    let button = format!("{offer} form.merge-form button");
    assert_eq!(
        d.text(&button),
        format!("Merge group {merged_id} into group {target_id}")
    );
    if let Some(axe) = &axe {
        assert_eq!(
            d.axe(axe),
            Vec::<String>::new(),
            "the report page, offer open"
        );
    }
    d.run_js(
        "document.querySelector(arguments[0]).scrollIntoView(); return true;",
        json!([offer]),
    );
    d.screenshot("report-merge-offer");
    d.click(&button);
    let target_url = format!("{}{target_group}", s.base);
    d.wait_for_page(
        "the group merged into",
        |url| url.starts_with(&target_url),
        "ol.history li",
    );
    let newest = d.text("ol.history li");
    assert!(
        newest.contains("browser")
            && newest.contains(&format!("merged group {merged_id} into group {target_id}")),
        "{newest}"
    );
    assert!(
        d.text("p.meta").starts_with("2 reports"),
        "{}",
        d.text("p.meta")
    );
    assert!(
        d.text("#merged-groups")
            .contains(&format!("group {merged_id}")),
        "{}",
        d.text("#merged-groups")
    );
    if let Some(axe) = &axe {
        assert_eq!(d.axe(axe), Vec::<String>::new(), "the group merged into");
    }
    d.screenshot("group-after-merge");

    // The merged group's link, and the first report's group link, lead to the same group.
    d.go(&format!("{}{merged_group}", s.base));
    d.wait_for_page(
        "the merged group's link",
        |url| url.starts_with(&target_url),
        "#merged-notice",
    );
    assert!(
        d.text("#merged-notice")
            .contains(&format!("Group {merged_id} (")),
        "{}",
        d.text("#merged-notice")
    );
    if let Some(axe) = &axe {
        assert_eq!(
            d.axe(axe),
            Vec::<String>::new(),
            "the group with the notice"
        );
    }
    d.go(&first);
    d.wait_for_page("the first report", |_| true, "h1 .cat");
    assert_eq!(group_of(), target_group);
    assert_eq!(
        d.count("ul.similar > li"),
        0,
        "no longer a similar group: the same"
    );
}
