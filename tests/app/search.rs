//! Search over what people remember (issue 18 item 1), against the real database: logs uploaded
//! through the API are found by traceback file names, `file.py:NN`, functions, words only in the
//! log body, commit, branch, job URL and fix text; misspellings are corrected; root-cause matches
//! rank first; one row per group with its count, state and culprit; counts, pages, snippets and
//! filters; the portal page shows all of it.

use axum::http::StatusCode;
use gpu_triage::auth::Scope;
use serde_json::Value;

use crate::browse::{attr, page, sign_in, texts};
use crate::support::TestApp;

/// An illegal memory access with a traceback through the user's code, a model name only in the
/// log's first line, and CI metadata.
const IMA_LOG: &[u8] = b"2026-07-30T03:36:29.1Z INFO starting run 7 model=resnet50 batch_size=64
epoch 1 step 10 loss=2.31
Traceback (most recent call last):
  File \"/srv/vision/train.py\", line 57, in <module>
    loss.item()
  File \"/srv/vision/model.py\", line 23, in forward
    x = self.emb(idx)
RuntimeError: CUDA error: an illegal memory access was encountered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
";
const IMA_META: &[u8] = br#"{"project":"Vision","branch":"feature/fused-attn","commit":"4f9c2a17d3e8b5a6c0f1e2d3c4b5a6978899aabb","job_url":"https://ci.example.com/vision/-/jobs/4711"}"#;

const OOM_LOG: &[u8] = b"INFO finetuning llama-7b on 8 GPUs
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.06 GiB is free.
";

/// An index error whose log body happens to say "out of memory".
const OOB_LOG: &[u8] = b"INFO host check: the data loader is not running out of memory (12 GiB free)
/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1231: indexSelectSmallIndex: block: [3,0,0], thread: [1,0,0] Assertion `srcIndex < srcSelectDimSize` failed.
RuntimeError: CUDA error: device-side assert triggered
";

/// Uploads `log` with `meta` and returns the upload's answer.
async fn upload(app: &TestApp, token: &str, name: &str, log: &[u8], meta: &[u8]) -> Value {
    let res = app
        .upload(
            token,
            &[("log", Some(name), log), ("meta", None, meta)],
            None,
        )
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    res.json()
}

/// `GET /api/v1/search` with `query` (already URL-encoded), asserting 200.
async fn search(app: &TestApp, token: &str, query: &str) -> Value {
    let res = app.get_as(token, &format!("/api/v1/search?{query}")).await;
    assert_eq!(res.status, StatusCode::OK, "{query}: {}", res.body);
    res.json()
}

fn results(found: &Value) -> &Vec<Value> {
    found["results"].as_array().expect("results")
}

/// The report ids among the results, in order.
fn report_ids(found: &Value) -> Vec<i64> {
    results(found)
        .iter()
        .filter(|r| r["kind"] == "report")
        .map(|r| r["id"].as_i64().expect("id"))
        .collect()
}

/// The marked text of the result for report `id`.
fn marks_of(found: &Value, id: i64) -> Vec<String> {
    results(found)
        .iter()
        .filter(|r| r["kind"] == "report" && r["id"] == id)
        .flat_map(|r| {
            r["snippet"]["segments"]
                .as_array()
                .expect("segments")
                .clone()
        })
        .filter(|s| s["marked"] == true)
        .map(|s| s["text"].as_str().expect("text").to_lowercase())
        .collect()
}

