//! The server's limits that need no I/O to check, shared by every protocol's machine and
//! driver.

/// Checks the rate a test asks the server to send against `--max-rate` (bits per second of
/// payload, all flows together). `rate` is per flow; `None` asks for as fast as possible.
pub fn check_send_rate(
    max: Option<f64>,
    server_sends: bool,
    rate: Option<f64>,
    flows: u32,
) -> Result<(), String> {
    let (Some(max), true) = (max, server_sends) else {
        return Ok(());
    };
    let words = |b: f64| hakaru_model::BitRate(b).to_string();
    match rate {
        None => Err(format!(
            "an unlimited rate asks the server to send as fast as it can; it sends at most {} (--max-rate): give -b",
            words(max)
        )),
        Some(r) if r * f64::from(flows) > max => Err(format!(
            "{} flow(s) at {} ask the server to send {}; it sends at most {} (--max-rate)",
            flows,
            words(r),
            words(r * f64::from(flows)),
            words(max)
        )),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::check_send_rate;

    #[test]
    fn send_rate_limit() {
        assert!(check_send_rate(None, true, None, 8).is_ok());
        assert!(check_send_rate(Some(1e9), false, None, 8).is_ok());
        assert!(check_send_rate(Some(1e9), true, Some(1e8), 10).is_ok());
        let e = check_send_rate(Some(1e9), true, Some(1e8), 11).unwrap_err();
        assert!(e.contains("--max-rate") && e.contains("11 flow(s)"), "{e}");
        let e = check_send_rate(Some(1e9), true, None, 1).unwrap_err();
        assert!(e.contains("unlimited"), "{e}");
    }
}
