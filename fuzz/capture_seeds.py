#!/usr/bin/env python3
"""Captures the seed corpus for the fuzz targets from real runs on loopback.

Usage (root, for the packet socket): python3 fuzz/capture_seeds.py [--out fuzz/corpus]

A packet socket on `lo` records every TCP and UDP payload while real peers talk to a real
`hakaru server`: hakaru tcp, udp, pps and latency (TCP and UDP) clients; stock iperf3 TCP and
UDP clients; stock sockperf ping-pong over UDP and TCP against the server's sockperf port; and
a stock iperf2 UDP client sending to a hakaru sink. Each client-to-server TCP stream and each
datagram becomes a seed of the target that parses it. Every run is bounded (1 s tests, 30 s
limits) and every process is stopped by PID.
"""
import argparse, os, shutil, signal, socket, struct, subprocess, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAKARU = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "hakaru")
PORT, SOCKPERF, SINK = 5391, 5392, 5393
ETH_P_ALL = 0x0003


class Capture(threading.Thread):
    """Collects (proto, src port, dst port) -> list of payloads from IPv4 packets on lo."""

    def __init__(self):
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(ETH_P_ALL))
        self.sock.bind(("lo", 0))
        self.sock.settimeout(0.2)
        self.flows, self.stop, self.seen = {}, False, set()

    def run(self):
        while not self.stop:
            try:
                pkt, addr = self.sock.recvfrom(70000)
            except socket.timeout:
                continue
            # Outgoing copies only, so each packet is seen once.
            if addr[2] != socket.PACKET_OUTGOING or len(pkt) < 34 or pkt[12:14] != b"\x08\x00":
                continue
            ip = pkt[14:]
            ihl, proto = (ip[0] & 15) * 4, ip[9]
            total = struct.unpack("!H", ip[2:4])[0]
            l4 = ip[ihl:total]
            if proto == 17 and len(l4) >= 8:
                sport, dport = struct.unpack("!HH", l4[:4])
                self.flows.setdefault(("udp", sport, dport), []).append(bytes(l4[8:]))
            elif proto == 6 and len(l4) >= 20:
                sport, dport, seq = struct.unpack("!HHI", l4[:8])
                payload = bytes(l4[(l4[12] >> 4) * 4:])
                key = ("tcp", sport, dport)
                if payload and (key, seq) not in self.seen:
                    self.seen.add((key, seq))
                    self.flows.setdefault(key, []).append(payload)


def run(cmd, limit=30):
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=limit)


def stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "fuzz", "corpus"))
    a = ap.parse_args()
    cap = Capture()
    cap.start()
    server = subprocess.Popen([HAKARU, "server", "-B", "127.0.0.1", "-p", str(PORT), "--sockperf-port", str(SOCKPERF)],
                              stderr=subprocess.DEVNULL)
    sink = subprocess.Popen([HAKARU, "sink", "-u", "--iperf2", "--keep", "-p", str(SINK), "-B", "127.0.0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    h = ["127.0.0.1", "-p", str(PORT)]
    try:
        for cmd in ([HAKARU, "tcp", *h, "-t", "1", "-P", "2", "-i", "0"],
                    [HAKARU, "udp", *h, "-t", "1", "-b", "5M", "-i", "0"],
                    [HAKARU, "pps", *h, "-t", "1", "--rate", "20000", "-i", "0"],
                    [HAKARU, "udp", *h, "-t", "1", "-b", "5M", "-R", "-l", "100", "-i", "0"],
                    [HAKARU, "latency", *h, "-t", "1", "-i", "0"],
                    [HAKARU, "latency", *h, "-t", "1", "--udp", "-i", "0"],
                    ["iperf3", "-c", "127.0.0.1", "-p", str(PORT), "-t", "1"],
                    ["iperf3", "-c", "127.0.0.1", "-p", str(PORT), "-t", "1", "-u", "-b", "5M", "-P", "2"],
                    ["iperf3", "-c", "127.0.0.1", "-p", str(PORT), "-t", "1", "-u", "--udp-counters-64bit", "-l", "64"],
                    ["sockperf", "pp", "-i", "127.0.0.1", "-p", str(SOCKPERF), "-t", "1"],
                    ["sockperf", "pp", "-i", "127.0.0.1", "-p", str(SOCKPERF), "-t", "1", "--tcp"],
                    ["iperf", "-c", "127.0.0.1", "-p", str(SINK), "-u", "-t", "1", "-b", "5M"],
                    ["iperf", "-c", "127.0.0.1", "-p", str(SINK), "-u", "-t", "1", "-b", "5M", "-e"]):
            if shutil.which(cmd[0]) or os.path.exists(cmd[0]):
                run(cmd)
            time.sleep(0.3)
    finally:
        stop(server)
        stop(sink)
        cap.stop = True
        cap.join()
    seeds = {t: [] for t in ("native_control", "iperf3_control", "sockperf", "iperf2_header", "udp_datagram")}
    for (proto, sport, dport), payloads in cap.flows.items():
        if proto == "tcp" and dport == PORT:
            stream = b"".join(payloads)[:8192]
            if stream.startswith(b"HKRU"):
                # The native target's first byte says where to split the input.
                seeds["native_control"].append(bytes([len(stream) // 2 % 256]) + stream)
            elif len(stream) > 41:
                # iperf3: the cookie, then the length-prefixed parameters (and later results).
                seeds["iperf3_control"].append(stream[37:])
                seeds["iperf3_control"].append(stream[:37])
        elif proto == "tcp" and dport == SOCKPERF:
            seeds["sockperf"].append(b"".join(payloads)[:8192])
        elif proto == "udp" and dport == SOCKPERF:
            seeds["sockperf"] += payloads[:3]
        elif proto == "udp" and dport == SINK:
            seeds["iperf2_header"] += payloads[:2] + payloads[-2:]
        elif proto == "udp" and dport == PORT or (proto == "udp" and sport == PORT):
            seeds["udp_datagram"] += payloads[:2] + payloads[-1:]
    total = 0
    for target, items in seeds.items():
        d = os.path.join(a.out, target)
        os.makedirs(d, exist_ok=True)
        uniq = list(dict.fromkeys(i for i in items if i))[:40]
        for k, item in enumerate(uniq):
            with open(os.path.join(d, f"capture-{k:02d}"), "wb") as f:
                f.write(item)
        total += len(uniq)
        print(f"{target}: {len(uniq)} seeds")
    print(f"{total} seeds in {a.out}")


if __name__ == "__main__":
    main()
