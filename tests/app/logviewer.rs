//! The report page's log viewer on a long log (issue 19): finding links open the page that
//! holds their line, findings fold by rule, a server-side find and a findings-only view.

use axum::http::StatusCode;
use gpu_triage::auth::Scope;

use crate::browse::{attr, page, sign_in, texts};
use crate::support::TestApp;

/// 5,000 lines: a generic device-side assert at 31, 1000, 2000 and 3000, the specific index
/// assert (the root cause) at 4,700.
fn long_log() -> String {
    let mut log = String::new();
    for i in 1..=5000 {
        let line = match i {
            31 | 1000 | 2000 | 3000 => {
                "RuntimeError: CUDA error: device-side assert triggered".to_owned()
            }
            4700 => "../aten/src/ATen/native/cuda/Indexing.cu:1231: indexSelectLargeIndex: block: [1,0,0], thread: [0,0,0] Assertion `srcIndex < srcSelectDimSize` failed.".to_owned(),
            _ if i % 7 == 0 => format!("step {i} LOSS 0.{i:04} lr 3e-4"),
            _ => format!("step {i} loss 0.{i:04} lr 3e-4"),
        };
        log.push_str(&line);
        log.push('\n');
    }
    log
}

fn numbers(html: &str) -> Vec<usize> {
    texts(html, "pre.log a.ln")
        .iter()
        .map(|n| n.parse().unwrap())
        .collect()
}

#[tokio::test]
async fn finding_links_open_the_page_holding_their_line_and_findings_fold_by_rule() {
    let app = TestApp::spawn().await;
    let token = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let res = app
        .upload(
            &token,
            &[("log", Some("long.log"), long_log().as_bytes())],
            None,
        )
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let id = res.json()["id"].as_i64().unwrap();
    let b = sign_in(&app, &token).await;
    let html = page(&app, &b.cookie, &format!("/reports/{id}")).await.body;
    // The default page is around the root cause; line 31 is not on it.
    assert!(numbers(&html).contains(&4700));
    assert!(!numbers(&html).contains(&31));
    // Findings: one entry per rule, the root cause first; the repeated assert folded.
    let items = texts(&html, ".findings > li");
    assert_eq!(items.len(), 2, "{items:?}");
    assert!(items[0].contains("root cause") && items[0].contains("line 4700"));
    assert!(
        items[1].contains("line 31") && items[1].contains("×4"),
        "{items:?}"
    );
    assert_eq!(
        texts(&html, ".findings > li .more-lines a"),
        ["1000", "2000", "3000"]
    );
    let link = attr(&html, ".findings > li.finding-symptom > a", "href").unwrap();
    assert_eq!(link, format!("/reports/{id}?line=31#L31"));
    // Following it lands on a page that holds the line, with its anchor.
    let path = link.split('#').next().unwrap();
    let target = page(&app, &b.cookie, path).await;
    assert_eq!(target.status, StatusCode::OK);
    assert!(
        numbers(&target.body).contains(&31),
        "{:?}",
        numbers(&target.body).first()
    );
    assert_eq!(texts(&target.body, "pre.log #L31").len(), 1);
    // The root-cause link in the header works from any page the same way.
    assert_eq!(
        attr(&target.body, "p.root a", "href").as_deref(),
        Some(&*format!("/reports/{id}?line=4700#L4700"))
    );
}

