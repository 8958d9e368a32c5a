//! One reading of terminal escape sequences, shared by everything that matches or shows log text.
//!
//! Normalization drops every sequence (so rules see the message) and the log view turns SGR
//! colours into CSS classes (and drops the rest). If each parsed escapes its own way, a malformed
//! or hostile sequence could end at one place for the matcher and at another for the reader: text
//! the view shows would be hidden from the rules, or the other way round. So both walk the same
//! [`Tokens`].
//!
//! The grammar is ECMA-48's, read leniently the way terminals do:
//! - CSI `ESC [`, parameter bytes `0x30..=0x3f`, intermediate bytes `0x20..=0x2f`, one final
//!   byte `0x40..=0x7e`; a byte outside those ranges ends the sequence before it, and is text;
//! - OSC, DCS, SOS, PM and APC (`ESC ]`, `P`, `X`, `^`, `_`): a string up to BEL or ST (`ESC \`);
//!   another ESC ends it unterminated and starts a new sequence;
//! - `ESC`, intermediates, one final byte `0x30..=0x7e` (charset designations such as `ESC ( B`,
//!   and two-byte escapes such as `ESC 7`);
//! - any other ESC is dropped alone, and what follows it is text.
//!
//! No sequence spans a newline: one that reaches a `\n` ends before it, so line numbers counted
//! after stripping are the input's. Raw C1 controls (a UTF-8 `U+009B` CSI) are not introducers
//! here; the view neutralizes them like any other control character. Every sequence byte is
//! ASCII, so a token never splits a UTF-8 character.

const ESC: u8 = 0x1b;
const BEL: u8 = 0x07;

/// One piece of text with escape sequences in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Token<'a> {
    /// Bytes outside any sequence, as given (newlines, `\r`, invalid UTF-8 included); never empty.
    Text(&'a [u8]),
    /// `ESC [ ... m` without intermediate bytes: the raw parameter bytes (`0x30..=0x3f`), not yet
    /// checked (`1;31`, but also `4:3` or `?1`).
    Sgr(&'a [u8]),
    /// Any other sequence (cursor moves, OSC titles and hyperlinks, designations, DCS/APC/PM/SOS
    /// strings, a lone ESC): it has no effect on the text and is dropped.
    Other,
}

/// The tokens of a byte string, in order; see the module documentation for the grammar.
#[derive(Clone, Debug)]
pub struct Tokens<'a> {
    rest: &'a [u8],
}

/// Tokenizes `src`.
pub fn tokens(src: &[u8]) -> Tokens<'_> {
    Tokens { rest: src }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = Token<'a>;

    fn next(&mut self) -> Option<Token<'a>> {
        let rest = self.rest;
        let (len, token) = match rest.first()? {
            &ESC => escape(rest),
            _ => {
                let len = memchr::memchr(ESC, rest).unwrap_or(rest.len());
                (len, Token::Text(&rest[..len]))
            }
        };
        self.rest = &rest[len..];
        Some(token)
    }
}

/// Given `src[0] == ESC`: the length of the sequence and its token. Always at least 1.
fn escape(src: &[u8]) -> (usize, Token<'_>) {
    let in_range = |from: usize, range: std::ops::RangeInclusive<u8>| {
        from + src
            .get(from..)
            .unwrap_or_default()
            .iter()
            .take_while(|b| range.contains(b))
            .count()
    };
    match src.get(1) {
        Some(b'[') => {
            let params_end = in_range(2, 0x30..=0x3f);
            let end = in_range(params_end, 0x20..=0x2f);
            match src.get(end) {
                Some(b'm') if end == params_end => (end + 1, Token::Sgr(&src[2..params_end])),
                Some(0x40..=0x7e) => (end + 1, Token::Other),
                _ => (end, Token::Other),
            }
        }
        Some(b']' | b'P' | b'X' | b'^' | b'_') => (control_string(src), Token::Other),
        Some(0x20..=0x2f) => {
            let end = in_range(2, 0x20..=0x2f);
            let has_final = matches!(src.get(end), Some(0x30..=0x7e));
            (end + usize::from(has_final), Token::Other)
        }
        Some(0x30..=0x7e) => (2, Token::Other),
        _ => (1, Token::Other),
    }
}

/// The length of an OSC/DCS/SOS/PM/APC string starting at `src[0]`: through BEL or ST, or up to
/// (not through) an ESC that starts something else, a newline, or the end.
fn control_string(src: &[u8]) -> usize {
    let body = &src[2..];
    match memchr::memchr3(BEL, ESC, b'\n', body) {
        None => src.len(),
        Some(n) if body[n] == BEL => 2 + n + 1,
        Some(n) if body[n] == ESC && body.get(n + 1) == Some(&b'\\') => 2 + n + 2,
        Some(n) => 2 + n,
    }
}

