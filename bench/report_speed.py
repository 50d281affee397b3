#!/usr/bin/env python3
"""How long `hakaru report` takes on a long, wide result, and how big the page gets.

Builds a 1-hour, 64-flow TCP result (3600 one-second intervals x 65 series) from a real
short run on loopback (its intervals repeated, times shifted), then times `hakaru report` on
it in several rounds and writes the median and the page size into docs/BENCHMARKS.md.

Usage: python3 bench/report_speed.py [--rounds 5] [--hours 1]
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import write_block  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAKARU = os.path.join(ROOT, "target", "release", "hakaru")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--hours", type=float, default=1.0)
    args = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
    tmp = tempfile.mkdtemp(prefix="hakaru-report-speed-")
    small = os.path.join(tmp, "small.json")
    subprocess.run([HAKARU, "tcp", "-P", "64", "-t", "3", "-q", "-o", small],
                   check=True, stdout=subprocess.DEVNULL)
    r = json.load(open(small))
    seconds = int(args.hours * 3600)
    base = [i for i in r["intervals"] if i["end"] - i["start"] > 0.9]
    intervals = []
    for k in range(seconds):
        i = json.loads(json.dumps(base[k % len(base)]))
        i["index"], i["start"], i["end"] = k, float(k), float(k + 1)
        intervals.append(i)
    r["intervals"] = intervals
    big = os.path.join(tmp, "big.json")
    json.dump(r, open(big, "w"))
    series = 1 + len(r["flows"])
    out = os.path.join(tmp, "big.html")
    times = []
    for n in range(args.rounds):
        t0 = time.monotonic()
        subprocess.run([HAKARU, "report", big, "-o", out], check=True, stderr=subprocess.DEVNULL)
        times.append(time.monotonic() - t0)
        print(f"round {n + 1}: {times[-1]:.2f} s", flush=True)
    size = os.path.getsize(out)
    json_size = os.path.getsize(big)
    med = statistics.median(times)
    print(f"median {med:.2f} s, page {size / 1e6:.2f} MB, input {json_size / 1e6:.1f} MB")
    block = (
        f"Command: `python3 bench/report_speed.py --rounds {args.rounds} --hours {args.hours:g}`\n\n"
        f"| input | intervals | series | input size | report time (median of {args.rounds}) | page size |\n"
        f"|---|---:|---:|---:|---:|---:|\n"
        f"| tcp -P 64, {args.hours:g} h | {seconds} | {series} | {json_size / 1e6:.1f} MB | "
        f"{med:.2f} s (min {min(times):.2f}, max {max(times):.2f}) | {size / 1e6:.2f} MB |\n\n"
        "Series longer than the chart is wide are drawn with the lowest and highest value of each "
        "pixel column, and the chart says so; most of the time goes to parsing the JSON.\n"
    )
    write_block(os.path.join(ROOT, "docs", "BENCHMARKS.md"), "report-speed", block,
                "## `hakaru report` on a long, wide result")
    for f in (small, big, out):
        os.remove(f)
    os.rmdir(tmp)


if __name__ == "__main__":
    main()
