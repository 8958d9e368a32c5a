//! The `classify`, `eval` and `rules check` commands as a user runs them: the real binary, real
//! files, exit codes and the corpus floor that keeps rule changes honest.

use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;

use crate::support::binary;

/// The development corpora beside the checkout (`../shared/corpus/dev`, `dev2` and `dev3`) and
/// the logs of real GPU runs in `tests/gpu-logs`, or the `:`-separated list in
/// `GPU_TRIAGE_CORPUS`.
fn corpus_dirs() -> Vec<PathBuf> {
    if let Ok(dirs) = std::env::var("GPU_TRIAGE_CORPUS") {
        return std::env::split_paths(&dirs).collect();
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let shared = root.join("../shared/corpus");
    vec![
        shared.join("dev"),
        shared.join("dev2"),
        shared.join("dev3"),
        root.join("tests/gpu-logs"),
    ]
}

/// `N/M = P%` at the end of a line starting with `label`.
fn rate(report: &str, label: &str) -> f64 {
    let line = report
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} line in:\n{report}"));
    let pct = line.rsplit("= ").next().unwrap().trim_end_matches('%');
    pct.parse()
        .unwrap_or_else(|_| panic!("bad rate in {line:?}"))
}

#[test]
fn eval_on_each_dev_corpus_stays_above_the_floor() {
    for dir in corpus_dirs() {
        assert!(
            dir.join("labels.csv").is_file(),
            "the development corpus is missing at {} (set GPU_TRIAGE_CORPUS)",
            dir.display()
        );
        let out = binary().arg("eval").arg(&dir).output().unwrap();
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "eval of {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let last = report.lines().last().unwrap_or_default();
        assert!(last.starts_with("accuracy: "), "last line is {last:?}");
        let context = format!("{}:\n{report}", dir.display());
        assert!(rate(&report, "accuracy:") >= 97.0, "{context}");
        assert!(rate(&report, "root-cause line:") >= 95.0, "{context}");
        assert!(rate(&report, "facts:") >= 95.0, "{context}");
    }
}

#[test]
fn eval_of_a_missing_corpus_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = binary().arg("eval").arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("labels.csv"), "{err}");
}

#[test]
fn classify_reads_stdin_and_prints_one_json_object_per_line() {
    let mut child = binary()
        .args(["classify", "--format", "json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"noise\nRuntimeError: CUDA error: out of memory\nmore noise\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1);
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(v["source"], "-");
    assert_eq!(v["category"], "out_of_memory");
    assert_eq!(v["root_cause"]["line"], 2);
}

#[test]
fn classify_handles_several_files_and_text_output() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.log");
    let b = dir.path().join("b.log");
    std::fs::write(&a, "IndexError: Target 5 is out of bounds.\n").unwrap();
    std::fs::write(
        &b,
        "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x3 and 5x6)\n",
    )
    .unwrap();
    let out = binary().arg("classify").arg(&a).arg(&b).output().unwrap();
    assert!(out.status.success());
    let cats: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["category"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(cats, vec!["out_of_bounds", "shape_mismatch"]);

    let out = binary()
        .args(["classify", "--format", "text"])
        .arg(&a)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("out_of_bounds"), "{text}");
    assert!(
        text.contains("root cause, line 1: IndexError: Target 5 is out of bounds."),
        "{text}"
    );
}

#[test]
fn unreadable_inputs_exit_2_with_one_line_each() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.log");
    for (arg, want) in [
        (missing.clone(), "cannot open"),
        (dir.path().to_path_buf(), "is a directory"),
    ] {
        let out = binary().arg("classify").arg(&arg).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{arg:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn binary_and_empty_files_are_unknown_not_errors() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("core.bin");
    std::fs::write(&bin, b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00").unwrap();
    let empty = dir.path().join("empty.log");
    std::fs::write(&empty, b"").unwrap();
    let out = binary()
        .arg("classify")
        .arg(&bin)
        .arg(&empty)
        .output()
        .unwrap();
    assert!(out.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["category"], "unknown");
    assert!(lines[0]["notes"][0].as_str().unwrap().contains("binary"));
    assert_eq!(lines[1]["notes"][0], "the input is empty");
}

#[test]
fn rules_check_passes_on_the_builtin_set_and_names_the_failing_rule() {
    let out = binary().args(["rules", "check"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok ("));

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("team.toml");
    std::fs::write(
        &bad,
        "[[rule]]\nid = \"team.kernel\"\ncategory = \"unknown\"\ntitle = \"T\"\npattern = \"MyKernelError\"\nexamples = [\"OtherError\"]\n",
    )
    .unwrap();
    let out = binary()
        .args(["rules", "check"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rule team.kernel: example does not match"),
        "{err}"
    );

    std::fs::write(&bad, "[[rule]]\nid = \"team.bad\"\ncategory = \"unknown\"\ntitle = \"T\"\npattern = \"(unclosed\"\n").unwrap();
    let out = binary()
        .args(["rules", "check"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("rule team.bad:"));
}
