#!/usr/bin/env python3
"""hakaru plan: release skew of the synchronised start, and what the coordinator costs.

Usage (root): python3 bench/plan_sync.py [--skew-steps 20] [--rounds 3] [--time 5]
                                          [--write docs/BENCHMARKS.md]

Builds 9 network namespaces on one bridge (198.19.200.0/24, inside namespaces this script
creates and deletes), then:

1. Skew: one plan with `repeat = N` of a light step, 8 senders into 1 receiver through the
   netns launcher (9 hosts), and reads each step's `release`: `skew_ms` (spread of the
   instants the 8 clients saw `go`, by their clocks: exact here, one machine) and
   `ack_spread_ms` (spread of the arrival of their `released` acknowledgements at the
   coordinator). Reports the median and the maximum over the N steps.
2. Overhead: the seeds' packet-rate scenario, 3 senders x 64 flows of `hakaru pps` into 1
   receiver for --time seconds, run as a plan and as three clients started by hand (three
   `ip netns exec ... hakaru pps RX -P 64 --json` processes started back to back against a
   `hakaru server` the script runs), interleaved for --rounds rounds. The figure is the sum of
   the three clients' received datagram rates (totals[0].udp.received_pps); the ratio is the
   median of per-round plan/manual ratios.
Every process is stopped by its PID; the namespaces are deleted at the end.
"""
import argparse, json, os, signal, statistics, subprocess, sys, tempfile, time

from benchlib import write_block

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_DIR = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
HAKARU = os.path.join(TARGET_DIR, "release", "hakaru")
HEADING = "## Plans: release skew and coordinator cost"
PREFIX = f"hkb{os.getpid() % 10000}"
NET = "198.19.200"
MANUAL_PORT = 5301


def sh(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True, timeout=60)


