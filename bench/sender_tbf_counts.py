#!/usr/bin/env python3
"""Issue 47: many flows through a tbf on the SENDER's own veth (`burst 32kbit latency 50ms`),
hakaru against iperf3, with the kernel's counts beside each tool's headline.

Usage (root): python3 bench/sender_tbf_counts.py RATE FLOWS REVERSE(0|1) CC ROUNDS TOOLS [HAKARU FLAGS]
  e.g. python3 bench/sender_tbf_counts.py 37mbit 16 0 bbr 3 hakaru,iperf3
  env HAKARU (default target/release/hakaru), SECS (default 6), SYSCTL ("k=v ..." in the
  sending namespace), OUT (directory for the per-run samples, default /tmp).

Makes namespaces hk47-a (client) and hk47-b (server, 198.18.47.2) joined by a veth; the tbf
sits on the sending end's veth (the client's, or the server's with REVERSE=1). Every 100 ms it
samples the tbf's `tc -s qdisc` (sent bytes, drops, backlog) and `ss -tmi` on both ends
(receiver rmem, which holds out-of-order data; sender unacked/sacked/lost/notsent). Per run it
prints the headline against the payload truth (RATE x 1448/1514), the receiver's bytes, the
veth counters, the tbf's drops, TCP retransmits and RTOs, the sender's SACKed bytes at the end
of the window (bytes that crossed the link but sit out of order at the receiver behind a
lost segment), and receiver bytes + those against the truth. Deletes the namespaces at the end.
"""
import json, subprocess, time, sys, os, signal, re, threading
H = os.environ.get("HAKARU", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "target", "release", "hakaru"))
OUT = os.environ.get("OUT", "/tmp")
I = "/usr/bin/iperf3"
C, S = "hk47-a", "hk47-b"
CD, SD = "hk47a", "hk47b"
SIP = "198.18.47.2"
RATE, P, REV, CC, ROUNDS = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4], int(sys.argv[5])
TOOLS = sys.argv[6].split(",")
HX = sys.argv[7:]
SECS = int(os.environ.get("SECS", "6"))
def sh(*a, check=True):
    return subprocess.run(a, capture_output=True, text=True, check=check)
SNS, SDEV = (S, SD) if REV else (C, CD)   # sending ns/dev (tbf here)
RNS, RDEV = (C, CD) if REV else (S, SD)
def setup():
    for ns in (C, S): sh("ip", "netns", "add", ns)
    sh("ip", "link", "add", CD, "netns", C, "type", "veth", "peer", "name", SD, "netns", S)
    for ns, d, a in ((C, CD, "198.18.47.1/30"), (S, SD, SIP + "/30")):
        sh("ip", "-n", ns, "addr", "add", a, "dev", d)
        sh("ip", "-n", ns, "link", "set", "lo", "up"); sh("ip", "-n", ns, "link", "set", d, "up")
        pass
    for kv in os.environ.get("SYSCTL", "").split():
        sh("ip", "netns", "exec", SNS, "sysctl", "-q", "-w", kv)
    sh("ip", "netns", "exec", SNS, "tc", "qdisc", "add", "dev", SDEV, "root", "tbf", "rate", RATE, "burst", "32kbit", "latency", "50ms")
def teardown():
    for ns in (C, S): sh("ip", "netns", "del", ns, check=False)
def snmp(ns):
    out = {}
    for f in ("/proc/net/snmp", "/proc/net/netstat"):
        t = sh("ip", "netns", "exec", ns, "cat", f).stdout.splitlines()
        for a, b in zip(t[::2], t[1::2]):
            k = a.split(":")[0]
            for n, v in zip(a.split()[1:], b.split()[1:]):
                out[k + "." + n] = int(v)
    return out
def dev(ns, d, what):
    return int(sh("ip", "netns", "exec", ns, "cat", f"/sys/class/net/{d}/statistics/{what}").stdout)
def qstat():
    t = sh("ip", "netns", "exec", SNS, "tc", "-s", "qdisc", "show", "dev", SDEV).stdout
    m = re.search(r"Sent (\d+) bytes (\d+) pkt \(dropped (\d+), overlimits (\d+) requeues (\d+)\)", t)
    b = re.search(r"backlog (\S+) (\d+)p", t)
    return [int(x) for x in m.groups()], (b.group(1), int(b.group(2))) if b else None
