#!/usr/bin/env python3
"""hakaru tcp against iperf3 on loopback: interleaved rounds, medians and ratios.

Usage: python3 bench/tcp_vs_iperf3.py [--rounds 3] [--time 5] [--write docs/BENCHMARKS.md]

Each round runs every case once for hakaru and once for iperf3, alternating, so slow
periods of this shared VM hit both tools alike. Throughput is what the receiver counted
(hakaru: totals[].receiver; iperf3: end.sum_received). Sender efficiency is bytes received
per CPU-second of the client process (the sender, except in -R cases), user + system, from wait4(2) -- the same
measure for both tools. Servers run as separate processes on loopback, stopped by PID.
"""
import argparse, json, os, signal, statistics, subprocess, sys, time

from benchlib import write_block

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAKARU = os.path.join(ROOT, "target", "release", "hakaru")
HK_PORT, IP_PORT = 5298, 5299

CASES = [
    # (name, hakaru args, iperf3 args)
    ("1 flow, defaults", [], []),
    ("2 flows (-P 2), defaults", ["-P", "2"], ["-P", "2"]),
    ("1 flow, both BBR (iperf3's default here)", ["-C", "bbr"], []),
    ("1 flow, both cubic", ["-C", "cubic"], ["-C", "cubic"]),
    ("1 flow, reverse (-R), defaults", ["-R"], ["-R"]),
]


def run_measured(cmd, limit):
    """Runs cmd, returns (stdout, cpu_seconds_of_the_process)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + limit
    out = b""
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            out = p.stdout.read()
            err = p.stderr.read()
            if status != 0:
                raise RuntimeError(f"{cmd} failed: {err.decode(errors='replace')}")
            return out, ru.ru_utime + ru.ru_stime
        if time.time() > deadline:
            os.kill(p.pid, signal.SIGKILL)
            raise RuntimeError(f"{cmd} timed out")
        time.sleep(0.05)


def hakaru(args, secs):
    out, cpu = run_measured([HAKARU, "tcp", "127.0.0.1", "-p", str(HK_PORT), "-t", str(secs), "--json"] + args, secs + 30)
    r = json.loads(out)
    t = r["totals"][0]
    return t["receiver"]["bits_per_second"], t["receiver"]["bytes"], cpu


def iperf3(args, secs):
    out, cpu = run_measured(["iperf3", "-c", "127.0.0.1", "-p", str(IP_PORT), "-t", str(secs), "-J"] + args, secs + 30)
    r = json.loads(out)
    s = r["end"]["sum_received"]
    return s["bits_per_second"], s["bytes"], cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--time", type=int, default=5)
    ap.add_argument("--write", default=None)
    a = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "hakaru"], cwd=ROOT, check=True)
    servers = [
        subprocess.Popen([HAKARU, "server", "-B", "127.0.0.1", "-p", str(HK_PORT)], stderr=subprocess.DEVNULL),
        subprocess.Popen(["iperf3", "-s", "-B", "127.0.0.1", "-p", str(IP_PORT)], stdout=subprocess.DEVNULL),
    ]
    time.sleep(1)
    res = {c[0]: {"hk": [], "ip": []} for c in CASES}
    try:
        for rnd in range(a.rounds):
            for name, hk_args, ip_args in CASES:
                order = [("hk", hakaru, hk_args), ("ip", iperf3, ip_args)]
                if rnd % 2:
                    order.reverse()
                for key, fn, args in order:
                    bps, nbytes, cpu = fn(args, a.time)
                    res[name][key].append((bps, nbytes / cpu if cpu > 0 else 0.0))
                    time.sleep(1)
                print(f"round {rnd + 1}: {name}: hakaru {res[name]['hk'][-1][0] / 1e9:.1f} Gbit/s, "
                      f"iperf3 {res[name]['ip'][-1][0] / 1e9:.1f} Gbit/s", file=sys.stderr)
    finally:
        for s in servers:
            s.send_signal(signal.SIGTERM)
        for s in servers:
            try:
                s.wait(timeout=10)
            except subprocess.TimeoutExpired:
                s.kill()
    rows = []
    for name, _, _ in CASES:
        hk, ip = res[name]["hk"], res[name]["ip"]
        ratios = [h[0] / i[0] for h, i in zip(hk, ip)]
        eff = [h[1] / i[1] for h, i in zip(hk, ip) if i[1] > 0]
        rows.append((name,
                     statistics.median(h[0] for h in hk) / 1e9,
                     statistics.median(i[0] for i in ip) / 1e9,
                     statistics.median(ratios),
                     statistics.median(h[1] for h in hk) / 1e9,
                     statistics.median(i[1] for i in ip) / 1e9,
                     statistics.median(eff) if eff else float("nan")))
    cmd = f"python3 bench/tcp_vs_iperf3.py --rounds {a.rounds} --time {a.time}"
    lines = [
        f"Command: `{cmd}` ({a.rounds} interleaved rounds of {a.time} s per case; "
        f"{time.strftime('%Y-%m-%d')}; kernel {os.uname().release}; iperf3 "
        + subprocess.run(["iperf3", "--version"], capture_output=True, text=True).stdout.split()[1] + ")",
        "",
        "| case | hakaru Gbit/s (median) | iperf3 Gbit/s (median) | ratio (median of rounds) | hakaru GB per client-process CPU-s | iperf3 GB per client-process CPU-s | efficiency ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r[0]} | {r[1]:.1f} | {r[2]:.1f} | **{r[3]:.2f}x** | {r[4]:.2f} | {r[5]:.2f} | {r[6]:.2f}x |")
    table = "\n".join(lines) + "\n"
    print(table)
    if a.write:
        write_block(os.path.join(ROOT, a.write), "tcp-vs-iperf3", table, "## TCP: hakaru tcp against iperf3")

if __name__ == "__main__":
    main()
