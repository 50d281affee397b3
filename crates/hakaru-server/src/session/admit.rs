//! What the server checks before it runs a test: this host's limits, budgets and
//! capabilities (the spec's own validation is the model's); and the test's token.

use std::sync::atomic::Ordering;
use std::time::Duration;

use hakaru_engine::sys;
use hakaru_model::{Amount, TestSpec};

use crate::Ctx;

/// How long a time-based test asks to run, warm-up included; `None` for byte and block counts
/// (the server stops those at --max-duration instead).
fn asked_duration(spec: &TestSpec) -> Option<Duration> {
    match spec.common().amount {
        Amount::Time(t) => Some(t.0.saturating_add(spec.common().omit.0)),
        Amount::Bytes(_) | Amount::Blocks(_) => None,
    }
}

/// Checks what the spec's own validation cannot: this host's limits, budgets and
/// capabilities. The test's memory is reserved when it fits.
pub(super) fn admit(ctx: &Ctx, spec: &TestSpec) -> Result<crate::budget::Reservation, String> {
    spec.validate().map_err(|e| e.0)?;
    if ctx.shutdown.load(Ordering::Acquire) {
        return Err("the server is shutting down".into());
    }
    if spec.common().flows > ctx.cfg.max_flows {
        return Err(format!(
            "the test asks for {} flows per direction; the server allows {} (--max-flows)",
            spec.common().flows,
            ctx.cfg.max_flows
        ));
    }
    if let Some((rate, flows)) = crate::budget::server_send_rate(spec) {
        crate::check_send_rate(ctx.cfg.max_rate, true, rate, flows)?;
    }
    if let Some(max) = ctx.cfg.max_duration {
        if let Some(asked) = asked_duration(spec) {
            if asked > max {
                return Err(format!(
                    "the test would run {:.0} s (warm-up included); the server runs tests of at most {:.0} s (--max-duration)",
                    asked.as_secs_f64(),
                    max.as_secs_f64()
                ));
            }
        }
    }
    if let Some(cc) = match spec {
        TestSpec::Tcp(t) => t.congestion.as_ref(),
        _ => None,
    } {
        let avail = sys::available_congestion();
        if !avail.is_empty() && !avail.iter().any(|a| a == cc) {
            return Err(format!(
                "-C/--congestion {cc}: not available on the server (available: {})",
                avail.join(" ")
            ));
        }
    }
    if matches!(spec, TestSpec::Tcp(t) if t.mptcp) {
        ctx.mptcp_listener()?;
    }
    let cpus = sys::online_cpus();
    if let Some(&bad) = spec.common().server_affinity.iter().find(|&&c| c >= cpus) {
        return Err(format!(
            "--server-affinity: CPU {bad} does not exist on the server (it has {cpus})"
        ));
    }
    crate::budget::check_busy_poll(&ctx.cfg.budgets, spec, cpus)?;
    ctx.memory
        .reserve(&ctx.cfg.budgets, crate::budget::server_memory(spec, cpus))
}

/// A test's token: 16 bytes from the OS. `None` without OS randomness: a token guessed from
/// the clock would let anyone who can guess the time join a test, so the server refuses tests.
pub(super) fn new_token() -> Option<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).ok()?;
    Some(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// The amount of a test, for the log.
pub(super) fn describe_amount(spec: &TestSpec) -> String {
    match spec.common().amount {
        Amount::Time(t) => format!("{t}"),
        Amount::Bytes(b) => format!("{} bytes", b.0),
        Amount::Blocks(k) => format!("{k} blocks of {} bytes", spec.common().length.0),
    }
}