def ssum(ns):
    t = sh("ip", "netns", "exec", ns, "ss", "-tmi", "state", "established").stdout
    rq = 0; rmem = 0; sacked = 0; lost = 0; unacked = 0; notsent = 0; n = 0
    for line in t.splitlines():
        p = line.split()
        m = re.search(r"skmem:\(r(\d+),rb\d+,t(\d+),tb\d+,f\d+,w(\d+)", line)
        if m: rmem += int(m.group(1)); n += 1
        m = re.search(r"notsent:(\d+)", line)
        if m: notsent += int(m.group(1))
        m = re.search(r" sacked:(\d+)", line)
        if m: sacked += int(m.group(1))
        m = re.search(r" lost:(\d+)", line)
        if m: lost += int(m.group(1))
        m = re.search(r"unacked:(\d+)", line)
        if m: unacked += int(m.group(1))
        if len(p) >= 2 and p[0].isdigit(): rq += int(p[0])
    return rq, rmem, unacked, notsent, n, sacked, lost
def sampler(stop, out):
    t00 = time.time(); dumped = False
    while not stop.is_set():
        if not dumped and time.time() - t00 > 4.5:
            dumped = True
            r = sh("ip", "netns", "exec", RNS, "ss", "-tmi", "state", "established").stdout.splitlines()
            x = sh("ip", "netns", "exec", SNS, "ss", "-tmi", "state", "established").stdout.splitlines()
            open(os.path.join(OUT, f"hk47-ss-{CUR[0]}.txt"), "w").write("RCV\n" + "\n".join(r[:9]) + "\nSND\n" + "\n".join(x[:9]))
        q, b = qstat(); out.append((time.time(), q, b, ssum(RNS), ssum(SNS))); time.sleep(0.1)
