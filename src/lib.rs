//! gpu-triage: a self-hosted service that tells ML teams why their GPU job crashed.
//!
//! Layers (DESIGN.md section 1): `web`/`cli` → `ingest` → `rules` → `storage`. `ingest` and
//! `rules` are pure; all SQL lives in `storage`.

pub mod cli;
pub mod config;
pub mod server;
pub mod storage;
pub mod web;
