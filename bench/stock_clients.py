#!/usr/bin/env python3
"""Every stock client `hakaru server` answers, against hakaru and against the client's own
server, on loopback, in three placements: interleaved rounds, median of per-round ratios.

Usage: python3 bench/stock_clients.py [--rounds 3] [--time 3] [--more N] [--again N]
                                      [--only SUBSTR[,SUBSTR]]
                                      [--placements unpinned,apart,together]
                                      [--write docs/BENCHMARKS.md]

Rows (the client is the same binary for both servers; the stock server is the client's own):
- iperf3 3.21 (../shared/peers, /opt/hakaru-peers/iperf3) and Debian's 3.12: `-c`, `-R`,
  `--bidir`, `-P 4`, `-u -b 0 -l 16`, `--skip-rx-copy` (3.21 only: 3.12 lacks it), `-Z`; into
  `hakaru server` and into `iperf3 -s` of the same version. Figure: what the receiver counted
  (`end.sum_received`; both directions summed for --bidir); for UDP the datagrams that arrived
  per second (`packets - lost_packets` over the test's seconds). Two control rows: 3.12 `-P 4`
  and `-Z` into `hakaru server` and into iperf3 3.21's `-s` (a thread per stream, as hakaru's
  server), since 3.12's own server reads every stream on one thread.
- sockperf 3.10 (/opt/hakaru-peers/sockperf): `tp --pps max -m 14` (figure: datagrams read by
  the receiving application per second, from the kernel's Udp InDatagrams counters across the
  run), `pp` and `ul` (figure: sockperf's avg-latency, lower is better); into
  `hakaru server --sockperf-port` and into `sockperf sr`.
- netperf 2.7.1 (/opt/hakaru-peers/netperf): TCP_STREAM, TCP_MAERTS, UDP_STREAM -m 1400
  (figure: messages the server received per second, REMOTE_RECV_CALLS over ELAPSED_TIME),
  TCP_RR, TCP_CRR; into `hakaru server --netperf-port` and into `netserver`.
- ntttcp 1.4.3 (/opt/hakaru-peers/ntttcp): `-s -m 1` and `-m 4` (figure: the sender's total
  bytes over its duration); into `hakaru server --ntttcp-port` and into `ntttcp -r`.
- iperf2 (Debian's 2.1.8): `iperf -c` (figure: its reported rate) into `hakaru sink --iperf2
  --keep` and into `iperf -s`.

Placements: unpinned (the scheduler decides); apart (servers on CPU 1, clients on CPU 0); together
(both on CPU 0). The ratio is hakaru / stock for rates and stock / hakaru for latencies, so
higher is always better for hakaru; the median of the per-round ratios is the row's figure.
Beside it, the interval the true median lies in with at least 90 % confidence (order
statistics of the rounds' ratios, no assumption about their distribution): on a shared VM
single rounds swing by 20 % or more, and a median under 0.97x whose interval holds 1.0 is not a
measured deficit. A row is "behind" when its whole interval is under 1.0. With `--more N`, a row
whose median is under 0.97x gets rounds up to N in all (five rounds alone call a level row
behind one time in 32). With `--again N`, those rows are measured once more, N rounds on new
servers, after every row has run: on a shared VM the rate moves between a row's two servers as
well as between rows, and a single pass calls rows behind by chance more often than its
interval says (2026-12-05: nine of eleven such rows read level or ahead the second time).
Each round runs the client against both servers, alternating which goes first. Servers are
started here, pinned per placement, and stopped by their PIDs.
"""
import argparse, json, os, re, signal, socket, statistics, subprocess, sys, time

from benchlib import cpu_model, loadavg, stop_process, write_block

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
HAKARU = os.path.join(TARGET, "release", "hakaru")
PEERS = "/opt/hakaru-peers"
I3_NEW = f"{PEERS}/iperf3/bin/iperf3"
I3_OLD = "/usr/bin/iperf3"
SOCKPERF = f"{PEERS}/sockperf/bin/sockperf"
NETPERF, NETSERVER = f"{PEERS}/netperf/bin/netperf", f"{PEERS}/netperf/bin/netserver"
NTTTCP = f"{PEERS}/ntttcp/bin/ntttcp"
IPERF2 = "/usr/bin/iperf"
SECS = 3  # --time, set in main()
PLACEMENTS = {
    # name: (server CPUs, client CPUs); None = unpinned
    "unpinned": (None, None),
    "apart": ("1", "0"),
    "together": ("0", "0"),
}


def pin(cpus):
    return ["taskset", "-c", cpus] if cpus else []


