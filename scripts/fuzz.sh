#!/bin/sh
# Runs every fuzz target for FUZZTIME (default 10m) each, one after the
# other, and prints each target's figures. `make fuzz` runs this; CI runs
# only the committed seed corpora (testdata/fuzz), as plain unit tests.
set -eu
FUZZTIME=${FUZZTIME:-10m}
cd "$(dirname "$0")/.."
targets="
./internal/server FuzzDecodeCreateSandbox
./internal/server FuzzDecodeExec
./internal/guest FuzzExecStream
./internal/guest FuzzExecRequest
./internal/guest/files FuzzValidatePath
./internal/guest/files FuzzExtract
./internal/build FuzzParseBuildSpec
"
echo "$targets" | while read -r pkg fn; do
	[ -n "$pkg" ] || continue
	echo "== $pkg $fn for $FUZZTIME"
	go test -run '^$' -fuzz "^$fn\$" -fuzztime "$FUZZTIME" "$pkg" 2>&1 | tail -n 4
done
