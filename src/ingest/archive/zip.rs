//! Zip members for [`super::read_members`]: the central directory read with rawzip, each
//! member inflated (store or deflate) through the same caps as a tar stream, its size and CRC
//! verified as it is read.

use std::cell::Cell;
use std::io::{self, Read};
use std::rc::Rc;

use rawzip::{CompressionMethod, RECOMMENDED_BUFFER_SIZE, ZipArchive};

use super::{ArchiveError, Capped, Counted, MemberKind, Walk};

/// Unix file type bits of a zip member's mode.
const S_IFMT: u32 = 0o170_000;
const S_IFREG: u32 = 0o100_000;
const S_IFDIR: u32 = 0o040_000;
const S_IFLNK: u32 = 0o120_000;

pub(super) fn zip_members<F: FnMut(&str, &mut dyn Read) -> io::Result<()>>(
    file: std::fs::File,
    walk: &mut Walk<F>,
) -> Result<(), ArchiveError> {
    let unreadable = |e: rawzip::Error| ArchiveError::Unreadable(e.to_string());
    let mut buffer = vec![0u8; RECOMMENDED_BUFFER_SIZE];
    let archive = ZipArchive::from_file(file, &mut buffer).map_err(unreadable)?;
    let mut entries = archive.entries(&mut buffer);
    while let Some(entry) = entries.next_entry().map_err(unreadable)? {
        let mode = entry.mode().value() & S_IFMT;
        let kind = if entry.is_dir() || mode == S_IFDIR {
            MemberKind::Dir
        } else if mode == S_IFLNK {
            MemberKind::Link
        } else if mode == S_IFREG || mode == 0 {
            MemberKind::File
        } else {
            MemberKind::Device
        };
        let Some(name) = walk.admit(entry.file_path().as_bytes(), kind)? else {
            continue;
        };
        let method = entry.compression_method();
        if method != CompressionMethod::STORE && method != CompressionMethod::DEFLATE {
            walk.skip(
                &name,
                "compressed with a method other than store or deflate",
            );
            continue;
        }
        let member = archive.get_entry(entry.wayfinder()).map_err(unreadable)?;
        let compressed = Rc::new(Cell::new(0));
        let raw = Counted {
            inner: member.reader(),
            read: compressed.clone(),
        };
        let decoded: Box<dyn Read + '_> = if method == CompressionMethod::DEFLATE {
            Box::new(member.verifying_reader(flate2::read::DeflateDecoder::new(raw)))
        } else {
            Box::new(member.verifying_reader(raw))
        };
        let mut capped = Capped::new(decoded, walk.caps, walk.decoded, compressed);
        walk.member(&name, &mut capped)?;
        walk.decoded = capped.total;
    }
    Ok(())
}
