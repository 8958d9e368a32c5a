//! A log as it streams in: read in blocks that end on line boundaries (so line-wise work sees
//! whole lines whatever the reads return), checked as it goes (empty, blank, binary) and
//! scrubbed of secrets block by block (a private key block dropped whole, a huge line cut where
//! no token can be split from its keyword). Pure: bytes in, bytes out; the upload use case
//! (`app::upload`) hashes, compresses and classifies what comes out, and the classify endpoint
//! checks a body held in memory with [`check_whole`], so both refuse the same logs.

use std::io::{self, Read};

use super::{Reject, looks_binary, scrub};

/// Size of the blocks a log is read in: large enough that the per-block work (one pass of
/// the secret patterns, one gzip write) is cheap per byte, small enough to keep memory flat.
pub const BLOCK: usize = 256 << 10;

/// How much of a log's start the binary check looks at.
const SNIFF: usize = 8192;

/// Reads a log in blocks that end after a newline (a line longer than 16 blocks is cut at a
/// UTF-8 boundary), so that line-wise scrubbing sees whole lines.
pub struct Blocks<R> {
    reader: R,
    buf: Vec<u8>,
    /// `buf[..start]` was handed out by the previous call.
    start: usize,
    eof: bool,
}

impl<R: Read> Blocks<R> {
    /// Blocks of `reader`.
    pub fn new(reader: R) -> Self {
        Blocks {
            reader,
            buf: Vec::with_capacity(2 * BLOCK),
            start: 0,
            eof: false,
        }
    }

    /// The next block, `None` at the end of the input.
    pub fn next_block(&mut self) -> io::Result<Option<&[u8]>> {
        self.buf.drain(..self.start);
        // `buf[..clean]` is known to hold no newline.
        let mut clean = 0;
        loop {
            if self.eof {
                self.start = self.buf.len();
                break;
            }
            if self.buf.len() >= BLOCK {
                if let Some(nl) = memchr::memrchr(b'\n', &self.buf[clean..]) {
                    self.start = clean + nl + 1;
                    break;
                }
                clean = self.buf.len();
                if self.buf.len() >= 16 * BLOCK {
                    self.start = long_line_cut(&self.buf);
                    break;
                }
            }
            // `read_to_end` appends without zeroing the spare capacity first.
            let n = (&mut self.reader)
                .take(BLOCK as u64)
                .read_to_end(&mut self.buf)?;
            self.eof = n == 0;
        }
        Ok((self.start > 0).then(|| &self.buf[..self.start]))
    }
}

/// Checks and scrubs a log block by block, in the order [`Blocks`] hands them out.
#[derive(Debug, Default)]
pub struct Scrubber {
    /// Bytes seen so far.
    total: u64,
    /// Whether any byte so far is not whitespace (a blank log is refused).
    nonblank: bool,
    /// Inside a private key block.
    in_key: bool,
}

impl Scrubber {
    /// Scrubs one block and hands what is to be kept of it to `keep`, in order. The first block
    /// is refused if it looks binary.
    pub fn block<E: From<Reject>>(
        &mut self,
        block: &[u8],
        mut keep: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.total == 0 && looks_binary(&block[..block.len().min(SNIFF)]) {
            return Err(Reject::Binary.into());
        }
        self.total += block.len() as u64;
        self.nonblank = self.nonblank || block.iter().any(|b| !b.is_ascii_whitespace());
        // Most blocks hold no secret at all: one pass of the secret patterns over the whole
        // block says so, and the block is kept as it came.
        if !self.in_key
            && memchr::memmem::find(block, b"PRIVATE KEY").is_none()
            && let Ok(text) = std::str::from_utf8(block)
            && !scrub::might_contain_secret(text)
        {
            return keep(block);
        }
        for line in block.split_inclusive(|&b| b == b'\n') {
            let text = String::from_utf8_lossy(line);
            // A private key spans lines: drop the whole block, whatever the line-wise scrubber
            // sees. The block ends at its END line, or at the first line that cannot be part
            // of a key (a log that only mentions a BEGIN line keeps the rest of its text).
            if self.in_key && !pem_body_line(&text) {
                self.in_key = false;
            }
            if self.in_key || (text.contains("-----BEGIN") && text.contains("PRIVATE KEY")) {
                if !self.in_key {
                    keep(b"[REDACTED:private_key]\n")?;
                }
                self.in_key = !(text.contains("-----END") && text.contains("PRIVATE KEY"));
                continue;
            }
            keep(scrub::scrub(&text).text.as_bytes())?;
        }
        Ok(())
    }

    /// At the end of the input: the bytes seen, or why the log is refused (empty, blank).
    pub fn finish(&self) -> Result<u64, Reject> {
        if self.total == 0 {
            Err(Reject::Empty)
        } else if !self.nonblank {
            Err(Reject::Blank)
        } else {
            Ok(self.total)
        }
    }
}

/// The checks [`Scrubber`] makes, on a log held whole in memory: empty, binary, blank.
pub fn check_whole(bytes: &[u8]) -> Result<(), Reject> {
    if bytes.is_empty() {
        return Err(Reject::Empty);
    }
    if looks_binary(&bytes[..bytes.len().min(SNIFF)]) {
        return Err(Reject::Binary);
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Reject::Blank);
    }
    Ok(())
}

