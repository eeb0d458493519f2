#!/usr/bin/env bash
# `make test-under-load`: the whole test command (scripts/test.sh) while
# stress-ng keeps every core busy (LOAD_CPUS workers, default one per
# core), to find verdicts that depend on how fast the machine is. The
# hogs run at normal priority, like a neighbour's build would, and end
# with the run; the load average seen is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) == 0 ]] || { echo "agentbox: tests run real sandboxes and need root" >&2; exit 1; }
if ! command -v stress-ng >/dev/null; then
	echo "agentbox: installing stress-ng"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q >/dev/null
	apt-get install -y -q --no-install-recommends stress-ng >/dev/null
fi
cpus=${LOAD_CPUS:-$(nproc)}
stress-ng --cpu "$cpus" --timeout 0 --quiet &
hog=$!

(
	while sleep 30; do
		read -r l _ </proc/loadavg
		echo "$l"
	done >/tmp/agentbox-load.txt
) &
meter=$!
trap 'kill $hog $meter 2>/dev/null || true; wait $hog 2>/dev/null || true' EXIT
start=$(date +%s)
rc=0
scripts/test.sh || rc=$?
max=$(sort -n /tmp/agentbox-load.txt 2>/dev/null | tail -n 1)
echo "==> under load: stress-ng --cpu $cpus; load average (1 min) up to ${max:-?}; $(($(date +%s) - start)) s"
exit $rc
