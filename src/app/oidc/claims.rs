//! What the provider says about a person, made safe to store, show and log, and the role it
//! gives (SECURITY.md item 26). Claims are untrusted input: a provider passes on what people
//! typed into their profile, so a `name` may hold a newline that forges a log line, a NUL that
//! PostgreSQL refuses, direction overrides that reorder what a page shows, or 200,000
//! characters shown on every group page. Pure: no database, no network.
//!
//! Display text (the name) is repaired: unsafe characters dropped, length cut. What decides
//! access (the subject, the email's domain, group names) is never repaired, since a repaired
//! value could be another one (a group `triage\u{202e}-admins` is not `triage-admins`): an
//! unsafe subject refuses the sign-in, an unsafe email is dropped, an unsafe group is ignored.

use crate::roles::PersonRole;

/// The longest name kept, in characters (longer ones are cut).
pub const MAX_NAME_CHARS: usize = 200;
/// The longest email kept, in characters (RFC 3696's 320; a longer one is dropped).
pub const MAX_EMAIL_CHARS: usize = 320;
/// The most groups read from one sign-in (the rest are ignored).
pub const MAX_GROUPS: usize = 200;
/// The longest group name read, in characters (a longer one is ignored).
pub const MAX_GROUP_CHARS: usize = 256;
/// The longest subject accepted, in bytes (OpenID Connect Core 1.0, section 2: 255 ASCII).
pub const MAX_SUBJECT_BYTES: usize = 255;

/// Whether `c` is dropped from (or refuses) a claim: control characters (C0 with NUL, newline
/// and ESC; DEL; C1 with NEL), the bidirectional controls (marks, embeddings, overrides and
/// isolates), zero-width characters, the line and paragraph separators, and the byte order
/// mark and annotation characters.
#[must_use]
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
        )
}

/// `raw` without unsafe characters, trimmed and cut to `max_chars` characters.
#[must_use]
pub fn clean_text(raw: &str, max_chars: usize) -> String {
    let kept: String = raw.chars().filter(|c| !is_unsafe(*c)).collect();
    kept.trim().chars().take(max_chars).collect::<String>()
}

/// A display name: cleaned and cut; `None` when nothing is left.
#[must_use]
pub fn clean_name(raw: &str) -> Option<String> {
    let name = clean_text(raw, MAX_NAME_CHARS);
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// An email kept only as sent (surrounding spaces trimmed): `None` when it holds an unsafe
/// character (a newline anywhere included), is longer than [`MAX_EMAIL_CHARS`] or has no `@`.
#[must_use]
pub fn clean_email(raw: &str) -> Option<String> {
    let email = raw.trim_matches(' ');
    let acceptable = !email.is_empty()
        && email.contains('@')
        && email.chars().count() <= MAX_EMAIL_CHARS
        && !email.chars().any(is_unsafe);
    acceptable.then(|| email.to_owned())
}

/// The subject, or why it is refused: it names the person, so it is never repaired.
pub fn check_subject(raw: &str) -> Result<&str, String> {
    if raw.is_empty() {
        Err("the ID token's subject is empty".into())
    } else if raw.len() > MAX_SUBJECT_BYTES {
        Err(format!(
            "the ID token's subject is {} bytes long (at most {MAX_SUBJECT_BYTES})",
            raw.len()
        ))
    } else if raw.chars().any(is_unsafe) {
        Err("the ID token's subject holds control or direction characters".into())
    } else {
        Ok(raw)
    }
}

/// The group names of a `groups` claim: an array of strings (or, as some providers send one
/// group, a string). Other values in the array are ignored; `None` when the claim is neither.
#[must_use]
pub fn groups_of(value: &serde_json::Value) -> Option<Vec<String>> {
    match value {
        serde_json::Value::String(one) => Some(vec![one.clone()]),
        serde_json::Value::Array(items) => Some(
            items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
        ),
        _ => None,
    }
}

/// The groups kept: the first [`MAX_GROUPS`] that hold no unsafe character and are at most
/// [`MAX_GROUP_CHARS`] long. Returns them and how many were ignored.
#[must_use]
pub fn clean_groups(raw: Vec<String>) -> (Vec<String>, usize) {
    let total = raw.len();
    let kept: Vec<String> = raw
        .into_iter()
        .filter(|g| {
            !g.is_empty() && g.chars().count() <= MAX_GROUP_CHARS && !g.chars().any(is_unsafe)
        })
        .take(MAX_GROUPS)
        .collect();
    let ignored = total - kept.len();
    (kept, ignored)
}

/// Where the person's groups came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupsSource {
    /// The ID token's `groups` claim.
    IdToken,
    /// The userinfo answer's (the ID token had none).
    UserInfo,
    /// Neither had a `groups` claim.
    Absent,
}

