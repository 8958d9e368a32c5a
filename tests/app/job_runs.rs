//! A failed run is many files (issue 41): `POST /api/v1/reports` with several `log` parts or one
//! `archive` part makes one report whose answer names every file's role, the first failure
//! (file, line, rank, host, GPU) and the action. The run here is the repository's own
//! eight-rank FunASR log (`tests/tune/cases/1203.log`) split per rank, with the node's journal
//! and the scheduler's output beside it; hostile archives are refused with nothing stored.

mod flight;
mod reclassify;
mod torchrun;

use std::io::Write;

use axum::http::StatusCode;
use gpu_triage::auth::Scope;
use serde_json::Value;

use crate::support::TestApp;

/// tests/tune/cases/1203.log split per rank (a `[rankN]:` prefix, or NCCL's local rank).
pub fn rank_logs() -> Vec<(String, String)> {
    let log = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/tune/cases/1203.log"
    ))
    .expect("the FunASR log");
    let mut per_rank: std::collections::BTreeMap<u32, String> = Default::default();
    for line in log.lines() {
        let rank = gpu_triage::ingest::normalize::rank_prefix(line)
            .or_else(|| {
                let gpu = gpu_triage::ingest::origin::from_line(line).gpu?;
                gpu.strip_prefix("cuda:")?.parse().ok()
            })
            .expect("every line names its rank");
        let text = per_rank.entry(rank).or_default();
        text.push_str(line);
        text.push('\n');
    }
    per_rank
        .into_iter()
        .map(|(rank, text)| (format!("node-0/rank{rank}.log"), text))
        .collect()
}

/// The run: the rank logs, the node's journal (nothing failing in it) and Slurm's output.
pub fn run_files() -> Vec<(String, String)> {
    let mut files = rank_logs();
    files.push((
        "node-0/journal.txt".into(),
        "Jun 25 13:40:01 liangxianchen-funasr-15wh-train-lxc0-w-0 systemd[1]: Started Session 12 of User train.\nJun 25 13:40:02 liangxianchen-funasr-15wh-train-lxc0-w-0 kernel: [ 9000.000001] NVRM: GPU at PCI:0000:3b:00: GPU-5d1f2c\n".into(),
    ));
    files.push((
        "slurm-4242.out".into(),
        "srun: error: liangxianchen-funasr-15wh-train-lxc0-w-0: task 2: Exited with exit code 1\nsrun: error: liangxianchen-funasr-15wh-train-lxc0-w-0: task 5: Terminated\n".into(),
    ));
    files
}

/// The parts of a run upload of `files`.
fn log_parts(files: &[(String, String)]) -> Vec<(&str, Option<&str>, &[u8])> {
    files
        .iter()
        .map(|(name, text)| ("log", Some(name.as_str()), text.as_bytes()))
        .collect()
}

/// A `.tar.gz` of `members` (name, entry type byte, data), names written verbatim.
pub fn tar_gz(members: &[(&str, u8, &[u8])]) -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    for (name, kind, data) in members {
        let mut h = tar::Header::new_ustar();
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.set_entry_type(tar::EntryType::new(*kind));
        if *kind == b'2' {
            h.set_link_name("/etc/passwd").expect("link");
        }
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append(&h, *data).expect("append");
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&tar.into_inner().expect("tar")).expect("gzip");
    gz.finish().expect("gzip")
}

/// Report `id`'s stored log, whole.
async fn stored_log(app: &TestApp, id: i64) -> String {
    use std::io::Read;
    let gz: Vec<u8> = sqlx::query_scalar(
        "SELECT string_agg(data, ''::bytea ORDER BY seq) FROM report_log_chunks WHERE report_id = $1",
    )
    .bind(id)
    .fetch_one(app.db.pool())
    .await
    .expect("the log's chunks");
    let mut text = String::new();
    flate2::read::MultiGzDecoder::new(&gz[..])
        .read_to_string(&mut text)
        .expect("gzip");
    text
}

