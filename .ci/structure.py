#!/usr/bin/env python3
"""The structure rules of docs/architecture.md ("Structure rules"), checked over the sources:

- no two modules of one crate that import each other (`crate::a` in b and `crate::b` in a);
- no `unsafe`, `libc::`, `windows_sys::` or platform `cfg` (`target_os`, `unix`, `windows`)
  outside an OS layer (a `sys/` directory), unless the line or the one above it says
  `os-layer: ` and why;
- no production function over 100 lines (a comment with "hot loop" within the three lines
  above excuses one) and no production file over 800 lines.

What exists today is listed in .ci/structure-baseline.txt and may only shrink (the redesign of
issue 30 removes it): anything new fails, and an entry the code no longer needs must be taken
out of the list (so the list stays true). `--write` rewrites the list from the code.
Run from the repository root: python3 .ci/structure.py [--write]"""
import os
import re
import sys

BASELINE = ".ci/structure-baseline.txt"
MAX_FN = 100
MAX_FILE = 800
OS_CODE = re.compile(
    r"\bunsafe\b|\blibc::|\bwindows_sys::|cfg!?\((not\(|any\(|all\()*(target_os|target_family|unix|windows)\b"
)
FN = re.compile(r"\s*(pub(\([^)]*\))?\s+)?(async\s+)?(const\s+)?(unsafe\s+)?fn\s+(\w+)")


def production(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    m = re.search(r"#\[cfg\((all\()?test\b[^\n]*\]\nmod tests", text)
    return text if m is None else text[:m.start()]


def sources():
    for root, dirs, names in os.walk("crates"):
        dirs.sort()
        if "/tests" in root or "/benches" in root:
            continue
        for n in sorted(names):
            if n.endswith(".rs"):
                yield os.path.join(root, n)


def code(line):
    """A line without its comment (a `//` inside a string is rare enough here)."""
    return line.split("//")[0]


def long_functions(path, lines):
    out, i = [], 0
    while i < len(lines):
        m = FN.match(lines[i])
        if not m:
            i += 1
            continue
        depth, started, j = 0, False, i
        while j < len(lines):
            c = code(lines[j])
            depth += c.count("{") - c.count("}")
            started = started or "{" in c
            if (started and depth <= 0) or (not started and c.rstrip().endswith(";")):
                break
            j += 1
        n = j - i + 1
        if n > MAX_FN and "hot loop" not in "\n".join(lines[max(0, i - 3):i + 1]):
            out.append(f"function {path} {m.group(6)}")
        i = j + 1
    return out


def findings():
    found = []
    graph = {}
    for p in sources():
        src = production(p)
        lines = src.splitlines()
        if len(lines) > MAX_FILE:
            found.append(f"file {p}")
        found += long_functions(p, lines)
        if "/sys/" not in p:
            leaks = 0
            for n, line in enumerate(lines):
                said = "os-layer:" in line or (n > 0 and "os-layer:" in lines[n - 1])
                if OS_CODE.search(code(line)) and not said:
                    leaks += 1
            if leaks:
                found.append(f"os-code {p} {leaks}")
        parts = p.split("/")
        if len(parts) > 3 and parts[2] == "src":
            top = parts[3].replace(".rs", "")
            if top not in ("lib", "main"):
                uses = set(re.findall(r"crate::(\w+)", src)) - {top}
                graph.setdefault(parts[1], {}).setdefault(top, set()).update(uses)
    for crate, mods in sorted(graph.items()):
        for a, bs in sorted(mods.items()):
            for b in sorted(bs):
                if a < b and a in mods.get(b, ()):
                    found.append(f"cycle {crate} {a} {b}")
    return found


def main():
    now = findings()
    if "--write" in sys.argv:
        with open(BASELINE, "w") as f:
            f.write("# What .ci/structure.py finds today; it may only shrink (python3 .ci/structure.py --write).\n")
            f.writelines(x + "\n" for x in now)
        print(f"structure: wrote {len(now)} entries to {BASELINE}")
        return 0
    base = [l.strip() for l in open(BASELINE) if l.strip() and not l.startswith("#")]
    allowed_leaks = {}
    for b in base:
        if b.startswith("os-code "):
            _, path, n = b.split()
            allowed_leaks[path] = int(n)
    bad = []
    for x in now:
        if x.startswith("os-code "):
            _, path, n = x.split()
            if int(n) > allowed_leaks.get(path, 0):
                bad.append(f"new OS code outside sys/: {path} has {n} line(s), {allowed_leaks.get(path, 0)} allowed (move it into engine::sys, or say `os-layer: why` on the line)")
        elif x not in base:
            what = x.split()[0]
            bad.append({
                "file": f"production file over {MAX_FILE} lines: {x.split()[1]}",
                "function": f"production function over {MAX_FN} lines: {' '.join(x.split()[1:])}",
                "cycle": f"modules that import each other: {' '.join(x.split()[1:])}",
            }.get(what, x))
    current = set(now)
    current_leaks = {x.split()[1]: int(x.split()[2]) for x in now if x.startswith("os-code ")}
    stale = [b for b in base if (b.startswith("os-code ") and current_leaks.get(b.split()[1], 0) < int(b.split()[2]))
             or (not b.startswith("os-code ") and b not in current)]
    for s in stale:
        bad.append(f"{BASELINE} lists `{s}`, which the code no longer has: take it out (python3 .ci/structure.py --write)")
    counts = {}
    for x in now:
        counts[x.split()[0]] = counts.get(x.split()[0], 0) + 1
    print("structure: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + f" (baseline {len(base)})")
    for b in bad:
        print(f"structure: {b}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