#[tokio::test]
async fn search_finds_reports_by_frames_functions_log_words_metadata_and_fixes() {
    let app = TestApp::spawn().await;
    let t = app.token("root", &[Scope::Admin]).await;
    let ima = upload(&app, &t, "job.log", IMA_LOG, IMA_META).await;
    let oom = upload(&app, &t, "oom.log", OOM_LOG, br#"{"project":"nlp"}"#).await;
    let ima_id = ima["id"].as_i64().unwrap();
    let oom_id = oom["id"].as_i64().unwrap();

    for (query, mark) in [
        ("q=train.py", "train.py"),
        ("q=model.py%3A23", "model.py"),
        ("q=loss.item", "loss.item"),
        ("q=self.emb", "self.emb"),
        ("q=resnet50", "resnet50"),
        ("q=feature%2Ffused-attn", "feature/fused-attn"),
        (
            "q=4f9c2a17d3e8b5a6c0f1e2d3c4b5a6978899aabb",
            "4f9c2a17d3e8b5a6c0f1e2d3c4b5a6978899aabb",
        ),
        // A short commit, as people paste it: a literal prefix of the stored one.
        ("q=4f9c2a1", "4f9c2a1"),
        (
            "q=https%3A%2F%2Fci.example.com%2Fvision%2F-%2Fjobs%2F4711",
            "ci.example.com/vision/-/jobs/4711",
        ),
    ] {
        let found = search(&app, &t, query).await;
        assert_eq!(report_ids(&found), vec![ima_id], "{query}: {found}");
        let hit = &results(&found)[0];
        assert_eq!(hit["matched"], "log", "{query}: {found}");
        let marks = marks_of(&found, ima_id);
        assert!(
            marks.iter().any(|m| m.contains(mark)),
            "{query}: {mark} not marked in {marks:?}"
        );
        assert_eq!(found["total"], 1, "{query}");
        assert_eq!(found["total_exact"], true);
    }

    // Fix text: the fix is a hit of its own, linking to its group.
    let fix = app
        .post_json(
            &t,
            &format!("/api/v1/groups/{}/fixes", oom["group_id"]),
            &serde_json::json!({"summary": "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True and halve the batch"}),
        )
        .await;
    assert_eq!(fix.status, StatusCode::CREATED, "{}", fix.body);
    let found = search(&app, &t, "q=halve+the+batch").await;
    let hits = results(&found);
    assert_eq!(hits.len(), 1, "{found}");
    assert_eq!(hits[0]["kind"], "fix");
    assert_eq!(hits[0]["matched"], "fix");
    assert_eq!(hits[0]["group_id"], oom["group_id"]);
    assert!(
        hits[0]["url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/groups/{}", oom["group_id"]))
    );
    let found = search(&app, &t, "q=expandable_segments").await;
    assert!(
        results(&found).iter().any(|r| r["kind"] == "fix"),
        "{found}"
    );

    // The root cause ranks first, and its snippet is the root-cause line with the words marked.
    let found = search(&app, &t, "q=out+of+memory").await;
    let first = &results(&found)[0];
    assert_eq!(first["matched"], "root_cause", "{found}");
    assert_eq!(report_ids(&found)[0], oom_id);
    let marks = marks_of(&found, oom_id);
    assert!(marks.contains(&"out of memory".to_owned()), "{marks:?}");
    let text = results(&found)
        .iter()
        .find(|r| r["kind"] == "report" && r["id"] == oom_id)
        .unwrap()["snippet"]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.contains("CUDA out of memory. Tried to allocate"),
        "{text}"
    );
}

