#!/usr/bin/env bash
# The fleet lines of `agentbox bench` (docs/PERFORMANCE.md, "Fleet"): what a
# fleet gateway adds to a create and an exec. They need a daemon that is a
# fleet node (node_id, fleet.gateway_key_file, a TCP listen address), which
# the host's daemon usually is not, so this starts a node of its own beside
# it: its own data and run directories, cgroup parent, uid ranges and
# subnet, listening on loopback only; imports busybox; runs the lines; and
# stops it. Its directory (/var/lib/agentbox-benchfleet, a 4 GB sparse
# pool) stays for the next run; `umount /var/lib/agentbox-benchfleet/data/storage
# && rm -r /var/lib/agentbox-benchfleet` removes it. Root.
#
#   scripts/bench-fleet.sh [extra agentbox bench flags]
set -euo pipefail
BIN=$(cd "${BIN:-$(dirname "$0")/../bin}" && pwd)
PORT=${BENCH_FLEET_PORT:-7533}
NAME=agentbox-benchfleet
DIR=/var/lib/$NAME
RUN=/run/$NAME
mkdir -p "$DIR" "$RUN"
chmod 711 "$DIR" # sandboxes traverse it to their layers (data_dir is inside)
KEY=$DIR/fleet.key
[[ -s $KEY ]] || { head -c 32 /dev/urandom | base64 > "$KEY"; chmod 600 "$KEY"; }
CFG=$DIR/node.toml
# uid ranges above the host daemon's default ones (16384 ranges of 65536
# from 1,000,000); a /24 of its own for sandboxes with a network.
cat > "$CFG" <<EOF
node_id = "b2a"
data_dir = "$DIR/data"
run_dir = "$RUN"
socket = "$RUN/agentbox.sock"
listen = "127.0.0.1:$PORT"
guest_binary = "$BIN/agentbox-guest"
cgroup_parent = "$NAME"
uid_base = 1200000000
uid_ranges = 64
storage_size_gb = 4
default_template = "busybox"
log_level = "warn"
[network]
pool = "10.203.0.0/24"
[fleet]
gateway_key_file = "$KEY"
EOF
"$BIN/agentbox" serve --config "$CFG" >>"$DIR/node.log" 2>&1 &
pid=$!
cleanup() {
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}
trap cleanup EXIT
export AGENTBOX_HOST=unix://$RUN/agentbox.sock
for _ in $(seq 1 600); do
	if [[ -s $DIR/data/admin.key ]] && AGENTBOX_API_KEY=$(cat "$DIR/data/admin.key") "$BIN/agentbox" ls >/dev/null 2>&1; then break; fi
	kill -0 "$pid" 2>/dev/null || { echo "bench-fleet: the node did not start; see $DIR/node.log" >&2; tail -20 "$DIR/node.log" >&2; exit 1; }
	sleep 0.1
done
export AGENTBOX_API_KEY
AGENTBOX_API_KEY=$(cat "$DIR/data/admin.key")
AGENTBOX="$BIN/agentbox" "$(dirname "$0")/build-template.sh" busybox >/dev/null
"$BIN/agentbox" bench --templates busybox --only '^fleet/' --e2b-url "http://127.0.0.1:$PORT" --fleet-key-file "$KEY" "$@"
