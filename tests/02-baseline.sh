#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# rsrdma-timeout: 300
#
# Baseline with the in-kernel C nvme-rdma: soft-RoCE and the nvmet-rdma target come up, the C
# host connects to the null_blk subsystem, sees its 256 MiB namespace, runs a verified fio
# workload and disconnects. If this fails, the fabric is broken, not nvme_rsrdma.
set -u
. "$(dirname "$0")/lib/common.sh"

cleanup() {
	host_disconnect_all >/dev/null 2>&1
	target_teardown >/dev/null 2>&1
	module_unload nvme_rdma >/dev/null 2>&1
	fabric_teardown >/dev/null 2>&1
}
trap cleanup EXIT
trap 'exit 143' TERM INT

ktap_print_header
ktap_set_plan 10

rsrdma_unload
module_unload nvme_rdma
dmesg_mark

# Each step needs the previous ones: once one fails, the rest that need it are skipped.
up=1 dev=
need() { # need NAME: 0 if the prerequisites hold, else report NAME skipped
	((up)) && return 0
	ktap_diag "$1: an earlier step failed"
	ktap_test_skip "$1"
	return 1
}
failed() { # failed NAME [REASON]
	[ -z "${2:-}" ] || ktap_diag "$1: $2"
	ktap_test_fail "$1"
	up=0
}

if fabric_setup && target_setup; then
	ktap_diag "$(rdma link show "$RDMA_LINK/1")"
	ktap_test_pass "target_up"
else
	failed "target_up" "rxe or nvmet-rdma setup failed"
fi

if need "load_nvme_rdma"; then
	if modprobe nvme-rdma; then ktap_test_pass "load_nvme_rdma"; else failed "load_nvme_rdma"; fi
fi

if need "connect"; then
	if run_diag nvme connect -t rdma -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN_NULL"; then
		ktap_test_pass "connect"
	else
		failed "connect"
	fi
fi

if need "namespace_appears"; then
	if wait_for 30 nvme_dev_for_nqn "$NQN_NULL"; then
		dev=$(nvme_dev_for_nqn "$NQN_NULL")
		ktap_diag "namespace: $dev"
		ktap_test_pass "namespace_appears"
	else
		failed "namespace_appears" "no namespace of $NQN_NULL within 30 s"
	fi
fi

if need "nvme_list_size"; then
	list=$(nvme list 2>&1)
	ktap_diag "$list"
	size=$(blockdev --getsize64 "$dev")
	if grep -q "^$dev " <<<"$list" && [ "$size" = "$NULL_SIZE" ]; then
		ktap_test_pass "nvme_list_size"
	else
		ktap_diag "nvme_list_size: $dev: $size bytes (expected $NULL_SIZE), in nvme list: $(grep -c "^$dev " <<<"$list")"
		ktap_test_fail "nvme_list_size"
	fi
fi

if need "fio_verify_64MiB"; then
	if fio_verify "$dev" --size=64m; then
		ktap_test_pass "fio_verify_64MiB"
	else
		ktap_test_fail "fio_verify_64MiB"
	fi
fi

_ctrl_gone() { ! grep -qx "$NQN_NULL" /sys/class/nvme/nvme*/subsysnqn 2>/dev/null; }
if need "disconnect"; then
	if run_diag nvme disconnect -n "$NQN_NULL" && wait_for 30 _ctrl_gone; then
		ktap_test_pass "disconnect"
	else
		ktap_test_fail "disconnect"
	fi
fi

# These run whatever happened before: they are the cleanup, checked.
if host_disconnect_all && module_unload nvme_rdma; then
	ktap_test_pass "unload_nvme_rdma"
else
	ktap_test_fail "unload_nvme_rdma"
fi

target_teardown
fabric_teardown
left=$(leftovers)
if [ -z "$left" ]; then
	ktap_test_pass "teardown_leaves_nothing"
else
	ktap_diag "teardown_leaves_nothing: left behind: $(paste -s -d ' ' <<<"$left")"
	ktap_test_fail "teardown_leaves_nothing"
fi

if dmesg_check_clean; then
	ktap_test_pass "dmesg_clean"
else
	ktap_test_fail "dmesg_clean"
fi

ktap_finished
