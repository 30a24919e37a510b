#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Install everything the build, the guest and the tests need. Idempotent and fast when all is
# already present: it only calls apt/pip/cargo for what is missing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

debs=(
	# kernel source and build
	linux-source-6.12 flex bison bc libelf-dev libssl-dev cpio xz-utils kmod
	# Rust for the kernel (/usr/bin/rustc with core sources) and bindgen's libclang
	rustc-web rust-web-src rust-web-clippy libclang-dev clang lld llvm
	# guest
	qemu-system-x86 busybox-static
	# tools used inside the guest (the guest shares the host root filesystem)
	nvme-cli fio rdma-core ibverbs-utils rdmacm-utils perftest iproute2 e2fsprogs librdmacm-dev libibverbs-dev
	# the filesystem test (14-filesystems): XFS tools, metadata stressors
	xfsprogs stress-ng
	# profiles of make bench (BENCH_PROFILE=1)
	linux-perf
	# documentation checks
	python3-docutils
	# shell checks (scripts/lint.sh)
	shellcheck
	# the kselftest install of the guest suite (the kernel's lib.mk copies with rsync)
	rsync
)

missing=()
for p in "${debs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
		missing+=("$p")
done
if ((${#missing[@]})); then
	log "installing Debian packages: ${missing[*]}"
	sudo_ apt-get update -q || true
	sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		"${missing[@]}"
fi

if ! command -v vng >/dev/null 2>&1; then
	log "installing virtme-ng from PyPI"
	python3 -m pip install -q "virtme-ng==$VIRTME_NG_VERSION"
fi

if ! bindgen --version 2>/dev/null | grep -q "$BINDGEN_VERSION"; then
	log "installing bindgen-cli $BINDGEN_VERSION from crates.io"
	cargo install -q bindgen-cli --version "$BINDGEN_VERSION" --locked
fi

# fsx, the file system exerciser (a Rust port of the BSD and Linux fsx), for 14-filesystems.
# Installed under /usr/local: the guest runs with the system's PATH only.
if ! /usr/local/bin/fsx --version 2>/dev/null | grep -q "$FSX_VERSION"; then
	log "installing fsx $FSX_VERSION from crates.io into /usr/local"
	sudo_ "$(command -v cargo)" install -q fsx --version "$FSX_VERSION" --locked --root /usr/local
fi

log "dependencies present"
