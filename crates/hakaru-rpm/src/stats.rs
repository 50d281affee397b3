//! The draft's arithmetic: the single-sided trimmed mean of probe times, the responsiveness
//! formula, and the stability test on moving averages. Pure functions.

/// Share of probe times kept by the trimmed mean (the draft's TMP): the slowest 5 % go.
pub const KEEP: f64 = 0.95;

/// Mean of the fastest [`KEEP`] share of `ms`; `None` when empty. Times that are not finite
/// are left out first.
pub fn trimmed_mean(ms: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = ms.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let keep = ((v.len() as f64 * KEEP).ceil() as usize).clamp(1, v.len());
    let kept = v.get(..keep).unwrap_or(&v);
    Some(kept.iter().sum::<f64>() / kept.len() as f64)
}

/// Arithmetic mean; `None` when empty.
pub fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Population standard deviation; `None` when empty.
pub fn std_dev(v: &[f64]) -> Option<f64> {
    let m = mean(v)?;
    Some((v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64).sqrt())
}

/// The draft's stability test: with `window` values, their standard deviation is less than
/// `tolerance` times `current` (the newest moving average).
pub fn stable(values: &[f64], window: usize, tolerance: f64, current: f64) -> bool {
    if values.len() < window || window == 0 || current <= 0.0 {
        return false;
    }
    let last = values.get(values.len() - window..).unwrap_or(values);
    std_dev(last).is_some_and(|sd| sd < tolerance * current)
}

/// Responsiveness from the trimmed means of one window, milliseconds in, round trips per
/// minute out: `(rpm, foreign_rpm, self_rpm)`. The foreign time is the mean of the TCP, TLS
/// and HTTP times (TCP and HTTP without TLS); the result is the mean of the two
/// responsivenesses. With one kind of probe missing the other stands alone; with neither,
/// `None`.
pub fn responsiveness(
    tcp: Option<f64>,
    tls: Option<f64>,
    http: Option<f64>,
    selfp: Option<f64>,
) -> Option<(f64, Option<f64>, Option<f64>)> {
    let parts: Vec<f64> = [tcp, tls, http].into_iter().flatten().collect();
    let foreign = mean(&parts).filter(|ms| *ms > 0.0).map(|ms| 60_000.0 / ms);
    let own = selfp.filter(|ms| *ms > 0.0).map(|ms| 60_000.0 / ms);
    let rpm = match (foreign, own) {
        (Some(f), Some(s)) => (f + s) / 2.0,
        (Some(f), None) => f,
        (None, Some(s)) => s,
        (None, None) => return None,
    };
    Some((rpm, foreign, own))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trimmed_mean_drops_the_slowest_five_percent() {
        // 19 times of 10 ms and one of 1000 ms: the outlier is the slowest 5 %.
        let mut v = vec![10.0; 19];
        v.push(1000.0);
        assert_eq!(trimmed_mean(&v), Some(10.0));
        // 21 values: ceil(21 x 0.95) = 20 kept, the one slowest dropped.
        let v: Vec<f64> = (1..=21).map(f64::from).collect();
        assert_eq!(trimmed_mean(&v), Some(10.5));
        assert_eq!(trimmed_mean(&[7.0]), Some(7.0));
        assert_eq!(trimmed_mean(&[]), None);
        assert_eq!(trimmed_mean(&[f64::NAN, 4.0]), Some(4.0));
    }

    #[test]
    fn stability_needs_a_full_window_within_the_tolerance() {
        assert!(!stable(&[100.0, 100.0, 100.0], 4, 0.05, 100.0));
        assert!(stable(&[100.0, 101.0, 99.0, 100.0], 4, 0.05, 100.0));
        // sd of [80, 100, 120, 100] is 14.1: not within 5 % of 100.
        assert!(!stable(&[80.0, 100.0, 120.0, 100.0], 4, 0.05, 100.0));
        // Only the last window counts.
        assert!(stable(
            &[1.0, 50.0, 100.0, 100.0, 100.0, 100.0],
            4,
            0.05,
            100.0
        ));
        assert!(!stable(&[0.0; 4], 4, 0.05, 0.0));
        assert_eq!(
            std_dev(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]),
            Some(2.0)
        );
    }

    #[test]
    fn the_drafts_formula() {
        // Foreign: (10 + 20 + 30) / 3 = 20 ms -> 3000 RPM; self 40 ms -> 1500; mean 2250.
        let (rpm, f, s) = responsiveness(Some(10.0), Some(20.0), Some(30.0), Some(40.0)).unwrap();
        assert_eq!((rpm, f, s), (2250.0, Some(3000.0), Some(1500.0)));
        // Without TLS: (10 + 30) / 2 = 20 ms.
        let (_, f, _) = responsiveness(Some(10.0), None, Some(30.0), Some(40.0)).unwrap();
        assert_eq!(f, Some(3000.0));
        assert_eq!(
            responsiveness(None, None, None, Some(60.0)).unwrap().0,
            1000.0
        );
        assert!(responsiveness(None, None, None, None).is_none());
    }
}
