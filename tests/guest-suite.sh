#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The guest side of `make test`: run the selected tests/NN-*.sh in order, each under its own
# timeout, and print one nested KTAP document the way kselftest's runner does:
#
#   KTAP version 1
#   1..N
#       KTAP version 1          <- each test's own document, indented by 4 spaces
#       # Subtest: 01-module
#       1..14
#       ok 1 ...
#   ok 1 01-module
#   # Totals: pass:P fail:F skip:S  (test cases, see below)
#
# Selection and timeouts: see tests/lib/suite.sh (RSRDMA_TESTS, RSRDMA_TEST_TIMEOUT).
#
# A test's lines that are not KTAP are shown as "# " diagnostics. A test passes if it exits 0
# (4: skipped) and reported no failed case. Test cases are counted from each test's own
# results; a test that timed out, died before its plan was met or failed without a failed case
# counts its missing cases (at least one) as failed. A test that leaves state behind (modules,
# controllers, RDMA links, target configuration: see leftovers in lib/common.sh) gets one more
# failed case, and the guest is reset before the next test. A test after which the kernel log
# holds a problem report (KASAN, lockdep, RCU stall, hung task, WARN/BUG/Oops, a kmemleak entry
# naming nvme_rsrdma: kernel_check in lib/common.sh, run after the reset) gets one more failed
# case, with the report as diagnostics.
#
# Files in $RSRDMA_OUT: results.ktap (this output), tests/NAME.log (each test's raw output),
# tests/NAME.dmesg (the kernel log during the test and its clean-up), tests/NAME.kcheck (the
# kernel check's diagnostics, when it had any), and summary, rewritten after every test:
#
#   passed=P failed=F skipped=S     test case counts, one per line (key=value)
#   tests=N done=D complete=0|1     selected tests, finished tests, whether the suite ended
#   test NAME STATUS PASSED FAILED SKIPPED SECONDS EXIT      one line per finished test
#                                   (STATUS ok, skip or fail)
#
# Exit status: 0 all passed, 1 any failed, 4 everything skipped (kselftest codes).
set -u

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/suite.sh"
. "$here/lib/common.sh"

out=$RSRDMA_OUT
mkdir -p "$out/tests"
cd "$RSRDMA_REPO" || exit 1

exec 3>&1
exec > >(tee "$out/results.ktap" >&3)
tee_pid=$!

