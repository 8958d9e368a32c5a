//! HTTP in and out: the router (`router.rs`), the shared state (`state.rs`), the error type
//! every handler returns (`error.rs`) and its HTML pages (`error_page.rs`), and the security headers and request id every response
//! carries. Handlers are thin: extract, call one domain function, map the result.

mod admission;
pub mod anonymous;
mod api;
pub mod auth;
pub mod error;
mod error_page;
pub mod extract;
mod health;
mod html;
pub mod limits;
mod live;
pub mod metrics;
pub mod multipart_guard;
pub mod request_id;
mod router;
pub mod scope;
pub mod server;
pub mod sign_in_rate;
pub mod state;
mod uploads;

pub use error::{AppError, PageError};
pub use router::router;
pub use state::{ApiLimits, AppState};
