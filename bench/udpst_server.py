#!/usr/bin/env python3
"""The stock OB-UDPST client (udpst 9.0.0) into `hakaru server --udpst-port` and into a stock
`udpst` server, on loopback: the highest rate each server sustains.

Usage: python3 bench/udpst_server.py [--rounds 5] [--time 15] [--placements unpinned,apart,together]
                                     [--row N] [--write docs/BENCHMARKS.md]

Each case is the stock client's own search (algorithm B, `udpst -u` or `-d -t TIME -s`), so
the figure is the client's "Maximum Mbps(L3/IP)": the most the pair delivered in one
sub-interval. On loopback nothing but the CPUs bounds it, so it reads how much load each server
can send (downstream) or count (upstream) next to the same client. The search needs about 5 s
to climb to row 1000 (1 Gbit/s: 10 rows per 50 ms trial) and then one row per trial, so a
test shorter than about 10 s reads the search's climb, not the servers (hence 15 s). Rounds alternate which
server goes first; the ratio is the median of per-round ratios (hakaru / stock).

The search's maximum is one sub-interval before the first loss, and when that loss comes is
chance, so single rounds spread by a third. `--row N` asks instead for a fixed row (`udpst -I
N`) above what loopback carries (row 1150: 98 datagrams of 8972 bytes every 100 us, about 70
Gbit/s): each server sends (or counts) as fast as it can for the whole test, and the figure is
the test's mean delivered rate ("Downstream/Upstream Summary ... Mbps(L3/IP)"), what the server
sustains. Placements:
unpinned; apart (client on CPU 0, servers on CPU 1); together (everything on CPU 0). The
servers run the whole time as separate processes and are stopped by PID. Needs
`cargo build --release` and `../shared/peers/build.sh udpst`.
"""
import argparse, os, re, statistics, subprocess, sys, time

from benchlib import cpu_model, loadavg, stop_process, write_block

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAKARU = os.path.join(ROOT, "target", "release", "hakaru")
UDPST = "/opt/hakaru-peers/udpst/bin/udpst"
HK_PORT, ST_PORT, HK_TCP = 24611, 24612, 15311
PLACEMENTS = {
    # name: (client CPUs, server CPUs)
    "unpinned": (None, None),
    "apart": ("0", "1"),
    "together": ("0", "0"),
}


def pinned(cpus, argv):
    return (["taskset", "-c", cpus] if cpus else []) + argv


def client(cpus, direction, port, secs, row=None):
    fixed = ["-I", str(row)] if row else []
    argv = pinned(cpus, [UDPST, direction, "-t", str(secs)] + fixed + ["-s", f"127.0.0.1:{port}"])
    o = subprocess.run(argv, capture_output=True, text=True, timeout=secs + 30)
    figure = r"Summary Delivered.*Mbps\(L3/IP\):\s*([0-9.]+)" if row else r"Maximum Mbps\(L3/IP\):\s*([0-9.]+)"
    m = re.search(figure, o.stdout + o.stderr)
    if o.returncode != 0 or not m:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{o.stdout}{o.stderr}")
    return float(m.group(1))


def servers(cpus):
    hk = subprocess.Popen(pinned(cpus, [HAKARU, "server", "-B", "127.0.0.1", "-p", str(HK_TCP),
                                        "--udpst-port", str(HK_PORT)]),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    st = subprocess.Popen(pinned(cpus, [UDPST, "-p", str(ST_PORT), "127.0.0.1"]),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    return hk, st


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--time", type=int, default=15)
    ap.add_argument("--placements", default="unpinned,apart,together")
    ap.add_argument("--row", type=int, default=None,
                    help="a fixed sending-rate row (udpst -I) instead of the search")
    ap.add_argument("--directions", default="-d,-u",
                    help="which tests: -d (the server sends), -u (it receives), or both")
    ap.add_argument("--write", default=None)
    a = ap.parse_args()
    for need in (HAKARU, UDPST):
        if not os.path.exists(need):
            sys.exit(f"missing {need}: cargo build --release; ../shared/peers/build.sh udpst")
    rows = []
    for place in a.placements.split(","):
        ccpu, scpu = PLACEMENTS[place]
        hk, st = servers(scpu)
        try:
            for direction in a.directions.split(","):
                res = {"hk": [], "st": []}
                for rnd in range(a.rounds):
                    order = [("hk", HK_PORT), ("st", ST_PORT)]
                    if rnd % 2:
                        order.reverse()
                    for key, port in order:
                        res[key].append(client(ccpu, direction, port, a.time, a.row))
                        time.sleep(0.5)
                    print(f"{place} {direction} round {rnd + 1}: hakaru {res['hk'][-1]:.0f}, "
                          f"stock {res['st'][-1]:.0f} Mbit/s", file=sys.stderr)
                ratios = [h / s for h, s in zip(res["hk"], res["st"]) if s > 0]
                rows.append((direction, place, statistics.median(res["hk"]),
                             statistics.median(res["st"]), ratios))
        finally:
            stop_process(hk)
            stop_process(st)
    cmd = f"python3 bench/udpst_server.py --rounds {a.rounds} --time {a.time} --placements {a.placements}"
    how = "its own search, the maximum sub-interval"
    if a.row:
        cmd += f" --row {a.row}"
        how = f"fixed row {a.row}, the test's mean delivered rate"
    if a.directions != "-d,-u":
        cmd += f" --directions={a.directions}"
    figure = "mean" if a.row else "maximum"
    lines = [
        f"Command: `{cmd}` ({time.strftime('%Y-%m-%d')}; kernel {os.uname().release}; "
        f"{cpu_model()}, {os.cpu_count()} CPUs; load {loadavg()} at the end; udpst 9.0.0, {how}, "
        "default datagram sizes with jumbo)",
        "",
        f"| stock client | placement | into hakaru server, Mbit/s L3 {figure} (median of rounds) | into udpst server (median) | per-round ratios | ratio (median) |",
        "|---|---|---|---|---|---|",
    ]
    for d, place, hk, st, ratios in rows:
        what = "udpst -d (server sends)" if d == "-d" else "udpst -u (server receives)"
        rs = ", ".join(f"{r:.2f}" for r in ratios)
        lines.append(f"| {what} | {place} | {hk:.0f} | {st:.0f} | {rs} | **{statistics.median(ratios):.2f}x** |")
    table = "\n".join(lines) + "\n"
    print(table)
    if a.write:
        name = "udpst-server-fixed" if a.row else "udpst-server"
        write_block(os.path.join(ROOT, a.write), name, table,
                    "## OB-UDPST: the stock udpst client into hakaru server and into udpst's own")


if __name__ == "__main__":
    main()
