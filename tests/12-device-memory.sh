#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# rsrdma-timeout: 900
#
# Device memory (the GPUDirect path): PCI peer-to-peer memory straight between a device and the
# fabric. The stand-in for accelerator memory is the Controller Memory Buffer of an emulated
# NVMe controller (scripts/vm.sh attaches one), which the NVMe PCI driver publishes as p2pmem;
# a second provider, the test-only rsrdma_p2pmem (tests/p2pmem, make p2pmem) over an ivshmem
# BAR of host RAM, is registered beside it and carries one checkpoint too. The
# transport registers it with each connection like the pool; direct I/O from a process's mapping
# of it (/sys/bus/pci/devices/<bdf>/p2pmem/allocate) goes out with a keyed SGL carrying its RKEY,
# without a copy: the checkpoint example checks every byte of blocks from 4 KiB to 4 MiB and the
# debugfs counters show every byte moved from device memory and none copied. The C nvme-rdma's
# namespaces refuse such pages (EREMOTEIO); a request mixing host and device memory never has
# the device part copied; a reset and a link flap register it afresh with a new RKEY, every
# byte still checked; the previous association's RKEY no longer reaches it (the test target
# tries); the provider removed from the PCI bus while registered: the controller lets it go
# and stays live; the provider back: I/O from it refused until a reset registers it.
#
# The NVMe core gives a multipath head no P2PDMA in 6.12, so the test reloads nvme_core with
# multipath=N (as GPUDirect Storage's P2PDMA mode requires) and restores it at the end.
set -u
. "$(dirname "$0")/lib/common.sh"

CHECKPOINT=$RSRDMA_REPO/scripts/checkpoint.py
PCI=/sys/bus/pci/devices

# The NVMe modules back to their defaults: nvme_core (multipath=N) and the PCI driver out.
nvme_modules_reset() {
	local m
	rsrdma_unload || return 1
	for m in nvme_rdma nvme_fabrics nvme nvme_core; do
		module_unload "$m" || return 1
	done
}
cleanup() {
	hostile_stop
	teardown_all
	nvme_modules_reset
	! _module_loaded rsrdma_p2pmem || rmmod rsrdma_p2pmem
}
trap cleanup EXIT
trap 'exit 143' TERM INT

ktap_print_header
ktap_set_plan 13

if ! zgrep -q '^CONFIG_PCI_P2PDMA=y' /proc/config.gz 2>/dev/null; then
	ktap_skip_all "the kernel has no PCI P2PDMA (CONFIG_PCI_P2PDMA)"
	exit "$KSFT_SKIP"
fi
# nvme_core with multipath=N: every module that uses it out first.
nvme_modules_reset || bail_out "cannot unload the NVMe modules"
modprobe nvme_core multipath=N || bail_out "modprobe nvme_core multipath=N failed"
modprobe nvme || bail_out "modprobe nvme failed"

# provider DRIVER: the BDF of a PCI device bound to DRIVER that publishes peer memory.
provider() {
	local d
	for d in "/sys/bus/pci/drivers/${1:-nvme}"/0000:*; do
		[ "$(cat "$d/p2pmem/published" 2>/dev/null)" = 1 ] && { echo "${d##*/}"; return 0; }
	done
	return 1
}
P2P_KO=$RSRDMA_REPO/out/p2pmem/rsrdma_p2pmem.ko
if [ -f "$P2P_KO" ]; then
	insmod "$P2P_KO" 2>&1 | ktap_diag
else
	ktap_diag "$P2P_KO missing (make p2pmem): the RAM-backed provider's case fails"
fi
if ! wait_for 30 provider >/dev/null; then
	lspci -nn 2>/dev/null | ktap_diag
	ktap_skip_all "no PCI device publishes peer memory (scripts/vm.sh attaches an NVMe controller with a CMB)"
	exit "$KSFT_SKIP"
fi
BDF=$(provider)
P2P_SIZE=$(cat "$PCI/$BDF/p2pmem/size")
ktap_diag "peer memory: $BDF ($(cat "$PCI/$BDF/vendor"):$(cat "$PCI/$BDF/device")), $((P2P_SIZE >> 20)) MiB, $(cat "$PCI/$BDF/p2pmem/available") bytes available"
RAM_BDF=$(wait_for 10 provider rsrdma_p2pmem >/dev/null && provider rsrdma_p2pmem)
ktap_diag "RAM-backed test provider: ${RAM_BDF:-none}"

