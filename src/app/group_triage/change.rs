//! Changing one group's triage: the patch a client or a form sends, checked on its own
//! ([`validate`]), then against the group's current triage ([`next_triage`]), then written with
//! its history entries ([`apply`], in the caller's transaction, so a bulk change of many groups
//! and an undo share it). The API's `PATCH` and the portal's state form call [`change`], so both
//! refuse the same things with the same words.

use sqlx::PgConnection;

use super::regression::{self, FixedIn};
use super::{GroupView, group};
use crate::actor::Actor;
use crate::api_types::{ErrorCode, GroupAction, GroupPatch, GroupState};
use crate::app::{Error, triage};
use crate::storage::group_merge::{self as merges, Lock, Standing};
use crate::storage::group_triage::{self as store, NewEvent, Triage};
use crate::storage::people;
use crate::storage::{Db, DbError, tokens};

/// The value of the people picker's choice that keeps an assignee who is no person (a token
/// name assigned before people signed in): posting the form unchanged leaves them assigned.
pub const KEEP_ASSIGNEE: &str = "keep";

/// The patch a portal form posts: the group page's form posts every field (the current values
/// when unchanged), its assignee as a token name (`assignee`) or, where people sign in, as a
/// person's id (`assignee_id`: empty for nobody, [`KEEP_ASSIGNEE`] to leave it); the list's
/// one-click resolve and ignore post no assignee (left as it is). The fix's commit or version
/// counts only with the resolved state (the field keeps its old value when another state is
/// picked). A person's id that is no number is refused like an unknown one.
pub fn form_patch(
    state: String,
    resolved_in: String,
    assignee: Option<String>,
    assignee_id: Option<String>,
) -> Result<GroupPatch, Error> {
    form_patch_until(state, resolved_in, assignee, assignee_id, None)
}

/// [`form_patch`] with the "ignore until" choice: empty (or absent) ignores for good, a number
/// N until N more reports; it counts only with the ignored state.
pub fn form_patch_until(
    state: String,
    resolved_in: String,
    assignee: Option<String>,
    assignee_id: Option<String>,
    ignore_until: Option<String>,
) -> Result<GroupPatch, Error> {
    let resolving = state.trim() == GroupState::Resolved.as_str();
    let ignoring = state.trim() == GroupState::Ignored.as_str();
    let ignore_until_reports = match ignore_until.as_deref().map(str::trim) {
        Some(n) if ignoring && !n.is_empty() => Some(n.parse::<i64>().map_err(|_| {
            invalid(format!(
                "ignore until must be a number of reports (1-{MAX_IGNORE_REPORTS}), got {:?}",
                n.chars().take(40).collect::<String>()
            ))
        })?),
        _ => None,
    };
    let (assignee, assignee_id) = match assignee_id.as_deref().map(str::trim) {
        None | Some(KEEP_ASSIGNEE) => (assignee, None),
        Some("") => (Some(String::new()), None),
        Some(id) => (
            assignee,
            Some(crate::ids::parse(id).ok_or_else(|| {
                invalid(format!(
                    "assignee_id must be a person's id, got {:?}",
                    id.chars().take(40).collect::<String>()
                ))
            })?),
        ),
    };
    Ok(GroupPatch {
        state: Some(state),
        resolved_in: resolving.then_some(resolved_in),
        assignee,
        assignee_id,
        ignore_until_reports,
    })
}

/// The most reports an ignore may wait for.
pub const MAX_IGNORE_REPORTS: i64 = 1_000_000;

/// A change as validated, before it meets a group's current triage.
#[derive(Clone, Debug)]
pub(super) struct Change {
    state: Option<GroupState>,
    resolved_in: Option<String>,
    /// The new assignee's name (empty: nobody); for a person, their name is filled in from
    /// `assignee_person` once the person is found.
    assignee: Option<String>,
    assignee_person: Option<i64>,
    /// With the ignored state: reopen after this many more reports.
    ignore_until: Option<i32>,
}

