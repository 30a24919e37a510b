#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# rsrdma-timeout: 900
#
# File systems on the transport through link loss. ext4, then XFS, on a namespace of the
# nvmet-rdma target: files written and checksummed first; then fsx (random reads, writes,
# truncates, mapped reads and writes, hole punches, preallocations and range copies of a file,
# every read checked against fsx's own copy of it) on two files and stress-ng's metadata
# stressors (directories, dentries, links, renames, file names, modes, extended attributes)
# run while the guest's network device flaps, the page cache dropped every second so that
# reads go to the target. Every flap must recover as in 05-link-loss, fsx and stress-ng must
# run through all of them and never fail; then the file system is unmounted, its checker
# (e2fsck -fn, xfs_repair -n) finds it clean, and the first files read back intact.
#
# RSRDMA_FS_FLAPS sets the flaps per file system (4).
set -u
. "$(dirname "$0")/lib/common.sh"

FS_FLAPS=${RSRDMA_FS_FLAPS:-4}
NQN_FS=nqn.2026-11.io.rsrdma:fs
MNT=/tmp/rsrdma-fs
WORK=/tmp/rsrdma-fs-work
# Operations per fsx run: each run is a new seed on a new file, checked to its end.
FSX_OPS=2000
# The files written before the flaps and read back after the check: this many of 1 MiB.
KEEP_FILES=32

stop_workers() {
	local p
	touch "$WORK/stop" 2>/dev/null
	for p in ${WORKERS:-}; do
		wait "$p" 2>/dev/null
	done
	WORKERS=
}

cleanup() {
	# The link first: workers stopped in the middle of a flap wait for it.
	ip link set "$RDMA_NETDEV" up 2>/dev/null
	stop_workers
	probe_stop
	mountpoint -q "$MNT" && umount "$MNT"
	rm -rf "$MNT" "$WORK"
	teardown_all
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# fsx_worker N: fsx runs of FSX_OPS operations on the file fsx-N, each with a new seed, until
# $WORK/stop exists or a run fails; appends "SEED ok" or "SEED FAILED" per run to fsx-N.runs
# (a failed run's output stays in fsx-N.out, its files in $WORK).
fsx_worker() {
	local n=$1 seed
	while [ ! -e "$WORK/stop" ]; do
		seed=$((RANDOM * 32768 + RANDOM))
		if (cd "$WORK" && fsx -N "$FSX_OPS" -S "$seed" -f "$WORK/fsx.toml" -P "$WORK" \
			"$MNT/fsx-$n") >"$WORK/fsx-$n.out" 2>&1; then
			echo "$seed ok" >>"$WORK/fsx-$n.runs"
		else
			echo "$seed FAILED" >>"$WORK/fsx-$n.runs"
			break
		fi
	done
}

# meta_worker: stress-ng's metadata stressors in runs of 5 s with their own checks (--verify)
# until $WORK/stop exists or a run fails; "ok BOGO_OPS" or "FAILED" per run in meta.runs.
meta_worker() {
	mkdir -p "$MNT/meta"
	while [ ! -e "$WORK/stop" ]; do
		if stress-ng --temp-path "$MNT/meta" --verify --metrics-brief --timeout 5s \
			--dir 1 --dentry 1 --link 1 --symlink 1 --rename 1 --filename 1 --chmod 1 \
			--xattr 1 >"$WORK/meta.out" 2>&1; then
			awk '/metrc:/ && $5 ~ /^[0-9]+$/ { n += $5 } END { print "ok", n + 0 }' \
				"$WORK/meta.out" >>"$WORK/meta.runs"
		else
			echo FAILED >>"$WORK/meta.runs"
			break
		fi
	done
}

# cache_dropper: the page cache and the dentries and inodes dropped every second, so that the
# workers' reads and lookups go to the target, through the flaps.
cache_dropper() {
	while [ ! -e "$WORK/stop" ]; do
		echo 3 >/proc/sys/vm/drop_caches
		sleep 1
	done
}

fsx_config() {
	cat >"$WORK/fsx.toml" <<-EOF
		flen = 4194304
		[opsize]
		max = 262144
		[weights]
		close_open = 2
		read = 10
		write = 10
		mapread = 5
		mapwrite = 5
		invalidate = 1
		truncate = 2
		fsync = 2
		fdatasync = 2
		posix_fallocate = 2
		punch_hole = 2
		copy_file_range = 2
	EOF
}

mkfs_cmd() { # FS DEV
	case "$1" in
	ext4) mkfs.ext4 -q -F "$2" ;;
	xfs) mkfs.xfs -q -f "$2" ;;
	esac
}

