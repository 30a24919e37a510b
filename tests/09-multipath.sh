#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# rsrdma-timeout: 900
#
# Native NVMe multipath over the transport: one subsystem reached through two nvmet ports, port
# 1 on the IPv4 address and port 2 on an IPv6 one of the same rxe device, so the core puts the
# two controllers under one namespace head. With verified I/O running on the head (round-robin
# over the paths), each port in turn goes away: the commands in flight on the lost path fail
# over to the other one, I/O goes on with no error, and the lost path reconnects when its port
# comes back and carries I/O again. Then both paths are disconnected without leaking RDMA
# resources.
set -u
. "$(dirname "$0")/lib/common.sh"

cleanup() {
	[ -n "${FIO_PID:-}" ] && kill -INT "$FIO_PID" 2>/dev/null
	teardown_all
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# path_of CTRL: the path device (nvmeXcYnZ) of CTRL's namespace, a directory of the controller.
path_of() {
	local p
	for p in "/sys/class/nvme/$1/"nvme*c*n*; do
		[ -d "$p" ] && echo "${p##*/}" && return 0
	done
	return 1
}

# ios STAT_FILE: reads and writes a block device (its sysfs stat file) has completed.
ios() { awk '{ print $1 + $5 }' "$1"; }

# path_ios PATH_DEV: reads and writes the path has completed.
path_ios() { ios /sys/class/nvme/*/"$1"/stat; }

# moved PATH_DEV SECONDS: whether the path completed I/O during the next SECONDS (says how much;
# for ktap_check, which makes that a diagnostic).
moved() {
	local a b
	a=$(path_ios "$1")
	sleep "$2"
	b=$(path_ios "$1")
	echo "$1: $((b - a)) I/Os in $2 s"
	((b > a))
}

# head_moving: whether I/O on the namespace head completes (fio has started issuing).
head_moving() {
	local a
	a=$(ios "/sys/block/$head/stat")
	sleep 0.5
	(($(ios "/sys/block/$head/stat") > a))
}

# path_state CTRL PATH_DEV: CTRL's state and its path's ANA state.
path_state() { echo "$1 $(ctrl_state "$1"), ANA $(cat "/sys/class/nvme/$1/$2/ana_state")"; }

# paths_moved SECONDS: whether both paths completed I/O during the same SECONDS (says how much,
# and each path's controller and ANA state).
paths_moved() {
	local a4 a6 b4 b6
	a4=$(path_ios "$path4") a6=$(path_ios "$path6")
	sleep "$1"
	b4=$(path_ios "$path4") b6=$(path_ios "$path6")
	echo "in $1 s: $path4 $((b4 - a4)) I/Os ($(path_state "$ctrl4" "$path4"))," \
		"$path6 $((b6 - a6)) I/Os ($(path_state "$ctrl6" "$path6"))"
	((b4 > a4 && b6 > a6))
}

# lose NAME CTRL PATH OTHER_PATH DOWN_CMD UP_CMD: one port away and back with I/O running.
lose() {
	local name=$1 ctrl=$2 path=$3 other=$4 down=$5 up=$6 t
	if ! eval "$down"; then
		ktap_diag "$name: port removed, I/O goes on: '$down' failed"
		ktap_test_fail "$name: port removed, I/O goes on"
		return
	fi
	if wait_for 30 not_live "$ctrl"; then
		ktap_diag "$ctrl: $(ctrl_state "$ctrl") after its port went away"
		ktap_check "$name: port removed, $ctrl leaves live, I/O goes on over $other" moved "$other" 3
	else
		ktap_diag "$name: port removed, $ctrl leaves live, I/O goes on over $other: $ctrl stayed live"
		ktap_test_fail "$name: port removed, $ctrl leaves live, I/O goes on over $other"
	fi
	if ! eval "$up"; then
		ktap_diag "$name: port back, $ctrl live and carrying I/O: '$up' failed"
		ktap_test_fail "$name: port back, $ctrl live and carrying I/O"
		return
	fi
	t=$SECONDS
	if wait_for "$RECOVERY_TIMEOUT" in_state "$ctrl" live; then
		ktap_diag "$ctrl: live again $((SECONDS - t)) s after its port came back"
		ktap_check "$name: port back, $ctrl live and carrying I/O" moved "$path" 3
	else
		ktap_diag "$name: port back, $ctrl live and carrying I/O: state $(ctrl_state "$ctrl")"
		ktap_test_fail "$name: port back, $ctrl live and carrying I/O"
	fi
}

ktap_print_header
ktap_set_plan 9

if ! fabric_setup || ! target_setup || ! target_ipv6_setup || ! host_load; then
	bail_out "set-up failed"
fi
# (nvme_core is loaded now, with the fabrics core.)
if [ "$(cat /sys/module/nvme_core/parameters/multipath 2>/dev/null)" != Y ]; then
	for ((i = 0; i < 9; i++)); do
		ktap_diag "multipath case $((i + 1)): no native NVMe multipath in this kernel (CONFIG_NVME_MULTIPATH)"
		ktap_test_skip "multipath case $((i + 1))"
	done
	ktap_finished
fi
dmesg_mark
baseline=$(rdma_counts)

# --- two paths -----------------------------------------------------------------------------------
for a in "$TARGET_ADDR" "$TARGET_ADDR6"; do
	out=$(timeout 60 nvme connect -t "$HOST_TRANSPORT" -a "$a" -s "$TARGET_PORT" -n "$NQN_NULL" \
		--reconnect-delay=1 --ctrl-loss-tmo=120 2>&1) || ktap_diag "connect to $a: $out"
done
wait_for 30 nvme_dev_for_nqn "$NQN_NULL"
head=$(nvme_dev_for_nqn "$NQN_NULL")
head=${head#/dev/}
ctrl4='' ctrl6=''
for c in /sys/class/nvme/nvme*; do
	[ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$NQN_NULL" ] || continue
	case "$(cat "$c/address")" in
	"traddr=$TARGET_ADDR,"*) ctrl4=${c##*/} ;;
	"traddr=$TARGET_ADDR6,"*) ctrl6=${c##*/} ;;
	esac
done
path4=$(path_of "$ctrl4") path6=$(path_of "$ctrl6")
ktap_diag "head $head: $ctrl4 (IPv4) path $path4, $ctrl6 (IPv6) path $path6"
# Paths of head nvmeSnN are nvmeScCnN, C the controller's instance.
on_head() { [[ $1 =~ ^${head%n*}c[0-9]+n${head##*n}$ ]]; }
two_paths() { test -b "/dev/$head" && on_head "$path4" && on_head "$path6" && [ "$path4" != "$path6" ]; }
ktap_check "two controllers, one namespace head with a path through each" two_paths

subsys=$(basename "$(readlink -f "/sys/block/$head/device")")
echo round-robin >"/sys/class/nvme-subsystem/$subsys/iopolicy" 2>/dev/null
ktap_diag "$subsys iopolicy: $(cat "/sys/class/nvme-subsystem/$subsys/iopolicy" 2>/dev/null)"

# --- I/O over both paths, each port lost and back in turn ------------------------------------
fio_start "/dev/$head"
# fio can take seconds to issue its first I/O (7 s in one CI run); both paths are measured over the
# same window once it has.
t=$SECONDS
if wait_for 30 head_moving; then
	ktap_diag "I/O on $head $((SECONDS - t)) s after fio started"
else
	ktap_diag "no I/O on $head 30 s after fio started"
fi
ktap_check "round-robin I/O over both paths" paths_moved 3

lose "port 1 (IPv4)" "$ctrl4" "$path4" "$path6" target_port_disable target_port_enable
lose "port 2 (IPv6)" "$ctrl6" "$path6" "$path4" "target_port_disable 2" "target_port_enable 2"

if fio_stop; then
	ktap_test_pass "fio verify on the head saw no error"
else
	ktap_test_fail "fio verify on the head saw no error"
fi

# --- teardown -----------------------------------------------------------------------------------
host_disconnect_all
after=$(rdma_counts)
ktap_diag "RDMA resources after disconnect: $(tr '\n' ' ' <<<"$after")"
ktap_check "both paths disconnected, no RDMA resources left" test "$after" = "$baseline"
ktap_check "kernel log clean" dmesg_check_clean
ktap_finished