if ! fabric_setup || ! target_setup || ! host_load; then
	bail_out "set-up failed"
fi
dmesg_mark
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
timeout 60 nvme connect -t "$HOST_TRANSPORT" -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN_NULL" | ktap_diag
wait_for 30 nvme_dev_for_nqn "$NQN_NULL" >/dev/null
dev=$(nvme_dev_for_nqn "$NQN_NULL")
ctrl=$(basename "$(ctrl_for "$NQN_NULL")")
stats=/sys/kernel/debug/nvme_rsrdma/$ctrl/stats
ktap_diag "device $dev, controller $ctrl"

since_mark_has() { dmesg_since_mark | grep -qF -- "$1"; }
dev_rkey() { sed -nE "s/^device memory: $BDF, .*rkey (0x[0-9a-f]+).*/\1/p" "$stats"; }
dev_regs() { sed -nE "s/^device memory: $BDF, .*registrations ([0-9]+).*/\1/p" "$stats"; }
# copied: bytes the controller's I/O queues copied through the pool so far.
copied() { data_bytes "$stats" | awk '{ print $3 }'; }

registered() {
	grep '^device memory:' "$stats" | ktap_diag
	[ -z "$RAM_BDF" ] || grep -q "^device memory: $RAM_BDF, " "$stats" || return 1
	grep -qE "^device memory: $BDF, $((P2P_SIZE >> 10)) KiB at 0x[0-9a-f]+, reached by the CPU \\(no DMA\\), rkey 0x0*[1-9a-f][0-9a-f]*, registrations 1\$" "$stats" &&
		since_mark_has "device memory of $BDF: $((P2P_SIZE >> 20)) MiB registered at iova"
}
ktap_check "device memory of $BDF registered with the connection (debugfs, dmesg)" registered

# --- every byte through device memory ---------------------------------------------------------
checkpoint() { # BLOCKS SIZE [ARGS...]
	python3 "$CHECKPOINT" "$dev" --memory device --device "$BDF" --blocks "$1" --block-size "$2" "${@:3}"
}
ktap_check "checkpoint from device memory, 4 KiB blocks: every byte checked, none copied" \
	checkpoint 64 4K --expect-zero-copy
ktap_check "checkpoint from device memory, 128 KiB blocks: every byte checked, none copied" \
	checkpoint 16 128K --expect-zero-copy --offset 8M
ktap_check "checkpoint from device memory, 1 MiB blocks: every byte checked, none copied" \
	checkpoint 8 1M --expect-zero-copy --offset 16M
ktap_check "checkpoint from device memory, 4 MiB blocks: every byte checked, none copied" \
	checkpoint 4 4M --expect-zero-copy --offset 64M
ram_provider() {
	[ -n "$RAM_BDF" ] || { echo "no RAM-backed provider (rsrdma_p2pmem over ivshmem)"; return 1; }
	python3 "$CHECKPOINT" "$dev" --memory device --device "$RAM_BDF" --blocks 8 --block-size 4M \
		--expect-zero-copy --offset 208M
}
ktap_check "checkpoint from the RAM-backed test provider, 4 MiB blocks: every byte, none copied" \
	ram_provider

