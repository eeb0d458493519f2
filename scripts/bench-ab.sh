#!/usr/bin/env bash
# A/B of the latency lines of `agentbox bench` between two builds, each on a
# private daemon of its own (data dir, socket, cgroup parent, network pool
# under /var/tmp/agentbox-ab and /run/agentbox-ab-*), in rounds whose
# order alternates (ABBA), so a trend in the machine's load hits both.
#
#   scripts/bench-ab.sh A_DIR B_DIR
#
# A_DIR and B_DIR each hold an agentbox and an agentbox-guest binary, e.g.
#   git archive main | tar -x -C /tmp/a && (cd /tmp/a && make build BIN=/tmp/a/bin)
# Environment: ROUNDS (default 4), N (samples per line, default 60), ONLY
# (bench --only, default create, destroy and exec of busybox), ROOTFS (the
# busybox rootfs, default /var/lib/agentbox/build/busybox). Reports land in
# /var/tmp/agentbox-ab/{a,b}-ROUND.{txt,json}; a summary is printed; the
# daemons' mounts, tables and cgroups are removed at the end. Root.
set -euo pipefail
[[ $# == 2 ]] || { echo "usage: $0 A_DIR B_DIR" >&2; exit 2; }
declare -A DIR=([a]=$(realpath "$1") [b]=$(realpath "$2"))
ROUNDS=${ROUNDS:-4}
N=${N:-60}
ONLY=${ONLY:-'^(create/busybox|destroy/busybox|exec/true)$'}
ROOTFS=${ROOTFS:-/var/lib/agentbox/build/busybox}
OUT=/var/tmp/agentbox-ab
run_one() { # variant round
	local v=$1 r=$2 d=$OUT/$1 bin=${DIR[$1]}
	mkdir -p "$d"
	cat >"$d/config.toml" <<CFG
data_dir = "$d/data"
run_dir = "/run/agentbox-ab-$v"
socket = "/run/agentbox-ab-$v/agentbox.sock"
listen = ""
log_level = "warn"
guest_binary = "$bin/agentbox-guest"
cgroup_parent = "agentbox-ab-$v"
storage_size_gb = 8
default_template = "busybox"
[network]
pool = "10.247.$([[ $v == a ]] && echo 17 || echo 18).0/24"
CFG
	"$bin/agentbox" serve --config "$d/config.toml" 2>>"$d/serve.log" &
	local pid=$!
	for _ in $(seq 1 150); do [[ -S /run/agentbox-ab-$v/agentbox.sock && -s $d/data/admin.key ]] && break; sleep 0.2; done
	export AGENTBOX_HOST=unix:///run/agentbox-ab-$v/agentbox.sock AGENTBOX_API_KEY=$(cat "$d/data/admin.key")
	"$bin/agentbox" template ls 2>/dev/null | grep -q busybox || "$bin/agentbox" template import busybox --rootfs "$ROOTFS" >/dev/null
	"$bin/agentbox" bench --only "$ONLY" --templates busybox --n "$N" --json "$OUT/$v-$r.json" >"$OUT/$v-$r.txt" 2>&1 || true
	for id in $("$bin/agentbox" ls --json 2>/dev/null | python3 -c 'import json,sys; [print(s["id"]) for s in json.load(sys.stdin)]'); do
		"$bin/agentbox" rm "$id" >/dev/null 2>&1 || true
	done
	kill "$pid"
	wait "$pid" || true
}
for r in $(seq 1 "$ROUNDS"); do
	if ((r % 2)); then order="a b"; else order="b a"; fi
	for v in $order; do run_one "$v" "$r"; done
done
# Leave nothing: each daemon's storage mount (and its uid ranges' views of
# it) and loop device, nftables
# table and cgroup parents (its sandboxes were destroyed above).
for v in a b; do
	umount -R "$OUT/$v/data/idmap" 2>/dev/null || true # uid range views, if a daemon was killed
	umount "$OUT/$v/data/storage" 2>/dev/null || true
	nft delete table inet "agentbox-ab-$v" 2>/dev/null || true
	for d in /sys/fs/cgroup/*/"agentbox-ab-$v" /sys/fs/cgroup/unified/"agentbox-ab-$v"; do
		[[ -d $d ]] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
	done
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for v in "ab":
    for r in range(1, rounds + 1):
        for l in json.load(open(f"{out}/{v}-{r}.json"))["results"]:
            rows.setdefault(l["name"], {}).setdefault(v, []).append(l["p50_ms"])
print(f"{'line':28} {'A p50 per round (ms)':36} {'B p50 per round (ms)':36} median A -> B")
for name, vs in rows.items():
    a, b = vs.get("a", []), vs.get("b", [])
    fa, fb = " ".join(f"{x:.1f}" for x in a), " ".join(f"{x:.1f}" for x in b)
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"{name:28} {fa:36} {fb:36} {ma:.2f} -> {mb:.2f} ({(mb / ma - 1) * 100:+.0f}%)")
PY
