//! Caps on the parts of a `multipart/form-data` body that no handler sees (SECURITY.md item 13):
//! the preamble before the first boundary, each part's header block, and the number of parts.
//!
//! axum's `Multipart` (multer underneath) buffers the preamble and a part's header block whole
//! until it finds their end, with no limit: a header block that never ends with `\r\n\r\n`, or a
//! preamble that never reaches the boundary, grows the buffer for as long as the client sends,
//! rescanning it on every chunk. The handlers cap field data only (`uploads::spool` and
//! `read_small`), because that is all they get to see. So the request body is watched on its way
//! to multer instead: [`guard_multipart_body`] wraps the body of every multipart request in
//! [`GuardedBody`], which scans each chunk in one linear pass ([`Scanner`], a small state machine
//! that follows multer's own parse) and, as soon as a cap is passed, ends the body with
//! [`MultipartTooLarge`] instead of handing the chunk on. The upload handlers find that error in
//! their `MultipartError`'s source chain and answer 413 (`uploads::multipart_error`).
//!
//! The scanner looks for the delimiters where multer does, so that both agree on where each
//! part's header block starts: the first `--boundary` anywhere in the body (so a body may start
//! with it, or have a preamble, RFC 2046 section 5.1.1), and `\r\n--boundary` after that; `--`
//! right after a delimiter closes the body, and nothing after it is read. It reads the boundary
//! with multer's own parser, so both always look for the same one. The bytes pass unchanged.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Body as HttpBody, Frame, SizeHint};
use memchr::memmem::Finder;

use super::limits::BodyError;

/// What a multipart body may hold outside its field data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MultipartCaps {
    /// Bytes before the first boundary (clients send none, or a line of text for mail readers).
    pub preamble: u64,
    /// Bytes of one part's header block: from the end of its `--boundary` to the end of the
    /// blank line that ends its headers, both included.
    pub part_header: u64,
    /// Parts in one body (the portal's form has six fields, the API three).
    pub parts: u32,
}

impl Default for MultipartCaps {
    fn default() -> Self {
        MultipartCaps {
            preamble: 16 << 10,
            part_header: 16 << 10,
            parts: 64,
        }
    }
}

/// The error a guarded body ends with; handlers find it in their body error's source chain.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MultipartTooLarge {
    /// The bytes before the first boundary passed [`MultipartCaps::preamble`].
    #[error(
        "the multipart preamble (the bytes before the first boundary) is larger than the {cap}-byte limit"
    )]
    Preamble { cap: u64 },
    /// A part's header block passed [`MultipartCaps::part_header`].
    #[error("a multipart part's header block is larger than the {cap}-byte limit")]
    PartHeader { cap: u64 },
    /// More parts than [`MultipartCaps::parts`].
    #[error("the multipart body has more than {cap} parts")]
    Parts { cap: u32 },
}

impl MultipartTooLarge {
    /// Whether `err` (or anything in its source chain) is a [`MultipartTooLarge`].
    pub fn find<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a MultipartTooLarge> {
        super::limits::find_source(err)
    }
}

/// Middleware: the body of a `multipart/form-data` request is scanned against
/// [`MultipartCaps::default`] as it streams. A request whose boundary multer cannot read is left
/// alone: the `Multipart` extractor refuses it on its own.
pub async fn guard_multipart_body(req: Request, next: Next) -> Response {
    let boundary = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|ct| multer::parse_boundary(ct).ok());
    let Some(boundary) = boundary else {
        return next.run(req).await;
    };
    let (parts, body) = req.into_parts();
    let body = Body::new(GuardedBody {
        inner: body,
        scanner: Some(Scanner::new(&boundary, MultipartCaps::default())),
    });
    next.run(Request::from_parts(parts, body)).await
}

/// Where the scan is, in multer's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Before the first `--boundary`.
    Preamble,
    /// Right after a delimiter: its next two bytes say whether it closes the body (`--`).
    AfterDelimiter,
    /// The rest of the delimiter line (transport padding), up to its `\r\n`.
    DelimiterLine,
    /// A part's headers, up to the blank line (`\r\n\r\n`).
    Headers,
    /// A part's data, up to the next `\r\n--boundary`.
    Data,
    /// After the close delimiter: the epilogue, which multer never reads.
    Done,
}

