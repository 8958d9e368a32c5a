//! Integration tests: one binary, in-process router per test on a fresh database (see
//! `support`), plus end-to-end runs of the real `gpu-triage` executable.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

mod api;
mod attribution;
mod browse;
mod browser;
mod browser_attribution;
mod browser_merge;
mod browser_oidc;
mod browser_outcome;
mod browser_run;
mod browser_tracker;
mod browser_triage;
mod ci_action;
mod classify_cli;
mod docs;
mod health;
mod job_runs;
mod jobs;
mod likely;
mod limits;
mod log_store;
mod logviewer;
mod migrations;
mod oidc;
mod openapi;
mod outcome;
mod portal;
mod regroup;
mod repro_status;
mod request_id;
mod retention;
mod search;
mod security;
mod serve_binary;
mod similar;
mod support;
mod team_rules;
mod tokens;
mod triage;
mod upload_cli;
mod upload_plans;
mod webhooks;
mod where_it_happens;
mod worker;
