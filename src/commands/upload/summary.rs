//! `upload --summary markdown`: one Markdown block per uploaded log, for `$GITHUB_STEP_SUMMARY`,
//! a pull-request comment or any CI page that renders Markdown: the category in plain words and
//! the title, the root-cause line, next steps, the known fix and the report link. Everything
//! that comes from a log (titles and advice quote it) is escaped, so Markdown or HTML in a log
//! cannot inject links, images, mentions or markup into the page.

use std::path::Path;

use crate::api_types::ReportCreated;

/// The Markdown block for one uploaded log.
#[must_use]
pub fn render(log: &Path, created: &ReportCreated, report_url: &str) -> String {
    let c = &created.classification;
    let mut out = format!("### {}: {}\n\n", c.category.words(), escape(c.title.trim()));
    let name = log.display().to_string();
    out += &format!(
        "{} · [Report {}]({})",
        code(&name),
        created.id,
        link(report_url)
    );
    if created.duplicate {
        out += " (already reported: the same log was uploaded before)";
    }
    out += "\n\n";
    if let Some(action) = &created.run.action {
        out += &format!(
            "**Action: {}** (`{}`): {}\n\n",
            action.kind.words(),
            action.kind.as_str(),
            escape(action.reason.trim())
        );
    }
    if let Some(first) = &created.run.first_failure {
        let place: Vec<String> = [
            first.rank.map(|r| format!("rank {r}")),
            first.host.clone(),
            first.gpu.clone(),
        ]
        .into_iter()
        .flatten()
        .collect();
        out += &format!(
            "**First failure**: {} line {}{} of {} files\n\n",
            code(&first.file),
            first.line,
            if place.is_empty() {
                String::new()
            } else {
                format!(" ({})", escape(&place.join(", ")))
            },
            created.run.files.len()
        );
    }
    match &c.root_cause {
        Some(rc) => {
            out += &format!(
                "**Root cause** (line {}): {}\n\n",
                rc.line,
                code(rc.text.trim())
            )
        }
        None => out += "**Root cause**: no rule named a root-cause line\n\n",
    }
    if !c.next_steps.is_empty() {
        out += "**Next steps**\n\n";
        for step in &c.next_steps {
            out += &format!("- {}\n", escape(step.trim()));
        }
        out += "\n";
    }
    if let Some(standing) = &created.group_state
        && standing.state == crate::api_types::GroupState::Regressed
    {
        out += &format!(
            "**Regressed**: this failure's group was resolved{} and has come back",
            if standing.resolved_in.is_empty() {
                String::new()
            } else {
                format!(" in {}", code(&standing.resolved_in))
            }
        );
        if !standing.assignee.is_empty() {
            out += &format!("; assigned to {}", escape(&standing.assignee));
        }
        out += "\n\n";
    } else if let Some(standing) = &created.group_state {
        out += &format!("**Group**: {}", escape(&standing.words()));
        if !standing.assignee.is_empty() {
            out += &format!(", assigned to {}", escape(&standing.assignee));
        }
        out += "\n\n";
    }
    if let Some(fix) = &created.known_fix {
        out += &format!(
            "**Known fix**: {} ({}, {})",
            escape(fix.summary.trim()),
            escape(&fix.author),
            fix.created_at
        );
        let target = fix.link.trim();
        if target.starts_with("https://") || target.starts_with("http://") {
            out += &format!(" [{}]({})", escape(target), link(target));
        }
        out += "\n\n";
    }
    if let Some(job) = &created.repro {
        out += &format!(
            "A reproduction is queued (job {}); its synchronous trace will show on the report.\n\n",
            job.job_id
        );
    }
    out
}

/// Plain text safe in Markdown: every ASCII punctuation character is backslash-escaped (so no
/// emphasis, link, image, HTML tag, entity, table cell or `@mention` can start), control
/// characters and line breaks become spaces (no new block can start).
#[must_use]
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for ch in text.chars() {
        if ch.is_control() {
            out.push(' ');
        } else {
            if ch.is_ascii_punctuation() {
                out.push('\\');
            }
            out.push(ch);
        }
    }
    out
}

