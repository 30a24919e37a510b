# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash
#
# The guest tests' helpers: verified I/O with fio.
# Sourced by tests/lib/common.sh, not run.
#
# Every block fio writes here is filled with a pattern of the job's own: a tag drawn at random
# for the job, then the block's offset, repeated. A block read back is checked byte for byte
# against it, so a block of another job or an earlier run (another tag), of another place (another
# offset), zeroed, torn or corrupted fails; fio's crc32c blocks only check themselves and would
# pass a block left over from an earlier run. Each check reports, and asserts, how much it read
# back and verified.

# fio_verify DEV [FIO ARGS...]: random writes over the first 32 MiB of DEV (at most the device),
# every block once, then fio's verify pass reads each block back and checks it. Direct I/O on
# io_uring (libaio if fio lacks it), 4 KiB blocks, queue depth 16; extra arguments come last, so
# they override these (--size, --bs, --bssplit, --iodepth, --numjobs...; jobs write the same
# blocks with the same pattern). Non-zero on any I/O or verify error, or unless the bytes verified
# are the bytes written and not zero; prints the counts.
fio_verify() {
	local dev=$1 json rc=0 out
	shift
	json=$(mktemp /tmp/rsrdma-fio.XXXXXX)
	out=$(_fio_run "$dev" "$json" "$(_fio_tag)" --rw=randwrite --do_verify=1 "$@" 2>&1) || rc=$?
	_fio_report "$dev" "$rc" "$out" "$json" "final pass"
	rc=$?
	rm -f "$json"
	return "$rc"
}

# _fio_tag: a pattern tag for one job, 8 hex digits.
_fio_tag() { od -An -N4 -tx4 /dev/urandom | tr -d ' \n'; }

# _fio_run DEV JSON TAG [FIO ARGS...]: the verified job (without its direction); fio's messages on
# standard output, its results in JSON.
_fio_run() {
	local dev=$1 json=$2 tag=$3 engine=io_uring size
	shift 3
	fio --enghelp=io_uring >/dev/null 2>&1 || engine=libaio
	size=$(_fio_size "$dev") || { echo "$dev: not a block device"; return 1; }
	cd /tmp && fio --name=verify --filename="$dev" --direct=1 --ioengine="$engine" \
		--bs=4k --iodepth=16 --size="$size" \
		--verify=pattern --verify_pattern="0x$tag%o" --verify_fatal=1 --verify_state_save=0 \
		--group_reporting --output-format=json --output="$json" "$@"
}

# _fio_size DEV [FIO ARGS...]: the bytes a job with these arguments covers: the last --size (in
# bytes or with a k, m or g suffix), else 32 MiB; at most the device, as fio clamps it. Non-zero,
# saying so, for a --size it does not understand.
_fio_size() {
	local dev=$1 size=$((32 << 20)) dev_size a n
	shift
	dev_size=$(blockdev --getsize64 "$dev" 2>/dev/null) || return 1
	for a in "$@"; do
		[[ $a == --size=* ]] || continue
		if ! [[ $a =~ ^--size=([0-9]+)([kKmMgG]?)$ ]]; then
			echo "fio_start: $a: give --size in bytes, or with a k, m or g suffix"
			return 1
		fi
		n=${BASH_REMATCH[1]}
		case ${BASH_REMATCH[2]} in
		k | K) n=$((n << 10)) ;;
		m | M) n=$((n << 20)) ;;
		g | G) n=$((n << 30)) ;;
		esac
		size=$n
	done
	echo $((size > dev_size ? dev_size : size))
}

# _fio_written DEV: the bytes written to DEV since it appeared (its block statistics).
_fio_written() { echo $(($(awk '{ print $7 }' "/sys/block/${1##*/}/stat") * 512)); }

# _fio_counts JSON: "WRITTEN_BYTES WRITES READ_BYTES READS ERROR" of fio's results (the JSON
# follows any message fio wrote to the same file), or nothing if there are none.
_fio_counts() {
	python3 - "$1" 2>/dev/null <<-'EOF'
		import json, sys
		text = open(sys.argv[1]).read()
		job = json.loads(text[text.index("{"):])["jobs"][0]
		w, r = job["write"], job["read"]
		print(w["io_bytes"], w["total_ios"], r["io_bytes"], r["total_ios"], job["error"])
	EOF
}

# _fio_report DEV STATUS OUTPUT JSON WHAT: the verdict on a job whose reads were all verify reads:
# no error, and the bytes verified (by WHAT) are the bytes written and not zero. Diagnostics.
_fio_report() {
	local dev=$1 rc=$2 out=$3 json=$4 what=$5 counts w wn r rn err
	counts=$(_fio_counts "$json")
	read -r w wn r rn err <<<"$counts"
	if [ -z "$counts" ]; then
		ktap_diag "fio on $dev: no results (status $rc)"
		rc=1
	elif ((rc || err)); then
		ktap_diag "fio on $dev failed (status $rc, error $err): $wn writes ($w bytes), $rn verified reads ($r bytes)"
		rc=1
	elif ((r == 0 || r != w)); then
		ktap_diag "fio on $dev: $wn writes ($w bytes) but $rn blocks ($r bytes) verified by the $what"
		rc=1
	else
		ktap_diag "fio on $dev: $wn blocks ($w bytes) written, $rn ($r bytes) read back and verified by the $what"
	fi
	if ((rc)); then
		# fio's own error and verify messages (the first ones).
		grep -E '^(fio|verify|pattern):|error' <<<"$out" | head -n 15 | ktap_diag
	fi
	return "$rc"
}

