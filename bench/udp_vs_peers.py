#!/usr/bin/env python3
"""hakaru pps / udp against iperf3 and sockperf on loopback: interleaved rounds, medians, ratios.

Usage: python3 bench/udp_vs_peers.py [--rounds 3] [--time 5] [--write docs/BENCHMARKS.md]

Each round runs every case once per tool (hakaru, iperf3, sockperf), the order rotated from
round to round, so slow periods of this shared VM hit every tool alike. The common "received"
figure is the kernel's: the delta of `Udp: InDatagrams` in /proc/net/snmp, read just before the
client starts and right after it exits (on loopback the delta is what the receiving socket got,
plus a few control datagrams), divided by the tool's own test time (--rate-over test, the default)
or by the client's wall-clock run time (--rate-over run; sockperf's client runs about 2 s longer
than its -t, warming up and waiting, which this would count against it). Each tool's own receiver
figure is shown beside it where the tool has one (hakaru: totals[0].udp.received_pps and
totals[0].receiver.bits_per_second; iperf3 -J: end.sum_received; sockperf's client reports
only what it sent). Drops at the receiver are the system-wide `Udp: RcvbufErrors` delta of each
run. Client CPU (user + system) comes from wait4(2). Servers run as separate processes on
127.0.0.1, started once and stopped by PID.
"""
import argparse, json, os, re, signal, statistics, subprocess, sys, tempfile, threading, time

from benchlib import write_block

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_DIR = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
HAKARU = os.path.join(TARGET_DIR, "release", "hakaru")
HK_PORT, IP_PORT, SP_PORT = 5311, 5312, 5313
HOST = "127.0.0.1"
HEADING = "## UDP: hakaru pps / udp against iperf3 3.12 and sockperf 3.7"

TOOLS = ("hakaru", "iperf3", "sockperf")

# name, headline metric ("pps" or "bps"), target ratio, peers the target applies to,
# payload bytes per tool, extra args per tool
CASES = [
    dict(key="A", name="A: small datagrams, 1 flow, max rate (hakaru with GSO)",
         metric="pps", target=4.0, target_peers=("iperf3", "sockperf"),
         payload={"hakaru": 14, "iperf3": 16, "sockperf": 14},
         hakaru=["pps"], iperf3=["-u", "-b", "0", "-l", "16"], sockperf=["--pps", "max", "-m", "14"]),
    dict(key="B", name="B: as A, hakaru --no-gso",
         metric="pps", target=1.2, target_peers=("iperf3", "sockperf"),
         payload={"hakaru": 14, "iperf3": 16, "sockperf": 14},
         hakaru=["pps", "--no-gso"], iperf3=["-u", "-b", "0", "-l", "16"], sockperf=["--pps", "max", "-m", "14"]),
    dict(key="C", name="C: 1472-byte datagrams, 1 flow, max rate",
         metric="bps", target=3.0, target_peers=("iperf3",),
         payload={"hakaru": 1472, "iperf3": 1472, "sockperf": 1472},
         hakaru=["udp", "-b", "0", "-l", "1472"], iperf3=["-u", "-b", "0", "-l", "1472"],
         sockperf=["--pps", "max", "-m", "1472"]),
]


def udp_snmp():
    """The Udp: counters of /proc/net/snmp as a dict."""
    with open("/proc/net/snmp") as f:
        rows = [l.split() for l in f if l.startswith("Udp:")]
    return dict(zip(rows[0][1:], map(int, rows[1][1:])))