#[tokio::test]
async fn misspelled_words_are_corrected_or_suggested() {
    let app = TestApp::spawn().await;
    let t = app.token("root", &[Scope::Admin]).await;
    let ima = upload(&app, &t, "job.log", IMA_LOG, IMA_META).await;
    let oom = upload(&app, &t, "oom.log", OOM_LOG, br#"{"project":"nlp"}"#).await;

    // Nothing matches the words asked: the corrected words are searched, and the answer says so.
    let found = search(&app, &t, "q=ilegal+memory+acess").await;
    assert_eq!(found["query"], "ilegal memory acess");
    assert_eq!(found["corrected"], "illegal memory access", "{found}");
    assert_eq!(found["suggestion"], Value::Null);
    assert_eq!(report_ids(&found), vec![ima["id"].as_i64().unwrap()]);
    let found = search(&app, &t, "q=out+of+memroy").await;
    assert_eq!(found["corrected"], "out of memory", "{found}");
    assert_eq!(report_ids(&found), vec![oom["id"].as_i64().unwrap()]);

    // The words asked find something: the correction is offered, not imposed.
    let found = search(&app, &t, "q=resnet50+or+forwrd").await;
    assert_eq!(found["corrected"], Value::Null, "{found}");
    assert_eq!(found["suggestion"], "resnet50 or forward", "{found}");
    assert_eq!(report_ids(&found), vec![ima["id"].as_i64().unwrap()]);

    // Known words and words with nothing near them get no correction.
    let found = search(&app, &t, "q=resnet50").await;
    assert_eq!(found["suggestion"], Value::Null);
    let found = search(&app, &t, "q=zzqxjv").await;
    assert_eq!(found["suggestion"], Value::Null);
    assert_eq!(found["corrected"], Value::Null);
    assert_eq!(found["total"], 0);
}

#[tokio::test]
async fn root_cause_matches_outrank_newer_log_mentions_and_filters_take_any_case() {
    let app = TestApp::spawn().await;
    let t = app.token("root", &[Scope::Admin]).await;
    let oom = upload(&app, &t, "oom.log", OOM_LOG, br#"{"project":"nlp"}"#).await;
    // Newer, and its log says "out of memory", but its root cause is an index error.
    let oob = upload(&app, &t, "oob.log", OOB_LOG, br#"{"project":"Vision"}"#).await;
    assert_eq!(oob["classification"]["category"], "out_of_bounds");

    let found = search(&app, &t, "q=out+of+memory").await;
    let reports = report_ids(&found);
    assert_eq!(
        reports,
        vec![oom["id"].as_i64().unwrap(), oob["id"].as_i64().unwrap()],
        "{found}"
    );
    let oob_hit = results(&found)
        .iter()
        .find(|r| r["kind"] == "report" && r["id"] == oob["id"])
        .unwrap();
    assert_eq!(oob_hit["matched"], "log");
    assert!(
        marks_of(&found, oob["id"].as_i64().unwrap()).contains(&"out of memory".to_owned()),
        "{found}"
    );
    // Within a tier the newest comes first: the group of the OOM report is a root-cause hit
    // too, and nothing of a lower tier comes before it.
    let tiers: Vec<&str> = results(&found)
        .iter()
        .map(|r| r["matched"].as_str().unwrap())
        .collect();
    let order = ["root_cause", "fix", "symptom", "log"];
    let ranks: Vec<usize> = tiers
        .iter()
        .map(|t| order.iter().position(|o| o == t).unwrap())
        .collect();
    assert!(ranks.windows(2).all(|w| w[0] <= w[1]), "{tiers:?}");

    // Category and project filters in any letter case.
    for query in [
        "q=memory&category=OUT_OF_MEMORY&project=NLP",
        "q=memory&category=out_of_memory&project=nlp",
        "q=memory&category=Out_Of_Memory",
    ] {
        let found = search(&app, &t, query).await;
        assert_eq!(
            report_ids(&found),
            vec![oom["id"].as_i64().unwrap()],
            "{query}: {found}"
        );
        assert!(
            results(&found)
                .iter()
                .all(|r| r["category"] == "out_of_memory"),
            "{query}"
        );
        assert_eq!(found["category"], "out_of_memory");
    }
    let found = search(&app, &t, "q=memory&project=VISION").await;
    assert_eq!(report_ids(&found), vec![oob["id"].as_i64().unwrap()]);
}

/// An out-of-memory raised in `job{n}.py`: each `n` is another program, so another group.
fn oom_in(n: usize, run: usize) -> String {
    format!(
        "run {run} starting\nTraceback (most recent call last):\n  \
         File \"/srv/jobs/job{n}.py\", line {}, in step\n    y = model(x)\n\
         torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {run}.00 MiB. GPU 0 has a \
         total capacity of 79.15 GiB of which 1.06 GiB is free.\n",
        10 + run
    )
}

#[tokio::test]
async fn search_answers_one_row_per_group_with_its_count_state_and_culprit() {
    let app = TestApp::spawn().await;
    let t = app.token("root", &[Scope::Admin]).await;
    // 23 programs run out of memory; each fails twice (another size, another line): 46
    // reports in 23 groups.
    let mut groups: Vec<i64> = Vec::new();
    for n in 0..23 {
        for run in 0..2 {
            let log = oom_in(n, run);
            let up = upload(&app, &t, "oom.log", log.as_bytes(), br#"{"project":"nlp"}"#).await;
            if run == 0 {
                groups.push(up["group_id"].as_i64().unwrap());
            } else {
                assert_eq!(up["group_id"], groups[n], "the re-run joins its group");
            }
        }
    }
    let resolved = crate::triage::patch(
        &app,
        &t,
        groups[22],
        serde_json::json!({"state": "resolved"}),
    )
    .await;
    assert_eq!(resolved.status, StatusCode::OK, "{}", resolved.body);
    let mut seen: Vec<i64> = Vec::new();
    let mut page_no = Some(1);
    let mut pages = 0;
    while let Some(n) = page_no {
        let found = search(&app, &t, &format!("q=out+of+memory&per_page=10&page={n}")).await;
        assert_eq!(found["total"], 23, "{found}");
        assert_eq!(found["total_exact"], true);
        assert_eq!(found["page"], n);
        assert_eq!(
            found["prev_page"],
            if n > 1 {
                Value::from(n - 1)
            } else {
                Value::Null
            }
        );
        for r in results(&found) {
            let group = &r["group"];
            assert_eq!(group["id"], r["group_id"], "{r}");
            assert_eq!(group["report_count"], 2, "{r}");
            let i = groups.iter().position(|g| *g == group["id"]).unwrap();
            assert_eq!(group["culprit"], format!("job{i}.py:step"), "{r}");
            let state = if i == 22 { "resolved" } else { "open" };
            assert_eq!(group["state"], state, "{r}");
            assert!(
                (group["url"].as_str().unwrap()).ends_with(&format!("/groups/{}", group["id"]))
            );
            // The row's match is the group's newest report, its root cause marked.
            assert_eq!(r["kind"], "report", "{r}");
            assert_eq!(r["matched"], "root_cause", "{r}");
            assert!(
                r["snippet"]["segments"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|s| {
                        s["marked"] == true
                            && s["text"]
                                .as_str()
                                .unwrap()
                                .eq_ignore_ascii_case("out of memory")
                    })
            );
            seen.push(group["id"].as_i64().unwrap());
        }
        page_no = found["next_page"].as_u64();
        pages += 1;
        assert!(pages <= 3, "{found}");
    }
    assert_eq!(pages, 3);
    // Every group once, the most recently failing first, no gaps.
    let mut newest_first = groups.clone();
    newest_first.reverse();
    assert_eq!(seen, newest_first);

    // A page past the end is empty, not an error; a page size out of bounds is.
    let past = search(&app, &t, "q=out+of+memory&per_page=10&page=7").await;
    assert!(results(&past).is_empty());
    assert_eq!(past["next_page"], Value::Null);
    assert_eq!(past["total"], 23);
    let bad = app
        .get_as(&t, "/api/v1/search?q=out+of+memory&per_page=101")
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.error_code(), "bad_query");
    assert!(bad.body.contains("per_page"), "{}", bad.body);
}

#[tokio::test]
async fn the_search_page_shows_counts_corrections_marks_and_page_links() {
    let app = TestApp::spawn().await;
    let t = app.token("alice", &[Scope::Ingest, Scope::Read]).await;
    let b = sign_in(&app, &t).await;
    let ima = upload(&app, &t, "job.log", IMA_LOG, IMA_META).await;
    // The same job failing again (its code moved a few lines): one group with the first.
    let again = String::from_utf8_lossy(IMA_LOG).replace("line 57", "line 61");
    let repeat = upload(&app, &t, "again.log", again.as_bytes(), b"{}").await;
    assert_eq!(repeat["group_id"], ima["group_id"]);
    // Four other programs failing the same way: four more groups.
    for run in 0..4 {
        let log = format!(
            "run {run}\nTraceback (most recent call last):\n  \
             File \"/srv/tool{run}/main.py\", line 6{run}, in <module>\n    loss.item()\n  \
             File \"/srv/tool{run}/net{run}.py\", line 23, in forward\n    x = self.emb(idx)\n\
             RuntimeError: CUDA error: an illegal memory access was encountered\n"
        );
        upload(&app, &t, "other.log", log.as_bytes(), b"{}").await;
    }

    let res = page(&app, &b.cookie, "/search?q=ilegal+memory+acess&per_page=2").await;
    assert_eq!(res.status, StatusCode::OK);
    let corrected = texts(&res.body, "p.corrected");
    assert_eq!(corrected.len(), 1, "{}", res.body);
    assert!(corrected[0].contains("Showing results for illegal memory access"));
    assert!(corrected[0].contains("no results for ilegal memory acess"));
    assert_eq!(
        attr(&res.body, "p.corrected a", "href").as_deref(),
        Some("/search?q=illegal+memory+access&per_page=2")
    );
    // 6 reports in 5 groups: a count of groups, two rows per page, marks.
    assert_eq!(texts(&res.body, "p.count"), vec!["5 results"]);
    assert_eq!(texts(&res.body, ".hit").len(), 2);
    // Each row is a group: its title links to it, with its state, culprit and report count.
    assert_eq!(texts(&res.body, ".hit .state"), vec!["open", "open"]);
    assert_eq!(
        texts(&res.body, ".hit code.culprit"),
        vec!["net3.py:forward", "net2.py:forward"]
    );
    assert_eq!(
        texts(&res.body, ".hit .reports"),
        vec!["1 report", "1 report"]
    );
    let marks = texts(&res.body, ".hit mark");
    assert!(
        marks
            .iter()
            .any(|m| m.eq_ignore_ascii_case("illegal memory access")),
        "{marks:?}"
    );
    assert_eq!(
        attr(&res.body, "a[rel=next]", "href").as_deref(),
        Some("/search?q=illegal+memory+access&page=2&per_page=2")
    );
    assert_eq!(attr(&res.body, "a[rel=prev]", "href"), None);

    let second = page(
        &app,
        &b.cookie,
        "/search?q=illegal+memory+access&page=2&per_page=2",
    )
    .await;
    assert_eq!(texts(&second.body, ".hit").len(), 2);
    assert_eq!(
        attr(&second.body, "a[rel=prev]", "href").as_deref(),
        Some("/search?q=illegal+memory+access&page=1&per_page=2")
    );
    assert!(attr(&second.body, "a[rel=next]", "href").is_some());

    // A page past the last result says so, with the way back.
    let past = page(
        &app,
        &b.cookie,
        "/search?q=illegal+memory+access&page=9&per_page=2",
    )
    .await;
    assert_eq!(past.status, StatusCode::OK);
    assert_eq!(texts(&past.body, ".hit").len(), 0);
    assert_eq!(texts(&past.body, "p.count"), vec!["5 results"]);

    // The first program's row counts its two reports, under its culprit.
    let last = page(
        &app,
        &b.cookie,
        "/search?q=illegal+memory+access&page=3&per_page=2",
    )
    .await;
    assert_eq!(
        texts(&last.body, ".hit code.culprit"),
        vec!["model.py:forward"]
    );
    assert_eq!(texts(&last.body, ".hit .reports"), vec!["2 reports"]);
    assert_eq!(
        attr(&last.body, ".hit a.group-link", "href"),
        Some(format!("/groups/{}", ima["group_id"]))
    );
    assert_eq!(
        texts(&past.body, "p.muted")
            .iter()
            .filter(|t| t.contains("past the last result"))
            .count(),
        1
    );
    assert!(attr(&past.body, "a[rel=prev]", "href").is_some());

    let suggested = page(&app, &b.cookie, "/search?q=resnet50+or+forwrd").await;
    assert_eq!(
        attr(&suggested.body, "p.suggestion a", "href").as_deref(),
        Some("/search?q=resnet50+or+forward")
    );
    assert_eq!(texts(&suggested.body, "p.count"), vec!["1 result"]);
    assert_eq!(
        attr(&suggested.body, ".hit a.match-link", "href"),
        // A hit in the log opens the lines with the marked words, in the group's newest
        // report that has them.
        Some(format!("/reports/{}?grep=resnet50#log", repeat["id"]))
    );
    let marks = texts(&suggested.body, ".hit mark");
    assert_eq!(marks, vec!["resnet50"]);

    // Filters are kept in the links, in the spelling the results used.
    let filtered = page(
        &app,
        &b.cookie,
        "/search?q=memory&category=ILLEGAL_MEMORY_ACCESS&per_page=1",
    )
    .await;
    assert_eq!(filtered.status, StatusCode::OK);
    assert_eq!(
        attr(&filtered.body, "a[rel=next]", "href").as_deref(),
        Some("/search?q=memory&category=illegal_memory_access&page=2&per_page=1")
    );
    assert_eq!(
        attr(
            &filtered.body,
            "select[name=category] option[selected]",
            "value"
        )
        .as_deref(),
        Some("illegal_memory_access")
    );
}
