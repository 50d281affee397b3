"""Shared by the benchmark scripts: writing a result block into docs/BENCHMARKS.md, ports,
processes (stopping one, its CPU time), the machine (load, CPU model)."""
import os


def write_block(path, name, block, heading):
    """Replaces the text between `<!-- name:begin -->` and `<!-- name:end -->` in `path`, or
    appends the block under `heading` when the markers are not there yet."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = open(path).read() if os.path.exists(path) else ""
    wrapped = f"{begin}\n{block}{end}"
    if begin in text and end in text:
        text = text[:text.index(begin)] + wrapped + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + f"{heading}\n\n{wrapped}\n"
    with open(path, "w") as f:
        f.write(text)


def free_port():
    """A loopback TCP port nothing listens on right now."""
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def stop_process(p, sig=None, wait=10):
    """Stops a child we started, by its PID: `sig` (SIGTERM by default), then SIGKILL if it has
    not exited within `wait` seconds."""
    import signal
    import subprocess
    p.send_signal(sig if sig is not None else signal.SIGTERM)
    try:
        p.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def wait_port(port, limit=10.0):
    """Waits until something listens on 127.0.0.1:`port` (a connection to it succeeds)."""
    import socket
    import time
    end = time.time() + limit
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def process_cpu(pid):
    """User and system CPU seconds of process `pid`, all its threads: fields 14 and 15 of
    /proc/PID/stat. Softirq time the kernel accounts apart (IRQ time accounting) is not in it."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def loadavg():
    """The 1-minute load average, as text."""
    return open("/proc/loadavg").read().split()[0]


def cpu_model():
    """The CPU's model name from /proc/cpuinfo ("?" if it has none)."""
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "?"
