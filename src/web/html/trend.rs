//! The per-day report chart of groups: an inline SVG bar chart with a count axis and a date axis,
//! built on the server so the portal needs no JavaScript. Two sizes: a compact one per row of
//! the group list (the busiest day's count and the first and last dates), and a full one on the
//! group page (rounded count ticks with grid lines, a date tick every week). Each bar names its
//! day and count, and the chart's `aria-label` its total, so it reads without seeing it.
//! Templates embed it unescaped, so only numbers and dates re-formatted from validated numbers
//! reach the string; no input text is ever copied into it. Colours and fonts come from classes
//! in the stylesheet (the CSP forbids inline styles).

use std::fmt::Write;

use crate::time::{civil_from_days, days_from_civil};

/// Longest range drawn, so that a bad `days` cannot produce a huge string.
const MAX_DAYS: usize = 731;

/// Which chart to draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChartSize {
    /// A row of the group list.
    Compact,
    /// The group page.
    Full,
}

/// Pixel geometry of a size: the whole chart, and the margins that hold the axes' labels.
struct Geometry {
    width: f64,
    height: f64,
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    /// Intervals on the count axis at most (1: just 0 and the busiest day).
    y_intervals: i64,
    /// Days between date ticks, counted back from the last day (0: first and last day only).
    x_every: usize,
}

impl ChartSize {
    fn geometry(self) -> Geometry {
        match self {
            ChartSize::Compact => Geometry {
                width: 200.0,
                height: 48.0,
                left: 18.0,
                right: 4.0,
                top: 6.0,
                bottom: 13.0,
                y_intervals: 1,
                x_every: 0,
            },
            ChartSize::Full => Geometry {
                width: 640.0,
                height: 170.0,
                left: 34.0,
                right: 18.0,
                top: 10.0,
                bottom: 22.0,
                y_intervals: 4,
                x_every: 7,
            },
        }
    }

    fn class(self) -> &'static str {
        match self {
            ChartSize::Compact => "trend trend-compact",
            ChartSize::Full => "trend trend-full",
        }
    }
}

/// The top of the count axis and its step: `max` itself for one interval, else a round step
/// (1, 2, 5 times a power of ten) with at most `intervals` intervals. At least 1.
fn count_axis(max: i64, intervals: i64) -> (i64, i64) {
    let max = max.max(1);
    if intervals <= 1 {
        return (max, max);
    }
    let mut magnitude = 1i64;
    loop {
        for unit in [1, 2, 5] {
            let step = unit * magnitude;
            if step.saturating_mul(intervals) >= max {
                let steps = max / step + i64::from(max % step != 0);
                return (steps.saturating_mul(step), step);
            }
        }
        magnitude = magnitude.saturating_mul(10);
    }
}

/// Reports per day over the `days` days ending at `today` (both `YYYY-MM-DD`, UTC): the first
/// day's number and each day's count. Days missing from `per_day` count 0; malformed dates, days
/// outside the range and negative counts are ignored; a malformed `today` falls back to the
/// latest day in `per_day`.
fn daily_counts(per_day: &[(String, i64)], days: usize, today: &str) -> (i64, Vec<i64>) {
    let valid: Vec<(i64, i64)> = (per_day.iter())
        .filter_map(|(date, n)| Some((parse_date(date)?, (*n).max(0))))
        .collect();
    let end = parse_date(today).or_else(|| valid.iter().map(|v| v.0).max());
    let first = end.map_or(0, |end| end - days as i64 + 1);
    let mut counts = vec![0i64; days];
    for (day, n) in valid {
        if let Some(slot) = usize::try_from(day - first)
            .ok()
            .and_then(|i| counts.get_mut(i))
        {
            *slot = slot.saturating_add(n);
        }
    }
    (first, counts)
}

