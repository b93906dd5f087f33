#!/usr/bin/env bash
# Renders the HTML memory timeline in a real browser (Debian's chromium, headless, no network)
# and checks it: the page draws, the DOM holds exactly the blocks, labels and markers of its
# data, hovering an allocation shows its source, the slider replays the segment map.
# Writes the reports of two examples (fragmentation: an OOM and fixed segments; bert_inference:
# labels and many allocations) under target/browser-check/, with screenshots.
# Usage: scripts/browser-check.sh [--screenshot docs/timeline.png]
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
echo "== writing the reports"
cargo run --quiet --example fragmentation -- --html "$out/fragmentation.html" >/dev/null
cargo run --quiet --example bert_inference -- --layers 2 --batch 2 --seq 64 --budget-mib 160 \
  --html "$out/bert_inference.html" >/dev/null 2>&1

echo "== chromium $("$CHROMIUM" --version 2>/dev/null | awk '{print $2}')"
node scripts/browser/check.mjs "$out/fragmentation.html" "$out/fragmentation.png"
node scripts/browser/check.mjs "$out/bert_inference.html" "${shot:-$out/bert_inference.png}"
echo "browser check: pass"
