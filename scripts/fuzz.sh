#!/usr/bin/env bash
# Runs every fuzz target for FUZZTIME (default 10m) each, one after the
# other, and prints each target's last status line; fails on the first
# finding (the failing input is then in the package's testdata/fuzz/NAME/,
# where it stays as a regression seed once fixed). `make fuzz` runs this;
# CI runs the committed seed corpora as plain unit tests (go test) and then
# this with a short FUZZTIME. On a shared machine run it with
# `nice -n 19`; FUZZPARALLEL (default 1) is the number of fuzz workers.
# FUZZMINIMIZETIME (default 10s) bounds the minimizing of each new
# interesting input: Go's default (60s) spent nearly all of a 10-minute
# FuzzExtract run minimizing (772 inputs tried) on this machine.
#
# FUZZTIME=ci (what CI's scripts/test.sh uses) gives each target the count
# of executions in the table's third column, about 5 s of this machine's
# fuzzing: a count has no wall-clock deadline. A duration does, and Go
# 1.26's fuzz coordinator can report its own deadline as a failure
# ("context deadline exceeded", golang/go#75804, fixed in Go 1.27) when a
# loaded host keeps a worker past it; such a run wrote no input, and this
# script says so instead of failing.
set -euo pipefail
FUZZTIME=${FUZZTIME:-10m}
FUZZPARALLEL=${FUZZPARALLEL:-1}
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-10s}
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
targets="
./internal/sandbox FuzzDecodeCursor 5000x
./internal/server FuzzDecodeRequest 2000x
./internal/server FuzzDecodeCreateSandbox 2000x
./internal/server FuzzDecodeExec 2000x
./api FuzzEventReader 10000x
./api FuzzFrameReader 10000x
./internal/guest FuzzExecStream 10000x
./internal/guest FuzzExecRequest 10000x
./internal/guest FuzzGuestProcessRequest 10000x
./internal/guest/files FuzzValidatePath 10000x
./internal/guest/files FuzzExtract 20x
./internal/guest/files FuzzGuestFiles 500x
./internal/build FuzzParseBuildSpec 2000x
./internal/storage FuzzApplyLayer 30x
./internal/storage FuzzSnapshotStream 10000x
./internal/storage FuzzSnapshotStreamFiles 5000x
./internal/storage FuzzApplyOverlayLayer 30x
./internal/e2b FuzzReadStreamRequest 10000x
./internal/auth FuzzGatewayPrincipal 2000x
./api FuzzNodeOfID 10000x
"
failed=0
# inputs DIR: how many inputs a corpus holds (0 when it has no directory:
# a target without committed seeds).
inputs() { { ls "$1" 2>/dev/null || true; } | wc -l; }
# Every fuzz target of the repository is in the table: a new one without a
# line would never run.
while read -r pkg fn; do
	grep -q "^$pkg $fn " <<<"$targets" || { echo "fuzz: $pkg $fn is not in scripts/fuzz.sh's table; add a line for it" >&2; failed=1; }
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | grep -v node_modules | while read -r f; do
	grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed "s|^func |$(dirname "$f") |"
done)
[ $failed = 0 ] || exit 1
while read -r pkg fn ci; do
	[ -n "$pkg" ] || continue
	budget=$FUZZTIME
	[ "$budget" = ci ] && budget=$ci
	echo "== $pkg $fn for $budget"
	start=$(date +%s)
	log=$(mktemp)
	corpus="${pkg#./}/testdata/fuzz/$fn"
	before=$(inputs "$corpus")
	if go test -run '^$' -fuzz "^$fn\$" -fuzztime "$budget" -fuzzminimizetime "$FUZZMINIMIZETIME" -parallel "$FUZZPARALLEL" "$pkg" >"$log" 2>&1; then
		grep 'elapsed:' "$log" | tail -n 1
		echo "   ok in $(($(date +%s) - start))s (with the build)"
	elif grep -q '^    context deadline exceeded$' "$log" && [ "$(inputs "$corpus")" = "$before" ]; then
		grep 'elapsed:' "$log" | tail -n 1
		echo "   ok in $(($(date +%s) - start))s: stopped at its deadline with no input written (golang/go#75804, not a finding)"
	else
		tail -n 40 "$log"
		echo "   FAILED: $fn (the input is in $pkg/testdata/fuzz/$fn/)"
		failed=1
	fi
	rm -f "$log"
done <<<"$targets"
exit $failed