#[tokio::test]
async fn find_in_log_and_the_findings_only_view_show_just_those_lines() {
    let app = TestApp::spawn().await;
    let token = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let res = app
        .upload(
            &token,
            &[("log", Some("long.log"), long_log().as_bytes())],
            None,
        )
        .await;
    let id = res.json()["id"].as_i64().unwrap();
    let b = sign_in(&app, &token).await;
    // A find is case-insensitive and counts every match; a line links to itself in context.
    let found = page(&app, &b.cookie, &format!("/reports/{id}?grep=LOSS%200.49")).await;
    assert_eq!(found.status, StatusCode::OK);
    let shown = numbers(&found.body);
    assert_eq!(shown, (4900..=4999).collect::<Vec<_>>());
    let heading = texts(&found.body, "#log h2").join("");
    assert!(
        heading.contains("100 lines of 5000 contain “LOSS 0.49”"),
        "{heading}"
    );
    assert_eq!(
        attr(&found.body, "pre.log a.ln", "href").as_deref(),
        Some(&*format!("/reports/{id}?line=4900#L4900"))
    );
    assert_eq!(
        attr(&found.body, "input#grep", "value").as_deref(),
        Some("LOSS 0.49")
    );
    // More matches than shown: the first 400, and the count of all.
    let many = page(&app, &b.cookie, &format!("/reports/{id}?grep=step")).await;
    assert_eq!(numbers(&many.body).len(), 400);
    assert!(
        texts(&many.body, "#log h2")
            .join("")
            .contains("4995 lines of 5000 contain “step”, the first 400 shown")
    );
    // Nothing found is an empty pane, not an error.
    let none = page(&app, &b.cookie, &format!("/reports/{id}?grep=nowhere")).await;
    assert_eq!(none.status, StatusCode::OK);
    assert!(numbers(&none.body).is_empty());
    // The findings only: the five finding lines, the root cause highlighted.
    let only = page(&app, &b.cookie, &format!("/reports/{id}?view=findings")).await;
    assert_eq!(numbers(&only.body), [31, 1000, 2000, 3000, 4700]);
    assert_eq!(texts(&only.body, "pre.log .hl a.ln"), ["4700"]);
    // Bad parameters are a clear 400.
    let bad = page(&app, &b.cookie, &format!("/reports/{id}?view=everything")).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(
        bad.body.contains("view: expected log or findings"),
        "{}",
        bad.body
    );
    let long = "x".repeat(201);
    let bad = page(&app, &b.cookie, &format!("/reports/{id}?grep={long}")).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}

/// Find like a CI log view (issue 30 item 6): matches marked, the position among them in the
/// URL with previous/next links, and a clear empty state.
#[tokio::test]
async fn a_find_marks_its_matches_and_steps_through_them_with_the_position_in_the_url() {
    let app = TestApp::spawn().await;
    let token = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let res = app
        .upload(
            &token,
            &[("log", Some("long.log"), long_log().as_bytes())],
            None,
        )
        .await;
    let id = res.json()["id"].as_i64().unwrap();
    let b = sign_in(&app, &token).await;
    // "LOSS 0.49" matches 100 lines (4900-4999) in either case.
    let first = page(&app, &b.cookie, &format!("/reports/{id}?grep=loss%200.49")).await;
    assert_eq!(
        texts(&first.body, "#find-position").concat(),
        "Match 1 of 100"
    );
    assert_eq!(texts(&first.body, "pre.log .current a.ln"), ["4900"]);
    let marks = texts(&first.body, "pre.log mark");
    assert_eq!(marks.len(), 100);
    assert!(
        marks.iter().all(|m| m.eq_ignore_ascii_case("loss 0.49")),
        "{marks:?}"
    );
    assert!(attr(&first.body, "a[rel=prev]", "href").is_none());
    let next = attr(&first.body, "nav.find-nav a[rel=next]", "href").unwrap();
    assert_eq!(next, format!("/reports/{id}?grep=loss+0.49&hit=2#L4901"));
    // The position is in the URL: following it makes the second match current.
    let second = page(&app, &b.cookie, next.split('#').next().unwrap()).await;
    assert_eq!(
        texts(&second.body, "#find-position").concat(),
        "Match 2 of 100"
    );
    assert_eq!(texts(&second.body, "pre.log .current a.ln"), ["4901"]);
    assert_eq!(
        attr(&second.body, "nav.find-nav a[rel=prev]", "href").unwrap(),
        format!("/reports/{id}?grep=loss+0.49&hit=1#L4900")
    );
    // Past the end: the last match.
    let last = page(
        &app,
        &b.cookie,
        &format!("/reports/{id}?grep=loss%200.49&hit=999"),
    )
    .await;
    assert_eq!(
        texts(&last.body, "#find-position").concat(),
        "Match 100 of 100"
    );
    assert!(attr(&last.body, "nav.find-nav a[rel=next]", "href").is_none());
    // More matches than shown: the count says so.
    let many = page(&app, &b.cookie, &format!("/reports/{id}?grep=step")).await;
    assert_eq!(
        texts(&many.body, "#find-position").concat(),
        "Match 1 of 400 shown (4995 lines match)"
    );
    // Nothing found: a sentence, no empty log pane.
    let none = page(&app, &b.cookie, &format!("/reports/{id}?grep=nowhere")).await;
    assert!(
        texts(&none.body, "#find-empty")
            .concat()
            .contains("No line contains “nowhere”")
    );
    assert!(texts(&none.body, "pre.log").is_empty());
}

