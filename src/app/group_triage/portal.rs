//! The portal's group pages and forms, one call each (issue 32 item 1): the group list with who
//! its assignee filter offers and each row's reports per day, a group with its chart's days and
//! who its state form offers, the fix form (recorded, or refused with the page to show again)
//! and the state form. Handlers render these view models and read nothing else; the reads are
//! the same ones, in the same order, that the API's answers are built from.

use super::undo::{ChangeNotice, notice};
use super::{
    Assignable, BulkOutcome, GroupListRequest, GroupView, assignable, bulk_change, change,
    form_patch, form_patch_until, group, list,
};
use crate::actor::Actor;
use crate::api_types::{BulkMerge, ErrorCode, GroupPatch};
use crate::app::Error;
use crate::app::triage::{self, Fix, FixRequest, TREND_DAYS};
use crate::storage::Db;
use crate::storage::group_list::ListedGroup;

/// Reports per day, `(day, count)`, over the last [`TREND_DAYS`] days (days without reports
/// left out).
pub type Days = Vec<(String, i64)>;

/// A listed group with its reports per day.
#[derive(Clone, Debug)]
pub struct TrendedGroup {
    /// The group with its triage, as the list shows it.
    pub listed: ListedGroup,
    /// Its reports per day, for the row's trend line.
    pub days: Days,
}

/// One page of the group list, each group with its trend.
#[derive(Clone, Debug)]
pub struct TrendedPage {
    /// The page's groups, in the list's order.
    pub rows: Vec<TrendedGroup>,
    /// 1-based page, and groups per page.
    pub page: u32,
    pub per_page: u32,
    /// Groups that pass the filters, on all pages.
    pub total: i64,
    /// Another page follows.
    pub more: bool,
    /// Today's date, where the trends end.
    pub today: String,
}

/// What the group list's request came to.
#[derive(Clone, Debug)]
pub enum Listing {
    /// The page asked for.
    Found(TrendedPage),
    /// A filter, sort or page the list refuses (400 `bad_query`, as the API says it): the
    /// reason, for the form shown again.
    Refused(String),
}

/// `GET /groups`: who the assignee filter offers, and the list.
#[derive(Clone, Debug)]
pub struct GroupListView {
    /// Who the assignee filter offers.
    pub assignable: Assignable,
    /// The page, or why the request was refused.
    pub listing: Listing,
    /// The change the list was reached from (`?change=N` after a bulk or one-click change),
    /// for its notice and undo button.
    pub notice: Option<ChangeNotice>,
}

/// The group list page for `me`: the assignees first (the form shows them even when the request
/// is refused), the notice of `change` when the list was reached from one, then the page, then
/// the trends of its groups.
#[tracing::instrument(name = "group_triage::list_page", skip_all, fields(actor = me.name(), state = ?request.state, project = ?request.project))]
pub async fn list_page(
    db: &Db,
    request: &GroupListRequest,
    me: &Actor,
    change: Option<i64>,
) -> Result<GroupListView, Error> {
    let assignable = assignable(db).await?;
    let notice = match change {
        Some(id) => notice(db, id).await?,
        None => None,
    };
    let found = match list(db, request, me).await {
        Ok(found) => found,
        Err(e @ Error::Malformed(..)) => {
            return Ok(GroupListView {
                assignable,
                listing: Listing::Refused(e.to_string()),
                notice,
            });
        }
        Err(e) => return Err(e),
    };
    let ids: Vec<i64> = found.groups.iter().map(|l| l.group.id).collect();
    let (per_day, today) = triage::trends(db, &ids, TREND_DAYS as i32).await?;
    let rows = (found.groups.into_iter())
        .map(|listed| TrendedGroup {
            days: (per_day.iter())
                .filter(|(id, _, _)| *id == listed.group.id)
                .map(|(_, d, n)| (d.clone(), *n))
                .collect(),
            listed,
        })
        .collect();
    Ok(GroupListView {
        assignable,
        notice,
        listing: Listing::Found(TrendedPage {
            rows,
            page: found.page,
            per_page: found.per_page,
            total: found.total,
            more: found.more,
            today,
        }),
    })
}

