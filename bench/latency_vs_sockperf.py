#!/usr/bin/env python3
"""hakaru latency against sockperf ping-pong on loopback: interleaved rounds, median RTTs, ratios.

Usage: python3 bench/latency_vs_sockperf.py [--rounds 3] [--time 5] [--write docs/BENCHMARKS.md]

Each round runs every case once with hakaru and once with sockperf 3.7, alternating which goes
first. Both report round-trip times (sockperf with --full-rtt) with a 14-byte message; the
figure compared is the median (p50) RTT, lower is better, so the ratio is hakaru / sockperf and
the targets are upper bounds. Blocking cases run both tools in their default waiting mode; the
busy cases run hakaru --spin against sockperf --nonblocked --timeout 0 (epoll with a zero timeout,
busy polling) on both client and server. Servers are separate processes, stopped by PID.

Placements: unpinned (the scheduler decides), "one CPU" (client and server of both tools pinned
with taskset to CPU 0, so every round trip switches between them on that CPU) and "two CPUs"
(clients on CPU 0, servers on CPU 1). The busy cases run unpinned only: two spinning ends on one
CPU would measure the scheduler's time slice.
"""
import argparse, json, os, re, signal, statistics, subprocess, sys, time

from benchlib import stop_process, write_block

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
HAKARU = os.path.join(TARGET, "release", "hakaru")
HK_PORT, SP_PORT = 5321, 11321

CASES = [
    # (name, hakaru args, sockperf client args, sockperf server args, target ratio)
    ("UDP, blocking", ["--udp"], [], [], 1.05),
    ("TCP, blocking", [], ["--tcp"], ["--tcp"], 1.05),
    ("UDP, busy (hakaru --spin)", ["--udp", "--spin"], ["--nonblocked", "--timeout", "0"], ["--nonblocked", "--timeout", "0"], 1.10),
    ("TCP, busy (hakaru --spin)", ["--spin"], ["--tcp", "--nonblocked", "--timeout", "0"], ["--tcp", "--nonblocked", "--timeout", "0"], 1.10),
]


def run(cmd, limit):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd} failed: {p.stderr}")
    return p.stdout + p.stderr


PLACEMENTS = [
    # (name, taskset CPU list for clients, for servers)
    ("unpinned", None, None),
    ("one CPU", "0", "0"),
    ("two CPUs", "0", "1"),
]


def pinned(cpu, cmd):
    return (["taskset", "-c", cpu] if cpu is not None else []) + cmd


def hakaru(args, secs, cpu=None):
    out = run(pinned(cpu, [HAKARU, "latency", "127.0.0.1", "-p", str(HK_PORT), "-t", str(secs), "-i", "0", "--json"] + args), secs + 30)
    r = json.loads(out)["latency"]
    return r["rtt"]["p50_us"], r["rtt"]["p99_us"], r["transactions_per_second"]


