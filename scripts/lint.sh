#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The checks a reviewer runs first, as one KTAP document: rustfmt (kernel configuration),
# clippy with the kernel's lint set (a CLIPPY=1 module build with the distribution's
# clippy-driver, which matches the rustc the kernel was built with), checkpatch on the C glue
# and the benchmark's kernel-side tool (which must also build with W=1 without a warning),
# clippy on the host crate, rustfmt and clippy on the test target (tests/target), SAFETY
# comments on every unsafe block, shellcheck on every shell script, and the documentation
# (Documentation/*.rst through docutils, warnings are errors: scripts/docs.sh).
#
#   scripts/lint.sh KDIR
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

kdir=${1:?usage: lint.sh KDIR}
cd "$repo" || exit 1
# The kernel's own KTAP helpers, from the tree (tests/lib/ktap.sh).
KSFT_DIR=$kdir/tools/testing/selftests
# shellcheck source=../tests/lib/ktap.sh
. "$repo/tests/lib/ktap.sh"

check() { # NAME CMD...: one KTAP case from CMD's status; its output as diagnostics on failure
	local name=$1 out rc=0
	shift
	out=$("$@" 2>&1) || rc=$?
	if ((rc == 0)); then
		ktap_test_pass "$name"
	else
		head -n 40 <<<"$out" | ktap_diag
		ktap_test_fail "$name"
	fi
}

rust_sources=(rust/*.rs rust/proto/*.rs rust/wrap/*.rs rust/wrap/*/*.rs)
rust_sources=("${rust_sources[@]/rust\/bindings_generated.rs/}")
rust_sources=("${rust_sources[@]/rust\/layout_generated.rs/}")

rustfmt_check() {
	rustfmt --edition 2021 --config-path "$kdir/.rustfmt.toml" --check rust/rsrdma.rs
}

clippy_module() {
	# A fresh build of the Rust object under clippy-driver; warnings are errors (RSRDMA_WERROR).
	local out rc=0
	touch rust/rsrdma.rs
	out=$(make -s -C "$kdir" M="$repo" RUSTC="$RUSTC" BINDGEN=bindgen CLIPPY=1 \
		CLIPPY_DRIVER=/usr/bin/clippy-driver RSRDMA_WERROR=1 modules 2>&1) || rc=$?
	grep -E '^(error|warning)' -A8 <<<"$out"
	((rc == 0)) && ! grep -qE '^(error|warning)' <<<"$out"
}

checkpatch() {
	"$kdir/scripts/checkpatch.pl" --no-tree --quiet -f rust/glue.c rust/glue.h rust/layout.c \
		rust/bindings_helper.h scripts/rawbw/rsrdma_rawbw.c
}

rawbw_build() {
	# The benchmark's kernel-side raw bandwidth tool builds with W=1 and without a warning.
	local dir out rc=0
	dir=$(mktemp -d) && cp scripts/rawbw/rsrdma_rawbw.c scripts/rawbw/Kbuild "$dir" || return 1
	out=$(make -s -C "$kdir" M="$dir" W=1 modules 2>&1) || rc=$?
	rm -rf "$dir"
	grep -E 'warning|error' -A4 <<<"$out"
	((rc == 0)) && ! grep -qE 'warning|error' <<<"$out"
}

clippy_host() {
	cargo clippy -q --manifest-path tests/host/Cargo.toml --all-targets -- -D warnings
}

safety_comments() {
	# Every `unsafe {` has a SAFETY comment within the three lines above it.
	local missing
	missing=$(awk 'FNR == 1 { a = b = c = "" }
		/unsafe[[:space:]]*\{/ && $0 !~ /SAFETY/ && a b c !~ /SAFETY/ { print FILENAME ":" FNR }
		{ a = b; b = c; c = $0 }' "${rust_sources[@]}")
	[ -z "$missing" ] || { echo "unsafe blocks without a SAFETY comment:"; echo "$missing"; return 1; }
}

# Every shell script of the repository (the symbolic links to tests, which run them in another
# mode, are the scripts they point to), with the files they source (-x).
shell_scripts() {
	git ls-files -s | awk '$1 != "120000" { print $4 }' | while read -r f; do
		case "$f" in
		*.sh | .ci/run) echo "$f" ;;
		*) head -n1 "$f" | grep -qE '^#!.*\b(ba)?sh\b' && echo "$f" ;;
		esac
	done
}

shellcheck_all() {
	local files
	mapfile -t files < <(shell_scripts)
	shellcheck -x "${files[@]}"
}

target_rustfmt() {
	rustfmt --edition 2021 --check tests/target/src/main.rs
}

target_clippy() {
	cargo clippy -q --release --manifest-path tests/target/Cargo.toml --all-targets -- -D warnings
}

ktap_print_header
ktap_set_plan 10
check "rustfmt" rustfmt_check
check "clippy (module, kernel lints)" clippy_module
check "checkpatch (C glue, bench tool)" checkpatch
check "bench tool builds without warnings (W=1)" rawbw_build
check "clippy (host crate)" clippy_host
check "rustfmt (test target)" target_rustfmt
check "clippy (test target)" target_clippy
check "SAFETY comment on every unsafe block" safety_comments
check "shellcheck -x (every shell script)" shellcheck_all
check "documentation builds without warnings (docutils)" scripts/docs.sh
ktap_finished
