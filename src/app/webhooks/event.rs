//! The events the use cases cause, built inside their transactions: which uploads announce a
//! new group or a regression ([`is_regression`] decides the latter), a finished reproduction, a
//! saved team rule. The event types themselves are wire types (`api_types::webhooks`).

use crate::api_types::webhooks::{
    Event, EventKind, FixFacts, GroupFacts, ReportFacts, ReproductionFacts, RootCauseLine,
    RuleFacts,
};
use crate::api_types::{Fix, JobState};
use crate::rules::Classification;

/// What an upload did, as far as events care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UploadOutcome {
    /// A report was stored (not a duplicate of stored bytes, not a replayed answer).
    pub new_report: bool,
    /// The upload created the report's group.
    pub new_group: bool,
    /// The upload moved its group from resolved to regressed (the triage regression rule,
    /// `app::group_triage::after_upload`).
    pub regressed: bool,
    /// The upload was the last report an ignore waited for: its group reopened by itself
    /// (`app::group_triage::after_upload`).
    pub reopened: bool,
}

/// Whether an upload is a regression: a new report that moved its resolved group to
/// `regressed` (from a build that should contain the fix). The one place that decides it.
#[must_use]
pub fn is_regression(upload: UploadOutcome) -> bool {
    upload.new_report && !upload.new_group && upload.regressed
}

/// The events an upload causes: `new_group` when it created the group, `regression` per
/// [`is_regression`], `reopened` when it ended an ignore that waited for N more reports; none
/// for a duplicate or a replay.
#[must_use]
pub fn upload_events(
    upload: UploadOutcome,
    report: ReportFacts,
    group_id: i64,
    triage: Option<&crate::storage::group_triage::Triage>,
    known_fix: Option<&Fix>,
) -> Vec<Event> {
    let kind = if upload.new_report && upload.new_group {
        EventKind::NewGroup
    } else if is_regression(upload) {
        EventKind::Regression
    } else if upload.new_report && upload.reopened {
        EventKind::Reopened
    } else {
        return Vec::new();
    };
    let group = GroupFacts {
        id: group_id,
        category: report.category,
        title: report.title.clone(),
        state: triage.map(|t| t.state),
        resolved_in: triage.map(|t| t.resolved_in.clone()).unwrap_or_default(),
        assignee: triage.map(|t| t.assignee.clone()).unwrap_or_default(),
    };
    vec![Event {
        report: Some(report),
        group: Some(group),
        known_fix: known_fix.map(FixFacts::from),
        ..Event::empty(kind)
    }]
}

/// The report's facts from what an upload stores.
#[must_use]
pub fn report_facts(
    id: i64,
    meta: (&str, &str, &str, &str),
    classification: &Classification,
) -> ReportFacts {
    let (project, branch, commit, job_url) = meta;
    ReportFacts {
        id,
        project: project.to_owned(),
        branch: branch.to_owned(),
        commit: commit.to_owned(),
        job_url: job_url.to_owned(),
        category: classification.category,
        title: classification.title.clone(),
        root_cause: RootCauseLine::of(classification),
        next_steps: classification.next_steps.clone(),
        action: None,
        first_failure: None,
    }
}

/// A finished reproduction of `report` (its current headline), with the run's classification
/// when a result was recorded.
#[must_use]
pub fn reproduction_event(
    report: &crate::storage::reports::Report,
    job_id: i64,
    state: JobState,
    run: Option<(&Classification, Option<i32>, &str)>,
    decided: Option<&crate::rules::outcome::Decision>,
    error: &str,
) -> Event {
    let mut facts = report_facts(
        report.id,
        (
            &report.project,
            &report.branch,
            &report.commit_sha,
            &report.job_url,
        ),
        &report.classification,
    );
    // The headline may follow a more specific reproduction: report what the report says now.
    facts.category = report.category;
    facts.title = report.title.clone();
    let reproduction = ReproductionFacts {
        job_id,
        state,
        exit_code: run.and_then(|(_, code, _)| code),
        category: run.map(|(c, _, _)| c.category),
        title: run.map(|(c, _, _)| c.title.clone()),
        root_cause: run.and_then(|(c, _, _)| RootCauseLine::of(c)),
        verdict: run.map(|(_, _, v)| v.to_owned()).unwrap_or_default(),
        error: error.to_owned(),
        outcome: decided.map(|d| d.outcome),
        outcome_reason: decided.map(|d| d.reason.clone()).unwrap_or_default(),
        outcome_fix: decided.map(|d| d.fix.clone()).unwrap_or_default(),
    };
    Event {
        group: Some(GroupFacts {
            id: report.group_id,
            category: report.category,
            title: report.title.clone(),
            state: None,
            resolved_in: String::new(),
            assignee: String::new(),
        }),
        report: Some(facts),
        reproduction: Some(reproduction),
        ..Event::empty(EventKind::ReproductionFinished)
    }
}

/// A saved team-rule change.
#[must_use]
pub fn rule_event(rule: RuleFacts) -> Event {
    Event {
        rule: Some(rule),
        ..Event::empty(EventKind::RuleSaved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regression_is_a_new_report_that_regressed_its_group() {
        let cases = [
            // (new report, new group, group regressed) -> regression
            ((true, false, true), true),
            ((true, false, false), false),
            ((true, true, false), false),
            ((false, false, true), false),
        ];
        for ((new_report, new_group, regressed), want) in cases {
            let outcome = UploadOutcome {
                new_report,
                new_group,
                regressed,
                reopened: false,
            };
            assert_eq!(is_regression(outcome), want, "{outcome:?}");
        }
    }

    #[test]
    fn a_new_report_that_ended_an_ignore_announces_the_reopening() {
        let rules = crate::rules::Ruleset::builtin().expect("builtin ruleset");
        let classification =
            rules.classify_bytes("-", b"step 1\nRuntimeError: CUDA error: out of memory\n");
        let kinds = |new_report: bool, reopened: bool| {
            let outcome = UploadOutcome {
                new_report,
                new_group: false,
                regressed: false,
                reopened,
            };
            let report = report_facts(1, ("p", "", "", ""), &classification);
            upload_events(outcome, report, 2, None, None)
                .iter()
                .map(|e| e.event)
                .collect::<Vec<_>>()
        };
        assert_eq!(kinds(true, true), [EventKind::Reopened]);
        assert!(kinds(true, false).is_empty());
        assert!(
            kinds(false, true).is_empty(),
            "a duplicate announces nothing"
        );
    }

    #[test]
    fn kinds_round_trip_and_test_is_not_subscribable() {
        for k in EventKind::SUBSCRIBABLE {
            assert_eq!(EventKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(EventKind::parse("test"), Some(EventKind::Test));
        assert!(!EventKind::SUBSCRIBABLE.contains(&EventKind::Test));
        assert_eq!(EventKind::parse("push"), None);
    }
}
