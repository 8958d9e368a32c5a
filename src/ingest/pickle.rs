//! A reader for the small part of Python's pickle protocol that PyTorch's flight-recorder dumps
//! use (issue 41 item 7): dicts, lists, tuples, strings, bytes, ints, floats, booleans and
//! `None`, with the memo. No Python runs: a dump uploaded with a run is read here. Anything
//! else (globals, `REDUCE`, object construction) is refused, so a pickle can build nothing but
//! plain data; input size and nesting are capped.

use std::fmt;

/// A plain value read from a pickle.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    List(Vec<Value>),
    Tuple(Vec<Value>),
    /// Key-value pairs in the order written.
    Dict(Vec<(Value, Value)>),
}

impl Value {
    /// The value under string key `key` of a dict.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(pairs) => pairs
                .iter()
                .find(|(k, _)| matches!(k, Value::Str(s) if s == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    #[must_use]
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    #[must_use]
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    #[must_use]
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The items of a list or tuple.
    #[must_use]
    pub fn items(&self) -> &[Value] {
        match self {
            Value::List(v) | Value::Tuple(v) => v,
            _ => &[],
        }
    }

    /// The pairs of a dict.
    #[must_use]
    pub fn pairs(&self) -> &[(Value, Value)] {
        match self {
            Value::Dict(p) => p,
            _ => &[],
        }
    }
}

/// Why a pickle was not read.
#[derive(Debug, PartialEq, Eq)]
pub struct PickleError {
    /// Byte offset of the opcode that failed.
    pub at: usize,
    pub why: String,
}

impl fmt::Display for PickleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pickle at byte {}: {}", self.at, self.why)
    }
}

impl std::error::Error for PickleError {}

/// Largest pickle read.
pub const MAX_BYTES: usize = 64 << 20;
/// Deepest nesting of containers read.
pub const MAX_DEPTH: u32 = 64;

/// Whether `head` starts like a pickle of protocol 2 or later (`PROTO n`).
#[must_use]
pub fn looks_like(head: &[u8]) -> bool {
    matches!(head, [0x80, 2..=5, ..])
}

/// A stack slot: a value with its nesting depth, or a mark.
enum Slot {
    Mark,
    Val(Value, u32),
}