/// An SVG bar chart of reports per day over the `days` days ending at `today` (see
/// [`daily_counts`]), with axes, of the given size. Safe to embed unescaped.
pub fn chart_svg(per_day: &[(String, i64)], days: usize, today: &str, size: ChartSize) -> String {
    let days = days.clamp(1, MAX_DAYS);
    let (first, counts) = daily_counts(per_day, days, today);
    let g = size.geometry();
    let total = counts.iter().fold(0i64, |sum, &n| sum.saturating_add(n));
    let (busiest, max) = (counts.iter().enumerate())
        .max_by_key(|(i, n)| (**n, std::cmp::Reverse(*i)))
        .map_or((0, 0), |(i, n)| (i, *n));
    let (top, step) = count_axis(max, g.y_intervals);
    let plot_w = g.width - g.left - g.right;
    let plot_h = g.height - g.top - g.bottom;
    let base = g.top + plot_h;
    let slot = plot_w / days as f64;
    let y_of = |v: i64| base - v as f64 * plot_h / top as f64;
    // The wording of the label is fixed (`N reports`, even for 1): pages and tests match on it.
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"{}\" width=\"{}\" height=\"{}\" \
         viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"{total} reports in the last {days} days\">",
        size.class(),
        g.width,
        g.height,
        g.width,
        g.height
    );
    let _ = write!(
        svg,
        "<title>Reports per day, {} to {}</title>",
        format_date(first),
        format_date(first + days as i64 - 1)
    );
    if max > 0 {
        let _ = write!(
            svg,
            "<desc>{total} reports; the busiest day was {} with {max}.</desc>",
            format_date(first + busiest as i64)
        );
    }
    // Count axis: a tick, a label and a grid line per step.
    let mut next = Some(0i64);
    while let Some(v) = next.filter(|v| *v <= top) {
        let y = y_of(v);
        let _ = write!(
            svg,
            "<line class=\"grid\" x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\"/>\
             <text class=\"tick tick-y\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{v}</text>",
            g.left,
            g.width - g.right,
            g.left - 3.0,
            y + 3.0
        );
        next = v.checked_add(step);
    }
    let _ = write!(
        svg,
        "<line class=\"axis\" x1=\"{l:.1}\" y1=\"{t:.1}\" x2=\"{l:.1}\" y2=\"{base:.1}\"/>\
         <line class=\"axis\" x1=\"{l:.1}\" y1=\"{base:.1}\" x2=\"{r:.1}\" y2=\"{base:.1}\"/>",
        l = g.left,
        t = g.top,
        r = g.width - g.right,
    );
    // Date axis: ticks counted back from the last day, so the latest date is always labelled.
    let ticks: Vec<usize> = if g.x_every == 0 {
        if days == 1 {
            vec![0]
        } else {
            vec![0, days - 1]
        }
    } else {
        let mut t: Vec<usize> = (0..days).rev().step_by(g.x_every).collect();
        t.reverse();
        t
    };
    for i in ticks {
        let x = g.left + (i as f64 + 0.5) * slot;
        let (m, d) = month_day(first + i as i64);
        // The compact chart's two labels sit inside its ends; the full chart's under their days.
        let (label_x, anchor) = match (g.x_every, i) {
            (0, 0) if days > 1 => (g.left, "start"),
            (0, _) => (g.width - g.right, "end"),
            _ => (x, "middle"),
        };
        let _ = write!(
            svg,
            "<line class=\"axis\" x1=\"{x:.1}\" y1=\"{base:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\"/>\
             <text class=\"tick tick-x\" x=\"{label_x:.1}\" y=\"{:.1}\" \
             text-anchor=\"{anchor}\">{m:02}-{d:02}</text>",
            base + 3.0,
            g.height - 2.0
        );
    }
    for (i, &n) in counts.iter().enumerate().filter(|(_, n)| **n > 0) {
        // At least a pixel, so that a single report stays visible next to a busy day.
        let height = (n as f64 * plot_h / top as f64).max(1.0);
        let width = (slot * 0.8).max(1.0);
        let x = g.left + i as f64 * slot + (slot - width) / 2.0;
        let _ = write!(
            svg,
            "<rect class=\"bar\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{width:.1}\" \
             height=\"{height:.1}\"><title>{}: {n} reports</title></rect>",
            base - height,
            format_date(first + i as i64)
        );
    }
    svg.push_str("</svg>");
    svg
}

/// Days since 1970-01-01 of a `YYYY-MM-DD` date, or `None` unless it is exactly that shape and
/// a real calendar day.
fn parse_date(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    fn digits<T: std::str::FromStr>(s: &str, r: std::ops::Range<usize>) -> Option<T> {
        let part = s.get(r)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then_some(part)?
            .parse()
            .ok()
    }
    days_from_civil(digits(s, 0..4)?, digits(s, 5..7)?, digits(s, 8..10)?)
}

