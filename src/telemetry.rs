//! The service log's field format (SECURITY.md item 26): log lines that no value can forge.
//!
//! Values that reach the log come from people and other programs: a provider's `name` claim, a
//! token's name, a request id, a worker's name, a project, an error message that quotes what a
//! client sent. Written as they are, a newline in one starts a fake line, `actor="admin"` inside
//! one reads as a second field, and terminal escapes repaint the operator's screen. So every
//! field value is written either bare, when it is made only of characters that cannot end or
//! fake a field, or quoted with every quote, backslash, control character and direction
//! override escaped. The message keeps its text but has its control characters and direction
//! overrides escaped, so it always stays on its own line. This holds for every field, however a
//! call site records it (`%value`, `?value` or a plain string), so a new log line cannot
//! reopen the hole by using the wrong sigil.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

/// The [`FormatFields`] of the service log (and of tests that read it).
#[derive(Clone, Copy, Debug, Default)]
pub struct SafeFields;

impl<'w> FormatFields<'w> for SafeFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut visitor = SafeVisitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

/// Installs the service's subscriber: `filter` (an `EnvFilter` directive) to stderr, fields
/// through [`SafeFields`].
pub fn init(filter: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .fmt_fields(SafeFields)
        .init();
}

struct SafeVisitor<'w> {
    writer: Writer<'w>,
    first: bool,
    result: fmt::Result,
}

/// How a value was recorded.
enum Recorded<'a> {
    /// A string (`name = value`): always quoted, as the default format does
    /// (`project="vision"`), so strings read the same whatever they hold.
    Str(&'a str),
    /// Anything else, rendered (`%value`, `?value`, numbers): bare when it is a plain word,
    /// as it is when it is already one escaped string literal, else quoted.
    Rendered(&'a str),
}

impl SafeVisitor<'_> {
    fn write(&mut self, field: &Field, value: Recorded<'_>) {
        if self.result.is_err() {
            return;
        }
        self.result = self.write_inner(field, value);
        self.first = false;
    }

    fn write_inner(&mut self, field: &Field, value: Recorded<'_>) -> fmt::Result {
        if !self.first {
            self.writer.write_char(' ')?;
        }
        if field.name() == "message" {
            let (Recorded::Str(text) | Recorded::Rendered(text)) = value;
            return write_message(&mut self.writer, text);
        }
        // Field names are static identifiers in the code; `r#type` is written `type`.
        let name = field.name().strip_prefix("r#").unwrap_or(field.name());
        write!(self.writer, "{name}=")?;
        match value {
            Recorded::Rendered(text) if is_bare(text) || is_clean_literal(text) => {
                self.writer.write_str(text)
            }
            Recorded::Str(text) | Recorded::Rendered(text) => write_quoted(&mut self.writer, text),
        }
    }
}

impl Visit for SafeVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.write(field, Recorded::Str(value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let rendered = format!("{value:?}");
        self.write(field, Recorded::Rendered(&rendered));
    }
}

/// Whether a value can be written without quotes: non-empty, and only characters that cannot
/// end a field, start another or hide what follows.
fn is_bare(value: &str) -> bool {
    !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:/@+#()[]<>,;%*!?~^&|'$".contains(c))
}

/// Whether `value` is already one quoted string in Rust's escaped form (what `?` makes of a
/// string): it opens and closes with `"`, every quote and backslash inside is escaped, and it
/// holds no control character or direction override. Such a value is one token that forges
/// nothing; a `%value` that merely starts and ends with quotes (`"x"=y,actor="admin"`) is not.
fn is_clean_literal(value: &str) -> bool {
    let Some(inner) = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .filter(|_| value.len() >= 2)
    else {
        return false;
    };
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            // An escape with nothing after it: the closing quote was escaped.
            '\\' if chars.next().is_none() => return false,
            '\\' => {}
            '"' => return false,
            c if needs_escape(c) => return false,
            _ => {}
        }
    }
    true
}

/// Control characters and the characters that reorder or hide text on a terminal or a page.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{200B}'..='\u{200F}' // zero-width characters, LRM/RLM
            | '\u{2028}' | '\u{2029}' // line and paragraph separators
            | '\u{202A}'..='\u{202E}' // embeddings and overrides
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}' // isolates
            | '\u{FEFF}')
}