impl Change {
    /// What the change does, as a verb phrase for the list's notice (`resolved`, `ignored
    /// until it happens again`, `assigned to Ana`); the assignee's name once it is known.
    pub(super) fn summary(&self, assignee: &str) -> String {
        let mut parts = Vec::new();
        match (self.state, self.ignore_until) {
            (Some(GroupState::Ignored), Some(1)) => {
                parts.push("ignored until it happens again".to_owned());
            }
            (Some(GroupState::Ignored), Some(n)) => {
                parts.push(format!("ignored until {n} more reports"));
            }
            (Some(GroupState::Open), _) => parts.push("reopened".to_owned()),
            (Some(GroupState::Resolved), _) => match self.resolved_in.as_deref() {
                Some(r) if !r.is_empty() => parts.push(format!("resolved in {r}")),
                _ => parts.push("resolved".to_owned()),
            },
            (Some(s), _) => parts.push(format!("set to {s}")),
            (None, _) => {}
        }
        match &self.assignee {
            Some(_) if assignee.is_empty() => parts.push("unassigned".to_owned()),
            Some(_) => parts.push(format!("assigned to {assignee}")),
            None => {}
        }
        parts.join(" and ")
    }
}

pub(super) fn invalid(message: impl Into<String>) -> Error {
    Error::Invalid(ErrorCode::BadTriage, message.into())
}

/// Checks a patch on its own: at least one field, a known state, a well-formed `resolved_in`
/// and assignee, an `ignore_until_reports` only with the ignored state and in range.
pub(super) fn validate(patch: GroupPatch) -> Result<Change, Error> {
    if patch == GroupPatch::default() {
        return Err(invalid(
            "nothing to change: give state, resolved_in or assignee",
        ));
    }
    let state = match patch.state.as_deref().map(str::trim) {
        Some(s) => Some(GroupState::parse(s).ok_or_else(|| {
            invalid(format!(
                "unknown state {:?}: expected open, resolved or ignored",
                s.chars().take(40).collect::<String>()
            ))
        })?),
        None => None,
    };
    let resolved_in = patch.resolved_in.map(|r| r.trim().to_owned());
    if let Some(r) = &resolved_in {
        // Named first: a NUL or an escape sequence is the reason, whatever the length.
        if let Some(at) = control_character(r) {
            return Err(invalid(format!(
                "resolved_in must not contain a control character ({at}): give a commit \
                 (7-40 hex digits) or a version such as 2.1"
            )));
        }
        if r.len() > regression::MAX_VERSION_LEN {
            return Err(invalid("resolved_in must be at most 100 characters"));
        }
        FixedIn::parse(r).map_err(invalid)?;
    }
    let assignee = patch.assignee.map(|a| a.trim().to_owned());
    if let Some(at) = assignee.as_deref().and_then(control_character) {
        return Err(invalid(format!(
            "assignee must not contain a control character ({at}): give a token name"
        )));
    }
    if assignee.as_ref().is_some_and(|a| a.len() > 200) {
        return Err(invalid(
            "assignee must be a token name (at most 200 characters)",
        ));
    }
    if assignee.is_some() && patch.assignee_id.is_some() {
        return Err(invalid(
            "give assignee (a token name, or \"\" for nobody) or assignee_id (a person's id), \
             not both",
        ));
    }
    if let Some(id) = patch.assignee_id.filter(|id| *id < 1) {
        return Err(unknown_person(id));
    }
    let ignore_until = match patch.ignore_until_reports {
        None => None,
        Some(_) if state != Some(GroupState::Ignored) => {
            return Err(invalid(
                "ignore_until_reports goes only with \"state\": \"ignored\"",
            ));
        }
        Some(n) => Some(
            i32::try_from(n)
                .ok()
                .filter(|n| (1..=MAX_IGNORE_REPORTS).contains(&i64::from(*n)))
                .ok_or_else(|| {
                    invalid(format!(
                        "ignore_until_reports must be 1 (until it happens again) to \
                         {MAX_IGNORE_REPORTS}, got {n}"
                    ))
                })?,
        ),
    };
    Ok(Change {
        state,
        resolved_in,
        // Named once the person is found.
        assignee: patch.assignee_id.map_or(assignee, |_| Some(String::new())),
        assignee_person: patch.assignee_id,
        ignore_until,
    })
}