/// The multipart state machine: fed the body's chunks in order, it fails at the first chunk that
/// passes a cap. It keeps only the few bytes of a delimiter that may straddle two chunks.
#[derive(Debug)]
pub struct Scanner {
    caps: MultipartCaps,
    /// `--boundary`: the first delimiter, wherever it is.
    first: Finder<'static>,
    /// `\r\n--boundary`: every later one.
    next: Finder<'static>,
    /// The end of a delimiter line.
    line_end: Finder<'static>,
    /// The end of a header block.
    blank_line: Finder<'static>,
    stage: Stage,
    /// Bytes the current stage has taken (for the header block: since the delimiter).
    taken: u64,
    /// The last bytes of the current stage, fewer than its needle, for a needle split across
    /// chunks; right after a delimiter, the bytes that decide whether it closes the body.
    carry: Vec<u8>,
    /// Parts begun so far.
    parts: u32,
}

impl Scanner {
    /// A scanner for a body delimited by `boundary` (as the Content-Type names it).
    pub fn new(boundary: &str, caps: MultipartCaps) -> Scanner {
        let first = format!("--{boundary}").into_bytes();
        let next = format!("\r\n--{boundary}").into_bytes();
        Scanner {
            caps,
            first: Finder::new(&first).into_owned(),
            next: Finder::new(&next).into_owned(),
            line_end: Finder::new(b"\r\n").into_owned(),
            blank_line: Finder::new(b"\r\n\r\n").into_owned(),
            stage: Stage::Preamble,
            taken: 0,
            carry: Vec::new(),
            parts: 0,
        }
    }

    /// Takes the body's next chunk; an error once a cap is passed (the scanner is spent then).
    pub fn feed(&mut self, mut chunk: &[u8]) -> Result<(), MultipartTooLarge> {
        while !chunk.is_empty() {
            let used = match self.stage {
                Stage::Done => return Ok(()),
                Stage::Preamble => self.preamble(chunk)?,
                Stage::AfterDelimiter => self.after_delimiter(chunk)?,
                Stage::DelimiterLine | Stage::Headers => self.header_block(chunk)?,
                Stage::Data => {
                    let (used, found) = self.scan(chunk, Needle::Next);
                    if found {
                        self.enter(Stage::AfterDelimiter);
                    }
                    used
                }
            };
            chunk = &chunk[used..];
        }
        Ok(())
    }

    fn preamble(&mut self, chunk: &[u8]) -> Result<usize, MultipartTooLarge> {
        let needle = self.first.needle().len() as u64;
        let (used, found) = self.scan(chunk, Needle::First);
        // What is surely preamble: all but the needle when found, else all but what could still
        // be the start of one.
        let preamble = if found {
            self.taken - needle
        } else {
            self.taken.saturating_sub(needle - 1)
        };
        if preamble > self.caps.preamble {
            return Err(MultipartTooLarge::Preamble {
                cap: self.caps.preamble,
            });
        }
        if found {
            self.enter(Stage::AfterDelimiter);
        }
        Ok(used)
    }

    fn after_delimiter(&mut self, chunk: &[u8]) -> Result<usize, MultipartTooLarge> {
        let used = chunk.len().min(2 - self.carry.len());
        self.carry.extend_from_slice(&chunk[..used]);
        self.taken += used as u64;
        if self.carry.len() < 2 {
            return Ok(used);
        }
        if self.carry == b"--" {
            self.stage = Stage::Done;
            self.carry = Vec::new();
            return Ok(used);
        }
        self.parts += 1;
        if self.parts > self.caps.parts {
            return Err(MultipartTooLarge::Parts {
                cap: self.caps.parts,
            });
        }
        // Both bytes belong to the delimiter line; the second may be the CR of its CRLF.
        self.stage = if self.carry == b"\r\n" {
            self.carry.clear();
            Stage::Headers
        } else {
            self.carry.remove(0);
            Stage::DelimiterLine
        };
        Ok(used)
    }

    /// The delimiter line and the headers after it: one count against the part header cap.
    fn header_block(&mut self, chunk: &[u8]) -> Result<usize, MultipartTooLarge> {
        let needle = if self.stage == Stage::Headers {
            Needle::BlankLine
        } else {
            Needle::LineEnd
        };
        let (used, found) = self.scan(chunk, needle);
        if self.taken > self.caps.part_header {
            return Err(MultipartTooLarge::PartHeader {
                cap: self.caps.part_header,
            });
        }
        if found {
            // `scan` cleared the carry; the block's count goes on until its blank line.
            self.stage = match self.stage {
                Stage::DelimiterLine => Stage::Headers,
                _ => Stage::Data,
            };
        }
        Ok(used)
    }

