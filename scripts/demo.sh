#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The guest side of `make run` (scripts/run.sh boots the guest and runs this): bring up
# soft-RoCE and an nvmet-rdma target, load nvme_rsrdma, connect through it, do real I/O,
# disconnect, unload, and print the module's kernel log.
#
# Exits non-zero if any step fails.
set -u
. "$(dirname "$0")/../tests/lib/common.sh"

DD_MIB=16
failures=()

step() { printf '\n==> %s\n' "$*"; }
failed() { echo "FAILED: $*"; failures+=("$*"); }

# shellcheck disable=SC2317 # run by the EXIT trap below
cleanup() {
	host_disconnect_all >/dev/null 2>&1
	rsrdma_unload >/dev/null 2>&1
	target_teardown >/dev/null 2>&1
	fabric_teardown >/dev/null 2>&1
	rm -f /tmp/rsrdma-demo.in /tmp/rsrdma-demo.out
}
trap cleanup EXIT
trap 'exit 143' TERM INT

echo "nvme-rsrdma demo on $(uname -r), $(nproc) vCPUs"
dmesg_mark

step "soft-RoCE: rdma link add $RDMA_LINK type rxe netdev $RDMA_NETDEV"
if ! fabric_setup || ! rdma link show; then
	failed "rxe setup"
fi

step "nvmet-rdma target on $TARGET_ADDR:$TARGET_PORT"
if target_setup; then
	for s in "$NVMET_CFS"/ports/1/subsystems/*; do
		echo "  ${s##*/} -> $(cat "$NVMET_CFS/subsystems/${s##*/}/namespaces/1/device_path")"
	done
else
	failed "target setup"
fi

step "load nvme_rsrdma: insmod $RSRDMA_KO"
if ! rsrdma_load; then
	failed "load nvme_rsrdma"
	exit 1
fi
lsmod | grep -E '^(Module|nvme_rsrdma|nvme_fabrics|nvme_core|rdma_cm|ib_core) '
for p in /sys/module/nvme_rsrdma/parameters/*; do echo "  parameter ${p##*/}=$(cat "$p")"; done
echo "fabrics transport:"
dmesg_since_mark | grep -E 'nvme_rsrdma: .*(registered|loading)' | sed 's/^/  /'
# The debug trace of connection set-up (CM events, queues, pool registration and RKEY,
# recovery), through dynamic debug; the per-command class "io" stays off (one line per I/O).
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
for class in cm queue pool recovery; do
	echo "module nvme_rsrdma func rsrdma_dbg_$class +p" >/sys/kernel/debug/dynamic_debug/control
done
echo "dynamic debug on: $(grep -c 'nvme_rsrdma.*=p' /sys/kernel/debug/dynamic_debug/control) call sites (cm, queue, pool, recovery)"

step "connect: nvme connect -t rsrdma -a $TARGET_ADDR -s $TARGET_PORT -n $NQN_NULL"
dev=
out=$(nvme connect -t rsrdma -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN_NULL" 2>&1)
rc=$?
[ -z "$out" ] || echo "$out"
if ((rc == 0)); then
	if wait_for 30 nvme_dev_for_nqn "$NQN_NULL"; then
		dev=$(nvme_dev_for_nqn "$NQN_NULL")
		for c in /sys/class/nvme/nvme*; do
			[ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$NQN_NULL" ] &&
				echo "connected: ${c##*/} transport=$(cat "$c/transport") state=$(cat "$c/state") namespace $dev"
		done
	else
		failed "connected, but no namespace of $NQN_NULL appeared within 30 s"
	fi
else
	failed "nvme connect (status $rc)"
fi

if [ -n "$dev" ]; then
	step "nvme list"
	nvme list

	step "I/O: fio, 32 MiB of random writes, every block read back and checked"
	fio_verify "$dev" || failed "fio verify"

	step "I/O: dd ${DD_MIB} MiB of random data in and out (direct I/O), compare checksums"
	dd if=/dev/urandom of=/tmp/rsrdma-demo.in bs=1M count=$DD_MIB status=none &&
		dd if=/tmp/rsrdma-demo.in of="$dev" bs=1M oflag=direct conv=fsync status=none &&
		dd if="$dev" of=/tmp/rsrdma-demo.out bs=1M count=$DD_MIB iflag=direct status=none
	sum_in=$(sha256sum </tmp/rsrdma-demo.in | cut -d' ' -f1)
	sum_out=$(sha256sum </tmp/rsrdma-demo.out 2>/dev/null | cut -d' ' -f1)
	echo "  written  $sum_in"
	echo "  read     $sum_out"
	if [ "$sum_in" = "$sum_out" ]; then echo "  match"; else failed "dd round trip: checksums differ"; fi

	step "disconnect: nvme disconnect -n $NQN_NULL"
	nvme disconnect -n "$NQN_NULL" || failed "nvme disconnect"
	# shellcheck disable=SC2317 # run by wait_for
	gone() { ! grep -qx "$NQN_NULL" /sys/class/nvme/nvme*/subsysnqn 2>/dev/null; }
	wait_for 30 gone || failed "controller still present 30 s after disconnect"
fi

step "unload: rmmod nvme_rsrdma"
if rsrdma_unload; then
	echo "unloaded"
else
	failed "rmmod nvme_rsrdma"
fi

step "kernel log (nvme_rsrdma, nvme, fabrics)"
dmesg_since_mark | grep -E 'nvme_rsrdma|nvme nvme|nvme_fabrics|nvmet'
dmesg_check_clean || failed "kernel log has warnings or errors"

step "result"
if ((${#failures[@]})); then
	echo "demo FAILED: ${failures[*]}"
	exit 1
else
	echo "demo finished: connected through nvme_rsrdma, I/O verified, disconnected and unloaded cleanly"
fi
exit 0
