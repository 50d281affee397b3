#!/usr/bin/env bash
# Regenerates docs/images/report-*.png (issue 34): real short runs of each test kind against
# hakaru's embedded server on loopback, their HTML reports (--report), and a screenshot of each
# rendered by headless Chromium. Run it from anywhere after a change to the report:
#
#   scripts/screenshots.sh            # build hakaru, run, render, write docs/images/
#   HAKARU=path/to/hakaru scripts/screenshots.sh   # use this binary instead of building
#   CHROMIUM=chromium-browser scripts/screenshots.sh
#
# Loopback only; each run takes a few seconds (about a minute in all, with quick's seven tests
# and a plan of two local senders into one local receiver).
# The screenshots are of the light page; report-tcp-dark.png is the same page as a reader who
# prefers dark colours sees it.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${HAKARU:-}" ]; then
    cargo build -q -p hakaru
    HAKARU=target/debug/hakaru
fi
HAKARU="$(cd "$(dirname "$HAKARU")" && pwd)/$(basename "$HAKARU")"
browser="${CHROMIUM:-chromium}"
command -v "$browser" >/dev/null || { echo "screenshots: $browser is not installed" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
out=docs/images
mkdir -p "$out"

# name, then the test's arguments (all against the embedded server on loopback).
runs=(
    "tcp|tcp -P 4 --bidir -t 3 -i 0.25"
    "udp|udp -b 400M -P 2 -t 3 -i 0.25"
    "pps|pps -P 2 -t 3 -i 0.25"
    "latency|latency -t 3 -i 0.25 --histogram"
    "connect|connect -P 2 -t 3 -i 0.25"
    "quick|quick -t 1"
)
for r in "${runs[@]}"; do
    name="${r%%|*}"
    # In the scratch directory, so the page names the file as a user's would (tcp.html).
    # shellcheck disable=SC2086 # the arguments are words
    (cd "$work" && "$HAKARU" ${r#*|} -q --report "$name.html" >/dev/null)
done

# A plan: two local senders into one local receiver, UDP both ways (the receiver's server on
# a port of its own, so it does not meet anything on 5201).
cat >"$work/plan.toml" <<PLAN
[hosts.rx]
address = "127.0.0.1"
local = true
port = $((20000 + RANDOM % 20000))

[hosts.sender-a]
local = true

[hosts.sender-b]
local = true

[[step]]
name = "udp 2x1"
kind = "udp"
receivers = ["rx"]
senders = ["sender-a", "sender-b"]
time = 3
interval = 0.25
bidir = true
bitrate_up = "200M"
bitrate_down = "50M"
PLAN
(cd "$work" && "$HAKARU" plan run plan.toml -o plan.json >/dev/null &&
    "$HAKARU" report plan.json -o plan.html 2>/dev/null)
runs+=("plan|")
# Before and after: two UDP runs at different rates in one report (the compare bars).
(cd "$work" && "$HAKARU" udp -b 300M -t 2 -i 0.25 -q -o before.json >/dev/null &&
    "$HAKARU" udp -b 200M -t 2 -i 0.25 -q -o after.json >/dev/null &&
    "$HAKARU" report before.json after.json -o compare.html 2>/dev/null)
runs+=("compare|")

shot() { # html, png, extra chromium flags...
    local html="$1" png="$2"
    shift 2
    timeout 120 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
        --no-first-run --disable-extensions --user-data-dir="$work/profile" \
        --window-size=1000,1500 --screenshot="$png" "$@" "file://$html" >/dev/null 2>&1
    [ -s "$png" ] || { echo "screenshots: no screenshot of $html" >&2; exit 1; }
    echo "screenshots: wrote $png ($(wc -c <"$png") bytes)"
}
for r in "${runs[@]}"; do
    name="${r%%|*}"
    shot "$work/$name.html" "$out/report-$name.png"
done
shot "$work/tcp.html" "$out/report-tcp-dark.png" --force-dark-mode
