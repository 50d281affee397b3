//! The link the network-namespace tests run over: two namespaces joined by a veth pair, either
//! end's egress optionally shaped by tbf.
//!
//! Traffic goes only to the 198.18.0.0/15 (RFC 2544 benchmarking) addresses of the namespaces a
//! test creates. Needs root and `ip` (plus whatever else a test names, e.g. `tc`, `nft`);
//! without them [`Link::setup`] prints a SKIPPED line and the test passes without running. Under
//! HAKARU_TEST_NETNS=required (`.ci/run` as root) no root or a failing `ip netns add` fails the
//! test instead, naming the command and what it printed; a missing program fails it under
//! HAKARU_TEST_PEERS=required (`common::peer`).

use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;

use super::common::{
    bin, is_root, json, netns_unavailable, peer, run_cmd, skip, stderr, NetnsMode, ServerProc,
    SkipKind,
};

/// Held by every live [`Link`]: namespace tests run one at a time, so that two of them never
/// share the CPUs (their figures are timing-sensitive) and no test sees another's traffic. The
/// loopback udpst rate comparisons take it too (`udpst::alone`); none of them builds a link.
pub(super) static SERIAL: Mutex<()> = Mutex::new(());

/// Numbers the links of this process, keeping names apart when tests run in parallel threads.
static NEXT: AtomicU32 = AtomicU32::new(0);

/// tbf rates, as `tc` spells them ("200mbit"), on each end's egress; `None` leaves that end
/// unshaped. Shaping the client end shapes forward traffic, the server end reverse traffic.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shaping {
    pub client: Option<&'static str>,
    pub server: Option<&'static str>,
}

impl Shaping {
    /// No shaping at all.
    pub const NONE: Shaping = Shaping {
        client: None,
        server: None,
    };

    /// Both ends' egress shaped to `rate`: one link serves both directions.
    pub fn both(rate: &'static str) -> Shaping {
        Shaping {
            client: Some(rate),
            server: Some(rate),
        }
    }

    /// Only the client's egress (forward traffic) shaped to `rate`.
    pub fn client(rate: &'static str) -> Shaping {
        Shaping {
            client: Some(rate),
            server: None,
        }
    }
}

/// Two namespaces joined by a veth pair. Dropping it deletes the namespaces, which also
/// deletes the veth and anything configured inside them (qdiscs, nftables), however the test
/// ends.
pub(super) struct Link {
    /// Namespaces created so far, deleted on drop.
    created: Vec<String>,
    pub client_ns: String,
    pub server_ns: String,
    /// The client's end of the veth (inside `client_ns`).
    pub client_dev: String,
    /// The server's end of the veth (inside `server_ns`).
    pub server_dev: String,
    pub server_ip: String,
    /// Released after the namespaces are gone (fields drop after `Drop::drop`).
    _serial: MutexGuard<'static, ()>,
}

impl Link {
    /// Builds the link, or says why this machine cannot and returns `None` (the test then
    /// returns early; under HAKARU_TEST_NETNS=required it fails instead: [`netns_setup`]). `tools` are the programs the test needs besides `ip`, each
    /// with the Debian package `.ci/run` installs it from.
    pub fn setup(tools: &[(&str, &str)], shaping: Shaping) -> Option<Link> {
        let tc = shaping
            .client
            .or(shaping.server)
            .map(|_| ("tc", "iproute2"));
        let needed: Vec<(&str, &str)> = tc.into_iter().chain(tools.iter().copied()).collect();
        netns_setup(&needed, || Link::create(shaping))
    }

    /// Builds the link, or returns why this machine cannot.
    fn create(shaping: Shaping) -> Result<Link, String> {
        // A test that panicked while holding the lock poisons it; the next may still run.
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // The pid keeps names apart from concurrent runs, n from other links of this run; they
        // also pick the subnet, although each namespace has its own routing table, so a shared
        // subnet would still be harmless.
        let x = (pid + n) % 256;
        // Interface names are at most 15 bytes: "hkc" + a pid (at most 7 digits) + "-" + n
        // (a few tests, so one or two digits) fits.
        let (cdev, sdev) = (format!("hkc{pid}-{n}"), format!("hks{pid}-{n}"));
        assert!(cdev.len() <= 15, "interface name {cdev} is too long");
        let mut link = Link {
            created: Vec::new(),
            client_ns: format!("hk-c-{pid}-{n}"),
            server_ns: format!("hk-s-{pid}-{n}"),
            client_dev: cdev,
            server_dev: sdev,
            server_ip: format!("198.18.{x}.2"),
            _serial: serial,
        };
        for ns in [link.client_ns.clone(), link.server_ns.clone()] {
            let o = ip(&["netns", "add", &ns]);
            if !o.status.success() {
                // Only the first namespace can plausibly fail for lack of support; either way
                // `link` is dropped here and removes what was made.
                return Err(format!("`ip netns add {ns}` failed: {}", err(&o)));
            }
            link.created.push(ns);
        }
        // Each end is created directly inside its namespace so no name is ever taken in the
        // root one.
        let (cns, sns) = (link.client_ns.as_str(), link.server_ns.as_str());
        let (cdev, sdev) = (link.client_dev.as_str(), link.server_dev.as_str());
        must(&[
            "link", "add", cdev, "netns", cns, "type", "veth", "peer", "name", sdev, "netns", sns,
        ]);
        for (ns, dev, addr, rate) in [
            (cns, cdev, format!("198.18.{x}.1/30"), shaping.client),
            (sns, sdev, format!("198.18.{x}.2/30"), shaping.server),
        ] {
            must(&["-n", ns, "addr", "add", &addr, "dev", dev]);
            must(&["-n", ns, "link", "set", "lo", "up"]);
            must(&["-n", ns, "link", "set", dev, "up"]);
            if let Some(rate) = rate {
                must(&[
                    "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                    rate, "burst", "64kb", "latency", "50ms",
                ]);
            }
        }
        Ok(link)
    }

