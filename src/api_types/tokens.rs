//! The `/api/v1/tokens` wire types: a token as admins see it (never its secret or its hash),
//! the creation request, and the creation answer that carries the secret this once.

use serde::{Deserialize, Serialize};

/// A token's standing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TokenState {
    /// It authenticates.
    Active,
    /// Its expiry passed.
    Expired,
    /// An admin or the CLI revoked it.
    Revoked,
}

impl TokenState {
    /// The state's word.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            TokenState::Active => "active",
            TokenState::Expired => "expired",
            TokenState::Revoked => "revoked",
        }
    }
}

/// A token as listed: never its secret.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenInfo {
    pub id: i64,
    pub name: String,
    /// The secret's first characters (`gtr_xxxxxxxx`), to tell tokens apart.
    pub prefix: String,
    /// `read`, `ingest`, `worker`, `admin`.
    pub scopes: Vec<String>,
    pub state: TokenState,
    pub created_at: crate::time::Timestamp,
    /// Who created it (a token's name; empty for the CLI and the first admin).
    pub created_by: String,
    /// When it last authenticated (to the minute), if ever.
    #[schema(required)]
    pub last_used_at: Option<crate::time::Timestamp>,
    /// When it stops working; null: never.
    #[schema(required)]
    pub expires_at: Option<crate::time::Timestamp>,
    /// The person it belongs to (created by them in the portal); null for a service token
    /// (CI, workers), the first admin token and tokens from the CLI. A person's token acts
    /// with no more than the person's role, and is revoked when the person is disabled.
    #[schema(required)]
    pub owner_person_id: Option<i64>,
    /// That person's name; null for a service token.
    #[schema(required)]
    pub owner_name: Option<String>,
}

/// `GET /api/v1/tokens`: every token, newest first.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenList {
    pub tokens: Vec<TokenInfo>,
}

/// The body of `POST /api/v1/tokens`. Scopes are strings so an unknown one is a 422 naming it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    /// Who or what uses the token (1 to 200 characters).
    #[schema(min_length = 1, max_length = 200)]
    pub name: String,
    /// At least one of `read`, `ingest`, `worker`, `admin` (none: 422).
    pub scopes: Vec<String>,
    /// Days until it stops working (1 to 3650); absent or null: never.
    #[schema(minimum = 1, maximum = 3650)]
    pub expires_in_days: Option<u32>,
}

/// The answer to creating a token: the token, and its secret shown this once.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenCreated {
    #[serde(flatten)]
    pub token: TokenInfo,
    /// The token itself (`gtr_` and 64 hex digits): shown only in this answer.
    pub secret: String,
}
