#!/usr/bin/env bash
# Installs what only the tests need (not agentbox itself), idempotently:
# Debian's prometheus package, whose server and promtool the metrics
# integration test runs (integration/observe_test.go starts its own
# Prometheus on loopback). About 19 MB to download, 96 MB installed, 18 s
# here. Where the package's service started (systemd), it is stopped and
# disabled: the test runs its own. Node.js and npm, which run the e2b SDK
# tests (integration/e2b_test.go), the MCP TypeScript client test and the
# TypeScript SDK (integration/typescript_sdk_test.go).
# Xvfb, openbox, x11vnc and x11-utils, which the desktop's unit tests
# (internal/guest/desktop) run on the host: a real X server, started by the
# test itself, never the host's display. Debian's chromium, which the
# desktop's live-view test (integration/liveview_test.go: noVNC in a real
# browser) and the web console's test (integration/console_test.go) drive
# headless through chromedp. Debian's docker-registry (the CNCF
# distribution server 2.8.2), a real OCI registry that the registry tests
# (integration/registry_test.go) start on 127.0.0.1 with a config and a
# storage dir of their own; the package's own service (it listens on :5000)
# is stopped and disabled, for systemd and sysvinit alike, every run.
set -euo pipefail
PKGS=(prometheus xvfb openbox x11vnc x11-utils chromium docker-registry)
# Node.js and npm may come from elsewhere than Debian: only missing
# commands are installed.
command -v node >/dev/null 2>&1 || PKGS+=(nodejs)
command -v npm >/dev/null 2>&1 || PKGS+=(npm)
missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "agentbox: installing test dependencies ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q >/dev/null
	apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
	if command -v systemctl >/dev/null 2>&1 && systemctl is-system-running >/dev/null 2>&1; then
		systemctl disable --now prometheus >/dev/null 2>&1 || true
	fi
fi
# The package enables its service at install (a symlink even where systemd
# is not running); the tests start their own registry on a free port.
if [[ -e /lib/systemd/system/docker-registry.service || -e /etc/init.d/docker-registry ]]; then
	if command -v systemctl >/dev/null 2>&1; then
		systemctl stop docker-registry.service >/dev/null 2>&1 || true
		systemctl disable docker-registry.service >/dev/null 2>&1 || true
	fi
	if [[ -x /etc/init.d/docker-registry ]]; then
		/etc/init.d/docker-registry stop >/dev/null 2>&1 || true
		update-rc.d docker-registry disable >/dev/null 2>&1 || true
	fi
fi