/// The refusal of an assignee id that names no enabled person.
fn unknown_person(id: i64) -> Error {
    invalid(format!(
        "no enabled person has id {id}: assign someone who signed in (the group page lists \
         them), or give \"assignee\": \"\" for nobody"
    ))
}

/// The first control character of `text` as a reader can find it (`U+0000 at character 4`),
/// so a refusal names the real reason rather than a length or format it does not break.
fn control_character(text: &str) -> Option<String> {
    text.chars()
        .enumerate()
        .find(|(_, c)| c.is_control())
        .map(|(at, c)| format!("U+{:04X} at character {}", u32::from(c), at + 1))
}

/// The triage after `change`, or why it cannot apply to the current one: `regressed` is not
/// set by hand (only kept), and `resolved_in` goes only with the resolved state.
fn next_triage(current: &Triage, change: &Change) -> Result<Triage, Error> {
    let state = change.state.unwrap_or(current.state);
    if state == GroupState::Regressed && current.state != GroupState::Regressed {
        return Err(invalid(
            "regressed is set by gpu-triage when a resolved failure comes back; \
             set open, resolved or ignored",
        ));
    }
    let resolved_in = match (&change.resolved_in, state) {
        (Some(r), GroupState::Resolved) => r.clone(),
        (Some(r), _) if !r.is_empty() => {
            return Err(invalid(format!(
                "resolved_in goes only with the resolved state (this change leaves it {state})"
            )));
        }
        // The same state keeps its fix (a regressed group keeps the one that did not hold).
        _ if state == current.state => current.resolved_in.clone(),
        _ => String::new(),
    };
    let (assignee, assignee_person_id) = match &change.assignee {
        Some(name) => (name.clone(), change.assignee_person),
        None => (current.assignee.clone(), current.assignee_person_id),
    };
    // An ignore keeps its countdown unless the change sets another (or ends the ignore).
    let ignore_reports_left = match (state, change.ignore_until) {
        (GroupState::Ignored, Some(n)) => Some(n),
        (GroupState::Ignored, None) if current.state == GroupState::Ignored => {
            current.ignore_reports_left
        }
        _ => None,
    };
    Ok(Triage {
        state,
        resolved_in,
        assignee,
        assignee_person_id,
        ignore_reports_left,
        state_changed_at: current.state_changed_at,
    })
}

/// Changes group `id`'s state, `resolved_in` or assignee as `actor` (a person or a token),
/// writing one history entry per change in the same transaction, and returns the group as it
/// is then. 404 for an unknown group; 422 `bad_triage` for an unknown state, `regressed` set by
/// hand, `resolved_in` without the resolved state or not a commit or version, an assignee that
/// is no active token's name or no enabled person's id, an `ignore_until_reports` without the
/// ignored state or out of range, or an empty patch; 409 `group_merged` for a group merged into
/// another.
#[tracing::instrument(name = "group_triage::change", skip_all, fields(group_id = id, actor = actor.name()))]
pub async fn change(
    db: &Db,
    id: i64,
    patch: GroupPatch,
    actor: &Actor,
) -> Result<GroupView, Error> {
    let change = validate(patch)?;
    let mut tx = db.pool().begin().await.map_err(DbError::from)?;
    apply(&mut tx, id, &change, actor).await?;
    tx.commit().await.map_err(DbError::from)?;
    group(db, id).await
}

/// What a change did to one group: its triage before and after (equal when it changed
/// nothing).
#[derive(Clone, Debug)]
pub(super) struct Applied {
    pub before: Triage,
    pub after: Triage,
}