/// Reads one pickled value.
///
/// # Errors
/// Input over [`MAX_BYTES`], nesting over [`MAX_DEPTH`], an opcode outside the subset, or a
/// malformed stream.
pub fn read(data: &[u8]) -> Result<Value, PickleError> {
    let mut r = Reader {
        data,
        pos: 0,
        at: 0,
    };
    if data.len() > MAX_BYTES {
        return Err(r.fail(format!("larger than {MAX_BYTES} bytes")));
    }
    let mut stack: Vec<Slot> = Vec::new();
    let mut memo: Vec<Option<(Value, u32)>> = Vec::new();
    loop {
        r.at = r.pos;
        let op = r.byte()?;
        match op {
            0x80 => {
                r.byte()?; // PROTO n
            }
            0x95 => {
                r.take(8)?; // FRAME: a length hint
            }
            b'.' => {
                return match (stack.pop(), stack.is_empty()) {
                    (Some(Slot::Val(v, _)), true) => Ok(v),
                    _ => Err(r.fail("STOP without exactly one value".into())),
                };
            }
            b'(' => stack.push(Slot::Mark),
            b'N' => stack.push(Slot::Val(Value::None, 0)),
            0x88 => stack.push(Slot::Val(Value::Bool(true), 0)),
            0x89 => stack.push(Slot::Val(Value::Bool(false), 0)),
            b'J' => {
                let b = r.take(4)?;
                let v = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                stack.push(Slot::Val(Value::Int(i64::from(v)), 0));
            }
            b'K' => {
                let v = r.byte()?;
                stack.push(Slot::Val(Value::Int(i64::from(v)), 0));
            }
            b'M' => {
                let b = r.take(2)?;
                stack.push(Slot::Val(
                    Value::Int(i64::from(u16::from_le_bytes([b[0], b[1]]))),
                    0,
                ));
            }
            0x8a => {
                let n = usize::from(r.byte()?);
                let b = r.take(n)?;
                stack.push(Slot::Val(r.long(b)?, 0));
            }
            b'G' => {
                let b = r.take(8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                stack.push(Slot::Val(Value::Float(f64::from_be_bytes(a)), 0));
            }
            b'X' | 0x8c | b'B' | b'C' => {
                let n = match op {
                    0x8c | b'C' => usize::from(r.byte()?),
                    _ => {
                        let b = r.take(4)?;
                        u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
                    }
                };
                let b = r.take(n)?;
                let v = if matches!(op, b'B' | b'C') {
                    Value::Bytes(b.to_vec())
                } else {
                    Value::Str(
                        String::from_utf8(b.to_vec())
                            .map_err(|_| r.fail("a string that is not UTF-8".into()))?,
                    )
                };
                stack.push(Slot::Val(v, 0));
            }
            b'}' => stack.push(Slot::Val(Value::Dict(Vec::new()), 1)),
            b']' => stack.push(Slot::Val(Value::List(Vec::new()), 1)),
            b')' => stack.push(Slot::Val(Value::Tuple(Vec::new()), 1)),
            b'a' | b'e' | b's' | b'u' | b't' | 0x85 | 0x86 | 0x87 => {
                let items = match op {
                    0x85 => r.pop_n(&mut stack, 1)?,
                    0x86 => r.pop_n(&mut stack, 2)?,
                    0x87 => r.pop_n(&mut stack, 3)?,
                    b'a' => r.pop_n(&mut stack, 1)?,
                    b's' => r.pop_n(&mut stack, 2)?,
                    _ => r.pop_mark(&mut stack)?,
                };
                let depth = 1 + items.iter().map(|(_, d)| *d).max().unwrap_or(0);
                if depth > MAX_DEPTH {
                    return Err(r.fail(format!("nested deeper than {MAX_DEPTH}")));
                }
                let values = items.into_iter().map(|(v, _)| v);
                if matches!(op, b't' | 0x85 | 0x86 | 0x87) {
                    stack.push(Slot::Val(Value::Tuple(values.collect()), depth));
                    continue;
                }
                let Some(Slot::Val(target, d)) = stack.last_mut() else {
                    return Err(r.fail("nothing to add items to".into()));
                };
                *d = (*d).max(depth);
                match (target, op) {
                    (Value::List(list), b'a' | b'e') => list.extend(values),
                    (Value::Dict(dict), b's' | b'u') => {
                        let values: Vec<Value> = values.collect();
                        if !values.len().is_multiple_of(2) {
                            return Err(r.fail("a key without its value".into()));
                        }
                        let mut it = values.into_iter();
                        while let (Some(k), Some(v)) = (it.next(), it.next()) {
                            dict.push((k, v));
                        }
                    }
                    _ => return Err(r.fail("items added to a value of another kind".into())),
                }
            }
            b'q' | b'r' | 0x94 => {
                let index = match op {
                    b'q' => usize::from(r.byte()?),
                    b'r' => {
                        let b = r.take(4)?;
                        u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
                    }
                    _ => memo.len(),
                };
                // A container is memoized empty and filled afterwards: what is kept is its
                // state now, which is what a later reference to a string or number needs
                // (dumps share those, not containers).
                let Some(Slot::Val(v, d)) = stack.last() else {
                    return Err(r.fail("memo of nothing".into()));
                };
                if index > memo.len() + 1024 {
                    return Err(r.fail("memo index far ahead".into()));
                }
                if memo.len() <= index {
                    memo.resize(index + 1, None);
                }
                memo[index] = Some((v.clone(), *d));
            }
            b'h' | b'j' => {
                let index = if op == b'h' {
                    usize::from(r.byte()?)
                } else {
                    let b = r.take(4)?;
                    u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
                };
                let Some(Some((v, d))) = memo.get(index) else {
                    return Err(r.fail(format!("memo {index} was never set")));
                };
                stack.push(Slot::Val(v.clone(), *d));
            }
            other => return Err(r.fail(format!("opcode {other:#04x} is not read"))),
        }
    }
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    /// Where the current opcode starts.
    at: usize,
}

impl<'a> Reader<'a> {
    fn fail(&self, why: String) -> PickleError {
        PickleError { at: self.at, why }
    }

    fn byte(&mut self) -> Result<u8, PickleError> {
        Ok(self.take(1)?[0])
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], PickleError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        let Some(end) = end else {
            return Err(self.fail("the pickle ends early".into()));
        };
        let out = &self.data[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    /// A little-endian two's-complement integer (`LONG1`) that fits 64 bits.
    fn long(&self, b: &[u8]) -> Result<Value, PickleError> {
        if b.len() > 8 {
            return Err(self.fail("an integer wider than 64 bits".into()));
        }
        let fill = if b.last().is_some_and(|&x| x & 0x80 != 0) {
            0xff
        } else {
            0
        };
        let mut a = [fill; 8];
        a[..b.len()].copy_from_slice(b);
        Ok(Value::Int(i64::from_le_bytes(a)))
    }

    fn pop_n(&self, stack: &mut Vec<Slot>, n: usize) -> Result<Vec<(Value, u32)>, PickleError> {
        if stack.len() < n {
            return Err(self.fail("the stack holds too few values".into()));
        }
        stack
            .split_off(stack.len() - n)
            .into_iter()
            .map(|s| match s {
                Slot::Val(v, d) => Ok((v, d)),
                Slot::Mark => Err(self.fail("a mark where a value was expected".into())),
            })
            .collect()
    }

    fn pop_mark(&self, stack: &mut Vec<Slot>) -> Result<Vec<(Value, u32)>, PickleError> {
        let Some(mark) = stack.iter().rposition(|s| matches!(s, Slot::Mark)) else {
            return Err(self.fail("no mark".into()));
        };
        let items = stack.split_off(mark + 1);
        stack.pop();
        items
            .into_iter()
            .map(|s| match s {
                Slot::Val(v, d) => Ok((v, d)),
                Slot::Mark => Err(self.fail("a mark inside the items".into())),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_data_is_read_and_the_memo_followed() {
        // pickle.dumps({'a': [1, -2, 70000, 2**40, None, True], 'b': ('x', 'x'), 'c': 1.5}, 2)
        let data = b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01]q\x02(K\x01J\xfe\xff\xff\xffJp\x11\x01\x00\x8a\x06\x00\x00\x00\x00\x00\x01N\x88eX\x01\x00\x00\x00bq\x03X\x01\x00\x00\x00xq\x04h\x04\x86q\x05X\x01\x00\x00\x00cq\x06G?\xf8\x00\x00\x00\x00\x00\x00u.";
        let v = read(data).expect("read");
        let a: Vec<Value> = v.get("a").expect("a").items().to_vec();
        assert_eq!(
            a,
            [
                Value::Int(1),
                Value::Int(-2),
                Value::Int(70000),
                Value::Int(1 << 40),
                Value::None,
                Value::Bool(true)
            ]
        );
        assert_eq!(
            v.get("b"),
            Some(&Value::Tuple(vec![
                Value::Str("x".into()),
                Value::Str("x".into())
            ]))
        );
        assert_eq!(v.get("c"), Some(&Value::Float(1.5)));
    }

    #[test]
    fn code_and_malformed_input_are_refused() {
        // pickle.dumps(os.system, 2): a global, which would name code to run.
        let global = b"\x80\x02cposix\nsystem\nq\x00.";
        assert!(read(global).is_err_and(|e| e.why.contains("opcode 0x63")));
        assert!(read(b"\x80\x02]q\x00(K\x01").is_err(), "no STOP");
        assert!(read(b"\x80\x02X\xff\xff\xff\xff").is_err(), "ends early");
        assert!(read(b"\x80\x02h\x07.").is_err(), "memo never set");
        let mut deep = b"\x80\x02".to_vec();
        deep.extend(std::iter::repeat_n(b']', 100));
        deep.extend(std::iter::repeat_n(b'a', 99));
        deep.push(b'.');
        assert!(read(&deep).is_err_and(|e| e.why.contains("nested")));
        assert!(looks_like(b"\x80\x02}") && !looks_like(b"\x1f\x8b") && !looks_like(b"ab"));
    }
}