/// Deterministic pseudo-random inputs over `alphabet` (xorshift from `seed`): `count` inputs of
/// 40 bytes, for the tests that check every reader of escape sequences agrees on them.
#[cfg(test)]
pub(crate) fn random_inputs(alphabet: &[u8], seed: u64, count: usize) -> Vec<Vec<u8>> {
    let mut seed = seed;
    (0..count)
        .map(|_| {
            (0..40)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    alphabet[(seed % alphabet.len() as u64) as usize]
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tokens of `input` (`␛` stands for ESC) as one string: text as is, `<sgr:P>` for an SGR
    /// with parameters P, `<>` for a dropped sequence.
    fn show(input: &str) -> String {
        let input = input.replace('␛', "\x1b");
        tokens(input.as_bytes())
            .map(|t| match t {
                Token::Text(text) => String::from_utf8_lossy(text).into_owned(),
                Token::Sgr(params) => format!("<sgr:{}>", String::from_utf8_lossy(params)),
                Token::Other => "<>".to_owned(),
            })
            .collect()
    }

    #[test]
    fn csi_sequences_end_at_their_final_byte_or_before_a_stray_one() {
        let cases = [
            ("␛[31mred␛[0m", "<sgr:31>red<sgr:0>"),
            ("␛[mx", "<sgr:>x"),
            ("␛[1;38;5;196mx", "<sgr:1;38;5;196>x"),
            ("␛[4:3mx", "<sgr:4:3>x"),
            ("␛[?25lx␛[2J␛[1;1Hy", "<>x<><>y"),
            ("␛[>4;1mx", "<sgr:>4;1>x"),
            ("␛[1 qx", "<>x"),
            ("␛[1 mx", "<>x"),
            ("␛[3\u{e9}1mx", "<>\u{e9}1mx"),
            ("␛[12\nnext", "<>\nnext"),
            ("x␛[", "x<>"),
            ("x␛[31", "x<>"),
        ];
        for (input, want) in cases {
            assert_eq!(show(input), want, "{input:?}");
        }
    }

    #[test]
    fn control_strings_end_at_bel_st_another_escape_or_the_line() {
        let cases = [
            ("␛]8;;javascript:alert(1)\x07click␛]8;;\x07", "<>click<>"),
            ("␛]8;;https://x/␛\\link␛]8;;␛\\", "<>link<>"),
            ("␛P1$r␛\\d␛_apc␛\\a␛^pm\x07p␛Xsos\x07s", "<>d<>a<>p<>s"),
            ("a␛]0;t␛[32mb", "a<><sgr:32>b"),
            ("a␛]0;t␛xb", "a<><>b"),
            ("a␛]8;;http://unterminated\nnext", "a<>\nnext"),
            ("a␛]8;;http://unterminated", "a<>"),
            ("a␛]0;t\rb\x07c", "a<>c"),
        ];
        for (input, want) in cases {
            assert_eq!(show(input), want, "{input:?}");
        }
    }

    #[test]
    fn other_escapes_take_their_final_byte_and_a_lone_esc_only_itself() {
        let cases = [
            ("␛(Bx␛)0y", "<>x<>y"),
            ("␛7␛=z", "<><>z"),
            ("␛#8x", "<>x"),
            ("␛(\nx", "<>\nx"),
            ("a␛␛[31mb", "a<><sgr:31>b"),
            ("a␛\nb", "a<>\nb"),
            ("a␛\u{e9}", "a<>\u{e9}"),
            ("x␛", "x<>"),
            ("no escapes", "no escapes"),
            ("", ""),
        ];
        for (input, want) in cases {
            assert_eq!(show(input), want, "{input:?}");
        }
    }

    #[test]
    fn tokens_cover_the_input_and_no_sequence_crosses_a_newline() {
        let alphabet = b"\x1b[];:?( P\\\x07\r\n\xffm0123458aB";
        for input in super::random_inputs(alphabet, 0x9e37_79b9_7f4a_7c15_u64, 3000) {
            let (mut it, mut at) = (tokens(&input), 0);
            while let Some(token) = it.next() {
                let end = input.len() - it.rest.len();
                let piece = &input[at..end];
                match token {
                    Token::Text(text) => assert!(text == piece && !text.contains(&ESC)),
                    Token::Sgr(_) | Token::Other => {
                        assert!(piece.first() == Some(&ESC) && !piece.contains(&b'\n'))
                    }
                }
                at = end;
            }
            assert_eq!(at, input.len(), "{input:?}");
        }
    }
}
