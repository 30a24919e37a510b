#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make test`: everything, from the host. Phases, each timed:
#   deps      scripts/deps.sh
#   kernel    the cached guest kernel (scripts/kernel.sh $KERNEL), or check KDIR=
#   lint      scripts/lint.sh: rustfmt, clippy, checkpatch, SAFETY comments, shellcheck (KTAP,
#             counted)
#   module    make modules
#   host      host unit tests: cargo test --manifest-path tests/host/Cargo.toml
#   target    cargo build --release of tests/target (rsrdma-target, run in the guest by 06-hostile)
#   install   make install INSTALL_MOD_PATH=<logs>/stage (installed in the guest by 07-install)
#   suite     the guest suite as the kernel installs a kselftest target: make -C tests
#             kselftest_install into <logs>/kselftest (tests/Makefile, on the tree's lib.mk)
#   guest     boot the guest (scripts/vm.sh) and run the kernel's kselftest runner in it,
#             run_kselftest.sh with -t for each selected test (tests/guest-suite.sh); a
#             kernel with lockdep is booted once per test
#
# Counting: every host unit test is one KTAP test case (a "host" document; a missing
# tests/host/Cargo.toml or a build failure is one failed case); in the guest every KTAP test
# case of every test script counts, with the checks after each (tests/lib/suite.sh: each test's
# "# NAME: pass:P fail:F skip:S" line). A failed deps, kernel, module or suite phase is one
# failed case, and the guest tests it prevents count as failed. A guest that bails out, dies or
# times out counts the tests it did not finish as failed (the cases the unfinished test had not
# reported, at least one; one for each test never started). The last line is exactly
# "N passed, N failed", with ", N skipped" appended when any were skipped. Exit status is 0
# only when nothing failed.
#
# Environment: KERNEL=default|debug, KDIR=<your tree>, RSRDMA_TESTS=<regex>, RSRDMA_FULL and
# RSRDMA_MODES (guest tests to run, see tests/lib/suite.sh), RSRDMA_TEST_TIMEOUT,
# RSRDMA_TIMEOUT_SCALE (3 on the debug kernel), RSRDMA_WERROR; the tests' own knobs in
# guest_knobs below go into the guest when set. Logs: out/test-<time>/ (guest.log: the guest's
# output, the runner's KTAP in it; tests/NAME.log, .dmesg, .kcheck: each test's).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../scripts/lib.sh
. "$here/../scripts/lib.sh"
# shellcheck source=lib/suite.sh
. "$here/lib/suite.sh"
# DMESG_BAD: what the failure summary shows of a kernel check.
# shellcheck source=lib/kernel-log.sh
. "$here/lib/kernel-log.sh"

run_start=$(date +%s)
out=$repo/out/test-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
cd "$repo" || exit 1

passed=0 failed=0 skipped=0
timings=()
# The summary's results, "ok TEXT", "not ok TEXT" or "ok TEXT # SKIP" each (see report).
summary_lines=()

# phase NAME CMD...: run a timed phase; its status.
phase() {
	local name=$1 start rc=0
	shift
	start=$(date +%s)
	log "phase $name: $*"
	"$@" || rc=$?
	timings+=("$(printf '%-7s %5d s%s' "$name" $(($(date +%s) - start)) "$( ((rc)) && echo "  (failed, status $rc)")")")
	return $rc
}

# What the guest's tests read from the environment besides selection and timeouts: the counts
# of 03 and 05, 06-hostile's case selection.
guest_knobs=(RSRDMA_PROVIDER RSRDMA_CONNECT_CYCLES RSRDMA_FLAPS RSRDMA_REMOVALS
	RSRDMA_PORT_CYCLES RSRDMA_RELOADS RSRDMA_HOSTILE_CASES RSRDMA_FS_FLAPS)

mapfile -t guest_tests < <(suite_select)
# Timeouts scale on the debug kernel (see guest_boot below).
timeout_scale=$(suite_timeout_scale)

