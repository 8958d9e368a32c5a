use std::io::{Seek, Write};

use super::*;

/// A member of a test archive: name, tar entry type byte (`b'0'` file, `b'2'` symlink, `b'1'`
/// hard link, `b'3'` character device, `b'5'` directory), data.
type Member<'a> = (&'a str, u8, &'a [u8]);

/// A zip member: name, Unix mode, data.
type ZipMember<'a> = (&'a str, u32, &'a [u8]);

/// What reading an archive gave: the text members (name, text) and the skipped ones.
type Read = (Vec<(String, String)>, Vec<Skipped>);

/// A `.tar.gz` of `members`, names written verbatim (even the ones tar's builder refuses).
fn tar_gz(members: &[Member<'_>]) -> std::fs::File {
    let mut tar = tar::Builder::new(Vec::new());
    for (name, kind, data) in members {
        let mut h = tar::Header::new_ustar();
        let field = &mut h.as_old_mut().name;
        field[..name.len()].copy_from_slice(name.as_bytes());
        h.set_entry_type(tar::EntryType::new(*kind));
        if *kind == b'2' || *kind == b'1' {
            h.set_link_name("target.log").expect("link name");
        }
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append(&h, *data).expect("append");
    }
    let raw = tar.into_inner().expect("tar");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&raw).expect("gzip");
    file(&gz.finish().expect("gzip"))
}

