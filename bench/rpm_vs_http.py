#!/usr/bin/env python3
"""hakaru rpm's load against hakaru http -P N: the same server, the same loopback, as many
connections.

One `hakaru server --rpm-port` on loopback (self-signed, so both clients get --insecure). Each
round runs, back to back and alternating which goes first: `hakaru rpm -d down` downloading with at
most N connections (its goodput is the moving average at the end, when all N have been open
for the whole window), and `hakaru http -P N` fetching the same `/large` over the same TLS
port (HTTP/1.1: hakaru http offers no ALPN, so the server answers in HTTP/1.1) for the same
time. The ratio is the median of the per-round ratios rpm / http. The table goes into
docs/BENCHMARKS.md. The server is stopped by its PID. (hakaru http -P N -t T against this port
takes tens of seconds after T to exit; its figure covers T: hence the long timeout.)

Usage: python3 bench/rpm_vs_http.py [--rounds 5] [--secs 12] [--conns 4]
"""
import argparse, json, os, re, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import stop_process, write_block  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAKARU = os.path.join(ROOT, "target", "release", "hakaru")


def start_server():
    p = subprocess.Popen([HAKARU, "server", "-B", "127.0.0.1", "-p", "0", "--rpm-port", "0"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 10
    while time.time() < deadline:
        line = p.stderr.readline()
        m = re.search(r"rpm test served on 127\.0\.0\.1:(\d+)", line)
        if m:
            return p, int(m.group(1))
    stop_process(p)
    sys.exit("the server did not log its rpm port")


def rpm(port, conns, secs):
    out = subprocess.run([HAKARU, "rpm", f"https://127.0.0.1:{port}", "--insecure", "-d", "down",
                          "--max-connections", str(conns), "-t", str(secs), "--json"],
                         capture_output=True, text=True, timeout=secs + 30, check=True)
    x = json.loads(out.stdout)["rpm"]
    return x["download"], x["connections"], x["rpm"]


def http(port, conns, secs):
    out = subprocess.run([HAKARU, "http", f"https://127.0.0.1:{port}/large", "--insecure",
                          "-P", str(conns), "-t", str(secs), "--json"],
                         capture_output=True, text=True, timeout=secs + 120)
    return json.loads(out.stdout)["http"]["bits_per_second"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--secs", type=int, default=12)
    a = ap.parse_args()
    server, port = start_server()
    rows, ratios = [], []
    try:
        for r in range(a.rounds):
            if r % 2 == 0:
                d, n, score = rpm(port, a.conns, a.secs)
                h = http(port, a.conns, a.secs - 4)
            else:
                h = http(port, a.conns, a.secs - 4)
                d, n, score = rpm(port, a.conns, a.secs)
            rows.append((d, n, score, h))
            ratios.append(d / h)
            print(f"round {r}: rpm {d / 1e9:.2f} Gbit/s over {n} connections ({score:.0f} RPM), "
                  f"http -P {a.conns} {h / 1e9:.2f} Gbit/s, ratio {d / h:.3f}", flush=True)
    finally:
        stop_process(server)
    med = statistics.median(ratios)
    cpus = os.cpu_count()
    block = (f"`python3 bench/rpm_vs_http.py --rounds {a.rounds} --secs {a.secs} --conns {a.conns}` "
             f"({time.strftime('%Y-%m-%d')}, release build, {cpus} CPUs shared with other work, "
             "loopback, one `hakaru server --rpm-port`, TLS 1.3 AES-128-GCM both ways):\n\n"
             "| round | `hakaru rpm` download (h2) | connections | RPM | `hakaru http -P N` (HTTP/1.1) | ratio |\n"
             "|---|---|---|---|---|---|\n")
    for i, (d, n, score, h) in enumerate(rows):
        block += f"| {i} | {d / 1e9:.2f} Gbit/s | {n} | {score:.0f} | {h / 1e9:.2f} Gbit/s | {d / h:.3f} |\n"
    block += f"\nMedian ratio rpm / http: **{med:.3f}**.\n"
    write_block(os.path.join(ROOT, "docs", "BENCHMARKS.md"), "rpm-vs-http", block,
                "## `hakaru rpm` load against `hakaru http -P N`")
    print(block)


if __name__ == "__main__":
    main()
