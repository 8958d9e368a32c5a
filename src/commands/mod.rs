//! The subcommands' bodies. Each is an edge of the program: it may use `anyhow` and print to
//! the terminal; the work itself is done by the library layers.

pub mod db;
pub mod serve;
pub mod token;
