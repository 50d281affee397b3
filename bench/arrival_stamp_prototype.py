#!/usr/bin/env python3
"""Issue 47 prototype: a TCP receiver that counts, besides the bytes it read by the end of the
window T, the bytes whose skb ARRIVED by T (SO_TIMESTAMPNS on the TCP socket: each recvmsg
carries the arrival stamp of the last skb it read). Out-of-order data that crossed the link
before T but was released to the reader after T (when the lost segment before it was
retransmitted) counts by its arrival. Run the receiver in one namespace and the sender in the
other (see docs/BENCHMARKS.md, "Many flows through a shaper on the sender's own link"):
  ip netns exec hk47-b python3 bench/arrival_stamp_prototype.py rcv 16 6 &
  ip netns exec hk47-a python3 bench/arrival_stamp_prototype.py snd 198.18.47.2 16 6
The sender is 16 threads of blocking 128 KiB writes for 6 s."""
import socket, struct, sys, time, threading, select, os
SO_TIMESTAMPNS = 35; SCM_TIMESTAMPNS = 35
mode = sys.argv[1]
if mode == "rcv":
    P = int(sys.argv[2]); SECS = float(sys.argv[3])
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); ls.bind(("0.0.0.0", 5399)); ls.listen(128)
    conns = []
    for _ in range(P):
        c, _ = ls.accept(); c.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1); c.setblocking(False); conns.append(c)
    t0 = None; T = None
    byT = 0; tsT = 0; total = 0; late_pre = 0
    open_ = set(conns)
    while open_:
        r, _, _ = select.select(list(open_), [], [], 1.0)
        now = time.clock_gettime(time.CLOCK_REALTIME)
        for c in r:
            try:
                d, anc, fl, _ = c.recvmsg(65536, socket.CMSG_SPACE(16))
            except BlockingIOError:
                continue
            if not d: open_.discard(c); c.close(); continue
            if t0 is None: t0 = now; T = t0 + SECS
            ts = None
            for lvl, typ, data in anc:
                if lvl == socket.SOL_SOCKET and typ == SCM_TIMESTAMPNS:
                    s, ns = struct.unpack("qq", data[:16]); ts = s + ns / 1e9
            n = len(d); total += n
            if now <= T: byT += n
            if ts is not None and ts <= T: tsT += n
            if now > T and ts is not None and ts <= T: late_pre += n
    print(f"read by T {byT/1e6:.2f} MB ({byT*8/SECS/1e6:.2f} Mbit/s); arrived by T (skb stamp) {tsT/1e6:.2f} MB ({tsT*8/SECS/1e6:.2f} Mbit/s); of it read after T {late_pre/1e6:.2f} MB; total {total/1e6:.2f}")
else:
    host, P, SECS = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    buf = b"x" * 131072
    socks = [socket.create_connection((host, 5399)) for _ in range(P)]
    end = time.time() + SECS
    def go(s):
        while time.time() < end: s.send(buf)
        s.close()
    th = [threading.Thread(target=go, args=(s,)) for s in socks]
    [t.start() for t in th]; [t.join() for t in th]
