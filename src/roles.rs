//! People's roles (issue 31): what a person signed in through the identity provider may do,
//! decided from the provider's `groups` claim by the `--oidc-*-groups` settings at every
//! sign-in. Pure: no database, no network. A role acts with the scopes tokens have, so the
//! scope checks of every handler apply to people unchanged.

use std::fmt;
use std::str::FromStr;

use crate::auth::Scope;

/// What a person may do, strongest first.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
// Named apart from the findings' `rules::Role` (root cause or symptom), here and in the API's
// document.
#[schema(as = PersonRole)]
pub enum PersonRole {
    /// Everything, including tokens, people and rules.
    Admin,
    /// Upload, record fixes, triage; read everything.
    Member,
    /// Read only.
    Viewer,
}

impl PersonRole {
    /// Every role, strongest first.
    pub const ALL: [PersonRole; 3] = [PersonRole::Admin, PersonRole::Member, PersonRole::Viewer];

    /// The role's name as stored and shown.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            PersonRole::Admin => "admin",
            PersonRole::Member => "member",
            PersonRole::Viewer => "viewer",
        }
    }

    /// The token scopes a person with this role acts with.
    #[must_use]
    pub fn scopes(self) -> &'static [Scope] {
        match self {
            PersonRole::Admin => &[Scope::Admin],
            PersonRole::Member => &[Scope::Ingest, Scope::Read],
            PersonRole::Viewer => &[Scope::Read],
        }
    }

    /// Whether a person with this role may hold API tokens of their own (created in the
    /// portal): members and admins may, viewers may not (they read in the portal).
    #[must_use]
    pub fn may_own_tokens(self) -> bool {
        matches!(self, PersonRole::Admin | PersonRole::Member)
    }

    /// The scopes this role may give a token it creates: no more than it acts with.
    #[must_use]
    pub fn grantable_scopes(self) -> Vec<Scope> {
        if !self.may_own_tokens() {
            return Vec::new();
        }
        Scope::ALL
            .into_iter()
            .filter(|s| crate::auth::allows(self.scopes(), &[*s]))
            .collect()
    }

    /// Of `scopes`, those this role acts with (a person's token never does more than the
    /// person may).
    #[must_use]
    pub fn clamp(self, scopes: &[Scope]) -> Vec<Scope> {
        scopes
            .iter()
            .copied()
            .filter(|s| crate::auth::allows(self.scopes(), &[*s]))
            .collect()
    }
}

impl fmt::Display for PersonRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PersonRole {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PersonRole::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("unknown role {s:?} (expected admin, member or viewer)"))
    }
}

/// Which provider groups give which role (`--oidc-admin-groups` and the others).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoleMap {
    pub admin: Vec<String>,
    pub member: Vec<String>,
    pub viewer: Vec<String>,
}

impl RoleMap {
    /// The groups that give `role`.
    #[must_use]
    pub fn groups_for(&self, role: PersonRole) -> &[String] {
        match role {
            PersonRole::Admin => &self.admin,
            PersonRole::Member => &self.member,
            PersonRole::Viewer => &self.viewer,
        }
    }

    /// The strongest role any of `groups` gives (group names compare exactly, as providers
    /// spell them); `None` when none is mapped: no access.
    #[must_use]
    pub fn role_of<S: AsRef<str>>(&self, groups: &[S]) -> Option<PersonRole> {
        PersonRole::ALL.into_iter().find(|role| {
            let mapped = self.groups_for(*role);
            groups
                .iter()
                .any(|g| mapped.iter().any(|m| m == g.as_ref()))
        })
    }

    /// Whether no group gives any role (then nobody can sign in through the provider).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.admin.is_empty() && self.member.is_empty() && self.viewer.is_empty()
    }
}

/// Splits a comma-separated list of group names (a flag's value), dropping blanks.
#[must_use]
pub fn parse_groups(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map() -> RoleMap {
        RoleMap {
            admin: parse_groups("triage-admins, platform"),
            member: parse_groups("ml-team"),
            viewer: parse_groups("everyone,"),
        }
    }

    #[test]
    fn the_strongest_mapped_group_decides_the_role() {
        let cases: &[(&[&str], Option<PersonRole>)] = &[
            (&["everyone"], Some(PersonRole::Viewer)),
            (&["everyone", "ml-team"], Some(PersonRole::Member)),
            (
                &["ml-team", "platform", "everyone"],
                Some(PersonRole::Admin),
            ),
            (&["triage-admins"], Some(PersonRole::Admin)),
            (&["unrelated"], None),
            (&[], None),
            // Names compare exactly: no case folding, no prefixes.
            (&["ML-team", "ml-team-2", "Platform"], None),
        ];
        for (groups, want) in cases {
            assert_eq!(map().role_of(groups), *want, "{groups:?}");
        }
    }

    #[test]
    fn roles_act_with_the_scopes_of_tokens() {
        assert_eq!(PersonRole::Admin.scopes(), &[Scope::Admin]);
        assert!(crate::auth::allows(
            PersonRole::Member.scopes(),
            &[Scope::Ingest]
        ));
        assert!(!crate::auth::allows(
            PersonRole::Viewer.scopes(),
            &[Scope::Ingest]
        ));
        assert!(!crate::auth::allows(
            PersonRole::Member.scopes(),
            &[Scope::Admin]
        ));
        assert!(crate::auth::allows(
            PersonRole::Viewer.scopes(),
            &[Scope::Read]
        ));
    }

    #[test]
    fn members_and_admins_own_tokens_of_no_more_than_their_scopes() {
        assert_eq!(PersonRole::Admin.grantable_scopes(), Scope::ALL.to_vec());
        assert_eq!(
            PersonRole::Member.grantable_scopes(),
            vec![Scope::Ingest, Scope::Read]
        );
        assert!(PersonRole::Viewer.grantable_scopes().is_empty());
        assert!(!PersonRole::Viewer.may_own_tokens());
        assert_eq!(
            PersonRole::Member.clamp(&[Scope::Admin, Scope::Read, Scope::Worker]),
            vec![Scope::Read]
        );
        assert_eq!(
            PersonRole::Viewer.clamp(&[Scope::Ingest]),
            Vec::<Scope>::new()
        );
        assert_eq!(PersonRole::Admin.clamp(&[Scope::Admin]), vec![Scope::Admin]);
    }

    #[test]
    fn group_lists_drop_blanks_and_roles_parse_from_their_names() {
        assert_eq!(parse_groups(" a, ,b,"), vec!["a", "b"]);
        assert!(parse_groups("").is_empty());
        assert!(RoleMap::default().is_empty());
        assert!(!map().is_empty());
        for role in PersonRole::ALL {
            assert_eq!(role.as_str().parse::<PersonRole>(), Ok(role));
        }
        assert!("owner".parse::<PersonRole>().is_err());
    }
}
