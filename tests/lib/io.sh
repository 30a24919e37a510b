# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash
#
# The guest tests' helpers: verified I/O with fio.
# Sourced by tests/lib/common.sh, not run.

# fio_verify DEV SECONDS [FIO ARGS...]: mixed random read/write with crc32c verification, direct
# I/O on io_uring (libaio if fio lacks it), on the first 32 MiB of DEV (at most the device), 4 KiB
# blocks, queue depth 16. Extra arguments come last, so they override these. Non-zero on any I/O
# or verify error; prints a short summary (the full output too on failure) as diagnostics.
fio_verify() {
	local dev=$1 secs=$2 out rc=0
	shift 2
	out=$(_fio_run "$dev" --time_based --runtime="$secs" "$@") || rc=$?
	_fio_report "$dev" "$rc" "$out"
}

# _fio_run DEV [FIO ARGS...]: the fio_verify job (without its run time); fio's output.
_fio_run() {
	local dev=$1 engine=io_uring size
	shift
	fio --enghelp=io_uring >/dev/null 2>&1 || engine=libaio
	size=$(blockdev --getsize64 "$dev" 2>/dev/null) || { echo "$dev: not a block device"; return 1; }
	((size > 32 << 20)) && size=$((32 << 20))
	cd /tmp && fio --name=verify --filename="$dev" --direct=1 --ioengine="$engine" \
		--rw=randrw --bs=4k --iodepth=16 --size="$size" \
		--verify=crc32c --verify_backlog=256 --verify_fatal=1 --verify_state_save=0 \
		--do_verify=1 --group_reporting "$@" 2>&1
}

# _fio_report DEV STATUS OUTPUT: fio_verify's verdict and diagnostics.
_fio_report() {
	local dev=$1 rc=$2 out=$3
	if ((rc == 0)) && grep -qE 'err= *[1-9]|verify: bad|fio: (pid|io_u) .*error' <<<"$out"; then
		rc=1
	fi
	if ((rc)); then
		ktap_diag "fio on $dev failed (status $rc); $(grep -c '^verify: bad' <<<"$out") bad verify reads:"
		# Its own error and verify messages (the first ones), then the summary.
		grep -E '^(fio|verify):|error' <<<"$out" | head -n 15 | ktap_diag
		grep -E 'err=|^ *(READ|WRITE):|issued rwts' <<<"$out" | sed 's/^ *//' | ktap_diag
		grep -qE 'err=|^ *(READ|WRITE):' <<<"$out" || tail -n 20 <<<"$out" | ktap_diag
	else
		grep -E 'err=|^ *(READ|WRITE):|issued rwts' <<<"$out" | sed 's/^ *//' | ktap_diag
	fi
	return "$rc"
}

# fio_start DEV [FIO ARGS...]: the fio_verify job in the background until fio_stop, which
# interrupts it (fio finishes its verification and reports) and gives fio_verify's verdict.
# Call both from the test's own shell (not in a subshell such as ktap_check's), which owns the
# job.
# Returns once fio's job process runs (fio takes seconds to start under TCG, more on a busy
# guest), so that what the caller does next happens under I/O.
fio_start() {
	local dev=$1 secs
	shift
	secs=$(scaled 60)
	FIO_DEV=$dev FIO_OUT=$(mktemp /tmp/rsrdma-fio.XXXXXX)
	_fio_run "$dev" --time_based --runtime=3600 "$@" >"$FIO_OUT" 2>&1 &
	FIO_PID=$!
	wait_for "$secs" _fio_job_running || ktap_diag "fio on $dev: no job process after $secs s"
}

# _fio_pids: the processes of the fio_start job (the main one, then its job processes).
_fio_pids() {
	local main
	main=$(pgrep -P "$FIO_PID" -x fio) || return 1
	echo "$main" $(pgrep -P "$main" -x fio)
}
_fio_job_running() { [ "$(_fio_pids | wc -w)" -gt 1 ]; }

fio_stop() {
	local rc=0 pids
	[ -n "${FIO_PID:-}" ] || return 1
	# Every fio process of the job (the main one and its job processes) gets the interrupt; fio
	# stops, verifies what is outstanding and prints its summary, exiting with 128 or 130. A
	# job without a fio process (it failed, or never started) is ended with its shell.
	if pids=$(_fio_pids); then
		# shellcheck disable=SC2086
		kill -INT $pids 2>/dev/null
	else
		kill "$FIO_PID" 2>/dev/null
	fi
	wait "$FIO_PID" || rc=$?
	FIO_PID=
	((rc == 128 || rc == 130)) && rc=0
	_fio_report "$FIO_DEV" "$rc" "$(cat "$FIO_OUT")"
	rc=$?
	rm -f "$FIO_OUT"
	return "$rc"
}
