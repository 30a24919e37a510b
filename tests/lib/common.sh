# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash
#
# Shared helpers for the guest tests (tests/NN-*.sh) and the demo. Sourced, not run; bash only.
# They run as root inside the guest (scripts/vm.sh), where the host root file system is visible
# read-only: write only under /tmp, $RSRDMA_OUT, /sys and /dev. This file holds the settings
# every part shares and sources the parts, a file each:
#
#   ktap.sh        KTAP output: the kernel's ktap_helpers.sh (ktap_print_header, ktap_set_plan N,
#                  ktap_test_pass/fail/skip NAME, ktap_exit_fail_msg MSG, ktap_finished...) and
#                  ktap_check NAME CMD..., ktap_diag MSG..., run_diag CMD...
#   misc.sh        wait_for TIMEOUT_S CMD..., module_unload NAME
#   fabric.sh      fabric_setup, fabric_teardown (the provider's RDMA link, $RDMA_LINK on
#                  $RDMA_NETDEV)
#   target.sh      target_setup, target_teardown (nvmet over configfs, port 1, three subsystems),
#                  target_ipv6_setup, target_ipv6_teardown (ports 2 and 3 on IPv6 addresses)
#   host.sh        host_load, host_unload, rsrdma_load [PARAMS...], rsrdma_unload,
#                  host_disconnect_all, teardown_all, rdma_counts, our_rkeys, data_bytes STATS,
#                  ctrl_for NQN,
#                  nvme_dev_for_nqn NQN, fabrics_probe OPTIONS (write a connect string, report
#                  errno and "no handler")
#   kernel-log.sh  dmesg_mark, dmesg_since_mark, dmesg_check_clean, kmemleak_check, kernel_check
#   state.sh       leftovers (what a test left behind), reset_guest (clean all of it),
#                  bail_out MSG (a set-up that failed: Bail out!)
#   fault.sh       fi_available, fi_on ATTR PROBABILITY [MIN_ORDER], fi_off, fi_injected ATTR
#                  (fault injection aimed at nvme_rsrdma's allocations)
#   io.sh          fio_verify DEV [FIO ARGS...], fio_start DEV [FIO ARGS...], fio_stop
#   link-loss.sh   fabrics_connect, ctrl_state, target_port_disable/enable, probe_start/stop
#   hostile.sh     hostile_start, hostile_stop, hostile_arm, hostile_wait... (rsrdma-target)
#   suite.sh       what the suite adds to the kselftest runner per test: its own timeout,
#                  its host mode, the checks after it, its logs and counts; selection
#
# Helpers return non-zero on failure and say why on diagnostic ("# ...") lines; they never exit.

# These helpers load and unload kernel modules and rewrite configfs: refuse to run outside the
# virtme-ng guest unless told to (RSRDMA_ALLOW_HOST=1, on a machine you can break).
if ! grep -q virtme /proc/cmdline 2>/dev/null && [ -z "${RSRDMA_ALLOW_HOST:-}" ]; then
	echo "Bail out! not inside the nvme-rsrdma guest: run through scripts/vm.sh or make test" >&2
	exit 1
fi

RSRDMA_REPO=${RSRDMA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
RSRDMA_OUT=${RSRDMA_OUT:-/tmp/rsrdma-out}
RSRDMA_KO=${RSRDMA_KO:-$RSRDMA_REPO/nvme_rsrdma.ko}
export RSRDMA_REPO RSRDMA_OUT RSRDMA_KO

RSRDMA_LIB=$(dirname "${BASH_SOURCE[0]}")
# shellcheck source=suite.sh
. "$RSRDMA_LIB/suite.sh"
# The host mode of the test (its name, RSRDMA_MODE, or rsrdma): see suite.sh.
RSRDMA_MODE=$(suite_mode "$0")
export RSRDMA_MODE
# The RDMA provider under the test (its name, RSRDMA_PROVIDER, or rxe): see suite.sh.
RDMA_PROVIDER=$(suite_provider "$0")

# scaled SECONDS: a wait for the kernel under test, times the suite's timeout scale (3 on the
# debug kernel, where everything takes several times as long; see tests/lib/suite.sh).
scaled() { echo $(($1 * $(suite_timeout_scale))); }

export TARGET_ADDR=10.0.2.15 TARGET_PORT=4420
# The IPv6 addresses of target_ipv6_setup: unique-local and link-local.
export TARGET_ADDR6=fd00::15 TARGET_LL6=fe80::15
export NQN_NULL=nqn.2026-11.io.rsrdma:null
export NQN_FILE=nqn.2026-11.io.rsrdma:file
export NQN_NULL2=nqn.2026-11.io.rsrdma:null2
# Sizes of the backing devices, in bytes, for tests that check them.
export NULL_SIZE=$((256 << 20)) FILE_SIZE=$((128 << 20))

NVMET_CFS=/sys/kernel/config/nvmet
NULLB_CFS=/sys/kernel/config/nullb
TARGET_TMPFS=/tmp/rsrdma-target

# shellcheck source=ktap.sh
. "$RSRDMA_LIB/ktap.sh"
# shellcheck source=misc.sh
. "$RSRDMA_LIB/misc.sh"
# shellcheck source=fabric.sh
. "$RSRDMA_LIB/fabric.sh"
# shellcheck source=target.sh
. "$RSRDMA_LIB/target.sh"
# shellcheck source=host.sh
. "$RSRDMA_LIB/host.sh"
# shellcheck source=kernel-log.sh
. "$RSRDMA_LIB/kernel-log.sh"
# shellcheck source=state.sh
. "$RSRDMA_LIB/state.sh"
# shellcheck source=fault.sh
. "$RSRDMA_LIB/fault.sh"
# shellcheck source=io.sh
. "$RSRDMA_LIB/io.sh"
# shellcheck source=link-loss.sh
. "$RSRDMA_LIB/link-loss.sh"
# shellcheck source=hostile.sh
. "$RSRDMA_LIB/hostile.sh"

# A test script (tests/NN-*.sh) runs under the suite's supervision: see suite.sh.
if [[ ${0##*/} =~ ^[0-9][0-9]-.*\.sh$ ]] && [ -z "${RSRDMA_SUPERVISED:-}" ]; then
	suite_supervise "$@"
fi
