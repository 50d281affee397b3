#!/usr/bin/env python3
"""hakaru rpm against Cloudflare's mach rpm: two responsiveness clients, one hakaru server.

One `hakaru server --rpm-port` on loopback (self-signed, so both clients get --insecure). Each
round runs, back to back and alternating which goes first: `mach rpm --config .../.well-known/nq
--insecure --disable-aim-scores` (a download stage, then an upload stage, `--test-duration`
each; one RPM per stage), and `hakaru rpm -d down` then `hakaru rpm -d up` (each until stable,
at most `--max-duration`). Both use their defaults otherwise (16 connections at most). The
figures per direction are goodput and RPM; the medians over the rounds, and the server's
refused connections (/metrics: none expected, since the server closes idle connections at
--rpm-max-per-client to make room), go into docs/BENCHMARKS.md. The server is stopped by its
PID.

Usage: python3 bench/rpm_vs_mach.py [--rounds 5] [--secs 12]
Needs target/release/hakaru and mach (../shared/peers/build.sh mach).
"""
import argparse, json, os, re, statistics, subprocess, sys, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_port, loadavg, stop_process, write_block  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAKARU = os.path.join(ROOT, "target", "release", "hakaru")
MACH = "/opt/hakaru-peers/mach/bin/mach"


def start_server(metrics):
    p = subprocess.Popen([HAKARU, "server", "-B", "127.0.0.1", "-p", "0", "--rpm-port", "0",
                          "--metrics", f"127.0.0.1:{metrics}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 10
    while time.time() < deadline:
        line = p.stderr.readline()
        m = re.search(r"rpm test served on 127\.0\.0\.1:(\d+)", line)
        if m:
            # The rest of its log is not read: send it nowhere so the pipe never fills.
            subprocess.Popen(["cat"], stdin=p.stderr, stdout=subprocess.DEVNULL)
            return p, int(m.group(1))
    stop_process(p)
    sys.exit("the server did not log its rpm port")


def metric(port, series):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(series):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def hakaru(port, direction, secs):
    out = subprocess.run([HAKARU, "rpm", f"https://127.0.0.1:{port}", "--insecure", "-d",
                          direction, "-t", str(secs), "--json"],
                         capture_output=True, text=True, timeout=secs + 60, check=True)
    x = json.loads(out.stdout)["rpm"]
    return x["download" if direction == "down" else "upload"], x["rpm"]


def mach(port, secs):
    out = subprocess.run([MACH, "rpm", "--config", f"https://127.0.0.1:{port}/.well-known/nq",
                          "--insecure", "--disable-aim-scores", "--test-duration",
                          str(secs * 1000)],
                         capture_output=True, text=True, timeout=2 * secs + 60, check=True)
    x = json.loads(out.stdout)
    return ((x["download"]["throughput"], x["download"]["rpm"]),
            (x["upload"]["throughput"], x["upload"]["rpm"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--secs", type=int, default=12)
    a = ap.parse_args()
    for p in (HAKARU, MACH):
        if not os.path.exists(p):
            sys.exit(f"{p} is missing (cargo build --release; ../shared/peers/build.sh mach)")
    load_before = loadavg()
    metrics = free_port()
    server, port = start_server(metrics)
    rows = []
    try:
        for r in range(a.rounds):
            if r % 2 == 0:
                md, mu = mach(port, a.secs)
                hd, hu = hakaru(port, "down", a.secs), hakaru(port, "up", a.secs)
            else:
                hd, hu = hakaru(port, "down", a.secs), hakaru(port, "up", a.secs)
                md, mu = mach(port, a.secs)
            rows.append((hd, md, hu, mu))
            print(f"round {r}: down hakaru {hd[0] / 1e9:.2f} Gbit/s {hd[1]:.0f} RPM, "
                  f"mach {md[0] / 1e9:.2f} Gbit/s {md[1]:.0f} RPM; up hakaru "
                  f"{hu[0] / 1e9:.2f} Gbit/s {hu[1]:.0f} RPM, mach {mu[0] / 1e9:.2f} Gbit/s "
                  f"{mu[1]:.0f} RPM", flush=True)
        refused = metric(metrics, 'hakaru_clients_refused_total{reason="rpm_limits"}') + \
            metric(metrics, 'hakaru_clients_refused_total{reason="rpm_memory"}')
        accepted = metric(metrics, 'hakaru_connections_total{protocol="rpm"}')
    finally:
        stop_process(server)
    cpus = os.cpu_count()
    block = (f"`python3 bench/rpm_vs_mach.py --rounds {a.rounds} --secs {a.secs}` "
             f"({time.strftime('%Y-%m-%d')}, release build, mach 0.2.0 (networkquality-rs "
             f"10469a1, release), {cpus} CPUs shared with other work, 1-minute load "
             f"{load_before} before, loopback, one `hakaru server --rpm-port`):\n\n"
             "| round | down: hakaru | mach | RPM hakaru | RPM mach | up: hakaru | mach "
             "| RPM hakaru | RPM mach |\n|---|---|---|---|---|---|---|---|---|\n")
    for i, (hd, md, hu, mu) in enumerate(rows):
        block += (f"| {i} | {hd[0] / 1e9:.2f} Gbit/s | {md[0] / 1e9:.2f} Gbit/s | {hd[1]:.0f} "
                  f"| {md[1]:.0f} | {hu[0] / 1e9:.2f} Gbit/s | {mu[0] / 1e9:.2f} Gbit/s "
                  f"| {hu[1]:.0f} | {mu[1]:.0f} |\n")
    med = [statistics.median(col) for col in zip(*[(hd[0], md[0], hd[1], md[1], hu[0], mu[0],
                                                    hu[1], mu[1]) for hd, md, hu, mu in rows])]
    block += (f"| median | {med[0] / 1e9:.2f} Gbit/s | {med[1] / 1e9:.2f} Gbit/s | {med[2]:.0f} "
              f"| {med[3]:.0f} | {med[4] / 1e9:.2f} Gbit/s | {med[5] / 1e9:.2f} Gbit/s "
              f"| {med[6]:.0f} | {med[7]:.0f} |\n")
    block += (f"\nMedian ratios hakaru / mach: download goodput **{med[0] / med[1]:.2f}**, "
              f"download RPM **{med[2] / med[3]:.2f}**, upload goodput "
              f"**{med[4] / med[5]:.2f}**, upload RPM **{med[6] / med[7]:.2f}**. The server "
              f"accepted {accepted:.0f} connections and refused {refused:.0f}.\n")
    write_block(os.path.join(ROOT, "docs", "BENCHMARKS.md"), "rpm-vs-mach", block,
                "## `hakaru rpm` against Cloudflare's `mach rpm`, one hakaru server")
    print(block)


if __name__ == "__main__":
    main()
