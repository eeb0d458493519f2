#!/usr/bin/env bash
# Build a template root filesystem and import it into the running agentbox
# daemon.
#
#   scripts/build-template.sh NAME [--force] [--no-import]
#
# NAME is one of:
#   base     Debian bookworm (debootstrap minbase) with bash, python3, pip,
#            venv, nodejs, npm, git, curl and friends; about 2-4 minutes.
#   busybox  a tiny root filesystem made of busybox-static; well under a
#            second.
#   python   base plus python3-numpy, -pandas, -matplotlib, -requests and
#            -ipykernel, and R with its Jupyter kernel (r-cran-irkernel),
#            for data work (sandboxes have no internet to pip install
#            them). Starts from base's cached rootfs (building base
#            first if needed) and adds the packages with apt in a chroot;
#            slim: no npm, docs, manuals, translations or Python test
#            suites (754 MB).
#   node     base plus Debian's nodejs, npm and node-typescript (`tsc`),
#            built the same way as python from base's cached rootfs.
#   node-image  the userland of agentbox's own image for Kubernetes
#            (scripts/build-image.sh adds the binaries and pushes it;
#            docs/cluster.md): debootstrap minbase with what a node
#            needs on its host (btrfs-progs, nftables, iproute2, lxcfs,
#            busybox-static, debootstrap, ...); --no-import only.
#   desktop  base plus a graphical desktop for computer-use agents: Xvfb,
#            openbox, x11vnc, Chromium, st and xterm, xdotool, scrot, fonts
#            (CJK and emoji too) and noVNC's static files, built the
#            same way (docs/templates.md).
#
# The rootfs is built under $AGENTBOX_BUILD_DIR/NAME (default
# /var/lib/agentbox/build/NAME) and imported with
# `agentbox template import NAME --rootfs DIR ...`. If the daemon already has
# a template NAME the script does nothing unless --force is given (which
# imports a new version). --no-import only builds the directory, and keeps
# one built earlier unless --force is given.
# Environment: AGENTBOX (the CLI, default `agentbox` on PATH),
# AGENTBOX_BUILD_DIR, DEBIAN_MIRROR (default: the mirror in apt's sources).
set -euo pipefail

usage() {
	echo "usage: $0 base|busybox|python|node|desktop|node-image [--force] [--no-import]" >&2
	exit 2
}

die() {
	echo "build-template: error: $*" >&2
	exit 1
}

log() { echo "build-template: $*" >&2; }

# progress LOG CMD...: runs CMD with its output appended to LOG and, while
# it runs, prints LOG's last line every 15 s, so that a long debootstrap
# or apt run shows it is moving. Returns CMD's status.
progress() {
	local logf=$1 pid n=0 st=0
	shift
	"$@" >>"$logf" 2>&1 &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		sleep 1
		n=$((n + 1))
		if ((n % 15 == 0)); then
			log "... ${n}s: $(tail -n 1 "$logf" 2>/dev/null | cut -c1-100)"
		fi
	done
	wait "$pid" || st=$?
	return "$st"
}

[[ $# -ge 1 ]] || usage
NAME=$1
shift
FORCE=0
IMPORT=1
for arg in "$@"; do
	case $arg in
	--force) FORCE=1 ;;
	--no-import) IMPORT=0 ;;
	*) usage ;;
	esac
done
case $NAME in
base | busybox | python | node | desktop) ;;
node-image) [[ $IMPORT -eq 0 ]] || die "node-image is the userland of scripts/build-image.sh, which adds the binaries: run that, or pass --no-import" ;;
*) die "unknown template \"$NAME\": this script builds \"base\", \"busybox\", \"python\", \"node\" or \"desktop\"" ;;
esac
[[ $(id -u) -eq 0 ]] || die "run as root (debootstrap, chroot and file ownership need it)"

AGENTBOX=${AGENTBOX:-agentbox}
BUILD_ROOT=${AGENTBOX_BUILD_DIR:-/var/lib/agentbox/build}
DIR=$BUILD_ROOT/$NAME
START=$(date +%s%N)

