//! The bodies a webhook sends, rendered from an event's stored facts at each attempt (so links
//! follow the server's public URL): the signed JSON payload with its stable schema, or a
//! Slack-compatible incoming-webhook body (`text` plus `blocks`). Also the signature every
//! delivery carries. Pure: no I/O.

use hmac::{KeyInit, Mac};
use serde::Serialize;

use crate::api_types::webhooks::{
    Event, EventKind, FixFacts, Format, GroupFacts, ReportFacts, ReproductionFacts, RuleFacts,
};
use crate::time::Timestamp;

/// Version of the JSON payload's shape; bumped only for a change that could break a receiver
/// (fields are only ever added).
pub const SCHEMA_VERSION: u32 = 1;

/// Which delivery a body is for.
#[derive(Clone, Copy, Debug)]
pub struct Envelope<'a> {
    /// The delivery's id (also the `X-GpuTriage-Delivery` header): receivers dedupe on it.
    pub delivery_id: i64,
    /// When the event happened (the outbox row's creation).
    pub occurred_at: Timestamp,
    /// Where users reach the server, no trailing slash.
    pub public_url: &'a str,
}

/// A fact with the page it is shown on.
#[derive(Serialize)]
struct Linked<'a, T: Serialize> {
    #[serde(flatten)]
    facts: &'a T,
    url: String,
}

/// The JSON payload (docs/src/webhooks.md): every key always present, null when it does not apply.
#[derive(Serialize)]
struct Payload<'a> {
    schema_version: u32,
    event: EventKind,
    delivery_id: i64,
    occurred_at: Timestamp,
    summary: String,
    report: Option<Linked<'a, ReportFacts>>,
    group: Option<Linked<'a, GroupFacts>>,
    known_fix: Option<&'a FixFacts>,
    reproduction: Option<&'a ReproductionFacts>,
    rule: Option<Linked<'a, RuleFacts>>,
}

/// The body for `format`.
#[must_use]
pub fn render(event: &Event, envelope: Envelope<'_>, format: Format) -> Vec<u8> {
    let value = match format {
        Format::Json => serde_json::to_value(payload(event, envelope)),
        Format::Slack => Ok(slack(event, envelope)),
    };
    // Serializing plain structs of strings and numbers cannot fail.
    value
        .map(|v| v.to_string().into_bytes())
        .unwrap_or_default()
}

fn payload<'a>(event: &'a Event, env: Envelope<'_>) -> Payload<'a> {
    let base = env.public_url;
    Payload {
        schema_version: SCHEMA_VERSION,
        event: event.event,
        delivery_id: env.delivery_id,
        occurred_at: env.occurred_at,
        summary: summary(event),
        report: event.report.as_ref().map(|r| Linked {
            facts: r,
            url: format!("{base}/reports/{}", r.id),
        }),
        group: event.group.as_ref().map(|g| Linked {
            facts: g,
            url: format!("{base}/groups/{}", g.id),
        }),
        known_fix: event.known_fix.as_ref(),
        reproduction: event.reproduction.as_ref(),
        rule: event.rule.as_ref().map(|r| Linked {
            facts: r,
            url: format!("{base}/rules/{}", r.id),
        }),
    }
}

/// The event in one plain sentence (the payload's `summary`, Slack's `text`).
#[must_use]
pub fn summary(event: &Event) -> String {
    let project = event
        .project()
        .filter(|p| !p.is_empty())
        .map(|p| format!(" in {p}"))
        .unwrap_or_default();
    let headline = event
        .report
        .as_ref()
        .map(|r| format!("{}: {}", r.category.words(), r.title))
        .unwrap_or_default();
    match event.event {
        EventKind::NewGroup => format!("New failure{project}: {headline}"),
        EventKind::Regression => {
            let fix = event
                .known_fix
                .as_ref()
                .map(|f| format!(" (fixed before: {})", f.summary))
                .unwrap_or_default();
            format!("Regression{project}: {headline}{fix}")
        }
        EventKind::Reopened => format!("Reopened{project} (was ignored): {headline}"),
        EventKind::ReproductionFinished => {
            let id = event.report.as_ref().map_or(0, |r| r.id);
            match &event.reproduction {
                Some(r) if r.state == crate::api_types::JobState::Dead => {
                    format!("Reproduction of report {id}{project} gave up: {}", r.error)
                }
                Some(r) if r.outcome == Some(crate::rules::outcome::Outcome::EnvironmentError) => {
                    format!(
                        "Reproduction of report {id}{project} was stopped by the worker's \
                         environment: {} ({})",
                        r.outcome_reason, r.outcome_fix
                    )
                }
                Some(r) => {
                    let what = match (r.category, &r.title) {
                        (Some(c), Some(t)) => format!("{}: {t}", c.words()),
                        _ => "no failure".to_owned(),
                    };
                    let verdict = if r.verdict.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", r.verdict)
                    };
                    format!("Reproduction of report {id}{project} finished: {what}{verdict}")
                }
                None => format!("Reproduction of report {id}{project} finished"),
            }
        }
        EventKind::RuleSaved => match &event.rule {
            Some(r) => format!("Rule {} {} by {}", r.id, past_tense(&r.action), r.actor),
            None => "A rule was saved".to_owned(),
        },
        EventKind::Test => "Test delivery from gpu-triage".to_owned(),
    }
}

