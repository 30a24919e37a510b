#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Check that a user-supplied kernel tree (KDIR=) can build nvme_rsrdma, then print it.
# Each missing piece is named, with what to do about it.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

kdir=$(cd "${1:?usage: check-kdir.sh KDIR}" 2>/dev/null && pwd) || die "KDIR '$1' does not exist"
problems=()
cfg=$kdir/.config
if [ ! -f "$cfg" ]; then
	problems+=("$kdir/.config missing: KDIR must be a configured and built kernel tree")
else
	need() { grep -qE "^$1=(y|m)" "$cfg" || problems+=("$1 is not enabled ($2)"); }
	need CONFIG_RUST "Rust support; it requires MODVERSIONS=n, RANDSTRUCT=n, DEBUG_INFO_BTF=n"
	need CONFIG_NVME_FABRICS "the NVMe fabrics core the transport plugs into"
	need CONFIG_INFINIBAND "RDMA verbs"
	need CONFIG_INFINIBAND_ADDR_TRANS "RDMA CM"
	need CONFIG_BLK_DEV "blk-mq"
fi
[ -f "$kdir/rust/libkernel.rmeta" ] ||
	problems+=("$kdir/rust/libkernel.rmeta missing: build the tree with CONFIG_RUST=y first (make LLVM=... RUSTC=... )")
[ -f "$kdir/drivers/nvme/host/nvme.h" ] ||
	problems+=("$kdir/drivers/nvme/host/nvme.h missing: the NVMe host headers are private, KDIR must be a full source tree (not only kernel headers)")
[ -f "$kdir/rust/bindgen_parameters" ] ||
	problems+=("$kdir/rust/bindgen_parameters missing: not a Rust-capable kernel source tree")
if [ -f "$kdir/include/config/kernel.release" ]; then
	case "$(cat "$kdir/include/config/kernel.release")" in
	6.12*) ;;
	*) problems+=("kernel release $(cat "$kdir/include/config/kernel.release") is not 6.12, the only series nvme_rsrdma supports") ;;
	esac
fi
command -v bindgen >/dev/null || problems+=("bindgen not found: cargo install bindgen-cli --version $BINDGEN_VERSION --locked")
"$RUSTC" --print sysroot >/dev/null 2>&1 || problems+=("rustc '$RUSTC' not usable: set RUSTC= to the rustc the tree was built with")

if ((${#problems[@]})); then
	for p in "${problems[@]}"; do log "KDIR $kdir: $p"; done
	die "KDIR cannot build Rust modules (${#problems[@]} problem(s) above)"
fi
echo "$kdir"
