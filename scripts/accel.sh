#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Print the QEMU accelerator to use: "kvm" if a KVM guest actually boots here, else "tcg".
#
# /dev/kvm exists on our build machines but QEMU under KVM aborts ("failed to set MSR") or hangs
# before the kernel prints anything, so presence is not enough: boot the kernel once under KVM
# with no root file system and look for its first lines. The answer is cached per host kernel,
# QEMU version and guest kernel. RSRDMA_ACCEL=kvm|tcg overrides.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

kdir=${1:?usage: accel.sh KDIR}
if [ -n "${RSRDMA_ACCEL:-}" ]; then
	echo "$RSRDMA_ACCEL"
	exit 0
fi
if [ ! -w /dev/kvm ]; then
	echo tcg
	exit 0
fi

key=$( { uname -r; qemu-system-x86_64 --version | head -n1; cat "$kdir/include/config/kernel.release"; } |
	sha256sum | cut -c1-12)
stamp=$cache/accel-$key
if [ -f "$stamp" ]; then
	cat "$stamp"
	exit 0
fi

log "probing whether a KVM guest boots here (up to 30 s)"
probe=$(timeout -k 5 30 qemu-system-x86_64 -accel kvm -cpu host -m 256 -nographic -no-reboot \
	-kernel "$kdir/arch/x86/boot/bzImage" -append "console=ttyS0 panic=-1" 2>&1 | head -c 65536 || true)
if grep -q 'Linux version' <<<"$probe"; then
	accel=kvm
else
	accel=tcg
	log "KVM is not usable here ($(grep -m1 -iE 'error|fail' <<<"$probe" || echo 'no output before the timeout')): using TCG"
fi
mkdir -p "$cache"
echo "$accel" >"$stamp"
echo "$accel"