/// `GET /groups/{id}`: the group, its reports per day, and who its state form offers.
#[derive(Clone, Debug)]
pub struct GroupPageView {
    /// The group, its reports, fixes, triage and merged groups.
    pub view: GroupView,
    /// Its reports per day, for the chart.
    pub days: Days,
    /// Today's date, where the chart ends.
    pub today: String,
    /// Who the state form offers as assignees; `None` for a reader who may not triage (the
    /// page has no form then).
    pub assignable: Option<Assignable>,
}

/// Group `id`'s page, with the state form's assignees when the reader `can_triage`; 404 for an
/// unknown group, [`Error::Merged`] for a merged one.
#[tracing::instrument(name = "group_triage::page", skip_all, fields(group_id = id, can_triage = can_triage))]
pub async fn page(db: &Db, id: i64, can_triage: bool) -> Result<GroupPageView, Error> {
    let view = group(db, id).await?;
    let (per_day, today) = triage::trends(db, &[id], TREND_DAYS as i32).await?;
    let assignable = if can_triage {
        Some(assignable(db).await?)
    } else {
        None
    };
    Ok(GroupPageView {
        view,
        days: per_day.into_iter().map(|(_, d, n)| (d, n)).collect(),
        today,
        assignable,
    })
}

/// What the portal's fix form came to.
#[derive(Debug)]
pub enum FixOutcome {
    /// Stored.
    Recorded(Fix),
    /// Refused for what it says (no summary, a bad link): why, and the group page to show
    /// again with the form (`None` when the author may not read it: nothing was read).
    Refused {
        error: Error,
        page: Option<Box<GroupPageView>>,
    },
}

/// Records the fix form's fix for group `id` by `author`; a fix refused for what it says is
/// answered with the group's page when the author is a `reader` of it (read after the
/// refusal, with the state form: whoever may record a fix may triage). Any other failure (404,
/// a merged group) is the error.
#[tracing::instrument(name = "group_triage::submit_fix", skip_all, fields(group_id = id, actor = author.name()))]
pub async fn submit_fix(
    db: &Db,
    id: i64,
    request: FixRequest,
    author: &Actor,
    reader: bool,
) -> Result<FixOutcome, Error> {
    match triage::record_fix(db, id, request, author).await {
        Ok(fix) => Ok(FixOutcome::Recorded(fix)),
        Err(error @ (Error::Invalid(..) | Error::Malformed(..))) => {
            let page = if reader {
                Some(Box::new(page(db, id, true).await?))
            } else {
                None
            };
            Ok(FixOutcome::Refused { error, page })
        }
        Err(e) => Err(e),
    }
}

/// The state form's fields as posted (see [`form_patch`] for what each means).
#[derive(Clone, Debug, Default)]
pub struct StateFields {
    /// The state picked.
    pub state: String,
    /// The fix's commit or version (counts with the resolved state only).
    pub resolved_in: String,
    /// A token name (absent from the list's one-click forms: unchanged).
    pub assignee: Option<String>,
    /// The people picker's value: a person's id, empty for nobody, or `KEEP_ASSIGNEE`.
    pub assignee_id: Option<String>,
    /// With the ignored state: empty for good, N until N more reports.
    pub ignore_until: Option<String>,
}

/// Applies the state form (the group page's, or a list row's one-click resolve or ignore) to
/// group `id` as `actor`, refusing what [`change`] refuses.
#[tracing::instrument(name = "group_triage::change_by_form", skip_all, fields(group_id = id, actor = actor.name()))]
pub async fn change_by_form(
    db: &Db,
    id: i64,
    fields: StateFields,
    actor: &Actor,
) -> Result<GroupView, Error> {
    let patch = form_patch_until(
        fields.state,
        fields.resolved_in,
        fields.assignee,
        fields.assignee_id,
        fields.ignore_until,
    )?;
    change(db, id, patch, actor).await
}

