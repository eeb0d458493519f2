#!/usr/bin/env bash
# Installs gVisor's runsc for the gvisor isolation tier, built from the Go
# module proxy at a pinned version with CGO_ENABLED=0 (a dynamically
# linked runsc fails at every sandbox start here: its chroot has no ELF
# loader). Idempotent: it rebuilds only when the installed binary is
# missing or was built from another version. Takes ~3 minutes on 2 cores.
# The version must match drivers/gvisor.Version.
set -euo pipefail
VERSION=v0.0.0-20260905035102-160fafc42237
DIR=${AGENTBOX_LIB_DIR:-/usr/local/lib/agentbox}
BIN=$DIR/runsc
if [[ -x $BIN ]] && go version -m "$BIN" 2>/dev/null | awk '$1=="mod" && $2=="gvisor.dev/gvisor" {print $3}' | grep -qx "$VERSION"; then
	exit 0
fi
command -v go >/dev/null || { echo "agentbox: runsc needs Go to build; install Go and rerun $0" >&2; exit 1; }
echo "agentbox: building runsc $VERSION into $BIN (about 3 minutes)"
mkdir -p "$DIR"
CGO_ENABLED=0 GOBIN="$DIR" go install "gvisor.dev/gvisor/runsc@$VERSION"
"$BIN" --version >/dev/null