fn past_tense(action: &str) -> String {
    match action {
        "create" => "created".to_owned(),
        "update" => "updated".to_owned(),
        "delete" => "deleted".to_owned(),
        "import" => "imported".to_owned(),
        other => other.to_owned(),
    }
}

/// Slack's mrkdwn needs `&`, `<` and `>` escaped; everything else is shown as typed.
fn slack_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A Slack incoming-webhook message: `text` (the notification and fallback) and `blocks`.
fn slack(event: &Event, env: Envelope<'_>) -> serde_json::Value {
    let base = env.public_url;
    let mut lines = vec![format!("*{}*", slack_escape(&summary(event)))];
    if let Some(r) = &event.report {
        if let Some(rc) = &r.root_cause {
            // A code span cannot hold a backtick; show it as a quote instead.
            let text = slack_escape(&rc.text.replace('`', "'"));
            lines.push(format!("Root cause (line {}): `{text}`", rc.line));
        }
        if let Some(a) = &r.action {
            lines.push(format!(
                "Action: *{}* (`{}`): {}",
                a.kind.words(),
                a.kind.as_str(),
                slack_escape(&a.reason)
            ));
        }
        lines.push(format!("<{base}/reports/{}|Report {}>", r.id, r.id));
    }
    if let Some(g) = &event.group
        && g.state == Some(crate::api_types::GroupState::Regressed)
    {
        let mut line = "Regressed: it had been resolved".to_owned();
        if !g.resolved_in.is_empty() {
            line += &format!(" in `{}`", slack_escape(&g.resolved_in.replace('`', "'")));
        }
        if !g.assignee.is_empty() {
            line += &format!("; assigned to {}", slack_escape(&g.assignee));
        }
        lines.push(line);
    }
    if let Some(f) = &event.known_fix {
        let link = if f.link.is_empty() {
            String::new()
        } else {
            format!(" <{}|link>", slack_escape(&f.link))
        };
        lines.push(format!(
            "Known fix: {} ({}){link}",
            slack_escape(&f.summary),
            slack_escape(&f.author)
        ));
    }
    if let Some(r) = &event.rule {
        lines.push(format!(
            "<{base}/rules/{}|Rule {}>",
            slack_escape(&r.id),
            slack_escape(&r.id)
        ));
    }
    serde_json::json!({
        "text": summary(event),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": lines.join("\n")}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": format!(
                "gpu-triage · {} · delivery {}", event.event, env.delivery_id
            )}]},
        ],
    })
}

