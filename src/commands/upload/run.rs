//! `upload DIR`, `upload ARCHIVE` and `upload --run FILE...`: a failed run's artifacts sent as
//! one run (issue 41). A directory is walked recursively (symbolic links are not followed), its
//! text files kept (a binary's first bytes, or an empty file, leave it out), filtered by
//! `--include`/`--exclude` globs on the path inside the directory; an archive (`.tar.gz`,
//! `.tgz`, `.zip`) is sent as it is, for the server to read. A run of up to [`MAX_PARTS`] files
//! goes as that many `log` parts; a larger one is packed here into a `.tar.gz` and sent as one
//! `archive` part.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use super::BadInput;

/// Files sent as separate `log` parts at most (the server takes 64 parts per body).
pub const MAX_PARTS: usize = 48;

/// What one upload sends.
#[derive(Debug)]
pub enum Job {
    /// One log, one report (as before runs).
    Single(PathBuf),
    /// Files that make one run, each with its name in the run.
    Run {
        /// What the output calls the run (the directory, or `run of N files`).
        label: PathBuf,
        files: Vec<(PathBuf, String)>,
    },
    /// An archive sent as it is.
    Archive(PathBuf),
}

/// Which files of a directory are sent.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

impl Filter {
    fn keeps(&self, rel: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|g| glob_matches(g, rel)))
            && !self.exclude.iter().any(|g| glob_matches(g, rel))
    }
}

/// Sorts the command line's paths into uploads: each directory and archive a run, the other
/// files one report each, or all of them one run with `--run`.
pub fn plan(paths: &[PathBuf], as_run: bool, filter: &Filter) -> Result<Vec<Job>, BadInput> {
    let mut jobs = Vec::new();
    let mut loose = Vec::new();
    for path in paths {
        let meta = fs::metadata(path)
            .map_err(|e| BadInput(format!("{}: cannot read: {e}", path.display())))?;
        if meta.is_dir() {
            let files = walk(path, filter)?;
            if files.is_empty() {
                return Err(BadInput(format!(
                    "{}: no text file to upload in this directory",
                    path.display()
                )));
            }
            jobs.push(Job::Run {
                label: path.clone(),
                files,
            });
        } else if is_archive(path) {
            jobs.push(Job::Archive(path.clone()));
        } else {
            loose.push(path.clone());
        }
    }
    if as_run && !loose.is_empty() {
        let mut files = Vec::new();
        for path in loose {
            let name = run_name(&path);
            if files.iter().any(|(_, n)| *n == name) {
                return Err(BadInput(format!(
                    "two files would be named {name:?} in the run; pass them by distinct relative paths"
                )));
            }
            files.push((path, name));
        }
        let label = PathBuf::from(format!("run of {} files", files.len()));
        jobs.push(Job::Run { label, files });
    } else {
        jobs.extend(loose.into_iter().map(Job::Single));
    }
    Ok(jobs)
}

/// A file's name in a run: its relative path as given (without `./`), or its base name for an
/// absolute path or one that climbs with `..`.
fn run_name(path: &Path) -> String {
    let text = path.to_string_lossy().replace('\\', "/");
    crate::ingest::archive::safe_name(&text).unwrap_or_else(|| {
        path.file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned()
    })
}

/// Whether `path` is an archive by its name or its first bytes.
fn is_archive(path: &Path) -> bool {
    let name = path.to_string_lossy().to_ascii_lowercase();
    if [".tar.gz", ".tgz", ".zip"]
        .iter()
        .any(|e| name.ends_with(e))
    {
        return true;
    }
    let mut head = [0u8; 4];
    let n = File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    crate::ingest::archive::Kind::sniff(&head[..n]).is_some()
}

