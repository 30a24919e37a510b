# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash
#
# The guest tests' helpers for link loss: connects with any option, controller states, target
# ports going away, an I/O probe.
# Sourced by tests/lib/common.sh, not run.

# fabrics_connect OPTIONS: connect by writing OPTIONS to /dev/nvme-fabrics, for options nvme-cli
# lacks (fast_io_fail_tmo); prints the controller name (nvmeN). The controller stays.
fabrics_connect() {
	local line
	line=$(
		exec 2>&1
		exec 3<>/dev/nvme-fabrics || exit 1
		printf '%s' "$1" >&3 || exit 1
		read -r -u 3 l && echo "$l"
	) || { ktap_diag "connect $1: ${line##*: }"; return 1; }
	line=${line#instance=}
	echo "nvme${line%%,*}"
}

# ctrl_state CTRL: the controller's state (live, connecting, resetting...), or "gone".
ctrl_state() { cat "/sys/class/nvme/$1/state" 2>/dev/null || echo gone; }
# in_state CTRL STATE, not_live CTRL: for wait_for, which re-runs them.
in_state() { [ "$(ctrl_state "$1")" = "$2" ]; }
not_live() { ! in_state "$1" live; }

# target_port_disable [PORT]: nvmet port PORT (1 by default) without its subsystems. Unlinking
# the last one disables the port, so nvmet-rdma stops listening and drops its connections.
target_port_disable() {
	rm -f "$NVMET_CFS/ports/${1:-1}"/subsystems/*
}

# target_port_enable [PORT [NQN...]]: link the subsystems back, in the order given (by default
# port 1's three of target_setup, port 2's and 3's $NQN_NULL). The first link enables the port,
# and a host reconnecting before its subsystem is linked is refused for good (invalid subsystem,
# DNR): give the one a controller waits for first.
target_port_enable() {
	local port=${1:-1} nqn
	shift $(($# > 0))
	if (($# == 0)); then
		if ((port == 1)); then set -- "$NQN_NULL" "$NQN_FILE" "$NQN_NULL2"; else set -- "$NQN_NULL"; fi
	fi
	for nqn; do
		[ -e "$NVMET_CFS/ports/$port/subsystems/$nqn" ] ||
			ln -s "$NVMET_CFS/subsystems/$nqn" "$NVMET_CFS/ports/$port/subsystems/$nqn" || return 1
	done
}

# probe_start DEV: read one 4 KiB block with direct I/O in a loop, logging each completion's
# time (seconds since boot) to $PROBE_LOG; probe_first_after T prints the first completion after
# T; probe_stop ends it. A read issued while the controller reconnects completes when it is back,
# so the probe measures when I/O resumes, as an application sees it.
now() { cut -d' ' -f1 /proc/uptime; }

probe_start() {
	PROBE_LOG=$(mktemp /tmp/rsrdma-probe.XXXXXX)
	(
		while :; do
			dd if="$1" of=/dev/null bs=4k count=1 iflag=direct skip=$((RANDOM % 1024)) \
				2>/dev/null && now
		done
	) >"$PROBE_LOG" &
	PROBE_PID=$!
}

probe_stop() {
	[ -n "${PROBE_PID:-}" ] && kill "$PROBE_PID" 2>/dev/null && wait "$PROBE_PID" 2>/dev/null
	PROBE_PID=
	rm -f "$PROBE_LOG"
}

probe_first_after() {
	awk -v t="$1" '$1 > t { print $1; exit }' "$PROBE_LOG"
}
