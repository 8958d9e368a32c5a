//! The per-day sparkline on group pages: a small inline SVG built on the server so the portal
//! needs no JavaScript. Templates embed it unescaped, so only numbers and dates re-formatted from
//! validated numbers reach the string; no input text is ever copied into it.

use crate::time::{civil_from_days, days_from_civil};

/// Bar width and the gap after each bar, in pixels.
const BAR: usize = 4;
const GAP: usize = 1;
/// Height of the sparkline in pixels; the busiest day fills it.
const HEIGHT: i64 = 24;
/// Longest range drawn, so that a bad `days` cannot produce a huge string.
const MAX_DAYS: usize = 731;

/// An SVG bar chart of reports per day over the `days` days ending at `today` (both
/// `YYYY-MM-DD`, UTC). Days missing from `per_day` count 0; malformed dates, days outside the
/// range and negative counts are ignored. A malformed `today` falls back to the latest day in
/// `per_day`. Safe to embed unescaped.
pub fn trend_svg(per_day: &[(String, i64)], days: usize, today: &str) -> String {
    let days = days.min(MAX_DAYS);
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
    let total = counts.iter().fold(0i64, |sum, &n| sum.saturating_add(n));
    let max = counts.iter().copied().max().unwrap_or(0);
    let width = (days * (BAR + GAP)).saturating_sub(GAP);
    // The wording is fixed (`N reports`, even for 1): pages and tests match on it.
    let label = format!("{total} reports in the last {days} days");
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"trend\" width=\"{width}\" \
         height=\"{HEIGHT}\" viewBox=\"0 0 {width} {HEIGHT}\" role=\"img\" aria-label=\"{label}\">"
    );
    for (i, &n) in counts.iter().enumerate().filter(|(_, n)| **n > 0) {
        // Rounded up so that a single report stays visible next to a busy day.
        let height =
            ((i128::from(n) * i128::from(HEIGHT) + i128::from(max) - 1) / i128::from(max)) as i64;
        let (x, y, date) = (
            i * (BAR + GAP),
            HEIGHT - height,
            format_date(first + i as i64),
        );
        svg.push_str(&format!(
            "<rect x=\"{x}\" y=\"{y}\" width=\"{BAR}\" height=\"{height}\">\
             <title>{date}: {n} reports</title></rect>"
        ));
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
    let num = |digits: &[u8]| {
        (digits.iter()).try_fold(0i64, |n, &d| {
            d.is_ascii_digit().then(|| n * 10 + i64::from(d - b'0'))
        })
    };
    let (y, m, d) = (num(&b[0..4])?, num(&b[5..7])?, num(&b[8..10])?);
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let month_days = match m {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    let valid = (1..=12).contains(&m) && (1..=month_days).contains(&d);
    valid.then(|| days_from_civil(y, m, d))
}

/// The `YYYY-MM-DD` date of a day number.
fn format_date(days: i64) -> String {
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svg(per_day: &[(&str, i64)], days: usize, today: &str) -> String {
        let per_day: Vec<(String, i64)> =
            per_day.iter().map(|(d, n)| (d.to_string(), *n)).collect();
        trend_svg(&per_day, days, today)
    }

    /// (x, y, height, title) of each bar.
    fn bars(svg: &str) -> Vec<(usize, i64, i64, String)> {
        let re = regex::Regex::new(
            r#"<rect x="(\d+)" y="(\d+)" width="4" height="(\d+)"><title>([^<]*)</title></rect>"#,
        )
        .unwrap();
        assert_eq!(
            re.find_iter(svg).count(),
            svg.matches("<rect").count(),
            "{svg}"
        );
        (re.captures_iter(svg))
            .map(|c| {
                (
                    c[1].parse().unwrap(),
                    c[2].parse().unwrap(),
                    c[3].parse().unwrap(),
                    c[4].into(),
                )
            })
            .collect()
    }

    #[test]
    fn empty_input_draws_a_frame_with_no_bars() {
        let out = svg(&[], 30, "2024-05-10");
        let head = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"trend\" width=\"149\" \
                    height=\"24\" viewBox=\"0 0 149 24\" role=\"img\" \
                    aria-label=\"0 reports in the last 30 days\"></svg>";
        assert_eq!(out, head);
        assert_eq!(svg(&[], 0, "2024-05-10").matches("width=\"0\"").count(), 1);
    }

    #[test]
    fn missing_days_are_gaps_and_only_the_range_ending_today_counts() {
        // (per day, days, today) -> bars as (x, title)
        type Case<'a> = (&'a [(&'a str, i64)], usize, &'a str, &'a [(usize, &'a str)]);
        let cases: &[Case] = &[
            (
                &[("2024-03-01", 2), ("2024-03-03", 4)],
                3,
                "2024-03-03",
                &[(0, "2024-03-01: 2 reports"), (10, "2024-03-03: 4 reports")],
            ),
            (
                &[("2024-02-27", 9), ("2024-02-28", 1), ("2024-03-02", 9)],
                3,
                "2024-03-01",
                &[(0, "2024-02-28: 1 reports")],
            ),
            (
                &[("2024-02-29", 1), ("2024-03-01", 3)],
                2,
                "2024-03-01",
                &[(0, "2024-02-29: 1 reports"), (5, "2024-03-01: 3 reports")],
            ),
            (
                &[("2024-12-31", 5), ("2025-01-01", 5)],
                2,
                "2025-01-01",
                &[(0, "2024-12-31: 5 reports"), (5, "2025-01-01: 5 reports")],
            ),
            (
                &[("2024-05-10", 1), ("2024-05-10", 2)],
                7,
                "2024-05-10",
                &[(30, "2024-05-10: 3 reports")],
            ),
            (
                &[("2024-05-10", 7)],
                5,
                "not-a-date",
                &[(20, "2024-05-10: 7 reports")],
            ),
        ];
        for (per_day, days, today, want) in cases {
            let got: Vec<(usize, String)> = bars(&svg(per_day, *days, today))
                .into_iter()
                .map(|b| (b.0, b.3))
                .collect();
            let want: Vec<(usize, String)> =
                want.iter().map(|(x, t)| (*x, t.to_string())).collect();
            assert_eq!(got, want, "{per_day:?} {today}");
        }
    }

    #[test]
    fn bar_heights_scale_to_the_busiest_day() {
        let out = svg(
            &[
                ("2024-01-01", 1),
                ("2024-01-02", 2),
                ("2024-01-03", 4),
                ("2024-01-04", 3),
            ],
            4,
            "2024-01-04",
        );
        let heights: Vec<(i64, i64)> = bars(&out).into_iter().map(|b| (b.1, b.2)).collect();
        assert_eq!(heights, [(18, 6), (12, 12), (0, 24), (6, 18)]);
        let tiny = svg(
            &[("2024-01-01", 1), ("2024-01-02", 1_000_000)],
            2,
            "2024-01-02",
        );
        assert_eq!(bars(&tiny)[0].2, 1, "a single report stays visible");
    }

    #[test]
    fn malformed_dates_and_counts_are_skipped() {
        let bad = [
            "2024-3-01",
            "2024-13-01",
            "2024-00-10",
            "2023-02-29",
            "2024-04-31",
            "2024-05-00",
            "abcd-ef-gh",
            "2024-05-01T00",
            "<script>x</script>",
            "2024-05-0\u{e9}",
            "+024-05-01",
        ];
        let mut per_day: Vec<(&str, i64)> = bad.iter().map(|d| (*d, 5)).collect();
        per_day.push(("2024-05-02", -3));
        per_day.push(("2024-05-03", 1));
        let out = svg(&per_day, 10, "2024-05-05");
        assert_eq!(
            bars(&out).into_iter().map(|b| b.3).collect::<Vec<_>>(),
            ["2024-05-03: 1 reports"]
        );
        assert!(
            out.contains("aria-label=\"1 reports in the last 10 days\"") && !out.contains("script")
        );
        assert!(
            svg(&[("2024-02-29", 1)], 1, "2024-02-29").contains("1 reports in the last 1 days\"")
        );
    }

    #[test]
    fn aria_label_counts_reports_in_the_range() {
        let per_day = [
            ("2024-05-31", 3),
            ("2024-06-20", 4),
            ("2024-06-30", 5),
            ("2024-07-01", 100),
        ];
        let out = svg(&per_day, 30, "2024-06-30");
        assert!(
            out.contains("aria-label=\"9 reports in the last 30 days\""),
            "{out}"
        );
        assert_eq!(bars(&out).len(), 2);
        assert_eq!(
            svg(&per_day, 100_000, "2024-06-30")
                .matches("width=\"3654\"")
                .count(),
            1
        );
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
        // 0000-01-01 to 9999-12-31, every weekday of every month over the years.
        for day in (-719_528..=2_932_896).step_by(7) {
            assert_eq!(parse_date(&format_date(day)), Some(day), "{day}");
        }
    }
}