mapfile -t tests < <(suite_select)
total=${#tests[@]}
P=0 F=0 S=0 done=0
results=()

write_summary() {
	{
		echo "# nvme-rsrdma guest suite: KTAP test case counts; format in tests/guest-suite.sh"
		echo "passed=$P"
		echo "failed=$F"
		echo "skipped=$S"
		echo "tests=$total"
		echo "done=$done"
		echo "complete=$1"
		printf '%s\n' "${results[@]}"
	} >"$out/summary.tmp" && mv -f "$out/summary.tmp" "$out/summary"
}

# Indent a test's output as a subtest; non-KTAP lines become diagnostics.
indent() {
	awk -v name="$1" '
		{ sub(/\r$/, "") }
		!hdr && /^KTAP version/ { print "    " $0; print "    # Subtest: " name; hdr = 1; fflush(); next }
		/^(KTAP version|TAP version|1\.\.[0-9]|ok |not ok |#|Bail out!|[ \t])/ { print "    " $0; fflush(); next }
		/^$/ { next }
		{ print "    # " $0; fflush() }'
}

echo "KTAP version 1"
echo "# nvme-rsrdma guest suite: $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ { print int($2 / 1024) " MiB" }' /proc/meminfo)"
[ -z "${RSRDMA_TESTS:-}" ] || echo "# RSRDMA_TESTS=$RSRDMA_TESTS"
echo "1..$total"
# The debug kernel's checks; what boot leaked is not the tests' (kmemleak baseline).
checks=$(zgrep -oE '^CONFIG_(KASAN|PROVE_LOCKING|DEBUG_ATOMIC_SLEEP|DEBUG_KMEMLEAK|DEBUG_OBJECTS|RUST_DEBUG_ASSERTIONS|RUST_OVERFLOW_CHECKS)=y' \
	/proc/config.gz 2>/dev/null | sed 's/^CONFIG_//; s/=y$//' | paste -s -d ' ')
[ -z "$checks" ] || echo "# kernel checks: $checks"
if kmemleak_available; then
	if baseline=$(kmemleak_check); then
		echo "# kmemleak: $(grep -c 'unreferenced object' <<<"$baseline") suspected leaks from boot cleared"
	else
		printf '%s\n' "$baseline"
	fi
fi
# The kernel log check must not be one that cannot fail: it has to catch a report injected
# here (before every test's mark, so no test sees it).
dmesg_mark
echo "<3>BUG: KASAN: self-test of the nvme-rsrdma suite's kernel log check (not a real report)" >/dev/kmsg
if dmesg_check_clean >/dev/null 2>&1; then
	echo "# the kernel log check missed an injected report: it is broken"
	F=$((F + 1))
else
	echo "# kernel log check: catches an injected report"
fi
write_summary 0

i=0
for name in "${tests[@]}"; do
	i=$((i + 1))
	t=$(suite_timeout "$name")
	log=$out/tests/$name.log
	: >"$log"
	dmesg_mark
	start=$SECONDS
	RSRDMA_MODE=$(suite_mode "$name") timeout -k 60 "$t" bash "$(suite_file "$name")" </dev/null >"$log" 2>&1 &
	pid=$!
	tail -n +1 -s 0.5 -f --pid="$pid" "$log" 2>/dev/null | indent "$name"
	wait "$pid"
	rc=$?
	secs=$((SECONDS - start))
	dmesg_since_mark >"$out/tests/$name.dmesg"

	read -r p f s plan < <(awk -f "$here/lib/ktap-count.awk" "$log")
	reported=$((p + f + s))
	notes=()
	if ((rc == 124 || rc == 137)); then
		notes+=("$name timed out after $t s")
	elif ((rc != 0 && rc != 4)); then
		notes+=("$name exited with status $rc")
	fi
	if ((plan > reported)); then
		notes+=("$((plan - reported)) of $plan planned cases did not report")
		f=$((f + plan - reported))
	fi
	if ((rc != 0 && rc != 4 && f == 0)); then
		f=1
	elif ((reported == 0 && f == 0)); then
		if ((rc == 4)); then s=1; else p=1; fi
	fi
	left=$(leftovers)
	if [ -n "$left" ]; then
		notes+=("$name left behind: $(echo $left)")
		f=$((f + 1))
	fi
	if [ -n "$left" ] || ((f)); then
		# Reset the guest for the next test; what this cannot clean is reported.
		reset_guest >/dev/null 2>&1
		left=$(leftovers)
		[ -z "$left" ] || notes+=("still left after the reset: $(echo $left)")
	fi
	# Kernel problem reports since the test started, its clean-up included: one more failed case.
	kcheck=$(kernel_check 2>&1)
	kcheck_rc=$?
	dmesg_since_mark >"$out/tests/$name.dmesg"
	[ -z "$kcheck" ] || printf '%s\n' "$kcheck" >"$out/tests/$name.kcheck"
	if ((kcheck_rc)); then
		notes+=("$name: the kernel reported a problem (tests/$name.kcheck, tests/$name.dmesg):")
		f=$((f + 1))
	fi

	# Diagnostics about a test go before its result line, where KTAP parsers attribute them.
	for n in "${notes[@]}"; do echo "# $n"; done
	[ -z "$kcheck" ] || printf '%s\n' "$kcheck"
	echo "# $name: pass:$p fail:$f skip:$s in ${secs} s"
	if ((f)); then
		status=fail
		echo "not ok $i $name"
	elif ((rc == 4 || (p == 0 && s > 0))); then
		status=skip
		echo "ok $i $name # SKIP"
	else
		status=ok
		echo "ok $i $name"
	fi
	P=$((P + p)) F=$((F + f)) S=$((S + s)) done=$((done + 1))
	results+=("test $name $status $p $f $s $secs $rc")
	write_summary 0
done

echo "# Totals: pass:$P fail:$F skip:$S"
write_summary 1

exec >&3
wait "$tee_pid" 2>/dev/null
if ((F)); then
	exit 1
elif ((P == 0 && S > 0)); then
	exit 4
fi
exit 0
