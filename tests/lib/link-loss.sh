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
	rm -f "${PROBE_LOG:-}"
}

probe_first_after() {
	awk -v t="$1" '$1 > t { print $1; exit }' "$PROBE_LOG"
}

# --- outages under I/O, counted and timed -------------------------------------------------------
# An outage counts (cycle) when it ran under I/O, both its commands succeeded, the controller
# reconnected (or reset) and I/O was back within RECOVERY_BOUND_MS of the link's return, with
# every RKEY of before it gone. series runs several, on the controller $ctrl of the caller.
RECOVERY_TIMEOUT=60
RECOVERY_BOUND_MS=$(scaled 5000)

probed_after() { [ -n "$(probe_first_after "$1")" ]; }

# recovered CTRL T: wait until CTRL is live and the probe completed a read after time T; print
# the milliseconds from T to that read. Non-zero if that did not happen in time.
recovered() {
	local ctrl=$1 t=$2 first
	wait_for "$RECOVERY_TIMEOUT" in_state "$ctrl" live || return 1
	wait_for 30 probed_after "$t" || return 1
	first=$(probe_first_after "$t")
	awk -v a="$t" -v b="$first" 'BEGIN { printf "%d\n", (b - a) * 1000 }'
}

# stats NAME MS...: median and max of the recovery times, as a diagnostic line.
stats() {
	local name=$1
	shift
	printf '%s\n' "$@" | sort -n | awk -v n="$name" '
		{ v[NR] = $1 } END { if (NR) printf "# %s: %d recoveries, link back to first I/O: median %d ms, max %d ms\n",
			n, NR, v[int((NR + 1) / 2)], v[NR] }'
}

# reissued MARK RKEY: whether the kernel log since MARK shows the pool's (or the registered
# area's) registration with RKEY deregistered and then a new registration given the same value.
# A re-created rxe device numbers its MRs from the start again and draws the key's low byte at
# random, so a new RKEY equals the old one once in 256 device removals.
reissued() {
	dmesg_after "$1" | awk -v k="$2" '
		index($0, "pool: invalidating rkey " k " (MR deregistered)") { gone = 1 }
		index($0, "area: invalidating rkey " k " (MR deregistered)") { gone = 1 }
		gone && index($0, "pool: registered ") && $NF == k { found = 1 }
		gone && index($0, "area: ") && index($0, " with rkey " k " (registration ") { found = 1 }
		END { exit !found }'
}

# cycle NAME CTRL DOWN_CMD DOWN_S UP_CMD: one outage under I/O: DOWN_CMD, DOWN_S seconds, UP_CMD,
# then recovery. It counts only if it ran under I/O (the probe, and the fio job if one was
# started), if both commands succeeded, if the controller went through a reconnect (or, for a
# reset, through the reset), and if I/O was back within RECOVERY_BOUND_MS of UP_CMD. Sets
# CYCLE_MS; checks that the RKEYs from before the outage (there must be some) are gone.
cycle() {
	local name=$1 ctrl=$2 down=$3 secs=$4 up=$5 before after t k mark
	if [ -z "${PROBE_PID:-}" ] || ! kill -0 "$PROBE_PID" 2>/dev/null; then
		ktap_diag "$name: the probe is not running: no outage under I/O"
		return 1
	fi
	if [ -n "${FIO_PID:-}" ] && ! _fio_job_running; then
		ktap_diag "$name: the fio job is not running: no outage under I/O"
		return 1
	fi
	before=$(our_rkeys)
	[ -n "$before" ] || { ktap_diag "$name: the module holds no RKEY before the outage"; return 1; }
	mark=$(kmsg_mark)
	eval "$down" || { ktap_diag "$name: '$down' failed"; return 1; }
	sleep "$secs"
	eval "$up" || { ktap_diag "$name: '$up' failed"; return 1; }
	t=$(now)
	CYCLE_MS=$(recovered "$ctrl" "$t") || {
		ktap_diag "$name: no recovery within ${RECOVERY_TIMEOUT} s (state $(ctrl_state "$ctrl"))," \
			"back at $t, last probe read at $(tail -n1 "$PROBE_LOG"), probe $(kill -0 "$PROBE_PID" 2>/dev/null && echo alive || echo dead)"
		# The one cause outside the host seen so far (see the keep-alive timeout below).
		dmesg_after "$mark" | grep -m1 'nvmet: .*keep-alive timer .* expired' |
			sed 's/^/target: /' | ktap_diag
		return 1
	}
	if ! dmesg_after "$mark" | grep -qE "$ctrl: (Successfully reconnected|resetting controller)"; then
		ktap_diag "$name: no reconnect (nor reset) of $ctrl in the log: the outage did not reach it"
		return 1
	fi
	if ((CYCLE_MS > RECOVERY_BOUND_MS)); then
		ktap_diag "$name: I/O back only $CYCLE_MS ms after the link returned (bound $RECOVERY_BOUND_MS ms)"
		return 1
	fi
	after=$(our_rkeys)
	[ -n "$after" ] || { ktap_diag "$name: the module holds no RKEY after the recovery"; return 1; }
	for k in $before; do
		if grep -qx "$k" <<<"$after"; then
			if reissued "$mark" "$k"; then
				ktap_diag "$name: rkey $k was deregistered and the new registration drew the same value"
				continue
			fi
			ktap_diag "$name: old rkey $k still registered (now: $(tr '\n' ' ' <<<"$after"))"
			return 1
		fi
	done
	ktap_diag "$name: rkeys $(tr '\n' ' ' <<<"$before")-> $(tr '\n' ' ' <<<"$after"), I/O back after $CYCLE_MS ms"
}

# series KIND ONE COUNT DOWN_CMD DOWN_S UP_CMD TEST: COUNT outages (cycle, named "ONE i"), 2 s
# apart, stopping at the first that fails; the recovery times' median and maximum (stats KIND);
# then TEST passes if every one counted. DOWN_S "1-3" means 1, 2 and 3 s in turn.
series() {
	local kind=$1 one=$2 count=$3 down=$4 secs=$5 up=$6 test=$7 i s ms=() ok=1
	if ((count < 1)); then
		ktap_test_skip "$test (a count of $count)"
		return
	fi
	for ((i = 1; i <= count; i++)); do
		s=$secs
		[ "$secs" = 1-3 ] && s=$((1 + (i - 1) % 3))
		if cycle "$one $i (down $s s)" "$ctrl" "$down" "$s" "$up"; then
			ms+=("$CYCLE_MS")
		else
			ok=0
			break
		fi
		sleep 2
	done
	stats "$kind" "${ms[@]}"
	if ((ok)); then ktap_test_pass "$test"; else ktap_test_fail "$test"; fi
}