fn files_of(body: &Value) -> Vec<(String, String, Option<String>)> {
    body["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap_or_default().to_owned(),
                f["role"].as_str().unwrap_or_default().to_owned(),
                f["consequence_of"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

/// What every answer about the FunASR run must say.
fn assert_funasr_story(body: &Value) {
    let first = &body["first_failure"];
    assert_eq!(first["file"], "node-0/rank2.log", "{body}");
    assert_eq!(first["line"], 1);
    assert_eq!(first["rank"], 2);
    assert_eq!(first["host"], "liangxianchen-funasr-15wh-train-lxc0-w-0");
    assert_eq!(first["category"], "out_of_memory");
    assert_eq!(body["action"]["kind"], "fix_code", "{}", body["action"]);
    assert!(
        body["action"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("rank 2")),
        "{}",
        body["action"]
    );
    let files = files_of(body);
    assert_eq!(files.len(), 7, "{files:?}");
    let consequence = |name: &str| {
        files.contains(&(
            name.to_owned(),
            "consequence".to_owned(),
            Some("node-0/rank2.log".to_owned()),
        ))
    };
    assert!(consequence("node-0/rank5.log"), "{files:?}");
    assert!(consequence("slurm-4242.out"), "{files:?}");
    assert!(files.contains(&("node-0/rank2.log".into(), "first_failure".into(), None)));
    // The report's own root cause is the first failure's line, where it sits in the joined log.
    let rank2 = body["files"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["name"] == "node-0/rank2.log"))
        .expect("rank2");
    assert_eq!(body["classification"]["category"], "out_of_memory");
    assert_eq!(
        body["classification"]["root_cause"]["line"], rank2["first_line"],
        "the run's root-cause line is rank2.log's first line in the joined log"
    );
}

#[tokio::test]
async fn a_run_of_rank_logs_names_its_first_failure_rank_host_and_action() {
    let app = TestApp::spawn().await;
    let token = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let files = run_files();
    let res = app.upload(&token, &log_parts(&files), Some("run-1")).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let created = res.json();
    assert_funasr_story(&created);
    let id = created["id"].as_i64().expect("id");
    let detail = app.get_as(&token, &format!("/api/v1/reports/{id}")).await;
    assert_eq!(detail.status, StatusCode::OK);
    assert_funasr_story(&detail.json());
    assert_eq!(
        (app.count("reports").await, app.count("job_runs").await),
        (1, 1)
    );

    // The stored log holds every file after its header, the first failure at the named line.
    let raw = stored_log(&app, id).await;
    let line = created["classification"]["root_cause"]["line"]
        .as_u64()
        .expect("line");
    let lines: Vec<&str> = raw.lines().collect();
    assert_eq!(
        lines[usize::try_from(line).expect("small") - 2],
        "==> node-0/rank2.log <=="
    );
    assert!(lines[usize::try_from(line).expect("small") - 1].contains("OutOfMemoryError"));

    // A retry under the same key answers the same run; nothing more is stored.
    let again = app.upload(&token, &log_parts(&files), Some("run-1")).await;
    assert_eq!(again.json()["id"], id);
    assert_funasr_story(&again.json());
    assert_eq!(
        (app.count("reports").await, app.count("job_runs").await),
        (1, 1)
    );

    // The run's group is its first failure's: rank 2's log alone lands in it.
    let (name, text) = &files[1];
    assert_eq!(name, "node-0/rank2.log");
    let alone = app
        .upload(&token, &[("log", Some("rank2.log"), text.as_bytes())], None)
        .await;
    assert_eq!(alone.json()["group_id"], created["group_id"]);
}

#[tokio::test]
async fn an_archive_is_one_run_and_lists_what_it_skipped() {
    let app = TestApp::spawn().await;
    let token = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let files = run_files();
    let mut members: Vec<(&str, u8, &[u8])> = files
        .iter()
        .map(|(n, t)| (n.as_str(), b'0', t.as_bytes()))
        .collect();
    members.push((
        "core.1234",
        b'0',
        b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x02\x00\x3e\x00",
    ));
    members.push(("node-0/", b'5', b""));
    let archive = tar_gz(&members);
    let res = app
        .upload(
            &token,
            &[("archive", Some("run-4242.tar.gz"), &archive)],
            None,
        )
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let body = res.json();
    assert_funasr_story(&body);
    assert_eq!(body["skipped"][0]["name"], "core.1234");
    assert_eq!(body["skipped"][0]["reason"], "not text");

    // The same run as a zip.
    let mut zip = Vec::new();
    let mut w = rawzip::ZipArchiveWriter::new(&mut zip);
    for (name, text) in &files {
        let (mut entry, config) = w
            .new_file(name.as_str())
            .compression_method(rawzip::CompressionMethod::DEFLATE)
            .start()
            .expect("entry");
        let enc = flate2::write::DeflateEncoder::new(&mut entry, flate2::Compression::default());
        let mut data = config.wrap(enc);
        data.write_all(text.as_bytes()).expect("write");
        let (enc, descriptor) = data.finish().expect("finish");
        enc.finish().expect("deflate");
        entry.finish(descriptor).expect("entry");
    }
    w.finish().expect("zip");
    let meta = br#"{"project":"zipped"}"#;
    let res = app
        .upload(
            &token,
            &[("archive", Some("run.zip"), &zip), ("meta", None, meta)],
            None,
        )
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    assert_funasr_story(&res.json());
}

#[tokio::test]
async fn bombs_traversal_names_and_links_are_refused_with_nothing_stored() {
    let app = TestApp::spawn().await;
    let token = app.token("ci", &[Scope::Ingest]).await;
    let bomb = tar_gz(&[("big.log", b'0', &b"NCCL INFO fine\n".repeat(5 << 20))]);
    let cases: Vec<(&str, Vec<u8>, StatusCode, &str)> = vec![
        (
            "bomb",
            bomb,
            StatusCode::PAYLOAD_TOO_LARGE,
            "compression bomb",
        ),
        (
            "traversal",
            tar_gz(&[
                ("ok.log", b'0', b"fine\n"),
                ("../../etc/cron.d/x", b'0', b"* * * * * root sh\n"),
            ]),
            StatusCode::UNPROCESSABLE_ENTITY,
            "`..`",
        ),
        (
            "absolute",
            tar_gz(&[("/etc/passwd", b'0', b"root:x:0:0\n")]),
            StatusCode::UNPROCESSABLE_ENTITY,
            "absolute",
        ),
        (
            "link",
            tar_gz(&[
                ("ok.log", b'0', b"RuntimeError: x\n"),
                ("rank1.log", b'2', b""),
            ]),
            StatusCode::UNPROCESSABLE_ENTITY,
            "is a link",
        ),
        (
            "device",
            tar_gz(&[("tty", b'3', b"")]),
            StatusCode::UNPROCESSABLE_ENTITY,
            "device",
        ),
        (
            "not an archive",
            b"RuntimeError: CUDA error: out of memory\n".to_vec(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "not a readable",
        ),
    ];
    for (what, archive, status, says) in &cases {
        let res = app
            .upload(&token, &[("archive", Some("run.tgz"), archive)], None)
            .await;
        assert_eq!(res.status, *status, "{what}: {}", res.body);
        let message = res.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(message.contains(says), "{what}: {message}");
    }
    // Two `log` parts climbing out, or of one name, are refused the same way.
    for names in [["a.log", "../b.log"], ["a.log", "./a.log"]] {
        let res = app
            .upload(
                &token,
                &[
                    ("log", Some(names[0]), b"x\n"),
                    ("log", Some(names[1]), b"y\n"),
                ],
                None,
            )
            .await;
        assert_eq!(
            res.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{names:?}: {}",
            res.body
        );
        assert_eq!(res.error_code(), "bad_archive");
    }
    let res = app
        .upload(
            &token,
            &[
                ("log", Some("a.log"), b"x\n"),
                ("archive", Some("a.tgz"), b"x"),
            ],
            None,
        )
        .await;
    assert_eq!(res.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", res.body);
    assert_eq!(res.error_code(), "bad_archive");
    for table in ["reports", "job_runs", "report_log_chunks", "groups"] {
        assert_eq!(app.count(table).await, 0, "{table}");
    }
}

#[tokio::test]
async fn the_other_files_failures_are_findings_of_the_run_and_searchable() {
    let app = TestApp::spawn().await;
    let token = app.token("ci", &[Scope::Ingest, Scope::Read]).await;
    let files = [
        (
            "rank0.log",
            "2024-06-25T13:46:30.000Z RuntimeError: CUDA error: an illegal memory access was encountered\n",
        ),
        (
            "rank1.log",
            "2024-06-25T13:46:40.000Z ModuleNotFoundError: No module named 'flash_attn_zebra'\n",
        ),
    ];
    let parts: Vec<(&str, Option<&str>, &[u8])> = files
        .iter()
        .map(|(n, t)| ("log", Some(*n), t.as_bytes()))
        .collect();
    let res = app.upload(&token, &parts, None).await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let body = res.json();
    let id = body["id"].as_i64().expect("id");
    assert_eq!(body["first_failure"]["file"], "rank0.log");
    assert_eq!(body["files"][1]["role"], "failure");
    let findings = body["classification"]["findings"]
        .as_array()
        .expect("findings");
    assert!(
        findings.iter().any(|f| f["text"]
            .as_str()
            .is_some_and(|t| t.contains("flash_attn_zebra"))),
        "{findings:?}"
    );
    let found = app
        .get_as(&token, "/api/v1/search?q=flash_attn_zebra")
        .await;
    assert_eq!(found.status, StatusCode::OK, "{}", found.body);
    let ids: Vec<i64> = found.json()["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter(|r| r["kind"] == "report")
        .filter_map(|r| r["id"].as_i64())
        .collect();
    assert_eq!(ids, [id]);
}