def free_ports(n):
    """`n` consecutive ports free for TCP and UDP on loopback, from a random start."""
    import random
    for _ in range(200):
        first = random.randrange(20000, 60000 - n)
        ok = True
        for p in range(first - 1, first + n):
            for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
                s = socket.socket(socket.AF_INET, kind)
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                finally:
                    s.close()
        if ok:
            return first
    raise RuntimeError("no free port range")


def bound(port, udp):
    """Whether a socket listens on `port` (TCP, state LISTEN) or is bound to it (UDP), from
    /proc/net: a probe connection would be taken by some servers (ntttcp -r) as a test."""
    names = ("udp", "udp6") if udp else ("tcp", "tcp6")
    for f in names:
        for l in open(f"/proc/net/{f}").readlines()[1:]:
            cols = l.split()
            if int(cols[1].rsplit(":", 1)[1], 16) == port and (udp or cols[3] == "0A"):
                return True
    return False


def wait_listen(port, udp=False, limit=10.0):
    """Waits until something listens on `port`."""
    end = time.time() + limit
    while time.time() < end:
        if bound(port, udp):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port}")


def run(cmd, limit, cpus=None):
    p = subprocess.run(pin(cpus) + cmd, capture_output=True, text=True, timeout=limit)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p.stdout


def udp_in():
    """Datagrams read by applications so far (Udp InDatagrams, IPv4 and IPv6)."""
    n = 0
    lines = open("/proc/net/snmp").read().splitlines()
    for h, v in zip(lines, lines[1:]):
        if h.startswith("Udp:") and v.startswith("Udp:"):
            d = dict(zip(h.split()[1:], v.split()[1:]))
            n += int(d["InDatagrams"])
            break
    for l in open("/proc/net/snmp6"):
        if l.startswith("Udp6InDatagrams"):
            n += int(l.split()[1])
    return n


# --- clients: (port, secs, cpus) -> figure ------------------------------------------------

def iperf3_client(binary, args):
    def go(port, secs, cpus):
        out = run([binary, "-c", "127.0.0.1", "-p", str(port), "-t", str(secs), "-J"] + args, secs + 60, cpus)
        end = json.loads(out)["end"]
        if "-u" in args:
            s = end["sum"]
            return (s["packets"] - s["lost_packets"]) / s["seconds"]
        bps = end["sum_received"]["bits_per_second"]
        if "--bidir" in args:
            bps += end["sum_received_bidir_reverse"]["bits_per_second"]
        return bps / 1e9
    return go


def sockperf_client(mode, args):
    def go(port, secs, cpus):
        before = udp_in()
        out = run([SOCKPERF, mode, "-i", "127.0.0.1", "-p", str(port), "-t", str(secs)] + args, secs + 60, cpus)
        if mode == "tp":
            return (udp_in() - before) / secs
        m = re.search(r"avg-latency=([0-9.]+)", out)
        if not m:
            raise RuntimeError(f"no avg-latency in sockperf's output:\n{out[-2000:]}")
        return float(m.group(1))
    return go


NETPERF_KEYS = "THROUGHPUT,ELAPSED_TIME,REMOTE_RECV_CALLS"


def netperf_client(test, rest, figure):
    def go(port, secs, cpus):
        out = run([NETPERF, "-H", "127.0.0.1", "-p", str(port), "-P", "0", "-l", str(secs), "-t", test,
                   "--", "-k", NETPERF_KEYS] + rest, secs + 60, cpus)
        kv = dict(l.split("=", 1) for l in out.splitlines() if "=" in l)
        if figure == "recv_rate":
            return float(kv["REMOTE_RECV_CALLS"]) / float(kv["ELAPSED_TIME"])
        return float(kv["THROUGHPUT"])
    return go


def ntttcp_client(threads):
    def go(port, secs, cpus):
        out = run([NTTTCP, "-s", "-p", str(port), "-m", f"{threads},*,127.0.0.1", "-t", str(secs)], secs + 60, cpus)
        total = re.search(r"total bytes\s*:(\d+)", out)
        dur = re.search(r"test duration\s*:([0-9.]+)", out)
        if not (total and dur):
            raise RuntimeError(f"no totals in ntttcp's output:\n{out[-2000:]}")
        return int(total.group(1)) * 8 / float(dur.group(1)) / 1e9
    return go


def iperf2_client(port, secs, cpus):
    out = run([IPERF2, "-c", "127.0.0.1", "-p", str(port), "-t", str(secs), "-y", "C"], secs + 60, cpus)
    rows = [l for l in out.splitlines() if l.count(",") >= 8]
    if not rows:
        raise RuntimeError(f"no CSV row in iperf's output:\n{out}")
    return float(rows[-1].split(",")[-1]) / 1e9


