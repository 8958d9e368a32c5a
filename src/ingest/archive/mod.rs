//! A run's artifacts as one archive (`.tar.gz`, `.tgz`, `.zip`): its members read one by one,
//! streaming, under caps checked while the bytes decode, so a hostile archive is refused before
//! it costs more than the caps allow (issue 41 item 1, SECURITY.md item 1).
//!
//! Refused, whole (nothing of the archive is kept): more members than the files-per-run cap,
//! more decoded bytes than the run's cap (the per-log cap applies to the run), a compression
//! ratio past the bomb cap, an absolute or `..` name, a link (symbolic or hard), a device, FIFO
//! or socket, two members of one name. Listed as skipped, with the reason: members that are not
//! text (a binary's first bytes), empty members, zip members compressed with a method other
//! than store or deflate. Directories are passed over. Pure: bytes in, members out; the caller
//! decides what a member becomes.

use std::collections::HashSet;
use std::io::{self, Read};

use super::looks_binary;

mod zip;

/// What an archive may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Members that are files (text or not), at most.
    pub max_files: usize,
    /// Decoded bytes of the whole archive, at most (the per-log cap, applied to the run).
    pub max_decoded_bytes: u64,
    /// Decoded bytes per compressed byte, at most, once past [`RATIO_FLOOR`] decoded bytes.
    pub max_ratio: u64,
}

/// Files per run by default.
pub const DEFAULT_MAX_FILES: usize = 4096;

/// Decoded bytes below which the ratio is not judged: a small, very repetitive log compresses
/// far better than any real bomb would need, and is harmless.
pub const RATIO_FLOOR: u64 = 1 << 20;

impl Default for Caps {
    fn default() -> Self {
        Caps {
            max_files: DEFAULT_MAX_FILES,
            max_decoded_bytes: 128 << 20,
            max_ratio: 250,
        }
    }
}

/// The archive formats read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A gzip-compressed tar stream (`.tar.gz`, `.tgz`).
    TarGz,
    /// A zip archive.
    Zip,
}

impl Kind {
    /// The format `head` (the archive's first bytes) starts like, if any.
    #[must_use]
    pub fn sniff(head: &[u8]) -> Option<Kind> {
        if head.starts_with(&[0x1f, 0x8b]) {
            Some(Kind::TarGz)
        } else if head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06") {
            Some(Kind::Zip)
        } else {
            None
        }
    }
}

/// Why an archive is refused.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// Not a `.tar.gz`, `.tgz` or `.zip`, or not readable as one.
    #[error("the archive is not a readable .tar.gz, .tgz or .zip: {0}")]
    Unreadable(String),
    /// More file members than [`Caps::max_files`].
    #[error("the archive holds more than {limit} files (the per-run cap)")]
    TooManyFiles {
        /// The cap.
        limit: usize,
    },
    /// More decoded bytes than [`Caps::max_decoded_bytes`].
    #[error("the archive decodes to more than {limit} bytes (the per-run cap)")]
    TooLarge {
        /// The cap.
        limit: u64,
    },
    /// Decoded bytes per compressed byte past [`Caps::max_ratio`]: a compression bomb.
    #[error(
        "the archive decodes more than {limit} times its compressed size: refused as a compression bomb"
    )]
    Bomb {
        /// The cap.
        limit: u64,
    },
    /// A member whose name is absolute or climbs out with `..`.
    #[error("member {name:?} has an absolute or `..` name")]
    UnsafeName {
        /// The name as the archive gives it.
        name: String,
    },
    /// A symbolic or hard link.
    #[error("member {name:?} is a link; links are refused")]
    Link {
        /// The member's name.
        name: String,
    },
    /// A device, FIFO or socket.
    #[error("member {name:?} is a device, FIFO or socket; only files are accepted")]
    Device {
        /// The member's name.
        name: String,
    },
    /// Two members of the same name.
    #[error("member {name:?} appears twice")]
    Duplicate {
        /// The name.
        name: String,
    },
    /// The caller's handling of a member failed.
    #[error("reading member {name:?}: {source}")]
    Member {
        /// The member's name.
        name: String,
        /// What failed.
        source: io::Error,
    },
}

/// A member left out, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// The member's name.
    pub name: String,
    /// Why it was left out (`not text`, `empty`, ...).
    pub reason: String,
}

/// How much of a member's start decides whether it is text.
const SNIFF: usize = 8192;

