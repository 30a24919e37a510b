# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash
#
# What the suite adds to the kselftest runner, per test. Sourced by tests/lib/common.sh (in
# the guest) and by tests/run.sh (on the host, to select the tests, size the guest's timeout
# and account for tests a dead guest never finished); not run.
#
# The tests are the kselftest target of tests/Makefile: the kernel's runner
# (tools/testing/selftests/kselftest/runner.sh, through run_kselftest.sh) runs each under the
# one timeout of tests/settings and reports it as one KTAP result. Each test script sources
# common.sh, which (suite_supervise below) runs the script again as a child, so that the
# runner's one process for the test also gives it:
#
#   its own timeout       a "# rsrdma-timeout: SECONDS" line in its first 10 lines (default
#                         RSRDMA_TEST_TIMEOUT, 600), times RSRDMA_TIMEOUT_SCALE (an integer;
#                         default 3 on the debug kernel: KERNEL=debug on the host, a kernel
#                         with KASAN in the guest, 1 otherwise); when scaled, a
#                         "# rsrdma-debug-timeout: SECONDS" line instead, if there is one. The
#                         runner's timeout (settings) is only the bound on the longest test and
#                         its checks; tests/run.sh raises it (run_kselftest.sh -o) for scaled
#                         timeouts.
#   its host mode         NN-name-dropin.sh, a symbolic link to NN-name.sh, is that test in
#                         drop-in mode (RSRDMA_MODE=dropin: nvme_rsrdma loaded with dropin=1
#                         as "rdma"); every other name runs in RSRDMA_MODE, default rsrdma.
#   its RDMA provider     NN-name-siw.sh, a symbolic link to NN-name.sh, is that test over
#                         soft-iWARP (siw); every other name runs over RSRDMA_PROVIDER,
#                         default rxe (soft-RoCE). See tests/lib/fabric.sh.
#   checks after it       after the test and its own clean-up: what it left behind (modules,
#                         controllers, RDMA links, target configuration: leftovers), one more
#                         failed case and a reset of the guest; a problem report in the kernel
#                         log during the test (kernel_check), one more failed case. On a
#                         kernel with lockdep: lockdep off when the test starts, or turned
#                         off during it by anything but the upstream report kernel_check
#                         knows, one more failed case (lockdep stops at its first report for
#                         the rest of the boot; tests/run.sh boots such a kernel once per
#                         test, so that every test starts with it on).
#   its logs              $RSRDMA_OUT/tests/NAME.log (its output), NAME.dmesg (the kernel log
#                         during the test and its checks), NAME.kcheck (the kernel check's
#                         diagnostics, when it had any).
#   its counts            "# NAME: pass:P fail:F skip:S in SECONDS s" after its output: its
#                         KTAP test cases, the cases it planned but did not report and a
#                         non-zero exit without a failed case counted as failed, and the
#                         checks. Its status: 0 passed, 4 skipped (every case), 1 failed.
#
# Selection, on the host:
#
#   RSRDMA_TESTS          extended regular expression matched (unanchored) against each test's
#                         name, its file name without ".sh": "01", "baseline", "^0[12]-",
#                         "module|baseline", "dropin". Empty or unset: all tests.
#   RSRDMA_MODES          the host modes to run (default "rsrdma dropin"): a test runs when its
#                         mode is one of them.
#   RSRDMA_FULL           1 (make test-full): also the variants in SUITE_FULL_ONLY, which the
#                         whole suite (RSRDMA_TESTS empty, as in CI) leaves out otherwise. A
#                         non-empty RSRDMA_TESTS selects among every test, these included.

SUITE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# The drop-in runs that only make test-full runs. Drop-in mode changes the name the transport
# registers under and who keeps nvme_rdma out; 03-connect-dropin connects, moves data, reads
# the discovery log and unloads under that name. These run the rest of their tests' transport
# code again, unchanged: some 860 s of a suite that must fit CI's 90 minutes with the kernel
# build.
SUITE_FULL_ONLY="04-io-dropin 05-link-loss-dropin 08-options-dropin 09-multipath-dropin 10-auth-dropin"

# suite_mode NAME: the host mode of a test (file name, with or without ".sh").
suite_mode() {
	case "${1%.sh}" in
	*-dropin) echo dropin ;;
	*) echo "${RSRDMA_MODE:-rsrdma}" ;;
	esac
}

# suite_provider NAME: the RDMA provider of a test (file name, with or without ".sh").
suite_provider() {
	case "${1%.sh}" in
	*-siw) echo siw ;;
	*) echo "${RSRDMA_PROVIDER:-rxe}" ;;
	esac
}

# suite_tests: every test's file name, in order: each test, then its variants in other modes
# and over other providers.
suite_tests() {
	local f v
	for f in "$SUITE_DIR"/[0-9][0-9]-*.sh; do
		if [ ! -f "$f" ] || [ -L "$f" ]; then continue; fi
		echo "${f##*/}"
		for v in "${f%.sh}"-*.sh; do
			[ -L "$v" ] && [ "$(readlink "$v")" = "${f##*/}" ] && echo "${v##*/}"
		done
	done
}

