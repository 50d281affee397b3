#!/usr/bin/env python3
"""Stock iperf2 client into `hakaru sink --iperf2` and into `iperf -s`: interleaved rounds.

Usage: python3 bench/iperf2_sink.py [--rounds 3] [--time 3] [--write docs/BENCHMARKS.md]

The client is the same stock `iperf -c` in both runs, so the ratio is the receivers'. Throughput
is the client's [SUM] (or single-stream) line in bits/s (`-f b`), which both receivers must
match for the client to report it. Each round runs every case against both receivers back to
back, so a slow period of this shared VM hits both alike. The sink runs once per transfer; the
stock server runs for the whole benchmark; both are stopped by PID.
"""
import argparse, os, signal, statistics, subprocess, time

from benchlib import write_block

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAKARU = os.path.join(ROOT, "target", "release", "hakaru")
HK_PORT, IP_PORT = 5298, 5299

CASES = [("TCP 1 stream", []), ("TCP 2 streams (-P 2)", ["-P", "2"]), ("TCP 4 streams (-P 4)", ["-P", "4"])]


def client(port, secs, extra):
    p = subprocess.run(
        ["iperf", "-c", "127.0.0.1", "-p", str(port), "-t", str(secs), "-f", "b"] + extra,
        capture_output=True, text=True, timeout=secs + 30)
    if p.returncode != 0:
        raise RuntimeError(f"iperf -c failed: {p.stderr}")
    lines = [l for l in p.stdout.splitlines() if " sec " in l and "bits/sec" in l]
    total = [l for l in lines if l.startswith("[SUM]")] or lines
    return float(total[-1].split()[-2])


def against_sink(secs, extra):
    sink = subprocess.Popen([HAKARU, "sink", "--iperf2", "-B", "127.0.0.1", "-p", str(HK_PORT), "-i", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.4)
        bps = client(HK_PORT, secs, extra)
        sink.wait(timeout=30)
        if sink.returncode != 0:
            raise RuntimeError(f"hakaru sink exited {sink.returncode}")
        return bps
    finally:
        if sink.poll() is None:
            os.kill(sink.pid, signal.SIGTERM)
            sink.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--time", type=int, default=3)
    ap.add_argument("--write")
    a = ap.parse_args()
    srv = subprocess.Popen(["iperf", "-s", "-B", "127.0.0.1", "-p", str(IP_PORT)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    res = {name: {"hk": [], "ip": []} for name, _ in CASES}
    try:
        time.sleep(0.5)
        for _ in range(a.rounds):
            for name, extra in CASES:
                res[name]["hk"].append(against_sink(a.time, extra))
                res[name]["ip"].append(client(IP_PORT, a.time, extra))
    finally:
        os.kill(srv.pid, signal.SIGTERM)
        srv.wait()
    ver = subprocess.run(["iperf", "-v"], capture_output=True, text=True)
    ver = (ver.stdout + ver.stderr).split()[2]  # "iperf version 2.1.8 (...)"
    lines = [
        f"Command: `python3 bench/iperf2_sink.py --rounds {a.rounds} --time {a.time}` "
        f"({a.rounds} interleaved rounds of {a.time} s per case; {time.strftime('%Y-%m-%d')}; iperf {ver})",
        "",
        "| case | iperf -c → hakaru sink --iperf2 | → iperf -s | ratio (median of rounds) |",
        "|---|---|---|---|",
    ]
    for name, row in res.items():
        ratio = statistics.median(x / y for x, y in zip(row["hk"], row["ip"]))
        lines.append(f"| {name} | {statistics.median(row['hk']) / 1e9:.1f} Gbit/s "
                     f"| {statistics.median(row['ip']) / 1e9:.1f} Gbit/s | **{ratio:.2f}x** |")
    block = "\n".join(lines) + "\n"
    print(block)
    if a.write:
        write_block(a.write, "iperf2-sink", block, "## iperf2 into hakaru sink: against iperf -s")


if __name__ == "__main__":
    main()