/// `X-GpuTriage-Signature`: `sha256=` and the hex HMAC-SHA256, keyed with the endpoint's
/// secret, of `"{timestamp}.{body}"` (the `X-GpuTriage-Timestamp` value, a dot, the raw body).
#[must_use]
pub fn signature(secret: &str, timestamp: i64, body: &[u8]) -> String {
    // HMAC takes a key of any length.
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()) else {
        return String::new();
    };
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reproduction_stopped_by_the_workers_environment_says_so_in_words() {
        let mut event = crate::api_types::webhooks::Event::empty(EventKind::ReproductionFinished);
        event.reproduction = Some(ReproductionFacts {
            job_id: 3,
            state: crate::api_types::JobState::Done,
            exit_code: Some(1),
            category: Some(crate::rules::Category::Unknown),
            title: Some("Python exception".into()),
            root_cause: None,
            verdict: String::new(),
            error: String::new(),
            outcome: Some(crate::rules::outcome::Outcome::EnvironmentError),
            outcome_reason: "the worker's Python has no module named 'torch'".into(),
            outcome_fix: "start the worker with --python pointing at an interpreter with torch"
                .into(),
        });
        let text = summary(&event);
        assert!(
            text.contains("stopped by the worker's environment")
                && text.contains("no module named 'torch'")
                && text.contains("--python"),
            "{text}"
        );
    }
    use crate::rules::Category;

    fn event() -> Event {
        let report = ReportFacts {
            id: 42,
            project: "vision".into(),
            branch: "main".into(),
            commit: "abc".into(),
            job_url: String::new(),
            category: Category::OutOfBounds,
            title: "Index out of range in a CUDA kernel".into(),
            root_cause: Some(crate::api_types::webhooks::RootCauseLine {
                line: 9,
                text: "Assertion `srcIndex < srcSelectDimSize` failed <b>".into(),
            }),
            next_steps: vec!["Re-run with CUDA_LAUNCH_BLOCKING=1".into()],
            action: None,
            first_failure: None,
        };
        let mut events = super::super::event::upload_events(
            super::super::event::UploadOutcome {
                new_report: true,
                new_group: true,
                regressed: false,
                reopened: false,
            },
            report,
            7,
            None,
            None,
        );
        events.remove(0)
    }

    fn env() -> Envelope<'static> {
        Envelope {
            delivery_id: 5,
            occurred_at: Timestamp::from_unix(1_780_000_000),
            public_url: "https://triage.example.com",
        }
    }

    #[test]
    fn the_json_payload_has_every_key_with_links() {
        let body: serde_json::Value =
            serde_json::from_slice(&render(&event(), env(), Format::Json)).expect("json");
        assert_eq!(body["schema_version"], 1);
        assert_eq!(body["event"], "new_group");
        assert_eq!(body["delivery_id"], 5);
        assert_eq!(body["occurred_at"], "2026-05-28T20:26:40Z");
        assert_eq!(
            body["report"]["url"],
            "https://triage.example.com/reports/42"
        );
        assert_eq!(body["report"]["root_cause"]["line"], 9);
        assert_eq!(body["group"]["url"], "https://triage.example.com/groups/7");
        for key in ["known_fix", "reproduction", "rule"] {
            assert!(body[key].is_null(), "{key}");
        }
        assert_eq!(
            body["summary"],
            "New failure in vision: Out of bounds: Index out of range in a CUDA kernel"
        );
    }

    #[test]
    fn the_slack_body_has_text_and_blocks_with_escaped_log_text() {
        let body: serde_json::Value =
            serde_json::from_slice(&render(&event(), env(), Format::Slack)).expect("json");
        assert!(
            body["text"]
                .as_str()
                .unwrap_or("")
                .starts_with("New failure in vision")
        );
        let section = body["blocks"][0]["text"]["text"].as_str().unwrap_or("");
        assert!(
            section.contains("`Assertion 'srcIndex &lt; srcSelectDimSize' failed &lt;b&gt;`"),
            "{section}"
        );
        assert!(
            section.contains("<https://triage.example.com/reports/42|Report 42>"),
            "{section}"
        );
    }

    #[test]
    fn a_runs_action_is_in_the_json_and_slack_bodies() {
        use crate::rules::run::{ActionKind, RunAction};
        let mut event = event();
        if let Some(r) = &mut event.report {
            r.action = Some(RunAction {
                kind: ActionKind::DrainNode,
                reason: "Drain node-7 because the GPU hardware failed: Xid 79 <b>.".into(),
                nodes: vec!["node-7".into()],
                gpus: vec!["PCI:0000:3b:00".into()],
            });
        }
        let json: serde_json::Value =
            serde_json::from_slice(&render(&event, env(), Format::Json)).expect("json");
        assert_eq!(json["report"]["action"]["kind"], "drain_node", "{json}");
        assert_eq!(json["report"]["action"]["nodes"][0], "node-7");
        let body: serde_json::Value =
            serde_json::from_slice(&render(&event, env(), Format::Slack)).expect("json");
        let section = body["blocks"][0]["text"]["text"].as_str().unwrap_or("");
        assert!(
            section.contains("Action: *Drain the node* (`drain_node`): Drain node-7 because the GPU hardware failed: Xid 79 &lt;b&gt;."),
            "{section}"
        );
    }

    #[test]
    fn the_signature_is_the_hmac_of_timestamp_dot_body() {
        // Python: hmac.new(b"whsec_test", b'1700000000.{"a":1}', hashlib.sha256).hexdigest()
        assert_eq!(
            signature("whsec_test", 1_700_000_000, br#"{"a":1}"#),
            "sha256=38877139021993b830af32feea6e18a8da83eb2f6e49ee50bd9e4cf4ca4d3789"
        );
        assert_ne!(
            signature("whsec_other", 1_700_000_000, br#"{"a":1}"#),
            signature("whsec_test", 1_700_000_000, br#"{"a":1}"#)
        );
    }

    #[test]
    fn a_regression_carries_the_groups_state_and_slack_says_where_it_had_been_resolved() {
        let mut e = event();
        e.event = crate::api_types::webhooks::EventKind::Regression;
        if let Some(g) = e.group.as_mut() {
            g.state = Some(crate::api_types::GroupState::Regressed);
            g.resolved_in = "v2.1.0".into();
            g.assignee = "alice".into();
        }
        let body: serde_json::Value =
            serde_json::from_slice(&render(&e, env(), Format::Json)).expect("json");
        assert_eq!(body["group"]["state"], "regressed");
        assert_eq!(body["group"]["resolved_in"], "v2.1.0");
        assert_eq!(body["group"]["assignee"], "alice");
        let slack: serde_json::Value =
            serde_json::from_slice(&render(&e, env(), Format::Slack)).expect("json");
        let text = slack["blocks"][0]["text"]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(
            text.contains("Regressed: it had been resolved in `v2.1.0`; assigned to alice"),
            "{text}"
        );
    }
}