/// A code span holding `text` verbatim (CommonMark: a backtick fence longer than any run of
/// backticks inside, padded with spaces when the text starts or ends with one). HTML is not
/// interpreted inside it; control characters become spaces.
#[must_use]
pub fn code(text: &str) -> String {
    let text: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut longest = 0;
    let mut run = 0;
    for ch in text.chars() {
        run = if ch == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') || text.trim().is_empty() {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// A link destination that cannot end the link early or break out of it.
fn link(url: &str) -> String {
    let mut out = String::with_capacity(url.len());
    for ch in url.chars() {
        match ch {
            '(' => out.push_str("%28"),
            ')' => out.push_str("%29"),
            '<' => out.push_str("%3C"),
            '>' => out.push_str("%3E"),
            '"' => out.push_str("%22"),
            '\'' => out.push_str("%27"),
            '`' => out.push_str("%60"),
            '\\' => out.push_str("%5C"),
            c if c.is_whitespace() || c.is_control() => out.push_str("%20"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api_types::{Fix, QueuedJob};
    use crate::rules::{Category, Classification};

    fn created(log: &str) -> ReportCreated {
        let ruleset = crate::rules::Ruleset::builtin().expect("builtin rules");
        ReportCreated {
            id: 42,
            url: "/reports/42".into(),
            group_id: 3,
            duplicate: false,
            classification: ruleset.classify_bytes("train.log", log.as_bytes()),
            repro: None,
            known_fix: None,
            group_state: None,
            similar: Vec::new(),
            run: Default::default(),
        }
    }

    #[test]
    fn a_summary_names_category_root_cause_next_steps_fix_and_link() {
        let mut c = created("step 9\nIndexError: Target 10 is out of bounds.\n");
        c.known_fix = Some(Fix {
            id: 1,
            group_id: 3,
            summary: "clamp the targets to num_classes-1".into(),
            details: String::new(),
            link: "https://github.com/org/repo/pull/12".into(),
            author: "alice".into(),
            author_kind: None,
            author_person_id: None,
            created_at: crate::time::Timestamp::from_unix(1_780_000_000),
        });
        c.repro = Some(QueuedJob {
            job_id: 9,
            state: crate::api_types::JobState::Queued,
        });
        let md = render(
            Path::new("logs/train.log"),
            &c,
            "https://t.example/reports/42",
        );
        assert_eq!(c.classification.category, Category::OutOfBounds);
        let title = escape(&c.classification.title);
        assert!(
            md.starts_with(&format!("### Out of bounds: {title}\n\n")),
            "{md}"
        );
        assert!(
            md.contains("`logs/train.log` · [Report 42](https://t.example/reports/42)\n"),
            "{md}"
        );
        assert!(
            md.contains("**Root cause** (line 2): `IndexError: Target 10 is out of bounds.`\n"),
            "{md}"
        );
        assert!(md.contains("**Next steps**\n\n- "), "{md}");
        assert!(
            md.contains(
                "**Known fix**: clamp the targets to num\\_classes\\-1 (alice, 2026-05-28T20:26:40Z) \
                 [https\\:\\/\\/github\\.com\\/org\\/repo\\/pull\\/12](https://github.com/org/repo/pull/12)\n"
            ),
            "{md}"
        );
        assert!(md.contains("reproduction is queued (job 9)"), "{md}");
    }

    #[test]
    fn markdown_and_html_from_a_log_cannot_inject() {
        let mut c = created("fine\n");
        let hostile =
            "<img src=x onerror=alert(1)> [click](javascript:alert(1)) **@org/team** `x`\n| a |";
        c.classification = Classification {
            title: hostile.into(),
            next_steps: vec![hostile.into()],
            root_cause: Some(crate::rules::RootCause {
                line: 3,
                text: "RuntimeError: bad ``x`` <script>alert(1)</script>`".into(),
                rule: "r".into(),
            }),
            ..c.classification
        };
        let md = render(Path::new("a`b.log"), &c, "https://t/reports/1 )[x](y");
        let escaped = "\\<img src\\=x onerror\\=alert\\(1\\)\\> \\[click\\]\\(javascript\\:alert\\(1\\)\\) \
                       \\*\\*\\@org\\/team\\*\\* \\`x\\` \\| a \\|";
        assert!(
            md.contains(&format!("### Unknown failure: {escaped}\n")),
            "{md}"
        );
        assert!(md.contains(&format!("\n- {escaped}\n")), "{md}");
        assert!(
            md.contains("(line 3): ``` RuntimeError: bad ``x`` <script>alert(1)</script>` ```\n"),
            "{md}"
        );
        assert!(md.contains("``a`b.log``"), "{md}");
        assert!(md.contains("(https://t/reports/1%20%29[x]%28y)"), "{md}");
    }

    #[test]
    fn code_spans_fence_past_backticks() {
        let cases = [
            ("plain", "`plain`"),
            ("a`b", "``a`b``"),
            ("`a", "`` `a ``"),
            ("x``y", "```x``y```"),
            ("", "`  `"),
        ];
        for (text, want) in cases {
            assert_eq!(code(text), want, "{text}");
        }
    }

    #[test]
    fn a_regression_is_said_before_the_known_fix_and_other_states_in_a_word() {
        use crate::api_types::{GroupStanding, GroupState};
        let mut c = created("step 9\nIndexError: Target 10 is out of bounds.\n");
        c.group_state = Some(GroupStanding {
            state: GroupState::Regressed,
            resolved_in: "v2.1.0".into(),
            assignee: "alice".into(),
        });
        let md = render(Path::new("train.log"), &c, "https://t/reports/42");
        let regressed = md.find("**Regressed**: this failure's group was resolved in `v2.1.0` and has come back; assigned to alice");
        assert!(regressed.is_some(), "{md}");
        c.group_state = Some(GroupStanding {
            state: GroupState::Resolved,
            resolved_in: "v2.1.0".into(),
            assignee: String::new(),
        });
        let md = render(Path::new("train.log"), &c, "https://t/reports/42");
        assert!(md.contains("**Group**: resolved in v2\\.1\\.0\n"), "{md}");
    }
}
