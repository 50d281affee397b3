#!/usr/bin/env python3
"""Soak: one `hakaru server` under a mix of real tests and hostile peers for N minutes,
sampling its RSS, descriptors and threads.

Usage: python3 bench/soak.py [--minutes 30] [--write docs/BENCHMARKS.md]

Every cycle runs, against one server on loopback: short tcp, udp, pps, latency (TCP and UDP)
and connect tests from 127.0.0.1, and from other loopback addresses the hostile peers of
tests/it/hostile.rs: idle connections, hellos that never ask for a test, frames declaring 8 MiB,
iperf3 cookies without parameters, crafted iperf3 parameters, garbage first bytes, clients that
die mid-test (killed by PID) and stray UDP datagrams. The server's /proc figures are sampled
every 5 s; the summary compares the first minute after warm-up with the end. Every process is
stopped by PID; every loop ends at the deadline.
"""
import argparse, json, os, random, socket, statistics, struct, subprocess, sys, time

from benchlib import stop_process, write_block

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAKARU = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "hakaru")
PORT = 5394
HEADING = "## Soak: one server, real tests and hostile peers"


def proc_figures(pid):
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            if line.startswith("Threads:"):
                threads = int(line.split()[1])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss, fds, threads


def conn_from(src):
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(3)
    s.connect(("127.0.0.1", PORT))
    return s


def hostile_round(rng):
    """Opens hostile connections; returns them so the caller closes them later."""
    held = []
    src = f"127.0.{rng.randint(1, 200)}.{rng.randint(2, 250)}"
    try:
        for _ in range(rng.randint(5, 15)):  # idle connections
            held.append(conn_from(src))
        hello = json.dumps({"type": "hello", "protocol": 1, "software": "soak"}).encode()
        for _ in range(5):  # hellos that never ask for a test
            s = conn_from(src)
            s.sendall(b"HKRU" + struct.pack("!I", len(hello)) + hello)
            held.append(s)
        s = conn_from(src)  # a frame declaring 8 MiB
        s.sendall(b"HKRU" + struct.pack("!I", 8 << 20) + b"{" * 30000)
        held.append(s)
        s = conn_from(src)  # an iperf3 cookie, no parameters
        s.sendall(b"soakcookieabcdefghijklmnopqrstuvwxyz\0")
        held.append(s)
        s = conn_from(src)  # crafted iperf3 parameters
        s.sendall(b"soakcraftedabcdefghijklmnopqrstuvwxy\0")
        p = json.dumps({"tcp": True, "omit": -rng.random() * 5, "time": rng.choice([1, -1, 1e300]), "parallel": 1}).encode()
        s.sendall(struct.pack("!I", len(p)) + p)
        held.append(s)
        s = conn_from(src)  # garbage
        s.sendall(os.urandom(rng.randint(1, 512)))
        held.append(s)
    except OSError:
        pass
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(50):  # strays on the UDP port
        u.sendto(os.urandom(rng.randint(1, 1400)), ("127.0.0.1", PORT))
    u.close()
    return held


def legit(cmd, limit=60):
    p = subprocess.run([HAKARU, *cmd, "127.0.0.1", "-p", str(PORT), "-i", "0"], capture_output=True, timeout=limit)
    return p.returncode == 0


def dying_client():
    """A client killed by PID mid-test."""
    p = subprocess.Popen([HAKARU, "udp", "127.0.0.1", "-p", str(PORT), "-t", "10", "-b", "50M", "-i", "0"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    p.kill()
    p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--write")
    a = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "hakaru"], cwd=ROOT, check=True)
    server = subprocess.Popen([HAKARU, "server", "-B", "127.0.0.1", "-p", str(PORT)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    rng = random.Random(1)
    start = time.time()
    deadline = start + a.minutes * 60
    samples, ok, failed, cycles, held = [], 0, 0, 0, []
    tests = [["tcp", "-n", "8M"], ["udp", "-t", "1", "-b", "20M"], ["pps", "-t", "1", "--rate", "100000"],
             ["latency", "-t", "1"], ["latency", "--udp", "-t", "1"], ["connect", "-t", "1"],
             ["tcp", "-t", "1", "-P", "8", "-R"]]
    next_sample = start
    try:
        while time.time() < deadline:
            cycles += 1
            for s in held:
                s.close()
            held = hostile_round(rng)
            for t in tests:
                if legit(t):
                    ok += 1
                else:
                    failed += 1
                if time.time() >= next_sample:
                    rss, fds, thr = proc_figures(server.pid)
                    samples.append((time.time() - start, rss, fds, thr))
                    next_sample += 5
                if time.time() >= deadline:
                    break
            if cycles % 3 == 0:
                dying_client()
        for s in held:
            s.close()
        time.sleep(6)  # handshakes time out, slots come back
        rss, fds, thr = proc_figures(server.pid)
        samples.append((time.time() - start, rss, fds, thr))
        alive = server.poll() is None
    finally:
        stop_process(server)
    warm = [s for s in samples if 60 <= s[0] < 120] or samples[:3]
    end = samples[-13:-1] or samples[-1:]
    base_rss = statistics.median(s[1] for s in warm)
    end_rss = statistics.median(s[1] for s in end)
    lines = [
        f"Command: `python3 bench/soak.py --minutes {a.minutes:g}` ({time.strftime('%Y-%m-%d')}; kernel "
        f"{os.uname().release}, {os.cpu_count()} CPUs). {cycles} cycles; each: the hostile peers of "
        "tests/it/hostile.rs from a random 127.x address, then tcp, udp, pps, latency (TCP, UDP), connect and "
        "tcp -P 8 -R tests; every third cycle a UDP client killed mid-test.",
        "",
        f"- Legitimate tests: {ok} passed, {failed} failed; the server {'was still serving' if alive else 'DIED'} at the end.",
        f"- RSS: median {base_rss / 1024:.1f} MiB in the minute after the first, {end_rss / 1024:.1f} MiB over the last "
        f"minute (change {(end_rss - base_rss) / 1024:+.1f} MiB); largest sample {max(s[1] for s in samples) / 1024:.1f} MiB.",
        f"- After the peers went: {samples[-1][2]} descriptors, {samples[-1][3]} threads "
        f"(at the first sample: {samples[0][2]} and {samples[0][3]}).",
        "",
        "| minute | RSS MiB | fds | threads |",
        "|---|---|---|---|",
    ]
    per_min = {}
    for t, rss, fds, thr in samples:
        per_min.setdefault(int(t // 60), (rss, fds, thr))
    for m, (rss, fds, thr) in sorted(per_min.items()):
        lines.append(f"| {m} | {rss / 1024:.1f} | {fds} | {thr} |")
    table = "\n".join(lines) + "\n"
    print(table)
    if a.write:
        write_block(os.path.join(ROOT, a.write), "soak", table, HEADING)
    if not alive or failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
