//! The `/api/v1/people` wire types: the people who sign in through the identity provider, as
//! admins see them (who they are, their role, whether disabled, what they hold now).

use serde::{Deserialize, Serialize};

use crate::roles::PersonRole;

/// A person as listed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PersonInfo {
    pub id: i64,
    /// Shown in the portal and on what they record.
    pub name: String,
    /// From the provider at their last sign-in (may be empty).
    pub email: String,
    /// The role their groups mapped to at their last sign-in.
    pub role: PersonRole,
    /// The provider that vouches for them, and its subject for them.
    pub issuer: String,
    pub subject: String,
    /// Whether an admin disabled them: no sessions, no sign-in, their tokens revoked.
    pub disabled: bool,
    pub created_at: crate::time::Timestamp,
    pub last_sign_in_at: crate::time::Timestamp,
    /// Their portal sessions that have not expired.
    pub live_sessions: i64,
    /// The tokens they own that still authenticate.
    pub active_tokens: i64,
}

/// `GET /api/v1/people`: everyone who has signed in, by name.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PersonList {
    pub people: Vec<PersonInfo>,
}
