# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash
#
# Test selection and per-test timeouts, shared by tests/guest-suite.sh (in the guest) and
# tests/run.sh (on the host, to size the guest's timeout and to account for tests a dead guest
# never finished). Sourced, not run.
#
#   RSRDMA_TESTS          extended regular expression matched (unanchored) against each test's
#                         name, i.e. its file name without ".sh": "01", "baseline",
#                         "^0[12]-", "module|baseline". Empty or unset: all tests.
#   RSRDMA_TEST_TIMEOUT   default per-test timeout in seconds (600); a test overrides it with a
#                         "# rsrdma-timeout: SECONDS" line in its first 10 lines.
#   RSRDMA_TIMEOUT_SCALE  multiplies every test's timeout (an integer); default 3 on the debug
#                         kernel (KERNEL=debug on the host; in the guest, a kernel with KASAN),
#                         1 otherwise.
#   RSRDMA_MODES          host modes to run the mode-dependent tests in (default "rsrdma
#                         dropin"). A test that works through the host transport declares it
#                         with a "# rsrdma-modes: rsrdma dropin" line in its first 10 lines and
#                         runs once per mode, named NN-name in the first mode and
#                         NN-name@MODE in the others; the test sees RSRDMA_MODE=MODE.

SUITE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# suite_select: print the selected test names (NN-name, NN-name@MODE), in order.
suite_select() {
	local f name base modes mode first
	for f in "$SUITE_DIR"/[0-9][0-9]-*.sh; do
		[ -f "$f" ] || continue
		base=$(basename "$f" .sh)
		modes=$(head -n 10 "$f" | sed -n 's/^# rsrdma-modes: *//p' | head -n1)
		[ -n "$modes" ] || modes=rsrdma
		first=1
		for mode in $modes; do
			[[ " ${RSRDMA_MODES:-rsrdma dropin} " == *" $mode "* ]] || continue
			name=$base
			((first)) || name=$base@$mode
			first=0
			if [ -z "${RSRDMA_TESTS:-}" ] || [[ $name =~ $RSRDMA_TESTS ]]; then
				echo "$name"
			fi
		done
	done
}

# suite_file NAME / suite_mode NAME: the script and the host mode of a selected test.
suite_file() { echo "$SUITE_DIR/${1%@*}.sh"; }
suite_mode() { [[ $1 == *@* ]] && echo "${1#*@}" || echo rsrdma; }

# suite_timeout NAME: the test's timeout in seconds.
suite_timeout() {
	local t
	t=$(head -n 10 "$(suite_file "$1")" | sed -n 's/^# rsrdma-timeout: *\([0-9][0-9]*\).*/\1/p' | head -n1)
	echo $((${t:-${RSRDMA_TEST_TIMEOUT:-600}} * $(suite_timeout_scale)))
}

# suite_timeout_scale: the factor for every test's timeout (see RSRDMA_TIMEOUT_SCALE).
suite_timeout_scale() {
	if [ -n "${RSRDMA_TIMEOUT_SCALE:-}" ]; then
		echo "$RSRDMA_TIMEOUT_SCALE"
	elif [ "${KERNEL:-}" = debug ] || { grep -q virtme /proc/cmdline 2>/dev/null &&
		zgrep -q '^CONFIG_KASAN=y' /proc/config.gz 2>/dev/null; }; then
		echo 3
	else
		echo 1
	fi
}