# --- servers: port -> (argv, udp?) ---------------------------------------------------------

def hk_server(port):
    return [HAKARU, "server", "-p", str(port)]


def hk_sockperf(port):
    return [HAKARU, "server", "-p", "0", "--sockperf-port", str(port)]


def hk_netperf(port):
    return [HAKARU, "server", "-p", "0", "--netperf-port", str(port)]


def hk_ntttcp(port):
    return [HAKARU, "server", "-p", "0", "--ntttcp-port", str(port), "--ntttcp-ports", "4"]


def hk_iperf2(port):
    return [HAKARU, "sink", "--iperf2", "--keep", "-p", str(port)]


def iperf3_server(binary):
    return lambda port: [binary, "-s", "-p", str(port)]


def sr(port):
    return [SOCKPERF, "sr", "-i", "127.0.0.1", "-p", str(port)]


def netserver(port):
    return [NETSERVER, "-D", "-p", str(port)]


def ntttcp_rx(port):
    # One test (it exits after it), of the receiver's -t: the sender runs as long as it says.
    return [NTTTCP, "-r", "-p", str(port), "-m", "4,*,127.0.0.1", "-t", str(SECS)]


def iperf2_server(port):
    return [IPERF2, "-s", "-p", str(port)]


def cases(cc=None):
    out = []
    extra = ["-C", cc] if cc else []
    for ver, binary in (("3.21", I3_NEW), ("3.12", I3_OLD)):
        for label, args in (("-c", []), ("-R", ["-R"]), ("--bidir", ["--bidir"]), ("-P 4", ["-P", "4"]),
                            ("-u -b 0 -l 16", ["-u", "-b", "0", "-l", "16"]),
                            ("--skip-rx-copy", ["--skip-rx-copy"]), ("-Z", ["-Z"])):
            if ver == "3.12" and label == "--skip-rx-copy":
                continue
            unit = "datagrams/s" if "-u" in args else "Gbit/s"
            out.append((f"iperf3 {ver} {label}" + (f" -C {cc}" if cc else ""), unit, True,
                        iperf3_client(binary, args + extra),
                        hk_server, iperf3_server(binary), "tcp"))
    # Control: 3.12's own server is single-threaded and the others (hakaru, iperf3 3.16+ -s)
    # read each stream on a thread; the same client into a stock server of the second kind
    # tells the server's design from hakaru (docs/BENCHMARKS.md, issue 46's section).
    for label, args in (("-P 4", ["-P", "4"]), ("-Z", ["-Z"])):
        out.append((f"iperf3 3.12 {label}, control: into iperf3 3.21 -s" + (f" -C {cc}" if cc else ""),
                    "Gbit/s", True, iperf3_client(I3_OLD, args + extra), hk_server,
                    iperf3_server(I3_NEW), "tcp"))
    out += [
        ("sockperf tp --pps max -m 14", "datagrams/s", True, sockperf_client("tp", ["--pps", "max", "-m", "14"]),
         hk_sockperf, sr, "udp"),
        ("sockperf pp", "us avg", False, sockperf_client("pp", []), hk_sockperf, sr, "udp"),
        ("sockperf ul", "us avg", False, sockperf_client("ul", []), hk_sockperf, sr, "udp"),
        ("netperf TCP_STREAM", "Mbit/s", True, netperf_client("TCP_STREAM", [], "throughput"), hk_netperf, netserver, "tcp"),
        ("netperf TCP_MAERTS", "Mbit/s", True, netperf_client("TCP_MAERTS", [], "throughput"), hk_netperf, netserver, "tcp"),
        ("netperf UDP_STREAM -m 1400", "msg/s received", True, netperf_client("UDP_STREAM", ["-m", "1400"], "recv_rate"),
         hk_netperf, netserver, "tcp"),
        ("netperf TCP_RR", "trans/s", True, netperf_client("TCP_RR", [], "throughput"), hk_netperf, netserver, "tcp"),
        ("netperf TCP_CRR", "trans/s", True, netperf_client("TCP_CRR", [], "throughput"), hk_netperf, netserver, "tcp"),
        ("ntttcp -s -m 1", "Gbit/s", True, ntttcp_client(1), hk_ntttcp, ntttcp_rx, "ntttcp"),
        ("ntttcp -s -m 4", "Gbit/s", True, ntttcp_client(4), hk_ntttcp, ntttcp_rx, "ntttcp"),
        ("iperf2 -c", "Gbit/s", True, iperf2_client, hk_iperf2, iperf2_server, "tcp"),
    ]
    return out


