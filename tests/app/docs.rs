//! The README and the book in `docs/` read as text (issue 43 item 6), so a moved chapter, a
//! renamed heading or a new setting cannot leave the documentation behind unnoticed: every
//! relative link names a file that exists and, with `#anchor`, a heading that file has (as mdBook
//! writes heading ids); every chapter is in `SUMMARY.md`; every variable the project names
//! (`GPU_TRIAGE_*`, `BENCH_*`, `GPU_CHECK_*`) and every variable a flag reads is in the
//! Configuration chapter; every subcommand is in the Commands chapter, and every flag in it or
//! in Configuration. No mdBook is needed here: `.ci/run` builds the book itself.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::sync::LazyLock;

use clap::CommandFactory;
use regex::Regex;

/// The repository's root.
fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Where the chapters live, relative to the root.
const BOOK_SRC: &str = "docs/src";

/// Every file under `dir` (relative to the root) whose name ends with one of `extensions`,
/// relative to the root, sorted.
fn files_under(dir: &str, extensions: &[&str]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![repo().join(dir)];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path
                .extension()
                .is_some_and(|ext| extensions.iter().any(|e| ext == *e))
            {
                found.push(path.strip_prefix(repo()).unwrap().to_path_buf());
            }
        }
    }
    found.sort();
    found
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// README.md and every chapter, as (path relative to the root, text).
fn documents() -> Vec<(PathBuf, String)> {
    let mut paths = vec![PathBuf::from("README.md")];
    paths.extend(files_under(BOOK_SRC, &["md"]));
    paths
        .into_iter()
        .map(|path| {
            let text = read(&path);
            (path, text)
        })
        .collect()
}

/// The lines of a Markdown text outside its fenced code blocks.
fn prose_lines(text: &str) -> Vec<&str> {
    let mut in_fence = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
        } else if !in_fence {
            lines.push(line);
        }
    }
    lines
}

/// A line with its inline code spans taken out: a link written inside backticks is no link.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|&c| c == '`').count();
        let fence = &rest[start..start + ticks];
        let after = &rest[start + ticks..];
        match after.find(fence) {
            Some(end) => rest = &after[end + ticks..],
            None => {
                out.push_str(fence);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The id mdBook gives a heading: its text lowercased, whitespace turned into `-`, and every
/// character that is not alphanumeric, `-` or `_` dropped.
fn heading_id(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c.to_ascii_lowercase())
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// The ids of a Markdown text's headings; a repeated id gets `-1`, `-2`, ... as in mdBook.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for line in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let id = heading_id(line[hashes..].trim());
        let mut unique = id.clone();
        let mut n = 0;
        while ids.contains(&unique) {
            n += 1;
            unique = format!("{id}-{n}");
        }
        ids.insert(unique);
    }
    ids
}

/// The targets of a Markdown text's links: inline `[text](target)` and reference definitions
/// `[name]: target`, outside code.
fn link_targets(text: &str) -> Vec<String> {
    static INLINE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r#"\]\(\s*<?([^()\s<>]*)>?(?:\s+"[^"]*")?\s*\)"#).unwrap());
    static DEFINITION: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^\s{0,3}\[[^\]]+\]:\s*<?([^\s<>]+)>?").unwrap());
    let mut targets = Vec::new();
    for line in prose_lines(text) {
        let line = without_code_spans(line);
        for caps in INLINE
            .captures_iter(&line)
            .chain(DEFINITION.captures_iter(&line))
        {
            targets.push(caps[1].to_string());
        }
    }
    targets
}

/// `path` with its `.` and `..` components resolved, or None when it climbs above the root.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(part) => out.push(part),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// What is wrong with the link `target` written in the document `from`, if anything.
fn broken_link(from: &Path, target: &str) -> Option<String> {
    static SCHEME: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^[A-Za-z][A-Za-z0-9+.-]*:").unwrap());
    if SCHEME.is_match(target) {
        return None; // a web address: not checked here
    }
    let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
    let resolved = if file.is_empty() {
        from.to_path_buf()
    } else if file.starts_with('/') {
        return Some("an absolute path resolves neither in the book nor on the web".into());
    } else {
        match normalize(&from.parent().unwrap_or(Path::new("")).join(file)) {
            Some(path) => path,
            None => return Some("it climbs out of the repository".into()),
        }
    };
    if from.starts_with(BOOK_SRC) && !resolved.starts_with(BOOK_SRC) {
        return Some(format!(
            "{} is outside {BOOK_SRC}, so the built book does not have it",
            resolved.display()
        ));
    }
    if !repo().join(&resolved).exists() {
        return Some(format!("{} does not exist", resolved.display()));
    }
    if fragment.is_empty() {
        return None;
    }
    if resolved.extension().is_none_or(|ext| ext != "md") {
        return Some(format!(
            "#{fragment} on {}, which has no headings",
            resolved.display()
        ));
    }
    let ids = anchors(&read(&resolved));
    (!ids.contains(fragment)).then(|| {
        format!(
            "no heading of {} has the id #{fragment} (it has: {})",
            resolved.display(),
            ids.into_iter().collect::<Vec<_>>().join(", ")
        )
    })
}

