#!/usr/bin/env bash
# Copies the web console's third-party browser files (xterm.js and its fit
# addon, pinned by internal/console/web/package-lock.json) into
# internal/console/assets/xterm, which `go build` embeds. Run by `make
# build`. Not committed: without this step the binary still builds, and
# the console's terminal says "terminal assets missing: run make build".
# Without npm it says so and leaves the console without its terminal.
set -euo pipefail
cd "$(dirname "$0")/../internal/console"
out=assets/xterm
if ! command -v npm >/dev/null 2>&1; then
	echo "agentbox: npm is not installed: the web console is built without its terminal (scripts/install-deps.sh installs npm)" >&2
	exit 0
fi
lock=web/package-lock.json
stamp=web/node_modules/.agentbox-lock
if [[ ! -f $stamp ]] || ! cmp -s "$lock" "$stamp"; then
	(cd web && npm ci --no-audit --no-fund --ignore-scripts >/dev/null)
	cp "$lock" "$stamp"
fi
mkdir -p "$out.tmp"
cp web/node_modules/@xterm/xterm/lib/xterm.mjs \
	web/node_modules/@xterm/xterm/css/xterm.css \
	web/node_modules/@xterm/addon-fit/lib/addon-fit.mjs "$out.tmp/"
cp web/node_modules/@xterm/xterm/LICENSE "$out.tmp/LICENSE.xterm"
rm -rf "$out"
mv "$out.tmp" "$out"