def start_server(argv, port, kind, cpus):
    # Its output goes to a log beside the others, for a row that fails.
    log = open(f"/tmp/stock_clients-{os.path.basename(argv[0])}-{port}.log", "w")
    p = subprocess.Popen(pin(cpus) + argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        if kind == "udp":
            wait_listen(port, udp=True)
        elif kind == "ntttcp":
            wait_listen(port - 1)  # the sync port below the first data port
        else:
            wait_listen(port)
    except Exception:
        stop_process(p)
        raise
    time.sleep(0.3)
    return p


def measure(case, placement, rounds, secs):
    name, unit, higher, client, hk, stock, kind = case
    srv_cpus, cli_cpus = PLACEMENTS[placement]
    ports = {"hakaru": free_ports(5), "stock": None}
    ports["stock"] = free_ports(5)
    while abs(ports["stock"] - ports["hakaru"]) < 6:
        ports["stock"] = free_ports(5)
    # ntttcp uses its port and the ones above it; its sync port is the one below.
    if kind == "ntttcp":
        ports = {k: v + 1 for k, v in ports.items()}
    # A stock ntttcp receiver serves one test and exits: it is started again for each run.
    per_run = kind == "ntttcp"
    procs = {}
    try:
        procs["hakaru"] = start_server(hk(ports["hakaru"]), ports["hakaru"], kind, srv_cpus)
        if not per_run:
            procs["stock"] = start_server(stock(ports["stock"]), ports["stock"], kind, srv_cpus)
        figs = {"hakaru": [], "stock": []}
        for r in range(rounds):
            order = ["hakaru", "stock"] if r % 2 == 0 else ["stock", "hakaru"]
            for who in order:
                if per_run and who == "stock":
                    procs["stock"] = start_server(stock(ports["stock"]), ports["stock"], kind, srv_cpus)
                # A client that hangs or prints no figure (seen: a stock ntttcp sender that
                # never exited after its receiver finished) loses that round, not the matrix.
                try:
                    figs[who].append(client(ports[who], secs, cli_cpus))
                except (subprocess.TimeoutExpired, RuntimeError) as e:
                    print(f"  {name} ({placement}) into {who}, round {r + 1}: {str(e)[:200]}",
                          file=sys.stderr, flush=True)
                    figs[who].append(None)
                if per_run and who == "stock":
                    stop_process(procs.pop("stock"), wait=5)
                time.sleep(0.3)
    finally:
        for p in procs.values():
            stop_process(p, signal.SIGINT, wait=5)
    ratios = [(h / s if higher else s / h) for h, s in zip(figs["hakaru"], figs["stock"]) if h and s]
    figs = {k: [x for x in v if x] for k, v in figs.items()}
    return figs, ratios


def undecided(ratios):
    """Under 0.97x at the median: more rounds tell a deficit from chance. Five rounds call a
    level row "behind" (all five under 1.0) one time in 32, a few rows of a matrix of 72; nine
    (behind: 8 of 9 under 1.0) one time in 50 of those few."""
    return bool(ratios) and statistics.median(ratios) < 0.97


def verdict(lo, hi):
    return "behind" if hi < 1.0 else "ahead" if lo > 1.0 else "level"


def median_interval(xs, confidence=0.90):
    """The distribution-free interval for the median: (x(k), x(n+1-k)) of the sorted values,
    k the largest for which the interval covers the median with at least `confidence`
    (each tail is a Binomial(n, 1/2) count under k)."""
    from math import comb
    xs = sorted(xs)
    n = len(xs)

    def coverage(k):  # 1 - 2 P(Binomial(n, 1/2) <= k - 1)
        return 1.0 - 2.0 * sum(comb(n, i) for i in range(k)) / 2 ** n

    k = 1  # min and max at the least (which covers under `confidence` for n < 5)
    while k + 1 <= (n + 1) // 2 and coverage(k + 1) >= confidence:
        k += 1
    return xs[k - 1], xs[n - k]


def fmt(x):
    if x >= 1e5:
        return f"{x / 1e6:.2f} M"
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:.2f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--more", type=int, default=0,
                    help="rounds a row is taken to when, after --rounds, its median is under 0.97x; "
                         "0: never")
    ap.add_argument("--again", type=int, default=0,
                    help="rounds of a second pass, after every row, for the rows whose median is "
                         "under 0.97x; 0: none")
    ap.add_argument("--time", type=int, default=3)
    ap.add_argument("--only", help="comma-separated substrings of row names to run")
    ap.add_argument("--placements", default="unpinned,apart,together")
    ap.add_argument("--write")
    ap.add_argument("--cc", help="congestion control for the iperf3 rows (iperf3 -C; both servers "
                    "use it too); default: the system's")
    a = ap.parse_args()
    global SECS
    SECS = a.time
    for b in (HAKARU, I3_NEW, I3_OLD, SOCKPERF, NETPERF, NTTTCP, IPERF2):
        if not os.access(b, os.X_OK):
            sys.exit(f"missing {b}: build it (cargo build --release; ../shared/peers/build.sh NAME)")
    todo = [c for c in cases(a.cc) if not a.only or any(s in c[0] for s in a.only.split(","))]
    placements = a.placements.split(",")
    load_before = loadavg()
    rows, low, recheck = [], [], []
    for case in todo:
        for pl in placements:
            figs, ratios = measure(case, pl, a.rounds, a.time)
            extra = 0
            if undecided(ratios) and a.more > len(ratios):
                # More rounds (on new servers) for a row the first ones cannot call.
                more_figs, more_ratios = measure(case, pl, a.more - len(ratios), a.time)
                extra = len(more_ratios)
                ratios += more_ratios
                for k in figs:
                    figs[k] += more_figs[k]
            if not ratios:
                print(f"| {case[0]} | {pl} | no round completed |", flush=True)
                rows.append([case[0], pl, "-", "-", case[1], "no round completed", "-", "-", "-", "-"])
                low.append(f"{case[0]} ({pl}): no round completed")
                continue
            med = statistics.median(ratios)
            lo, hi = median_interval(ratios)
            row = [case[0], pl, fmt(statistics.median(figs['hakaru'])),
                   fmt(statistics.median(figs['stock'])), case[1],
                   f"{', '.join(f'{r:.2f}' for r in ratios)}{f' ({extra} more)' if extra else ''}",
                   f"**{med:.2f}x**", f"{lo:.2f}-{hi:.2f}", verdict(lo, hi), "-"]
            print("| " + " | ".join(row[:9]) + " |", flush=True)
            rows.append(row)
            if med < 0.97:
                low.append(f"{case[0]} ({pl}): {med:.2f}x, interval {lo:.2f}-{hi:.2f}"
                           + (" BEHIND" if hi < 1.0 else ""))
                recheck.append((row, case, pl, len(low) - 1))
    # A second pass, at the end (another moment of the machine's), for the rows under 0.97x: on
    # this VM the rate moves between rows and between a row's servers, so one pass calls a row
    # behind by chance more often than its interval says.
    for row, case, pl, k in recheck if a.again else []:
        _, ratios = measure(case, pl, a.again, a.time)
        if ratios:
            med = statistics.median(ratios)
            lo, hi = median_interval(ratios)
            row[9] = f"{med:.2f}x {verdict(lo, hi)} ({lo:.2f}-{hi:.2f})"
            print(f"again: {case[0]} ({pl}): {row[9]}", flush=True)
            low[k] += f"; again {row[9]}"
        else:
            row[9] = "no round completed"
    more = (f" --more {a.more}" if a.more else "") + (f" --again {a.again}" if a.again else "")
    head = (f"{a.rounds} rounds of {a.time} s per row and placement, {time.strftime('%Y-%m-%d')}, "
            f"{cpu_model()}, {os.cpu_count()} CPUs, load {load_before} before. Command: "
            f"`python3 bench/stock_clients.py --rounds {a.rounds} --time {a.time}{more}`. apart = servers on "
            "CPU 1, clients on CPU 0; together = both on CPU 0. Ratio: hakaru over the stock server "
            "for rates, stock over hakaru for latencies (higher is better for hakaru), per round, "
            "and their median; interval: where the true median lies with at least 90 % confidence "
            "(order statistics of the rounds)"
            + (f"; a row whose median was under 0.97x after {a.rounds} rounds was taken to "
               f"{a.more} (\"N more\")" if a.more else "")
            + (f"; a row whose median was under 0.97x was measured again with {a.again} rounds "
               "on new servers after every row had run (\"again\")" if a.again else "")
            + ". Verdict: behind (the whole interval under 1.0), ahead (over 1.0), level (1.0 "
            "inside it).\n\n"
            "| client | placement | into hakaru | into its own server | unit | per-round ratios | median | 90 % interval | verdict | again |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n")
    block = head + "\n".join("| " + " | ".join(r) + " |" for r in rows) + "\n"
    if low:
        print("rows under 0.97x:\n  " + "\n  ".join(low))
    if a.write:
        write_block(a.write, "stock-clients", block, "## Stock clients into hakaru server and into their own")


if __name__ == "__main__":
    main()
