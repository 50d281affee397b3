#!/usr/bin/env python3
"""Round trips and connection rate: hakaru against netperf 2.7.1 and a minimal C program.

Usage: python3 bench/rr_vs_netperf.py [--rounds 5] [--time 3] [--placements unpinned,one,two]
                                      [--cases tcp_rr,udp_rr,crr,crr_rst] [--write docs/BENCHMARKS.md]

Cases (loopback, one flow or connector, blocking waits at both ends):
- tcp_rr:  `hakaru latency -l 14` against `netperf -t TCP_RR -- -r 14,14` (netserver)
- udp_rr:  `hakaru latency --udp -l 14` against `netperf -t UDP_RR -- -r 14,14`
- crr:     `hakaru connect -P 1` (FIN close) against `netperf -t TCP_CRR` (1-byte request and
           response, FIN close)
- crr_rst: `hakaru connect -P 1 --rst` against bench/connect_loop.c (the least a connection
           round can do: socket, connect, 1 byte each way, close with RST; one blocking loop a
           side)
The round-trip cases also run bench/rr_loop.c, the least a blocking round trip can do (one
loop a side, TCP with no timeout per wait), and crr runs bench/connect_loop.c in its fin mode
(the server closes first, as in TCP_CRR), as the reference of what the kernel allows.
Each tool runs against its own server (a separate `hakaru server`, netserver, connect_loop
server), all started here and stopped by PID. Each round runs every case with both tools,
alternating which goes first. Figures: transactions (or connections) per second, and for the
round-trip cases the median round trip (netperf's P50_LATENCY is whole microseconds).
Ratios are hakaru / peer per round; the table gives their medians (rate: higher is better; RTT:
lower is better).

Placements: unpinned (the scheduler decides), one CPU (both ends on CPU 0: every round trip is
two context switches on one CPU) and two CPUs (client on CPU 0, server on CPU 1: every round
trip is two cross-CPU wake-ups).

netperf is built by ../shared/peers/build.sh netperf (into /opt/hakaru-peers/netperf).
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_port, stop_process, wait_port, write_block  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
HAKARU = os.path.join(TARGET, "release", "hakaru")
NETPERF_DIR = "/opt/hakaru-peers/netperf/bin"
PLACES = {"unpinned": (None, None), "one": ("0", "0"), "two": ("0", "1")}
PLACE_NAMES = {"unpinned": "unpinned", "one": "one CPU", "two": "two CPUs"}
CASE_NAMES = {
    "tcp_rr": "TCP round trips (latency vs TCP_RR)",
    "udp_rr": "UDP round trips (latency --udp vs UDP_RR)",
    "crr": "connections, FIN (connect -P 1 vs TCP_CRR)",
    "crr_rst": "connections, RST (connect -P 1 --rst vs connect_loop.c)",
}


def pin(cpu, cmd):
    return (["taskset", "-c", cpu] if cpu is not None else []) + cmd


def run(cmd, limit):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stdout[-400:]}{p.stderr[-400:]}")
    return p.stdout


def hakaru_case(case, port, secs, cpu):
    if case in ("tcp_rr", "udp_rr"):
        args = ["latency", "127.0.0.1", "-p", str(port), "-t", str(secs), "-l", "14", "--format", "json"]
        if case == "udp_rr":
            args.append("--udp")
        lat = json.loads(run(pin(cpu, [HAKARU] + args), secs + 60))["latency"]
        return lat["transactions_per_second"], lat["rtt"]["p50_us"]
    args = ["connect", "127.0.0.1", "-p", str(port), "-P", "1", "-t", str(secs), "--format", "json"]
    if case == "crr_rst":
        args.append("--rst")
    con = json.loads(run(pin(cpu, [HAKARU] + args), secs + 60))["connect"]
    return con["connections_per_second"], None


def netperf_case(case, port, secs, cpu):
    test = {"tcp_rr": "TCP_RR", "udp_rr": "UDP_RR", "crr": "TCP_CRR"}[case]
    extra = ["-r", "14,14"] if case != "crr" else []
    out = run(pin(cpu, [f"{NETPERF_DIR}/netperf", "-H", "127.0.0.1", "-p", str(port), "-P", "0",
                        "-l", str(secs), "-t", test, "--", "-k", "THROUGHPUT,P50_LATENCY"] + extra),
              secs + 60)
    kv = dict(l.split("=", 1) for l in out.splitlines() if "=" in l)
    p50 = float(kv["P50_LATENCY"]) if case != "crr" else None
    return float(kv["THROUGHPUT"]), p50


def loop_case(loop, secs, ccpu, scpu, fin=False):
    port = free_port()
    mode = ["fin"] if fin else []
    srv = subprocess.Popen(pin(scpu, [loop, "server", str(port), str(secs + 5)] + mode),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port_quiet(port)
        out = run(pin(ccpu, [loop, "client", "127.0.0.1", str(port), str(secs)] + mode), secs + 30)
    finally:
        stop_process(srv)
    # "N connections/s, F failed" (bench/connect_loop.c)
    return float(out.split()[0]), None


def rr_loop_case(rr, case, secs, ccpu, scpu):
    port = free_port()
    proto = "tcp" if case == "tcp_rr" else "udp"
    srv = subprocess.Popen(pin(scpu, [rr, "server", proto, str(port), str(secs + 5)]),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if proto == "tcp":
            wait_port_quiet(port)
        else:
            time.sleep(0.2)
        out = run(pin(ccpu, [rr, "client", proto, "127.0.0.1", str(port), str(secs)]), secs + 30)
    finally:
        stop_process(srv)
    return float(out.split()[0]), None


def wait_port_quiet(port):
    # connect_loop's server counts every connection; probing it with one is harmless (it
    # serves it) but would show as a failure in a strict server, so wait on the listen state.
    end = time.time() + 10
    while time.time() < end:
        if f":{port:04X}" in open("/proc/net/tcp").read():
            return
        time.sleep(0.05)
    raise RuntimeError(f"connect_loop server did not listen on {port}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--time", type=int, default=3)
    ap.add_argument("--placements", default="unpinned,one,two")
    ap.add_argument("--cases", default="tcp_rr,udp_rr,crr,crr_rst")
    ap.add_argument("--write", default=None)
    a = ap.parse_args()
    places = a.placements.split(",")
    cases = a.cases.split(",")
    tmp = tempfile.mkdtemp()
    loop = os.path.join(tmp, "connect_loop")
    subprocess.run(["cc", "-O2", "-o", loop, os.path.join(ROOT, "bench", "connect_loop.c")], check=True)
    rr = os.path.join(tmp, "rr_loop")
    subprocess.run(["cc", "-O2", "-o", rr, os.path.join(ROOT, "bench", "rr_loop.c")], check=True)

    rows = []
    for place in places:
        ccpu, scpu = PLACES[place]
        hp, npp = free_port(), free_port()
        hs = subprocess.Popen(pin(scpu, [HAKARU, "server", "-p", str(hp), "--bind", "127.0.0.1"]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ns = subprocess.Popen(pin(scpu, [f"{NETPERF_DIR}/netserver", "-D", "-p", str(npp)]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_port(hp)
            wait_port(npp)
            res = {c: {"h": [], "p": [], "rate": [], "rtt": [], "ref": [], "refr": []} for c in cases}
            for r in range(a.rounds):
                for c in cases:
                    def peer():
                        if c == "crr_rst":
                            return loop_case(loop, a.time, ccpu, scpu)
                        return netperf_case(c, npp, a.time, ccpu)
                    order = [("h", lambda: hakaru_case(c, hp, a.time, ccpu)), ("p", peer)]
                    if c in ("tcp_rr", "udp_rr"):
                        order.append(("r", lambda: rr_loop_case(rr, c, a.time, ccpu, scpu)))
                    if c == "crr":
                        order.append(("r", lambda: loop_case(loop, a.time, ccpu, scpu, fin=True)))
                    if r % 2:
                        order.reverse()
                    got = {}
                    for who, f in order:
                        got[who] = f()
                    (hr, hl), (pr, pl) = got["h"], got["p"]
                    res[c]["h"].append((hr, hl))
                    res[c]["p"].append((pr, pl))
                    res[c]["rate"].append(hr / pr)
                    if hl is not None and pl:
                        res[c]["rtt"].append(hl / pl)
                    if "r" in got:
                        res[c]["ref"].append(got["r"][0])
                        res[c]["refr"].append(hr / got["r"][0])
                    print(f"{place} round {r + 1} {c}: hakaru {hr:.0f}/s p50 {hl} us, peer {pr:.0f}/s p50 {pl} us"
                          + (f", reference {got['r'][0]:.0f}/s" if "r" in got else ""),
                          file=sys.stderr, flush=True)
        finally:
            stop_process(hs)
            stop_process(ns)
        for c in cases:
            d = res[c]
            rows.append((PLACE_NAMES[place], CASE_NAMES[c],
                         statistics.median(x[0] for x in d["h"]), statistics.median(x[0] for x in d["p"]),
                         statistics.median(d["rate"]),
                         statistics.median(x[1] for x in d["h"]) if d["rtt"] else None,
                         statistics.median(x[1] for x in d["p"]) if d["rtt"] else None,
                         statistics.median(d["rtt"]) if d["rtt"] else None,
                         statistics.median(d["ref"]) if d["ref"] else None,
                         statistics.median(d["refr"]) if d["refr"] else None))

    cmd = " ".join(["python3 bench/rr_vs_netperf.py"] + sys.argv[1:])
    out = [f"Command: `{cmd}` ({a.rounds} rounds of {a.time} s; load average at the end "
           f"{open('/proc/loadavg').read().split()[0]})", "",
           "| placement | case | hakaru /s | peer /s | rate ratio | hakaru p50 | peer p50 | p50 ratio | reference /s | hakaru / reference |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (pl, c, h, p, rr, hl, pl50, lr, ref, refr) in rows:
        lat = (f"{hl:.1f} us | {pl50:.0f} us | {lr:.2f}x" if lr is not None else "- | - | -")
        rf = f"{ref:.0f} | {refr:.2f}x" if ref is not None else "- | -"
        out.append(f"| {pl} | {c} | {h:.0f} | {p:.0f} | {rr:.2f}x | {lat} | {rf} |")
    block = "\n".join(out) + "\n"
    print(block)
    if a.write:
        write_block(a.write, "rr-vs-netperf", block, "## Round trips and connection rate against netperf")


if __name__ == "__main__":
    main()
