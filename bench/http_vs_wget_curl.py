#!/usr/bin/env python3
"""hakaru http against wget -O /dev/null and curl -o /dev/null, from the same nginx on loopback.

nginx (Debian's) serves one file from a scratch directory on two loopback ports, plain and TLS
(a test CA made by openssl; every client is given it). Each round runs, back to back: curl,
wget, hakaru http with one connection, hakaru http -P 4 (the same file on four connections),
for plain HTTP and then TLS, in the opposite order every other round. Rates are each tool's own
figure (curl's speed_download, wget's closing line, hakaru's goodput), and each run's wall time
is the whole process, start to exit; ratios are the medians of the per-round ratios. Placements:
unpinned, one CPU (nginx and the client on CPU 0), two CPUs (client on CPU 0, nginx on CPU 1).
The tables go into docs/BENCHMARKS.md. nginx is stopped by its PID.

Usage: python3 bench/http_vs_wget_curl.py [--rounds 5] [--size 1G] [--placements unpinned,one,two]
"""
import argparse, json, os, re, shutil, socket, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_port, stop_process, write_block  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAKARU = os.path.join(ROOT, "target", "release", "hakaru")


def certs(d):
    sh = f"""set -e; cd {d}
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=bench-ca 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout key.pem -out cert.csr -subj /CN=localhost 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\nbasicConstraints=CA:FALSE\\n' > ext.cnf
openssl x509 -req -in cert.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out cert.pem -days 2 -extfile ext.cnf 2>/dev/null"""
    subprocess.run(["sh", "-c", sh], check=True)