/// Reads the archive of `kind` from `file`, handing each text member to `visit` (its safe name
/// and a reader of its decoded bytes) in archive order; returns the members skipped. An error
/// from `visit` ends the reading as [`ArchiveError::Member`]. The caps hold whatever `visit`
/// reads.
pub fn read_members(
    kind: Kind,
    file: std::fs::File,
    caps: &Caps,
    visit: impl FnMut(&str, &mut dyn Read) -> io::Result<()>,
) -> Result<Vec<Skipped>, ArchiveError> {
    let mut walk = Walk {
        caps: *caps,
        files: 0,
        entries: 0,
        decoded: 0,
        names: HashSet::new(),
        skipped: Vec::new(),
        visit,
    };
    match kind {
        Kind::TarGz => tar_members(file, &mut walk)?,
        Kind::Zip => zip::zip_members(file, &mut walk)?,
    }
    Ok(walk.skipped)
}

/// What a member is, as far as the walk cares.
enum MemberKind {
    File,
    Dir,
    Link,
    Device,
    /// Anything else (a tar extension header the reader did not consume), skipped with this
    /// reason.
    Other(&'static str),
}

/// The state of one archive's walk: counts against the caps, names seen, members skipped.
struct Walk<F> {
    caps: Caps,
    files: usize,
    /// Members of any kind (directories too), capped at four times the files.
    entries: usize,
    /// Decoded bytes handed out by member readers (zip; tar counts its whole stream).
    decoded: u64,
    names: HashSet<String>,
    skipped: Vec<Skipped>,
    visit: F,
}

impl<F: FnMut(&str, &mut dyn Read) -> io::Result<()>> Walk<F> {
    /// Checks one member's name and kind; `Some(name)` when it is a file to read.
    fn admit(&mut self, raw_name: &[u8], kind: MemberKind) -> Result<Option<String>, ArchiveError> {
        self.entries += 1;
        if self.entries > self.caps.max_files.saturating_mul(4) {
            return Err(ArchiveError::TooManyFiles {
                limit: self.caps.max_files,
            });
        }
        let shown = String::from_utf8_lossy(raw_name).into_owned();
        let name = safe_name(&shown).ok_or_else(|| ArchiveError::UnsafeName {
            name: shown.clone(),
        })?;
        match kind {
            MemberKind::Dir => return Ok(None),
            MemberKind::Link => return Err(ArchiveError::Link { name }),
            MemberKind::Device => return Err(ArchiveError::Device { name }),
            MemberKind::Other(reason) => {
                self.skip(&name, reason);
                return Ok(None);
            }
            MemberKind::File => {}
        }
        self.files += 1;
        if self.files > self.caps.max_files {
            return Err(ArchiveError::TooManyFiles {
                limit: self.caps.max_files,
            });
        }
        if !self.names.insert(name.clone()) {
            return Err(ArchiveError::Duplicate { name });
        }
        Ok(Some(name))
    }

    /// Lists `name` as skipped.
    fn skip(&mut self, name: &str, reason: &str) {
        self.skipped.push(Skipped {
            name: name.to_owned(),
            reason: reason.to_owned(),
        });
    }

    /// Sniffs a file member's start and hands it to the visitor when it is text or a pickle.
    fn member(&mut self, name: &str, data: &mut dyn Read) -> Result<(), ArchiveError> {
        let mut head = Vec::with_capacity(SNIFF);
        data.take(SNIFF as u64)
            .read_to_end(&mut head)
            .map_err(|e| member_error(name, e))?;
        if head.iter().all(u8::is_ascii_whitespace) {
            self.skip(name, "empty");
            return Ok(());
        }
        // A flight-recorder dump (a pickle) goes to the visitor, which reads it as one.
        if looks_binary(&head) && !super::pickle::looks_like(&head) {
            self.skip(name, "not text");
            return Ok(());
        }
        let mut whole = io::Cursor::new(head).chain(data);
        (self.visit)(name, &mut whole).map_err(|e| member_error(name, e))
    }
}

/// What a failed read of member `name` means: the cap it passed, a member that does not decode
/// (corrupt data, a wrong CRC or size), or the visitor's own failure.
fn member_error(name: &str, e: io::Error) -> ArchiveError {
    match unwrap_cap(e) {
        Ok(cap) => cap,
        Err(source)
            if matches!(
                source.kind(),
                io::ErrorKind::InvalidData
                    | io::ErrorKind::InvalidInput
                    | io::ErrorKind::UnexpectedEof
            ) =>
        {
            ArchiveError::Unreadable(format!("member {name:?}: {source}"))
        }
        Err(source) => ArchiveError::Member {
            name: name.to_owned(),
            source,
        },
    }
}

/// A cap passed inside a reader travels as an `io::Error` wrapping the [`ArchiveError`]; this
/// takes it back out (`Ok`), or gives the plain I/O error back (`Err`).
fn unwrap_cap(e: io::Error) -> Result<ArchiveError, io::Error> {
    if e.get_ref().is_some_and(|inner| inner.is::<CapPassed>()) {
        let inner = e.into_inner().and_then(|b| b.downcast::<CapPassed>().ok());
        if let Some(cap) = inner {
            return Ok(cap.0);
        }
        return Err(io::Error::other("a cap was passed"));
    }
    Err(e)
}

/// An [`ArchiveError`] carried through `io::Read`.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct CapPassed(ArchiveError);

/// Counts the compressed bytes read from the archive file.
struct Counted<R> {
    inner: R,
    read: std::rc::Rc<std::cell::Cell<u64>>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.set(self.read.get() + n as u64);
        Ok(n)
    }
}