/// The list's bulk form (and its rows' one-click forms) as posted: the groups picked and what
/// to do with them.
#[derive(Clone, Debug, Default)]
pub struct BulkFields {
    /// The groups ticked (or the row's own).
    pub ids: Vec<i64>,
    /// The button pressed: `resolve`, `ignore`, `ignore_once`, `ignore_more`, `reopen`,
    /// `assign` or `merge`.
    pub action: String,
    /// With `resolve`: the fix's commit or version (may be empty).
    pub resolved_in: String,
    /// With `ignore_more`: how many more reports.
    pub ignore_until: String,
    /// With `assign`: a token name, or the people picker's value (a person's id; empty for
    /// nobody).
    pub assignee: Option<String>,
    pub assignee_id: Option<String>,
    /// With `merge`: the group to merge into (empty: the selected group with the most reports).
    pub into: String,
}

/// What the bulk form came to.
#[derive(Clone, Debug)]
pub enum BulkResult {
    /// A triage change (undoable when `change` is set).
    Changed(BulkOutcome),
    /// The groups were merged into this one.
    Merged(Box<GroupView>),
}

/// The patch of a bulk form's triage action, or why it is refused (422 `bad_bulk`).
fn bulk_patch(f: &BulkFields) -> Result<GroupPatch, Error> {
    let state = |s: &str| form_patch(s.into(), String::new(), None, None);
    let bad = |m: String| Error::Invalid(ErrorCode::BadBulk, m);
    match f.action.as_str() {
        "resolve" => form_patch("resolved".into(), f.resolved_in.clone(), None, None),
        "ignore" => state("ignored"),
        "ignore_once" => form_patch_until(
            "ignored".into(),
            String::new(),
            None,
            None,
            Some("1".into()),
        ),
        "ignore_more" if f.ignore_until.trim().is_empty() => Err(bad(
            "give how many more reports the groups stay ignored for".into(),
        )),
        "ignore_more" => form_patch_until(
            "ignored".into(),
            String::new(),
            None,
            None,
            Some(f.ignore_until.clone()),
        ),
        "reopen" => state("open"),
        "assign" => {
            let mut patch = form_patch(
                String::new(),
                String::new(),
                f.assignee.clone(),
                f.assignee_id.clone(),
            )?;
            patch.state = None;
            if patch.assignee.is_none() && patch.assignee_id.is_none() {
                patch.assignee = Some(String::new());
            }
            Ok(patch)
        }
        other => Err(bad(format!(
            "choose what to do with the selected groups (resolve, ignore, reopen, assign or \
             merge), got {:?}",
            other.chars().take(40).collect::<String>()
        ))),
    }
}

/// Applies the bulk form as `actor`: a triage change of the picked groups (all or nothing,
/// recorded for undo) or their merge. 422 `bad_bulk` for no group picked or no action; what
/// [`bulk_change`] and `group_merge::merge_many` refuse otherwise.
#[tracing::instrument(name = "group_triage::submit_bulk", skip_all, fields(groups = fields.ids.len(), action = %fields.action, actor = actor.name()))]
pub async fn submit_bulk(db: &Db, fields: BulkFields, actor: &Actor) -> Result<BulkResult, Error> {
    if fields.ids.is_empty() {
        return Err(Error::Invalid(
            ErrorCode::BadBulk,
            "select at least one group (tick its box) first".into(),
        ));
    }
    if fields.action == "merge" {
        let into = match fields.into.trim() {
            "" => None,
            n => Some(crate::ids::parse(n).ok_or_else(|| {
                Error::Invalid(
                    ErrorCode::BadMerge,
                    format!(
                        "into must be the id of a group, got {:?}",
                        n.chars().take(40).collect::<String>()
                    ),
                )
            })?),
        };
        let request = BulkMerge {
            ids: fields.ids,
            into,
        };
        let view = crate::app::group_merge::merge_many(db, &request, actor).await?;
        return Ok(BulkResult::Merged(Box::new(view)));
    }
    let patch = bulk_patch(&fields)?;
    Ok(BulkResult::Changed(
        bulk_change(db, &fields.ids, patch, actor).await?,
    ))
}
