#!/usr/bin/env bash
# Refreshes the console's vendored browser libraries (internal/console/static/vendor)
# from npm: htmx and uPlot, each with its licence and a VERSIONS line.
# Usage: bash deploy/scripts/console-assets.sh [HTMX_SPEC] [UPLOT_SPEC]
# (default htmx.org@2 uplot@1; `make console-assets`). Needs npm; nothing
# is fetched at run time: the files are embedded into the binary.
set -euo pipefail
htmx=${1:-htmx.org@2}
uplot=${2:-uplot@1}
dst=internal/console/static/vendor
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$htmx" "$uplot" >/dev/null)
for t in "$tmp"/*.tgz; do
  d=${t%.tgz}
  mkdir -p "$d" && tar -xzf "$t" -C "$d"
done
h=$(ls -d "$tmp"/htmx.org-*/package) u=$(ls -d "$tmp"/uplot-*/package)
cp "$h/dist/htmx.min.js" "$dst/htmx.min.js"
cp "$h/LICENSE" "$dst/htmx.LICENSE"
cp "$u/dist/uPlot.iife.min.js" "$dst/uPlot.iife.min.js"
cp "$u/dist/uPlot.min.css" "$dst/uPlot.min.css"
cp "$u/LICENSE" "$dst/uPlot.LICENSE"
ver() { sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$1/package.json" | head -1; }
printf 'htmx.org %s (npm, %s)\nuplot %s (npm, %s)\n' "$(ver "$h")" "$htmx" "$(ver "$u")" "$uplot" > "$dst/VERSIONS"
echo "vendored into $dst:"; cat "$dst/VERSIONS"
