#!/usr/bin/env python3
"""The cloud guides' packet-rate script against one `hakaru server --sockperf-port FIRST-LAST`
and against one stock `sockperf sr --port P` per port, on loopback.

Usage: python3 bench/sockperf_ports.py [--rounds 3] [--time 3] [--ports 16,64]
                                       [--write docs/BENCHMARKS.md]

The guides start N stock clients, `sockperf tp -i $server --pps max -m 14 --port $((6666+i))`,
one per port, each against its own `sockperf sr`. Here the clients are the same for both
servers (`-t TIME`); the receiving side is either one hakaru server answering every port
(default receiver threads: one per 8 ports) or N `sockperf sr` processes. The figure compared is
what the server side received, in messages per second over the clients' TIME: for hakaru the
sum of its per-client summaries (`messages=`, warm-up not counted), for sockperf sr the sum of
the `Total N messages received and handled` lines each prints when stopped with SIGINT. The
clients' own `Total of N messages sent` is shown beside them. Each round runs both servers,
alternating which goes first; the ratio is hakaru / sockperf sr, higher is better, as the
median of the per-round ratios. Placements: unpinned, and pinned with the receivers (hakaru,
or every sockperf sr) on CPU 1 and the clients on CPU 0 (taskset). Every process is started
here and stopped by its PID.
"""
import argparse, os, re, signal, statistics, subprocess, threading, time

from benchlib import cpu_model, loadavg, stop_process, write_block

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
HAKARU = os.path.join(TARGET, "release", "hakaru")
FIRST = 6666


def pin(cpu):
    return ["taskset", "-c", str(cpu)] if cpu is not None else []


def ports_free(first, n):
    import socket
    for p in range(first, first + n):
        for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
            s = socket.socket(socket.AF_INET, kind)
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                return False
            finally:
                s.close()
    return True