impl GroupsSource {
    /// Where, in words.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            GroupsSource::IdToken => "id_token",
            GroupsSource::UserInfo => "userinfo",
            GroupsSource::Absent => "none",
        }
    }
}

/// The person as the provider describes them, cleaned.
#[derive(Clone, Debug)]
pub struct Identity {
    pub subject: String,
    /// Empty when the provider sent none or one that was dropped.
    pub email: String,
    /// Whether the provider says it verified the email.
    pub email_verified: bool,
    pub name: String,
    pub groups: Vec<String>,
    pub groups_source: GroupsSource,
    /// Groups ignored as unsafe, too long or too many.
    pub groups_ignored: usize,
}

/// What the portal grants people the groups do not: `--oidc-default-role`, for those whose
/// verified email is in `--oidc-allowed-domains` when domains are given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DefaultRole {
    pub role: Option<PersonRole>,
    /// Lower case, without `@`; empty: any email (or none).
    pub allowed_domains: Vec<String>,
}

/// Why the default role was not given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoDefault {
    /// No `--oidc-default-role`.
    Unset,
    /// The provider sent no usable email.
    NoEmail,
    /// The provider did not say the email is verified.
    Unverified,
    /// The email's domain is not an allowed one.
    OtherDomain,
}

/// Why a person gets no role: what was received, for the refusal page and the log.
#[derive(Clone, Debug)]
pub struct Refusal {
    pub groups: Vec<String>,
    pub groups_source: GroupsSource,
    pub email: String,
    pub no_default: NoDefault,
}

/// The person's role: the strongest their groups give, else the default role where it
/// applies; or why there is none.
pub fn decide_role(
    roles: &crate::roles::RoleMap,
    default: &DefaultRole,
    who: &Identity,
) -> Result<PersonRole, Refusal> {
    if let Some(role) = roles.role_of(&who.groups) {
        return Ok(role);
    }
    let no_default = match default.role {
        None => NoDefault::Unset,
        Some(role) if default.allowed_domains.is_empty() => return Ok(role),
        Some(_) if who.email.is_empty() => NoDefault::NoEmail,
        Some(_) if !who.email_verified => NoDefault::Unverified,
        Some(role) => {
            let domain = who
                .email
                .rsplit_once('@')
                .map(|(_, d)| d.to_lowercase())
                .unwrap_or_default();
            if default.allowed_domains.contains(&domain) {
                return Ok(role);
            }
            NoDefault::OtherDomain
        }
    };
    Err(Refusal {
        groups: who.groups.clone(),
        groups_source: who.groups_source,
        email: who.email.clone(),
        no_default,
    })
}