# --- deps, kernel, module ---
build_ok=1
if ! phase deps scripts/deps.sh; then
	failed=$((failed + 1))
	summary_lines+=("not ok deps: scripts/deps.sh failed")
fi
kdir=
kernel_phase() {
	if [ -n "${KDIR:-}" ]; then
		kdir=$(scripts/check-kdir.sh "$KDIR")
	else
		kdir=$(scripts/kernel.sh "${KERNEL:-default}")
	fi
}
# --- lint: rustfmt, clippy, checkpatch, SAFETY comments, shellcheck (before the module build,
# which then rebuilds with rustc what clippy-driver built) ---
lint_phase() {
	local p f
	# A kernel built by clang (the debug flavour) needs LLVM=1 for the module build under clippy.
	if grep -q '^CONFIG_CC_IS_CLANG=y' "$kdir/.config"; then
		LLVM=1 scripts/lint.sh "$kdir" | tee "$out/lint.ktap"
	else
		scripts/lint.sh "$kdir" | tee "$out/lint.ktap"
	fi
	p=$(grep -c '^ok ' "$out/lint.ktap") f=$(grep -c '^not ok ' "$out/lint.ktap")
	passed=$((passed + p)) failed=$((failed + f))
	summary_lines+=("$( ((f)) && echo "not ok" || echo "ok") lint: $p passed, $f failed")
	((f == 0))
}

if ! phase kernel kernel_phase; then
	failed=$((failed + 1)) build_ok=0
	summary_lines+=("not ok kernel: no usable guest kernel")
elif ! phase lint lint_phase && ! grep -q '^ok\|^not ok' "$out/lint.ktap" 2>/dev/null; then
	failed=$((failed + 1))
	summary_lines+=("not ok lint: could not run")
fi
if ((build_ok)) && ! phase module make --no-print-directory modules; then
	failed=$((failed + 1)) build_ok=0
	summary_lines+=("not ok module: make modules failed")
fi

