#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Boot the guest kernel, run one command in it as root and return its exit status.
#
#   scripts/vm.sh [-t TIMEOUT_S] [-c CPUS] [-m MEMORY] [-o OUTDIR] [-a KERNEL_ARG]... [-i SHIFT]
#                 -- COMMAND [ARGS...]
#
# The guest is virtme-ng: it shares the host's root file system read-only (so nvme-cli, fio,
# rdma and the repository are all there) and OUTDIR read-write. The command's output is
# streamed as the guest writes it; OUTDIR keeps guest.log, dmesg.log, console.log and the exit
# status. A guest that hangs is killed at the timeout (exit status 124): CI never hangs.
# One guest at a time per machine: a second vm.sh waits for the first (a lock in the cache).
# Environment inside the guest: RSRDMA_REPO (this repository), RSRDMA_OUT (OUTDIR). -a adds a
# kernel command-line argument (the benchmark uses it for the guest's idle loop). -i runs a TCG
# guest on an instruction-counting clock (QEMU -icount shift=SHIFT,sleep=off): each guest
# instruction advances the guest's clock by 2^SHIFT ns and an idle guest's clock jumps to its
# next timer, so the guest's timings hardly depend on the host's speed or load (the vCPUs
# then take turns on one host thread). It always runs under TCG, even where KVM works.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

timeout_s=900 cpus=2 memory=3G out='' icount='' append="printk.time=1 sysctl.kernel.hung_task_timeout_secs=60"
while getopts "t:c:m:o:a:i:" opt; do
	case "$opt" in
	t) timeout_s=$OPTARG ;;
	c) cpus=$OPTARG ;;
	m) memory=$OPTARG ;;
	o) out=$OPTARG ;;
	a) append+=" $OPTARG" ;;
	i) icount=$OPTARG ;;
	*) die "usage: vm.sh [-t TIMEOUT_S] [-c CPUS] [-m MEMORY] [-o OUTDIR] [-a KERNEL_ARG]... [-i SHIFT] -- COMMAND..." ;;
	esac