/// A comma-separated list of email domains (a flag's value): lower case, without a leading
/// `@`, blanks dropped.
#[must_use]
pub fn parse_domains(list: &str) -> Vec<String> {
    list.split(',')
        .map(|d| d.trim().trim_start_matches('@').to_lowercase())
        .filter(|d| !d.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roles::{RoleMap, parse_groups};

    #[test]
    fn names_lose_controls_and_direction_overrides_and_are_cut() {
        let cases: &[(&str, Option<&str>)] = &[
            ("Ana", Some("Ana")),
            (
                "Ana\n2025-01-01 INFO forged",
                Some("Ana2025-01-01 INFO forged"),
            ),
            ("A\u{0}na\u{1b}[31m", Some("Ana[31m")),
            ("\u{202e}nimda\u{202c} Bo", Some("nimda Bo")),
            ("x\u{2066}y\u{2069}z\u{200f}\u{2028}", Some("xyz")),
            ("  \u{0}\u{202e} ", None),
            ("Zoë 山田", Some("Zoë 山田")),
        ];
        for (raw, want) in cases {
            assert_eq!(clean_name(raw).as_deref(), *want, "{raw:?}");
        }
        let long = "é".repeat(200_000);
        assert_eq!(
            clean_name(&long).map(|n| n.chars().count()),
            Some(MAX_NAME_CHARS)
        );
    }

    #[test]
    fn emails_are_kept_as_sent_or_dropped() {
        assert_eq!(
            clean_email(" ana@example.test ").as_deref(),
            Some("ana@example.test")
        );
        for bad in [
            "ana\u{0}@example.test",
            "ana@example.test\n",
            "ana@exam\u{202e}ple.test",
            "no-at-sign",
            "",
        ] {
            assert_eq!(clean_email(bad), None, "{bad:?}");
        }
        let long = format!("{}@example.test", "a".repeat(MAX_EMAIL_CHARS));
        assert_eq!(clean_email(&long), None);
    }

    #[test]
    fn subjects_are_refused_rather_than_repaired() {
        assert_eq!(check_subject("ana"), Ok("ana"));
        assert!(check_subject("").is_err());
        assert!(check_subject("ana\u{0}").is_err());
        assert!(check_subject(&"a".repeat(256)).is_err());
    }

    #[test]
    fn groups_are_read_from_arrays_or_a_string_and_unsafe_ones_ignored() {
        let v = serde_json::json!(["a", 3, "b"]);
        assert_eq!(groups_of(&v), Some(vec!["a".to_owned(), "b".to_owned()]));
        assert_eq!(
            groups_of(&serde_json::json!("one")),
            Some(vec!["one".into()])
        );
        assert_eq!(groups_of(&serde_json::json!({"a": 1})), None);
        let raw = vec![
            "triage\u{202e}-admins".to_owned(),
            "ok".to_owned(),
            "x".repeat(MAX_GROUP_CHARS + 1),
            String::new(),
        ];
        assert_eq!(clean_groups(raw), (vec!["ok".to_owned()], 3));
        let many: Vec<String> = (0..1000).map(|i| format!("g{i}")).collect();
        let (kept, ignored) = clean_groups(many);
        assert_eq!((kept.len(), ignored), (MAX_GROUPS, 1000 - MAX_GROUPS));
    }

    fn who(email: &str, verified: bool, groups: &[&str]) -> Identity {
        Identity {
            subject: "s".into(),
            email: email.into(),
            email_verified: verified,
            name: "n".into(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            groups_source: GroupsSource::IdToken,
            groups_ignored: 0,
        }
    }

    #[test]
    fn the_default_role_applies_to_verified_emails_of_allowed_domains_only() {
        let roles = RoleMap {
            admin: parse_groups("admins"),
            ..RoleMap::default()
        };
        let none = DefaultRole::default();
        let anyone = DefaultRole {
            role: Some(PersonRole::Viewer),
            allowed_domains: Vec::new(),
        };
        let ours = DefaultRole {
            role: Some(PersonRole::Member),
            allowed_domains: parse_domains("Example.com, @b.org,"),
        };
        assert_eq!(ours.allowed_domains, ["example.com", "b.org"]);
        let admin = who("x@other.net", false, &["admins"]);
        assert_eq!(
            decide_role(&roles, &ours, &admin).ok(),
            Some(PersonRole::Admin)
        );
        let plain = who("x@EXAMPLE.com", true, &[]);
        assert_eq!(
            decide_role(&roles, &none, &plain).unwrap_err().no_default,
            NoDefault::Unset
        );
        assert_eq!(
            decide_role(&roles, &anyone, &plain).ok(),
            Some(PersonRole::Viewer)
        );
        assert_eq!(
            decide_role(&roles, &ours, &plain).ok(),
            Some(PersonRole::Member)
        );
        let cases = [
            (who("x@example.com", false, &[]), NoDefault::Unverified),
            (
                who("x@example.com.evil.net", true, &[]),
                NoDefault::OtherDomain,
            ),
            (who("x@sub.example.com", true, &[]), NoDefault::OtherDomain),
            (who("", true, &[]), NoDefault::NoEmail),
        ];
        for (person, why) in cases {
            assert_eq!(
                decide_role(&roles, &ours, &person).unwrap_err().no_default,
                why
            );
        }
    }
}