# fio_start DEV [FIO ARGS...]: random writes over the first 32 MiB of DEV (as fio_verify's, and
# its arguments but --numjobs and --bssplit: fio_stop reads the region back with one job in
# blocks of one size) in the background until fio_stop, each block read back and checked soon
# after it is written (a verify backlog of 16 blocks). Call both from the same shell (the
# test's, or one ktap_check subshell), which owns the job.
# Returns once fio's job process runs (fio takes seconds to start under TCG, more on a busy
# guest), so that what the caller does next happens under I/O.
fio_start() {
	local dev=$1 secs
	shift
	secs=$(scaled 60)
	if [[ " $* " =~ \ --(numjobs|bssplit)= ]]; then
		ktap_diag "fio_start: --numjobs and --bssplit are not for a job read back whole"
		return 1
	fi
	FIO_DEV=$dev FIO_TAG=$(_fio_tag) FIO_ARGS=("$@")
	FIO_REGION=$(_fio_size "$dev" "$@") || { ktap_diag "$FIO_REGION"; return 1; }
	FIO_WRITTEN0=$(_fio_written "$dev")
	FIO_JSON=$(mktemp /tmp/rsrdma-fio.XXXXXX) FIO_OUT=$(mktemp /tmp/rsrdma-fio.XXXXXX)
	_fio_run "$dev" "$FIO_JSON" "$FIO_TAG" --rw=randwrite --time_based --runtime=3600 \
		--verify_backlog=16 "$@" >"$FIO_OUT" 2>&1 &
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

# _fio_covered: whether the fio_start job has written its whole region (twice its size written
# to the device since it started: its first pass over the region, each block once, is complete).
_fio_covered() { (($(_fio_written "$FIO_DEV") - FIO_WRITTEN0 >= 2 * FIO_REGION)); }

# fio_stop: stops the fio_start job once it has written its whole region, then reads the region
# back and checks every block. Non-zero on any I/O or verify error, if the job verified nothing
# while it ran, or unless the read-back verified the whole region.
fio_stop() {
	local rc=0 pids counts w wn r rn err json out secs status
	[ -n "${FIO_PID:-}" ] || return 1
	secs=$(scaled 60)
	_fio_job_running && ! wait_for "$secs" _fio_covered &&
		ktap_diag "fio on $FIO_DEV: the job did not write its $FIO_REGION bytes in $secs s"
	# Every fio process of the job (the main one and its job processes) gets the interrupt; fio
	# stops, completes what is in flight and writes its results, exiting with 128 or 130. A job
	# without a fio process (it failed, or never started) is ended with its shell.
	if pids=$(_fio_pids); then
		# shellcheck disable=SC2086
		kill -INT $pids 2>/dev/null
	else
		kill "$FIO_PID" 2>/dev/null
	fi
	wait "$FIO_PID" || rc=$?
	FIO_PID=
	((rc == 128 || rc == 130)) && rc=0
	counts=$(_fio_counts "$FIO_JSON")
	read -r w wn r rn err <<<"$counts"
	if [ -z "$counts" ] || ((rc || err || r == 0)); then
		ktap_diag "fio on $FIO_DEV failed (status $rc, error ${err:-none}): ${wn:-no} writes," \
			"${rn:-no} verified while running"
		grep -E '^(fio|verify|pattern):|error' "$FIO_OUT" | grep -v 'terminating on signal' |
			head -n 15 | ktap_diag
		rc=1
	else
		ktap_diag "fio on $FIO_DEV: $wn blocks ($w bytes) written, $rn ($r bytes) verified while running"
	fi
	# The whole region, read back in order with the job's pattern and block size.
	json=$(mktemp /tmp/rsrdma-fio.XXXXXX)
	w='' wn='' r='' rn='' err='' status=0
	out=$(_fio_run "$FIO_DEV" "$json" "$FIO_TAG" "${FIO_ARGS[@]}" --rw=read 2>&1) || status=$?
	counts=$(_fio_counts "$json") && read -r w wn r rn err <<<"$counts"
	if [ -n "$counts" ] && ((status == 0 && err == 0 && r == FIO_REGION)); then
		ktap_diag "fio on $FIO_DEV: the whole region read back and verified: $rn blocks ($r bytes)"
	else
		ktap_diag "fio on $FIO_DEV: the read-back of its $FIO_REGION bytes failed (status $status," \
			"${rn:-no} blocks, ${r:-no} bytes read): not all of the region holds the job's data"
		grep -E '^(fio|verify|pattern):|error' <<<"$out" | head -n 15 | ktap_diag
		rc=1
	fi
	rm -f "$json" "$FIO_JSON" "$FIO_OUT"
	return "$rc"
}
