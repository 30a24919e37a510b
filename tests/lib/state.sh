# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash
#
# The guest tests' helpers: what a test leaves behind, and the reset of the guest.
# Sourced by tests/lib/common.sh, not run.

# leftovers: print, one per line, what a test must not leave behind (modules of the test stack,
# fabrics controllers, RDMA links, target configuration); nothing when the guest is clean.
leftovers() {
	local m c d
	for m in nvme_rsrdma nvme_rdma nvmet_rdma nvme_loop nvmet null_blk rdma_rxe siw; do
		_module_loaded "$m" && echo "module $m"
	done
	for c in /sys/class/nvme/nvme*; do
		[ -e "$c/transport" ] && [ "$(cat "$c/transport")" != pcie ] &&
			echo "controller ${c##*/} ($(cat "$c/transport") $(cat "$c/subsysnqn" 2>/dev/null))"
	done
	rdma link show 2>/dev/null | awk '{ print "rdma link " $2 }'
	for d in "$NULLB_CFS"/*; do
		[ -d "$d" ] && echo "null_blk ${d##*/}"
	done
	mountpoint -q "$TARGET_TMPFS" 2>/dev/null && echo "mount $TARGET_TMPFS"
	ip -6 -o addr show dev "$RDMA_NETDEV" 2>/dev/null |
		awk -v a="$TARGET_ADDR6/64" -v l="$TARGET_LL6/64" '$4 == a || $4 == l { print "address " $4 }'
	[ ! -e "$DROPIN_MODPROBE_CONF" ] || echo "file $DROPIN_MODPROBE_CONF"
	[ "$(cat /proc/sys/kernel/modprobe)" = /bin/true ] && echo "module autoloading off (fabrics_probe)"
	return 0
}

# reset_guest: undo whatever a failed or killed test may have left (see leftovers).
reset_guest() {
	[ "$(cat /proc/sys/kernel/modprobe)" = /bin/true ] && echo /sbin/modprobe >/proc/sys/kernel/modprobe
	rm -f "$DROPIN_MODPROBE_CONF"
	host_disconnect_all
	rsrdma_unload
	target_ipv6_teardown
	target_teardown
	module_unload nvme_rdma
	fabric_teardown
}

# bail_out MSG: the test's set-up failed before its first case: what it left behind as
# diagnostics, then KTAP's "Bail out! MSG" and the totals; exits 1 (the test's EXIT trap cleans
# up).
bail_out() {
	leftovers | ktap_diag
	ktap_exit_fail_msg "$@"
}