    /// Makes the client's veth end pass only single packets: the kernel splits GSO batches
    /// (UDP_SEGMENT, TSO) before the veth, as a real NIC would on the wire. Without this a
    /// veth carries a GSO batch as one packet, so the server's packet counters and nftables
    /// rules would see batches rather than datagrams.
    pub fn segment_client_gso(&self) {
        must(&[
            "-n",
            &self.client_ns,
            "link",
            "set",
            "dev",
            &self.client_dev,
            "gso_max_segs",
            "1",
        ]);
    }

    /// Starts `hakaru server` inside the server namespace, bound to the server's address.
    pub fn start_server(&self) -> ServerProc {
        self.start_server_with(&[])
    }

    /// The same with further server flags.
    pub fn start_server_with(&self, extra: &[&str]) -> ServerProc {
        let mut cmd = Command::new("ip");
        cmd.env_remove("RUST_LOG")
            .args(["netns", "exec", &self.server_ns, bin()]);
        ServerProc::start_with(cmd, &self.server_ip, extra)
    }

    /// Runs hakaru with `args` inside the client namespace and returns its JSON; fails the
    /// test if it fails.
    pub fn client_json(&self, args: &[&str], limit: Duration) -> Value {
        let mut cmd = Command::new("ip");
        cmd.env_remove("RUST_LOG")
            .args(["netns", "exec", &self.client_ns, bin()])
            .args(args);
        let o = run_cmd(&mut cmd, limit);
        assert!(
            o.status.success(),
            "hakaru {} failed ({}): {}",
            args.join(" "),
            o.status,
            err(&o)
        );
        json(&o)
    }

    /// Runs a program inside the client namespace with a time limit and returns its output.
    pub fn in_client(&self, argv: &[&str], limit: Duration) -> Output {
        run_cmd(
            Command::new("ip")
                .env_remove("RUST_LOG")
                .args(["netns", "exec", &self.client_ns])
                .args(argv),
            limit,
        )
    }

    /// Runs a program inside the server namespace (10 s limit) and returns its output.
    pub fn in_server(&self, argv: &[&str]) -> Output {
        run_cmd(
            Command::new("ip")
                .args(["netns", "exec", &self.server_ns])
                .args(argv),
            Duration::from_secs(10),
        )
    }

    /// Like [`Link::in_server`], failing the test if the program fails.
    pub fn must_in_server(&self, argv: &[&str]) -> Output {
        let o = self.in_server(argv);
        assert!(
            o.status.success(),
            "`{}` in {} failed: {}",
            argv.join(" "),
            self.server_ns,
            err(&o)
        );
        o
    }

    /// Packets the server's veth end has received so far (its rx_packets statistic).
    pub fn server_rx_packets(&self) -> u64 {
        let path = format!("/sys/class/net/{}/statistics/rx_packets", self.server_dev);
        // sysfs shows the interfaces of the reader's namespace, so read it from inside.
        let o = self.must_in_server(&["cat", &path]);
        let text = String::from_utf8_lossy(&o.stdout);
        text.trim()
            .parse()
            .unwrap_or_else(|e| panic!("{path} holds {text:?}: {e}"))
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        for ns in &self.created {
            // No run_cmd here: a panic inside drop while unwinding would abort the test binary.
            match Command::new("ip").args(["netns", "del", ns]).output() {
                Ok(o) if o.status.success() => {}
                Ok(o) => eprintln!("netns: could not delete {ns}: {}", err(&o)),
                Err(e) => eprintln!("netns: could not run `ip netns del {ns}`: {e}"),
            }
        }
    }
}

