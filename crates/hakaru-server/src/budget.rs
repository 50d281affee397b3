//! Budgets the server sets on what a client may ask of it: memory per test and in total,
//! busy-polling, and the rate the server sends (docs/security.md, "Limits and their
//! defaults"). Checked before a test starts; a refusal names the figure and the flag.

use std::sync::{Arc, Mutex};

use hakaru_model::TestSpec;

/// What the server lets one test, and all tests together, cost it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    /// Buffer memory one test may take (`--max-test-memory`); `None`: no limit.
    pub test_memory: Option<u64>,
    /// Buffer memory all running tests may take together (`--max-memory`); `None`: no limit.
    pub total_memory: Option<u64>,
    /// Latency tests may busy-poll on the server (`--spin`, `--busy-poll`): `--allow-busy-poll`.
    pub busy_poll: bool,
}

impl Default for Budgets {
    /// A server others reach: 256 MiB a test, 1 GiB in all, no busy-polling.
    fn default() -> Self {
        Budgets {
            test_memory: Some(256 << 20),
            total_memory: Some(1 << 30),
            busy_poll: false,
        }
    }
}

impl Budgets {
    /// An in-process server for the user's own test on loopback: what the user asks of their
    /// own machine is theirs to ask (busy-polling still never spins more flows than CPUs).
    pub fn local() -> Budgets {
        Budgets {
            test_memory: None,
            total_memory: None,
            busy_poll: true,
        }
    }
}

/// Memory reserved by running tests.
#[derive(Debug, Default, Clone)]
pub(crate) struct MemoryPool {
    reserved: Arc<Mutex<u64>>,
}

/// A test's share of the pool; given back when dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    pool: Arc<Mutex<u64>>,
    bytes: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Ok(mut r) = self.pool.lock() {
            *r = r.saturating_sub(self.bytes);
        }
    }
}

/// Bytes as the refusals write them (MiB, rounded up).
fn mib(b: u64) -> String {
    format!("{} MiB", b.div_ceil(1 << 20))
}

impl MemoryPool {
    /// Reserves `bytes` for a test under `budgets`, or says which budget it would break.
    pub(crate) fn reserve(&self, budgets: &Budgets, bytes: u64) -> Result<Reservation, String> {
        check_test_memory(budgets, bytes)?;
        let mut r = self
            .reserved
            .lock()
            .map_err(|_| "internal error: memory budget poisoned".to_string())?;
        if let Some(max) = budgets.total_memory {
            if r.saturating_add(bytes) > max {
                return Err(format!(
                    "the server is busy: running tests hold {} of buffers, this one would take {} more, and it allows {} in all (--max-memory)",
                    mib(*r),
                    mib(bytes),
                    mib(max)
                ));
            }
        }
        *r = r.saturating_add(bytes);
        Ok(Reservation {
            pool: Arc::clone(&self.reserved),
            bytes,
        })
    }
}

/// Checks one test's buffers against `--max-test-memory`.
pub(crate) fn check_test_memory(budgets: &Budgets, bytes: u64) -> Result<(), String> {
    match budgets.test_memory {
        Some(max) if bytes > max => Err(format!(
            "the test would take about {} of buffers on the server (-l, -w and flows); the server allows {} a test (--max-test-memory)",
            mib(bytes),
            mib(max)
        )),
        _ => Ok(()),
    }
}

/// About how much buffer memory `spec` costs the server with `cpus` CPUs (each kind's
/// estimate: `Kind::server_memory`).
pub fn server_memory(spec: &TestSpec, cpus: usize) -> u64 {
    spec.kind().server_memory(cpus)
}

/// Checks a latency test's busy-polling against the server's budget.
pub fn check_busy_poll(budgets: &Budgets, spec: &TestSpec, cpus: usize) -> Result<(), String> {
    let TestSpec::Latency(l) = spec else {
        return Ok(());
    };
    if (l.spin || l.busy_poll.is_some()) && !budgets.busy_poll {
        return Err(format!(
            "{}: this server does not busy-poll for clients (it would hold a CPU per flow); its operator can allow it with --allow-busy-poll",
            if l.spin { "--spin" } else { "--busy-poll" }
        ));
    }
    if l.spin && l.flows as usize > cpus {
        return Err(format!(
            "--spin with {} flows: the server spins at most one flow per CPU, and it has {cpus}",
            l.flows
        ));
    }
    Ok(())
}

