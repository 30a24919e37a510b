# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash
#
# The guest tests' helpers: soft-RoCE (rdma_rxe) on the guest's network device.
# Sourced by tests/lib/common.sh, not run.

_rxe_active() { rdma link show "$RXE_NAME/1" 2>/dev/null | grep -q 'state ACTIVE'; }

rxe_setup() {
	modprobe rdma_rxe || { ktap_diag "modprobe rdma_rxe failed"; return 1; }
	modprobe -a rdma_cm ib_uverbs 2>/dev/null || true
	if [ -n "${RXE_MTU:-}" ]; then
		ip link set "$RXE_NETDEV" mtu "$RXE_MTU" ||
			{ ktap_diag "cannot set the MTU of $RXE_NETDEV to $RXE_MTU"; return 1; }
	fi
	if ! rdma link show "$RXE_NAME/1" >/dev/null 2>&1; then
		rdma link add "$RXE_NAME" type rxe netdev "$RXE_NETDEV" ||
			{ ktap_diag "rdma link add $RXE_NAME failed"; return 1; }
	fi
	wait_for 30 _rxe_active || {
		ktap_diag "$RXE_NAME not ACTIVE after 30 s: $(rdma link show 2>&1)"
		return 1
	}
}

rxe_teardown() {
	local rc=0
	if rdma link show "$RXE_NAME/1" >/dev/null 2>&1; then
		rdma link delete "$RXE_NAME" || rc=1
	fi
	module_unload rdma_rxe || rc=1
	return $rc
}