    fn enter(&mut self, stage: Stage) {
        self.stage = stage;
        self.taken = 0;
        self.carry.clear();
    }

    /// Looks for `needle` in the stream from the carried bytes on: how much of `chunk` the stage
    /// takes (through the end of the needle, or all of it) and whether the needle was found.
    fn scan(&mut self, chunk: &[u8], needle: Needle) -> (usize, bool) {
        let finder = match needle {
            Needle::First => &self.first,
            Needle::Next => &self.next,
            Needle::LineEnd => &self.line_end,
            Needle::BlankLine => &self.blank_line,
        };
        let n = finder.needle().len();
        let carried = self.carry.len();
        // A match that starts in the carry ends within the chunk's first n - 1 bytes, and comes
        // before any match wholly inside the chunk.
        let mut end = None;
        if carried > 0 {
            self.carry
                .extend_from_slice(&chunk[..chunk.len().min(n - 1)]);
            end = finder.find(&self.carry).map(|i| i + n - carried);
            self.carry.truncate(carried);
        }
        if end.is_none() {
            end = finder.find(chunk).map(|i| i + n);
        }
        match end {
            Some(end) => {
                self.carry.clear();
                self.taken += end as u64;
                (end, true)
            }
            None => {
                // Keep the last n - 1 bytes of the stage: a needle may start in them.
                let keep = n - 1;
                self.carry
                    .extend_from_slice(&chunk[chunk.len().saturating_sub(keep)..]);
                let excess = self.carry.len().saturating_sub(keep);
                self.carry.drain(..excess);
                self.taken += chunk.len() as u64;
                (chunk.len(), false)
            }
        }
    }
}

/// The delimiters and line ends the scanner looks for.
#[derive(Clone, Copy, Debug)]
enum Needle {
    First,
    Next,
    LineEnd,
    BlankLine,
}

/// A request body handed on unchanged while its [`Scanner`] accepts it.
struct GuardedBody {
    inner: Body,
    /// `None` once the body failed: it ends there.
    scanner: Option<Scanner>,
}

