# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash
#
# The guest tests' helpers: the hostile userspace target (tests/target: rsrdma-target).
# Sourced by tests/lib/common.sh, not run.

# A userspace NVMe/RDMA target on the same rxe device (librdmacm/libibverbs), built on the host
# by tests/run.sh (cargo build --release --manifest-path tests/target/Cargo.toml). It serves
# $HOSTILE_NQN on $TARGET_ADDR:$HOSTILE_PORT (not nvmet-rdma's port) from memory, politely or
# with one misbehaviour (--mode, see rsrdma-target --help), applied once. Its stdout (a line per
# connection, controller and misbehaviour) goes to $HOSTILE_LOG, its per-command log (-v) to
# $HOSTILE_VLOG.
#
#   hostile_start [TARGET ARGS...]   start it (stopping an earlier one), wait until it listens
#   hostile_stop                     stop it (TERM, then KILL)
#   hostile_arm                      SIGUSR1: arm a mode started with --arm signal
#   hostile_wait TIMEOUT_S REGEX     wait for a line of its stdout
#   hostile_count REGEX              count lines of its stdout
#   hostile_ctrl                     the host controller (nvmeN) connected to it, if any

HOSTILE_BIN=${HOSTILE_BIN:-$RSRDMA_REPO/tests/target/target/release/rsrdma-target}
HOSTILE_NQN=nqn.2026-11.io.rsrdma:hostile
HOSTILE_PORT=4421
HOSTILE_LOG=/tmp/rsrdma-hostile.log
HOSTILE_VLOG=/tmp/rsrdma-hostile.vlog
HOSTILE_PID=

_pid_gone() { [ ! -d "/proc/$1" ] || grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }

# target_launch PORT NQN LOG VLOG [rsrdma-target options...]: starts an rsrdma-target in the
# background (its pid in LAUNCHED_PID) and waits until it listens.
target_launch() {
	local port=$1 nqn=$2 log=$3 vlog=$4
	shift 4
	LAUNCHED_PID=
	[ -x "$HOSTILE_BIN" ] || {
		ktap_diag "$HOSTILE_BIN missing: cargo build --release --manifest-path tests/target/Cargo.toml"
		return 1
	}
	modprobe -a rdma_ucm ib_uverbs 2>/dev/null
	: >"$log"
	: >"$vlog"
	"$HOSTILE_BIN" -a "$TARGET_ADDR" -p "$port" -n "$nqn" "$@" >"$log" 2>"$vlog" </dev/null &
	LAUNCHED_PID=$!
	wait_for 15 grep -q '^target: listening' "$log" && return 0
	ktap_diag "rsrdma-target did not start: $(tail -n 5 "$log" "$vlog")"
	return 1
}

# target_kill PID: stops a launched rsrdma-target (TERM, then KILL after 10 s).
target_kill() {
	[ -n "$1" ] || return 0
	kill -TERM "$1" 2>/dev/null
	wait_for 10 _pid_gone "$1" || kill -KILL "$1" 2>/dev/null
	wait "$1" 2>/dev/null
}

hostile_start() {
	local rc=0
	hostile_stop
	target_launch "$HOSTILE_PORT" "$HOSTILE_NQN" "$HOSTILE_LOG" "$HOSTILE_VLOG" "$@" || rc=1
	HOSTILE_PID=$LAUNCHED_PID
	((rc == 0)) || hostile_stop
	return $rc
}

hostile_stop() {
	target_kill "$HOSTILE_PID"
	HOSTILE_PID=
}

hostile_arm() {
	kill -USR1 "$HOSTILE_PID" 2>/dev/null && hostile_wait 10 ': armed$'
}

hostile_wait() { wait_for "$1" grep -qE -- "$2" "$HOSTILE_LOG"; }

hostile_count() { grep -cE -- "$1" "$HOSTILE_LOG"; }

hostile_ctrl() {
	local c
	c=$(ctrl_for "$HOSTILE_NQN") && echo "${c##*/}"
}