done
shift $((OPTIND - 1))
[ "${1:-}" = -- ] && shift
(($#)) || die "no command given"

if [ -n "${KDIR:-}" ]; then
	kdir=$("$here/check-kdir.sh" "$KDIR")
else
	kdir=$("$here/kernel.sh" "${KERNEL:-default}")
fi
[ -n "$out" ] || out=$repo/out/vm-$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out/exit" "$out/guest.log" "$out/dmesg.log"
: >"$out/guest.log"

# The guest-side wrapper: run the command with its output in guest.log, then record the
# status and the kernel log. The shared folder is the only reliable channel back under TCG.
# shellcheck disable=SC2016 # the single-quoted lines are the wrapper's own, expanded there
{
	echo '#!/bin/bash'
	echo "export RSRDMA_REPO=$(printf %q "$repo") RSRDMA_OUT=$(printf %q "$out")"
	echo "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	echo "cd \"\$RSRDMA_REPO\""
	printf '%q ' "$@"
	echo ' >>"$RSRDMA_OUT/guest.log" 2>&1 </dev/null'
	echo 'rc=$?'
	echo 'dmesg >"$RSRDMA_OUT/dmesg.log" 2>&1'
	echo 'echo $rc >"$RSRDMA_OUT/exit"'
	echo 'sync'
} >"$out/guest.sh"
chmod +x "$out/guest.sh"

# One guest at a time per machine: two TCG guests on a small machine halve each other's speed
# and make timeouts fire. The lock is inherited by the guest's processes, so it is held until
# the guest is really gone.
mkdir -p "$cache"
exec 9>"$cache/vm.lock"
if ! flock -n 9; then
	log "another guest is running (lock $cache/vm.lock); waiting for it to finish"
	flock 9
fi

# A KASAN kernel on a CPU with 5-level paging (the TCG "max" CPU that virtme-ng asks QEMU for
# has LA57) reports wild memory accesses in interrupt handling early in boot and never reaches
# user space (seen with QEMU 7.2); with four-level paging it boots and runs clean.
if grep -q '^CONFIG_KASAN=y' "$kdir/.config"; then
	append+=" no5lvl"
fi

accel_opts=()
if [ -n "$icount" ]; then
	[[ "$icount" =~ ^([0-9]|10)$ ]] || die "-i $icount: a shift of 0 to 10"
	# A TCG feature, also where KVM would run; it needs the vCPUs on one host thread (QEMU
	# refuses it with thread=multi). sleep=off is the mode that jumps an idle guest's clock
	# to its next timer (QEMU's own -icount help had sleep=on and off the wrong way round).
	accel=tcg
	# shellcheck disable=SC2054 # QEMU's option values hold commas
	accel_opts=(--disable-kvm --qemu-opt=-accel --qemu-opt=tcg,thread=single
		--qemu-opt=-icount --qemu-opt="shift=$icount,sleep=off")
else
	accel=$("$here/accel.sh" "$kdir")
	if [ "$accel" = tcg ]; then
		# shellcheck disable=SC2054 # QEMU's option value holds a comma
		accel_opts=(--disable-kvm --qemu-opt=-accel --qemu-opt=tcg,thread=multi)
	fi
fi

# Stand-ins for accelerator memory, published as PCI peer-to-peer memory once a test loads
# their drivers (nothing else does): an emulated NVMe controller with a Controller Memory Buffer
# (the NVMe PCI driver publishes it; emulated MMIO, which the guest's CPU reaches one access at
# a time), and an ivshmem-plain device whose BAR is host RAM (tests/p2pmem's test-only driver
# publishes it). VM_CMB_MIB=0 and VM_P2P_RAM_MIB=0 leave them out.
cmb_mib=${VM_CMB_MIB:-64} ram_mib=${VM_P2P_RAM_MIB:-64}
dev_opts=()
if ((cmb_mib > 0)); then
	truncate -s 16M "$out/cmb-nvme.img"
	# shellcheck disable=SC2054 # QEMU's option values hold commas
	dev_opts+=(--qemu-opt=-drive --qemu-opt="if=none,id=cmbnvm,format=raw,file=$out/cmb-nvme.img"
		--qemu-opt=-device --qemu-opt="nvme,serial=rsrdma-cmb,drive=cmbnvm,cmb_size_mb=$cmb_mib")
fi
if ((ram_mib > 0)); then
	# shellcheck disable=SC2054 # QEMU's option values hold commas
	dev_opts+=(--qemu-opt=-object --qemu-opt="memory-backend-ram,id=rsrdma-p2p,size=${ram_mib}M"
		--qemu-opt=-device --qemu-opt="ivshmem-plain,memdev=rsrdma-p2p")
fi

log "booting $(cat "$kdir/include/config/kernel.release") ($accel${icount:+ icount shift $icount}, $cpus vCPUs, $memory) for: $*"
start=$(date +%s)
timeout -k 10 "$timeout_s" vng --run "$kdir" --user root --cpus "$cpus" --memory "$memory" \
	--network user --rwdir="$out" "${accel_opts[@]}" "${dev_opts[@]}" \
	--verbose --append "$append" \
	-- "$out/guest.sh" </dev/null >"$out/console.log" 2>&1 &
vm=$!
tailer=

# If this script is interrupted or killed, stop the guest too: timeout runs in its own process
# group, so a Ctrl-C or a CI cancel would not reach it and the guest would run on until the
# timeout. timeout passes the TERM on to vng.
# shellcheck disable=SC2317 # run by the trap below
stop_guest() {
	trap - INT TERM HUP
	kill -TERM "$vm" 2>/dev/null && log "interrupted: stopping the guest"
	[ -z "$tailer" ] || kill "$tailer" 2>/dev/null
	wait "$vm" 2>/dev/null
	exit 130
}
trap stop_guest INT TERM HUP

# Stream the guest's output while it runs.
tail -n +1 -F --pid="$vm" "$out/guest.log" 2>/dev/null &
tailer=$!
status=0
wait "$vm" || status=$?
sleep 0.5
kill "$tailer" 2>/dev/null || true
wait "$tailer" 2>/dev/null || true
trap - INT TERM HUP

elapsed=$(($(date +%s) - start))
if [ -f "$out/exit" ]; then
	rc=$(cat "$out/exit")
	log "guest finished in ${elapsed} s with status $rc (logs in $out)"
	exit "$rc"
fi
if [ "$status" = 124 ] || [ "$status" = 137 ]; then
	log "guest timed out after ${timeout_s} s (logs in $out); last console lines:"
	tail -n 30 "$out/console.log" >&2
	exit 124
fi
log "guest died without a result (vng status $status, logs in $out); last console lines:"
tail -n 30 "$out/console.log" >&2
exit 125
