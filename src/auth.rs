//! API tokens (SECURITY.md item 8): a typed `gtr_` prefix, 256 random bits, shown once and
//! stored only as SHA-256, with scopes. `admin` implies every other scope.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Upload logs, classify, record fixes, triage groups (state, assignee).
    Ingest,
    /// Read reports, groups and search.
    Read,
    /// Claim and complete reproduction jobs.
    Worker,
    /// Everything, plus managing rules.
    Admin,
}

impl Scope {
    /// Every scope, in the order listings show them.
    pub const ALL: [Scope; 4] = [Scope::Ingest, Scope::Read, Scope::Worker, Scope::Admin];

    /// The scope's name as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Ingest => "ingest",
            Scope::Read => "read",
            Scope::Worker => "worker",
            Scope::Admin => "admin",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scope::ALL
            .into_iter()
            .find(|scope| scope.as_str() == s)
            .ok_or_else(|| format!("unknown scope {s:?} (expected ingest, read, worker or admin)"))
    }
}

/// True when a token holding `held` may act with any of `wanted`.
pub fn allows(held: &[Scope], wanted: &[Scope]) -> bool {
    held.contains(&Scope::Admin) || wanted.iter().any(|w| held.contains(w))
}

/// The fixed prefix of every token, so leaked tokens are recognisable (and scannable).
pub const TOKEN_PREFIX: &str = "gtr_";

/// A freshly generated secret: the full token (shown once), its hash and display prefix.
pub struct NewSecret {
    /// `gtr_` + 64 hex digits (256 random bits).
    pub token: String,
    /// SHA-256 of `token`.
    pub hash: Vec<u8>,
    /// The first characters, for listings.
    pub prefix: String,
}

/// Generates a new token from the operating system's random source.
pub fn generate() -> Result<NewSecret, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    let token = format!("{TOKEN_PREFIX}{}", hex::encode(bytes));
    Ok(NewSecret {
        hash: hash(&token),
        prefix: token[..TOKEN_PREFIX.len() + 8].to_string(),
        token,
    })
}

/// SHA-256 of a token (or session id), the only form stored.
pub fn hash(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

/// Whether `s` has the shape of a token; anything else is rejected before a database lookup.
pub fn looks_like_token(s: &str) -> bool {
    s.len() == TOKEN_PREFIX.len() + 64
        && s.starts_with(TOKEN_PREFIX)
        && s[TOKEN_PREFIX.len()..]
            .bytes()
            .all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tokens_are_prefixed_random_and_hashed() {
        let a = generate().unwrap();
        let b = generate().unwrap();
        assert!(looks_like_token(&a.token), "{}", a.token);
        assert_ne!(a.token, b.token);
        assert_eq!(a.hash, hash(&a.token));
        assert_eq!(a.hash.len(), 32);
        assert!(a.token.starts_with(&a.prefix));
        assert_eq!(a.prefix.len(), 12);
    }

    #[test]
    fn admin_implies_every_scope_and_others_only_themselves() {
        assert!(allows(&[Scope::Admin], &[Scope::Worker]));
        assert!(allows(&[Scope::Read], &[Scope::Ingest, Scope::Read]));
        assert!(!allows(&[Scope::Ingest], &[Scope::Read]));
        assert!(!allows(&[], &[Scope::Read]));
    }

    #[test]
    fn scopes_parse_from_their_names_only() {
        assert_eq!("worker".parse::<Scope>(), Ok(Scope::Worker));
        assert!("root".parse::<Scope>().is_err());
        assert!(!looks_like_token("gtr_short"));
        assert!(!looks_like_token(&format!("xyz_{}", "a".repeat(64))));
    }
}
