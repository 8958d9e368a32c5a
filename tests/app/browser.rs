//! In a real browser: headless Chromium driven over WebDriver (chromedriver) against the real
//! `serve` binary. A pasted crash log is classified with its root-cause line highlighted (a
//! screenshot of the report page goes to `target/browser-report.png` for reviewers), and the
//! knowledge base is used as a person would: a reworded failure shows the first one's fix, a
//! resolved group comes back regressed, and search finds reports by a traceback file name, a
//! misspelled error and a fix's text.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{KillOnDrop, create_token, database_url, free_port, spawn_server, wait_until};

/// How long a page may take to appear after a click (the server classifies a paste inline).
pub(crate) const PAGE_WAIT: Duration = Duration::from_secs(30);

/// A real cascade from a PyTorch run: kernel assertions, then the generic re-raise.
pub(crate) const LOG: &str = "epoch 3: 100%|##########| 120/120\n\
/opt/conda/conda-bld/pytorch/work/aten/src/ATen/native/cuda/Indexing.cu:1231: indexSelectSmallIndex: block: [31,0,0], thread: [29,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n\
/opt/conda/conda-bld/pytorch/work/aten/src/ATen/native/cuda/Indexing.cu:1231: indexSelectSmallIndex: block: [31,0,0], thread: [30,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n\
Traceback (most recent call last):\n  File \"train.py\", line 57, in <module>\n    loss.item()\n\
RuntimeError: CUDA error: device-side assert triggered\n\
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n\
For debugging consider passing CUDA_LAUNCH_BLOCKING=1.\n";

/// One HTTP/1.1 request with a JSON body over a plain socket (WebDriver speaks JSON/HTTP).
fn call(port: u16, method: &str, path: &str, body: Option<&Value>) -> Value {
    let mut stream =
        std::net::TcpStream::connect(("127.0.0.1", port)).expect("chromedriver listens");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let payload = body.map(Value::to_string).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    )
    .unwrap();
    // Read the head, then exactly Content-Length bytes (chromedriver may keep the connection).
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed before the response head");
        raw.extend_from_slice(&buf[..n]);
        if let Some(p) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("Content-Length");
    while raw.len() < head_end + len {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed mid-body");
        raw.extend_from_slice(&buf[..n]);
    }
    let body = String::from_utf8_lossy(&raw[head_end..head_end + len]);
    serde_json::from_str(&body)
        .unwrap_or_else(|e| panic!("WebDriver answered non-JSON ({e}): {body}"))
}

pub(crate) struct Driver {
    port: u16,
    session: String,
}

impl Driver {
    pub(crate) fn cmd(&self, method: &str, what: &str, body: Option<Value>) -> Value {
        let v = call(
            self.port,
            method,
            &format!("/session/{}/{what}", self.session),
            body.as_ref(),
        );
        assert!(v["value"]["error"].is_null(), "{what}: {v}");
        v["value"].clone()
    }

    pub(crate) fn go(&self, url: &str) {
        self.cmd("POST", "url", Some(json!({ "url": url })));
    }

    pub(crate) fn find(&self, css: &str) -> String {
        let v = self.cmd(
            "POST",
            "element",
            Some(json!({"using": "css selector", "value": css})),
        );
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .expect("element id")
            .to_owned()
    }

    pub(crate) fn type_into(&self, css: &str, text: &str) {
        let el = self.find(css);
        self.cmd(
            "POST",
            &format!("element/{el}/value"),
            Some(json!({ "text": text })),
        );
    }

    pub(crate) fn click(&self, css: &str) {
        let el = self.find(css);
        self.cmd("POST", &format!("element/{el}/click"), Some(json!({})));
    }

