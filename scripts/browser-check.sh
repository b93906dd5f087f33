#!/usr/bin/env bash
# Renders the HTML memory timeline in a real browser (Debian's chromium, headless, no network)
# and checks it: the page draws, the DOM holds exactly the blocks, labels and markers of its
# data, hovering an allocation shows its source, the slider replays the segment map.
# Writes the reports of two examples (fragmentation: an OOM and fixed segments; bert_inference:
# labels and many allocations) under target/browser-check/, with screenshots.
# Usage: scripts/browser-check.sh [--screenshot docs/timeline.png]  (the bert_inference chart,
# with one allocation's tooltip, for the README)
set -euo pipefail
cd "$(dirname "$0")/.."
shot=""
if [[ "${1:-}" == "--screenshot" ]]; then
  shot="${2:?--screenshot needs a file}"
fi

if ! command -v chromium >/dev/null; then
  echo "== installing chromium (apt package)"
  if [[ "$(id -u)" == 0 ]]; then
    apt-get update -qq && apt-get install -y -qq chromium >/dev/null
  else
    sudo apt-get update -qq && sudo apt-get install -y -qq chromium >/dev/null
  fi
fi
export CHROMIUM="${CHROMIUM:-$(command -v chromium)}"
if [[ ! -d scripts/browser/node_modules/playwright-core ]]; then
  echo "== npm ci (playwright-core, the driver only; the browser is Debian's)"
  (cd scripts/browser && npm ci --no-audit --no-fund --silent)
fi

out=target/browser-check
mkdir -p "$out"
# Runs an example quietly; shows its output only when it fails.
example() {
  local name="$1"
  shift
  if ! cargo run --quiet --example "$name" -- "$@" >"$out/$name.log" 2>&1; then
    cat "$out/$name.log"
    echo "browser check: the $name example failed" >&2
    exit 1
  fi
}
echo "== writing the reports"
# The naive loop of the fragmentation example exits with its OOM on purpose (status 0 when the
# scenario fragments as expected and every remedy works).
example fragmentation --html "$out/fragmentation.html"
example bert_inference --layers 2 --batch 2 --seq 64 --budget-mib 160 --html "$out/bert_inference.html"

echo "== chromium $("$CHROMIUM" --version 2>/dev/null | awk '{print $2}')"
node scripts/browser/check.mjs "$out/fragmentation.html" "$out/fragmentation.png"
node scripts/browser/check.mjs "$out/bert_inference.html" "${shot:-$out/bert_inference.png}"
echo "browser check: pass"