/// Builds a namespace setup with `create`, or says why this machine cannot and returns `None`
/// (the test then returns early): namespaces need root, `ip` and `tools` (program, Debian
/// package). Under HAKARU_TEST_NETNS=required no root or a failing `create` fails the test
/// instead (`common::netns_unavailable`); a missing program is a [`peer`], which fails it under
/// HAKARU_TEST_PEERS=required.
pub(super) fn netns_setup<T>(
    tools: &[(&str, &str)],
    create: impl FnOnce() -> Result<T, String>,
) -> Option<T> {
    netns_setup_with(NetnsMode::from_env(), is_root(), tools, || {
        forced_failure().map_or_else(create, Err)
    })
}

/// [`netns_setup`] with the mode and whether this is root given.
pub(super) fn netns_setup_with<T>(
    mode: NetnsMode,
    root: bool,
    tools: &[(&str, &str)],
    create: impl FnOnce() -> Result<T, String>,
) -> Option<T> {
    if !root {
        netns_unavailable(mode, SkipKind::Root, "network namespaces need root");
        return None;
    }
    if ![("ip", "iproute2")]
        .iter()
        .chain(tools)
        .all(|(prog, package)| peer(prog, package))
    {
        return None;
    }
    match create() {
        Ok(v) => Some(v),
        Err(why) => {
            netns_unavailable(mode, SkipKind::Netns, &why);
            None
        }
    }
}

/// For checking what a failed set-up does: with `HAKARU_TEST_NETNS_FAIL=1` every namespace
/// set-up fails, at a real `ip netns add` of a name `ip` refuses, before anything is made.
fn forced_failure() -> Option<String> {
    std::env::var_os("HAKARU_TEST_NETNS_FAIL").filter(|v| !v.is_empty())?;
    let o = ip(&["netns", "add", "hk/forced-failure"]);
    Some(format!(
        "`ip netns add hk/forced-failure` failed ({}; HAKARU_TEST_NETNS_FAIL is set): {}",
        o.status,
        err(&o)
    ))
}

#[test]
fn a_namespace_set_up_that_fails_fails_the_test_when_namespaces_are_required() {
    use super::common::{panic_text, skips_of};
    let why = "`ip netns add hk-c-1-0` failed: mount --make-shared /run/netns failed";
    let broken = || Err::<(), String>(why.to_string());
    let (got, lines) = skips_of(|| {
        std::panic::catch_unwind(|| netns_setup_with(NetnsMode::Required, true, &[], broken))
    });
    let msg = panic_text(&*got.expect_err("required: a failed set-up must fail the test"));
    assert!(
        msg.contains(why),
        "the failure names the command and its stderr: {msg}"
    );
    assert!(lines.is_empty(), "{lines:?}");
    let (got, lines) = skips_of(|| netns_setup_with(NetnsMode::Optional, true, &[], broken));
    assert!(got.is_none());
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].ends_with(&format!(": netns: {why}")), "{lines:?}");
    // A set-up that works is the same in both modes.
    for mode in [NetnsMode::Optional, NetnsMode::Required] {
        let (got, lines) = skips_of(|| netns_setup_with(mode, true, &[], || Ok(7)));
        assert_eq!((got, lines.len()), (Some(7), 0));
    }
}

#[test]
fn no_root_fails_a_namespace_test_when_namespaces_are_required() {
    use super::common::{panic_text, skips_of};
    let made = std::cell::Cell::new(false);
    let create = || {
        made.set(true);
        Ok(())
    };
    let (got, _) = skips_of(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            netns_setup_with(NetnsMode::Required, false, &[], create)
        }))
    });
    let msg = panic_text(&*got.expect_err("required: no root must fail the test"));
    assert!(msg.contains("need root"), "{msg}");
    let (got, lines) = skips_of(|| netns_setup_with(NetnsMode::Optional, false, &[], create));
    assert!(got.is_none());
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].ends_with(": root: network namespaces need root"),
        "{lines:?}"
    );
    assert!(!made.get(), "nothing is made without root");
}

/// Runs `ip` with a time limit.
pub(super) fn ip(args: &[&str]) -> Output {
    run_cmd(Command::new("ip").args(args), Duration::from_secs(10))
}

/// Runs `ip` and fails the test if it fails: past `ip netns add`, a failure is a broken setup,
/// not a missing feature.
pub(super) fn must(args: &[&str]) {
    let o = ip(args);
    assert!(
        o.status.success(),
        "`ip {}` failed: {}",
        args.join(" "),
        err(&o)
    );
}

/// Stderr, trimmed for one-line messages.
fn err(o: &Output) -> String {
    stderr(o).trim().to_string()
}