/// What the server would send in `spec`, per flow (`Kind::server_send_rate`).
pub fn server_send_rate(spec: &TestSpec) -> Option<(Option<f64>, u32)> {
    spec.kind().server_send_rate()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hakaru_model::{Bytes, Direction, LatencySpec, TcpSpec, UdpSpec};

    #[test]
    fn a_test_and_all_tests_are_budgeted() {
        let pool = MemoryPool::default();
        let b = Budgets {
            test_memory: Some(256 << 20),
            total_memory: Some(600 << 20),
            busy_poll: false,
        };
        let e = pool.reserve(&b, (256 << 20) + 1).unwrap_err();
        assert!(
            e.contains("257 MiB") && e.contains("allows 256 MiB a test (--max-test-memory)"),
            "{e}"
        );
        let r1 = pool.reserve(&b, 256 << 20).unwrap();
        let _r2 = pool.reserve(&b, 256 << 20).unwrap();
        let e = pool.reserve(&b, 100 << 20).unwrap_err();
        assert!(
            e.contains("hold 512 MiB") && e.contains("(--max-memory)"),
            "{e}"
        );
        drop(r1);
        assert!(pool.reserve(&b, 100 << 20).is_ok());
        assert!(pool.reserve(&Budgets::local(), u64::MAX).is_ok());
    }

    #[test]
    fn memory_follows_length_windows_and_flows() {
        // -l 64M --bidir on 2 CPUs: a pattern and two read buffers, as the issue measured.
        let t = TestSpec::Tcp(TcpSpec {
            length: Bytes(64 << 20),
            direction: Direction::Bidir,
            ..TcpSpec::default()
        });
        assert_eq!(server_memory(&t, 2), 3 * (64 << 20));
        let w = TestSpec::Tcp(TcpSpec {
            flows: 8,
            window: Some(Bytes(4 << 20)),
            ..TcpSpec::default()
        });
        assert!(server_memory(&w, 2) >= 8 * 2 * (4 << 20));
        let u = TestSpec::Udp(UdpSpec {
            flows: 4,
            ..UdpSpec::default()
        });
        assert!(
            server_memory(&u, 2) >= 16 << 20,
            "receive buffers of 4 flows"
        );
        let defaults = TestSpec::Tcp(TcpSpec::default());
        assert!(server_memory(&defaults, 64) < 8 << 20);
    }

    #[test]
    fn busy_polling_only_where_allowed_and_never_more_than_cpus() {
        let spin = |flows| {
            TestSpec::Latency(LatencySpec {
                flows,
                spin: true,
                ..LatencySpec::default()
            })
        };
        let e = check_busy_poll(&Budgets::default(), &spin(1), 2).unwrap_err();
        assert!(
            e.contains("--spin") && e.contains("--allow-busy-poll"),
            "{e}"
        );
        assert!(check_busy_poll(&Budgets::local(), &spin(2), 2).is_ok());
        let e = check_busy_poll(&Budgets::local(), &spin(256), 2).unwrap_err();
        assert!(e.contains("256 flows") && e.contains("it has 2"), "{e}");
        let bp = TestSpec::Latency(LatencySpec {
            busy_poll: Some(50),
            ..LatencySpec::default()
        });
        assert!(check_busy_poll(&Budgets::default(), &bp, 2)
            .unwrap_err()
            .contains("--busy-poll"));
        assert!(check_busy_poll(&Budgets::default(), &spin(0), 2).is_err());
        assert!(check_busy_poll(
            &Budgets::default(),
            &TestSpec::Latency(LatencySpec::default()),
            2
        )
        .is_ok());
    }

    #[test]
    fn tcp_sent_by_the_server_has_a_rate() {
        let rev = TestSpec::Tcp(TcpSpec {
            flows: 4,
            direction: Direction::Reverse,
            ..TcpSpec::default()
        });
        assert_eq!(server_send_rate(&rev), Some((None, 4)));
        let fwd = TestSpec::Tcp(TcpSpec::default());
        assert_eq!(server_send_rate(&fwd), None);
        let paced = TestSpec::Tcp(TcpSpec {
            direction: Direction::Bidir,
            rate: Some(hakaru_model::BitRate(1e6)),
            ..TcpSpec::default()
        });
        assert_eq!(server_send_rate(&paced), Some((Some(1e6), 1)));
    }
}
