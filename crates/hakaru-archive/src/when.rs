//! Points in time as users write them: an age (`30m`, `12h`, `7d`, `2w`) counted back from now,
//! or a UTC date (`2026-11-01`, `2026-11-01T08:30`, `2026-11-01T08:30:15Z`).

/// Seconds since the Unix epoch for `s`, with `now` the present in the same unit.
pub fn parse_when(s: &str, now: f64) -> Result<f64, String> {
    let t = s.trim();
    if let Some(age) = parse_age(t) {
        return Ok(now - age);
    }
    parse_date(t).ok_or_else(|| {
        format!(
            "'{s}' is neither an age (30m, 12h, 7d, 2w) nor a UTC date \
             (2026-11-01, 2026-11-01T08:30, 2026-11-01T08:30:15Z)"
        )
    })
}

/// `30s`, `30m`, `12h`, `7d`, `2w` in seconds.
fn parse_age(t: &str) -> Option<f64> {
    let unit = t.chars().last()?;
    let scale = match unit {
        's' => 1.0,
        'm' => 60.0,
        'h' => 3600.0,
        'd' => 86_400.0,
        'w' => 7.0 * 86_400.0,
        _ => return None,
    };
    let v: f64 = t[..t.len() - 1].parse().ok()?;
    (v.is_finite() && v >= 0.0).then_some(v * scale)
}

/// A UTC date with an optional time of day.
fn parse_date(t: &str) -> Option<f64> {
    let t = t.strip_suffix('Z').unwrap_or(t);
    let (date, time) = match t.split_once(['T', ' ']) {
        Some((d, tm)) => (d, Some(tm)),
        None => (t, None),
    };
    let mut d = date.split('-');
    let y: i64 = d.next()?.parse().ok()?;
    let m: u32 = d.next()?.parse().ok()?;
    let day: u32 = d.next()?.parse().ok()?;
    if d.next().is_some() || !(1..=12).contains(&m) || day == 0 || day > days_in_month(y, m) {
        return None;
    }
    let mut secs = 0.0;
    if let Some(tm) = time {
        let mut p = tm.split(':');
        let h: u32 = p.next()?.parse().ok()?;
        let mi: u32 = p.next()?.parse().ok()?;
        let s: f64 = match p.next() {
            Some(s) => s.parse().ok()?,
            None => 0.0,
        };
        if p.next().is_some() || h > 23 || mi > 59 || !(0.0..60.0).contains(&s) {
            return None;
        }
        secs = f64::from(h * 3600 + mi * 60) + s;
    }
    Some(days_from_civil(y, m, day) as f64 * 86_400.0 + secs)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::parse_when;

    #[test]
    fn ages_count_back_from_now() {
        assert_eq!(parse_when("7d", 1e6), Ok(1e6 - 7.0 * 86_400.0));
        assert_eq!(parse_when("90m", 10_000.0), Ok(10_000.0 - 5400.0));
        assert_eq!(parse_when("2w", 2e6), Ok(2e6 - 14.0 * 86_400.0));
        assert_eq!(parse_when("0.5h", 7200.0), Ok(5400.0));
    }

    #[test]
    fn dates_are_utc() {
        assert_eq!(parse_when("1970-01-01", 0.0), Ok(0.0));
        assert_eq!(parse_when("2000-02-29", 0.0), Ok(951_782_400.0));
        assert_eq!(parse_when("2026-11-18T11:06:40Z", 0.0), Ok(1_795_000_000.0));
        assert_eq!(parse_when("2026-11-18T11:06", 0.0), Ok(1_794_999_960.0));
        assert_eq!(parse_when("2026-11-18 11:06:40", 0.0), Ok(1_795_000_000.0));
    }

    #[test]
    fn nonsense_is_refused_with_the_forms() {
        for bad in [
            "",
            "7",
            "7y",
            "-3d",
            "2026-02-30",
            "2026-13-01",
            "2026-11-18T25:00",
            "x",
        ] {
            let e = parse_when(bad, 0.0).unwrap_err();
            assert!(e.contains("neither an age"), "{bad}: {e}");
        }
    }
}
