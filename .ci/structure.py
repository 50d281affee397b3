#!/usr/bin/env python3
"""The structure rules of docs/architecture.md ("Structure rules"), checked over the sources:

- no circle of modules inside a crate, of any length (a file's module is its path under src/,
  `a/mod.rs` being `a`); a module imports another when it names it in any form: `crate::a::b`,
  `use crate::{a, b::{c, d}}`, `super::x`. A module and its own descendants do not count;
- no `unsafe`, `libc::`, `windows_sys::` or platform `cfg` (`target_os`, `unix`, `windows`)
  outside the OS layer (the `hakaru-sys` crate), unless the line or the one above it says
  `os-layer: ` and why;
- no production function over 100 lines (a comment with "hot loop" within the three lines
  above excuses one) and no production file over 800 lines. Production text leaves out every
  `#[cfg(test)]` item wherever it stands (a braced item to its closing brace, or a `mod x;`),
  and a file that a `#[cfg(test)] mod x;` brings in is test code, with everything under it.

What exists today is listed in .ci/structure-baseline.txt and may only shrink: anything new
fails, and an entry the code no longer needs must be taken out of the list (so the list stays
true). `--write` rewrites the list from the code.
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


TEST_ATTR = re.compile(r"#\[cfg\((all\()?test\b[^\n]*\]")


def production(path):
    """The file without its `#[cfg(test)]` items, wherever they stand."""
    text = open(path, encoding="utf-8", errors="replace").read()
    kept, at = [], 0
    for m in TEST_ATTR.finditer(text):
        if m.start() < at:
            continue
        kept.append(text[at:m.start()])
        rest = m.end()
        semi, brace = text.find(";", rest), text.find("{", rest)
        if brace < 0 or 0 <= semi < brace:
            at = semi + 1 if semi >= 0 else len(text)
            continue
        depth, i = 0, brace
        while i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                break
            i += 1
        at = i + 1
    kept.append(text[at:])
    return "".join(kept)


TEST_MOD = re.compile(r"#\[cfg\((all\()?test\b[^\n]*\]\s*(pub(\([^)]*\))?\s+)?mod\s+(\w+)\s*;")


def test_modules(path):
    """Files and folders that `#[cfg(test)] mod x;` lines in `path` bring in."""
    text = open(path, encoding="utf-8", errors="replace").read()
    folder, name = os.path.split(path)
    if name not in ("mod.rs", "lib.rs", "main.rs"):
        folder = os.path.join(folder, name[: -len(".rs")])
    out = []
    for m in TEST_MOD.finditer(text):
        out += [os.path.join(folder, m.group(4) + ".rs"), os.path.join(folder, m.group(4))]
    return out


def sources():
    files = []
    for root, dirs, names in os.walk("crates"):
        dirs.sort()
        if "/tests" in root or "/benches" in root:
            continue
        files += [os.path.join(root, n) for n in sorted(names) if n.endswith(".rs")]
    tests = [t for f in files for t in test_modules(f)]
    for f in files:
        if not any(f == t or f.startswith(t + "/") for t in tests):
            yield f


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


def module_of(path):
    """crates/C/src/a/b.rs is (C, "a/b"), a/mod.rs (C, "a"), lib.rs and main.rs (C, "")."""
    parts = path.split("/")
    if len(parts) < 4 or parts[2] != "src":
        return None
    rel = "/".join(parts[3:])[: -len(".rs")]
    rel = rel[: -len("/mod")] if rel.endswith("/mod") else rel
    return parts[1], "" if rel in ("lib", "main") else rel


def use_tree(tree):
    """The paths of one `use` tree: "{a, b::{c, d}}" gives a, b::c, b::d."""
    tree = tree.strip()
    if not tree.startswith("{"):
        return [tree.split(" as ")[0].strip()]
    parts, depth, cur = [], 0, []
    for ch in tree[1:-1]:
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        depth += (ch == "{") - (ch == "}")
        cur.append(ch)
    parts.append("".join(cur))
    out = []
    for part in (x.strip() for x in parts):
        if not part or part == "self":
            continue
        head, sep, rest = part.partition("::{")
        out += [f"{head}::{x}" for x in use_tree("{" + rest)] if sep else use_tree(part)
    return out


def references(src, mod):
    """Crate-relative paths ("a/b/Item") this module names, in any form."""
    refs = set()
    for tree in re.findall(r"\buse\s+crate::(\{[^;]*\}|[\w:]+)", src):
        refs.update(x.replace("::", "/") for x in use_tree(tree))
    refs.update(x.replace("::", "/") for x in re.findall(r"\bcrate::((?:\w+::)*\w+)", src))
    parent = mod.rpartition("/")[0]
    for tree in re.findall(r"\bsuper::(\{[^;]*\}|(?:\w+::)*\w+)", src):
        refs.update(f"{parent}/{x}".lstrip("/").replace("::", "/") for x in use_tree(tree))
    return refs


def resolve(ref, modules):
    """The longest module that `ref` starts with ("" when none: the crate root)."""
    parts = ref.split("/")
    for n in range(len(parts), 0, -1):
        if "/".join(parts[:n]) in modules:
            return "/".join(parts[:n])
    return ""


def circles(graph):
    """Each set of modules that reach one another (a strongly connected component of more than
    one module), sorted; found without recursion."""
    order, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in order:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        order[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in order:
                    order[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], order[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == order[v]:
                ring = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    ring.append(w)
                    if w == v:
                        break
                if len(ring) > 1:
                    out.append(sorted(ring))
    return out


def findings():
    found = []
    srcs, mods = {}, {}
    for p in sources():
        src = production(p)
        lines = src.splitlines()
        if len(lines) > MAX_FILE:
            found.append(f"file {p}")
        found += long_functions(p, lines)
        if not p.startswith("crates/hakaru-sys/"):
            leaks = 0
            for n, line in enumerate(lines):
                said = "os-layer:" in line or (n > 0 and "os-layer:" in lines[n - 1])
                if OS_CODE.search(code(line)) and not said:
                    leaks += 1
            if leaks:
                found.append(f"os-code {p} {leaks}")
        mod = module_of(p)
        if mod:
            srcs[p] = (mod, src)
            mods.setdefault(mod[0], set()).add(mod[1])
    graph = {}
    for (crate, mod), src in srcs.values():
        for ref in references(src, mod):
            t = resolve(ref, mods[crate])
            related = t == mod or mod.startswith(t + "/") or t.startswith(mod + "/")
            if t and not related:
                graph.setdefault(crate, {}).setdefault(mod, set()).add(t)
    for crate, g in sorted(graph.items()):
        for ring in circles(g):
            found.append(f"cycle {crate} {' '.join(ring)}")
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
                bad.append(f"new OS code outside sys/: {path} has {n} line(s), {allowed_leaks.get(path, 0)} allowed (move it into hakaru-sys, or say `os-layer: why` on the line)")
        elif x not in base:
            what = x.split()[0]
            bad.append({
                "file": f"production file over {MAX_FILE} lines: {x.split()[1]}",
                "function": f"production function over {MAX_FN} lines: {' '.join(x.split()[1:])}",
                "cycle": f"a circle of modules (each reaches the others through imports): {' '.join(x.split()[1:])}",
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