/// Applies `change` to group `id` as `actor` in the caller's transaction: locks the group's
/// row (until the transaction ends, so the change is decided on the triage as it is and no other
/// change or regression comes in between, SECURITY.md item 19), refuses what [`change`]
/// refuses, writes the history entries and the new triage.
pub(super) async fn apply(
    tx: &mut PgConnection,
    id: i64,
    change: &Change,
    actor: &Actor,
) -> Result<Applied, Error> {
    let mut change = change.clone();
    let current = store::lock_triage(&mut *tx, id)
        .await?
        .ok_or(Error::NotFound("group"))?;
    // Read once the row is held: a merge of it either committed before (seen here) or waits.
    if let Some(Standing::Merged(into)) = merges::standing(&mut *tx, id, Lock::None).await? {
        return Err(triage::merged_away(id, into));
    }
    if let Some(person) = change.assignee_person {
        // A person assigned before they were disabled stays assigned; anyone else must be
        // enabled now.
        let name = if current.assignee_person_id == Some(person) {
            current.assignee.clone()
        } else {
            people::get_enabled(&mut *tx, person)
                .await?
                .ok_or_else(|| unknown_person(person))?
                .name
        };
        change.assignee = Some(name);
    }
    let next = next_triage(&current, &change)?;
    let reassigned = (&next.assignee, next.assignee_person_id)
        != (&current.assignee, current.assignee_person_id);
    if reassigned
        && next.assignee_person_id.is_none()
        && !next.assignee.is_empty()
        && !tokens::is_active_name(&mut *tx, &next.assignee).await?
    {
        return Err(invalid(format!(
            "no active token is named {:?}: assign a name that `gpu-triage token list` shows, \
             or \"\" for nobody",
            next.assignee
        )));
    }
    write(tx, id, &current, &next, actor, "").await?;
    Ok(Applied {
        before: current,
        after: next,
    })
}

/// Whether two triages agree on everything a change sets (not when the state last changed).
pub(super) fn same(a: &Triage, b: &Triage) -> bool {
    (
        a.state,
        &a.resolved_in,
        &a.assignee,
        a.assignee_person_id,
        a.ignore_reports_left,
    ) == (
        b.state,
        &b.resolved_in,
        &b.assignee,
        b.assignee_person_id,
        b.ignore_reports_left,
    )
}

