#!/usr/bin/env python3
"""How fast the kernel copies TCP data into a receive buffer, by where the buffer starts in
its page: the reference for docs/performance-notes.md, section 13 (no hakaru in it).

Usage: python3 bench/recv_offset.py [--rounds 4] [--time 2] [--offsets 0,16,64,2048,4064]
                                    [--sender sendfile|copy] [--pin RECV_CPU,SEND_CPU]

A receiver process reads one loopback TCP connection with 128 KiB `recv_into` calls into a
buffer placed OFFSET bytes into a page (a slice of an anonymous mmap, which starts on a page);
a sender process writes to it for --time seconds, with `sendfile` from a 1 MiB file (the data
sits in page-cache pages, as iperf3 -Z sends) or with `send` from a 128 KiB buffer (the kernel
copies it into page fragments, as most senders). Offsets run interleaved within each round; the
table gives each offset's median Gbit/s over the rounds, its range, and the median of its
per-round ratio to the offset hakaru uses (0: on the page). Placement: unpinned unless --pin.
"""

import argparse
import mmap
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

BLOCK = 128 << 10
PAGE = 4096
HAKARU_OFFSET = 0


def receive(port, offset):
    """Accepts one connection and reads it to EOF; prints bytes and seconds."""
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(1)
    print("ready", flush=True)
    ls.settimeout(10)
    c, _ = ls.accept()
    c.settimeout(30)
    m = mmap.mmap(-1, BLOCK + 2 * PAGE)
    view = memoryview(m)[offset:offset + BLOCK]
    total, start = 0, None
    while True:
        n = c.recv_into(view)
        if n == 0:
            break
        if start is None:
            start = time.perf_counter()
        total += n
    secs = time.perf_counter() - (start or time.perf_counter())
    print(f"{total} {secs}", flush=True)


def send(port, how, secs):
    """Writes to the receiver for `secs` seconds, then closes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    end = time.monotonic() + secs
    if how == "sendfile":
        with tempfile.TemporaryFile() as f:
            f.write(b"s" * (1 << 20))
            f.flush()
            while time.monotonic() < end:
                s.sendfile(f, 0, 1 << 20)
    else:
        buf = b"c" * BLOCK
        while time.monotonic() < end:
            s.sendall(buf)
    s.close()


def pinned(cpu):
    return ["taskset", "-c", cpu] if cpu is not None else []


def one(port, offset, a):
    rcpu, scpu = a.pin.split(",") if a.pin else (None, None)
    me = [sys.executable, os.path.abspath(__file__)]
    r = subprocess.Popen(pinned(rcpu) + me + ["--recv", str(port), str(offset)],
                         stdout=subprocess.PIPE, text=True)
    try:
        if r.stdout.readline().strip() != "ready":
            raise RuntimeError("the receiver did not start")
        subprocess.run(pinned(scpu) + me + ["--send", str(port), a.sender, str(a.time)],
                       check=True, timeout=a.time + 20)
        out = r.stdout.readline().split()
        r.wait(timeout=20)
    finally:
        if r.poll() is None:
            r.kill()
            r.wait()
    total, secs = int(out[0]), float(out[1])
    return total * 8 / secs / 1e9


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--recv":
        return receive(int(sys.argv[2]), int(sys.argv[3]))
    if len(sys.argv) > 1 and sys.argv[1] == "--send":
        return send(int(sys.argv[2]), sys.argv[3], float(sys.argv[4]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--time", type=float, default=2.0)
    ap.add_argument("--offsets", default="0,16,64,2048,4064")
    ap.add_argument("--sender", choices=["sendfile", "copy"], default="sendfile")
    ap.add_argument("--pin", help="RECV_CPU,SEND_CPU")
    ap.add_argument("--port", type=int, default=17501)
    a = ap.parse_args()
    offsets = [int(x) % PAGE for x in a.offsets.split(",")]
    if HAKARU_OFFSET not in offsets:
        offsets.append(HAKARU_OFFSET)
    got = {o: [] for o in offsets}
    for r in range(a.rounds):
        for o in offsets:
            got[o].append(one(a.port, o, a))
        print(f"round {r + 1}: " + " ".join(f"{o}={got[o][-1]:.1f}" for o in offsets),
              file=sys.stderr, flush=True)
    place = f"receiver on CPU {a.pin.split(',')[0]}, sender on CPU {a.pin.split(',')[1]}" \
        if a.pin else "unpinned"
    print(f"sender: {a.sender}; {place}; {a.rounds} rounds of {a.time} s\n")
    print(f"| offset in page | Gbit/s (median) | range | ratio to offset {HAKARU_OFFSET} |")
    print("|---|---|---|---|")
    for o in offsets:
        ratios = [x / y for x, y in zip(got[o], got[HAKARU_OFFSET])]
        print(f"| {o} | {statistics.median(got[o]):.1f} | {min(got[o]):.1f}-{max(got[o]):.1f} "
              f"| {statistics.median(ratios):.2f}x |")


if __name__ == "__main__":
    main()
