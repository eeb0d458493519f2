#!/usr/bin/env bash
# Starts, stops or restarts the agentbox daemon in the background (for hosts
# without systemd; with systemd, use contrib/agentbox.service).
# Usage: scripts/daemon.sh start|stop|restart|status
set -euo pipefail
BIN=${AGENTBOX_BIN:-/usr/local/bin/agentbox}
LOG=${AGENTBOX_LOG:-/var/log/agentbox.log}
PIDFILE=/run/agentbox/agentbox.pid
SOCK=/run/agentbox/agentbox.sock

# running: the pid file names a live process (a zombie, state Z, is not).
running() {
	[[ -f $PIDFILE ]] || return 1
	local pid state
	pid=$(cat "$PIDFILE")
	state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
	[[ -n $state && $state != Z ]]
}

start() {
	if running; then echo "agentbox: daemon already running (pid $(cat $PIDFILE))"; return; fi
	mkdir -p /run/agentbox
	setsid nohup "$BIN" serve "$@" >>"$LOG" 2>&1 < /dev/null &
	echo $! > "$PIDFILE"
	local out=""
	for _ in $(seq 1 600); do
		if [[ -S $SOCK ]] && out=$("$BIN" ls 2>&1); then
			echo "agentbox: daemon running (pid $(cat $PIDFILE)), log in $LOG"; return
		fi
		running || { echo "agentbox: daemon failed to start; last log lines:" >&2; tail -20 "$LOG" >&2; exit 1; }
		sleep 0.1
	done
	echo "agentbox: daemon did not answer within 60 s (last answer: ${out:-none}); see $LOG" >&2; exit 1
}

stop() {
	if ! running; then echo "agentbox: daemon not running"; rm -f "$PIDFILE"; return; fi
	local pid; pid=$(cat "$PIDFILE")
	kill "$pid"
	for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	rm -f "$PIDFILE"
	echo "agentbox: daemon stopped (sandboxes keep running; the next start re-adopts them)"
}

case "${1:-}" in
	start) shift; start "$@" ;;
	stop) stop ;;
	restart) shift; stop; start "$@" ;;
	status) if running; then echo "running (pid $(cat $PIDFILE))"; else echo "stopped"; exit 3; fi ;;
	*) echo "usage: $0 start|stop|restart|status" >&2; exit 2 ;;
esac