/// The `YYYY-MM-DD` date of a day number.
fn format_date(days: i64) -> String {
    let (y, m, d) = civil_from_days(days).unwrap_or((1970, 1, 1));
    format!("{y:04}-{m:02}-{d:02}")
}

/// The month and day of a day number.
fn month_day(days: i64) -> (u32, u32) {
    let (_, m, d) = civil_from_days(days).unwrap_or((1970, 1, 1));
    (m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svg(per_day: &[(&str, i64)], days: usize, today: &str, size: ChartSize) -> String {
        let per_day: Vec<(String, i64)> =
            per_day.iter().map(|(d, n)| (d.to_string(), *n)).collect();
        chart_svg(&per_day, days, today, size)
    }

    fn all(re: &str, svg: &str) -> Vec<Vec<String>> {
        let re = regex::Regex::new(re).unwrap();
        (re.captures_iter(svg))
            .map(|c| {
                c.iter()
                    .skip(1)
                    .map(|m| m.map_or(String::new(), |m| m.as_str().to_owned()))
                    .collect()
            })
            .collect()
    }

    /// (y, height, title) of each bar.
    fn bars(svg: &str) -> Vec<(f64, f64, String)> {
        let found = all(
            r#"<rect class="bar" x="[\d.]+" y="([\d.]+)" width="[\d.]+" height="([\d.]+)"><title>([^<]*)</title></rect>"#,
            svg,
        );
        assert_eq!(found.len(), svg.matches("<rect").count(), "{svg}");
        (found.into_iter())
            .map(|c| (c[0].parse().unwrap(), c[1].parse().unwrap(), c[2].clone()))
            .collect()
    }

    fn labels(svg: &str, axis: &str) -> Vec<String> {
        all(
            &format!(r#"<text class="tick tick-{axis}"[^>]*>([^<]*)</text>"#),
            svg,
        )
        .into_iter()
        .map(|c| c[0].clone())
        .collect()
    }

    #[test]
    fn an_empty_range_draws_both_axes_and_no_bars() {
        let out = svg(&[], 30, "2024-05-10", ChartSize::Full);
        assert!(out.starts_with(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"trend trend-full\" width=\"640\" \
             height=\"170\" viewBox=\"0 0 640 170\" role=\"img\" \
             aria-label=\"0 reports in the last 30 days\">"
        ));
        assert!(out.contains("<title>Reports per day, 2024-04-11 to 2024-05-10</title>"));
        assert_eq!(bars(&out), []);
        assert_eq!(out.matches("class=\"axis\"").count(), 2 + 5);
        assert_eq!(labels(&out, "y"), ["0", "1"]);
        assert!(!out.contains("<desc>"));
        assert!(svg(&[], 0, "2024-05-10", ChartSize::Compact).contains("last 1 days"));
    }

    #[test]
    fn the_count_axis_has_round_ticks_up_to_the_busiest_day() {
        // (busiest, intervals) -> (top, step)
        let cases = [
            (0, 4, (1, 1)),
            (1, 4, (1, 1)),
            (3, 4, (3, 1)),
            (4, 4, (4, 1)),
            (5, 4, (6, 2)),
            (7, 4, (8, 2)),
            (9, 4, (10, 5)),
            (17, 4, (20, 5)),
            (38, 4, (40, 10)),
            (1234, 4, (1500, 500)),
            (7, 1, (7, 7)),
            (0, 1, (1, 1)),
        ];
        for (max, intervals, want) in cases {
            assert_eq!(count_axis(max, intervals), want, "{max} {intervals}");
        }
        assert!(count_axis(i64::MAX, 4).0 >= i64::MAX / 2);
        let out = svg(&[("2024-05-10", 7)], 30, "2024-05-10", ChartSize::Full);
        assert_eq!(labels(&out, "y"), ["0", "2", "4", "6", "8"]);
        let compact = svg(&[("2024-05-10", 7)], 30, "2024-05-10", ChartSize::Compact);
        assert_eq!(labels(&compact, "y"), ["0", "7"]);
    }

    #[test]
    fn the_date_axis_labels_the_last_day_and_every_week_back_or_the_ends() {
        let full = svg(&[], 30, "2024-03-03", ChartSize::Full);
        assert_eq!(
            labels(&full, "x"),
            ["02-04", "02-11", "02-18", "02-25", "03-03"]
        );
        let compact = svg(&[], 30, "2024-03-03", ChartSize::Compact);
        assert_eq!(labels(&compact, "x"), ["02-03", "03-03"]);
    }

    #[test]
    fn missing_days_are_gaps_and_only_the_range_ending_today_counts() {
        // (per day, days, today) -> bar titles
        type Case<'a> = (&'a [(&'a str, i64)], usize, &'a str, &'a [&'a str]);
        let cases: &[Case] = &[
            (
                &[("2024-03-01", 2), ("2024-03-03", 4)],
                3,
                "2024-03-03",
                &["2024-03-01: 2 reports", "2024-03-03: 4 reports"],
            ),
            (
                &[("2024-02-27", 9), ("2024-02-28", 1), ("2024-03-02", 9)],
                3,
                "2024-03-01",
                &["2024-02-28: 1 reports"],
            ),
            (
                &[("2024-12-31", 5), ("2025-01-01", 5)],
                2,
                "2025-01-01",
                &["2024-12-31: 5 reports", "2025-01-01: 5 reports"],
            ),
            (
                &[("2024-05-10", 1), ("2024-05-10", 2)],
                7,
                "2024-05-10",
                &["2024-05-10: 3 reports"],
            ),
            (
                &[("2024-05-10", 7)],
                5,
                "not-a-date",
                &["2024-05-10: 7 reports"],
            ),
        ];
        for (per_day, days, today, want) in cases {
            for size in [ChartSize::Compact, ChartSize::Full] {
                let got: Vec<String> = bars(&svg(per_day, *days, today, size))
                    .into_iter()
                    .map(|b| b.2)
                    .collect();
                assert_eq!(got, *want, "{per_day:?} {today}");
            }
        }
    }

    #[test]
    fn bar_heights_scale_to_the_axis_and_stay_visible() {
        let out = svg(
            &[("2024-01-01", 1), ("2024-01-02", 2), ("2024-01-03", 4)],
            3,
            "2024-01-03",
            ChartSize::Full,
        );
        // A plot 138 px high, the count axis up to 4.
        let heights: Vec<f64> = bars(&out).into_iter().map(|b| b.1).collect();
        assert_eq!(heights, [34.5, 69.0, 138.0]);
        assert!(bars(&out).iter().all(|b| (b.0 + b.1 - 148.0).abs() < 0.01));
        let tiny = svg(
            &[("2024-01-01", 1), ("2024-01-02", 1_000_000)],
            2,
            "2024-01-02",
            ChartSize::Compact,
        );
        assert_eq!(bars(&tiny)[0].1, 1.0, "a single report stays visible");
        assert!(tiny.contains(
            "<desc>1000001 reports; the busiest day was 2024-01-02 with 1000000.</desc>"
        ));
    }

    #[test]
    fn malformed_dates_and_counts_are_skipped_and_no_text_is_copied() {
        let bad = [
            "2024-3-01",
            "2024-13-01",
            "2023-02-29",
            "2024-04-31",
            "abcd-ef-gh",
            "2024-05-01T00",
            "<script>x</script>",
            "2024-05-0\u{e9}",
            "+024-05-01",
        ];
        let mut per_day: Vec<(&str, i64)> = bad.iter().map(|d| (*d, 5)).collect();
        per_day.push(("2024-05-02", -3));
        per_day.push(("2024-05-03", 1));
        let out = svg(&per_day, 10, "2024-05-05", ChartSize::Full);
        assert_eq!(
            bars(&out).into_iter().map(|b| b.2).collect::<Vec<_>>(),
            ["2024-05-03: 1 reports"]
        );
        assert!(out.contains("aria-label=\"1 reports in the last 10 days\""));
        assert!(!out.contains("script") && !out.contains('\u{e9}'));
        let huge = svg(&[], 100_000, "2024-06-30", ChartSize::Full);
        assert!(huge.contains("last 731 days") && huge.len() < 40_000);
    }

    #[test]
    fn dates_round_trip_through_day_numbers() {
        let cases = [
            ("1970-01-01", 0),
            ("2000-03-01", 11_017),
            ("1969-12-31", -1),
            ("2024-02-29", 19_782),
        ];
        for (date, days) in cases {
            assert_eq!(
                (parse_date(date), format_date(days)),
                (Some(days), date.to_string())
            );
        }
        for day in (-719_528..=2_932_896).step_by(7) {
            assert_eq!(parse_date(&format_date(day)), Some(day), "{day}");
        }
    }
}