/// Different finds in one multi-chunk log at once (they share readings of it, boarding a pass
/// that is already under way): each answers what a line-by-line search of the log gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_finds_at_once_each_answer_as_a_find_alone_would() {
    let app = TestApp::spawn().await;
    let token = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    // About 3.5 MiB: four chunks of the stored log.
    let lines: Vec<String> = (1..=45_000)
        .map(|i| match i {
            30_000 => "RuntimeError: CUDA error: an illegal memory access was encountered".into(),
            _ => format!(
                "2026-07-30T03:36:29.{i:07}Z step {i} loss=0.{i} Tokens/s {}",
                i % 3
            ),
        })
        .collect();
    let log = lines.join("\n") + "\n";
    let res = app
        .upload(&token, &[("log", Some("big.log"), log.as_bytes())], None)
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let id = res.json()["id"].as_i64().unwrap();
    let b = sign_in(&app, &token).await;
    let texts_: Vec<String> = (0..24)
        .map(|k| match k % 4 {
            0 => format!("step {}", 1000 + k * 1009),
            1 => format!("TOKENS/S {}", k % 3),
            2 => format!("9z step 4{k}"),
            _ => ["illegal MEMORY", "nowhere at all"][k % 2].to_owned(),
        })
        .collect();
    let finds: Vec<_> = texts_
        .iter()
        .map(|text| {
            let (router, cookie) = (app.router.clone(), b.cookie.clone());
            let path = format!(
                "/reports/{id}?grep={}",
                text.replace(' ', "%20").replace('/', "%2F")
            );
            tokio::spawn(async move {
                let req = axum::http::Request::get(path)
                    .header("cookie", cookie)
                    .body(axum::body::Body::empty())
                    .unwrap();
                crate::support::send_to(router, req).await
            })
        })
        .collect();
    for (text, find) in texts_.iter().zip(finds) {
        let got = find.await.unwrap();
        assert_eq!(got.status, StatusCode::OK, "{text}: {}", got.body);
        let want: Vec<usize> = lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.to_lowercase().contains(&text.to_lowercase()))
            .map(|(i, _)| i + 1)
            .collect();
        assert_eq!(
            numbers(&got.body),
            want.iter().copied().take(400).collect::<Vec<_>>(),
            "{text}"
        );
        let heading = texts(&got.body, "#log h2").join("");
        if !want.is_empty() {
            assert!(
                heading.contains(&format!("{} line", want.len()))
                    && heading.contains("of 45000 contain"),
                "{text}: {heading}"
            );
        }
    }
}