# --- bad input ---------------------------------------------------------------------------------
# One request with a page of device memory and a page of process memory (pwritev/preadv of two
# iovecs, O_DIRECT; the block layer makes one request of them): the transport must not copy the
# device page through the pool, and cannot send both with one key, so the request fails with
# EREMOTEIO (the log says why), nothing copied; the controller stays live (a bad buffer is not
# a fault of the connection) and the next I/O from device memory goes out.
mixed() {
	python3 - "$dev" "$PCI/$BDF/p2pmem/allocate" "$stats" <<-'PY' || return 1
		import errno, mmap, os, re, sys
		ns, alloc, stats = sys.argv[1:]
		def copied():
		    return int(re.search(r"^data bytes[^:]*:.*, (\d+) copied", open(stats).read(), re.M).group(1))
		dfd = os.open(alloc, os.O_RDWR)
		dm = mmap.mmap(dfd, 1 << 20, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
		hm = mmap.mmap(-1, 1 << 20)
		fd = os.open(ns, os.O_RDWR | os.O_DIRECT)
		dm[:4096], hm[:4096] = os.urandom(4096), os.urandom(4096)
		c0, rc = copied(), 0
		for name, op in (("pwritev", os.pwritev), ("preadv", os.preadv)):
		    try:
		        n = op(fd, [memoryview(dm)[:4096], memoryview(hm)[:4096]], 96 << 20)
		        print(f"{name} of device + host memory: {n} bytes, not refused")
		        rc = 1
		    except OSError as e:
		        print(f"{name} of device + host memory: {e}")
		        rc |= e.errno != errno.EREMOTEIO
		print(f"bytes copied through the pool meanwhile: {copied() - c0}")
		sys.exit(rc or copied() != c0)
	PY
	in_state "$ctrl" live && since_mark_has "a request mixes device memory with other memory: EREMOTEIO" &&
		checkpoint 2 64K --expect-zero-copy --offset 100M
}
ktap_check "a request of device and host memory: EREMOTEIO, nothing copied, controller live" \
	mixed

# The C nvme-rdma (6.12) does not advertise P2PDMA: its namespaces refuse device memory. The
# same subsystem's second null_blk device, through nvme-rdma.
c_refuses() {
	local cdev out rc=0
	modprobe nvme-rdma || return 1
	timeout 60 nvme connect -t rdma -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN_NULL2" | ktap_diag
	wait_for 30 nvme_dev_for_nqn "$NQN_NULL2" >/dev/null || return 1
	cdev=$(nvme_dev_for_nqn "$NQN_NULL2")
	out=$(python3 "$CHECKPOINT" "$cdev" --memory device --device "$BDF" --blocks 1 --block-size 64K 2>&1) && rc=1
	echo "C nvme-rdma, $cdev: $out"
	grep -q "Remote I/O error" <<<"$out" || rc=1
	nvme disconnect -n "$NQN_NULL2" >/dev/null
	module_unload nvme_rdma
	return $rc
}
ktap_check "the C nvme-rdma's namespace refuses device memory (EREMOTEIO)" c_refuses

# --- reconnects ----------------------------------------------------------------------------------
# renewed WHAT KEY REGS: the device memory's registration after WHAT is a new one with a new
# RKEY, the old one invalidated (dmesg).
renewed() {
	local key2 regs2
	key2=$(dev_rkey) regs2=$(dev_regs)
	ktap_diag "after $1: rkey $2 -> $key2, registrations $3 -> $regs2"
	[ -n "$key2" ] && [ "$key2" != "$2" ] && ((regs2 > $3)) &&
		since_mark_has "device memory of $BDF: invalidating rkey $2 (MR deregistered)"
}
reset_renews() {
	local key regs
	key=$(dev_rkey) regs=$(dev_regs)
	nvme reset "/dev/$ctrl" || return 1
	wait_for 60 in_state "$ctrl" live || return 1
	renewed reset "$key" "$regs" && checkpoint 4 1M --expect-zero-copy --offset 32M
}
ktap_check "reset: device memory registered afresh (new RKEY, old one invalidated), I/O from it" \
	reset_renews

# A link flap in the middle of a checkpoint from device memory: the controller leaves live and
# comes back, the memory registered afresh, and every byte of the checkpoint checks.
flap() {
	local key regs pid rc=0
	key=$(dev_rkey) regs=$(dev_regs)
	checkpoint 48 1M --offset 128M >/tmp/rsrdma-dm-flap.log 2>&1 &
	pid=$!
	sleep 3
	ip link set "$RDMA_NETDEV" down
	wait_for 30 not_live "$ctrl" || rc=1
	ktap_diag "controller $(ctrl_state "$ctrl") with the link down"
	sleep 2
	ip link set "$RDMA_NETDEV" up
	wait_for 60 in_state "$ctrl" live || rc=1
	wait "$pid" || rc=1
	cat /tmp/rsrdma-dm-flap.log
	grep -q "verified: 48 of 48 blocks" /tmp/rsrdma-dm-flap.log || rc=1
	renewed "the flap" "$key" "$regs" || rc=1
	return $rc
}
ktap_check "link flap during a checkpoint from device memory: re-registered, every byte checked" flap

# --- the previous association's key --------------------------------------------------------------
# rsrdma-target records the RKEY of a write from device memory, closes the association, and on
# the new one tries an RDMA READ with the recorded RKEY: it must fail.
stale_key() {
	local hd key rc=0
	timeout 90 nvme connect -t "$HOST_TRANSPORT" -a "$TARGET_ADDR" -s "$HOSTILE_PORT" \
		-n "$HOSTILE_NQN" --reconnect-delay=1 --ctrl-loss-tmo=60 2>&1 | ktap_diag
	wait_for 30 nvme_dev_for_nqn "$HOSTILE_NQN" >/dev/null || return 1
	hd=$(nvme_dev_for_nqn "$HOSTILE_NQN")
	# The namespace's first reads (partition scan) are done before the target is armed.
	sleep 2
	hostile_arm || return 1
	key=$(sed -nE "s/^device memory: $BDF, .*rkey (0x[0-9a-f]+).*/\1/p" \
		"/sys/kernel/debug/nvme_rsrdma/$(hostile_ctrl)/stats")
	python3 "$CHECKPOINT" "$hd" --memory device --device "$BDF" --blocks 1 --block-size 1M \
		--expect-zero-copy || rc=1
	grep -E '^(hostile )?stale-rkey' "$HOSTILE_LOG" | ktap_diag
	grep -q "^hostile stale-rkey: recorded rkey $key " "$HOSTILE_LOG" ||
		{ ktap_diag "the recorded rkey is not device memory's ($key)"; rc=1; }
	hostile_wait 30 "^stale-rkey result: remote-access-error" || rc=1
	return $rc
}
hostile_start --mode stale-rkey --arm signal -v
ktap_check "device memory's RKEY of the previous association fails at the target; data intact" \
	stale_key
hostile_stop
timeout 60 nvme disconnect -n "$HOSTILE_NQN" >/dev/null 2>&1

# --- the provider goes away ------------------------------------------------------------------------
# The provider removed from the PCI bus (as a hot-unplug would) while its memory is registered:
# the removal completes, the controller drops the registration (its key invalidated) and stays
# live, and I/O goes on from host memory.
removed() {
	local rc=0
	timeout 120 sh -c "echo 1 > $PCI/$BDF/remove" || { ktap_diag "the removal did not complete"; rc=1; }
	wait_for 60 in_state "$ctrl" live || rc=1
	grep '^device memory:' "$stats" | ktap_diag
	! grep -q "^device memory: $BDF, " "$stats" || rc=1
	since_mark_has "provider going away" || rc=1
	since_mark_has "device memory of $BDF: invalidating rkey" || rc=1
	python3 "$CHECKPOINT" "$dev" --memory anon --blocks 4 --block-size 1M --offset 200M || rc=1
	return $rc
}
ktap_check "provider removed while registered: removal completes, controller live without it" removed

# The provider back (a PCI rescan binds the NVMe driver again, which publishes its memory): the
# connection set up without it has no registration of it, so I/O from it fails with EREMOTEIO
# and a clear line in the log; a reset registers it, and I/O from it goes out again.
returns() {
	local out
	echo 1 >/sys/bus/pci/rescan
	wait_for 30 provider nvme >/dev/null || { ktap_diag "no provider after the rescan"; return 1; }
	BDF=$(provider)
	out=$(checkpoint 1 64K --offset 104M 2>&1) && { echo "$out"; return 1; }
	echo "before a reset: $out"
	grep -q "Remote I/O error" <<<"$out" &&
		since_mark_has "bytes of device memory no registration of this connection covers" || return 1
	nvme reset "/dev/$ctrl" && wait_for 60 in_state "$ctrl" live || return 1
	grep '^device memory:' "$stats"
	checkpoint 4 1M --expect-zero-copy --offset 104M
}
ktap_check "provider back: EREMOTEIO until a reset registers it, then I/O from it" returns
