#!/usr/bin/env python3
"""Packet rate with many flows: hakaru pps -P N against hakaru pps -P 1 and iperf3 -u -b 0 -l 16 -P N.

Usage: python3 bench/pps_flows.py [--flows 1,2,8,64,256] [--rounds 5] [--time 3]
                                  [--path loopback|veth] [--reverse] [--port-per-flow]
                                  [--write docs/BENCHMARKS.md]
       python3 bench/pps_flows.py --path veth --demux-check N [--rounds 8] [--time 2]
       python3 bench/pps_flows.py --path veth --profile N [--time 2]   (needs perf)

This VM's speed changes in phases of ten to twenty seconds (the same run gives 0.8 or 1.6 Mpps),
so every comparison is made between runs next to each other: each round runs, for every N, the
triple hakaru -P 1, hakaru -P N, iperf3 -P N (reversed on odd rounds), and the ratios are the
medians over rounds of each triple's ratios. One `hakaru server` and one `iperf3 -s` serve the
whole run (separate processes, stopped by PID).

--path veth puts both servers in a network namespace of their own, reached over a veth pair
(10.77.0.1 <-> 10.77.0.2) with segmentation and receive offloads off on both ends, so every
datagram crosses as one packet; the namespace is deleted at the end.

The figure is what the receiver counted: hakaru's totals[0].udp.received_pps; for iperf3 the
server's datagrams (end.sum.packets minus end.sum.lost_packets from the client's -J, which
carries the server's receiver figures) over end.sum.seconds. iperf3 takes at most -P 128, so
its 256-flow case runs 128 flows (said in the table). The issue's goal: at most 10 % below
hakaru -P 1 at every N, and at least 4x iperf3.
"""
import argparse, json, os, re, statistics, subprocess, sys, tempfile, time

from benchlib import stop_process, write_block

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
HAKARU = os.path.join(TARGET, "release", "hakaru")
HK_PORT, IP_PORT = 5371, 5372
NS, HOST_IP, NS_IP = "hkbench-pps", "10.77.0.1", "10.77.0.2"
HEADING = "## Packet rate with many flows: hakaru pps -P N against iperf3 -P N"


def run(cmd, limit):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd} failed: {p.stderr[-400:]}")
    return p.stdout


def sh(*cmd, check=True):
    return subprocess.run(cmd, capture_output=True, text=True, check=check)


REVERSE = []
HAKARU_EXTRA = []


def hakaru(target, n, secs):
    out = run([HAKARU, "pps", target, "-p", str(HK_PORT), "-P", str(n), "-t", str(secs), "-i", "0", "--json"]
              + REVERSE + HAKARU_EXTRA, secs + 60)
    return json.loads(out)["totals"][0]["udp"]["received_pps"]


def iperf3(target, n, secs):
    out = run(["iperf3", "-c", target, "-p", str(IP_PORT), "-u", "-b", "0", "-l", "16", "-P", str(min(n, 128)),
               "-t", str(secs), "-J"] + REVERSE, secs + 60)
    s = json.loads(out)["end"]["sum"]
    return (s["packets"] - s["lost_packets"]) / s["seconds"]


def veth_up():
    sh("ip", "netns", "del", NS, check=False)
    sh("ip", "netns", "add", NS)
    sh("ip", "link", "add", "hkb0", "type", "veth", "peer", "name", "hkb1", "netns", NS)
    sh("ip", "addr", "add", f"{HOST_IP}/24", "dev", "hkb0")
    sh("ip", "-n", NS, "addr", "add", f"{NS_IP}/24", "dev", "hkb1")
    sh("ip", "link", "set", "hkb0", "up")
    sh("ip", "-n", NS, "link", "set", "hkb1", "up")
    sh("ip", "-n", NS, "link", "set", "lo", "up")
    off = ["gso", "off", "tso", "off", "gro", "off", "tx-udp-segmentation", "off"]
    sh("ethtool", "-K", "hkb0", *off, check=False)
    sh("ip", "netns", "exec", NS, "ethtool", "-K", "hkb1", *off, check=False)


