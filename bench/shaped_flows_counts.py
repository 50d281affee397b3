#!/usr/bin/env python3
"""Issue 32 item 3: 16 flows (BBR) through a 37 Mbit/s tbf on the sender's own veth, hakaru
against iperf3 3.21, with the kernel's counts beside each tool's.

Usage (root): python3 bench/shaped_flows_counts.py [ROUNDS]   (default 2)
       env HAKARU=target/release/hakaru IPERF3=/opt/hakaru-peers/iperf3/bin/iperf3,
       HX="-l 128K" adds flags to hakaru's client.

Makes two namespaces (hkx3-c, hkx3-s; 198.18.203.0/30) joined by a veth whose client end has
`tbf rate 37mbit burst 64kb latency 50ms` (payload capacity 37e6 * 1448/1514 = 35.39 Mbit/s),
runs `hakaru server` and `iperf3 -s` in the server one (stopped by PID) and, in alternating
order per round, `hakaru tcp -P 16 -t 6 -C bbr` and `iperf3 -P 16 -t 6 -C bbr`. Per run it
prints the tool's headline, the bytes its receivers read over the whole run, the veth's byte
counters (with GSO a veth counts one set of headers per GSO packet, so they read close to
payload), the sender namespace's Tcp RetransSegs and the tbf's drops, and hakaru's
tcp_info bytes_retrans summed over its flows. Deletes the namespaces at the end.
"""
import json, subprocess, time, sys, os, signal
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H = os.environ.get("HAKARU", os.path.join(ROOT, "target", "release", "hakaru"))
I = os.environ.get("IPERF3", "/opt/hakaru-peers/iperf3/bin/iperf3")
C, S = "hkx3-c", "hkx3-s"
CD, SD = "hkx3c", "hkx3s"
SIP = "198.18.203.2"
def sh(*a, check=True):
    return subprocess.run(a, capture_output=True, text=True, check=check)
def setup():
    for ns in (C, S): sh("ip", "netns", "add", ns)
    sh("ip", "link", "add", CD, "netns", C, "type", "veth", "peer", "name", SD, "netns", S)
    for ns, d, a in ((C, CD, "198.18.203.1/30"), (S, SD, SIP + "/30")):
        sh("ip", "-n", ns, "addr", "add", a, "dev", d)
        sh("ip", "-n", ns, "link", "set", "lo", "up"); sh("ip", "-n", ns, "link", "set", d, "up")
    sh("ip", "netns", "exec", C, "tc", "qdisc", "add", "dev", CD, "root", "tbf", "rate", "37mbit", "burst", "64kb", "latency", "50ms")
def teardown():
    for ns in (C, S): sh("ip", "netns", "del", ns, check=False)
def snmp(ns):
    t = sh("ip", "netns", "exec", ns, "cat", "/proc/net/snmp").stdout.splitlines()
    out = {}
    for a, b in zip(t[::2], t[1::2]):
        k = a.split(":")[0]
        for n, v in zip(a.split()[1:], b.split()[1:]):
            out[k + "." + n] = int(v)
    t = sh("ip", "netns", "exec", ns, "cat", "/proc/net/netstat").stdout.splitlines()
    for a, b in zip(t[::2], t[1::2]):
        k = a.split(":")[0]
        for n, v in zip(a.split()[1:], b.split()[1:]):
            out[k + "." + n] = int(v)
    return out
def dev(ns, d, what):
    return int(sh("ip", "netns", "exec", ns, "cat", f"/sys/class/net/{d}/statistics/{what}").stdout)
def qdrops():
    t = sh("ip", "netns", "exec", C, "tc", "-s", "qdisc", "show", "dev", CD).stdout
    import re
    m = re.search(r"dropped (\d+)", t); return int(m.group(1)) if m else -1
HX = os.environ.get("HX", "").split()
def run(tool, port, secs):
    qd0 = qdrops()
    b = snmp(C); bs = snmp(S)
    tx0 = dev(C, CD, "tx_bytes"); rx0 = dev(S, SD, "rx_bytes")
    t0 = time.time()
    if tool == "hakaru":
        o = sh("ip", "netns", "exec", C, H, "tcp", SIP, "-p", str(port), "-P", "16", "-t", str(secs), "-C", "bbr", "--json", *HX)
        v = json.loads(o.stdout); t = v["totals"][0]
        head = t["receiver"]["bits_per_second"] / 1e6
        whole = sum(f["receiver"]["bytes"] + f["receiver"]["omitted_bytes"] + f["receiver"].get("late_bytes", 0) for f in v["flows"])
        retr_b = sum((f.get("tcp_info") or {}).get("bytes_retrans", 0) for f in v["flows"])
        secs_c = t["receiver"]["seconds"]
    else:
        o = sh("ip", "netns", "exec", C, I, "-c", SIP, "-p", str(port), "-P", "16", "-t", str(secs), "-C", "bbr", "-J")
        v = json.loads(o.stdout)
        head = v["end"]["sum_received"]["bits_per_second"] / 1e6
        whole = v["end"]["sum_received"]["bytes"]; retr_b = None
        secs_c = v["end"]["sum_received"]["seconds"]
    wall = time.time() - t0
    time.sleep(1)
    a = snmp(C); as_ = snmp(S)
    tx = dev(C, CD, "tx_bytes") - tx0; rx = dev(S, SD, "rx_bytes") - rx0
    d = lambda m0, m1, k: m1.get(k, 0) - m0.get(k, 0)
    qd = qdrops() - qd0
    out_segs = d(b, a, "Tcp.OutSegs"); retr = d(b, a, "Tcp.RetransSegs")
    print(f"{tool:6s} headline {head:6.2f} Mbit/s over {secs_c:.2f} s | app bytes whole run {whole/1e6:7.2f} MB | "
          f"sender veth tx {tx/1e6:6.2f} MB, receiver veth rx {rx/1e6:6.2f} MB in {wall:.1f} s wall | "
          f"OutSegs {out_segs} RetransSegs {retr} ({100*retr/max(out_segs,1):.1f} %) "
          f"bytes_retrans(tcp_info) {retr_b} | rx InSegs {d(bs, as_, 'Tcp.InSegs')} "
          f"DSACK rcv {d(b, a, 'TcpExt.TCPDSACKRecv')} spurious {d(b,a,'TcpExt.TCPSpuriousRTOs')} "
          f"qdisc drops {qd} lossprobes {d(b,a,'TcpExt.TCPLossProbes')} sackrecov {d(b,a,'TcpExt.TCPSackRecovery')} RTOs {d(b,a,'TcpExt.TCPTimeouts')}", flush=True)
teardown(); setup()
srv = subprocess.Popen(["ip", "netns", "exec", S, H, "server", "-B", SIP, "-p", "5301"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
ip3 = subprocess.Popen(["ip", "netns", "exec", S, I, "-s", "-B", SIP, "-p", "5302"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(1)
try:
    print("cc in ns:", sh("ip", "netns", "exec", C, "cat", "/proc/sys/net/ipv4/tcp_congestion_control").stdout.strip())
    for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 2):
        for tool, port in ((("hakaru", 5301), ("iperf3", 5302)) if r % 2 == 0 else (("iperf3", 5302), ("hakaru", 5301))):
            run(tool, port, 6)
finally:
    for p in (srv, ip3):
        p.send_signal(signal.SIGINT)
        try: p.wait(timeout=10)
        except subprocess.TimeoutExpired: p.kill(); p.wait()
    teardown()