def start_nginx(d, size):
    os.makedirs(f"{d}/www")
    with open(f"{d}/www/file.bin", "wb") as f:
        f.truncate(size)  # sparse: served from the page cache, no disk
    os.chmod(f"{d}/www/file.bin", 0o644)
    certs(d)
    port, tls = free_port(), free_port()
    conf = f"""daemon off; worker_processes 2; pid {d}/nginx.pid; error_log {d}/error.log;
events {{ worker_connections 256; }}
http {{ access_log off; sendfile on; keepalive_requests 100000;
  client_body_temp_path {d}/b; proxy_temp_path {d}/p; fastcgi_temp_path {d}/f; uwsgi_temp_path {d}/u; scgi_temp_path {d}/s;
  server {{ listen 127.0.0.1:{port}; root {d}/www; }}
  server {{ listen 127.0.0.1:{tls} ssl; ssl_certificate {d}/cert.pem; ssl_certificate_key {d}/key.pem; root {d}/www; }}
}}
"""
    open(f"{d}/nginx.conf", "w").write(conf)
    exe = "/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else "nginx"
    p = subprocess.Popen([exe, "-c", f"{d}/nginx.conf", "-p", d + "/"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for pt in (port, tls):
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", pt), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
    return p, port, tls


def cpu_ticks():
    """(busy, total) jiffies of the whole machine from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return sum(v) - idle, sum(v)


def busy(fn, *a):
    """Runs fn(*a); returns its figure and the share of all CPUs busy meanwhile (0 to 1):
    nginx and the client together, on this 2-vCPU machine."""
    b0, t0 = cpu_ticks()
    v = fn(*a)
    b1, t1 = cpu_ticks()
    return v, (b1 - b0) / max(1, t1 - t0)


def timed(cmd, **kw):
    """Runs cmd (pinned with taskset to the client's CPU when one is set); returns the process
    and its wall time in seconds, start to exit."""
    t = time.perf_counter()
    o = subprocess.run(PIN + cmd, capture_output=True, text=True, timeout=300, **kw)
    return o, time.perf_counter() - t


PIN = []


def curl(url, ca):
    o, wall = timed(["curl", "-s", "-f", "--cacert", ca, "-o", "/dev/null", "-w", "%{speed_download}", url], check=True)
    return float(o.stdout) * 8, wall


def wget(url, ca):
    o, wall = timed(["wget", f"--ca-certificate={ca}", "-O", "/dev/null", url])
    if o.returncode != 0:
        sys.exit(f"wget {url} failed ({o.returncode}): {o.stderr[-800:]}")
    m = re.search(r"\(([\d.]+) ([KMG]?B)/s\) - .* saved", o.stderr)
    mult = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}[m.group(2)]
    return float(m.group(1)) * mult * 8, wall


def hakaru(url, ca, parallel):
    o, wall = timed([HAKARU, "http", url, "--cacert", ca, "-P", str(parallel), "-i", "0", "-J"], check=True)
    return json.loads(o.stdout)["http"]["bits_per_second"], wall


def pin_nginx(p, cpu):
    """Pins nginx's master and workers to `cpu` (None: all CPUs)."""
    kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
    for pid in [str(p.pid)] + kids:
        subprocess.run(["taskset", "-pc", cpu or "0-%d" % (os.cpu_count() - 1), pid],
                       capture_output=True, check=True)


PLACES = {"unpinned": (None, None), "one": ("0", "0"), "two": ("0", "1")}
PLACE_NAMES = {"unpinned": "unpinned", "one": "one CPU", "two": "two CPUs"}
TOOLS = ("curl", "wget", "hakaru", "hakaru -P 4")


def main():
    global PIN
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--size", default="1G")
    ap.add_argument("--placements", default="unpinned",
                    help="unpinned, one (nginx and the client on CPU 0), two (client CPU 0, nginx CPU 1)")
    ap.add_argument("--write", default=os.path.join(ROOT, "docs", "BENCHMARKS.md"))
    args = ap.parse_args()
    size = int(float(args.size[:-1]) * {"M": 1 << 20, "G": 1 << 30}[args.size[-1]])
    for tool in ("nginx", "curl", "wget", "openssl"):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            sys.exit(f"{tool} is not installed")
    subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
    d = tempfile.mkdtemp(prefix="hakaru-http-bench-")
    os.chmod(d, 0o755)  # nginx's workers run as another user
    p, port, tls = start_nginx(d, size)
    ca = f"{d}/ca.pem"
    fns = {"curl": lambda u: curl(u, ca), "wget": lambda u: wget(u, ca),
           "hakaru": lambda u: hakaru(u, ca, 1), "hakaru -P 4": lambda u: hakaru(u, ca, 4)}
    rows = {}
    places = args.placements.split(",")
    try:
        for place in places:
            client_cpu, server_cpu = PLACES[place]
            pin_nginx(p, server_cpu)
            PIN = ["taskset", "-c", client_cpu] if client_cpu else []
            for r in range(args.rounds):
                for scheme, url in (("http", f"http://127.0.0.1:{port}/file.bin"),
                                    ("https", f"https://127.0.0.1:{tls}/file.bin")):
                    order = list(TOOLS) if r % 2 == 0 else list(reversed(TOOLS))
                    runs = {k: busy(fns[k], url) for k in order}
                    print(f"{place} round {r + 1} {scheme}: " +
                          ", ".join(f"{k} {v / 1e9:.2f} Gbit/s in {w:.2f} s ({c * 100:.0f} % CPU)"
                                    for k, ((v, w), c) in runs.items()), flush=True)
                    key = (place, scheme)
                    for k, ((v, w), c) in runs.items():
                        rows.setdefault(key + (k,), []).append(v)
                        rows.setdefault(key + (k + " wall",), []).append(w)
                        rows.setdefault(key + (k + " cpu",), []).append(c)
                    for k in ("hakaru", "hakaru -P 4"):
                        for peer in ("curl", "wget"):
                            rows.setdefault(key + (f"{k} / {peer}",), []).append(runs[k][0][0] / runs[peer][0][0])
                            # Wall time: the peer's over hakaru's, so above 1 is hakaru faster.
                            rows.setdefault(key + (f"{k} / {peer} wall",), []).append(runs[peer][0][1] / runs[k][0][1])
    finally:
        stop_process(p)
        shutil.rmtree(d, ignore_errors=True)
    cmd = " ".join(["python3 bench/http_vs_wget_curl.py"] + sys.argv[1:])
    lines = [f"Command: `{cmd}` ({args.rounds} rounds; nginx on loopback, one {args.size} file; ratios are "
             "medians of each round's ratios, above 1 is hakaru faster; load average at the end "
             f"{open('/proc/loadavg').read().split()[0]})", "",
             "Each tool's own figure:", "",
             "| placement | scheme | curl | wget | hakaru (1 conn) | hakaru -P 4 | hakaru / curl | hakaru / wget | -P 4 / curl |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    med = lambda *k: statistics.median(rows[k])
    for place in places:
        for scheme in ("http", "https"):
            k = (place, scheme)
            lines.append(
                f"| {PLACE_NAMES[place]} | {scheme} | " + " | ".join(f"{med(*k, t) / 1e9:.2f} Gbit/s" for t in TOOLS) +
                f" | {med(*k, 'hakaru / curl'):.2f}x | {med(*k, 'hakaru / wget'):.2f}x | {med(*k, 'hakaru -P 4 / curl'):.2f}x |")
    lines += ["", "Wall time of the whole process (start to exit, the same runs; -P 4 fetches the file on "
              "each of its four connections, four times the bytes, so it has no ratio here):", "",
              "| placement | scheme | curl | wget | hakaru (1 conn) | hakaru -P 4 | hakaru / curl | hakaru / wget |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
    for place in places:
        for scheme in ("http", "https"):
            k = (place, scheme)
            lines.append(
                f"| {PLACE_NAMES[place]} | {scheme} | " + " | ".join(f"{med(*k, t + ' wall'):.2f} s" for t in TOOLS) +
                f" | {med(*k, 'hakaru / curl wall'):.2f}x | {med(*k, 'hakaru / wget wall'):.2f}x |")
    lines += ["", "Share of the machine's two vCPUs busy during each download (nginx and the client together, "
              "from /proc/stat; medians):", "",
              "| placement | scheme | curl | wget | hakaru (1 conn) | hakaru -P 4 |", "|---|---|---:|---:|---:|---:|"]
    for place in places:
        for scheme in ("http", "https"):
            lines.append(f"| {PLACE_NAMES[place]} | {scheme} | " + " | ".join(
                f"{med(place, scheme, t + ' cpu') * 100:.0f} %" for t in TOOLS) + " |")
    block = "\n".join(lines) + "\n"
    print(block)
    write_block(args.write, "http-vs-wget-curl", block, "## `hakaru http` against wget and curl")


if __name__ == "__main__":
    main()
