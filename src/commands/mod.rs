//! The subcommands' bodies. Each is an edge of the program: it may use `anyhow` and print to
//! the terminal; the work itself is done by the library layers.

pub mod classify;
pub mod db;
pub mod eval;
pub mod retention;
pub mod rules;
pub mod serve;
pub mod token;
pub mod upload;
pub mod worker;

/// Bad input or usage (unreadable file, directory, malformed corpus or ruleset): the process
/// exits with status 2 and this one-line message (DESIGN.md section 3).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);
