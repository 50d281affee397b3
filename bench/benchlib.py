"""Shared by the benchmark scripts: writing a result block into docs/BENCHMARKS.md."""
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