# suite_select: the file names of the tests selected by RSRDMA_TESTS, RSRDMA_FULL and
# RSRDMA_MODES.
suite_select() {
	local t
	while read -r t; do
		[[ " ${RSRDMA_MODES:-rsrdma dropin} " == *" $(RSRDMA_MODE='' suite_mode "$t") "* ]] || continue
		if [ -z "${RSRDMA_TESTS:-}" ]; then
			[ "${RSRDMA_FULL:-0}" = 1 ] || [[ " $SUITE_FULL_ONLY " != *" ${t%.sh} "* ]] || continue
		else
			[[ ${t%.sh} =~ $RSRDMA_TESTS ]] || continue
		fi
		echo "$t"
	done < <(suite_tests)
}

# suite_timeout FILE: the test's own timeout in seconds, scaled; on the debug kernel a
# "# rsrdma-debug-timeout: SECONDS" line in its first 10 lines, if it has one, instead (for a
# test that slows down there more than the scale allows for).
suite_timeout() {
	local t scale
	scale=$(suite_timeout_scale)
	if ((scale > 1)); then
		t=$(head -n 10 "$1" | sed -n 's/^# rsrdma-debug-timeout: *\([0-9][0-9]*\).*/\1/p' | head -n1)
		[ -z "$t" ] || { echo "$t"; return; }
	fi
	t=$(head -n 10 "$1" | sed -n 's/^# rsrdma-timeout: *\([0-9][0-9]*\).*/\1/p' | head -n1)
	echo $((${t:-${RSRDMA_TEST_TIMEOUT:-600}} * scale))
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

# suite_supervise ARGS...: run the test script ($0) as a child with ARGS under its own timeout,
# then check and count it (see above); exits with the test's kselftest status. Called by
# common.sh when a test script sources it, in the script's own process; the child, marked by
# RSRDMA_SUPERVISED, runs the test itself.
suite_supervise() {
	local name t log rc start secs p f s plan reported notes=() left kcheck kcheck_rc n locks
	name=$(basename "$0" .sh)
	t=$(suite_timeout "$0")
	mkdir -p "$RSRDMA_OUT/tests"
	log=$RSRDMA_OUT/tests/$name.log
	locks=$(lockdep_state)
	dmesg_mark
	start=$SECONDS
	RSRDMA_SUPERVISED=1 timeout -k 60 "$t" "$BASH" "$0" "$@" </dev/null 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	secs=$((SECONDS - start))

	read -r p f s plan < <(awk -f "$SUITE_DIR/lib/ktap-count.awk" "$log")
	reported=$((p + f + s))
	if ((rc == 124 || rc == 137)); then
		notes+=("$name timed out after $t s")
	elif ((rc != 0 && rc != 4)); then
		notes+=("$name exited with status $rc")
	fi
	if ((plan > reported)); then
		notes+=("$name: $((plan - reported)) of $plan planned cases did not report")
		f=$((f + plan - reported))
	fi
	if ((rc != 0 && rc != 4 && f == 0)); then
		f=1
	elif ((reported == 0 && f == 0)); then
		if ((rc == 4)); then s=1; else p=1; fi
	fi
	left=$(leftovers)
	if [ -n "$left" ]; then
		notes+=("$name left behind: $(paste -s -d ' ' <<<"$left")")
		f=$((f + 1))
	fi
	if [ -n "$left" ] || ((f)); then
		# Reset the guest for the next test; what this cannot clean is reported.
		reset_guest >/dev/null 2>&1
		left=$(leftovers)
		[ -z "$left" ] || notes+=("$name: still left after the reset: $(paste -s -d ' ' <<<"$left")")
	fi
	# Kernel problem reports since the test started, its clean-up included: one more failed case.
	kcheck=$(kernel_check 2>&1)
	kcheck_rc=$?
	dmesg_since_mark >"$RSRDMA_OUT/tests/$name.dmesg"
	[ -z "$kcheck" ] || printf '%s\n' "$kcheck" >"$RSRDMA_OUT/tests/$name.kcheck"
	if ((kcheck_rc)); then
		notes+=("$name: the kernel reported a problem (tests/$name.kcheck, tests/$name.dmesg):")
		f=$((f + 1))
	fi
	if [ -z "$locks" ] && zgrep -q '^CONFIG_PROVE_LOCKING=y' /proc/config.gz 2>/dev/null; then
		notes+=("$name: lockdep: debug_locks not readable in /proc/lockdep_stats")
		f=$((f + 1))
	fi
	case "$locks$(lockdep_state)" in
	11) notes+=("$name: lockdep on from its start to its end") ;;
	0*)
		notes+=("$name: lockdep was off when it started: it ran unchecked")
		f=$((f + 1))
		;;
	10)
		if grep -q "$LOCKDEP_UPSTREAM_NOTE" <<<"$kcheck"; then
			notes+=("$name: lockdep went off at the upstream report (not counted); the rest of $name ran without it")
		else
			notes+=("$name: lockdep turned itself off during the test (tests/$name.dmesg)")
			f=$((f + 1))
		fi
		;;
	esac

	for n in "${notes[@]}"; do ktap_print_msg "$n"; done
	[ -z "$kcheck" ] || printf '%s\n' "$kcheck"
	ktap_print_msg "$name: pass:$p fail:$f skip:$s in $secs s"
	if ((f)); then
		exit "$KSFT_FAIL"
	elif ((rc == 4 || (p == 0 && s > 0))); then
		exit "$KSFT_SKIP"
	fi
	exit "$KSFT_PASS"
}
