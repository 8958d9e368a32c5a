//! Placeholder while the trend sparkline is being written (see helper task); replaced wholesale.

/// An SVG sparkline of reports per day.
pub fn trend_svg(per_day: &[(String, i64)], days: usize, _today: &str) -> String {
    let total: i64 = per_day.iter().map(|(_, n)| *n).sum();
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"trend\" width=\"{}\" height=\"24\" role=\"img\" aria-label=\"{total} reports in the last {days} days\"></svg>",
        days * 5
    )
}