    pub(crate) fn text(&self, css: &str) -> String {
        let el = self.find(css);
        self.cmd("GET", &format!("element/{el}/text"), None)
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub(crate) fn current_url(&self) -> String {
        self.cmd("GET", "url", None)
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// How many elements match `css` now (none is an answer, not an error).
    pub(crate) fn count(&self, css: &str) -> usize {
        self.cmd(
            "POST",
            "elements",
            Some(json!({"using": "css selector", "value": css})),
        )
        .as_array()
        .map_or(0, Vec::len)
    }

    /// `document.readyState` of the current page.
    fn ready_state(&self) -> String {
        self.cmd(
            "POST",
            "execute/sync",
            Some(json!({"script": "return document.readyState", "args": []})),
        )
        .as_str()
        .unwrap_or_default()
        .to_owned()
    }

    /// Waits until the browser shows a page whose URL satisfies `url`, fully loaded, with an
    /// element matching `css`: the page a click led to, not the one it left.
    pub(crate) fn wait_for_page(&self, what: &str, url: impl Fn(&str) -> bool, css: &str) {
        wait_until(PAGE_WAIT, what, || {
            url(&self.current_url()) && self.ready_state() == "complete" && self.count(css) > 0
        });
    }
}

/// A signed-in browser session against a fresh `serve`: what a test drives, and the processes
/// it keeps alive.
pub(crate) struct Session {
    pub(crate) d: Driver,
    pub(crate) base: String,
    /// The server's database, for tokens a test needs beside the browser's.
    pub(crate) url: String,
    _server: KillOnDrop,
    _driver: KillOnDrop,
}

impl Drop for Session {
    fn drop(&mut self) {
        call(
            self.d.port,
            "DELETE",
            &format!("/session/{}", self.d.session),
            None,
        );
    }
}

/// Starts `serve` on a fresh database and Chromium, and signs in with a new `ingest,read`
/// token; `None` (the test is skipped with a note) only where the browser is not installed and
/// not required.
pub(crate) fn signed_in_browser(test: &str) -> Option<Session> {
    signed_in_browser_as(test, "ingest,read")
}

/// [`signed_in_browser`] with a token of `scopes`.
pub(crate) fn signed_in_browser_as(test: &str, scopes: &str) -> Option<Session> {
    if !browser_installed(test) {
        return None;
    }
    let url = database_url(&crate::support::fresh_database_name());

    let token = create_token(&url, scopes, "browser");
    let (server, port) = spawn_server(&url);
    let base = format!("http://127.0.0.1:{port}");
    let s = open_browser(server, base, url);
    let (d, base) = (&s.d, &s.base);
    d.go(&format!("{base}/login"));
    d.type_into("input[name=token]", &token);
    d.click("form button[type=submit]");
    // Signing in lands on the home page with the new-report form (shown only to a session
    // that may submit; a read-only one gets a note instead).
    let home = format!("{base}/");
    let may_submit = scopes.contains("ingest") || scopes.contains("admin");
    d.wait_for_page(
        "the signed-in home page after signing in",
        |url| url == home,
        if may_submit {
            "#new-report #log_text"
        } else {
            "#read-only-note"
        },
    );
    Some(s)
}

/// Whether chromium and chromedriver are installed; where they are not, the test named is
/// skipped with a note, unless `GPU_TRIAGE_REQUIRE_BROWSER` is set (CI), where it fails.
pub(crate) fn browser_installed(test: &str) -> bool {
    let tools = ["/usr/bin/chromium", "/usr/bin/chromedriver"];
    if tools.iter().any(|t| !std::path::Path::new(t).exists()) {
        assert!(
            std::env::var_os("GPU_TRIAGE_REQUIRE_BROWSER").is_none(),
            "chromium and chromedriver are required here (apt-get install chromium chromium-driver)"
        );
        eprintln!("SKIPPED {test}: chromium/chromedriver not installed (.ci/run installs them)");
        return false;
    }
    true
}

/// Headless Chromium (under chromedriver) for `server`, reached at `base`, on database `url`;
/// nothing opened yet.
pub(crate) fn open_browser(server: KillOnDrop, base: String, url: String) -> Session {
    let driver_port = free_port();
    let driver = KillOnDrop(
        Command::new("/usr/bin/chromedriver")
            .arg(format!("--port={driver_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_until(Duration::from_secs(30), "chromedriver to listen", || {
        std::net::TcpStream::connect(("127.0.0.1", driver_port)).is_ok()
    });
    let caps = json!({"capabilities": {"alwaysMatch": {"goog:chromeOptions": {
        "binary": "/usr/bin/chromium",
        "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1600"]
    }}}});
    let session = call(driver_port, "POST", "/session", Some(&caps));
    let id = session["value"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("no session: {session}"))
        .to_owned();
    let d = Driver {
        port: driver_port,
        session: id,
    };
    Session {
        d,
        base,
        url,
        _server: server,
        _driver: driver,
    }
}

#[test]
fn a_pasted_crash_log_is_classified_in_a_real_browser() {
    let Some(session) = signed_in_browser("a_pasted_crash_log_is_classified_in_a_real_browser")
    else {
        return;
    };
    let (d, base) = (&session.d, &session.base);
    d.type_into("#log_text", LOG);
    d.click("#new-report button[type=submit]");
    let reports = format!("{base}/reports/");
    d.wait_for_page(
        "the report page after submitting the log",
        |url| url.starts_with(&reports),
        "h1 .cat",
    );
    assert_eq!(d.text("h1 .cat"), "Out of bounds");
    let highlighted = d.text("pre.log .line.hl");
    assert!(
        highlighted.starts_with('2'),
        "line 2 is highlighted: {highlighted}"
    );
    assert!(
        highlighted.contains("Assertion `srcIndex < srcSelectDimSize` failed."),
        "{highlighted}"
    );
    assert!(d.text("#async-warning").contains("CUDA_LAUNCH_BLOCKING=1"));

    let shot = d.cmd("GET", "screenshot", None);
    let png = base64_decode(shot.as_str().expect("the screenshot, as base64"));
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG screenshot");
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("../browser-report.png");
    std::fs::write(&out, png).unwrap();
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for v in s.bytes().filter_map(val) {
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

/// PyTorch 1.x's out-of-memory wording, raised in the user's `resnet.py`.
const OOM_OLD: &str = "Traceback (most recent call last):\n  File \"/home/ana/vision/train.py\", line 88, in <module>\n    main()\n  File \"/home/ana/vision/train.py\", line 61, in train_step\n    logits = model(images)\n  File \"/home/ana/vision/resnet.py\", line 140, in forward\n    x = self.layer4(x)\nRuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity; 12.10 GiB already allocated; 1.20 GiB free; 13.50 GiB reserved in total by PyTorch)\n";

/// The same failure in PyTorch 2.x's wording.
const OOM_NEW: &str = "[rank0]: Traceback (most recent call last):\n[rank0]:   File \"/srv/vision/train.py\", line 90, in <module>\n[rank0]:     main()\n[rank0]:   File \"/srv/vision/train.py\", line 63, in train_step\n[rank0]:     logits = model(images)\n[rank0]:   File \"/srv/vision/resnet.py\", line 142, in forward\n[rank0]:     x = self.layer4(x)\n[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 1 has a total capacity of 79.15 GiB of which 2.06 GiB is free.\n";

impl Session {
    /// Pastes `log` on the home page and waits for its report page; returns that page's URL.
    pub(crate) fn paste(&self, log: &str) -> String {
        let d = &self.d;
        d.go(&format!("{}/", self.base));
        d.wait_for_page("the home page", |_| true, "#new-report #log_text");
        d.type_into("#log_text", log);
        d.click("#new-report button[type=submit]");
        let reports = format!("{}/reports/", self.base);
        d.wait_for_page(
            "the report page after pasting",
            |url| url.starts_with(&reports),
            "h1 .cat",
        );
        d.current_url()
    }

    /// Opens the group page linked from the report page now shown; returns its URL.
    fn open_group(&self) -> String {
        let d = &self.d;
        d.click(".columns a[href^='/groups/']");
        let groups = format!("{}/groups/", self.base);
        d.wait_for_page(
            "the group page",
            |url| url.starts_with(&groups),
            "#group-state",
        );
        d.current_url()
    }
}

#[test]
fn the_knowledge_base_in_a_real_browser() {
    let Some(s) = signed_in_browser("the_knowledge_base_in_a_real_browser") else {
        return;
    };
    let d = &s.d;
    // A first out-of-memory failure; its fix is recorded on its group's page.
    s.paste(OOM_OLD);
    assert_eq!(d.text("h1 .cat"), "Out of memory");
    let group = s.open_group();
    d.type_into(
        ".fix-form input[name=summary]",
        "halve the batch size for layer4",
    );
    d.type_into(
        ".fix-form input[name=link]",
        "https://github.com/org/vision/pull/7",
    );
    d.click(".fix-form button[type=submit]");
    d.wait_for_page(
        "the group page with its fix",
        |url| url.starts_with(&group),
        "ul.fixes li",
    );
    // The same failure in other words: its page lists the first one's group and fix among the
    // similar failures, never as this failure's "Fixed before" (issue 39 item 2).
    s.paste(OOM_NEW);
    assert_eq!(d.count("#fixed-before"), 0);
    assert!(d.count("ul.similar > li") >= 1);
    assert!(
        d.text("ul.similar")
            .contains("halve the batch size for layer4")
    );
    // Resolve the first group, then the failure comes back: the group is regressed.
    d.go(&group);
    d.wait_for_page("the group page", |_| true, ".triage-form");
    assert_eq!(d.count("#group-state.state-open"), 1);
    d.click(".triage-form select[name=state] option[value=resolved]");
    d.click(".triage-form button[type=submit]");
    d.wait_for_page(
        "the resolved group",
        |url| url.starts_with(&group),
        "#group-state.state-resolved",
    );
    s.paste(&format!("epoch 7\n{OOM_OLD}"));
    assert_eq!(d.text("h1 .cat"), "Out of memory");
    d.go(&group);
    d.wait_for_page(
        "the regressed group",
        |url| url.starts_with(&group),
        "#group-state.state-regressed",
    );
    assert!(
        d.text("ol.history").contains("regressed"),
        "{}",
        d.text("ol.history")
    );
    // Search from the search form: by a file name in the traceback, by a misspelled error (the
    // corrected search runs), and by the fix's text.
    let search = |q: &str| {
        d.go(&format!("{}/search", s.base));
        d.wait_for_page("the search page", |_| true, "form.search input[name=q]");
        d.type_into("form.search input[name=q]", q);
        d.click("form.search button[type=submit]");
        d.wait_for_page("the search results", |url| url.contains("q="), "p.count");
    };
    search("resnet.py");
    // One row per group: the regressed group (two reports) and its look-alike from another
    // checkout, each with its culprit frame and its count.
    assert_eq!(d.count(".hits .hit"), 2, "{}", d.text(".hits"));
    assert_eq!(d.count(".hits .hit-report"), 2, "{}", d.text(".hits"));
    let rows = d.text(".hits");
    assert_eq!(rows.matches("resnet.py:forward").count(), 2, "{rows}");
    assert!(
        rows.contains("2 reports") && rows.contains("1 report"),
        "{rows}"
    );
    assert!(d.text(".hits mark").to_lowercase().contains("resnet"));
    search("out of memroy");
    assert!(
        d.text("p.corrected").contains("out of memory"),
        "{}",
        d.text("p.corrected")
    );
    assert_eq!(d.count(".hits .hit"), 2, "{}", d.text(".hits"));
    search("batch size layer4");
    assert!(d.count(".hits .hit-fix") >= 1, "{}", d.text(".hits"));
    assert!(
        d.text(".hits .hit-fix")
            .contains("halve the batch size for layer4")
    );
}

/// A long log (900 lines): the device-side assert on line 3 is the root cause; the re-raise on
/// line 850 is a finding on a later page of the viewer.
fn long_log() -> String {
    let mut log = String::from("epoch 1: step 0 loss 2.31\nepoch 1: step 1 loss 2.29\n");
    log.push_str("/opt/conda/conda-bld/pytorch/work/aten/src/ATen/native/cuda/Indexing.cu:1231: indexSelectSmallIndex: block: [31,0,0], thread: [29,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n");
    for i in 4..850 {
        log.push_str(&format!(
            "epoch 1: step {i} loss 2.{:02} lr 0.000{} grad_norm 1.{:03} tokens/s 51234 a long line of training progress to wrap on a phone\n",
            i % 97,
            i % 7,
            i % 1000
        ));
    }
    log.push_str("RuntimeError: CUDA error: device-side assert triggered\n");
    for i in 851..=900 {
        log.push_str(&format!("teardown {i}\n"));
    }
    log
}

impl Driver {
    /// Runs `script` (without arguments) in the page and returns its value.
    pub(crate) fn js(&self, script: &str) -> Value {
        self.run_js(script, json!([]))
    }

    /// Runs `script` in the page with `args` and returns its value.
    pub(crate) fn run_js(&self, script: &str, args: Value) -> Value {
        self.cmd(
            "POST",
            "execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
    }

    /// Resizes the window so the page's viewport is about `width` CSS pixels wide.
    pub(crate) fn resize(&self, width: u32, height: u32) {
        self.cmd(
            "POST",
            "window/rect",
            Some(json!({ "width": width, "height": height })),
        );
    }

    pub(crate) fn screenshot(&self, name: &str) {
        let shot = self.cmd("GET", "screenshot", None);
        let png = base64_decode(shot.as_str().expect("the screenshot, as base64"));
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG screenshot");
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("../portal-screens");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    /// axe-core's serious and critical violations on the current page, one line each.
    pub(crate) fn axe(&self, axe_source: &str) -> Vec<String> {
        self.run_js(&format!("{axe_source}\n;return true;"), json!([]));
        let found = self.cmd(
            "POST",
            "execute/async",
            Some(json!({"script": "const done = arguments[arguments.length - 1];\
                axe.run(document, {resultTypes: ['violations']}).then(r => done(r.violations\
                .filter(v => v.impact === 'serious' || v.impact === 'critical')\
                .map(v => v.impact + ' ' + v.id + ': ' + v.help + ' at ' + v.nodes.slice(0, 3)\
                .map(n => n.target.join(' ') + ' (' + (n.failureSummary || '').replace(/\\s+/g, ' ') + ')').join('; '))))\
                .catch(e => done(['axe failed: ' + e]));", "args": []})),
        );
        found
            .as_array()
            .expect("axe's answer")
            .iter()
            .map(|v| v.as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

/// The axe-core script: `GPU_TRIAGE_AXE_JS` (`.ci/run` installs axe-core from npm into its cache
/// and sets it); `None` where it is not installed and not required.
pub(crate) fn axe_source(test: &str) -> Option<String> {
    match std::env::var_os("GPU_TRIAGE_AXE_JS") {
        Some(path) => Some(
            std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("GPU_TRIAGE_AXE_JS={}: {e}", path.to_string_lossy())),
        ),
        None => {
            assert!(
                std::env::var_os("GPU_TRIAGE_REQUIRE_BROWSER").is_none(),
                "GPU_TRIAGE_AXE_JS must name axe.min.js here (.ci/run installs axe-core)"
            );
            eprintln!("SKIPPED {test}: GPU_TRIAGE_AXE_JS is not set (.ci/run sets it)");
            None
        }
    }
}

#[test]
fn every_portal_page_works_at_desktop_and_phone_widths_and_passes_axe() {
    let test = "every_portal_page_works_at_desktop_and_phone_widths_and_passes_axe";
    let Some(axe) = axe_source(test) else {
        return;
    };
    let Some(s) = signed_in_browser_as(test, "admin") else {
        return;
    };
    let d = &s.d;
    // Data for every page: a long report (pasted through the form), a fix on its group.
    d.go(&format!("{}/", s.base));
    d.wait_for_page("the home page", |_| true, "#new-report #log_text");
    d.run_js(
        "document.querySelector('#log_text').value = arguments[0]; return true;",
        json!([long_log()]),
    );
    d.click("#new-report button[type=submit]");
    let reports = format!("{}/reports/", s.base);
    d.wait_for_page(
        "the long report's page",
        |url| url.starts_with(&reports),
        "h1 .cat",
    );
    let report = d.current_url();
    // A finding on a later page: its link opens the page that holds line 850, scrolled to it.
    assert_eq!(d.count("#L850"), 0, "line 850 is not on the first page");
    d.click(".findings a[href*='line=850']");
    d.wait_for_page(
        "the page holding line 850",
        |url| url.contains("line=850"),
        "#L850",
    );
    let seen = d.run_js(
        "const r = document.getElementById('L850').getBoundingClientRect();\
         return [r.top >= 0 && r.bottom <= window.innerHeight, document.querySelector(':target') && document.querySelector(':target').id];",
        json!([]),
    );
    assert_eq!(
        seen,
        json!([true, "L850"]),
        "line 850 is on screen and targeted"
    );
    d.click(".columns a[href^='/groups/']");
    d.wait_for_page(
        "the group page",
        |url| url.contains("/groups/"),
        "#group-state",
    );
    let group = d.current_url();
    d.type_into("#fix-summary", "clamp the label ids to the vocabulary size");
    d.click(".fix-form button[type=submit]");
    d.wait_for_page("the group with its fix", |_| true, "ul.fixes li");

    // A report whose reproduction is queued (its section updates itself while pending).
    d.go(&format!("{}/", s.base));
    d.wait_for_page("the home page", |_| true, "#new-report #log_text");
    d.run_js(
        "document.querySelector('#log_text').value = arguments[0];\
         document.querySelector('#script_text').value = arguments[1]; return true;",
        json!([LOG, "import torch\nprint(torch.zeros(3).cuda()[5])\n"]),
    );
    d.click("#new-report button[type=submit]");
    d.wait_for_page(
        "the report page with a queued job",
        |url| url.starts_with(&reports) && url != report,
        "#reproduction",
    );
    let queued = d.current_url();
    let pages = [
        ("home", format!("{}/", s.base)),
        ("report-queued", queued),
        (
            "rule-disable",
            format!("{}/rules/cuda.device_side_assert/disable", s.base),
        ),
        ("reports", format!("{}/reports", s.base)),
        ("report", report.clone()),
        ("report-findings", format!("{report}?view=findings")),
        ("report-grep", format!("{report}?grep=loss+2.1")),
        ("groups", format!("{}/groups", s.base)),
        ("group", group),
        ("search", format!("{}/search?q=device-side+assert", s.base)),
        ("rules", format!("{}/rules", s.base)),
        ("rule", format!("{}/rules/cuda.device_side_assert", s.base)),
        ("rule-new", format!("{}/rules/new", s.base)),
        ("webhooks", format!("{}/webhooks", s.base)),
        ("retention", format!("{}/retention", s.base)),
        ("not-found", format!("{}/reports/987654", s.base)),
    ];
    // The audit can fail: an image without a text alternative is reported.
    d.run_js(
        "const i = document.createElement('img'); i.src = '/nothing.png'; i.id = 'axe-canary';\
         document.querySelector('main').append(i); return true;",
        json!([]),
    );
    let canary = d.axe(&axe);
    assert!(
        canary
            .iter()
            .any(|v| v.contains("image-alt") && v.contains("#axe-canary")),
        "{canary:?}"
    );
    let mut problems = Vec::new();
    for width in [1400, 400, 360] {
        d.resize(width, 1000);
        for (name, url) in &pages {
            d.go(url);
            d.wait_for_page(name, |_| true, "main h1");
            let size = d.run_js(
                "return [document.documentElement.scrollWidth, document.documentElement.clientWidth];",
                json!([]),
            );
            let (scroll, client) = (size[0].as_u64().unwrap(), size[1].as_u64().unwrap());
            assert!(
                client <= u64::from(width) && client + 40 >= u64::from(width),
                "the window is {width} px wide: the page has {client} px"
            );
            if width < 1000 && scroll > client {
                problems.push(format!(
                    "{name} at {width}: {scroll} px wide in a {client} px window"
                ));
            }
            let stops = d.run_js(
                "return document.querySelectorAll('pre.log a.ln:not([tabindex=\"-1\"])').length;",
                json!([]),
            );
            if stops != json!(0) {
                problems.push(format!("{name}: {stops} line numbers are tab stops"));
            }
            for v in d.axe(&axe) {
                problems.push(format!("{name} at {width}: {v}"));
            }
            d.screenshot(&format!("{name}-{width}"));
        }
    }
    // Signed out: the sign-in page.
    d.cmd("DELETE", "cookie", None);
    for width in [1400, 400] {
        d.resize(width, 1000);
        d.go(&format!("{}/login", s.base));
        d.wait_for_page("the sign-in page", |_| true, "input[name=token]");
        for v in d.axe(&axe) {
            problems.push(format!("login at {width}: {v}"));
        }
        d.screenshot(&format!("login-{width}"));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A worker's call to the server, over a real socket: (status, body).
pub(crate) fn worker_post(base: &str, token: &str, path: &str, body: &Value) -> (u16, Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut res = agent
        .post(format!("{base}{path}"))
        .header("Authorization", format!("Bearer {token}"))
        .header("Content-Type", "application/json")
        .send(body.to_string())
        .unwrap();
    let text = res.body_mut().read_to_string().unwrap_or_default();
    (
        res.status().as_u16(),
        serde_json::from_str(&text).unwrap_or(Value::Null),
    )
}

#[test]
fn a_pending_reproduction_updates_in_place_and_the_page_reloads_with_the_result() {
    let Some(s) = signed_in_browser(
        "a_pending_reproduction_updates_in_place_and_the_page_reloads_with_the_result",
    ) else {
        return;
    };
    let d = &s.d;
    let worker = create_token(&s.url, "worker", "gpu-host");
    // Upload a log with its script from the start page: the report's job is queued.
    d.go(&format!("{}/", s.base));
    d.wait_for_page("the home page", |_| true, "#new-report #log_text");
    d.type_into("#log_text", LOG);
    d.click("#new-report summary");
    d.type_into(
        "textarea[name=script_text]",
        "import torch\nx = torch.zeros(3).cuda()[torch.tensor([5]).cuda()]\n",
    );
    d.click("#new-report button[type=submit]");
    let reports = format!("{}/reports/", s.base);
    d.wait_for_page(
        "the report page with a queued job",
        |url| url.starts_with(&reports),
        "#reproduction[data-pending] .job-status",
    );
    // The section is replaced in place while pending: read it in one step, never through an
    // element reference a refresh may have replaced.
    let status_text = || {
        d.js("const e = document.querySelector('.job-status'); return e ? e.textContent.trim() : '';")
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert!(status_text().starts_with("Queued"), "{}", status_text());
    // On a phone-sized screen the status and the header lines wrap inside their boxes.
    d.cmd(
        "POST",
        "window/rect",
        Some(json!({"width": 400, "height": 800})),
    );
    let overflowing = d.js(
        "return [...document.querySelectorAll('.job-status, #repro-head, #reproduction')]\
             .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.id || e.className);",
    );
    assert_eq!(overflowing, json!([]), "nothing overflows at 400 px");
    // The reader scrolls down to the log; a mark on the window tells a reload from an
    // in-place update, and the log card's place on screen tells whether the view jumped.
    let log_top = "return document.getElementById('log').getBoundingClientRect().top;";
    let before = d
        .js(
            "window.__kept = true; document.getElementById('log').scrollIntoView(); \
             return window.scrollY;",
        )
        .as_f64()
        .unwrap_or(0.0);
    assert!(before > 200.0, "the page scrolls: {before}");
    let anchored = d.js(log_top).as_f64().unwrap_or(f64::NAN);
    // Where axe-core is installed, the pending page and the finished one pass its audit too
    // (the portal walk has no report with a reproduction).
    let axe = axe_source("a_pending_reproduction_updates_in_place (its axe audit)");
    if let Some(axe) = &axe {
        assert_eq!(d.axe(axe), Vec::<String>::new(), "the pending page");
    }

    // A worker takes the job: the section says so within a refresh, without a reload.
    let claim = json!({"worker": "gpu-box-1", "wait_secs": 0, "no_gpu": false, "sandbox": "bwrap",
                       "gpu": {"index": 0, "name": "NVIDIA H100 80GB HBM3"}});
    let (status, job) = worker_post(&s.base, &worker, "/api/v1/jobs/claim", &claim);
    assert_eq!(status, 200, "{job}");
    wait_until(PAGE_WAIT, "the section to show the running job", || {
        status_text().starts_with("Running on worker gpu-box-1")
    });
    assert_eq!(
        d.js("return window.__kept === true;"),
        json!(true),
        "updated in place"
    );
    let moved = d.js(log_top).as_f64().unwrap_or(f64::NAN) - anchored;
    assert!(
        moved.abs() < 60.0,
        "the view stays on the log: it moved {moved} px"
    );

    // The result: the page reloads once, with the true line in the header and no refresh.
    let result = json!({"lease_token": job["lease_token"], "exit_code": 1, "signal": null,
        "timed_out": false, "duration_ms": 900, "stdout": "", "truncated": false,
        "gpu": null, "no_gpu": false, "sandbox": "bwrap", "error": null,
        "stderr": "Traceback (most recent call last):\n  File \"/tmp/job/repro.py\", line 2, in <module>\n    x = torch.zeros(3).cuda()[torch.tensor([5]).cuda()]\nRuntimeError: CUDA error: device-side assert triggered\n"});
    let path = format!("/api/v1/jobs/{}/result", job["job_id"]);
    let (status, body) = worker_post(&s.base, &worker, &path, &result);
    assert_eq!(status, 200, "{body}");
    wait_until(PAGE_WAIT, "the page to reload with the result", || {
        d.count("#true-line") == 1
    });
    assert_eq!(
        d.js("return window.__kept === true;"),
        json!(false),
        "reloaded"
    );
    assert_eq!(d.count("#reproduction[data-pending]"), 0);
    assert!(
        d.text("#true-line")
            .contains("actually raised at repro.py:2"),
        "{}",
        d.text("#true-line")
    );
    let after = d.js("return window.scrollY;").as_f64().unwrap_or(0.0);
    assert!(
        after > 200.0,
        "the reload keeps the reader down the page: {after}"
    );
    if let Some(axe) = &axe {
        assert_eq!(d.axe(axe), Vec::<String>::new(), "the finished page");
    }
}