/// The text files under `dir`, with their paths inside it, sorted by path.
fn walk(dir: &Path, filter: &Filter) -> Result<Vec<(PathBuf, String)>, BadInput> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        let entries = fs::read_dir(&at)
            .map_err(|e| BadInput(format!("{}: cannot read: {e}", at.display())))?;
        for entry in entries {
            let entry = entry.map_err(|e| BadInput(format!("{}: {e}", at.display())))?;
            let kind = entry
                .file_type()
                .map_err(|e| BadInput(format!("{}: {e}", entry.path().display())))?;
            let path = entry.path();
            if kind.is_dir() {
                pending.push(path);
                continue;
            }
            if !kind.is_file() {
                continue;
            }
            let rel = path
                .strip_prefix(dir)
                .unwrap_or(&path)
                .to_string_lossy()
                .replace('\\', "/");
            if filter.keeps(&rel) && is_text(&path) {
                out.push((path, rel));
            }
        }
        if out.len() > crate::ingest::archive::DEFAULT_MAX_FILES {
            return Err(BadInput(format!(
                "{}: more than {} files; narrow it with --include/--exclude",
                dir.display(),
                crate::ingest::archive::DEFAULT_MAX_FILES
            )));
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

/// Whether a file holds text: not empty, and its start does not look binary.
fn is_text(path: &Path) -> bool {
    let mut head = Vec::with_capacity(8192);
    let read = File::open(path).and_then(|f| f.take(8192).read_to_end(&mut head));
    read.is_ok() && !head.iter().all(u8::is_ascii_whitespace) && !crate::ingest::looks_binary(&head)
}

/// Packs `files` into a `.tar.gz` in a temporary file (a run too large for separate parts).
pub fn pack(files: &[(PathBuf, String)]) -> io::Result<tempfile::NamedTempFile> {
    let out = tempfile::Builder::new().suffix(".tar.gz").tempfile()?;
    let gz = flate2::write::GzEncoder::new(out.reopen()?, flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    for (path, name) in files {
        let mut file = File::open(path)?;
        let mut header = tar::Header::new_gnu();
        header.set_size(file.metadata()?.len());
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, name, &mut file)?;
    }
    tar.into_inner()?.finish()?.flush()?;
    Ok(out)
}

/// Whether `path` matches `glob`: `*` and `?` within a path segment, `**` across segments; a
/// glob without `/` is matched against the file name alone.
#[must_use]
pub fn glob_matches(glob: &str, path: &str) -> bool {
    let subject = if glob.contains('/') {
        path
    } else {
        path.rsplit('/').next().unwrap_or(path)
    };
    matches(glob.as_bytes(), subject.as_bytes())
}

fn matches(g: &[u8], s: &[u8]) -> bool {
    match g.first() {
        None => s.is_empty(),
        Some(b'*') if g.get(1) == Some(&b'*') => {
            let rest = g[2..].strip_prefix(b"/").unwrap_or(&g[2..]);
            (0..=s.len()).any(|i| matches(rest, &s[i..]))
        }
        Some(b'*') => (0..=s.len())
            .take_while(|&i| i == 0 || s[i - 1] != b'/')
            .any(|i| matches(&g[1..], &s[i..])),
        Some(b'?') => s.first().is_some_and(|&c| c != b'/') && matches(&g[1..], &s[1..]),
        Some(&c) => s.first() == Some(&c) && matches(&g[1..], &s[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_names_and_paths() {
        let cases = [
            ("*.log", "node-7/rank3.log", true),
            ("*.log", "node-7/stderr", false),
            ("node-*/stderr", "node-7/stderr", true),
            ("node-*/stderr", "a/node-7/stderr", false),
            ("**/stderr", "a/node-7/stderr", true),
            ("**/stderr", "stderr", true),
            ("rank?.log", "x/rank3.log", true),
            ("rank?.log", "x/rank13.log", false),
            ("logs/**", "logs/a/b.txt", true),
        ];
        for (glob, path, want) in cases {
            assert_eq!(glob_matches(glob, path), want, "{glob} {path}");
        }
    }

    #[test]
    fn a_directory_is_one_run_of_its_text_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        fs::create_dir_all(root.join("node-7/attempt_0/2")).expect("mkdir");
        fs::write(
            root.join("node-7/attempt_0/2/stderr.log"),
            "ValueError: x\n",
        )
        .expect("w");
        fs::write(root.join("node-7/launcher.out"), "ChildFailedError:\n").expect("w");
        fs::write(
            root.join("node-7/core"),
            b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00",
        )
        .expect("w");
        fs::write(root.join("empty.log"), "").expect("w");
        fs::write(root.join("notes.md"), "# notes\n").expect("w");
        let filter = Filter {
            include: Vec::new(),
            exclude: vec!["*.md".into()],
        };
        let jobs = plan(&[root.to_path_buf()], false, &filter).expect("plan");
        let [Job::Run { files, .. }] = &jobs[..] else {
            panic!("{jobs:?}")
        };
        let names: Vec<&str> = files.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(
            names,
            ["node-7/attempt_0/2/stderr.log", "node-7/launcher.out"]
        );

        let packed = pack(files).expect("pack");
        let mut seen = Vec::new();
        let skipped = crate::ingest::archive::read_members(
            crate::ingest::archive::Kind::TarGz,
            packed.reopen().expect("reopen"),
            &crate::ingest::archive::Caps::default(),
            |name, _| {
                seen.push(name.to_owned());
                Ok(())
            },
        )
        .expect("the packed run reads back");
        assert!(skipped.is_empty());
        assert_eq!(seen, names);
    }
}
