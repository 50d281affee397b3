#!/usr/bin/env python3
"""hakaru plan across a fleet: release skew and the coordinator's CPU with 100 hosts.

Usage (root): python3 bench/plan_fleet.py [--hosts 100] [--steps 10] [--scale 5,10,20,50]
                                          [--write docs/BENCHMARKS.md]

Builds --hosts network namespaces on one bridge (198.19.201.0/24, inside namespaces this
script creates and deletes) and a peers file in the mesh's format (docs/mesh.md) naming them,
one labelled `role=rx` and the rest `role=tx`, each with its namespace as a label. The plan
takes its hosts from that file with `[fleet]` (`netns = "{ns}"`), exactly as a fleet's plan
takes them from its agents' peer list, and runs --steps steps of `hakaru pps` (100 datagrams a
second, 300 ms) from every `@role=tx` host into the `@role=rx` one: hosts - 1 clients
released together per step.

Reported, from the plan's JSON and /proc:
- each step's `release`: `start_skew_ms` (spread of the instants the senders' data began,
  by their clocks: exact here, one machine; the goal), `start_late_ms` (the latest start after
  the release instant), `skew_ms` (spread of the instants the clients heard their `go`),
  `ack_spread_ms` (spread of their acknowledgements at the
  coordinator), `setup_ms` (start of the step until the last client was ready) and
  `go_margin_ms` (the least time by which a client's `go AT` line came before the instant AT);
  median and maximum over the steps;
- the coordinator's own CPU time (utime + stime of the `hakaru plan run` process, read from
  /proc while it is a zombie, so without the clients it started), in all and per host per
  step, and the run's wall time.
- with --scale, the same plan (3 steps) with fewer hosts, for the skew against the number
  of clients started at once on this machine's CPUs.
Every process is stopped by its PID; the namespaces are deleted at the end, also on failure.
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

from benchlib import process_cpu, write_block
import plan_sync
from plan_sync import teardown

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_DIR = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
HAKARU = os.path.join(TARGET_DIR, "release", "hakaru")
HEADING = "## Plans across a fleet: 100 hosts"
PREFIX = f"hkf{os.getpid() % 10000}"
NET = "198.19.201"


def build(n):
    return plan_sync.build(n, prefix=PREFIX, net=NET, one_segment=False)


def run(members, steps):
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "peers.txt"), "w") as f:
            for i, (ns, ip) in enumerate(members):
                f.write(f"{ip} role={'rx' if i == 0 else 'tx'} ns={ns}\n")
        path = os.path.join(d, "plan.toml")
        out = os.path.join(d, "out.json")
        with open(path, "w") as f:
            f.write(
                f'[fleet]\npeers = "peers.txt"\nnetns = "{{ns}}"\n\n'
                f'[[step]]\nkind = "pps"\nreceivers = ["@role=rx"]\nsenders = ["@role=tx"]\n'
                f'parallel = 1\nrate = 100\ntime = "300ms"\nrepeat = {steps}\n')
        t0 = time.monotonic()
        with open(os.path.join(d, "stderr"), "w+") as err:
            p = subprocess.Popen([HAKARU, "plan", "run", path, "--json", "-o", out],
                                 stdout=subprocess.DEVNULL, stderr=err)
            try:
                # Wait for the exit without reaping, so /proc still has the coordinator's own times.
                os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
                wall = time.monotonic() - t0
                cpu = process_cpu(p.pid)
            finally:
                if p.poll() is None:
                    p.kill()
                p.wait(timeout=60)
            err.seek(0)
            tail = err.read()[-2000:]
        if p.returncode != 0:
            errors = json.load(open(out)).get("errors", [])[:5] if os.path.exists(out) else []
            sys.exit(f"plan failed ({p.returncode}): {errors} {tail}")
        return json.load(open(out)), cpu, wall


def start_skew(release):
    """The spread of the senders' data starts (`start_skew_ms`): every pps step is scheduled."""
    if release.get("start_skew_ms") is None:
        sys.exit(f"a step has no start_skew_ms (was every run scheduled?): {release}")
    return release["start_skew_ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--scale", default="5,10,20,50")
    ap.add_argument("--write")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces)")
    if not 2 <= a.hosts <= 250:
        sys.exit("--hosts: 2 to 250")
    scale = []
    for n in [int(x) for x in a.scale.split(",") if x]:
        names, members = build(n)
        try:
            d, _, _ = run(members, 3)
        finally:
            teardown(names)
        scale.append((n - 1, statistics.median(start_skew(s["release"]) for s in d["steps"])))
    names, members = build(a.hosts)
    try:
        doc, cpu, wall = run(members, a.steps)
    finally:
        teardown(names)
    rel = [s["release"] for s in doc["steps"]]
    clients = [len(s["runs"]) for s in doc["steps"]]
    if any(c != a.hosts - 1 for c in clients):
        sys.exit(f"a step ran {clients} clients, not {a.hosts - 1} each")
    skews = [start_skew(r) for r in rel]
    lates = [r["start_late_ms"] for r in rel]
    heard = [r["skew_ms"] for r in rel]
    margins = [r["go_margin_ms"] for r in rel]
    late = sum(r["late"] for r in rel)
    lead = rel[0]["lead_ms"]
    acks = [r["ack_spread_ms"] for r in rel]
    setups = [r["setup_ms"] for r in rel]
    per_host_step = cpu / a.hosts / a.steps * 1000
    scale.append((a.hosts - 1, statistics.median(skews)))
    scale_rows = "".join(
        f"| {c} | {sk:.2f} | {sk / c * os.cpu_count():.2f} |\n" for c, sk in scale)
    kernel = os.uname().release
    block = (
        f"Command: `python3 bench/plan_fleet.py --hosts {a.hosts} --steps {a.steps} --scale {a.scale} --write docs/BENCHMARKS.md`"
        f" (as root; {time.strftime('%Y-%m-%d')}; kernel {kernel}, {os.cpu_count()} CPUs)\n\n"
        f"{a.hosts} network namespaces on one bridge, the plan's hosts taken from a peers file with `[fleet]`"
        f" (`netns = \"{{ns}}\"`); each of {a.steps} steps releases {a.hosts - 1} `hakaru pps` clients"
        f" (100 datagrams/s, 300 ms) into one receiver.\n\n"
        f"| figure | median | max | goal |\n|---|---|---|---|\n"
        f"| start skew: spread of the {a.hosts - 1} senders' data starts, by their clocks, ms | {statistics.median(skews):.3f} | {max(skews):.3f} | < 5 ms |\n"
        f"| the latest sender's data start after the instant, ms | {statistics.median(lates):.3f} | {max(lates):.3f} | |\n"
        f"| spread of the instants the clients heard their `go`, ms | {statistics.median(heard):.3f} | {max(heard):.3f} | |\n"
        f"| spread of the `released` acknowledgements at the coordinator, ms | {statistics.median(acks):.3f} | {max(acks):.3f} | |\n"
        f"| set-up until every client was ready, ms | {statistics.median(setups):.0f} | {max(setups):.0f} | |\n"
        f"| least time a client's `go {{instant}}` came before the instant ({lead:.1f} ms lead), ms | {statistics.median(margins):.2f} | min {min(margins):.2f} | > 0 |\n\n"
        f"Clients whose `go` came after the instant: {late} of {sum(clients)}.\n\n"
        f"The coordinator (`hakaru plan run`, its own CPU without the clients it starts): **{cpu:.2f} s** over the"
        f" whole run ({wall:.1f} s wall, version check and server start included), "
        f"**{per_host_step:.2f} ms per host per step**.\n\n"
        f"Reading: the coordinator writes `go AT` with the instant {lead:.0f} ms ahead (20 ms + 1 ms a client), and"
        f" each pps client, on its line, sends the instant to the server (`start_at`) with `flows_ready`; the server"
        f" reads its counters, starts its threads and answers `start`, the client starts its own, and all of them"
        f" sleep until the instant (each side's ticker reads its interface counters 10 ms before it, not at it). So the work of starting {a.hosts - 1} tests on one receiver (the clients hear"
        f" their `go` over {statistics.median(heard):.1f} ms, the set-up after it is about a millisecond of CPU a"
        f" client) is done inside the lead, and at the instant only the data threads wake: the senders' data"
        f" threads began within {statistics.median(skews):.2f} ms of each other, their first datagram right after"
        f" (each client's `began_unix`, by the one clock they share here). Before the start was scheduled (the client waited for the instant and"
        f" then asked the server to start) the same run read 47 ms: that set-up, done by 2 CPUs after the instant."
        f" On a fleet the figure adds the hosts' clock offsets (NTP: a fraction of a millisecond to a few).\n\n"
        f"The start skew against the clients started at once (median of the steps; 3 steps each but the last"
        f" row):\n\n"
        f"| clients | start skew, ms | ms x CPUs / client |\n|---|---|---|\n{scale_rows}"
    )
    print(block)
    if a.write:
        write_block(a.write, "plan-fleet", block, HEADING)


if __name__ == "__main__":
    main()