/// Writes group `id`'s triage `next` (it was `current`) with a history entry for each part that
/// changed (`note` added to their detail: an undo says so), at one moment.
pub(super) async fn write(
    tx: &mut PgConnection,
    id: i64,
    current: &Triage,
    next: &Triage,
    actor: &Actor,
    note: &str,
) -> Result<(), Error> {
    let state_changed = next.state != current.state;
    let fix_changed = next.state == GroupState::Resolved && next.resolved_in != current.resolved_in;
    let ignore_changed = next.state == GroupState::Ignored
        && next.ignore_reports_left != current.ignore_reports_left;
    let reassigned = (&next.assignee, next.assignee_person_id)
        != (&current.assignee, current.assignee_person_id);
    let at = store::change_moment(&mut *tx, id).await?;
    let with_note = |detail: String| match (detail.is_empty(), note.is_empty()) {
        (_, true) => detail,
        (true, false) => note.to_owned(),
        (false, false) => format!("{detail}; {note}"),
    };
    if state_changed || fix_changed || ignore_changed {
        let detail = match (next.state, next.ignore_reports_left) {
            (GroupState::Resolved, _) if !next.resolved_in.is_empty() => {
                format!("in {}", next.resolved_in)
            }
            (GroupState::Ignored, Some(1)) => "until it happens again".to_owned(),
            (GroupState::Ignored, Some(n)) => format!("until {n} more reports"),
            _ => String::new(),
        };
        store::insert_event(
            &mut *tx,
            &NewEvent {
                group_id: id,
                at,
                actor,
                action: GroupAction::State,
                from: current.state.as_str(),
                to: next.state.as_str(),
                detail: &with_note(detail),
                report_id: None,
            },
        )
        .await?;
    }
    if reassigned {
        store::insert_event(
            &mut *tx,
            &NewEvent {
                group_id: id,
                at,
                actor,
                action: GroupAction::Assignee,
                from: &current.assignee,
                to: &next.assignee,
                detail: &with_note(String::new()),
                report_id: None,
            },
        )
        .await?;
    }
    if !same(current, next) {
        store::set_triage(&mut *tx, id, next, state_changed.then_some(at)).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Timestamp;

    fn triage(state: GroupState, resolved_in: &str, assignee: &str) -> Triage {
        Triage {
            state,
            resolved_in: resolved_in.into(),
            assignee: assignee.into(),
            assignee_person_id: None,
            ignore_reports_left: None,
            state_changed_at: Timestamp::from_unix(0),
        }
    }

    fn patch(state: Option<&str>, resolved_in: Option<&str>, assignee: Option<&str>) -> GroupPatch {
        GroupPatch {
            state: state.map(str::to_owned),
            resolved_in: resolved_in.map(str::to_owned),
            assignee: assignee.map(str::to_owned),
            assignee_id: None,
            ignore_until_reports: None,
        }
    }

    #[test]
    fn changes_apply_to_the_current_triage_or_say_why_not() {
        use GroupState::{Ignored, Open, Regressed, Resolved};
        // (current, patch) -> Ok((state, resolved_in, assignee)) or Err(message part)
        type Case<'a> = (
            Triage,
            GroupPatch,
            Result<(GroupState, &'a str, &'a str), &'a str>,
        );
        let cases: Vec<Case> = vec![
            (
                triage(Open, "", ""),
                patch(Some("resolved"), Some(" 2.0 "), None),
                Ok((Resolved, "2.0", "")),
            ),
            (
                triage(Resolved, "2.0", "bob"),
                patch(None, Some("abcdef1"), None),
                Ok((Resolved, "abcdef1", "bob")),
            ),
            (
                triage(Resolved, "2.0", ""),
                patch(Some("open"), None, None),
                Ok((Open, "", "")),
            ),
            (
                triage(Regressed, "2.0", ""),
                patch(None, None, Some("alice")),
                Ok((Regressed, "2.0", "alice")),
            ),
            (
                triage(Regressed, "2.0", ""),
                patch(Some("regressed"), Some(""), None),
                Ok((Regressed, "2.0", "")),
            ),
            (
                triage(Regressed, "2.0", ""),
                patch(Some("resolved"), None, None),
                Ok((Resolved, "", "")),
            ),
            (
                triage(Open, "", "alice"),
                patch(Some("ignored"), Some(""), Some("")),
                Ok((Ignored, "", "")),
            ),
            (
                triage(Open, "", ""),
                patch(Some("regressed"), None, None),
                Err("regressed is set by gpu-triage"),
            ),
            (
                triage(Open, "", ""),
                patch(None, Some("2.0"), None),
                Err("resolved_in goes only with the resolved state"),
            ),
            (
                triage(Resolved, "2.0", ""),
                patch(Some("ignored"), Some("2.0"), None),
                Err("resolved_in goes only with the resolved state"),
            ),
        ];
        for (current, p, want) in cases {
            let got = validate(p.clone())
                .and_then(|c| next_triage(&current, &c))
                .map_err(|e| e.to_string());
            match (got, want) {
                (Ok(t), Ok((state, resolved_in, assignee))) => assert_eq!(
                    (t.state, t.resolved_in.as_str(), t.assignee.as_str()),
                    (state, resolved_in, assignee),
                    "{p:?}"
                ),
                (Err(e), Err(part)) => assert!(e.contains(part), "{p:?}: {e}"),
                (got, want) => panic!("{p:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn malformed_patches_are_refused_before_reading_the_group() {
        let cases = [
            (patch(None, None, None), "nothing to change"),
            (
                patch(Some("closed"), None, None),
                "unknown state \"closed\"",
            ),
            (
                patch(Some("resolved"), Some("soon"), None),
                "resolved_in must be a commit",
            ),
            (
                patch(None, None, Some("a\u{7}b")),
                "assignee must not contain a control character (U+0007 at character 2)",
            ),
            (
                patch(None, None, Some(&"a".repeat(201))),
                "assignee must be a token name (at most 200 characters)",
            ),
            (
                patch(Some("resolved"), Some(&"1.".repeat(51)), None),
                "at most 100 characters",
            ),
            (
                patch(Some("resolved"), Some("2.0\u{0}"), None),
                "resolved_in must not contain a control character (U+0000 at character 4)",
            ),
        ];
        for (p, want) in cases {
            let err = validate(p.clone())
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(want), "{p:?}: {err}");
        }
    }

    #[test]
    fn the_people_picker_posts_an_id_nobody_or_keep() {
        let form = |id: Option<&str>| {
            form_patch("open".into(), String::new(), None, id.map(str::to_owned))
                .map(|p| (p.assignee, p.assignee_id))
                .map_err(|e| e.to_string())
        };
        assert_eq!(form(Some("7")), Ok((None, Some(7))));
        assert_eq!(form(Some("")), Ok((Some(String::new()), None)));
        assert_eq!(form(Some(KEEP_ASSIGNEE)), Ok((None, None)));
        assert_eq!(form(None), Ok((None, None)));
        assert!(form(Some("ana")).is_err_and(|e| e.contains("assignee_id")));
        let both = GroupPatch {
            assignee: Some("ci".into()),
            assignee_id: Some(7),
            ..GroupPatch::default()
        };
        assert!(validate(both).is_err_and(|e| e.to_string().contains("not both")));
        let zero = GroupPatch {
            assignee_id: Some(0),
            ..GroupPatch::default()
        };
        assert!(
            validate(zero).is_err_and(|e| e.to_string().contains("no enabled person has id 0"))
        );
    }

    #[test]
    fn an_ignore_may_last_until_more_reports_and_only_an_ignore() {
        let ignore = |n: Option<i64>| GroupPatch {
            state: Some("ignored".into()),
            ignore_until_reports: n,
            ..GroupPatch::default()
        };
        let open = triage(GroupState::Open, "", "");
        let next = |p: GroupPatch, current: &Triage| {
            validate(p)
                .and_then(|c| next_triage(current, &c))
                .map(|t| (t.state, t.ignore_reports_left))
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            next(ignore(Some(1)), &open),
            Ok((GroupState::Ignored, Some(1)))
        );
        assert_eq!(next(ignore(None), &open), Ok((GroupState::Ignored, None)));
        let counting = Triage {
            ignore_reports_left: Some(4),
            ..triage(GroupState::Ignored, "", "")
        };
        // Reassigning an ignored group keeps its countdown; reopening ends it.
        let assign = GroupPatch {
            assignee: Some(String::new()),
            ..GroupPatch::default()
        };
        assert_eq!(next(assign, &counting), Ok((GroupState::Ignored, Some(4))));
        let reopen = GroupPatch {
            state: Some("open".into()),
            ..GroupPatch::default()
        };
        assert_eq!(next(reopen, &counting), Ok((GroupState::Open, None)));
        for (bad, why) in [
            (ignore(Some(0)), "must be 1"),
            (ignore(Some(1_000_001)), "must be 1"),
            (
                GroupPatch {
                    state: Some("resolved".into()),
                    ignore_until_reports: Some(3),
                    ..GroupPatch::default()
                },
                "goes only with",
            ),
            (
                GroupPatch {
                    ignore_until_reports: Some(3),
                    ..GroupPatch::default()
                },
                "goes only with",
            ),
        ] {
            let err = validate(bad)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(why), "{err}");
        }
    }

    #[test]
    fn a_change_says_what_it_does_in_words() {
        let said = |p: GroupPatch, assignee: &str| {
            validate(p).map(|c| c.summary(assignee)).unwrap_or_default()
        };
        let state = |s: &str| GroupPatch {
            state: Some(s.into()),
            ..GroupPatch::default()
        };
        assert_eq!(said(state("resolved"), ""), "resolved");
        assert_eq!(said(state("open"), ""), "reopened");
        let once = GroupPatch {
            ignore_until_reports: Some(1),
            ..state("ignored")
        };
        assert_eq!(said(once, ""), "ignored until it happens again");
        let assign = GroupPatch {
            assignee: Some("ci".into()),
            ..GroupPatch::default()
        };
        assert_eq!(said(assign, "ci"), "assigned to ci");
        let nobody = GroupPatch {
            assignee: Some(String::new()),
            ..state("resolved")
        };
        assert_eq!(said(nobody, ""), "resolved and unassigned");
    }
}
