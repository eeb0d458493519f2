#!/usr/bin/env bash
# Builds agentbox's own OCI image, the one deploy/ runs for nodes and
# gateways (docs/cluster.md), and pushes it to an OCI registry, with no
# container engine: the userland is Debian bookworm with what a node needs
# on its host (scripts/build-template.sh node-image, cached per machine),
# plus the binaries of `make build` and runsc; the running daemon imports
# it as the template NAME and pushes it (`agentbox template push`).
#
#   scripts/build-image.sh REF [--name NAME]
#
# REF is where to push, HOST[:PORT]/REPO:TAG (a registry the cluster
# pulls from; a plain-HTTP one must be in the daemon's [registry]
# insecure). NAME is the template's name (default agentbox-node), kept so
# that `agentbox run --template NAME -- agentbox version` tries it.
# Environment: AGENTBOX (the CLI, default bin/agentbox), AGENTBOX_BIN_DIR
# (default bin/), AGENTBOX_BUILD_DIR, AGENTBOX_LIB_DIR (runsc's, default
# /usr/local/lib/agentbox).
set -euo pipefail
cd "$(dirname "$0")/.."
die() {
	echo "build-image: error: $*" >&2
	exit 1
}
log() { echo "build-image: $*" >&2; }
[[ $# -ge 1 && $1 != -* ]] || die "usage: $0 HOST[:PORT]/REPO:TAG [--name NAME]"
REF=$1
shift
NAME=agentbox-node
while [[ $# -gt 0 ]]; do
	case $1 in
	--name) NAME=${2:?--name needs a value}; shift 2 ;;
	*) die "unknown argument $1" ;;
	esac
done
AGENTBOX=${AGENTBOX:-bin/agentbox}
BIN=${AGENTBOX_BIN_DIR:-bin}
LIB=${AGENTBOX_LIB_DIR:-/usr/local/lib/agentbox}
BUILD_ROOT=${AGENTBOX_BUILD_DIR:-/var/lib/agentbox/build}
for b in agentbox agentboxd agentbox-guest; do
	[[ -x $BIN/$b ]] || die "$BIN/$b is missing: run make build first"
done
[[ -x $LIB/runsc ]] || die "$LIB/runsc is missing: run scripts/install-runsc.sh (the gvisor tier's runtime goes into the image)"

scripts/build-template.sh node-image --no-import
# The image's root: the cached userland and this build's binaries, in a
# directory of its own (the cache stays the OS alone).
ROOT=$BUILD_ROOT/$NAME.image
rm -rf --one-file-system "$ROOT"
cp -a --one-file-system "$BUILD_ROOT/node-image" "$ROOT"
trap 'rm -rf --one-file-system "$ROOT"' EXIT
install -D -m 0755 "$BIN/agentbox" "$ROOT/usr/local/bin/agentbox"
install -D -m 0755 "$BIN/agentboxd" "$ROOT/usr/local/bin/agentboxd"
install -D -m 0755 "$BIN/agentbox-guest" "$ROOT/usr/local/lib/agentbox/agentbox-guest"
install -D -m 0755 "$LIB/runsc" "$ROOT/usr/local/lib/agentbox/runsc"
# The gateway runs as uid 65532 (deploy/gateway.yaml) and needs a name.
grep -q '^agentbox:' "$ROOT/etc/passwd" || echo 'agentbox:x:65532:65532:agentbox gateway:/nonexistent:/usr/sbin/nologin' >>"$ROOT/etc/passwd"
grep -q '^agentbox:' "$ROOT/etc/group" || echo 'agentbox:x:65532:' >>"$ROOT/etc/group"

log "importing $ROOT as template \"$NAME\""
"$AGENTBOX" template import "$NAME" --rootfs "$ROOT" --user root --workdir / \
	--env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin >/dev/null ||
	die "import failed"
log "pushing \"$NAME\" to $REF"
"$AGENTBOX" template push "$NAME" "$REF"
