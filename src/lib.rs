//! gpu-triage: a self-hosted service that tells ML teams why their GPU job crashed.
//!
//! Layers (DESIGN.md section 1): `web`/`cli` → `ingest` → `rules` → `storage`. `ingest` and
//! `rules` are pure; all SQL lives in `storage`.

pub mod actor;
pub mod api_types;
pub mod app;
pub mod auth;
pub mod cli;
pub mod commands;
pub mod config;
pub mod ids;
pub mod ingest;
pub mod roles;
pub mod rules;
pub mod storage;
pub mod telemetry;
pub mod time;
pub mod web;
pub mod worker;