def sockperf(client_args, server_args, secs, ccpu=None, scpu=None):
    srv = subprocess.Popen(pinned(scpu, ["sockperf", "sr", "-i", "127.0.0.1", "-p", str(SP_PORT)] + server_args),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        out = run(pinned(ccpu, ["sockperf", "pp", "-i", "127.0.0.1", "-p", str(SP_PORT), "-m", "14", "-t", str(secs),
                   "--full-rtt"] + client_args), secs + 30)
    finally:
        stop_process(srv, signal.SIGINT, 5)
    out = re.sub(r"\x1b\[[0-9;]*m", "", out)
    p50 = float(re.search(r"percentile 50\.000 =\s*([0-9.]+)", out).group(1))
    p99 = float(re.search(r"percentile 99\.000 =\s*([0-9.]+)", out).group(1))
    valid = re.search(r"\[Valid Duration\] RunTime=([0-9.]+) sec; SentMessages=(\d+); ReceivedMessages=(\d+)", out)
    tps = int(valid.group(3)) / float(valid.group(1))
    return p50, p99, tps


CONNECT_PLACEMENTS = ("unpinned", "one CPU")
C_LOOP = os.path.join(TARGET, "connect_loop")
C_PORT = 5331


def c_loop(secs, ccpu, scpu):
    """bench/connect_loop.c: its server and its client for `secs`; connections per second."""
    srv = subprocess.Popen(pinned(scpu, [C_LOOP, "server", str(C_PORT), str(secs + 3)]),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        out = run(pinned(ccpu, [C_LOOP, "client", "127.0.0.1", str(C_PORT), str(secs)]), secs + 30)
    finally:
        srv.kill()
        srv.wait()
    return float(out.split()[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--time", type=int, default=5)
    ap.add_argument("--write", default=None)
    a = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "hakaru"], cwd=ROOT, check=True)
    subprocess.run(["cc", "-O2", "-o", C_LOOP, os.path.join(ROOT, "bench", "connect_loop.c")], check=True)
    rows = [(c, p) for p in PLACEMENTS for c in CASES if p[1] is None or "blocking" in c[0]]
    res = {(c[0], p[0]): {"hk": [], "sp": []} for c, p in rows}
    cps = {}
    for pname, ccpu, scpu in PLACEMENTS:
        server = subprocess.Popen(pinned(scpu, [HAKARU, "server", "-B", "127.0.0.1", "-p", str(HK_PORT)]),
                                  stderr=subprocess.DEVNULL)
        time.sleep(1)
        try:
            for rnd in range(a.rounds):
                for (name, hk_args, sp_c, sp_s, _), p in rows:
                    if p[0] != pname:
                        continue
                    order = [("hk", lambda: hakaru(hk_args, a.time, ccpu)),
                             ("sp", lambda: sockperf(sp_c, sp_s, a.time, ccpu, scpu))]
                    if rnd % 2:
                        order.reverse()
                    for key, fn in order:
                        res[(name, pname)][key].append(fn())
                        time.sleep(0.5)
                    h, s_ = res[(name, pname)]["hk"][-1], res[(name, pname)]["sp"][-1]
                    print(f"round {rnd + 1}: {name}, {pname}: p50 hakaru {h[0]:.1f} us, sockperf {s_[0]:.1f} us",
                          file=sys.stderr)
                # Connections per second with RST closes (no peer tool here; the target is
                # absolute): unpinned only.
                if pname in CONNECT_PLACEMENTS:
                    for n in ("1", "2") if ccpu is None else ("1",):
                        out = run(pinned(ccpu, [HAKARU, "connect", "127.0.0.1", "-p", str(HK_PORT), "-t", str(a.time),
                                                "--rst", "-P", n, "-i", "0", "--json"]), a.time + 30)
                        cps.setdefault((f"hakaru connect -P {n} --rst", pname), []).append(
                            json.loads(out)["connect"]["connections_per_second"])
                        time.sleep(0.5)
                    cps.setdefault(("bench/connect_loop.c (reference)", pname), []).append(
                        c_loop(a.time, ccpu, scpu))
                    time.sleep(0.5)
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
    cmd = f"python3 bench/latency_vs_sockperf.py --rounds {a.rounds} --time {a.time}"
    ver = run(["sockperf", "--version"], 10)
    ver = re.search(r"[0-9]+\.[0-9]+(\.[0-9]+)?", re.sub(r"\x1b\[[0-9;]*m", "", ver))
    lines = [
        f"Command: `{cmd}` ({a.rounds} interleaved rounds of {a.time} s per case, 14-byte messages, "
        f"{time.strftime('%Y-%m-%d')}; kernel {os.uname().release}, {os.cpu_count()} CPUs; sockperf "
        f"{ver.group(0) if ver else '?'}). Round-trip times in microseconds; lower is better; the ratio is "
        "hakaru / sockperf, median of the per-round ratios.",
        "",
        "| case | placement | hakaru p50 | sockperf p50 | ratio | target | met? | hakaru p99 | sockperf p99 | hakaru trans/s | sockperf trans/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (name, _, _, _, target), (pname, _, _) in rows:
        hk, sp = res[(name, pname)]["hk"], res[(name, pname)]["sp"]
        ratio = statistics.median(h[0] / s[0] for h, s in zip(hk, sp))
        med = lambda xs, i: statistics.median(x[i] for x in xs)
        lines.append(f"| {name} | {pname} | {med(hk, 0):.1f} | {med(sp, 0):.1f} | **{ratio:.2f}x** | <= {target:.2f}x | "
                     f"{'yes' if ratio <= target else 'no'} | {med(hk, 1):.1f} | {med(sp, 1):.1f} | "
                     f"{med(hk, 2):.0f} | {med(sp, 2):.0f} |")
    lines += ["", "Connections per second with RST closes, against the reference loop of bench/connect_loop.c "
              "(its own blocking client and server, the least a TCP_CRR round can do):", "",
              "| client | placement | connections/s (median) | target | met? |", "|---|---|---|---|---|"]
    for (who, pname), v in cps.items():
        m = statistics.median(v)
        target = ">= 20000" if who.startswith("hakaru connect -P 1") else ""
        met = ("yes" if m >= 20000 else "no") if target else ""
        lines.append(f"| {who} | {pname} | {m:.0f} | {target} | {met} |")
    lines += ["", "On this VM a halted vCPU must be woken by the host, so blocking round trips are dominated by "
              "wake-up latency (reference/performance.md §4); busy modes keep both ends on-CPU."]
    table = "\n".join(lines) + "\n"
    print(table)
    if a.write:
        write_block(os.path.join(ROOT, a.write), "latency-vs-sockperf", table, "## Latency: hakaru latency against sockperf ping-pong")

if __name__ == "__main__":
    main()