elapsed() {
	local ms=$((($(date +%s%N) - START) / 1000000))
	printf '%d.%03d' $((ms / 1000)) $((ms % 1000))
}

# Is the template already known to the daemon?
if [[ $IMPORT -eq 1 ]]; then
	command -v "$AGENTBOX" >/dev/null 2>&1 ||
		die "the agentbox CLI ($AGENTBOX) is not on PATH: build it with 'go build -o /usr/local/bin/agentbox ./cmd/agentbox', or set AGENTBOX=/path/to/agentbox, or pass --no-import"
	if ! LIST=$("$AGENTBOX" template ls 2>&1); then
		die "cannot list templates (is the daemon running? start it with 'agentbox serve'): $LIST"
	fi
	if [[ $FORCE -eq 0 ]] && awk 'NR > 1 { print $1 }' <<<"$LIST" | grep -qx -- "$NAME"; then
		log "template \"$NAME\" already exists; nothing to do (use --force to build and import a new version)"
		exit 0
	fi
fi

mkdir -p "$BUILD_ROOT"
# One build of a name at a time (make test and make up may race).
exec 9>"$BUILD_ROOT/.$NAME.lock"
flock 9

# Each template's recipe version: bump it when build_NAME (or, for python
# and node, base's) changes what the rootfs holds, so that a machine's
# cached rootfs from an older recipe is rebuilt (CI keeps its cache).
# NAME.recipe beside the rootfs says which version built it; none is 1.
declare -A RECIPE=([busybox]=1 [base]=1 [python]=3 [node]=1 [desktop]=2 [node-image]=1)
# python 2: python3-munkres instead of scipy (1.7 -> 1.1 GB), and R's kernel.
# python 3: slim (no npm, docs, man pages, translations or Python test
# suites): 1.1 GB -> under 800 MB.
# desktop 2: st (stterm), the terminal app: xterm run as root calls
# initgroups(), which needs CAP_SETGID, which no sandbox process has.
recipe_of() {
	local v=1
	[[ -f $BUILD_ROOT/$1.recipe ]] && v=$(<"$BUILD_ROOT/$1.recipe")
	echo "$v"
}

# A rootfs built earlier is reused (the test command and make up share
# this cache, so base is built once per machine); --force rebuilds it, and
# so does a newer recipe.
CACHED=0
if [[ $FORCE -eq 0 && -d $DIR/bin ]]; then
	if [[ $(recipe_of "$NAME") -ge ${RECIPE[$NAME]} ]]; then
		log "using the rootfs built earlier in $DIR (--force rebuilds it)"
		CACHED=1
	else
		log "the rootfs in $DIR was built by recipe $(recipe_of "$NAME"), older than ${RECIPE[$NAME]}: rebuilding it"
		FORCE=1
	fi
fi
if [[ $CACHED -eq 1 && $IMPORT -eq 0 ]]; then
	exit 0
fi

NEW=$DIR.new
cleanup() {
	# Never leave a chroot's mounts behind.
	for m in proc sys dev/pts dev; do
		if mountpoint -q "$NEW/$m" 2>/dev/null; then umount -l "$NEW/$m" || true; fi
	done
}
trap cleanup EXIT
cleanup
rm -rf --one-file-system "$NEW"