/// Words a secret's keyword may take before the secret itself (`Authorization: Basic <token>`):
/// a whitespace cut goes back this many more words, so keyword and secret are scrubbed together.
const KEYWORD_WORDS: usize = 2;

/// Where to cut a line too long for one block: after its last `\r` (a progress bar's redraw)
/// or, before its last [`KEYWORD_WORDS`] + 1 words, at a space in the final 64 KiB, so that no
/// token is split between two scrubbing passes and no token is parted from its keyword
/// (`Bearer`, `Authorization: Basic`, `PASSWORD:`), and never inside a PEM
/// `-----BEGIN ...-----` header; else at a UTF-8 boundary.
fn long_line_cut(buf: &[u8]) -> usize {
    let from = buf.len().saturating_sub(64 << 10);
    let tail = &buf[from..];
    let at = match memchr::memrchr(b'\r', tail) {
        Some(at) => Some(at),
        None => memchr::memrchr2(b' ', b'\t', tail).map(|mut at| {
            for _ in 0..KEYWORD_WORDS {
                // Skip the run of whitespace, then the word before it.
                let word_end = tail[..at].iter().rposition(|b| !matches!(b, b' ' | b'\t'));
                match word_end.and_then(|e| memchr::memrchr2(b' ', b'\t', &tail[..e])) {
                    Some(prev) => at = prev,
                    None => break,
                }
            }
            at
        }),
    };
    let Some(at) = at else {
        return utf8_boundary(buf);
    };
    let mut cut = from + at + 1;
    // A header's words are separated by spaces: cut before the header instead.
    let window = &buf[cut.saturating_sub(80)..cut];
    if let Some(begin) = memchr::memmem::rfind(window, b"-----BEGIN")
        && memchr::memmem::find(&window[begin + 10..], b"-----").is_none()
    {
        cut = cut.saturating_sub(80) + begin;
    }
    if cut == 0 { utf8_boundary(buf) } else { cut }
}

/// The longest prefix of `buf` that does not end inside a UTF-8 sequence.
fn utf8_boundary(buf: &[u8]) -> usize {
    let mut end = buf.len();
    while end > 0 && end > buf.len().saturating_sub(4) && (buf[end - 1] & 0xC0) == 0x80 {
        end -= 1;
    }
    // `end - 1` is now a lead or ASCII byte; cut before a lead byte whose sequence is cut.
    if end > 0 && buf[end - 1] >= 0xC0 {
        end -= 1;
    }
    if end == 0 { buf.len() } else { end }
}

/// Whether a line can sit inside a PEM block: base64 text, an encryption header
/// (`Proc-Type:`, `DEK-Info:`), the END line, or blank.
fn pem_body_line(line: &str) -> bool {
    let t = line.trim();
    t.is_empty()
        || t.contains("-----END")
        || t.starts_with("Proc-Type:")
        || t.starts_with("DEK-Info:")
        || t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scrubs `log` as an upload does, the reader yielding `step` bytes at a time.
    fn scrubbed(log: &[u8]) -> Result<(Vec<u8>, u64), Reject> {
        let mut blocks = Blocks::new(log);
        let mut scrubber = Scrubber::default();
        let mut kept = Vec::new();
        while let Some(block) = blocks.next_block().expect("a slice reads") {
            scrubber.block(block, |b| -> Result<(), Reject> {
                kept.extend_from_slice(b);
                Ok(())
            })?;
        }
        Ok((kept, scrubber.finish()?))
    }

    #[test]
    fn a_stream_and_a_body_in_memory_are_refused_for_the_same_reasons() {
        let cases: [(&[u8], Option<Reject>); 5] = [
            (b"", Some(Reject::Empty)),
            (b" \n\t\r\n\n   \n", Some(Reject::Blank)),
            (b"\x7fELF\x02\x01\x01\x00\x00\xff\xfe", Some(Reject::Binary)),
            (b"RuntimeError: CUDA error: out of memory\n", None),
            (b"\n\nRuntimeError: x", None),
        ];
        for (log, refused) in cases {
            assert_eq!(check_whole(log).err(), refused, "{log:?}");
            assert_eq!(scrubbed(log).err(), refused, "{log:?}");
        }
    }

    #[test]
    fn secrets_and_key_blocks_are_scrubbed_and_the_size_is_the_input_s() {
        let log = b"token ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5\n-----BEGIN PRIVATE KEY-----\nMIIEabc\n-----END PRIVATE KEY-----\ndone\n";
        let (kept, total) = scrubbed(log).expect("accepted");
        let kept = String::from_utf8(kept).expect("utf-8");
        assert!(!kept.contains("ghp_aB3dE5"), "{kept}");
        assert!(!kept.contains("MIIEabc"), "{kept}");
        assert!(kept.ends_with("[REDACTED:private_key]\ndone\n"), "{kept}");
        assert_eq!(total, log.len() as u64);
    }
}
