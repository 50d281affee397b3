//! Pieces shared by subcommands: logging, usage errors, CPU lists, signals.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::Context;

/// Logs to stderr; level 0 warn, 1 info, 2 debug, 3+ trace. `RUST_LOG` overrides.
pub fn init_logging(level: u8) {
    let lvl = match level {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(lvl));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// A command-line mistake that only shows after parsing (an interface that does not exist);
/// the process exits 2, like clap's own usage errors.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Whether `e` is, or was caused by, a [`UsageError`].
pub fn is_usage_error(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<UsageError>())
}

/// A CPU list flag value such as `0,2,4-7`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

impl std::str::FromStr for CpuList {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_cpu_list(s).map(CpuList)
    }
}

/// Parses a CPU list such as `0,2,4-7`.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("'{part}' is not a CPU number or range like 2-5");
        if let Some((a, b)) = part.split_once('-') {
            let a: usize = a.trim().parse().map_err(|_| bad())?;
            let b: usize = b.trim().parse().map_err(|_| bad())?;
            if a > b || b >= 4096 {
                return Err(bad());
            }
            out.extend(a..=b);
        } else {
            let c: usize = part.parse().map_err(|_| bad())?;
            if c >= 4096 {
                return Err(bad());
            }
            out.push(c);
        }
    }
    if out.is_empty() {
        return Err("empty CPU list".into());
    }
    Ok(out)
}

/// A flag set by the first SIGINT/SIGTERM; a second one exits at once.
pub fn stop_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    register_stop(&flag)?;
    Ok(flag)
}

/// Sets `flag` on the first SIGINT/SIGTERM; a second one exits at once.
pub fn register_stop(flag: &Arc<AtomicBool>) -> anyhow::Result<()> {
    #[cfg(unix)]
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(flag))
            .context("installing the signal handler")?;
        signal_hook::flag::register(sig, Arc::clone(flag))
            .context("installing the signal handler")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0,2,4-6").unwrap(), vec![0, 2, 4, 5, 6]);
        assert_eq!(parse_cpu_list("1").unwrap(), vec![1]);
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("x").is_err());
        assert!(parse_cpu_list("").is_err());
        assert!(parse_cpu_list("99999").is_err());
    }
}