def run_measured(cmd, limit):
    """Runs cmd; returns (stdout, stderr, cpu_seconds, wall_seconds, udp_counter_deltas).

    Output goes to temporary files (no pipe can fill up); a timer kills the client at `limit`
    seconds, so the blocking wait4 is bounded and returns the moment the client exits."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        before = udp_snmp()
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=out, stderr=err)
        fired = []
        timer = threading.Timer(limit, lambda: (fired.append(1), os.kill(p.pid, signal.SIGKILL)))
        timer.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
        except BaseException:
            os.kill(p.pid, signal.SIGKILL)
            os.waitpid(p.pid, 0)
            raise
        finally:
            timer.cancel()
        wall = time.monotonic() - t0
        after = udp_snmp()
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        so, se = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if fired:
        raise RuntimeError(f"{' '.join(cmd)} timed out after {limit} s")
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {se.strip() or so.strip()}")
    delta = {k: after[k] - before[k] for k in before}
    return so, se, ru.ru_utime + ru.ru_stime, wall, delta


def hakaru(case, secs):
    out, _, cpu, wall, d = run_measured(
        [HAKARU] + case["hakaru"][:1] + [HOST, "-p", str(HK_PORT), "-t", str(secs), "--json"]
        + case["hakaru"][1:], secs + 30)
    t = json.loads(out)["totals"][0]
    own = dict(rx_pps=t["udp"]["received_pps"], rx_bps=t["receiver"]["bits_per_second"],
               rx_count=t["udp"]["received_datagrams"], tx_pps=t["udp"]["sent_pps"],
               tx_count=t["udp"]["sent_datagrams"], test_s=t["sender"]["seconds"])
    return cpu, wall, d, own


def iperf3(case, secs):
    out, _, cpu, wall, d = run_measured(
        ["iperf3", "-c", HOST, "-p", str(IP_PORT)] + case["iperf3"] + ["-t", str(secs), "-J"], secs + 30)
    e = json.loads(out)["end"]
    # iperf3 3.12 -u -J: end.sum / end.sum_sent carry the sender's bytes; end.sum_received is
    # the server's view: bytes received, packets (highest sequence seen) and lost_packets.
    r, s = e["sum_received"], e["sum_sent"]
    got = r["packets"] - r["lost_packets"]
    own = dict(rx_pps=got / r["seconds"] if r["seconds"] > 0 else 0.0, rx_bps=r["bits_per_second"],
               rx_count=got, tx_pps=s["packets"] / s["seconds"] if s["seconds"] > 0 else 0.0,
               tx_count=s["packets"], test_s=s["seconds"])
    return cpu, wall, d, own


def sockperf(case, secs):
    out, err, cpu, wall, d = run_measured(
        ["sockperf", "tp", "-i", HOST, "-p", str(SP_PORT)] + case["sockperf"] + ["-t", str(secs)], secs + 30)
    text = re.sub(r"\x1b\[[0-9;]*m", "", out + err)
    m = re.search(r"Total of (\d+) messages sent in ([\d.]+) sec", text)
    if not m:
        raise RuntimeError(f"sockperf: no 'Total of N messages sent' line in: {text[-500:]}")
    sent, secs_sent = int(m.group(1)), float(m.group(2))
    own = dict(rx_pps=None, rx_bps=None, rx_count=None, tx_pps=sent / secs_sent if secs_sent > 0 else 0.0,
               tx_count=sent, test_s=secs_sent)
    return cpu, wall, d, own


RUN = {"hakaru": hakaru, "iperf3": iperf3, "sockperf": sockperf}


def listening(proto, port):
    """True when some socket is bound to `port`: TCP in LISTEN (0A), UDP in any state."""
    for fam in ("", "6"):
        try:
            with open(f"/proc/net/{proto}{fam}") as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if int(fields[1].rsplit(":", 1)[1], 16) == port and (proto == "udp" or fields[3] == "0A"):
                        return True
        except FileNotFoundError:
            pass
    return False


def start_server(cmd, needs, limit=10.0):
    """Starts a server and waits (at most `limit` s) until it has every (proto, port) in `needs`."""
    for proto, port in needs:
        if listening(proto, port):
            raise RuntimeError(f"{proto} port {port} is already in use; not starting {cmd[0]}")
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + limit
    while not all(listening(proto, port) for proto, port in needs):
        if p.poll() is not None:
            raise RuntimeError(f"{' '.join(cmd)} exited ({p.returncode}) before listening")
        if time.monotonic() > deadline:
            stop([p])
            raise RuntimeError(f"{' '.join(cmd)} did not listen within {limit} s")
        time.sleep(0.05)
    return p


def stop(servers):
    for s in servers:
        if s.poll() is None:
            s.send_signal(signal.SIGTERM)
    for s in servers:
        try:
            s.wait(timeout=10)
        except subprocess.TimeoutExpired:
            s.kill()
            s.wait(timeout=10)


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, spec):
    return "n/a" if x is None else format(x, spec)


def version(cmd, pattern):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        m = re.search(pattern, r.stdout + r.stderr)
        return m.group(1) if m else "?"
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def machine_line():
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for l in f:
                if l.startswith("model name"):
                    model = l.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"kernel {os.uname().release}, {os.cpu_count()} CPUs ({model})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--time", type=int, default=5)
    ap.add_argument("--write", default=None)
    ap.add_argument("--rate-over", choices=("test", "run"), default="test",
                    help="divide the kernel's datagram count by each tool's own test time (default: "
                         "sockperf's client adds about 2 s of warm-up and wait around its -t) or by the "
                         "client process's whole run time")
    a = ap.parse_args()
    if a.rounds < 1 or a.time < 1:
        ap.error("--rounds and --time must be at least 1")
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "hakaru"], cwd=ROOT, check=True)
    # res[case][tool] = list of per-round dicts
    res = {c["key"]: {t: [] for t in TOOLS} for c in CASES}
    flagged = []
    servers = []
    try:
        servers.append(start_server([HAKARU, "server", "-B", HOST, "-p", str(HK_PORT)],
                                    [("tcp", HK_PORT), ("udp", HK_PORT)]))
        servers.append(start_server(["iperf3", "-s", "-B", HOST, "-p", str(IP_PORT)], [("tcp", IP_PORT)]))
        servers.append(start_server(["sockperf", "sr", "-i", HOST, "-p", str(SP_PORT)], [("udp", SP_PORT)]))
        for rnd in range(a.rounds):
            for c in CASES:
                order = TOOLS[rnd % 3:] + TOOLS[:rnd % 3]
                for tool in order:
                    cpu, wall, d, own = RUN[tool](c, a.time)
                    n = d["InDatagrams"]
                    secs = own["test_s"] if a.rate_over == "test" and own["test_s"] > 0 else wall
                    pps = n / secs
                    res[c["key"]][tool].append(dict(
                        pps=pps, bps=pps * c["payload"][tool] * 8, pps_run=n / wall, drops=d["RcvbufErrors"],
                        cpu=cpu, wall=wall, own=own))
                    # Loopback only: the kernel cannot deliver more than was sent, nor (much) more
                    # than the tool read. More means other UDP traffic on this host during the run.
                    limit = min(x for x in (own["tx_count"], own["rx_count"]) if x is not None)
                    if n > limit * 1.02 + 100:
                        msg = (f"round {rnd + 1}, case {c['key']}, {tool}: the kernel counted {n} datagrams, "
                               f"the tool sent {own['tx_count']} and read {fmt(own['rx_count'], 'd')}")
                        flagged.append(msg)
                        print(f"warning: {msg}: other UDP traffic on this host?", file=sys.stderr)
                    time.sleep(1)
                print(f"round {rnd + 1}: {c['name']}: " + ", ".join(
                    f"{t} {res[c['key']][t][-1]['pps'] / 1e6:.3f} Mpps "
                    f"{res[c['key']][t][-1]['bps'] / 1e9:.3f} Gbit/s" for t in order), file=sys.stderr)
    finally:
        stop(servers)

    cmd = f"python3 bench/udp_vs_peers.py --rounds {a.rounds} --time {a.time}" + (
        f" --rate-over {a.rate_over}" if a.rate_over != "test" else "") + (
        f" --write {a.write}" if a.write else "")
    over = ("each tool's own test time (hakaru: totals[0].sender.seconds, iperf3: end.sum_sent.seconds, "
            "sockperf: \"sent in S sec\")" if a.rate_over == "test" else "the client process's whole run time")
    iperf_v = version(["iperf3", "--version"], r"iperf (\S+)")
    sockperf_v = version(["sockperf", "--version"], r"version (\S+)")
    lines = [
        f"Command: `{cmd}` ({a.rounds} interleaved rounds of {a.time} s per case and tool; "
        f"{time.strftime('%Y-%m-%d')}; iperf3 {iperf_v}; sockperf {sockperf_v})",
        "",
        f"Machine: {machine_line()}",
        "",
        f"Received rates are the kernel's count (`Udp: InDatagrams` delta over the client's run) over {over}; "
        "bit rates are payload bits (received datagrams x payload size). Ratios are the median of the "
        "per-round ratios; **bold** is the metric the target applies to.",
        "",
        "| case | metric | hakaru | iperf3 | sockperf | hakaru/iperf3 | hakaru/sockperf | target | met? |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in CASES:
        r = res[c["key"]]
        for metric, label, scale in (("pps", "received Mpps", 1e6), ("bps", "received Gbit/s", 1e9)):
            cells = [fmt(med(x[metric] for x in r[t]) / scale, ".3f") for t in TOOLS]
            headline = metric == c["metric"]
            rcell, met = {}, []
            for peer in ("iperf3", "sockperf"):
                ratio = med([h[metric] / p[metric] for h, p in zip(r["hakaru"], r[peer]) if p[metric] > 0])
                cell = "n/a" if ratio is None else f"{ratio:.2f}x"
                if headline and peer in c["target_peers"]:
                    cell = f"**{cell}**"
                    met.append(f"{peer}: " + ("yes" if ratio is not None and ratio >= c["target"] else "no"))
                rcell[peer] = cell
            target = (f">= {c['target']:g}x vs " + " and ".join(c["target_peers"])) if headline else ""
            lines.append(f"| {c['name'] if metric == 'pps' else ''} | {label} | {' | '.join(cells)} "
                         f"| {rcell['iperf3']} | {rcell['sockperf']} | {target} | {', '.join(met)} |")
    lines += [
        "",
        "Each tool's own figures beside the kernel's (medians; sockperf's client reports only what it sent, "
        "its server nothing per run):",
        "",
        "| case | tool | payload B | kernel received Mpps | same over client run time | tool's received Mpps "
        "| tool's received Gbit/s | tool's sent Mpps | RcvbufErrors per run | tool's test s | client run s "
        "| client CPU % |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in CASES:
        for t in TOOLS:
            r = res[c["key"]][t]
            rx_pps, rx_bps, tx_pps, test_s = (med(x["own"][k] for x in r)
                                              for k in ("rx_pps", "rx_bps", "tx_pps", "test_s"))
            lines.append(
                f"| {c['key']} | {t} | {c['payload'][t]} | {med(x['pps'] for x in r) / 1e6:.3f} "
                f"| {med(x['pps_run'] for x in r) / 1e6:.3f} "
                f"| {fmt(None if rx_pps is None else rx_pps / 1e6, '.3f')} "
                f"| {fmt(None if rx_bps is None else rx_bps / 1e9, '.3f')} "
                f"| {fmt(None if tx_pps is None else tx_pps / 1e6, '.3f')} | {med(x['drops'] for x in r):.0f} "
                f"| {test_s:.2f} | {med(x['wall'] for x in r):.2f} "
                f"| {med(100 * x['cpu'] / x['wall'] for x in r):.0f} |")
    lines += [
        "",
        "Note: on loopback there is no NIC. The receive path (softirq) runs on the sending CPU, in the "
        "sender's system call, so a faster sender also does more of the receiver's kernel work, and "
        "sender and receiver share this machine's 2 CPUs. sockperf's client spends about 2 s in warm-up "
        "and waits outside its `-t`, which is why its rate over the client run time is much lower. "
        "`InDatagrams` and `RcvbufErrors` are system-wide, and `RcvbufErrors` counts socket buffers, "
        "which can hold several datagrams. In A and B iperf3 sends 16-byte payloads (`-l 16`), "
        "hakaru and sockperf 14.",
    ]
    if flagged:
        lines += ["", f"**{len(flagged)} run(s) flagged**: the kernel counted more datagrams than the tool "
                  "sent or read, so other UDP traffic ran at the same time; their figures are suspect:"]
        lines += [f"- {m}" for m in flagged]
    block = "\n".join(lines) + "\n"
    print(block)
    if a.write:
        write_block(a.write if os.path.isabs(a.write) else os.path.join(ROOT, a.write), "udp-vs-peers", block, HEADING)


if __name__ == "__main__":
    main()