def clients(first, n, secs, cpu):
    """Runs the N stock clients at once; returns the messages they sent together."""
    procs = [subprocess.Popen(pin(cpu) + ["sockperf", "tp", "-i", "127.0.0.1", "--pps", "max", "-m", "14",
                                          "-t", str(secs), "--port", str(first + i)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(n)]
    sent = 0
    for p in procs:
        out, _ = p.communicate(timeout=secs + 60)
        m = re.search(r"Total of (\d+) messages sent", out)
        if p.returncode != 0 or not m:
            raise RuntimeError(f"sockperf tp failed: {out}")
        sent += int(m.group(1))
    return sent


def run_hakaru(first, n, secs, cpu_srv, cpu_cli):
    last = first + n - 1
    srv = subprocess.Popen(pin(cpu_srv) + [HAKARU, "server", "-B", "127.0.0.1", "-p", "0",
                                           "--sockperf-port", f"{first}-{last}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines, ready = [], threading.Event()

    def read():
        for line in srv.stderr:
            lines.append(line)
            if "sockperf listening on" in line:
                ready.set()
    t = threading.Thread(target=read, daemon=True)
    t.start()
    try:
        if not ready.wait(15):
            raise RuntimeError("hakaru server did not start: " + "".join(lines))
        sent = clients(first, n, secs, cpu_cli)
        # Each client's summary comes once it has been silent for 2 s.
        end = time.time() + 15
        while time.time() < end and sum("done: messages=" in l for l in lines) < n:
            time.sleep(0.2)
    finally:
        stop_process(srv, signal.SIGINT)
        t.join(5)
    done = [l for l in lines if "sockperf UDP client" in l and "done: messages=" in l]
    if len(done) != n:
        raise RuntimeError(f"{len(done)} summaries for {n} clients")
    got = sum(int(re.search(r" messages=(\d+)", l).group(1)) for l in done)
    return got / secs, sent / secs


def run_sr(first, n, secs, cpu_srv, cpu_cli):
    srvs = [subprocess.Popen(pin(cpu_srv) + ["sockperf", "sr", "-i", "127.0.0.1", "--port", str(first + i)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for i in range(n)]
    try:
        # Ready once every UDP port is taken.
        end = time.time() + 15
        import socket
        while time.time() < end:
            busy = 0
            for i in range(n):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                try:
                    s.bind(("127.0.0.1", first + i))
                except OSError:
                    busy += 1
                finally:
                    s.close()
            if busy == n:
                break
            time.sleep(0.1)
        time.sleep(0.3)
        sent = clients(first, n, secs, cpu_cli)
    finally:
        outs = []
        for s in srvs:
            stop_process(s, signal.SIGINT)
            outs.append(s.stdout.read())
    got = 0
    for out in outs:
        m = re.search(r"Total (\d+) messages received", out)
        if not m:
            raise RuntimeError(f"no total from sockperf sr: {out}")
        got += int(m.group(1))
    return got / secs, sent / secs


def fmt(x):
    return f"{x:,.0f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--time", type=int, default=3)
    ap.add_argument("--ports", default="16,64")
    ap.add_argument("--write")
    a = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "hakaru"], cwd=ROOT, check=True)
    counts = [int(x) for x in a.ports.split(",")]
    if not ports_free(FIRST, max(counts)):
        raise SystemExit(f"ports {FIRST}-{FIRST + max(counts) - 1} are not all free")
    load_before = loadavg()
    rows = []
    for place, (cs, cc) in [("unpinned", (None, None)), ("receivers CPU 1, clients CPU 0", (1, 0))]:
        for n in counts:
            hk, sr, hk_sent, sr_sent, ratios = [], [], [], [], []
            for r in range(a.rounds):
                order = [run_hakaru, run_sr] if r % 2 == 0 else [run_sr, run_hakaru]
                res = {}
                for f in order:
                    res[f] = f(FIRST, n, a.time, cs, cc)
                    time.sleep(0.5)
                hk.append(res[run_hakaru][0]); hk_sent.append(res[run_hakaru][1])
                sr.append(res[run_sr][0]); sr_sent.append(res[run_sr][1])
                ratios.append(res[run_hakaru][0] / res[run_sr][0])
                print(f"{place} N={n} round {r + 1}: hakaru {fmt(hk[-1])} msg/s received "
                      f"(clients sent {fmt(hk_sent[-1])}), sockperf sr {fmt(sr[-1])} "
                      f"(clients sent {fmt(sr_sent[-1])}), ratio {ratios[-1]:.2f}", flush=True)
            rows.append((place, n, statistics.median(hk), statistics.median(hk_sent),
                         statistics.median(sr), statistics.median(sr_sent),
                         statistics.median(ratios), ratios))
    uname = os.uname()
    lines = [
        f"Command: `python3 bench/sockperf_ports.py --rounds {a.rounds} --time {a.time} --ports {a.ports}` "
        f"({a.rounds} interleaved rounds, alternating which server goes first; N stock `sockperf tp "
        f"--pps max -m 14 -t {a.time}` clients, one per port {FIRST}-{FIRST}+N-1, against one "
        f"`hakaru server --sockperf-port {FIRST}-(...)` (default receiver threads: N/8) or N "
        f"`sockperf sr --port P`; sockperf 3.7; loopback; {time.strftime('%Y-%m-%d')}; kernel "
        f"{uname.release}, {os.cpu_count()} CPUs ({cpu_model()}); 1-minute load {load_before} before, "
        f"{loadavg()} after). Received: what the server side counted (hakaru's per-client "
        f"summaries, sockperf sr's totals), per second of the clients' run; sent: the clients' "
        f"totals. Higher is better; the ratio is the median of the per-round ratios.",
        "",
        "| placement | ports (clients) | hakaru received msg/s (median) | clients sent | sockperf sr received msg/s (median) | clients sent | hakaru / sockperf sr |",
        "|---|---|---|---|---|---|---|",
    ]
    for place, n, h, hs, s, ss, r, rs in rows:
        lines.append(f"| {place} | {n} | {fmt(h)} | {fmt(hs)} | {fmt(s)} | {fmt(ss)} | "
                     f"**{r:.2f}x** ({', '.join(f'{x:.2f}' for x in rs)}) |")
    block = "\n".join(lines) + "\n"
    print(block)
    if a.write:
        write_block(os.path.join(ROOT, a.write) if not os.path.isabs(a.write) else a.write,
                    "sockperf-ports", block,
                    "## The guides' packet-rate script: one hakaru server on N sockperf ports "
                    "against N `sockperf sr`")


if __name__ == "__main__":
    main()
