#!/usr/bin/env bash
# One command from a fresh Debian 12 host to a working agentbox: installs
# the system packages, builds and installs the binaries, starts the daemon,
# builds the default templates and shows a sandbox working.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) == 0 ]] || { echo "agentbox: run setup as root (it installs packages and starts the daemon)" >&2; exit 1; }
export PATH=$PATH:/usr/local/go/bin
step() { printf '\n==> %s\n' "$*"; }

step "installing system packages"
scripts/install-deps.sh
step "building"
make -s install
step "starting the daemon"
scripts/daemon.sh restart
step "building templates (base takes a minute or two the first time)"
scripts/build-template.sh busybox
scripts/build-template.sh base
step "a sandbox at work"
echo '$ agentbox run -- python3 -c "print(sum(range(101)))"'
agentbox run -- python3 -c 'print(sum(range(101)))'
echo '$ agentbox run -- uname -a'
agentbox run -- uname -a
cat <<'MSG'

agentbox is running. Try:
  id=$(agentbox create --ttl 10m)
  agentbox exec $id -- bash -lc 'pip --version; node --version'
  agentbox rm $id
MSG