impl HttpBody for GuardedBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        let Some(scanner) = this.scanner.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref()
                    && let Err(e) = scanner.feed(data)
                {
                    this.scanner = None;
                    return Poll::Ready(Some(Err(Box::new(e))));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(Box::new(e)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.scanner.is_none() || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: MultipartCaps = MultipartCaps {
        preamble: 64,
        part_header: 128,
        parts: 4,
    };

    const HEADER: &str = "Content-Disposition: form-data; name=\"log\"; filename=\"a.log\"\r\n\
                          Content-Type: text/plain\r\n";

    /// A well-formed body: `preamble`, then `parts` parts with `HEADER` and `data`.
    fn body(preamble: &str, parts: usize, data: &str) -> Vec<u8> {
        let mut out = preamble.to_owned();
        for _ in 0..parts {
            out.push_str(&format!("--XyZ\r\n{HEADER}\r\n{data}\r\n"));
        }
        out.push_str("--XyZ--\r\nepilogue");
        out.into_bytes()
    }

    /// Feeds `bytes` in pieces of `piece` bytes; the first error, if any.
    fn feed(bytes: &[u8], piece: usize) -> Result<(), MultipartTooLarge> {
        let mut s = Scanner::new("XyZ", CAPS);
        bytes.chunks(piece).try_for_each(|c| s.feed(c))?;
        Ok(())
    }

    /// Feeds `bytes` at every split into two chunks and in pieces of 1 to 9 bytes.
    fn feed_every_way(bytes: &[u8]) -> Vec<Result<(), MultipartTooLarge>> {
        let mut out = Vec::new();
        for cut in 0..=bytes.len() {
            let mut s = Scanner::new("XyZ", CAPS);
            out.push(s.feed(&bytes[..cut]).and_then(|()| s.feed(&bytes[cut..])));
        }
        out.extend((1..10).map(|piece| feed(bytes, piece)));
        out
    }

    #[test]
    fn well_formed_bodies_pass_however_they_are_cut() {
        let cases = [
            ("directly from the delimiter", body("", 1, "RuntimeError")),
            (
                "a preamble within the cap",
                body("This is a multi-part message in MIME format.\r\n", 2, "x"),
            ),
            (
                "a preamble exactly at the cap",
                body(&"p".repeat(64), 1, "x"),
            ),
            ("empty data", body("", 2, "")),
            (
                "data that looks like a delimiter but is not at a line start",
                body("", 1, "a--XyZ b\r\n-XyZ\r\n--Xy"),
            ),
            ("as many parts as the cap", body("", 4, "x")),
            (
                "transport padding after the delimiters",
                b"--XyZ \t\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n--XyZ--  \r\n"
                    .to_vec(),
            ),
        ];
        for (what, bytes) in cases {
            for (i, result) in feed_every_way(&bytes).into_iter().enumerate() {
                assert_eq!(result, Ok(()), "{what}, way {i}");
            }
        }
    }

    #[test]
    fn a_header_block_within_the_cap_passes_in_one_byte_chunks() {
        // 128 bytes from the end of `--XyZ` through the blank line: the cap.
        let name = "n".repeat(128 - "\r\nContent-Disposition: form-data; name=\"\"\r\n\r\n".len());
        let bytes = format!(
            "--XyZ\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\nx\r\n--XyZ--\r\n"
        );
        assert_eq!(feed(bytes.as_bytes(), 1), Ok(()));
        let one_more = bytes.replacen("name=\"", "name=\"n", 1);
        assert_eq!(
            feed(one_more.as_bytes(), 1),
            Err(MultipartTooLarge::PartHeader { cap: 128 })
        );
    }

    #[test]
    fn passing_a_cap_fails_at_the_chunk_that_passes_it() {
        let long_header = format!("--XyZ\r\nX-Pad: {}", "h".repeat(10_000));
        let long_line = format!("--XyZ{}", " ".repeat(10_000));
        let long_preamble = "p".repeat(10_000);
        let second_header = format!("--XyZ\r\n{HEADER}\r\nx\r\n--XyZ\r\nX: {}", "h".repeat(500));
        let cases = [
            (
                "an unterminated header",
                long_header.as_str(),
                MultipartTooLarge::PartHeader { cap: 128 },
            ),
            (
                "endless transport padding",
                long_line.as_str(),
                MultipartTooLarge::PartHeader { cap: 128 },
            ),
            (
                "an unterminated second header",
                second_header.as_str(),
                MultipartTooLarge::PartHeader { cap: 128 },
            ),
            (
                "a preamble with no boundary",
                long_preamble.as_str(),
                MultipartTooLarge::Preamble { cap: 64 },
            ),
        ];
        for (what, bytes, want) in cases {
            for piece in [1, 7, 64, 4096, bytes.len()] {
                let mut s = Scanner::new("XyZ", CAPS);
                let mut fed = 0;
                let mut failed = None;
                for chunk in bytes.as_bytes().chunks(piece) {
                    fed += chunk.len();
                    if let Err(e) = s.feed(chunk) {
                        failed = Some(e);
                        break;
                    }
                }
                assert_eq!(failed.as_ref(), Some(&want), "{what}, pieces of {piece}");
                // The header of the second part starts about 100 bytes in.
                assert!(
                    fed <= 700 + piece,
                    "{what}: {fed} bytes fed in pieces of {piece}"
                );
            }
        }
    }

    #[test]
    fn a_preamble_one_byte_over_the_cap_is_refused_even_when_the_boundary_follows() {
        let bytes = body(&"p".repeat(65), 1, "x");
        for result in feed_every_way(&bytes) {
            assert_eq!(result, Err(MultipartTooLarge::Preamble { cap: 64 }));
        }
    }

    #[test]
    fn a_part_beyond_the_cap_is_refused_but_the_close_delimiter_is_no_part() {
        assert_eq!(
            feed(&body("", 5, "x"), 3),
            Err(MultipartTooLarge::Parts { cap: 4 })
        );
        assert_eq!(feed(&body("", 4, "x"), 3), Ok(()));
    }

    #[test]
    fn after_the_close_delimiter_nothing_is_counted() {
        let mut bytes = body("", 1, "x");
        bytes.extend(std::iter::repeat_n(b'e', 100_000));
        bytes.extend_from_slice(b"--XyZ\r\nX: unterminated");
        assert_eq!(feed(&bytes, 1000), Ok(()));
    }

    #[test]
    fn a_long_part_body_is_not_a_header() {
        let data = "d".repeat(100_000);
        assert_eq!(feed(&body("", 2, &data), 4096), Ok(()));
    }
}