/// CPU time the hypervisor took from this VM (the `steal` column of /proc/stat) over a
/// measurement. Shaped-rate checks assume the CPUs that push packets through veth and tbf are
/// there: when the host steals a large share, the link carries less than its rate for reasons
/// outside the code under test, and such a run cannot check a rate.
pub(super) struct StealWatch(Option<(u64, u64)>);

/// Share of CPU time stolen above which a shaped-rate check is not made.
const STEAL_LIMIT: f64 = 0.05;

fn steal_and_total() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user already).
    let total: u64 = v.iter().take(8).sum();
    Some((*v.get(7)?, total))
}

impl StealWatch {
    /// Starts watching now.
    pub fn start() -> StealWatch {
        StealWatch(steal_and_total())
    }

    /// Share of all CPU time stolen since [`StealWatch::start`].
    pub fn share(&self) -> f64 {
        match (self.0, steal_and_total()) {
            (Some((s0, t0)), Some((s1, t1))) if t1 > t0 => {
                s1.saturating_sub(s0) as f64 / (t1 - t0) as f64
            }
            _ => 0.0,
        }
    }

    /// True, after a SKIPPED line saying why (`common::skip`), when more than 5 % of the CPU
    /// time was stolen.
    pub fn spoiled(&self, what: &str) -> bool {
        let share = self.share();
        let bad = share > STEAL_LIMIT;
        if bad {
            skip(
                SkipKind::Steal,
                &format!(
                    "the rate check of {what} is not made: the hypervisor stole {:.1} % of the CPU time during the run (more than {:.0} %)",
                    share * 100.0,
                    STEAL_LIMIT * 100.0
                ),
            );
        }
        bad
    }
}

/// What a qdisc has passed, sampled from inside a namespace every 20 ms while a test runs:
/// the truth of a shaped run read from the kernel, so a run whose link idled for a moment (a
/// sender held off a loaded machine's CPUs) is judged against what the link really carried.
pub struct QdiscSamples {
    child: std::process::Child,
    reader: std::thread::JoinHandle<Vec<(f64, u64, u64)>>,
}

/// Prints `unix-time bytes packets` of the device's root qdisc every 20 ms, the time taken
/// halfway through the `tc` call; at most 4000 samples (under two minutes).
const SAMPLER: &str = "import re,subprocess,sys,time
for _ in range(4000):
    a=time.time()
    o=subprocess.run(['tc','-s','qdisc','show','dev',sys.argv[1]],capture_output=True,text=True).stdout
    b=time.time()
    m=re.search(r'Sent (\\d+) bytes (\\d+) pkt',o)
    if m: print((a+b)/2,m.group(1),m.group(2),flush=True)
    time.sleep(0.02)
";

impl QdiscSamples {
    /// Starts sampling `dev`'s root qdisc in namespace `ns` (needs python3 and tc).
    pub fn start(ns: &str, dev: &str) -> QdiscSamples {
        use std::io::BufRead;
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, "python3", "-c", SAMPLER, dev])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 in the namespace");
        let mut out = std::io::BufReader::new(child.stdout.take().expect("piped"));
        let parse = |l: &str| -> Option<(f64, u64, u64)> {
            let mut f = l.split_whitespace();
            Some((
                f.next()?.parse().ok()?,
                f.next()?.parse().ok()?,
                f.next()?.parse().ok()?,
            ))
        };
        // The first sample is read here, so a run started after this returns is covered from
        // its beginning.
        let mut first = String::new();
        let _ = out.read_line(&mut first);
        let first = parse(&first).unwrap_or_else(|| panic!("no qdisc sample from {dev} in {ns}"));
        let reader = std::thread::spawn(move || {
            std::iter::once(first)
                .chain(out.lines().map_while(Result::ok).filter_map(|l| parse(&l)))
                .collect()
        });
        QdiscSamples { child, reader }
    }

    /// Stops the sampler (by its PID) and returns `(bytes, packets)` the qdisc passed between
    /// the two Unix times, each end interpolated between the samples around it.
    pub fn passed_between(mut self, t0: f64, t1: f64) -> (f64, f64) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let s = self.reader.join().expect("sampler reader");
        let at = |t: f64| -> (f64, f64) {
            let i = s.partition_point(|x| x.0 <= t);
            assert!(
                i > 0 && i < s.len(),
                "qdisc samples ({} from {:?} to {:?}) do not cover {t}",
                s.len(),
                s.first().map(|x| x.0),
                s.last().map(|x| x.0)
            );
            let (a, b) = (s[i - 1], s[i]);
            let k = (t - a.0) / (b.0 - a.0);
            let lerp = |x: u64, y: u64| x as f64 + k * (y as f64 - x as f64);
            (lerp(a.1, b.1), lerp(a.2, b.2))
        };
        let (b0, p0) = at(t0);
        let (b1, p1) = at(t1);
        (b1 - b0, p1 - p0)
    }
}