PAY = float(re.match(r"(\d+)", RATE).group(1)) * 1e6 * 1448 / 1514
CUR = [""]
def run(tool, port):
    CUR[0] = tool
    q0, _ = qstat(); b = snmp(SNS); rb0 = snmp(RNS)
    tx0 = dev(SNS, SDEV, "tx_bytes"); txp0 = dev(SNS, SDEV, "tx_packets"); rx0 = dev(RNS, RDEV, "rx_bytes"); rxp0 = dev(RNS, RDEV, "rx_packets")
    stop = threading.Event(); samples = []; th = threading.Thread(target=sampler, args=(stop, samples)); th.start()
    t0 = time.time()
    R = ["-R"] if REV else []
    if tool == "hakaru":
        o = sh("ip", "netns", "exec", C, H, "tcp", SIP, "-p", str(port), "-P", str(P), "-t", str(SECS), "--json", "-i", "0.5", "-C", CC, *R, *HX, check=False)
        if o.returncode: sys.exit(f"hakaru exited {o.returncode}: {o.stderr[-800:]}")
        v = json.loads(o.stdout); t = v["totals"][0]
        head = t["receiver"]["bits_per_second"] / 1e6
        whole = sum(f["receiver"]["bytes"] + f["receiver"]["omitted_bytes"] + f["receiver"].get("late_bytes", 0) for f in v["flows"])
        secs_c = t["receiver"]["seconds"]; sent = t["sender"]["bytes"]; rb = t["receiver"]["bytes"]
        fl = sorted(f["receiver"]["bytes"]//1000 for f in v["flows"])
        open(os.path.join(OUT, "hk47-last-hakaru.json"),"w").write(o.stdout)
        print("hakaru whole", whole/1e6, "late", sum(f["receiver"].get("late_bytes",0) for f in v["flows"])/1e6, "omitted", sum(f["receiver"]["omitted_bytes"] for f in v["flows"])/1e6)
    else:
        o = sh("ip", "netns", "exec", C, I, "-c", SIP, "-p", str(port), "-P", str(P), "-t", str(SECS), "-J", "-i", "0.5", "-C", CC, *R, check=False)
        if o.returncode: print(o.stdout[-500:], o.stderr[-500:])
        v = json.loads(o.stdout)
        head = v["end"]["sum_received"]["bits_per_second"] / 1e6
        rb = whole = v["end"]["sum_received"]["bytes"]; sent = v["end"]["sum_sent"]["bytes"]
        secs_c = v["end"]["sum_received"]["seconds"]
        fl = sorted(s["receiver"]["bytes"]//1000 for s in v["end"]["streams"])
        open(os.path.join(OUT, "hk47-last-iperf3.json"),"w").write(o.stdout)
    wall = time.time() - t0
    stop.set(); th.join()
    t_first = next((x[0] for x in samples if x[4][4] > 1), t0)
    time.sleep(0.5)
    a = snmp(SNS); q1, _ = qstat()
    tx = dev(SNS, SDEV, "tx_bytes") - tx0; txp = dev(SNS, SDEV, "tx_packets") - txp0
    rx = dev(RNS, RDEV, "rx_bytes") - rx0; rxp = dev(RNS, RDEV, "rx_packets") - rxp0
    d = lambda k: a.get(k, 0) - b.get(k, 0)
    ra = snmp(RNS); dr = lambda k: ra.get(k, 0) - rb0.get(k, 0)
    print("  rcv dup:", dr("TcpExt.TCPDSACKOldSent"), dr("TcpExt.TCPDSACKOfoSent"), "rcv InSegs", dr("Tcp.InSegs"), "snd DSACKRecv", d("TcpExt.TCPDSACKRecv"), "spurRTO", d("TcpExt.TCPSpuriousRTOs"), "lossprobes", d("TcpExt.TCPLossProbes"))
    ts_end = t_first + SECS + (0.05 if tool == "iperf3" else 0.0)
    cand = [x for x in samples if x[4][4] > 1 and x[0] <= ts_end + 0.02]
    near = cand[-1] if cand else samples[-1]
    print(f"  at T: sender sacked {near[4][5]} pkts = {near[4][5]*1448/1e6:.2f} MB, lost {near[4][6]}, unacked {near[4][2]}, rcv rmem {near[3][1]/1e6:.2f} MB (t={near[0]-t0:.2f}) -> rcvB+sacked {(rb+near[4][5]*1448)/1e6:.2f} MB vs truth {PAY*secs_c/8/1e6:.2f} MB")
    open(os.path.join(OUT, f"hk47-q-{tool}.txt"),"w").write("\n".join(f"{ts-t0:.2f} {q[0]} {q[2]} {bb} rcv(rq,rmem)={r[:2]} snd(unacked,notsent,n)={x[2:]}" for ts,q,bb,r,x in samples))
    # link busy: tbf sent bytes during the sampled window, per 1s bins
    qs = [(ts, q[0]) for ts, q, *_ in samples]
    bl = [bb[0] for _, _, bb, *_ in samples]
    bins = []
    for k in range(len(qs)):
        j = next((j for j in range(k, len(qs)) if qs[j][0] - qs[k][0] >= 1.0), None)
        if j: bins.append((qs[j][1]-qs[k][1])*8/(qs[j][0]-qs[k][0])/1e6)
    # idle sample fraction: 100 ms windows with less than 90 % of rate
    r = float(re.match(r"(\d+)", RATE).group(1))*1e6
    wins = [(qs[k+1][1]-qs[k][1])*8/(qs[k+1][0]-qs[k][0]) for k in range(len(qs)-1)]
    low = sum(1 for w in wins[10:-5] if w < 0.9*r)
    print(f"{tool:6s} P{P} {'R' if REV else 'F'} {RATE} {CC}: head {head:6.2f} ({100*(head*1e6/PAY-1):+.2f} %) secs {secs_c:.2f} rcvB {rb/1e6:.2f}MB sentB {sent/1e6:.2f}MB | "
          f"veth tx {tx/1e6:.2f}MB/{txp}p rx {rx/1e6:.2f}MB/{rxp}p wall {wall:.1f}s | tbf sent {(q1[0]-q0[0])/1e6:.2f}MB drops {q1[2]-q0[2]} overl {q1[3]-q0[3]} | "
          f"OutSegs {d('Tcp.OutSegs')} Retrans {d('Tcp.RetransSegs')} RTO {d('TcpExt.TCPTimeouts')} | tbf 1s-rate min/med {min(bins[5:-10] or [0]):.1f}/{sorted(bins)[len(bins)//2] if bins else 0:.1f} low100ms {low}/{len(wins[10:-5])} backlog {bl[len(bl)//2]} | flows kB min/max {fl[0]}/{fl[-1]}", flush=True)
teardown(); setup()
srv = subprocess.Popen(["ip", "netns", "exec", S, H, "server", "-B", SIP, "-p", "5301"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
ip3 = subprocess.Popen(["ip", "netns", "exec", S, I, "-s", "-B", SIP, "-p", "5302"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(1)
try:
    for r in range(ROUNDS):
        order = [(t, 5301 if t == "hakaru" else 5302) for t in TOOLS]
        if r % 2: order.reverse()
        for tool, port in order:
            run(tool, port)
finally:
    for p in (srv, ip3):
        p.send_signal(signal.SIGINT)
        try: p.wait(timeout=10)
        except subprocess.TimeoutExpired: p.kill(); p.wait()
    teardown()
