#!/usr/bin/env bash
# Renders `moe-oracle step --html` pages in headless Chromium (Debian's `chromium`; tools/setup.sh installs it).
# A page passes when, in a 1400 × 1000 window, it drew every stage without a script error and fits the width — the
# page's <html data-status> then reads "ok, …" ("error: …" after a script error, "overflow, …" when wider than the
# window) and the console log has no "Uncaught" — and a PNG screenshot comes out (OUTPUT_DIR/NAME.png, to look at).
# Two negative controls, a broken script and a page made too wide, must be caught, so the check itself can fail.
#   usage: step_html_test.sh MOE_ORACLE_BINARY OUTPUT_DIR
set -euo pipefail
bin="$1"
out="$2"
browser="$(command -v chromium || command -v chromium-browser || true)"
if [[ -z "$browser" ]]; then
  echo "step_html_test: FAIL: chromium not found; install Debian's 'chromium' package (bash tools/setup.sh does)" >&2
  exit 1
fi
mkdir -p "$out"

chrome() {  # chrome NAME ARGS…: one headless run with its own profile (tests may run in parallel)
  local name="$1"; shift
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$out/profile-$name" \
    --enable-logging=stderr --v=0 "$@" 2>>"$out/$name.console.log"
}

# check NAME: 0 when out/NAME.html draws cleanly and screenshots to out/NAME.png
check() {
  local name="$1" page="file://$out/$1.html"
  rm -f "$out/$name.png" "$out/$name.console.log"
  local status
  status="$(chrome "$name" --window-size=1400,1000 --dump-dom "$page" | grep -o 'data-status="[^"]*"' | head -1 || true)"
  if [[ "$status" != 'data-status="ok'* ]]; then echo "$name: page did not draw cleanly: ${status:-no status}"; return 1; fi
  if grep -q "Uncaught" "$out/$name.console.log"; then echo "$name: script error: $(grep -m1 Uncaught "$out/$name.console.log")"; return 1; fi
  chrome "$name" --screenshot="$out/$name.png" --window-size=1400,1000 "$page" >/dev/null
  if [[ ! -s "$out/$name.png" ]] || [[ "$(head -c 8 "$out/$name.png" | od -An -tx1 | tr -d ' \n')" != "89504e470d0a1a0a" ]]; then
    echo "$name: no PNG screenshot"; return 1
  fi
  echo "$name: ok ($status, $(stat -c %s "$out/$name.png") bytes of PNG)"
}

status=0
for d in alltoall allgather flex; do
  "$bin" step --dispatcher "$d" --html "$out/seed-$d.html" >/dev/null
  check "seed-$d" || status=1
done
"$bin" step --preset tiny-v4 --world 4 --ep 2 --etp 2 --tokens 2 --html "$out/tiny-v4-etp2.html" >/dev/null
check tiny-v4-etp2 || status=1
"$bin" step --rank 1 --html "$out/seed-rank1.html" >/dev/null
check seed-rank1 || status=1
if grep -q '"rank":0' "$out/seed-rank1.html"; then echo "seed-rank1: --rank 1 page still carries rank 0"; status=1; fi

sed 's/JSON.parse(/JSON.parsee(/' "$out/seed-alltoall.html" >"$out/broken.html"
if check broken >/dev/null; then echo "negative control: a page with a script error passed the check"; status=1; fi
sed 's|</style>|body { min-width: 2400px; }</style>|' "$out/seed-alltoall.html" >"$out/too-wide.html"
if check too-wide >/dev/null; then echo "negative control: a page wider than the window passed the check"; status=1; fi
exit $status
