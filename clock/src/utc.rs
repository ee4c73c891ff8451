//! UTC calendar fields of a Unix time (proleptic Gregorian) and the workspace's date formats:
//! RFC 3339 with whole seconds or milliseconds, and the bare date.

/// A Unix time split into UTC calendar fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtcDateTime {
    pub year: i64,
    /// 1–12.
    pub month: u32,
    /// 1–31.
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub millisecond: u32,
}

impl UtcDateTime {
    /// The fields of `secs` seconds after the Unix epoch.
    pub fn from_unix_secs(secs: u64) -> Self {
        // u64::MAX / 86_400 < i64::MAX: the conversion cannot fail.
        let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
        let rest = secs % 86_400;
        let (year, month, day) = civil_from_days(days);
        Self {
            year,
            month,
            day,
            hour: (rest / 3_600) as u32,
            minute: (rest % 3_600 / 60) as u32,
            second: (rest % 60) as u32,
            millisecond: 0,
        }
    }

    /// The fields of `ms` milliseconds after the Unix epoch.
    pub fn from_unix_ms(ms: u64) -> Self {
        Self {
            millisecond: (ms % 1_000) as u32,
            ..Self::from_unix_secs(ms / 1_000)
        }
    }

    /// `2026-12-01`
    pub fn date(&self) -> String {
        format!("{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }

    /// RFC 3339 to the whole second (milliseconds dropped, not rounded): `2026-12-01T19:03:07Z`
    pub fn rfc3339(&self) -> String {
        format!(
            "{}T{:02}:{:02}:{:02}Z",
            self.date(),
            self.hour,
            self.minute,
            self.second
        )
    }

    /// RFC 3339 with milliseconds: `2026-12-01T19:03:07.123Z` (written digit by digit for years
    /// 0–9999: it stamps every request's log line).
    pub fn rfc3339_ms(&self) -> String {
        if let Ok(year @ 0..=9_999) = u32::try_from(self.year) {
            fn push(out: &mut String, n: u32, width: u32) {
                for place in (0..width).rev() {
                    let digit = n / 10u32.pow(place) % 10;
                    out.push(char::from(b'0' + digit as u8));
                }
            }
            let mut out = String::with_capacity(24);
            push(&mut out, year, 4);
            for (sep, n, width) in [
                ('-', self.month, 2),
                ('-', self.day, 2),
                ('T', self.hour, 2),
                (':', self.minute, 2),
                (':', self.second, 2),
                ('.', self.millisecond, 3),
            ] {
                out.push(sep);
                push(&mut out, n, width);
            }
            out.push('Z');
            return out;
        }
        format!(
            "{}T{:02}:{:02}:{:02}.{:03}Z",
            self.date(),
            self.hour,
            self.minute,
            self.second,
            self.millisecond
        )
    }
}

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian calendar: era
/// arithmetic on 400-year cycles of 146,097 days, with the year counted from March so that the
/// leap day is the last day of the year.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month as u32, day as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> String {
        UtcDateTime::from_unix_secs(s).rfc3339()
    }

    fn ms(m: u64) -> String {
        UtcDateTime::from_unix_ms(m).rfc3339_ms()
    }

    #[test]
    fn milliseconds_are_written_as_format_would() {
        let mut m = 0u64;
        while m < 400_000_000_000_000 {
            let t = UtcDateTime::from_unix_ms(m);
            let formatted = format!(
                "{}T{:02}:{:02}:{:02}.{:03}Z",
                t.date(),
                t.hour,
                t.minute,
                t.second,
                t.millisecond
            );
            assert_eq!(t.rfc3339_ms(), formatted, "{m}");
            m = m * 3 + 7_919;
        }
    }

    #[test]
    fn the_epoch() {
        assert_eq!(secs(0), "1970-01-01T00:00:00Z");
        assert_eq!(ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(UtcDateTime::from_unix_secs(0).date(), "1970-01-01");
        assert_eq!(secs(86_399), "1970-01-01T23:59:59Z");
        assert_eq!(secs(86_400), "1970-01-02T00:00:00Z");
    }

    #[test]
    fn the_cases_the_crates_tested_before() {
        // gateway cli.rs
        assert_eq!(secs(1_796_151_787), "2026-12-01T19:03:07Z");
        assert_eq!(
            UtcDateTime::from_unix_secs(951_782_400).date(),
            "2000-02-29"
        );
        assert_eq!(
            UtcDateTime::from_unix_secs(4_107_542_400).date(),
            "2100-03-01"
        );
        // gateway audit.rs
        assert_eq!(ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(ms(1_764_623_321_123), "2025-12-01T21:08:41.123Z");
        assert_eq!(ms(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
        // mcp-service clock.rs: milliseconds dropped in the whole-second form
        let t = |m| UtcDateTime::from_unix_ms(m).rfc3339();
        assert_eq!(t(0), "1970-01-01T00:00:00Z");
        assert_eq!(t(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(t(1_793_957_405_000), "2026-11-06T09:30:05Z");
        assert_eq!(t(1_793_957_405_999), "2026-11-06T09:30:05Z");
    }

    #[test]
    fn leap_years() {
        // 2000 is divisible by 400: a leap year.
        assert_eq!(secs(951_782_399), "2000-02-28T23:59:59Z");
        assert_eq!(secs(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(secs(951_868_800), "2000-03-01T00:00:00Z");
        // 2024 is divisible by 4: a leap year.
        assert_eq!(secs(1_709_164_800), "2024-02-29T00:00:00Z");
        // 2023 is not.
        assert_eq!(secs(1_677_542_400), "2023-02-28T00:00:00Z");
        assert_eq!(secs(1_677_628_800), "2023-03-01T00:00:00Z");
        // 2100 is divisible by 100 but not by 400: not a leap year.
        assert_eq!(secs(4_107_456_000), "2100-02-28T00:00:00Z");
        assert_eq!(secs(4_107_542_400), "2100-03-01T00:00:00Z");
        // 1972, the first leap year after the epoch.
        assert_eq!(secs(68_169_600), "1972-02-29T00:00:00Z");
        assert_eq!(secs(68_256_000), "1972-03-01T00:00:00Z");
    }

    #[test]
    fn year_ends() {
        assert_eq!(ms(946_684_799_999), "1999-12-31T23:59:59.999Z");
        assert_eq!(ms(946_684_800_000), "2000-01-01T00:00:00.000Z");
        assert_eq!(secs(4_102_444_800), "2100-01-01T00:00:00Z");
        assert_eq!(secs(253_402_300_799), "9999-12-31T23:59:59Z");
    }

    #[test]
    fn every_day_for_five_centuries_follows_the_calendar() {
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let days_in = |y: i64, m: u32| match m {
            2 if leap(y) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        let (mut y, mut m, mut d) = (1970, 1, 1);
        for day in 0..200_000_u64 {
            let f = UtcDateTime::from_unix_secs(day * 86_400 + 86_399);
            assert_eq!((f.year, f.month, f.day), (y, m, d), "day {day}");
            assert_eq!((f.hour, f.minute, f.second), (23, 59, 59));
            d += 1;
            if d > days_in(y, m) {
                d = 1;
                m += 1;
                if m > 12 {
                    m = 1;
                    y += 1;
                }
            }
        }
        assert!(y > 2500);
    }

    #[test]
    fn the_largest_times_do_not_panic() {
        let f = UtcDateTime::from_unix_secs(u64::MAX);
        assert!(f.year > 500_000_000_000);
        let f = UtcDateTime::from_unix_ms(u64::MAX);
        assert_eq!(f.millisecond, 615);
        assert!(f.rfc3339_ms().ends_with(".615Z"));
    }
}
