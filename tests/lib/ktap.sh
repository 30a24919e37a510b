# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash
#
# KTAP output for every script of the project that reports test cases (the guest tests,
# scripts/lint.sh, tests/run.sh): the kernel's own kselftest helpers,
# tools/testing/selftests/kselftest/ktap_helpers.sh, sourced from the kernel tree that
# KSFT_DIR names (its tools/testing/selftests; make test passes the guest kernel's tree), or,
# with no tree at hand, the copy of 6.12's below: the same functions, variables and output.
#
#   ktap_print_header           "TAP version 13"
#   ktap_set_plan N             "1..N"
#   ktap_test_pass NAME         "ok N NAME"
#   ktap_test_fail NAME         "not ok N NAME"
#   ktap_test_skip NAME         "ok N NAME # SKIP"
#   ktap_test_result NAME CMD   pass or fail from CMD's status (CMD is word-split: no spaces)
#   ktap_print_msg MSG          "# MSG", one line
#   ktap_skip_all MSG           "1..0 # SKIP MSG"
#   ktap_exit_fail_msg MSG      "Bail out! MSG", the totals, exit 1 (a set-up that failed)
#   ktap_print_totals           "# Totals: pass:P fail:F xfail:0 xpass:0 skip:S error:0"
#   ktap_finished               the totals, exit 0 if every planned case passed or skipped,
#                               else 1
#   KTAP_CNT_PASS, KTAP_CNT_FAIL, KTAP_CNT_SKIP, KTAP_TESTNO (the next case's number),
#   KSFT_PASS=0 KSFT_FAIL=1 KSFT_XFAIL=2 KSFT_XPASS=3 KSFT_SKIP=4 (kselftest's exit codes)
#
# The project's own, on top of those:
#
#   ktap_diag [MSG...]          every line of MSG (of stdin without arguments) as "# " lines
#   ktap_check NAME CMD...      one case from CMD's status; CMD's output as diagnostics
#   run_diag CMD...             CMD with its output as diagnostics; CMD's status
#
# A reason for a failed or skipped case goes on a diagnostic line before its result line.

if [ -r "${KSFT_DIR:-}/kselftest/ktap_helpers.sh" ]; then
	# shellcheck source=/dev/null
	. "$KSFT_DIR/kselftest/ktap_helpers.sh"
else
	# The copy: 6.12's ktap_helpers.sh, with its arguments quoted.
	KTAP_TESTNO=1
	KTAP_CNT_PASS=0
	KTAP_CNT_FAIL=0
	KTAP_CNT_SKIP=0

	KSFT_PASS=0
	KSFT_FAIL=1
	# shellcheck disable=SC2034 # kselftest's exit codes, for the scripts that source this
	KSFT_XFAIL=2
	# shellcheck disable=SC2034
	KSFT_XPASS=3
	# shellcheck disable=SC2034
	KSFT_SKIP=4

	KSFT_NUM_TESTS=0

	ktap_print_header() {
		echo "TAP version 13"
	}

	ktap_print_msg() {
		echo "#" "$@"
	}

	ktap_set_plan() {
		KSFT_NUM_TESTS="$1"

		echo "1..$KSFT_NUM_TESTS"
	}

	ktap_skip_all() {
		echo -n "1..0 # SKIP "
		echo "$@"
	}

	__ktap_test() {
		local result="$1" description="$2" directive="${3:-}" directive_str=

		[ -n "$directive" ] && directive_str="# $directive"

		# shellcheck disable=SC2086 # as the kernel's: an empty directive is no word
		echo "$result" "$KTAP_TESTNO" "$description" $directive_str

		KTAP_TESTNO=$((KTAP_TESTNO + 1))
	}

	ktap_test_pass() {
		__ktap_test "ok" "$1"

		KTAP_CNT_PASS=$((KTAP_CNT_PASS + 1))
	}

	ktap_test_skip() {
		__ktap_test "ok" "$1" "SKIP"

		KTAP_CNT_SKIP=$((KTAP_CNT_SKIP + 1))
	}

	ktap_test_fail() {
		__ktap_test "not ok" "$1"

		KTAP_CNT_FAIL=$((KTAP_CNT_FAIL + 1))
	}

	ktap_test_result() {
		local description="$1"
		shift

		# shellcheck disable=SC2068 # as the kernel's: the command is word-split
		if $@; then
			ktap_test_pass "$description"
		else
			ktap_test_fail "$description"
		fi
	}

	ktap_exit_fail_msg() {
		echo "Bail out! " "$@"
		ktap_print_totals

		exit "$KSFT_FAIL"
	}

	ktap_finished() {
		ktap_print_totals

		if [ $((KTAP_CNT_PASS + KTAP_CNT_SKIP)) -eq "$KSFT_NUM_TESTS" ]; then
			exit "$KSFT_PASS"
		else
			exit "$KSFT_FAIL"
		fi
	}

	ktap_print_totals() {
		echo "# Totals: pass:$KTAP_CNT_PASS fail:$KTAP_CNT_FAIL xfail:0 xpass:0 skip:$KTAP_CNT_SKIP error:0"
	}
fi

# Every line of the arguments (or of stdin without arguments) as a diagnostic line.
ktap_diag() {
	if (($#)); then
		printf '%s\n' "$*" | sed 's/^/# /'
	else
		sed 's/^/# /'
	fi
}

# run_diag CMD...: run CMD with its stdout and stderr as diagnostic lines; CMD's status.
run_diag() {
	local output rc=0
	output=$("$@" 2>&1) || rc=$?
	[ -z "$output" ] || ktap_diag "$output"
	return $rc
}

# ktap_check NAME CMD...: one test case from a command's status; its output becomes diagnostics.
ktap_check() {
	local name=$1
	shift
	if run_diag "$@"; then
		ktap_test_pass "$name"
	else
		ktap_test_fail "$name"
		return 1
	fi
}
