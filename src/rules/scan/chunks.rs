//! Reading the input in chunks that end after a complete line.

use std::io::{self, Read};

use super::{CHUNK, LOOKAHEAD, MAX_CARRY, Scanned};

/// Reads the input into chunks that end after a complete line, keeping `LOOKAHEAD` lines
/// beyond the cut (they start the next chunk too) so every candidate sees its lookahead.
pub(super) struct Chunks<R> {
    reader: R,
    /// Bytes after the previous chunk's cut.
    carry: Vec<u8>,
    /// Whether the reader has no more input.
    pub eof: bool,
    /// Bytes read so far.
    pub total: u64,
    last_byte: u8,
}

/// A chunk of raw input: `data[..cut]` is processed, `data[cut..len]` is lookahead.
#[derive(Default)]
pub(super) struct Chunk {
    /// Grows to the largest chunk and is reused: no zeroing per read.
    pub data: Vec<u8>,
    pub len: usize,
    pub cut: usize,
}

impl<R: Read> Chunks<R> {
    pub fn new(reader: R) -> Self {
        Chunks {
            reader,
            carry: Vec::new(),
            eof: false,
            total: 0,
            last_byte: b'\n',
        }
    }

    /// Fills `chunk` with the carry and new input; `false` when there is nothing left.
    pub fn fill(&mut self, chunk: &mut Chunk) -> io::Result<bool> {
        chunk.len = self.carry.len();
        if chunk.data.len() < chunk.len + CHUNK {
            chunk.data.resize(chunk.len + CHUNK, 0);
        }
        chunk.data[..chunk.len].copy_from_slice(&self.carry);
        loop {
            let target = chunk.len + CHUNK;
            if chunk.data.len() < target {
                chunk.data.resize(target, 0);
            }
            while chunk.len < target && !self.eof {
                match self.reader.read(&mut chunk.data[chunk.len..target]) {
                    Ok(0) => self.eof = true,
                    Ok(n) => {
                        chunk.len += n;
                        self.total += n as u64;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            chunk.cut = if self.eof {
                chunk.len
            } else {
                cut_point(&chunk.data[..chunk.len])
            };
            if chunk.cut > 0 || self.eof {
                break;
            }
        }
        if let Some(&b) = chunk.data[..chunk.len].last() {
            self.last_byte = b;
        }
        self.carry.clear();
        self.carry
            .extend_from_slice(&chunk.data[chunk.cut..chunk.len]);
        Ok(chunk.len > 0)
    }

    /// What the scan saw, given the newlines of every processed part.
    pub fn scanned(&self, newlines: usize) -> Scanned {
        Scanned {
            bytes: self.total,
            lines: (newlines + usize::from(self.last_byte != b'\n')) as u64,
            ..Scanned::default()
        }
    }
}

/// Where to stop processing a non-final buffer: after the newline that leaves `LOOKAHEAD` full
/// lines behind it, so every candidate sees its lookahead. With fewer lines, after the last
/// newline; with none, everything once the line is too long to carry, else nothing.
fn cut_point(hay: &[u8]) -> usize {
    let mut it = memchr::memrchr_iter(b'\n', hay);
    let positions: Vec<usize> = it.by_ref().take(LOOKAHEAD + 1).collect();
    match positions.len() {
        0 if hay.len() >= MAX_CARRY => hay.len(),
        0 => 0,
        n if n <= LOOKAHEAD => positions[n - 1] + 1,
        _ => positions[LOOKAHEAD] + 1,
    }
}
