#!/usr/bin/env bash
# Builds the Kubernetes control plane the Kubernetes tests run against
# (internal/kube's tests, docs/cluster.md): kube-apiserver and etcd, from
# the Go module proxy at the versions pinned in scripts/k8s/go.mod (Debian
# packages neither: its etcd is too old for this apiserver). Built once per
# machine into $AGENTBOX_LIB_DIR/k8s (default /usr/local/lib/agentbox/k8s)
# and kept, like runsc: a rebuild happens only when a binary is missing or
# was built from another version. A cold build takes 12-20 minutes on 2
# cores (about 2,600 packages); the module and build caches make an
# interrupted build resume.
set -euo pipefail
cd "$(dirname "$0")/k8s"
DIR=${AGENTBOX_LIB_DIR:-/usr/local/lib/agentbox}/k8s
want() { awk -v m="$1" '$1==m && $2 ~ /^v/ {print $2; exit} $1=="require" && $2==m {print $3; exit}' go.mod; }
have() { go version -m "$DIR/$1" 2>/dev/null | awk -v m="$2" '($1=="mod" || $1=="dep") && $2==m {print $3}'; }
command -v go >/dev/null || { echo "agentbox: the Kubernetes tests need Go to build kube-apiserver; install Go and rerun $0" >&2; exit 1; }
K8S=$(want k8s.io/kubernetes)
ETCD=$(want go.etcd.io/etcd/server/v3)
mkdir -p "$DIR"
build() { # name, package, module, version, ldflags
	[[ -x $DIR/$1 && $(have "$1" "$3") == "$4" ]] && return 0
	echo "agentbox: building $1 $4 into $DIR (once per machine; kube-apiserver takes 12-20 minutes on 2 cores)"
	go build -trimpath -ldflags "-s -w ${5:-}" -o "$DIR/$1.tmp" "$2"
	mv "$DIR/$1.tmp" "$DIR/$1"
}
build etcd go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3 "$ETCD"
# The version the apiserver reports (and derives its API levels from), as
# Kubernetes' own build sets it.
minor=${K8S#v1.}
minor=${minor%%.*}
V=k8s.io/component-base/version
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes "$K8S" \
	"-X $V.gitVersion=$K8S -X $V.gitMajor=1 -X $V.gitMinor=$minor -X $V.gitTreeState=clean"
"$DIR/etcd" --version >/dev/null
"$DIR/kube-apiserver" --version >/dev/null
