# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash
#
# The guest tests' helpers: KTAP output.
# Sourced by tests/lib/common.sh, not run.

# One KTAP document per test script: header, plan, one result line per test case, diagnostics
# as "# " lines. ktap_finish exits with the kselftest code: 0 all passed (skips allowed), 1 any
# failed or the plan was not met, 4 everything skipped.

_ktap_n=0 _ktap_plan= _ktap_pass=0 _ktap_fail=0 _ktap_skip=0

ktap_header() { echo "KTAP version 1"; }

ktap_plan() {
	_ktap_plan=$1
	echo "1..$1"
}

# Every line of the arguments (or of stdin without arguments) as a diagnostic line.
ktap_diag() {
	if (($#)); then
		printf '%s\n' "$*" | sed 's/^/# /'
	else
		sed 's/^/# /'
	fi
}

_ktap_name() { printf '%s' "$*" | tr '\n#' ' _'; }

ktap_ok() {
	_ktap_n=$((_ktap_n + 1)) _ktap_pass=$((_ktap_pass + 1))
	echo "ok $_ktap_n $(_ktap_name "$1")"
}

ktap_fail() {
	_ktap_n=$((_ktap_n + 1)) _ktap_fail=$((_ktap_fail + 1))
	[ -z "${2:-}" ] || ktap_diag "$1: $2"
	echo "not ok $_ktap_n $(_ktap_name "$1")"
}

ktap_skip() {
	_ktap_n=$((_ktap_n + 1)) _ktap_skip=$((_ktap_skip + 1))
	echo "ok $_ktap_n $(_ktap_name "$1") # SKIP $(_ktap_name "${2:-}")"
}

# ktap_check NAME CMD...: one test case from a command's status; its output becomes diagnostics.
ktap_check() {
	local name=$1
	shift
	if run_diag "$@"; then
		ktap_ok "$name"
	else
		ktap_fail "$name"
		return 1
	fi
}

# Number of test cases reported so far, and of failures (for tests that adapt their plan).
ktap_count() { echo "$_ktap_n"; }
ktap_failures() { echo "$_ktap_fail"; }

ktap_finish() {
	if [ -n "$_ktap_plan" ] && [ "$_ktap_n" != "$_ktap_plan" ]; then
		ktap_diag "planned $_ktap_plan test cases, ran $_ktap_n"
		_ktap_fail=$((_ktap_fail + 1))
	fi
	ktap_diag "totals: pass:$_ktap_pass fail:$_ktap_fail skip:$_ktap_skip"
	if ((_ktap_fail)); then
		exit 1
	elif ((_ktap_pass == 0 && _ktap_skip > 0)); then
		exit 4
	fi
	exit 0
}