def veth_down():
    sh("ip", "link", "del", "hkb0", check=False)
    sh("ip", "netns", "del", NS, check=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flows", default="1,2,8,64,256")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--time", type=int, default=3)
    ap.add_argument("--path", choices=["loopback", "veth"], default="loopback")
    ap.add_argument("--reverse", action="store_true",
                    help="the servers send and the clients receive (-R for both tools)")
    ap.add_argument("--demux-check", type=int, metavar="N",
                    help="veth only: instead of the sweep, run hakaru -P 1 with the namespace's "
                         "net.ipv4.udp_early_demux on and off, and hakaru -P N with it on, in interleaved rounds")
    ap.add_argument("--profile", type=int, metavar="N",
                    help="veth only: instead of the sweep, perf record -a one hakaru run each of -P 1, -P N and "
                         "-P N --port-per-flow, and tabulate where the samples went")
    ap.add_argument("--port-per-flow", action="store_true",
                    help="hakaru's flows each get a server port of their own (--port-per-flow)")
    ap.add_argument("--write")
    a = ap.parse_args()
    if a.reverse:
        REVERSE.append("-R")
    if a.port_per_flow:
        HAKARU_EXTRA.append("--port-per-flow")
    flows = [int(x) for x in a.flows.split(",")]
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "hakaru"], cwd=ROOT, check=True)
    prefix, target = [], "127.0.0.1"
    if (a.demux_check or a.profile) and a.path != "veth":
        ap.error("--demux-check and --profile need --path veth")
    if a.path == "veth":
        veth_up()
        prefix, target = ["ip", "netns", "exec", NS], NS_IP
    hs = subprocess.Popen(prefix + [HAKARU, "server", "-B", target, "-p", str(HK_PORT)], stderr=subprocess.DEVNULL)
    ips = subprocess.Popen(prefix + ["iperf3", "-s", "-B", target, "-p", str(IP_PORT)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    if a.demux_check or a.profile:
        try:
            (demux_check if a.demux_check else profile)(a, target)
        finally:
            for p in (hs, ips):
                stop_process(p)
            veth_down()
        return
    # res[n] = list of (hakaru -P 1, hakaru -P n, iperf3 -P n), one triple per round.
    res = {n: [] for n in flows}
    try:
        for rnd in range(a.rounds):
            for n in flows:
                cases = [("one", 1, hakaru), ("hk", n, hakaru), ("ip", n, iperf3)]
                if n == 1:
                    cases = cases[1:]
                if rnd % 2:
                    cases.reverse()
                got = {}
                for key, k, fn in cases:
                    got[key] = fn(target, k, a.time)
                    time.sleep(0.5)
                got.setdefault("one", got["hk"])
                res[n].append((got["one"], got["hk"], got["ip"]))
                print(f"round {rnd + 1}: -P {n}: hakaru {got['hk'] / 1e6:.3f} Mpps (-P 1 beside it "
                      f"{got['one'] / 1e6:.3f}), iperf3 {got['ip'] / 1e6:.3f} Mpps", file=sys.stderr)
    finally:
        for p in (hs, ips):
            stop_process(p)
        if a.path == "veth":
            veth_down()
    where = ("on loopback" if a.path == "loopback" else
             "across a veth pair into a network namespace, segmentation and receive offloads off (one datagram, "
             "one packet)")
    if a.reverse:
        where += ", the servers sending and the clients receiving (-R)"
    if a.port_per_flow:
        where += ", hakaru with --port-per-flow (each flow on a server port of its own)"
    lines = [
        f"Command: `python3 bench/pps_flows.py --flows {a.flows} --rounds {a.rounds} --time {a.time} --path {a.path}"
        f"{' --reverse' if a.reverse else ''}{' --port-per-flow' if a.port_per_flow else ''}` "
        f"({time.strftime('%Y-%m-%d')}; kernel {os.uname().release}, {os.cpu_count()} CPUs; iperf3 -u -b 0 -l 16, "
        f"at most -P 128). Receiver-counted datagrams per second {where}. Each round runs hakaru -P 1, "
        "hakaru -P N and iperf3 -P N back to back; rates are medians over rounds, ratios are medians of "
        "each round's ratios.",
        "",
        "| flows | hakaru Mpps | against hakaru -P 1 beside it | iperf3 Mpps | hakaru/iperf3 | goal: >= 0.9x of -P 1 and >= 4x iperf3 |",
        "|---|---|---|---|---|---|",
    ]
    for n in flows:
        one = [t[0] for t in res[n]]
        hk = [t[1] for t in res[n]]
        ip = [t[2] for t in res[n]]
        rel = statistics.median(h / o for o, h in zip(one, hk))
        ratio = statistics.median(h / i for h, i in zip(hk, ip))
        met = "yes" if (rel >= 0.9 and ratio >= 4.0) else "no"
        lines.append(f"| {n}{' (iperf3 128)' if n > 128 else ''} | {statistics.median(hk) / 1e6:.3f} | {rel:.2f}x | "
                     f"{statistics.median(ip) / 1e6:.3f} | {ratio:.2f}x | {met} |")
    table = "\n".join(lines) + "\n"
    print(table)
    if a.write:
        name = f"pps-flows-{a.path}{'-reverse' if a.reverse else ''}{'-ppf' if a.port_per_flow else ''}"
        write_block(os.path.join(ROOT, a.write), name, table, HEADING)


def demux_check(a, target):
    """The kernel's UDP early demux matches only the first socket in the local address:port's
    hash chain (net/ipv4/udp.c, __udp4_lib_demux_lookup), so of N flow sockets on the server's
    one port only one skips the full socket and route lookups. This measures what that costs:
    one flow with early demux off against one flow with it on and N flows with it on."""
    n = a.demux_check
    knob = ["ip", "netns", "exec", NS, "sysctl", "-q"]
    rows = []
    for rnd in range(a.rounds):
        got = {}
        cases = [("on", 1, "1"), ("off", 1, "0"), ("many", n, "1")]
        if rnd % 2:
            cases.reverse()
        for key, k, demux in cases:
            sh(*knob, f"net.ipv4.udp_early_demux={demux}")
            got[key] = hakaru(target, k, a.time)
            time.sleep(0.5)
        sh(*knob, "net.ipv4.udp_early_demux=1")
        rows.append(got)
        print(f"round {rnd + 1}: -P 1 demux on {got['on'] / 1e6:.3f}, off {got['off'] / 1e6:.3f}, "
              f"-P {n} on {got['many'] / 1e6:.3f} Mpps", file=sys.stderr)
    med = {k: statistics.median(r[k] for r in rows) for k in ("on", "off", "many")}
    rel = {k: statistics.median(r[k] / r["on"] for r in rows) for k in ("off", "many")}
    table = (
        f"Command: `python3 bench/pps_flows.py --path veth --demux-check {n} --rounds {a.rounds} --time {a.time}` "
        f"({time.strftime('%Y-%m-%d')}; kernel {os.uname().release}, {os.cpu_count()} CPUs). Receiver-counted "
        "datagrams per second into the namespace; the sysctl is the receiving namespace's.\n\n"
        "| case | hakaru Mpps (median) | against -P 1 with early demux (median of round ratios) |\n"
        "|---|---|---|\n"
        f"| -P 1, net.ipv4.udp_early_demux=1 | {med['on'] / 1e6:.3f} | 1.00x |\n"
        f"| -P 1, net.ipv4.udp_early_demux=0 | {med['off'] / 1e6:.3f} | {rel['off']:.2f}x |\n"
        f"| -P {n}, net.ipv4.udp_early_demux=1 | {med['many'] / 1e6:.3f} | {rel['many']:.2f}x |\n")
    print(table)
    if a.write:
        write_block(os.path.join(ROOT, a.write), "pps-flows-demux", table, HEADING)


# The lookups a datagram pays when early demux does not find its socket.
FULL_LOOKUP = ("fib_table_lookup", "__udp4_lib_lookup", "fib_lookup_good_nhc", "fib_validate_source")


def perf_shares(data, key):
    """Percent of all samples per binary (`dso`) or per symbol, from perf report."""
    out = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "--sort", key],
                         capture_output=True, text=True, check=True).stdout
    pat = r"^\s*([\d.]+)%\s+(\S+)$" if key == "dso" else r"^\s*([\d.]+)%\s+\[.\]\s+(\S+)"
    shares = {}
    for line in out.splitlines():
        m = re.match(pat, line.rstrip())
        if m:
            shares[m.group(2)] = shares.get(m.group(2), 0.0) + float(m.group(1))
    return shares


