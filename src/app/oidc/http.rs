//! The HTTP client openidconnect talks to the provider through: the ureq 3 agent the project
//! already builds (no reqwest), with a timeout, no redirects (a provider's endpoints answer
//! directly; following redirects would let a compromised one point us elsewhere) and a cap on
//! what it may send back.

use std::time::Duration;

use openidconnect::{HttpRequest, HttpResponse, SyncHttpClient};

/// The longest a provider may take to answer one request.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read from a provider (discovery documents and key sets are small).
const MAX_BODY_BYTES: u64 = 1 << 20;

/// Why a request to the provider failed (it could not be reached or read).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HttpError(String);

/// The client; cheap to clone.
#[derive(Clone)]
pub struct Http(ureq::Agent);

impl Http {
    /// A client with the timeout, no redirects and HTTP error statuses returned as responses
    /// (the token endpoint's 400 carries the OAuth error openidconnect reads).
    #[must_use]
    pub fn new() -> Http {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(TIMEOUT))
            .max_redirects(0)
            .http_status_as_error(false)
            .build()
            .into();
        Http(agent)
    }
}

impl Default for Http {
    fn default() -> Self {
        Http::new()
    }
}

impl SyncHttpClient for Http {
    type Error = HttpError;

    fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let uri = request.uri().to_string();
        let response = self
            .0
            .run(request)
            .map_err(|e| HttpError(format!("{uri}: {e}")))?;
        let (parts, body) = response.into_parts();
        let bytes = body
            .into_with_config()
            .limit(MAX_BODY_BYTES)
            .read_to_vec()
            .map_err(|e| HttpError(format!("{uri}: {e}")))?;
        Ok(http::Response::from_parts(parts, bytes))
    }
}
