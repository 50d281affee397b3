#!/usr/bin/env python3
"""Stock netperf 2.7.1 against `hakaru server --netperf-port` and against a stock netserver on
loopback: interleaved rounds, medians, median of the per-round ratios.

Usage: python3 bench/netperf_server.py [--rounds 5] [--time 3] [--write docs/BENCHMARKS.md]

The client is the same stock netperf (built by ../shared/peers/build.sh netperf into
/opt/hakaru-peers/netperf) for both servers, so the figures say whether hakaru's server slows
that client down. Each round runs every case once against each server, alternating which goes
first. The figure compared: netperf's THROUGHPUT for TCP_STREAM (Mbit/s) and its transaction
rate for TCP_RR and TCP_CRR; for UDP_STREAM -m 14, the messages per second the server received
(REMOTE_RECV_CALLS over ELAPSED_TIME), since the client's own rate is only what it sent. The
ratio is hakaru / netserver, higher is better, as the median of the per-round ratios. Placement:
unpinned (the scheduler decides). Servers are separate processes, stopped by PID.
"""
import argparse, os, signal, statistics, subprocess, sys, time

from benchlib import cpu_model, free_port, loadavg, stop_process, wait_port, write_block

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
HAKARU = os.path.join(TARGET, "release", "hakaru")
PEER = "/opt/hakaru-peers/netperf/bin"
NETPERF, NETSERVER = os.path.join(PEER, "netperf"), os.path.join(PEER, "netserver")
KEYS = "THROUGHPUT,ELAPSED_TIME,LOCAL_SEND_CALLS,REMOTE_RECV_CALLS"

CASES = [
    # (name, netperf test args, [(figure, unit)]; the first figure is the one compared per round)
    ("TCP_STREAM", ["-t", "TCP_STREAM"], [("throughput", "Mbit/s")]),
    ("TCP_RR", ["-t", "TCP_RR"], [("throughput", "trans/s")]),
    ("UDP_STREAM -m 14", ["-t", "UDP_STREAM", "--", "-m", "14"],
     [("recv_rate", "msg/s received"), ("send_rate", "msg/s sent")]),
    ("TCP_CRR", ["-t", "TCP_CRR"], [("throughput", "trans/s")]),
]


def netperf(port, args, secs):
    test, rest = (args[:args.index("--")], args[args.index("--") + 1:]) if "--" in args else (args, [])
    cmd = [NETPERF, "-H", "127.0.0.1", "-p", str(port), "-P", "0", "-l", str(secs)] + test + ["--", "-k", KEYS] + rest
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 60)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd} failed: {p.stdout}{p.stderr}")
    kv = dict(l.split("=", 1) for l in p.stdout.splitlines() if "=" in l)
    return {
        "throughput": float(kv["THROUGHPUT"]),
        "recv_rate": float(kv["REMOTE_RECV_CALLS"]) / float(kv["ELAPSED_TIME"]),
        "send_rate": float(kv["LOCAL_SEND_CALLS"]) / float(kv["ELAPSED_TIME"]),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--time", type=int, default=3)
    ap.add_argument("--write")
    a = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "hakaru"], cwd=ROOT, check=True)
    hk_port, ns_port = free_port(), free_port()
    load_before = loadavg()
    hk = subprocess.Popen([HAKARU, "server", "-B", "127.0.0.1", "-p", "0", "--netperf-port", str(hk_port)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ns = subprocess.Popen([NETSERVER, "-D", "-L", "127.0.0.1", "-p", str(ns_port)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    res = {name: {"hk": [], "ns": []} for name, *_ in CASES}
    try:
        wait_port(hk_port)
        wait_port(ns_port)
        for rnd in range(a.rounds):
            for name, args, figs in CASES:
                order = [("hk", hk_port), ("ns", ns_port)]
                if rnd % 2:
                    order.reverse()
                for key, port in order:
                    res[name][key].append(netperf(port, args, a.time))
                    time.sleep(0.3)
                fig, unit = figs[0]
                h, n = res[name]["hk"][-1][fig], res[name]["ns"][-1][fig]
                print(f"round {rnd + 1}: {name}: hakaru {h:.0f}, netserver {n:.0f} {unit} ({h / n:.3f}x)",
                      file=sys.stderr)
    finally:
        stop_process(hk, signal.SIGTERM)
        stop_process(ns)
    load_after = loadavg()
    cmd = f"python3 bench/netperf_server.py --rounds {a.rounds} --time {a.time}"
    model = cpu_model()
    lines = [
        f"Command: `{cmd}` ({a.rounds} interleaved rounds of `-l {a.time}` per case, alternating which "
        f"server goes first; loopback, unpinned; {time.strftime('%Y-%m-%d')}; kernel {os.uname().release}, "
        f"{os.cpu_count()} CPUs ({model}); stock netperf 2.7.1 against `hakaru server --netperf-port` "
        f"and against netserver 2.7.1). The machine is shared with other builders (1-minute load "
        f"{load_before} before the run, {load_after} after), so single rounds vary widely (last "
        f"column): the medians are indicative, not either server's limit. Higher is better; the "
        f"ratio is hakaru / netserver, the median of the per-round ratios. UDP_STREAM on loopback "
        f"sends as fast as the client can; what the server receives (the figure compared) depends "
        f"on what it drops, and so on where the scheduler puts the two processes.",
        "",
        "| case | figure | hakaru server (median) | netserver (median) | ratio (median of rounds) | ratios by round |",
        "|---|---|---|---|---|---|",
    ]
    for name, _, figs in CASES:
        for fig, unit in figs:
            hks = [r[fig] for r in res[name]["hk"]]
            nss = [r[fig] for r in res[name]["ns"]]
            ratios = [x / y for x, y in zip(hks, nss)]
            lines.append(
                f"| {name} | {unit} | {statistics.median(hks):,.0f} | {statistics.median(nss):,.0f} "
                f"| **{statistics.median(ratios):.3f}x** | {', '.join(f'{r:.2f}' for r in ratios)} |"
            )
    block = "\n".join(lines) + "\n"
    print(block)
    if a.write:
        write_block(a.write, "netperf-server", block,
                    "## netperf: stock netperf against hakaru server --netperf-port and against netserver")


if __name__ == "__main__":
    main()
