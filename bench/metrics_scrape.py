#!/usr/bin/env python3
"""How long a scrape of `hakaru server --metrics` takes, idle and with many tests running.

Starts a release `hakaru server` on loopback with --metrics, times --scrapes GETs of /metrics
with nothing running, then starts --clients `hakaru udp -b 1M` clients at once and times the
same number of scrapes while their tests run (the exposition's tests_running gauge says how
many were admitted). Everything started is stopped by its PID. Prints the figures and writes
them into docs/metrics.md.

Usage: python3 bench/metrics_scrape.py [--clients 64] [--scrapes 20]
"""
import argparse, os, re, socket, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_port, stop_process, write_block  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAKARU = os.path.join(ROOT, "target", "release", "hakaru")


def scrape(port):
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return (time.perf_counter() - t0) * 1e3, data.decode(errors="replace")


def timed(port, n):
    times, body = [], ""
    for _ in range(n):
        ms, body = scrape(port)
        times.append(ms)
    return times, body


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--scrapes", type=int, default=20)
    ap.add_argument("--write", default=os.path.join(ROOT, "docs", "metrics.md"))
    args = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
    mport = free_port()
    srv = subprocess.Popen([HAKARU, "server", "-B", "127.0.0.1", "-p", "0", "--metrics",
                            f"127.0.0.1:{mport}", "--max-tests", "1000",
                            "--max-tests-per-client", "1000", "--max-pending-per-client", "1000"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    clients = []
    try:
        port = None
        while port is None:
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", srv.stderr.readline())
            port = m and m.group(1)
        idle, _ = timed(mport, args.scrapes)
        clients = [subprocess.Popen([HAKARU, "udp", "127.0.0.1", "-p", port, "-b", "1M", "-t", "8", "-q"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                   for _ in range(args.clients)]
        time.sleep(3)
        busy, body = timed(mport, args.scrapes)
        running = re.search(r"^hakaru_tests_running (\d+)", body, re.M)
        running = int(running.group(1)) if running else 0
    finally:
        for c in clients:
            stop_process(c)
        stop_process(srv)
    med = statistics.median
    block = (f"Command: `python3 bench/metrics_scrape.py --clients {args.clients} --scrapes {args.scrapes}` "
             "(release build, loopback; a scrape is connect, GET /metrics, read to the close)\n\n"
             "| server | tests running | median | max |\n|---|---:|---:|---:|\n"
             f"| idle | 0 | {med(idle):.2f} ms | {max(idle):.2f} ms |\n"
             f"| {args.clients} `hakaru udp -b 1M` clients started at once | {running} | "
             f"{med(busy):.2f} ms | {max(busy):.2f} ms |\n")
    print(block)
    write_block(args.write, "metrics-scrape", block, "## Scrape time")


if __name__ == "__main__":
    main()
