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

SUITE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# suite_select: print the selected test names (NN-name), in order.
suite_select() {
	local f name
	for f in "$SUITE_DIR"/[0-9][0-9]-*.sh; do
		[ -f "$f" ] || continue
		name=$(basename "$f" .sh)
		if [ -z "${RSRDMA_TESTS:-}" ] || [[ $name =~ $RSRDMA_TESTS ]]; then
			echo "$name"
		fi
	done
}

# suite_timeout NAME: the test's timeout in seconds.
suite_timeout() {
	local t
	t=$(head -n 10 "$SUITE_DIR/$1.sh" | sed -n 's/^# rsrdma-timeout: *\([0-9][0-9]*\).*/\1/p' | head -n1)
	echo "${t:-${RSRDMA_TEST_TIMEOUT:-600}}"
}