# debian_mirror [SUITE] prints the Debian mirror apt is configured with for
# SUITE (default bookworm; DEBIAN_MIRROR overrides that one only).
debian_mirror() {
	local suite=${1:-bookworm}
	if [[ $suite == bookworm && -n ${DEBIAN_MIRROR:-} ]]; then
		echo "$DEBIAN_MIRROR"
		return
	fi
	local f uri
	# deb822 sources: the URIs of a stanza whose Suites has plain bookworm.
	for f in /etc/apt/sources.list.d/*.sources; do
		[[ -e $f ]] || continue
		uri=$(awk -v suite="$suite" '
			BEGIN { RS = ""; FS = "\n" }
			{
				u = ""; s = 0
				for (i = 1; i <= NF; i++) {
					if ($i ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", $i); split($i, a, /[ \t]+/); u = a[1] }
					if ($i ~ /^Suites:/) {
						n = split($i, w, /[ \t]+/)
						for (j = 2; j <= n; j++) if (w[j] == suite) s = 1
					}
				}
				if (s && u != "") { print u; exit }
			}' "$f")
		if [[ -n $uri ]]; then
			echo "$uri"
			return
		fi
	done
	# One-line sources: deb [options] URI bookworm ...
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[[ -e $f ]] || continue
		uri=$(sed -E 's/\[[^]]*\]//' "$f" | awk -v suite="$suite" '$1 == "deb" && $3 == suite { print $2; exit }')
		if [[ -n $uri ]]; then
			echo "$uri"
			return
		fi
	done
	return 1
}

build_base() {
	command -v debootstrap >/dev/null || die "debootstrap is not installed: apt-get install debootstrap"
	local mirror
	mirror=$(debian_mirror) || die "no Debian bookworm mirror found in /etc/apt/sources.list{,.d}: set DEBIAN_MIRROR=http://your.mirror/debian"
	# debootstrap's resolver cannot follow npm's dependencies (virtual
	# packages), so it installs the base and apt inside adds the rest.
	local pkgs=bash,coreutils,ca-certificates,curl,git,less,procps,iproute2,python3,python3-pip,python3-venv
	local apt_pkgs=(nodejs npm)
	log "debootstrap bookworm from $mirror into $NEW (packages: $pkgs); this takes a few minutes"
	: >"$BUILD_ROOT/$NAME.debootstrap.log"
	progress "$BUILD_ROOT/$NAME.debootstrap.log" debootstrap --variant=minbase --include="$pkgs" bookworm "$NEW" "$mirror" ||
		die "debootstrap failed; see $BUILD_ROOT/$NAME.debootstrap.log"

	log "installing ${apt_pkgs[*]} with apt inside the rootfs"
	cp /etc/resolv.conf "$NEW/etc/resolv.conf"
	mount -t proc proc "$NEW/proc"
	printf '#!/bin/sh\nexit 101\n' >"$NEW/usr/sbin/policy-rc.d"
	chmod 0755 "$NEW/usr/sbin/policy-rc.d"
	{
		progress "$BUILD_ROOT/$NAME.debootstrap.log" chroot "$NEW" /usr/bin/apt-get update &&
			progress "$BUILD_ROOT/$NAME.debootstrap.log" env DEBIAN_FRONTEND=noninteractive chroot "$NEW" /usr/bin/apt-get install -y --no-install-recommends "${apt_pkgs[@]}"
	} ||
		die "apt-get install ${apt_pkgs[*]} failed; see $BUILD_ROOT/$NAME.debootstrap.log"
	rm -f "$NEW/usr/sbin/policy-rc.d"
	umount "$NEW/proc"

	log "configuring the rootfs"
	chroot "$NEW" /usr/sbin/useradd --create-home --uid 1000 --user-group --shell /bin/bash user
	# Processes in a sandbox have no capabilities, so apt cannot drop to _apt.
	echo 'APT::Sandbox::User "root";' >"$NEW/etc/apt/apt.conf.d/99agentbox"
	echo sandbox >"$NEW/etc/hostname"
	cat >"$NEW/etc/hosts" <<-'HOSTS'
		127.0.0.1	localhost sandbox
		::1	localhost ip6-localhost ip6-loopback
	HOSTS
	# Placeholder: agentbox provides the sandbox's resolver at start.
	echo '# managed by agentbox' >"$NEW/etc/resolv.conf"
	chroot "$NEW" /usr/bin/apt-get clean
	rm -rf "$NEW"/var/lib/apt/lists/* "$NEW"/var/cache/apt/*.bin "$NEW"/var/log/*.log \
		"$NEW"/var/log/apt/* "$NEW"/tmp/* "$NEW"/var/tmp/* "$NEW"/root/.cache
}

# apt_install_in ROOT PKG... installs Debian packages inside a rootfs with
# apt in a chroot (daemons kept from starting), logging to $NAME's log.
apt_install_in() {
	local root=$1
	shift
	cp /etc/resolv.conf "$root/etc/resolv.conf"
	mount -t proc proc "$root/proc"
	printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
	chmod 0755 "$root/usr/sbin/policy-rc.d"
	{
		progress "$BUILD_ROOT/$NAME.debootstrap.log" chroot "$root" /usr/bin/apt-get update &&
			progress "$BUILD_ROOT/$NAME.debootstrap.log" env DEBIAN_FRONTEND=noninteractive chroot "$root" /usr/bin/apt-get install -y --no-install-recommends "$@"
	} ||
		die "apt-get install $* failed; see $BUILD_ROOT/$NAME.debootstrap.log"
	rm -f "$root/usr/sbin/policy-rc.d"
	umount "$root/proc"
	echo '# managed by agentbox' >"$root/etc/resolv.conf"
	chroot "$root" /usr/bin/apt-get clean
	rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/log/*.log \
		"$root"/var/log/apt/* "$root"/tmp/* "$root"/var/tmp/* "$root"/root/.cache
}

# slim_dpkg ROOT keeps what people read rather than run out of a rootfs,
# now and in every later apt install in it: documentation (copyright files
# stay), man and info pages and translations other than English. It writes
# dpkg's path-exclude rules, as Debian's slim images do, and removes what
# base's packages had already put there.
slim_dpkg() {
	local root=$1
	cat >"$root/etc/dpkg/dpkg.cfg.d/agentbox-slim" <<-'EOT'
		# agentbox's slim template (scripts/build-template.sh): dpkg does not
		# unpack these paths. Delete this file and reinstall a package to get
		# its files back.
		path-exclude=/usr/share/doc/*
		path-include=/usr/share/doc/*/copyright
		path-exclude=/usr/share/man/*
		path-exclude=/usr/share/info/*
		path-exclude=/usr/share/locale/*
		path-include=/usr/share/locale/en*
		path-include=/usr/share/locale/locale.alias
	EOT
	find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
	find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
	rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/*
	find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'en*' ! -name locale.alias -exec rm -rf {} +
}

# copy_base copies base's cached rootfs (building it first if needed) into
# $NEW, the start of the templates made of base plus packages.
copy_base() {
	local base=$BUILD_ROOT/base
	if [[ ! -d $base/bin ]]; then
		log "the base rootfs is not built yet; building it first"
		"$0" base --no-import || die "building base (which $NAME starts from) failed"
	fi
	log "copying the base rootfs from $base into $NEW"
	# base's lock keeps a concurrent rebuild of base from changing it mid-copy.
	(
		flock 8
		cp -a --one-file-system "$base" "$NEW"
	) 8>"$BUILD_ROOT/.base.lock"
	: >"$BUILD_ROOT/$NAME.debootstrap.log"
}

build_python() {
	# python3-munkres is there for python3-fonttools (matplotlib's), which
	# depends on "python3-scipy | python3-munkres": apt takes the first,
	# and scipy pulls in pythran, g++, gcc and the boost headers (about
	# 500 MB of the template's 1.7 GB). Users who want scipy install it.
	local pkgs=(python3-numpy python3-pandas python3-matplotlib python3-requests python3-ipykernel python3-munkres r-cran-irkernel)
	copy_base
	slim_dpkg "$NEW"
	log "installing ${pkgs[*]} with apt inside the rootfs"
	apt_install_in "$NEW" "${pkgs[@]}"
	# npm and the 350 packages it pulls in are 150 MB a data template does
	# not use (sandboxes have no registry by default); nodejs stays.
	log "removing npm (nodejs stays)"
	progress "$BUILD_ROOT/$NAME.debootstrap.log" env DEBIAN_FRONTEND=noninteractive chroot "$NEW" /usr/bin/apt-get purge -y --autoremove npm ||
		die "apt-get purge npm failed; see $BUILD_ROOT/$NAME.debootstrap.log"
	# The test suites Python packages ship (pandas' alone is 36 MB, 125 MB
	# in all). They are removed after the install, not excluded from it:
	# py3compile fails on a package whose listed files are missing.
	find "$NEW/usr/lib/python3/dist-packages" -mindepth 2 -type d -name tests -prune -exec rm -rf {} +
	# matplotlib's font cache (root's, in /root/.cache) is built once here,
	# not on every sandbox's first plot.
	chroot "$NEW" /usr/bin/env HOME=/root /usr/bin/python3 -c 'import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot, pandas' \
		>>"$BUILD_ROOT/$NAME.debootstrap.log" 2>&1 || die "pandas/matplotlib do not import in the new rootfs; see $BUILD_ROOT/$NAME.debootstrap.log"
	rm -rf "$NEW"/tmp/*
}

build_node() {
	# base has nodejs and npm already; they are named so that node keeps
	# them if base's list changes. node-typescript is Debian's tsc.
	local pkgs=(nodejs npm node-typescript)
	copy_base
	log "installing ${pkgs[*]} with apt inside the rootfs"
	apt_install_in "$NEW" "${pkgs[@]}"
	# A template that cannot compile a line of TypeScript is not kept.
	chroot "$NEW" /bin/sh -c 'cd /tmp && echo "const n: number = 6 * 7; console.log(n);" >t.ts && tsc t.ts && test "$(node t.js)" = 42' \
		>>"$BUILD_ROOT/$NAME.debootstrap.log" 2>&1 || die "tsc or node do not work in the new rootfs; see $BUILD_ROOT/$NAME.debootstrap.log"
	rm -rf "$NEW"/tmp/* "$NEW"/root/.npm
}

# chroot_kill ROOT ends the processes whose root directory is ROOT (started
# by this script in a chroot) and waits until none is left.
chroot_kill() {
	local root p left n
	root=$(readlink -f "$1")
	for n in $(seq 50); do
		left=0
		for p in /proc/[0-9]*; do
			if [[ $(readlink "$p/root" 2>/dev/null) == "$root" ]]; then
				kill -9 "${p#/proc/}" 2>/dev/null || true
				left=1
			fi
		done
		((left)) || return 0
		sleep 0.2
	done
	die "processes in $root do not end"
}

build_desktop() {
	# Spec 3.4 of the desktop design: an X server (Xvfb), a window
	# manager, a VNC server for the live view, a browser and a terminal,
	# the command-line tools agents script (xdotool, scrot, xclip), and
	# fonts for Latin, CJK and emoji text.
	local pkgs=(xvfb x11vnc openbox stterm xterm xdotool scrot x11-utils xauth xclip chromium
		fonts-dejavu-core fonts-liberation2 fonts-noto-cjk fonts-noto-color-emoji)
	copy_base
	# A browser that opens arbitrary pages takes Debian's security updates
	# (bookworm's point release lags them by several Chromium versions):
	# the host's bookworm-security source, when it has one, is kept in the
	# template so that apt upgrades in a sandbox see it too.
	local sec
	if sec=$(debian_mirror bookworm-security); then
		echo "deb $sec bookworm-security main" >"$NEW/etc/apt/sources.list.d/security.list"
	else
		log "warning: the host's apt has no bookworm-security source: Chromium comes from the point release, without the latest security fixes"
	fi
	log "installing ${pkgs[*]} with apt inside the rootfs"
	apt_install_in "$NEW" "${pkgs[@]}"
	# npm and the 350 packages it pulls in (node-gyp, libssl-dev, webpack,
	# ...) are 150 MB that would put the template over 1.2 GiB; nodejs
	# stays. Sandboxes have no registry to use npm with by default anyway.
	log "removing npm (nodejs stays) to keep the template under 1.2 GiB"
	progress "$BUILD_ROOT/$NAME.debootstrap.log" env DEBIAN_FRONTEND=noninteractive chroot "$NEW" /usr/bin/apt-get purge -y --autoremove npm ||
		die "apt-get purge npm failed; see $BUILD_ROOT/$NAME.debootstrap.log"

	# noVNC's static files only: Debian's novnc package depends on
	# websockify, numpy and nodejs (about 80 MiB) for its proxy, which the
	# guest agent replaces with a byte relay to x11vnc's own WebSocket.
	log "extracting noVNC's files from Debian's novnc package"
	local tmp
	tmp=$(mktemp -d)
	(cd "$tmp" && apt-get download novnc >>"$BUILD_ROOT/$NAME.debootstrap.log" 2>&1) ||
		die "could not download the novnc package; see $BUILD_ROOT/$NAME.debootstrap.log"
	dpkg-deb -x "$tmp"/novnc_*.deb "$tmp/x"
	[[ -f $tmp/x/usr/share/novnc/vnc.html ]] || die "the novnc package has no usr/share/novnc/vnc.html"
	rm -rf "$NEW/usr/share/novnc"
	cp -a "$tmp/x/usr/share/novnc" "$NEW/usr/share/novnc"
	mkdir -p "$NEW/usr/share/doc/novnc"
	cp "$tmp/x/usr/share/doc/novnc/copyright" "$NEW/usr/share/doc/novnc/copyright"
	rm -rf "$tmp"

	# Chromium's wrapper (/usr/bin/chromium) reads /etc/chromium.d/*.
	# --no-sandbox: Chromium's own sandbox needs user namespaces, which
	# agentbox's seccomp policy denies; the agentbox sandbox is the
	# boundary (docs/SECURITY.md). --disable-dev-shm-usage: /dev/shm is
	# small when a sandbox's memory is unset.
	cat >"$NEW/etc/chromium.d/agentbox" <<-'EOT'
		# agentbox: Chromium inside a sandbox (docs/templates.md).
		export CHROMIUM_FLAGS="$CHROMIUM_FLAGS --no-sandbox --disable-dev-shm-usage --no-first-run --no-default-browser-check --password-store=basic --disable-gpu --disable-features=Translate,MediaRouter --disable-background-networking"
	EOT

	# Trim what a sandbox never reads: manuals, docs (copyright files
	# kept), translations other than English, Chromium's other UI locales.
	rm -rf "$NEW"/usr/share/man/* "$NEW"/usr/share/info/*
	find "$NEW/usr/share/doc" -mindepth 2 ! -name copyright ! -type d -delete
	find "$NEW/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'en*' ! -name locale.alias -exec rm -rf {} +
	find "$NEW/usr/lib/chromium/locales" -name '*.pak' ! -name 'en-US.pak' -delete

	# A template whose tools are missing or whose browser cannot render a
	# page is not kept: Chromium's headless dump of a page needs no display
	# (integration/desktop_template_test.go starts the real desktop).
	mount -t proc proc "$NEW/proc"
	mount --bind /dev "$NEW/dev"
	chroot "$NEW" /bin/sh -c 'command -v Xvfb x11vnc openbox xdotool scrot st xterm xdpyinfo xauth xclip >/dev/null &&
		chromium --headless=new --no-sandbox --disable-gpu --dump-dom "data:text/html,<title>ok</title>" 2>/dev/null | grep -q "<title>ok</title>"' \
		>>"$BUILD_ROOT/$NAME.debootstrap.log" 2>&1 || die "the desktop tools or Chromium do not work in the new rootfs; see $BUILD_ROOT/$NAME.debootstrap.log"
	# Chromium's crash handler outlives the browser for a moment; no
	# process may keep the chroot's mounts busy.
	chroot_kill "$NEW"
	umount "$NEW/dev" "$NEW/proc"
	rm -rf "$NEW"/tmp/* "$NEW"/root/.cache "$NEW"/root/.config "$NEW"/root/.pki
}

build_node-image() {
	command -v debootstrap >/dev/null || die "debootstrap is not installed: apt-get install debootstrap"
	local mirror
	mirror=$(debian_mirror) || die "no Debian bookworm mirror found in /etc/apt/sources.list{,.d}: set DEBIAN_MIRROR=http://your.mirror/debian"
	# What scripts/install-deps.sh installs on a host for the daemon, less
	# what only tests and the web console's build use.
	local pkgs=ca-certificates,busybox-static,btrfs-progs,nftables,iproute2,util-linux,procps,lxcfs,kmod,debootstrap,curl
	log "debootstrap bookworm from $mirror into $NEW (packages: $pkgs)"
	: >"$BUILD_ROOT/$NAME.debootstrap.log"
	progress "$BUILD_ROOT/$NAME.debootstrap.log" debootstrap --variant=minbase --include="$pkgs" bookworm "$NEW" "$mirror" ||
		die "debootstrap failed; see $BUILD_ROOT/$NAME.debootstrap.log"
	slim_dpkg "$NEW"
	chroot "$NEW" /usr/bin/apt-get clean
	rm -rf "$NEW"/var/lib/apt/lists/* "$NEW"/var/cache/apt/*.bin "$NEW"/var/log/*.log \
		"$NEW"/var/log/apt/* "$NEW"/tmp/* "$NEW"/var/tmp/* "$NEW"/root/.cache
	echo '# managed by the container runtime' >"$NEW/etc/resolv.conf"
}

build_busybox() {
	local bb=""
	if dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q "ok installed"; then
		bb=$(dpkg -L busybox-static | grep -E '/bin/busybox$' | head -n1)
	fi
	if [[ -z $bb || ! -x $bb ]]; then
		log "busybox-static is not installed; fetching the package with apt-get download"
		local tmp
		tmp=$(mktemp -d)
		(cd "$tmp" && apt-get download busybox-static >/dev/null) ||
			die "could not download busybox-static: apt-get install busybox-static and retry"
		dpkg-deb -x "$tmp"/busybox-static_*.deb "$tmp/x"
		bb=$tmp/x/bin/busybox
	fi
	mkdir -p "$NEW"/{bin,sbin,usr/bin,usr/sbin,etc,root,home/user,tmp,proc,dev,sys,var/tmp}
	install -m 0755 "$bb" "$NEW/bin/busybox"
	# One process makes every applet link (a fork per link would cost a
	# second). Paths come from busybox itself: bin/ls, usr/bin/awk, ...
	"$NEW/bin/busybox" --list-full | perl -ne '
		chomp; next if $_ eq "" || $_ eq "bin/busybox";
		symlink("/bin/busybox", "'"$NEW"'/$_") or ($!{EEXIST} or die "symlink $_: $!\n");'
	ln -sf busybox "$NEW/bin/sh"
	cat >"$NEW/etc/passwd" <<-'EOT'
		root:x:0:0:root:/root:/bin/sh
		user:x:1000:1000:user:/home/user:/bin/sh
		nobody:x:65534:65534:nobody:/nonexistent:/bin/false
	EOT
	cat >"$NEW/etc/group" <<-'EOT'
		root:x:0:
		user:x:1000:
		nogroup:x:65534:
	EOT
	echo sandbox >"$NEW/etc/hostname"
	printf '127.0.0.1\tlocalhost sandbox\n' >"$NEW/etc/hosts"
	echo '# managed by agentbox' >"$NEW/etc/resolv.conf"
	chmod 1777 "$NEW/tmp" "$NEW/var/tmp"
	chmod 0700 "$NEW/root"
	chown 1000:1000 "$NEW/home/user"
}

if [[ $CACHED -eq 0 ]]; then
	"build_$NAME"
	rm -rf --one-file-system "$DIR"
	mv "$NEW" "$DIR"
	echo "${RECIPE[$NAME]}" >"$BUILD_ROOT/$NAME.recipe"
	log "built $DIR in $(elapsed)s ($(du -sh --one-file-system "$DIR" | cut -f1))"
fi

[[ $IMPORT -eq 1 ]] || exit 0

# The built-in templates' environment (docs/templates.md). PYTHONDONTWRITEBYTECODE:
# Python's .pyc cache is keyed on the source's mtime in whole seconds and its
# size, so a fix written within the same second as the first run, of the same
# size, would run the old code; a sandbox lives too briefly for the cache to
# pay. integration/main_test.go imports with the same env (a test checks).
ENV=(--env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 --env PYTHONDONTWRITEBYTECODE=1)
log "importing $DIR as template \"$NAME\""
# A template's default memory, where the daemon's is too small for it: a
# desktop runs Xvfb, a window manager, x11vnc and Chromium.
MEM=()
[[ $NAME == desktop ]] && MEM=(--memory 2G)
"$AGENTBOX" template import "$NAME" --rootfs "$DIR" --user root --workdir /root "${ENV[@]}" "${MEM[@]}" ||
	die "import failed; the rootfs is kept in $DIR"
log "template \"$NAME\" ready after $(elapsed)s"