fsck_cmd() { # FS DEV: the checker, repairing nothing; status 0 only for a clean file system
	case "$1" in
	ext4) e2fsck -f -n "$2" ;;
	xfs) xfs_repair -n "$2" ;;
	esac
}

# fs_problems MARK: the file systems' and the block layer's error reports since MARK. Not a
# readahead's (REQ_RAHEAD, bit 19 of the request's flags): a readahead is failfast, so the NVMe
# core neither retries it nor fails it over when the outage aborts it (the host-aborted status
# is logged), and the page cache reads the data again when it is wanted. Nothing is lost.
fs_problems() {
	local line
	dmesg_after "$1" |
		grep -E 'EXT4-fs (error|warning)|XFS \(.*\): (.*[Cc]orrupt|.*error|Metadata)|I/O error|Buffer I/O' |
		while IFS= read -r line; do
			if [[ $line =~ I/O\ error,\ dev\ .*\ flags\ (0x[0-9a-f]+) ]] &&
				((BASH_REMATCH[1] & 0x80000)); then
				continue
			fi
			printf '%s\n' "$line"
		done
}

# fs_round FS: one file system's six cases.
fs_round() {
	local fs=$1 mark n runs failed ops ok meta_ok keep p out fsx_pids meta_pid
	mark=$(kmsg_mark)
	rm -rf "$WORK" && mkdir -p "$WORK" "$MNT" && fsx_config
	if ! out=$(mkfs_cmd "$fs" "$dev" 2>&1 && mount -t "$fs" "$dev" "$MNT" 2>&1); then
		ktap_diag "$out"
		ktap_test_fail "$fs: mkfs and mount on $dev"
		for n in "flaps under load" fsx stress-ng checker "read-back"; do
			ktap_test_skip "$fs: $n (no file system)"
		done
		return
	fi
	ktap_test_pass "$fs: mkfs and mount on $dev"

	# Files to read back after the check: random contents, checksums kept outside.
	keep=$MNT/keep
	mkdir -p "$keep"
	for ((n = 0; n < KEEP_FILES; n++)); do
		head -c 1M /dev/urandom >"$keep/f$n"
	done
	(cd "$keep" && sha256sum f*) >"$WORK/keep.sha256"
	sync

	fsx_worker 1 &
	fsx_pids=$!
	fsx_worker 2 &
	fsx_pids+=" $!"
	meta_worker &
	meta_pid=$!
	cache_dropper &
	WORKERS="$fsx_pids $meta_pid $!"
	sleep 3
	probe_start "$dev"
	series "$fs: netdev flaps" flap "$FS_FLAPS" "ip link set $RDMA_NETDEV down" 1-3 \
		"ip link set $RDMA_NETDEV up" \
		"$fs: $FS_FLAPS netdev flaps under fsx and stress-ng: every one recovered"
	probe_stop
	# Each worker must still be running after the last flap.
	ok=1 meta_ok=1
	for p in $fsx_pids; do
		kill -0 "$p" 2>/dev/null || ok=0
	done
	kill -0 "$meta_pid" 2>/dev/null || meta_ok=0
	stop_workers

	runs=$(cat "$WORK"/fsx-*.runs 2>/dev/null | grep -c ' ok$')
	failed=$(cat "$WORK"/fsx-*.runs 2>/dev/null | grep -c FAILED)
	ktap_diag "fsx: $runs runs of $FSX_OPS operations completed, $failed failed"
	for n in 1 2; do
		grep -q ' ok$' "$WORK/fsx-$n.runs" 2>/dev/null || { ktap_diag "fsx-$n completed no run"; ok=0; }
		if grep -q FAILED "$WORK/fsx-$n.runs" 2>/dev/null; then
			ktap_diag "fsx-$n: seed $(awk '/FAILED/ { print $1 }' "$WORK/fsx-$n.runs")"
			tail -n 20 "$WORK/fsx-$n.out" | ktap_diag
		fi
	done
	if ((ok && runs >= 2 && failed == 0)); then
		ktap_test_pass "$fs: fsx ran through every flap, $runs runs, every read checked"
	else
		((ok)) || ktap_diag "an fsx worker had stopped before the last flap, or did no run"
		ktap_test_fail "$fs: fsx ran through every flap, $runs runs, every read checked"
	fi
	runs=$(grep -c '^ok' "$WORK/meta.runs" 2>/dev/null)
	ops=$(awk '$1 == "ok" { n += $2 } END { print n + 0 }' "$WORK/meta.runs" 2>/dev/null)
	ktap_diag "stress-ng: $runs runs, $ops bogo operations"
	if ((meta_ok && runs >= 1 && ops > 0)) && ! grep -q FAILED "$WORK/meta.runs"; then
		ktap_test_pass "$fs: stress-ng metadata stressors ran through every flap without a failure"
	else
		((meta_ok)) || ktap_diag "stress-ng had stopped before the last flap"
		grep -E 'fail|error' "$WORK/meta.out" 2>/dev/null | head -n 10 | ktap_diag
		ktap_test_fail "$fs: stress-ng metadata stressors ran through every flap without a failure"
	fi

	if out=$(umount "$MNT" 2>&1 && fsck_cmd "$fs" "$dev" 2>&1) && [ -z "$(fs_problems "$mark")" ]; then
		tail -n 2 <<<"$out" | ktap_diag
		ktap_test_pass "$fs: unmounted, its checker finds it clean, no error in the kernel log"
	else
		tail -n 20 <<<"$out" | ktap_diag
		fs_problems "$mark" | head -n 10 | ktap_diag
		ktap_test_fail "$fs: unmounted, its checker finds it clean, no error in the kernel log"
	fi

	out=
	if mount -t "$fs" "$dev" "$MNT" &&
		out=$(cd "$keep" && sha256sum -c --quiet "$WORK/keep.sha256" 2>&1) &&
		n=$(wc -l <"$WORK/keep.sha256") && ((n == KEEP_FILES)); then
		ktap_test_pass "$fs: mounted again, the $n files of 1 MiB written before the flaps read back intact"
	else
		ktap_diag "$out"
		ktap_test_fail "$fs: mounted again, the $KEEP_FILES files of 1 MiB written before the flaps read back intact"
	fi
	mountpoint -q "$MNT" && umount "$MNT"
}

ktap_print_header
ktap_set_plan 13

for t in fsx stress-ng mkfs.xfs xfs_repair e2fsck; do
	command -v "$t" >/dev/null || bail_out "$t missing: run scripts/deps.sh"
done
if ! fabric_setup || ! target_setup || ! target_export_null "$NQN_FS" rsrdma_fs 512 4096 ||
	! host_load; then
	bail_out "set-up failed"
fi

# Keep-alive 15 s, as 05-link-loss: the target keeps the association through a 3 s flap.
if timeout 60 nvme connect -t "$HOST_TRANSPORT" -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN_FS" \
	--reconnect-delay=1 --ctrl-loss-tmo=120 --keep-alive-tmo=15 >/dev/null &&
	wait_for 30 nvme_dev_for_nqn "$NQN_FS" >/dev/null; then
	dev=$(nvme_dev_for_nqn "$NQN_FS")
	ctrl=$(basename "$(ctrl_for "$NQN_FS")")
	ktap_test_pass "connect to a 512 MiB namespace: $dev on $ctrl"
else
	bail_out "cannot connect to $NQN_FS"
fi

fs_round ext4
fs_round xfs

ktap_finished
