#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make run`: boot the guest and run scripts/demo.sh in it (soft-RoCE + nvmet-rdma target,
# load nvme_rsrdma, connect, real I/O, disconnect, unload, the module's kernel log).
# Logs in out/run-<time>/. KERNEL=debug and KDIR= are honoured (through scripts/vm.sh).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

[ -f "$repo/nvme_rsrdma.ko" ] || die "nvme_rsrdma.ko is not built: run make (or make run)"
out=$repo/out/run-$(date +%Y%m%d-%H%M%S)
start=$(date +%s)
rc=0
"$here/vm.sh" -t 600 -o "$out" -- scripts/demo.sh || rc=$?
log "make run: $( ((rc)) && echo "FAILED (status $rc)" || echo "done") in $(($(date +%s) - start)) s; logs in ${out#"$repo"/}"
exit $rc
