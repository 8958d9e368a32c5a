//! Who did something (issue 31 item 3): a person signed in through the identity provider, an
//! API token (CI, scripts, and the portal for installations without a provider), or the service
//! itself. The web layer builds an [`Actor`] from the session or the bearer token and hands it
//! to the use cases, which record it beside what it did: the name as it was then (so history
//! reads right after a person is deleted or renamed) and the person's or token's id (so "mine"
//! filters follow the person, not a name). Pure: no database, no network.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The name recorded for the changes the service makes itself (a regression found on upload).
pub const SERVICE_NAME: &str = "gpu-triage";

/// Who acts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Actor {
    /// A person signed in through the identity provider (`people.id`).
    Person { id: i64, name: String },
    /// An API token, used over the API or to sign in to the portal (`tokens.id`).
    Token { id: i64, name: String },
    /// The service itself, under the name its history shows (`gpu-triage`, `cli import`).
    Service(&'static str),
}

impl Actor {
    /// The service as it names itself in history ([`SERVICE_NAME`]).
    pub const SERVICE: Actor = Actor::Service(SERVICE_NAME);

    /// The name recorded with what it does: the person's, the token's, or the service's.
    #[must_use]
    pub fn name(&self) -> &str {
        match self {
            Actor::Person { name, .. } | Actor::Token { name, .. } => name,
            Actor::Service(name) => name,
        }
    }

    /// Which kind of actor it is.
    #[must_use]
    pub fn kind(&self) -> ActorKind {
        match self {
            Actor::Person { .. } => ActorKind::Person,
            Actor::Token { .. } => ActorKind::Token,
            Actor::Service(_) => ActorKind::Service,
        }
    }

    /// The person's id, for a person.
    #[must_use]
    pub fn person_id(&self) -> Option<i64> {
        match self {
            Actor::Person { id, .. } => Some(*id),
            _ => None,
        }
    }

    /// The token's id, for a token.
    #[must_use]
    pub fn token_id(&self) -> Option<i64> {
        match self {
            Actor::Token { id, .. } => Some(*id),
            _ => None,
        }
    }
}

/// Which kind of actor recorded something, as stored beside its name (`*_kind` columns of
/// migration 0027) and sent on the wire. Records written before that migration have none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ActorKind {
    /// A person signed in through the identity provider.
    Person,
    /// An API token.
    Token,
    /// The service itself.
    Service,
}

impl ActorKind {
    /// The spelling on the wire and in the database.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ActorKind::Person => "person",
            ActorKind::Token => "token",
            ActorKind::Service => "service",
        }
    }

    /// What history puts before the name: `token ` for a token (`token ci`), else nothing.
    #[must_use]
    pub fn prefix(self) -> &'static str {
        match self {
            ActorKind::Token => "token ",
            ActorKind::Person | ActorKind::Service => "",
        }
    }

    /// The kind spelled `s`, if it is one.
    #[must_use]
    pub fn parse(s: &str) -> Option<ActorKind> {
        [ActorKind::Person, ActorKind::Token, ActorKind::Service]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

impl fmt::Display for ActorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who a stored record names, as read back: the name recorded then, and what kind of actor it
/// was (`None` for records written before actors were typed: the name is all there is).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedActor {
    pub name: String,
    pub kind: Option<ActorKind>,
    /// The person, while they exist.
    pub person_id: Option<i64>,
}

impl RecordedActor {
    /// How history says who: a person's name, `token <name>` for a token, the name alone for
    /// the service and for records that predate actor kinds.
    #[must_use]
    pub fn label(&self) -> String {
        let prefix = self.kind.map_or("", ActorKind::prefix);
        format!("{prefix}{}", self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_actor_records_its_name_kind_and_id() {
        let ana = Actor::Person {
            id: 7,
            name: "Ana".into(),
        };
        let ci = Actor::Token {
            id: 3,
            name: "ci".into(),
        };
        assert_eq!(
            (ana.name(), ana.kind(), ana.person_id(), ana.token_id()),
            ("Ana", ActorKind::Person, Some(7), None)
        );
        assert_eq!(
            (ci.name(), ci.kind(), ci.person_id(), ci.token_id()),
            ("ci", ActorKind::Token, None, Some(3))
        );
        assert_eq!(
            (Actor::SERVICE.name(), Actor::SERVICE.kind()),
            ("gpu-triage", ActorKind::Service)
        );
    }

    #[test]
    fn history_names_people_by_name_and_tokens_as_tokens() {
        let who = |name: &str, kind| RecordedActor {
            name: name.into(),
            kind,
            person_id: None,
        };
        assert_eq!(who("Ana", Some(ActorKind::Person)).label(), "Ana");
        assert_eq!(who("ci", Some(ActorKind::Token)).label(), "token ci");
        assert_eq!(
            who("gpu-triage", Some(ActorKind::Service)).label(),
            "gpu-triage"
        );
        assert_eq!(
            who("alice", None).label(),
            "alice",
            "an old record as stored"
        );
        for k in [ActorKind::Person, ActorKind::Token, ActorKind::Service] {
            assert_eq!(ActorKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(ActorKind::parse("Person"), None);
    }
}