#[tokio::test]
async fn the_reports_list_filters_by_category_and_project_and_pages() {
    let app = TestApp::spawn().await;
    let token = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let logs = [
        (
            "NLP",
            "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
        ),
        (
            "nlp",
            "step 1\nRuntimeError: CUDA out of memory. Tried to allocate 4.00 GiB\n",
        ),
        ("vision", "IndexError: Target 10 is out of bounds.\n"),
    ];
    let mut ids = Vec::new();
    for (project, log) in logs {
        let meta = serde_json::json!({ "project": project }).to_string();
        let res = app
            .upload(
                &token,
                &[
                    ("log", Some("a.log"), log.as_bytes()),
                    ("meta", None, meta.as_bytes()),
                ],
                None,
            )
            .await;
        assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
        ids.push(res.json()["id"].as_i64().unwrap());
    }
    let b = sign_in(&app, &token).await;
    let links = |html: &str| texts(html, "table.list td:first-child a");
    let hrefs = |html: &str| -> Vec<String> {
        let doc = scraper::Html::parse_document(html);
        let sel = scraper::Selector::parse("table.list td:first-child a").unwrap();
        doc.select(&sel)
            .filter_map(|e| e.value().attr("href").map(str::to_owned))
            .collect()
    };
    let all = page(&app, &b.cookie, "/reports").await;
    assert_eq!(all.status, StatusCode::OK);
    assert_eq!(links(&all.body).len(), 3);
    assert_eq!(
        hrefs(&all.body),
        ids.iter()
            .rev()
            .map(|i| format!("/reports/{i}"))
            .collect::<Vec<_>>(),
        "newest first"
    );
    let oom = page(
        &app,
        &b.cookie,
        "/reports?category=out_of_memory&project=Nlp",
    )
    .await;
    assert_eq!(
        hrefs(&oom.body),
        [
            format!("/reports/{}", ids[1]),
            format!("/reports/{}", ids[0])
        ]
    );
    // Pages of one, with links that keep the filters.
    let first = page(
        &app,
        &b.cookie,
        "/reports?category=out_of_memory&per_page=1",
    )
    .await;
    assert_eq!(hrefs(&first.body), [format!("/reports/{}", ids[1])]);
    let next = attr(&first.body, "a[rel=next]", "href").unwrap();
    assert_eq!(next, "/reports?category=out_of_memory&per_page=1&page=2");
    let second = page(&app, &b.cookie, &next).await;
    assert_eq!(hrefs(&second.body), [format!("/reports/{}", ids[0])]);
    assert!(attr(&second.body, "a[rel=next]", "href").is_none());
    assert!(attr(&second.body, "a[rel=prev]", "href").is_some());
    // Bad filters are a clear 400.
    let bad = page(&app, &b.cookie, "/reports?category=oom").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(bad.body.contains("unknown category"), "{}", bad.body);
    let bad = page(&app, &b.cookie, "/reports?page=0").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_search_hit_in_the_log_opens_the_lines_that_matched() {
    let app = TestApp::spawn().await;
    let token = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let mut log = long_log();
    log.insert_str(0, "loading the frobnicator checkpoint shard 77\n");
    let res = app
        .upload(&token, &[("log", Some("long.log"), log.as_bytes())], None)
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let id = res.json()["id"].as_i64().unwrap();
    let b = sign_in(&app, &token).await;
    let found = page(&app, &b.cookie, "/search?q=frobnicator").await;
    assert_eq!(found.status, StatusCode::OK);
    let href = attr(&found.body, ".hits .hit-report a.match-link", "href").expect("a report hit");
    assert!(
        href.starts_with(&format!("/reports/{id}?grep=")) && href.ends_with("#log"),
        "{href}"
    );
    // Following it shows the line that matched (line 1), which links into its page.
    let opened = page(&app, &b.cookie, href.trim_end_matches("#log")).await;
    assert_eq!(opened.status, StatusCode::OK);
    assert_eq!(numbers(&opened.body), vec![1], "{href}");
    assert_eq!(
        attr(&opened.body, "pre.log a.ln", "href").as_deref(),
        Some(format!("/reports/{id}?line=1#L1").as_str())
    );
}
