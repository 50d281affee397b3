#!/usr/bin/env bash
# Regenerates docs/images/report-*.png (issue 34): real short runs of each test kind against
# hakaru's embedded server on loopback, their HTML reports (--report), and a screenshot of each
# rendered by headless Chromium. Run it from anywhere after a change to the report:
#
#   scripts/screenshots.sh            # build hakaru, run, render, write docs/images/
#   HAKARU=path/to/hakaru scripts/screenshots.sh   # use this binary instead of building
#   CHROMIUM=chromium-browser scripts/screenshots.sh
#
# Loopback only; each run takes a few seconds (about 45 s in all, with quick's seven tests).
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