/// A zip of `members` (deflated), with Unix modes, names written verbatim.
fn zip(members: &[ZipMember<'_>]) -> std::fs::File {
    let mut out = Vec::new();
    let mut archive = rawzip::ZipArchiveWriter::new(&mut out);
    for (name, mode, data) in members {
        let (mut entry, config) = archive
            .new_file(rawzip::path::EntryPath::verbatim(name.as_bytes()))
            .compression_method(rawzip::CompressionMethod::DEFLATE)
            .unix_permissions(*mode)
            .start()
            .expect("entry");
        let enc = flate2::write::DeflateEncoder::new(&mut entry, flate2::Compression::best());
        let mut w = config.wrap(enc);
        w.write_all(data).expect("write");
        let (enc, descriptor) = w.finish().expect("finish");
        enc.finish().expect("deflate");
        entry.finish(descriptor).expect("entry");
    }
    archive.finish().expect("zip");
    file(&out)
}

fn file(bytes: &[u8]) -> std::fs::File {
    let mut f = tempfile::tempfile().expect("tempfile");
    f.write_all(bytes).expect("write");
    f.rewind().expect("rewind");
    f
}

/// The text members read (name, text) and the skipped ones, or the refusal.
fn read_all(kind: Kind, f: std::fs::File, caps: &Caps) -> Result<Read, ArchiveError> {
    let mut got = Vec::new();
    let skipped = read_members(kind, f, caps, |name, r| {
        let mut s = String::new();
        std::io::Read::read_to_string(r, &mut s)?;
        got.push((name.to_owned(), s));
        Ok(())
    })?;
    Ok((got, skipped))
}

#[test]
fn text_members_are_read_in_order_and_others_listed_as_skipped() {
    let elf = b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x3e\x00";
    let tar = tar_gz(&[
        ("./logs/", b'5', b""),
        ("./logs/rank0.log", b'0', b"step 1\nok\n"),
        ("logs/rank1.log", b'0', b"RuntimeError: boom\n"),
        ("core", b'0', elf),
        ("empty.log", b'0', b"\n\n"),
    ]);
    let zip = zip(&[
        ("logs/rank0.log", 0o100_644, b"step 1\nok\n"),
        ("logs/rank1.log", 0o100_644, b"RuntimeError: boom\n"),
        ("core", 0o100_755, elf),
        ("empty.log", 0o100_644, b"\n\n"),
    ]);
    for (kind, f) in [(Kind::TarGz, tar), (Kind::Zip, zip)] {
        let (got, skipped) = read_all(kind, f, &Caps::default()).expect("read");
        assert_eq!(
            got,
            vec![
                ("logs/rank0.log".to_owned(), "step 1\nok\n".to_owned()),
                (
                    "logs/rank1.log".to_owned(),
                    "RuntimeError: boom\n".to_owned()
                ),
            ],
            "{kind:?}"
        );
        let reasons: Vec<_> = skipped
            .iter()
            .map(|s| (s.name.as_str(), s.reason.as_str()))
            .collect();
        assert_eq!(
            reasons,
            [("core", "not text"), ("empty.log", "empty")],
            "{kind:?}"
        );
    }
}

#[test]
fn unsafe_names_links_devices_and_duplicates_are_refused() {
    let cases: &[(&[Member<'_>], &str)] = &[
        (&[("../etc/passwd", b'0', b"x\n")], "absolute or `..`"),
        (&[("logs/../../x.log", b'0', b"x\n")], "absolute or `..`"),
        (&[("/etc/passwd", b'0', b"x\n")], "absolute or `..`"),
        (&[("rank0.log", b'2', b"")], "is a link"),
        (&[("rank0.log", b'1', b"")], "is a link"),
        (&[("tty", b'3', b"")], "device"),
        (
            &[("a.log", b'0', b"x\n"), ("./a.log", b'0', b"y\n")],
            "appears twice",
        ),
    ];
    for (members, want) in cases {
        let err = read_all(Kind::TarGz, tar_gz(members), &Caps::default())
            .expect_err("refused")
            .to_string();
        assert!(err.contains(want), "{members:?}: {err}");
    }
    let zips: &[(&[ZipMember<'_>], &str)] = &[
        (&[("../x.log", 0o100_644, b"x\n")], "absolute or `..`"),
        (&[("C:\\x.log", 0o100_644, b"x\n")], "absolute or `..`"),
        (&[("link.log", 0o120_777, b"/etc/passwd")], "is a link"),
        (&[("fifo", 0o010_644, b"")], "device"),
    ];
    for (members, want) in zips {
        let err = read_all(Kind::Zip, zip(members), &Caps::default())
            .expect_err("refused")
            .to_string();
        assert!(err.contains(want), "{members:?}: {err}");
    }
}

#[test]
fn bombs_and_caps_are_refused_while_streaming() {
    // 64 MiB of one repeated line compress over a thousand times.
    let line = b"NCCL INFO all good\n".repeat((64 << 20) / 19);
    let members = [("big.log", b'0', &line[..])];
    let err = read_all(Kind::TarGz, tar_gz(&members), &Caps::default()).expect_err("bomb");
    assert!(matches!(err, ArchiveError::Bomb { limit: 250 }), "{err}");
    let err = read_all(
        Kind::Zip,
        zip(&[("big.log", 0o100_644, &line)]),
        &Caps::default(),
    )
    .expect_err("bomb");
    assert!(matches!(err, ArchiveError::Bomb { .. }), "{err}");

    let small = Caps {
        max_files: 2,
        max_decoded_bytes: 4000,
        max_ratio: 250,
    };
    let three = [
        ("a.log", b'0', &b"a\n"[..]),
        ("b.log", b'0', b"b\n"),
        ("c.log", b'0', b"c\n"),
    ];
    let err = read_all(Kind::TarGz, tar_gz(&three), &small).expect_err("files");
    assert!(
        matches!(err, ArchiveError::TooManyFiles { limit: 2 }),
        "{err}"
    );
    let big = vec![b'x'; 5000];
    let err =
        read_all(Kind::Zip, zip(&[("a.log", 0o100_644, &big)]), &small).expect_err("too large");
    assert!(
        matches!(err, ArchiveError::TooLarge { limit: 4000 }),
        "{err}"
    );
    let err =
        read_all(Kind::TarGz, tar_gz(&[("a.log", b'0', &big)]), &small).expect_err("too large");
    assert!(
        matches!(err, ArchiveError::TooLarge { limit: 4000 }),
        "{err}"
    );
}

#[test]
fn what_is_not_an_archive_is_said_so() {
    assert_eq!(Kind::sniff(b"\x1f\x8b\x08\x00"), Some(Kind::TarGz));
    assert_eq!(Kind::sniff(b"PK\x03\x04rest"), Some(Kind::Zip));
    assert_eq!(Kind::sniff(b"RuntimeError: x"), None);
    let err = read_all(Kind::Zip, file(b"PK\x03\x04 not really"), &Caps::default())
        .expect_err("unreadable");
    assert!(matches!(err, ArchiveError::Unreadable(_)), "{err}");
    let err = read_all(
        Kind::TarGz,
        file(b"\x1f\x8b\x08\x00garbage"),
        &Caps::default(),
    )
    .expect_err("unreadable");
    assert!(matches!(err, ArchiveError::Unreadable(_)), "{err}");
}

#[test]
fn names_are_made_relative_or_refused() {
    for (raw, want) in [
        ("./a/b.log", Some("a/b.log")),
        ("a//b.log", Some("a/b.log")),
        ("a\\b.log", Some("a/b.log")),
        ("node-7/stderr", Some("node-7/stderr")),
        ("a/../b.log", None),
        ("/abs.log", None),
        ("\\\\host\\share", None),
        ("D:/x", None),
        ("./", None),
        ("", None),
    ] {
        assert_eq!(safe_name(raw).as_deref(), want, "{raw:?}");
    }
}
