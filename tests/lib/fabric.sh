# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash
#
# The guest tests' helpers: the software RDMA device on the guest's network device, of the
# test's provider ($RDMA_PROVIDER, see common.sh): soft-RoCE (rdma_rxe, RDMA link rxe0) or
# soft-iWARP (siw, RDMA link siw0). Both are an RDMA link added with `rdma link add` on
# $RDMA_NETDEV; iWARP connects over TCP through its own CM (iw_cm) and has no GID table.
# Sourced by tests/lib/common.sh, not run.

case "$RDMA_PROVIDER" in
rxe) RDMA_TYPE=rxe RDMA_MODULE=rdma_rxe ;;
siw) RDMA_TYPE=siw RDMA_MODULE=siw ;;
*)
	echo "Bail out! unknown RDMA provider '$RDMA_PROVIDER' (rxe, siw)"
	exit 1
	;;
esac
RDMA_LINK=${RDMA_TYPE}0
RDMA_NETDEV=eth0

_fabric_active() { rdma link show "$RDMA_LINK/1" 2>/dev/null | grep -q 'state ACTIVE'; }

fabric_setup() {
	modprobe "$RDMA_MODULE" || { ktap_diag "modprobe $RDMA_MODULE failed"; return 1; }
	modprobe -a rdma_cm ib_uverbs 2>/dev/null || true
	if [ -n "${RXE_MTU:-}" ]; then
		ip link set "$RDMA_NETDEV" mtu "$RXE_MTU" ||
			{ ktap_diag "cannot set the MTU of $RDMA_NETDEV to $RXE_MTU"; return 1; }
	fi
	if ! rdma link show "$RDMA_LINK/1" >/dev/null 2>&1; then
		rdma link add "$RDMA_LINK" type "$RDMA_TYPE" netdev "$RDMA_NETDEV" ||
			{ ktap_diag "rdma link add $RDMA_LINK failed"; return 1; }
	fi
	wait_for 30 _fabric_active || {
		ktap_diag "$RDMA_LINK not ACTIVE after 30 s: $(rdma link show 2>&1)"
		return 1
	}
}

# fabric_teardown: the RDMA link of either provider (a test killed midway may leave the other's
# after a change of provider) and its module.
fabric_teardown() {
	local rc=0 link
	for link in rxe0 siw0; do
		if rdma link show "$link/1" >/dev/null 2>&1; then
			rdma link delete "$link" || rc=1
		fi
	done
	module_unload rdma_rxe || rc=1
	module_unload siw || rc=1
	return $rc
}
