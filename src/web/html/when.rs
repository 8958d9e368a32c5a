//! Times as people read them: "3 hours ago", with the exact UTC time on hover and in the
//! `datetime` attribute, so lists scan at a glance and nothing is lost. The reference "now" is
//! taken once per page (in [`super::Layout`]), so one page never mixes two clocks.

use std::fmt;

use crate::time::Timestamp;

/// A moment shown relative to `now`: renders as a `<time>` element (HTML; digits and fixed
/// words only, so templates may print it with `|safe`).
#[derive(Clone, Copy, Debug)]
pub struct When {
    at: Timestamp,
    now: Timestamp,
}

impl When {
    /// `at` as seen at `now`.
    #[must_use]
    pub fn new(at: Timestamp, now: Timestamp) -> When {
        When { at, now }
    }

    /// The relative words alone: "just now", "5 minutes ago", "yesterday", "3 days ago", and
    /// past a month the date.
    #[must_use]
    pub fn words(&self) -> String {
        let secs = self.now.unix() - self.at.unix();
        // A little clock skew between replicas reads as "just now", not "in 2 seconds".
        if secs < 45 {
            if secs > -60 {
                return "just now".into();
            }
            return self.date();
        }
        let mins = (secs + 30) / 60;
        if mins < 60 {
            return plural(mins, "minute");
        }
        let hours = (secs + 1800) / 3600;
        if hours < 24 {
            return plural(hours, "hour");
        }
        let days = (secs + 43_200) / 86_400;
        match days {
            1 => "yesterday".into(),
            2..=30 => format!("{days} days ago"),
            _ => self.date(),
        }
    }

    /// The calendar date, `2026-09-14`.
    fn date(&self) -> String {
        self.at.to_string()[..10].to_owned()
    }

    /// The exact time for the tooltip, `2026-11-24 16:52:28 UTC`.
    #[must_use]
    pub fn exact(&self) -> String {
        let t = self.at.to_string();
        format!("{} {} UTC", &t[..10], &t[11..19])
    }
}

fn plural(n: i64, unit: &str) -> String {
    if n == 1 {
        format!("1 {unit} ago")
    } else {
        format!("{n} {unit}s ago")
    }
}

impl fmt::Display for When {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            r#"<time datetime="{}" title="{}">{}</time>"#,
            self.at,
            self.exact(),
            self.words()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ago(secs: i64) -> String {
        let now = Timestamp::from_unix(1_795_539_148); // 2026-11-24T16:52:28Z
        When::new(Timestamp::from_unix(now.unix() - secs), now).words()
    }

    #[test]
    fn recent_times_read_as_words_and_old_ones_as_dates() {
        assert_eq!(ago(0), "just now");
        assert_eq!(ago(44), "just now");
        assert_eq!(ago(-30), "just now", "a replica's clock a little ahead");
        assert_eq!(
            ago(-3600),
            "2026-11-24",
            "a time well in the future is not hidden"
        );
        assert_eq!(ago(60), "1 minute ago");
        assert_eq!(ago(89), "1 minute ago");
        assert_eq!(ago(90), "2 minutes ago");
        assert_eq!(ago(59 * 60), "59 minutes ago");
        assert_eq!(ago(3600), "1 hour ago");
        assert_eq!(ago(23 * 3600), "23 hours ago");
        assert_eq!(ago(26 * 3600), "yesterday");
        assert_eq!(ago(3 * 86_400), "3 days ago");
        assert_eq!(ago(30 * 86_400), "30 days ago");
        assert_eq!(ago(70 * 86_400), "2026-09-15");
    }

    #[test]
    fn the_element_carries_the_exact_time() {
        let now = Timestamp::from_unix(1_795_539_148);
        let at = Timestamp::from_unix(1_795_539_148 - 7200);
        assert_eq!(
            When::new(at, now).to_string(),
            r#"<time datetime="2026-11-24T14:52:28Z" title="2026-11-24 14:52:28 UTC">2 hours ago</time>"#
        );
    }
}
