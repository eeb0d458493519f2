#!/usr/bin/env bash
# How many idle busybox sandboxes the host holds, and what each costs
# (docs/PERFORMANCE.md, "Density at 5,000"). Starts a daemon of its own
# beside the host's (its own data and run directories, cgroup parent,
# uid ranges and subnet; Unix socket only), imports busybox, creates
# idle sandboxes 100 at a time (4 creates at once) up to TARGET, and
# after each batch prints one line: live sandboxes, load, MemAvailable,
# slab (all, unreclaimable, kmalloc-1k, mount structures), the host's
# mounts, processes, open files (host, daemon), the daemon's RSS and the
# sandboxes' memory cgroups (all, kernel). It stops early when
# MemAvailable falls under MIN_AVAIL_MB (default 3072) or creates fail;
# on exit it destroys every sandbox it made and stops its daemon. Its
# directory (/var/lib/agentbox-benchdensity, a sparse pool) stays for
# the next run; `umount /var/lib/agentbox-benchdensity/data/storage &&
# rm -r /var/lib/agentbox-benchdensity` removes it. Root. On a machine
# others share, hold their test lock while it fills.
#
#   scripts/bench-density.sh [TARGET]   (default 5000)
set -euo pipefail
BIN=$(cd "${BIN:-$(dirname "$0")/../bin}" && pwd)
TARGET=${1:-5000}
MIN_AVAIL_MB=${MIN_AVAIL_MB:-3072}
NAME=agentbox-benchdensity
DIR=/var/lib/$NAME
RUN=/run/$NAME
mkdir -p "$DIR" "$RUN"
chmod 711 "$DIR" # sandboxes traverse it to their layers (data_dir is inside)
CFG=$DIR/node.toml
# uid ranges above the host daemon's and bench-fleet.sh's; room for
# TARGET sandboxes and the waiting inits.
cat > "$CFG" <<EOF
data_dir = "$DIR/data"
run_dir = "$RUN"
socket = "$RUN/agentbox.sock"
listen = ""
guest_binary = "$BIN/agentbox-guest"
cgroup_parent = "$NAME"
uid_base = 1500000000
uid_ranges = $((TARGET + 64))
storage_size_gb = 24
default_template = "busybox"
log_level = "warn"
[network]
pool = "10.203.22.0/24"
EOF
"$BIN/agentbox" serve --config "$CFG" >>"$DIR/node.log" 2>&1 &
pid=$!
export AGENTBOX_HOST=unix://$RUN/agentbox.sock
IDS=$DIR/ids.txt
: > "$IDS"
cleanup() {
	if [[ -s $IDS ]]; then
		xargs -P4 -n 50 "$BIN/agentbox" rm -f < "$IDS" >/dev/null 2>&1 || true
	fi
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 1 600); do
	if [[ -s $DIR/data/admin.key ]] && AGENTBOX_API_KEY=$(cat "$DIR/data/admin.key") "$BIN/agentbox" ls >/dev/null 2>&1; then break; fi
	kill -0 "$pid" 2>/dev/null || { echo "bench-density: the daemon did not start; see $DIR/node.log" >&2; tail -20 "$DIR/node.log" >&2; exit 1; }
	sleep 0.1
done
export AGENTBOX_API_KEY
AGENTBOX_API_KEY=$(cat "$DIR/data/admin.key")
AGENTBOX="$BIN/agentbox" "$(dirname "$0")/build-template.sh" busybox >/dev/null

sample() {
	awk -v live="$1" -v load="$(cut -d' ' -f1 /proc/loadavg)" \
		-v mounts="$(wc -l < /proc/self/mountinfo)" -v fds="$(ls /proc/$pid/fd | wc -l)" \
		-v pids="$(ls -d /proc/[0-9]* | wc -l)" -v files="$(cut -f1 /proc/sys/fs/file-nr)" \
		-v rss="$(awk '/VmRSS/{print $2}' /proc/$pid/status)" \
		-v cg="$(cat /sys/fs/cgroup/memory/$NAME/memory.usage_in_bytes 2>/dev/null || cat /sys/fs/cgroup/$NAME/memory.current 2>/dev/null || echo 0)" \
		-v kmem="$(cat /sys/fs/cgroup/memory/$NAME/memory.kmem.usage_in_bytes 2>/dev/null || echo 0)" '
	FILENAME == "/proc/meminfo" { m[$1] = $2; next }
	{ s[$1] = $2 * $4 }
	END {
		printf "live %d load %s avail_MB %d slab_MB %d unreclaimable_MB %d kmalloc-1k_MB %d mnt_cache_MB %d host_mounts %d processes %d files %d daemon_fds %d daemon_rss_MB %d cgroups_MB %d cgroups_kmem_MB %d\n",
			live, load, m["MemAvailable:"] / 1024, m["Slab:"] / 1024, m["SUnreclaim:"] / 1024,
			s["kmalloc-1k"] / 1048576, s["mnt_cache"] / 1048576, mounts, pids, files, fds, rss / 1024, cg / 1048576, kmem / 1048576
	}' /proc/meminfo <(tail -n +3 /proc/slabinfo)
}

live=0
sample 0
while ((live < TARGET)); do
	avail=$(awk '/MemAvailable/ { print int($2 / 1024) }' /proc/meminfo)
	if ((avail < MIN_AVAIL_MB)); then
		echo "bench-density: stopped at $live: MemAvailable $avail MB is under $MIN_AVAIL_MB"
		break
	fi
	batch=$((TARGET - live < 100 ? TARGET - live : 100))
	start=$(date +%s%N)
	errs=$(seq "$batch" | xargs -P4 -I{} "$BIN/agentbox" create --template busybox --ttl 12h 2>&1 >>"$IDS" | wc -l || true)
	end=$(date +%s%N)
	live=$(wc -l < "$IDS")
	echo "batch of $batch: $(((end - start) / 1000000)) ms"
	sample "$live"
	if ((errs > 0)); then
		echo "bench-density: stopped at $live: $errs creates failed"
		break
	fi
done
s=$(date +%s)
xargs -P4 -n 50 "$BIN/agentbox" rm < "$IDS" >/dev/null
: > "$IDS"
echo "destroyed $live in $(($(date +%s) - s)) s"
sample 0