fn write_quoted(w: &mut impl fmt::Write, value: &str) -> fmt::Result {
    w.write_char('"')?;
    for c in value.chars() {
        match c {
            '"' => w.write_str("\\\"")?,
            '\\' => w.write_str("\\\\")?,
            '\n' => w.write_str("\\n")?,
            '\r' => w.write_str("\\r")?,
            '\t' => w.write_str("\\t")?,
            c if needs_escape(c) => write!(w, "\\u{{{:x}}}", u32::from(c))?,
            c => w.write_char(c)?,
        }
    }
    w.write_char('"')
}

fn write_message(w: &mut impl fmt::Write, value: &str) -> fmt::Result {
    for c in value.chars() {
        match c {
            '\n' => w.write_str("\\n")?,
            '\r' => w.write_str("\\r")?,
            '\t' => w.write_str("\\t")?,
            c if needs_escape(c) => write!(w, "\\u{{{:x}}}", u32::from(c))?,
            c => w.write_char(c)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What `log` writes through the service's format, as text.
    fn logged(log: impl FnOnce()) -> String {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .fmt_fields(SafeFields)
            .finish();
        tracing::subscriber::with_default(subscriber, log);
        let bytes = captured.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// `line` with the insides of its quoted values taken out (escapes honoured).
    fn outside_quotes(line: &str) -> String {
        let (mut out, mut quoted, mut escaped) = (String::new(), false, false);
        for c in line.chars() {
            match (quoted, escaped, c) {
                (true, true, _) => escaped = false,
                (true, false, '\\') => escaped = true,
                (_, false, '"') => quoted = !quoted,
                (false, _, c) => out.push(c),
                (true, false, _) => {}
            }
        }
        out
    }

    #[test]
    fn no_value_can_start_a_line_or_a_field_however_it_is_recorded() {
        let forged = "ana\n2026-11-29T05:00:00Z  INFO signed in person=\"initial-admin\" \u{1b}[2J";
        let request_id = "\"x\"=y,actor=\"initial-admin\"";
        let rlo = "evil\u{202e}nimda";
        let out = logged(|| {
            tracing::info!(person = %forged, id = %request_id, name = rlo, who = ?forged, "signed in");
        });
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(
            !out.contains('\u{1b}') && !out.contains('\u{202e}'),
            "{out:?}"
        );
        assert!(out.contains("person=\"ana\\n2026"), "{out}");
        assert!(
            out.contains(r#"id="\"x\"=y,actor=\"initial-admin\"""#),
            "{out}"
        );
        assert!(out.contains("name=\"evil\\u{202e}nimda\""), "{out}");
        // Outside quoted values, exactly the four fields logged: nothing more reads as a field.
        let bare = outside_quotes(&out);
        let keys: Vec<&str> = bare
            .split_whitespace()
            .filter_map(|w| w.split_once('=').map(|(k, _)| k))
            .collect();
        assert_eq!(keys, ["person", "id", "name", "who"], "{out}");
    }

    #[test]
    fn plain_values_read_as_before_and_strings_stay_quoted() {
        let out = logged(|| {
            tracing::info!(job = 7, state = %"queued", project = "vision", owner = ?Some(3), "job claimed");
        });
        assert!(
            out.contains("job claimed job=7 state=queued project=\"vision\" owner=Some(3)"),
            "{out}"
        );
    }

    #[test]
    fn a_message_keeps_its_text_on_one_line() {
        let name = "a\nb\u{1b}[31m";
        let out = logged(|| tracing::warn!("refused {name}"));
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(out.contains("refused a\\nb\\u{1b}[31m"), "{out}");
    }

    #[test]
    fn only_a_well_formed_escaped_literal_passes_as_it_is() {
        assert!(is_clean_literal(r#""plain""#));
        assert!(is_clean_literal(r#""with \"quotes\" and \\""#));
        for forged in [r#""x"=y,actor="a""#, "\"", r#""ends escaped\""#, "\"a\nb\""] {
            assert!(!is_clean_literal(forged), "{forged}");
        }
    }
}