/// Decoded bytes, checked against the size and ratio caps as they come.
struct Capped<R> {
    inner: R,
    caps: Caps,
    /// Decoded bytes of the whole archive so far (this reader's and the members' before it).
    total: u64,
    /// Decoded bytes through this reader so far.
    own: u64,
    /// Compressed bytes behind this reader's so far.
    compressed: std::rc::Rc<std::cell::Cell<u64>>,
}

impl<R> Capped<R> {
    fn new(
        inner: R,
        caps: Caps,
        before: u64,
        compressed: std::rc::Rc<std::cell::Cell<u64>>,
    ) -> Self {
        Capped {
            inner,
            caps,
            total: before,
            own: 0,
            compressed,
        }
    }
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.total += n as u64;
        self.own += n as u64;
        if self.total > self.caps.max_decoded_bytes {
            return Err(io::Error::other(CapPassed(ArchiveError::TooLarge {
                limit: self.caps.max_decoded_bytes,
            })));
        }
        let compressed = self.compressed.get().max(1);
        if self.own > RATIO_FLOOR && self.own / compressed > self.caps.max_ratio {
            return Err(io::Error::other(CapPassed(ArchiveError::Bomb {
                limit: self.caps.max_ratio,
            })));
        }
        Ok(n)
    }
}

/// The member's name without a leading `./`, with `/` separators, when it stays inside the
/// archive: `None` for an empty, absolute (`/x`, `C:\x`, `\\host`) or `..` name.
#[must_use]
pub fn safe_name(raw: &str) -> Option<String> {
    let unified = raw.replace('\\', "/");
    if unified.starts_with('/') || unified.as_bytes().get(1) == Some(&b':') {
        return None;
    }
    let mut parts = Vec::new();
    for part in unified.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            p if p.contains('\0') => return None,
            p => parts.push(p),
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

fn tar_members<F: FnMut(&str, &mut dyn Read) -> io::Result<()>>(
    file: std::fs::File,
    walk: &mut Walk<F>,
) -> Result<(), ArchiveError> {
    let compressed = std::rc::Rc::new(std::cell::Cell::new(0));
    let counted = Counted {
        inner: io::BufReader::new(file),
        read: compressed.clone(),
    };
    // The whole decoded stream (headers and skipped members too) counts against the caps.
    let capped = Capped::new(
        flate2::read::MultiGzDecoder::new(counted),
        walk.caps,
        0,
        compressed,
    );
    let mut archive = tar::Archive::new(capped);
    let entries = archive.entries().map_err(tar_error)?;
    for entry in entries {
        let mut entry = entry.map_err(tar_error)?;
        let kind = entry.header().entry_type();
        let kind = if kind.is_file() || kind.is_contiguous() {
            MemberKind::File
        } else if kind.is_dir() {
            MemberKind::Dir
        } else if kind.is_symlink() || kind.is_hard_link() {
            MemberKind::Link
        } else if kind.is_character_special() || kind.is_block_special() || kind.is_fifo() {
            MemberKind::Device
        } else {
            MemberKind::Other("not a regular file")
        };
        let raw_name = entry.path_bytes().into_owned();
        if let Some(name) = walk.admit(&raw_name, kind)? {
            walk.member(&name, &mut entry)?;
        }
    }
    Ok(())
}

/// A tar or gzip error, or the cap it carries.
fn tar_error(e: io::Error) -> ArchiveError {
    match unwrap_cap(e) {
        Ok(cap) => cap,
        Err(e) => ArchiveError::Unreadable(e.to_string()),
    }
}

#[cfg(test)]
mod tests;
