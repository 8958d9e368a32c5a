//! `gpu-triage classify`: classify logs from files or stdin and print the contract JSON
//! (DESIGN.md section 3), one object per input per line, or a short human summary.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use anyhow::Context;

use super::BadInput;
use crate::rules::{Classification, Role, Ruleset};

/// Output format of `classify`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// One JSON object per input, one per line (DESIGN.md section 3).
    Json,
    /// A short human summary.
    Text,
}

/// `gpu-triage classify`
#[derive(Debug, clap::Args)]
pub struct ClassifyArgs {
    /// Output format.
    #[arg(long, value_enum, default_value = "json")]
    pub format: OutputFormat,
    /// Use this TOML ruleset instead of the built-in one.
    #[arg(long, value_name = "FILE")]
    pub rules: Option<std::path::PathBuf>,
    /// Log files; `-` or nothing reads stdin.
    #[arg(value_name = "FILE")]
    pub inputs: Vec<String>,
}

/// Runs the command. Inputs that cannot be read are reported on stderr and make the exit
/// status 2; the others are still classified.
pub fn run(args: ClassifyArgs) -> anyhow::Result<()> {
    let ruleset = load_ruleset(args.rules.as_deref())?;
    let inputs = if args.inputs.is_empty() {
        vec!["-".to_owned()]
    } else {
        args.inputs
    };
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut failed = Vec::new();
    for input in &inputs {
        let result = if input == "-" {
            ruleset
                .classify_reader("-", io::stdin().lock())
                .map_err(|e| format!("-: cannot read stdin: {e}"))
        } else {
            open(input).and_then(|f| {
                ruleset
                    .classify_reader(input, f)
                    .map_err(|e| format!("{input}: cannot read: {e}"))
            })
        };
        match result {
            Ok(c) => {
                match args.format {
                    OutputFormat::Json => {
                        serde_json::to_writer(&mut out, &c).context("writing JSON")?;
                        writeln!(out)?;
                    }
                    OutputFormat::Text => write_text(&mut out, &c)?,
                }
                out.flush()?;
            }
            Err(message) => {
                // One input: its message is the one line (below); several: one line each,
                // then the count.
                if inputs.len() > 1 {
                    eprintln!("gpu-triage classify: {message}");
                }
                failed.push(message);
            }
        }
    }
    match failed.as_slice() {
        [] => Ok(()),
        [only] if inputs.len() == 1 => Err(BadInput(only.clone()).into()),
        _ => Err(BadInput(format!(
            "{} of {} inputs could not be read",
            failed.len(),
            inputs.len()
        ))
        .into()),
    }
}

/// The built-in ruleset, or a TOML ruleset from a file (for testing team rules locally).
pub fn load_ruleset(path: Option<&Path>) -> anyhow::Result<Ruleset> {
    match path {
        None => Ruleset::builtin().context("the built-in ruleset does not compile"),
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| BadInput(format!("{}: cannot read ruleset: {e}", p.display())))?;
            Ruleset::from_toml(&text).map_err(|e| BadInput(format!("{}: {e}", p.display())).into())
        }
    }
}

fn open(path: &str) -> Result<File, String> {
    let p = Path::new(path);
    if p.is_dir() {
        return Err(format!("{path}: is a directory, not a log file"));
    }
    File::open(p).map_err(|e| format!("{path}: cannot open: {e}"))
}

fn write_text(out: &mut impl Write, c: &Classification) -> io::Result<()> {
    writeln!(
        out,
        "{}: {} ({:?} confidence)",
        c.source, c.category, c.confidence
    )?;
    writeln!(out, "  {}", c.title)?;
    if c.confidence == crate::rules::Confidence::Likely {
        writeln!(
            out,
            "  basis: {} (no rule names the line: the learned fallback's category)",
            c.basis.join(", ")
        )?;
    }
    if let Some(fw) = &c.framework {
        writeln!(out, "  framework: {fw}")?;
    }
    if let Some(rc) = &c.root_cause {
        writeln!(out, "  root cause, line {}: {}", rc.line, rc.text)?;
    }
    for f in c
        .findings
        .iter()
        .filter(|f| f.role == Role::Symptom)
        .take(5)
    {
        writeln!(out, "  symptom, line {}: {} [{}]", f.line, f.text, f.rule)?;
    }
    let facts = serde_json::to_string(&c.facts).unwrap_or_default();
    if facts != "{}" {
        writeln!(out, "  facts: {facts}")?;
    }
    if c.async_hint {
        writeln!(
            out,
            "  note: this error may be reported asynchronously; the stack trace can point at a later line"
        )?;
    }
    for step in &c.next_steps {
        writeln!(out, "  - {step}")?;
    }
    for note in &c.notes {
        writeln!(out, "  ({note})")?;
    }
    Ok(())
}
