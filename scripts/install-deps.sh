#!/usr/bin/env bash
# Installs the Debian packages agentbox needs on the host. Idempotent.
set -euo pipefail
PKGS=(debootstrap busybox-static btrfs-progs nftables iproute2 util-linux procps
      python3 python3-httpx python3-pytest python3-websockets lxcfs curl)
# npm fetches the web console's xterm.js at build time (scripts/console-assets.sh);
# Node.js and npm may come from elsewhere than Debian: only missing commands
# are installed.
command -v npm >/dev/null 2>&1 || PKGS+=(npm)
missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "agentbox: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q >/dev/null
	apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
modprobe btrfs 2>/dev/null || true
grep -qw btrfs /proc/filesystems || { echo "agentbox: this kernel has no btrfs; it is needed for hard disk limits" >&2; exit 1; }
# gVisor's runsc for the gvisor tier (skip with AGENTBOX_NO_GVISOR=1).
if [[ -z ${AGENTBOX_NO_GVISOR:-} ]]; then
	"$(dirname "$0")/install-runsc.sh" || echo "agentbox: runsc could not be installed; the gvisor tier will be unavailable" >&2
fi
# QEMU, erofs-utils and the guest kernel for the microvm tier (skip with
# AGENTBOX_NO_MICROVM=1).
if [[ -z ${AGENTBOX_NO_MICROVM:-} ]]; then
	"$(dirname "$0")/install-microvm.sh" || echo "agentbox: the microvm tier's packages could not be installed; the tier will be unavailable" >&2
fi
