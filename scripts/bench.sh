#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make bench`: nvme_rsrdma against the kernel's C nvme-rdma, side by side in one guest boot,
# and against the raw bandwidth of rxe (see scripts/bench-guest.sh). Prints one table and
# writes it as JSON to results/bench-<time>.json; the raw measurements stay in out/bench-<time>/.
#
# BENCH_ROUNDS (4), BENCH_SECONDS (3), BENCH_SECONDS_LARGE (10, jobs of 1 MiB blocks or more),
# BENCH_BACKINGS ("null mem own device"), BENCH_JOBS (all),
# BENCH_RAW=0 (skip the raw rxe runs), BENCH_PROFILE=1 (a perf profile of each transport, see scripts/bench-guest.sh),
# RXE_MTU (the MTU of the netdev under rxe; default the guest's 1500, RoCE MTU 1024, as in the
# tests; RXE_MTU=9000 gives RoCE MTU 4096, as jumbo-frame RoCE deployments run),
# BENCH_IDLE=poll (boot the guest with idle=poll: idle vCPUs spin instead of halting; under TCG
# waking a halted vCPU dominates QD1 latency, see Documentation/testing.rst),
# BENCH_CLOCK=icount (a TCG guest whose clock counts instructions, 2 ns each: figures that
# hardly depend on the host's speed or load, the CPU cost of each path; see vm.sh -i).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

[ -f "$repo/nvme_rsrdma.ko" ] || die "nvme_rsrdma.ko is not built: run make (or make bench)"
# The project's own target (tests/target), one of the benchmark's peers.
cargo=$HOME/.cargo/bin/cargo
[ -x "$cargo" ] || cargo=cargo
"$cargo" build --release --quiet --manifest-path "$repo/tests/target/Cargo.toml" ||
	die "cargo build of tests/target failed"
stamp=$(date +%Y%m%d-%H%M%S)
out=$repo/out/bench-$stamp
mkdir -p "$out" "$repo/results"
if [ -n "${KDIR:-}" ]; then kdir=$("$here/check-kdir.sh" "$KDIR"); else kdir=$("$here/kernel.sh" "${KERNEL:-default}"); fi
vm_opts=()
case "${BENCH_IDLE:-halt}" in
halt) ;;
poll) vm_opts=(-a idle=poll) ;;
*) die "BENCH_IDLE=$BENCH_IDLE: halt or poll" ;;
esac
icount_shift=
case "${BENCH_CLOCK:-real}" in
real) accel=$("$here/accel.sh" "$kdir") ;;
icount)
	# A polling idle vCPU would spend instructions, and turns, doing nothing.
	[ "${BENCH_IDLE:-halt}" = halt ] || die "BENCH_CLOCK=icount counts idle polling as work: use BENCH_IDLE=halt"
	accel=tcg icount_shift=1
	vm_opts+=(-i "$icount_shift")
	;;
*) die "BENCH_CLOCK=$BENCH_CLOCK: real or icount" ;;
esac
start=$(date +%s)
rc=0
# The guest script holds the defaults: an empty variable means its default.
"$here/vm.sh" -t 2400 -o "$out" "${vm_opts[@]}" -- env BENCH_ACCEL="$accel" BENCH_ICOUNT_SHIFT="$icount_shift" \
	BENCH_ROUNDS="${BENCH_ROUNDS:-}" BENCH_SECONDS="${BENCH_SECONDS:-}" \
	BENCH_SECONDS_LARGE="${BENCH_SECONDS_LARGE:-}" \
	BENCH_BACKINGS="${BENCH_BACKINGS:-}" BENCH_JOBS="${BENCH_JOBS:-}" \
	BENCH_PROFILE="${BENCH_PROFILE:-}" BENCH_PROFILE_JOB="${BENCH_PROFILE_JOB:-}" \
	BENCH_RAW="${BENCH_RAW:-}" RXE_MTU="${RXE_MTU:-}" scripts/bench-guest.sh || rc=$?
if [ -f "$out/runs.txt" ]; then
	python3 "$here/bench.py" record "$out/runs.txt" "$out/bench.jsonl"
fi
python3 "$here/bench.py" report "$out/bench.jsonl" "$repo/results/bench-$stamp.json" | tee "$out/report.txt"
for f in "$out"/profile-*.txt; do
	[ -f "$f" ] && cat "$f"
done
log "make bench: $( ((rc)) && echo "FAILED (status $rc)" || echo "done") in $(($(date +%s) - start)) s"
exit $rc