def build(n, prefix=PREFIX, net=NET, one_segment=True):
    """n namespaces on one bridge (in a hub namespace), addressed net.1 to net.n; with
    one_segment, GSO off on their links (the packet-rate scenario counts datagrams)."""
    hub = f"{prefix}-hub"
    names = [hub]
    sh("ip", "netns", "add", hub)
    sh("ip", "-n", hub, "link", "add", "br0", "type", "bridge")
    sh("ip", "-n", hub, "link", "set", "br0", "up")
    members = []
    for i in range(n):
        ns = f"{prefix}-m{i}"
        sh("ip", "netns", "add", ns)
        names.append(ns)
        sh("ip", "-n", hub, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "-n", hub, "link", "set", f"p{i}", "master", "br0", "up")
        sh("ip", "-n", ns, "addr", "add", f"{net}.{i + 1}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        gso = ["gso_max_segs", "1"] if one_segment else []
        sh("ip", "-n", ns, "link", "set", "dev", "eth0", *gso, "up")
        members.append((ns, f"{net}.{i + 1}"))
    return names, members


def teardown(names):
    for ns in names:
        pids = sh("ip", "netns", "pids", ns, check=False).stdout.split()
        for p in pids:
            try:
                os.kill(int(p), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        sh("ip", "netns", "del", ns, check=False)


def hosts_toml(members, names):
    return "".join(f'[hosts.{n}]\naddress = "{ip}"\nnetns = "{ns}"\n' for n, (ns, ip) in zip(names, members))


def run_plan(text, limit):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "plan.toml")
        out = os.path.join(d, "out.json")
        with open(path, "w") as f:
            f.write(text)
        p = subprocess.run([HAKARU, "plan", "run", path, "--json", "-o", out],
                           capture_output=True, text=True, timeout=limit)
        doc = json.load(open(out))
        if p.returncode != 0:
            sys.exit(f"plan failed: {doc['errors']}")
        return doc


def skew(members, steps):
    names = ["dut"] + [f"a{i}" for i in range(1, 9)]
    senders = ", ".join(f'"{n}"' for n in names[1:])
    text = hosts_toml(members, names) + (
        f'\n[[step]]\nkind = "pps"\nreceivers = ["dut"]\nsenders = [{senders}]\n'
        f'parallel = 1\nrate = 100\ntime = "300ms"\nrepeat = {steps}\n')
    doc = run_plan(text, 60 + steps * 10)
    rel = [s["release"] for s in doc["steps"]]
    return [r["skew_ms"] for r in rel], [r["ack_spread_ms"] for r in rel], [r["setup_ms"] for r in rel]


def sum_pps(results):
    return sum(r["totals"][0]["udp"]["received_pps"] for r in results)


def plan_round(members, t):
    names = ["rx", "s1", "s2", "s3"]
    text = hosts_toml(members[:4], names) + (
        f'\n[[step]]\nkind = "pps"\nreceivers = ["rx"]\nsenders = ["s1", "s2", "s3"]\n'
        f'parallel = 64\ntime = {t}\n')
    doc = run_plan(text, 120)
    return sum_pps([r["result"] for r in doc["steps"][0]["runs"]])


def manual_round(members, t):
    rx_ip = members[0][1]
    procs = []
    for ns, _ in members[1:4]:
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", ns, HAKARU, "pps", rx_ip, "-p", str(MANUAL_PORT), "-P", "64",
             "-t", str(t), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        if p.returncode != 0:
            sys.exit(f"manual client failed: {err}")
        results.append(json.loads(out))
    return sum_pps(results)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--skew-steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--time", type=int, default=5)
    ap.add_argument("--write")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces)")
    names, members = build(9)
    server = None
    try:
        skews, acks, setups = skew(members, a.skew_steps)
        server = subprocess.Popen(["ip", "netns", "exec", members[0][0], HAKARU, "server", "-p", str(MANUAL_PORT)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        plan, manual, ratios = [], [], []
        for r in range(a.rounds):
            order = ("plan", "manual") if r % 2 == 0 else ("manual", "plan")
            got = {}
            for which in order:
                got[which] = plan_round(members, a.time) if which == "plan" else manual_round(members, a.time)
            plan.append(got["plan"])
            manual.append(got["manual"])
            ratios.append(got["plan"] / got["manual"])
            print(f"round {r + 1}: plan {got['plan'] / 1e6:.3f} Mpps, manual {got['manual'] / 1e6:.3f} Mpps", file=sys.stderr)
    finally:
        if server:
            server.kill()
            server.wait()
        teardown(names)
    kernel = os.uname().release
    block = (
        f"Command: `python3 bench/plan_sync.py --skew-steps {a.skew_steps} --rounds {a.rounds} --time {a.time}"
        f" --write docs/BENCHMARKS.md` (as root; {time.strftime('%Y-%m-%d')}; kernel {kernel}, {os.cpu_count()} CPUs)\n\n"
        f"9 network namespaces on one bridge, every host reached through the netns launcher.\n\n"
        f"| figure | median | max | goal |\n|---|---|---|---|\n"
        f"| release skew, 8 clients (9 hosts), by the clients' clocks, ms | {statistics.median(skews):.3f} | {max(skews):.3f} | < 5 ms |\n"
        f"| spread of the `released` acknowledgements at the coordinator, ms | {statistics.median(acks):.3f} | {max(acks):.3f} | |\n"
        f"| set-up until every client was ready, ms | {statistics.median(setups):.1f} | {max(setups):.1f} | |\n\n"
        f"Coordinator cost, 3 senders x 64 `pps` flows into 1 receiver, {a.time} s, {a.rounds} interleaved rounds "
        f"(sum of the clients' received datagram rates):\n\n"
        f"| run as | median Mpps | rounds |\n|---|---|---|\n"
        f"| hakaru plan run | {statistics.median(plan) / 1e6:.3f} | {', '.join(f'{x / 1e6:.3f}' for x in plan)} |\n"
        f"| three clients started by hand | {statistics.median(manual) / 1e6:.3f} | {', '.join(f'{x / 1e6:.3f}' for x in manual)} |\n\n"
        f"Median plan/manual ratio: **{statistics.median(ratios):.3f}x** (goal >= 0.95x). Both run the same `hakaru pps` "
        f"clients; the plan adds only the held start and its reading of their JSON Lines. The clients started by hand "
        f"begin up to a process start apart, which the plan's barrier removes.\n"
    )
    print(block)
    if a.write:
        write_block(a.write, "plan-sync", block, HEADING)


if __name__ == "__main__":
    main()
