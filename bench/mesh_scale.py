#!/usr/bin/env python3
"""A fleet of mesh agents on this machine: N `hakaru server --mesh` agents (100 by default) in
network namespaces, in racks of 10 behind rack bridges whose uplinks join one core bridge, all
probing each other once a second. Measures what the mesh costs and how fast it names a fault.

Usage: python3 bench/mesh_scale.py [--hosts 100] [--rack 10] [--settle 40] [--measure 30]
                                   [--write docs/BENCHMARKS.md]

1. Starts the agents (`--mesh-interval 1s --mesh-window 30s`, the rest defaults: at most 100
   probes a second each, so 99 peers are each probed every second) and waits `--settle` s.
2. Over `--measure` s: each agent's CPU (utime + stime from /proc) and RSS, the probes sent in
   all (from `hakaru mesh report --json`'s `sent` counters at both ends), and how long one
   `hakaru mesh report` takes over all agents and how many pairs it has.
3. Fault 1: one host's input drops 5 % of UDP to the mesh port (nftables in its namespace).
   The time until `hakaru mesh report` names that host, and only it (polled every 2 s).
4. Fault 2: one rack's uplink is shaped with tbf (1 Mbit/s both ways, a 3,000-byte queue) below
   what its probes need. The time until the report names the rack (`rack=rK`) first and no host
   outside it (the rack's own agents may also be listed: the report's fetches cross the same
   choked uplink).

All namespaces share one kernel, whose ARP table is one for all of them: 100 hosts knowing
99 neighbours each is 9,900 entries, past the default limit of 1,024 (gc_thresh3), where the
kernel drops ARP and the mesh breaks apart. The script raises net.ipv4.neigh.default.gc_thresh1/2/3
for the run and puts them back after (on real machines each host has its own table).

Addresses are 198.18.0.0/16 (RFC 2544) inside namespaces the script creates; every process is
stopped by its PID and every namespace deleted at the end, also on Ctrl-C. Needs root,
`cargo build --release`, nftables and iproute2.
"""
import argparse, json, os, signal, statistics, subprocess, sys, time

from benchlib import cpu_model, loadavg, process_cpu, write_block

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAKARU = os.path.join(ROOT, "target", "release", "hakaru")
PORT = 5209
TAG = f"hkm{os.getpid() % 100000}"


def sh(*argv, check=True):
    o = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if check and o.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {o.stderr.strip()}")
    return o