# --- host unit tests ---
host_tests() {
	local manifest=tests/host/Cargo.toml cargo_out rc=0 line name result lines=()
	{
		# The kernel's KTAP helpers, from its tree when there is one (tests/lib/ktap.sh).
		KSFT_DIR=${kdir:+$kdir/tools/testing/selftests}
		# shellcheck source=lib/ktap.sh
		. tests/lib/ktap.sh
		ktap_print_header
		ktap_print_msg "host unit tests: cargo test --manifest-path $manifest"
		if [ ! -f "$manifest" ]; then
			ktap_set_plan 1
			ktap_print_msg "$manifest is missing"
			ktap_test_fail "host_unit_tests"
		else
			cargo_out=$(cargo test --color never --no-fail-fast --manifest-path "$manifest" 2>&1) || rc=$?
			printf '%s\n' "$cargo_out" >"$out/host.log"
			mapfile -t lines < <(grep -E '^test .* \.\.\. (ok|FAILED|ignored)' <<<"$cargo_out")
			ktap_set_plan $((${#lines[@]} > 0 ? ${#lines[@]} : 1))
			for line in "${lines[@]}"; do
				name=${line#test }
				result=${name##* ... }
				name=${name% ... *}
				name=${name//#/_}
				case "$result" in
				ok) ktap_test_pass "$name" ;;
				ignored*) ktap_test_skip "$name" ;;
				*) ktap_test_fail "$name" ;;
				esac
			done
			if ((rc != 0 && KTAP_CNT_FAIL == 0)); then
				# Did not build, or failed outside any test: one failed case with the reason.
				grep -E '^(error|warning: unused)|^---- |panicked' <<<"$cargo_out" | head -n 40 | ktap_diag
				ktap_print_msg "cargo test: status $rc"
				ktap_test_fail "cargo_test"
			elif ((KTAP_CNT_FAIL)); then
				sed -n '/^failures:$/,/^test result/p' <<<"$cargo_out" | head -n 80 | ktap_diag
			fi
			((${#lines[@]} > 0)) || { ktap_print_msg "no tests found"; ktap_test_fail "host_unit_tests"; }
		fi
		ktap_print_totals
	} | tee "$out/host.ktap"
	read -r p f s < <(sed -n 's/^# Totals: pass:\([0-9]*\) fail:\([0-9]*\) .* skip:\([0-9]*\) .*/\1 \2 \3/p' "$out/host.ktap")
	p=${p:-0} f=${f:-1} s=${s:-0}
	passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
	summary_lines+=("$( ((f)) && echo "not ok" || echo "ok") host unit tests: $p passed, $f failed, $s skipped")
	((f == 0))
}
phase host host_tests

# --- the hostile test target (tests/target: rsrdma-target), run in the guest by 06-hostile ---
# Built with rustup's cargo, as the host tests; a failed build is one failed case, and leaves
# no stale binary for the guest to run.
target_build() {
	local cargo=$HOME/.cargo/bin/cargo
	[ -x "$cargo" ] || cargo=cargo
	"$cargo" build --release --color never --manifest-path tests/target/Cargo.toml \
		>"$out/target-build.log" 2>&1 && return 0
	grep -E '^(error|warning)' -A6 "$out/target-build.log" | head -n 40 || tail -n 20 "$out/target-build.log"
	rm -f tests/target/target/release/rsrdma-target
	return 1
}
if ! phase target target_build; then
	failed=$((failed + 1))
	summary_lines+=("not ok target: cargo build of tests/target failed (target-build.log)")
fi

# --- the test-only provider of peer-to-peer memory (tests/p2pmem), loaded by 12-device-memory ---
if ((build_ok)) && ! phase p2pmem make --no-print-directory p2pmem; then
	failed=$((failed + 1))
	summary_lines+=("not ok p2pmem: make p2pmem failed")
fi

# --- install: `make install` into a staging root, the install tree tests/07-install installs and
# autoloads in the guest ($RSRDMA_OUT/stage there). A failed install is one failed case; the
# guest test then skips. ---
install_stage() {
	rm -rf "$out/stage"
	make --no-print-directory install INSTALL_MOD_PATH="$out/stage" >"$out/install.log" 2>&1 &&
		return 0
	tail -n 20 "$out/install.log"
	rm -rf "$out/stage"
	return 1
}
if ((build_ok)) && ! phase install install_stage; then
	failed=$((failed + 1))
	summary_lines+=("not ok install: make install INSTALL_MOD_PATH=$out/stage failed (install.log)")
fi

# --- suite: the guest suite installed as a kselftest target, with the kernel's runner ---
suite_install() {
	rm -rf "$out/kselftest"
	make --no-print-directory -C tests KSFT_DIR="$kdir/tools/testing/selftests" \
		kselftest_install KSFT_INSTALL_PATH="$out/kselftest" >"$out/suite-install.log" 2>&1 &&
		return 0
	tail -n 20 "$out/suite-install.log"
	return 1
}
if ((build_ok)) && ! phase suite suite_install; then
	failed=$((failed + 1)) build_ok=0
	summary_lines+=("not ok suite: make -C tests kselftest_install failed (suite-install.log)")
fi

# --- guest ---
# One boot runs every selected test; on a kernel with lockdep (the debug flavour) each test gets a
# boot of its own: lockdep turns itself off for the rest of a boot at its first report, and the
# upstream one tests/lib/kernel-log.sh knows would leave every later test unchecked. Each boot
# appends its guest.log to guest-all.log (console-N.log and dmesg-N.log kept beside), which is
# guest.log in the end.
guest_rc=
declare -A boot_rc=()
guest_boot() { # TEST...
	# The boot's budget: booting (slower on the debug kernel, like every test) and the tests.
	local t timeout=$((180 * timeout_scale)) ksft_args=() rc=0 own longest=0
	for t in "$@"; do
		ksft_args+=(-t "rsrdma:$t")
		own=$(suite_timeout "tests/$t")
		timeout=$((timeout + own))
		((own <= longest)) || longest=$own
	done
	# The runner's timeout for each test (tests/settings), scaled like the tests' own, and at
	# least the longest test's own and 5 minutes for the checks after it.
	if ((timeout_scale > 1)); then
		own=$(($(sed -n 's/^timeout=//p' tests/settings) * timeout_scale))
		ksft_args+=(-o $((own > longest + 300 ? own : longest + 300)))
	fi
	scripts/vm.sh -t "$timeout" -o "$out" -- \
		env RSRDMA_TESTS="${RSRDMA_TESTS:-}" RSRDMA_TEST_TIMEOUT="${RSRDMA_TEST_TIMEOUT:-}" \
		RSRDMA_TIMEOUT_SCALE="$timeout_scale" "${knobs[@]}" \
		tests/guest-suite.sh "$out/kselftest" "${ksft_args[@]}" || rc=$?
	for t in "$@"; do boot_rc[$t]=$rc; done
	return $rc
}
guest_boots() {
	local t i=0 rc=0
	if ! grep -q '^CONFIG_PROVE_LOCKING=y' "$kdir/.config"; then
		guest_boot "${guest_tests[@]}"
		return
	fi
	: >"$out/guest-all.log"
	for t in "${guest_tests[@]}"; do
		i=$((i + 1))
		log "boot $i of ${#guest_tests[@]}: $t"
		guest_boot "$t" || rc=$?
		cat "$out/guest.log" >>"$out/guest-all.log"
		mv -f "$out/console.log" "$out/console-$i.log" 2>/dev/null
		mv -f "$out/dmesg.log" "$out/dmesg-$i.log" 2>/dev/null
	done
	mv -f "$out/guest-all.log" "$out/guest.log"
	return $rc
}
if ((${#guest_tests[@]} == 0)); then
	log "no guest test matches RSRDMA_TESTS='${RSRDMA_TESTS:-}' RSRDMA_FULL='${RSRDMA_FULL:-}' RSRDMA_MODES='${RSRDMA_MODES:-}'"
elif ((build_ok)); then
	guest_rc=0
	knobs=()
	for v in "${guest_knobs[@]}"; do
		[ -z "${!v:-}" ] || knobs+=("$v=${!v}")
	done
	phase guest guest_boots || guest_rc=$?
fi

# Account for the guest tests from the runner's output: each test's result line and the
# suite's counts before it (tests/lib/suite.sh); what it does not cover failed.
declare -A finished=()
if [ -f "$out/guest.log" ]; then
	while read -r name status p f s secs; do
		finished[$name]=1
		if [ "$p" = - ]; then
			# No counts: the runner ended the test (its own timeout); count from its log.
			read -r p f s plan < <(awk -f tests/lib/ktap-count.awk "$out/tests/${name%.sh}.log" 2>/dev/null)
			p=${p:-0} f=${f:-0} s=${s:-0} plan=${plan:-0}
			missing=$((plan - p - f - s))
			f=$((f + (missing > 0 ? missing : (f == 0))))
			secs="?"
		elif [ "$status" = fail ] && ((f == 0)); then
			f=1
		fi
		passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
		summary_lines+=("$([ "$status" = fail ] && echo "not ok" || echo "ok") ${name%.sh}: $p passed, $f failed, $s skipped, ${secs} s$([ "$status" = skip ] && echo " # SKIP")")
	done < <(awk '
		/^# # [^ ]+: pass:[0-9]+ fail:[0-9]+ skip:[0-9]+ in [0-9]+ s$/ {
			n = $3; sub(/:$/, "", n)
			counts[n] = substr($4, 6) " " substr($5, 6) " " substr($6, 6) " " $8
		}
		/^(not )?ok [0-9]+ selftests: rsrdma: / {
			n = $0; sub(/.* selftests: rsrdma: /, "", n); sub(/ .*/, "", n)
			status = /^not ok/ ? "fail" : (/ # SKIP/ ? "skip" : "ok")
			key = n; sub(/\.sh$/, "", key)
			print n, status, (key in counts) ? counts[key] : "- - - -"
		}' "$out/guest.log")
fi
if grep -q '^Bail out!' "$out/guest.log" 2>/dev/null; then
	failed=$((failed + 1))
	summary_lines+=("not ok guest: $(grep -m1 '^Bail out!' "$out/guest.log")")
elif [ -n "$guest_rc" ] && ((guest_rc != 0 && ${#finished[@]} == ${#guest_tests[@]})); then
	failed=$((failed + 1))
	summary_lines+=("not ok guest: the suite completed but the guest returned status $guest_rc")
fi
for name in "${guest_tests[@]}"; do
	[ -n "${finished[$name]:-}" ] && continue
	reason="not run"
	rc=${boot_rc[$name]:-$guest_rc}
	[ -n "$rc" ] && reason=$([ "$rc" = 124 ] && echo "guest timed out" || echo "guest died (status $rc)")
	p=0 f=1 s=0
	if [ -s "$out/tests/${name%.sh}.log" ]; then
		# The test that was running (it has a log): keep what it reported, the rest failed.
		read -r p f s plan < <(awk -f tests/lib/ktap-count.awk "$out/tests/${name%.sh}.log")
		missing=$((plan - p - f - s))
		f=$((f + (missing > 0 ? missing : 1)))
		reason="$reason while it ran"
	fi
	passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
	summary_lines+=("not ok ${name%.sh}: $p passed, $f failed, $s skipped ($reason)")
done

# failed_cases: each failed guest test's failed cases from its log, each after the (at most 3)
# diagnostic lines before it; the notes of the checks after it (tests/lib/suite.sh) and the
# report lines of its kernel check; the log's last lines when it has none of these. A CI log
# that keeps only its end still says what failed.
failed_cases() {
	local line name cases notes
	for line in "${summary_lines[@]}"; do
		[[ $line == "not ok "* ]] || continue
		name=${line#not ok } name=${name%%:*}
		[ -s "$out/tests/$name.log" ] || continue
		ktap_print_msg "---- $name: what failed ----"
		cases=$(awk '{ sub(/\r$/, "") }
			/^#/ { d[n++ % 3] = substr($0, 1, 200); next }
			/^not ok [0-9]+/ { for (i = (n > 3 ? n - 3 : 0); i < n; i++) print "#   " d[i % 3]; print "# " $0 }
			/^(not )?ok [0-9]+/ { n = 0 }' "$out/tests/$name.log")
		notes=$(grep -E "^# # ${name}[: ]" "$out/guest.log" 2>/dev/null |
			grep -v "^# # $name: pass:" | cut -c1-200)
		[ -n "$cases$notes" ] || cases=$(tail -n 5 "$out/tests/$name.log" | awk '{ print "# " substr($0, 1, 200) }')
		printf '%s\n' "$cases" "$notes" | grep -v '^$'
		[ ! -s "$out/tests/$name.kcheck" ] ||
			grep -E "$DMESG_BAD|unreferenced object|lockdep" "$out/tests/$name.kcheck" |
			grep -vE 'Call Trace|\+0x' | head -n 6 | awk '{ print "#   " substr($0, 1, 200) }'
	done
}

# report: the summary as a KTAP document (each phase or test one result), what failed, the
# phases' times, and the last line.
report() {
	local line
	KSFT_DIR=${kdir:+$kdir/tools/testing/selftests}
	# shellcheck source=lib/ktap.sh
	. tests/lib/ktap.sh
	echo
	ktap_print_header
	ktap_print_msg "nvme-rsrdma test results (logs: ${out#"$repo"/})"
	ktap_set_plan ${#summary_lines[@]}
	for line in "${summary_lines[@]}"; do
		case "$line" in
		"not ok "*) ktap_test_fail "${line#not ok }" ;;
		*" # SKIP") line=${line#ok }; ktap_test_skip "${line% # SKIP}" ;;
		*) ktap_test_pass "${line#ok }" ;;
		esac
	done
	failed_cases
	ktap_print_msg "---- phases ----"
	printf '# %s\n' "${timings[@]}"
	printf '# %-7s %5d s\n' total $(($(date +%s) - run_start))
	line="$passed passed, $failed failed"
	((skipped)) && line+=", $skipped skipped"
	echo "$line"
}
report
((failed == 0))