def profile(a, target):
    """Where the samples of both ends go (perf record -a, both CPUs): the kernel against hakaru
    and libc, and the full socket and route lookups that early demux saves, for one flow, N
    flows on the server's shared port and N flows with a server port each."""
    n = a.profile
    cases = [("-P 1", 1, []), (f"-P {n}", n, []), (f"-P {n} --port-per-flow", n, ["--port-per-flow"])]
    lines = [
        f"Command: `python3 bench/pps_flows.py --path veth --profile {n} --time {a.time}` "
        f"({time.strftime('%Y-%m-%d')}; kernel {os.uname().release}, {os.cpu_count()} CPUs). One "
        f"`perf record -a` over each `hakaru pps 10.77.0.2 ... -t {a.time}` into the namespace, both ends; "
        "percent of all samples.",
        "",
        "| case | kernel | hakaru binary | libc | full socket and route lookups | udp_v4_early_demux |",
        "|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for label, k, extra in cases:
            data = os.path.join(tmp, "perf.data")
            subprocess.run(["perf", "record", "-q", "-a", "-o", data, "--", HAKARU, "pps", target, "-p",
                            str(HK_PORT), "-P", str(k), "-t", str(a.time), "-i", "0", "--json"] + extra,
                           capture_output=True, timeout=a.time + 120, check=True)
            dso, sym = perf_shares(data, "dso"), perf_shares(data, "symbol")
            lookups = sum(sym.get(x, 0.0) for x in FULL_LOOKUP)
            lines.append(f"| {label} | {dso.get('[kernel.kallsyms]', 0.0):.1f} % | {dso.get('hakaru', 0.0):.1f} % | "
                         f"{dso.get('libc.so.6', 0.0):.1f} % | {lookups:.2f} % | "
                         f"{sym.get('udp_v4_early_demux', 0.0):.2f} % |")
            print(lines[-1], file=sys.stderr)
    table = "\n".join(lines) + "\n"
    print(table)
    if a.write:
        write_block(os.path.join(ROOT, a.write), "pps-flows-profile", table, HEADING)


if __name__ == "__main__":
    main()