class Fleet:
    def __init__(self, hosts, rack):
        self.n, self.rack = hosts, rack
        self.core = f"{TAG}-core"
        self.racks = [f"{TAG}-r{k}" for k in range((hosts + rack - 1) // rack)]
        self.hosts = [f"{TAG}-h{i}" for i in range(hosts)]
        self.ips = [f"198.18.{i // rack}.{i % rack + 1}" for i in range(hosts)]
        self.procs = []
        self.made = []

    def ns(self, name):
        sh("ip", "netns", "add", name)
        self.made.append(name)
        sh("ip", "-n", name, "link", "set", "lo", "up")

    def build(self):
        self.ns(self.core)
        sh("ip", "-n", self.core, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.core, "link", "set", "br0", "up")
        for k, r in enumerate(self.racks):
            self.ns(r)
            sh("ip", "-n", r, "link", "add", "br0", "type", "bridge")
            sh("ip", "-n", r, "link", "set", "br0", "up")
            # The rack's uplink: `uplink` in the rack, `rK` on the core bridge.
            sh("ip", "-n", r, "link", "add", "uplink", "type", "veth", "peer", "name", f"r{k}", "netns", self.core)
            sh("ip", "-n", r, "link", "set", "uplink", "master", "br0", "up")
            sh("ip", "-n", self.core, "link", "set", f"r{k}", "master", "br0", "up")
        for i, h in enumerate(self.hosts):
            r = self.racks[i // self.rack]
            self.ns(h)
            sh("ip", "-n", r, "link", "add", f"h{i}", "type", "veth", "peer", "name", "eth0", "netns", h)
            sh("ip", "-n", r, "link", "set", f"h{i}", "master", "br0", "up")
            sh("ip", "-n", h, "addr", "add", f"{self.ips[i]}/16", "dev", "eth0")
            sh("ip", "-n", h, "link", "set", "eth0", "up")

    def start(self, peers):
        for i, h in enumerate(self.hosts):
            p = subprocess.Popen(
                ["ip", "netns", "exec", h, HAKARU, "server", "-B", self.ips[i], "-p", "5201",
                 "--mesh", peers, "--mesh-interval", "1s", "--mesh-window", "30s"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.procs.append(p)

    def pids(self):
        """The agents' own PIDs (the children of `ip netns exec`, which execs: the same)."""
        return [p.pid for p in self.procs]

    def report(self, peers):
        t = time.time()
        o = sh("ip", "netns", "exec", self.hosts[0], HAKARU, "mesh", "report", "--peers", peers, "--json")
        return json.loads(o.stdout), time.time() - t

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
        for n in reversed(self.made):
            sh("ip", "netns", "del", n, check=False)


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def until_named(fleet, peers, want, limit=120):
    """Seconds until the report's first suspect is `want` (a host, or a group `key=value`) and
    every other suspect is one of that group's hosts (from the report's host, across a choked
    uplink, their agents may not answer either): no healthy host named."""
    t0 = time.time()
    while time.time() - t0 < limit:
        r, _ = fleet.report(peers)
        s = r["suspects"]
        if s and s[0]["host"] == want and all(x["host"] in s[0]["members"] for x in s[1:]):
            return time.time() - t0, r
        time.sleep(2)
    return None, r


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--hosts", type=int, default=100)
    a.add_argument("--rack", type=int, default=10)
    a.add_argument("--settle", type=int, default=40)
    a.add_argument("--measure", type=int, default=30)
    a.add_argument("--write")
    args = a.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces)")
    fleet = Fleet(args.hosts, args.rack)
    peers = f"/tmp/{TAG}-peers.txt"
    with open(peers, "w") as f:
        for i, ip in enumerate(fleet.ips):
            f.write(f"{ip} rack=r{i // args.rack}\n")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    gc = {f"net.ipv4.neigh.default.gc_thresh{i}": v for i, v in [(1, 16384), (2, 32768), (3, 65536)]}
    old = {k: sh("sysctl", "-n", k).stdout.strip() for k in gc}
    for k, v in gc.items():
        sh("sysctl", "-q", "-w", f"{k}={v}")
    try:
        t = time.time()
        fleet.build()
        build_s = time.time() - t
        fleet.start(peers)
        time.sleep(args.settle)
        pids = fleet.pids()
        r0, _ = fleet.report(peers)
        c0 = [process_cpu(p) for p in pids]
        t0 = time.time()
        time.sleep(args.measure)
        c1 = [process_cpu(p) for p in pids]
        dt = time.time() - t0
        r1, report_s = fleet.report(peers)
        cpu = [(b - a_) / dt * 100 for a_, b in zip(c0, c1)]
        rss = [rss_kib(p) for p in pids]
        pairs = len(r1["pairs"])
        answered = sum(1 for h in r1["hosts"] if h["answered"])
        lossy = sum(1 for p in r1["pairs"] if (p["loss"] or 0) > 0)
        clean_suspects = len(r1["suspects"])
        # Probes a second the whole fleet sent over the measured time (the agents' counters).
        probes_per_s = (sum_sent(r1) - sum_sent(r0)) / (dt + report_s)
        # Fault 1: one host's input drops 5 %.
        bad = args.hosts // 3 + 7
        h = fleet.hosts[bad]
        sh("ip", "netns", "exec", h, "nft", "add table inet hkm")
        sh("ip", "netns", "exec", h, "nft", "add chain inet hkm in { type filter hook input priority 0; }")
        sh("ip", "netns", "exec", h, "nft", f"add rule inet hkm in udp dport {PORT} numgen random mod 100 < 5 drop")
        host_s, rh = until_named(fleet, peers, fleet.ips[bad])
        sh("ip", "netns", "exec", h, "nft", "delete table inet hkm")
        # Let the window forget it.
        time.sleep(32)
        # Fault 2: one rack's uplink shaped below what its probes need.
        k = len(fleet.racks) // 2
        for ns, dev in [(fleet.racks[k], "uplink"), (fleet.core, f"r{k}")]:
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
               "rate", "1mbit", "burst", "3000", "limit", "3000")
        rack_s, rr = until_named(fleet, peers, f"rack=r{k}")
    finally:
        fleet.close()
        os.unlink(peers)
        for k, v in old.items():
            sh("sysctl", "-q", "-w", f"{k}={v}", check=False)
    q = lambda v: f"{statistics.median(v):.2f} (max {max(v):.2f})"
    rows = [
        ("agents; ordered pairs", f"{args.hosts}; {args.hosts * (args.hosts - 1)}"),
        ("namespaces and links built in", f"{build_s:.1f} s"),
        ("pairs in one `hakaru mesh report`; agents that answered", f"{pairs}; {answered}"),
        ("pairs with any loss; suspects, healthy fleet", f"{lossy}; {clean_suspects}"),
        ("`hakaru mesh report` over all agents", f"{report_s:.2f} s"),
        ("probes sent per second, whole fleet", f"{probes_per_s:.0f}"),
        ("CPU per agent, % of one CPU: median (max)", q(cpu)),
        ("RSS per agent, MiB: median (max)", q([x / 1024 for x in rss])),
        (f"time to name one host dropping 5 % of its input", f"{host_s:.0f} s" if host_s else "not named in 120 s"),
        (f"time to name one rack ({args.rack} hosts) behind a 1 Mbit/s uplink", f"{rack_s:.0f} s" if rack_s else "not named in 120 s"),
    ]
    table = "| figure | value |\n|---|---|\n" + "".join(f"| {a_} | {b} |\n" for a_, b in rows)
    head = (f"`python3 bench/mesh_scale.py --hosts {args.hosts} --rack {args.rack} --settle {args.settle} "
            f"--measure {args.measure}` ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, "
            f"{cpu_model()}, load {loadavg()}; release build):\n\n")
    print(head + table)
    if not host_s or not rack_s:
        print("suspects at the end:", json.dumps(rh["suspects"] if not host_s else rr["suspects"], indent=1))
    if args.write:
        write_block(args.write, "mesh-scale", head + table, "## The fleet mesh at 100 hosts")


def sum_sent(r):
    return sum(p["sent"] for p in r["pairs"])


if __name__ == "__main__":
    main()
