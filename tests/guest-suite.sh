#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The guest side of `make test`: the kernel's kselftest runner on the suite that tests/run.sh
# installed (tests/Makefile, kselftest_install), with run_kselftest.sh's options:
#
#   tests/guest-suite.sh KSFT_INSTALL_PATH [-t rsrdma:TEST.sh]... [-o SECONDS]
#
# First, as "# " lines: the kernel and its checks, kmemleak's reports from boot cleared (they
# are not the tests'), and a check that the kernel log check catches a report injected here:
# if it does not, "Bail out!" (every test's kernel check would pass whatever the kernel
# logged). Then the runner's KTAP, also kept in $RSRDMA_OUT/results.ktap. What the suite adds
# per test (its own timeout, host mode, checks, logs and counts) is in tests/lib/suite.sh.
set -u

ksft=$(cd "${1:?usage: guest-suite.sh KSFT_INSTALL_PATH [run_kselftest.sh options]}" && pwd) || exit 1
shift
# The tests' KTAP helper: the kernel's ktap_helpers.sh, installed with the runner.
export KSFT_DIR=$ksft
# shellcheck source=lib/common.sh
. "$ksft/rsrdma/lib/common.sh"

ktap_print_msg "nvme-rsrdma guest suite: $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ { print int($2 / 1024) " MiB" }' /proc/meminfo)"
[ -z "${RSRDMA_TESTS:-}" ] || ktap_print_msg "RSRDMA_TESTS=$RSRDMA_TESTS"
# The debug kernel's checks; what boot leaked is not the tests' (kmemleak baseline).
checks=$(zgrep -oE '^CONFIG_(KASAN|UBSAN|KFENCE|PROVE_LOCKING|DEBUG_ATOMIC_SLEEP|DEBUG_KMEMLEAK|DEBUG_OBJECTS|DEBUG_LIST|RUST_DEBUG_ASSERTIONS|RUST_OVERFLOW_CHECKS)=y' \
	/proc/config.gz 2>/dev/null | sed 's/^CONFIG_//; s/=y$//' | paste -s -d ' ')
[ -z "$checks" ] || ktap_print_msg "kernel checks: $checks"
if kmemleak_available; then
	if baseline=$(kmemleak_check); then
		ktap_print_msg "kmemleak: $(grep -c 'unreferenced object' <<<"$baseline") suspected leaks from boot cleared"
	else
		printf '%s\n' "$baseline"
	fi
fi
# The kernel log check must not be one that cannot fail: it has to catch a report injected
# here (before every test's mark, so no test sees it).
dmesg_mark
echo "<3>BUG: KASAN: self-test of the nvme-rsrdma suite's kernel log check (not a real report)" >/dev/kmsg
if dmesg_check_clean >/dev/null 2>&1; then
	ktap_exit_fail_msg "the kernel log check missed an injected report: it is broken"
fi
ktap_print_msg "kernel log check: catches an injected report"

"$ksft/run_kselftest.sh" "$@" | tee "$RSRDMA_OUT/results.ktap"