#[test]
fn every_relative_link_of_the_readme_and_the_book_names_a_file_and_heading_that_exist() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for (path, text) in documents() {
        for target in link_targets(&text) {
            checked += 1;
            if let Some(why) = broken_link(&path, &target) {
                problems.push(format!("{}: ({target}): {why}", path.display()));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the link reader broken?"
    );
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_link_checker_refuses_a_missing_file_a_missing_heading_and_a_way_out_of_the_book() {
    let chapter = Path::new("docs/src/api.md");
    assert_eq!(broken_link(chapter, "search.md"), None);
    assert_eq!(broken_link(chapter, "triage.md#merging-groups"), None);
    assert_eq!(broken_link(chapter, "https://example.com/x.md#nope"), None);
    assert!(broken_link(chapter, "no-such-chapter.md").is_some());
    assert!(broken_link(chapter, "triage.md#no-such-heading").is_some());
    assert!(broken_link(chapter, "#no-such-heading").is_some());
    assert!(broken_link(chapter, "../../src/cli.rs").is_some());
    assert!(broken_link(Path::new("README.md"), "docs/src/api.md").is_none());
    assert_eq!(
        heading_id("Benchmark: find in a 128 MiB log"),
        "benchmark-find-in-a-128-mib-log"
    );
    assert_eq!(
        heading_id("`db move-logs` and_more"),
        "db-move-logs-and_more"
    );
    assert_eq!(
        link_targets("a [b](c.md#d) `[e](f.md)` [g]: h.md\n```\n[i](j.md)\n```\n"),
        ["c.md#d"]
    );
}

#[test]
fn every_chapter_is_in_the_summary_and_the_summary_names_only_chapters() {
    let summary_path = PathBuf::from(BOOK_SRC).join("SUMMARY.md");
    let listed: BTreeSet<PathBuf> = link_targets(&read(&summary_path))
        .into_iter()
        .map(|target| PathBuf::from(BOOK_SRC).join(target))
        .collect();
    let chapters: BTreeSet<PathBuf> = files_under(BOOK_SRC, &["md"])
        .into_iter()
        .filter(|path| *path != summary_path)
        .collect();
    let unlisted: Vec<_> = chapters.difference(&listed).collect();
    assert!(
        unlisted.is_empty(),
        "chapters missing from {}: {unlisted:?}",
        summary_path.display()
    );
    let missing: Vec<_> = listed.difference(&chapters).collect();
    assert!(
        missing.is_empty(),
        "SUMMARY.md lists no such chapter: {missing:?}"
    );
}

/// Every variable name of the project's families in a text: `GPU_TRIAGE_*` (the service, the
/// tests, CI, the action, the compose file), `BENCH_*` (the benchmarks) and `GPU_CHECK_*` (the
/// GPU check). A prefix that stands for a family (`GPU_TRIAGE_JOB_*`) ends with `_` and is no
/// name.
fn variable_names(text: &str) -> BTreeSet<String> {
    static NAME: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?-u:\b)(?:GPU_TRIAGE|BENCH|GPU_CHECK)_[A-Z0-9_]*").unwrap());
    NAME.find_iter(text)
        .map(|m| m.as_str().to_string())
        .filter(|name| !name.ends_with('_'))
        .collect()
}

/// The files whose variables must be documented: the code, the integration tests, the
/// benchmarks, the examples, the scripts, CI, the action and the compose file (not the labelled
/// logs under `tests/`).
fn files_naming_variables() -> Vec<PathBuf> {
    let mut files = files_under("src", &["rs", "py", "toml", "sh"]);
    files.extend(files_under("tests/app", &["rs", "mjs", "py", "sh"]));
    files.extend(files_under("tests/oidc", &["mjs", "js"]));
    files.extend(files_under("benches", &["rs", "sql"]));
    files.extend(files_under("examples", &["rs"]));
    files.extend(
        [
            "scripts/gpu-check",
            ".ci/run",
            "action.yml",
            "docker-compose.yml",
            "Dockerfile",
        ]
        .map(PathBuf::from),
    );
    files.retain(|path| path != Path::new("tests/app/docs.rs"));
    files
}

/// Every subcommand of the CLI with its path from the top (`["token", "create"]`).
fn subcommands() -> Vec<(Vec<String>, clap::Command)> {
    fn walk(path: &[String], command: &clap::Command, out: &mut Vec<(Vec<String>, clap::Command)>) {
        for sub in command
            .get_subcommands()
            .filter(|sub| sub.get_name() != "help")
        {
            let mut here = path.to_vec();
            here.push(sub.get_name().to_string());
            out.push((here.clone(), sub.clone()));
            walk(&here, sub, out);
        }
    }
    let mut out = Vec::new();
    walk(&[], &gpu_triage::cli::Cli::command(), &mut out);
    out
}

#[test]
fn every_environment_variable_the_project_names_is_in_the_configuration_chapter() {
    let configuration = read(Path::new("docs/src/configuration.md"));
    let documented: BTreeSet<String> = Regex::new(r"`([A-Z][A-Z0-9_]*)`")
        .unwrap()
        .captures_iter(&configuration)
        .map(|caps| caps[1].to_string())
        .collect();
    let mut missing = BTreeSet::new();
    for path in files_naming_variables() {
        for name in variable_names(&read(&path)) {
            if !documented.contains(&name) {
                missing.insert(format!("{name} (named in {})", path.display()));
            }
        }
    }
    let mut flag_variables = 0;
    for (path, command) in subcommands() {
        for arg in command.get_arguments() {
            let Some(env) = arg.get_env() else { continue };
            flag_variables += 1;
            let env = env.to_string_lossy();
            if !documented.contains(env.as_ref()) {
                missing.insert(format!("{env} (read by `{}`)", path.join(" ")));
            }
        }
    }
    assert!(
        flag_variables > 40,
        "only {flag_variables} flags read a variable"
    );
    assert!(
        missing.is_empty(),
        "not in docs/src/configuration.md (as `NAME`):\n{}",
        missing.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn every_subcommand_is_in_the_commands_chapter_and_every_flag_in_it_or_the_configuration() {
    let commands = read(Path::new("docs/src/cli.md"));
    let configuration = read(Path::new("docs/src/configuration.md"));
    let spans: Vec<String> = Regex::new(r"`([^`]+)`")
        .unwrap()
        .captures_iter(&commands)
        .map(|caps| caps[1].trim().to_string())
        .collect();
    let flag = Regex::new(r"--[a-z0-9][a-z0-9-]*").unwrap();
    let documented_flags: BTreeSet<&str> = flag
        .find_iter(&commands)
        .chain(flag.find_iter(&configuration))
        .map(|m| m.as_str())
        .collect();
    // `gpu-triage token create ...` or, for a subcommand of a subcommand, `token list ...`.
    let names = |span: &str, words: &str| {
        span.strip_prefix(words)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '[', '\\']))
    };
    let mut missing = Vec::new();
    let all = subcommands();
    assert!(all.len() >= 15, "only {} subcommands found", all.len());
    for (path, command) in &all {
        let words = path.join(" ");
        let with_binary = format!("gpu-triage {words}");
        let found = spans
            .iter()
            .any(|span| names(span, &with_binary) || (path.len() > 1 && names(span, &words)));
        if !found {
            missing.push(format!("subcommand `gpu-triage {words}`"));
        }
        for arg in command.get_arguments().filter(|arg| !arg.is_hide_set()) {
            let Some(long) = arg.get_long() else { continue };
            if long == "help" || long == "version" {
                continue;
            }
            if !documented_flags.contains(format!("--{long}").as_str()) {
                missing.push(format!("flag --{long} of `gpu-triage {words}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not in docs/src/cli.md (flags: or docs/src/configuration.md):\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_readme_stays_short_and_leads_to_the_book() {
    let readme = read(Path::new("README.md"));
    let lines = readme.lines().count();
    assert!(
        lines <= 200,
        "README.md has {lines} lines; the details belong in docs/src"
    );
    let targets = link_targets(&readme);
    for chapter in [
        "docs/src/configuration.md",
        "docs/src/cli.md",
        "docs/src/api.md",
    ] {
        assert!(
            targets.iter().any(|t| t.split('#').next() == Some(chapter)),
            "README.md does not link to {chapter}"
        );
    }
    assert!(
        readme.contains("cargo run --release -- serve"),
        "the first command is gone"
    );
    assert!(
        readme.contains("\ncargo test\n"),
        "the test command CI runs is gone"
    );
}
