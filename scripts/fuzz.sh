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
set -euo pipefail
FUZZTIME=${FUZZTIME:-10m}
FUZZPARALLEL=${FUZZPARALLEL:-1}
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-10s}
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
targets="
./internal/server FuzzDecodeRequest
./internal/server FuzzDecodeCreateSandbox
./internal/server FuzzDecodeExec
./internal/guest FuzzExecStream
./internal/guest FuzzExecRequest
./internal/guest FuzzGuestProcessRequest
./internal/guest/files FuzzValidatePath
./internal/guest/files FuzzExtract
./internal/guest/files FuzzGuestFiles
./internal/build FuzzParseBuildSpec
./internal/storage FuzzApplyLayer
"
failed=0
while read -r pkg fn; do
	[ -n "$pkg" ] || continue
	echo "== $pkg $fn for $FUZZTIME"
	start=$(date +%s)
	log=$(mktemp)
	if go test -run '^$' -fuzz "^$fn\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$FUZZMINIMIZETIME" -parallel "$FUZZPARALLEL" "$pkg" >"$log" 2>&1; then
		grep 'elapsed:' "$log" | tail -n 1
		echo "   ok in $(($(date +%s) - start))s (with the build)"
	else
		tail -n 40 "$log"
		echo "   FAILED: $fn (the input is in $pkg/testdata/fuzz/$fn/)"
		failed=1
	fi
	rm -f "$log"
done <<<"$targets"
exit $failed
