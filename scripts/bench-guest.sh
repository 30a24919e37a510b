#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The guest side of `make bench` (run by scripts/bench.sh through scripts/vm.sh): the same fio
# jobs through nvme_rsrdma ("rsrdma") and the C nvme-rdma ("rdma"), interleaved round by round
# against the same nvmet-rdma target over the same rxe device, on a null_blk namespace without
# and with memory backing; plus the raw bandwidth of rxe (perftest, polling and event mode).
# Every measurement is one JSON object per line in $RSRDMA_OUT/bench.jsonl.
#
# Environment: BENCH_ROUNDS (3), BENCH_SECONDS per job (5), BENCH_BACKINGS ("null mem"),
# BENCH_JOBS (a subset of the job names below, default all).
set -u
. "$RSRDMA_REPO/tests/lib/common.sh"

ROUNDS=${BENCH_ROUNDS:-3}
SECS=${BENCH_SECONDS:-5}
BACKINGS=${BENCH_BACKINGS:-null mem}
NQN_BENCH=nqn.2026-11.io.rsrdma:bench
OUTF=$RSRDMA_OUT/bench.jsonl
CPUS=$(nproc)
: >"$OUTF"

# name rw bs iodepth numjobs
JOBS=(
	"lat4k randread 4k 1 1"
	"iops4k randread 4k 32 $CPUS"
	"randwrite4k randwrite 4k 32 1"
	"seqread128k read 128k 8 1"
	"seqwrite128k write 128k 8 1"
	"seqwrite4m write 4m 4 1"
	"seqread4m read 4m 4 1"
)

cleanup() {
	host_disconnect_all >/dev/null 2>&1
	rsrdma_unload >/dev/null 2>&1
	module_unload nvme_rdma >/dev/null 2>&1
	rm -f "$NVMET_CFS/ports/1/subsystems/$NQN_BENCH" 2>/dev/null
	[ -d "$NVMET_CFS/subsystems/$NQN_BENCH" ] && {
		echo 0 >"$NVMET_CFS/subsystems/$NQN_BENCH/namespaces/1/enable"
		rmdir "$NVMET_CFS/subsystems/$NQN_BENCH/namespaces/1" "$NVMET_CFS/subsystems/$NQN_BENCH"
	}
	[ -d "$NULLB_CFS/rsrdma_bench" ] && { echo 0 >"$NULLB_CFS/rsrdma_bench/power"; rmdir "$NULLB_CFS/rsrdma_bench"; }
	target_teardown >/dev/null 2>&1
	rxe_teardown >/dev/null 2>&1
}
trap cleanup EXIT

note() { echo "bench: $*" >&2; }

# The benchmark namespace: null_blk "rsrdma_bench" (1 GiB, 4 KiB blocks), memory backed or not,
# exported as $NQN_BENCH on port 1 next to the test subsystems.
bench_target() { # null|mem
	local d=$NULLB_CFS/rsrdma_bench s=$NVMET_CFS/subsystems/$NQN_BENCH
	rm -f "$NVMET_CFS/ports/1/subsystems/$NQN_BENCH"
	if [ -d "$s" ]; then
		echo 0 >"$s/namespaces/1/enable"
	fi
	if [ -d "$d" ]; then
		echo 0 >"$d/power"
		rmdir "$d"
	fi
	mkdir "$d" && echo 1024 >"$d/size" && echo 4096 >"$d/blocksize" &&
		echo "$([ "$1" = mem ] && echo 1 || echo 0)" >"$d/memory_backed" && echo 1 >"$d/power" || return 1
	wait_for 10 test -b /dev/rsrdma_bench || return 1
	[ -d "$s" ] || mkdir "$s" && echo 1 >"$s/attr_allow_any_host"
	[ -d "$s/namespaces/1" ] || mkdir "$s/namespaces/1"
	echo /dev/rsrdma_bench >"$s/namespaces/1/device_path" && echo 1 >"$s/namespaces/1/enable" &&
		ln -s "$s" "$NVMET_CFS/ports/1/subsystems/$NQN_BENCH"
}

busy_jiffies() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }

# run_job BACKING TRANSPORT ROUND DEV "name rw bs iodepth numjobs": one fio run, one JSON line.
run_job() {
	local backing=$1 transport=$2 round=$3 dev=$4 name rw bs qd nj j0 j1 out
	read -r name rw bs qd nj <<<"$5"
	j0=$(busy_jiffies)
	out=$(cd /tmp && fio --output-format=json --name="$name" --filename="$dev" --direct=1 \
		--ioengine=io_uring --rw="$rw" --bs="$bs" --iodepth="$qd" --numjobs="$nj" \
		--group_reporting --time_based --runtime="$SECS" --ramp_time=1 --size=512m \
		--norandommap --randrepeat=0 2>/dev/null)
	j1=$(busy_jiffies)
	python3 "$RSRDMA_REPO/scripts/bench.py" record "$backing" "$transport" "$round" "$name" "$rw" "$bs" \
		"$qd" "$nj" $((j1 - j0)) "$(getconf CLK_TCK)" <<<"$out" >>"$OUTF"
	tail -n1 "$OUTF" | python3 "$RSRDMA_REPO/scripts/bench.py" show >&2
}

connect() { # TRANSPORT: prints the block device
	timeout 60 nvme connect -t "$1" -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN_BENCH" >/dev/null || return 1
	wait_for 30 nvme_dev_for_nqn "$NQN_BENCH" >/dev/null || return 1
	nvme_dev_for_nqn "$NQN_BENCH"
}

raw_rxe() { # MODE(write|read) POLL(poll|event): ib_{write,read}_bw between two processes on rxe0
	local mode=$1 poll=$2 ev=() port=$((18515 + RANDOM % 1000)) out bw
	[ "$poll" = event ] && ev=(-e)
	timeout 120 "ib_${mode}_bw" -d rxe0 -F -s 4194304 -n 64 -p "$port" "${ev[@]}" >/dev/null 2>&1 &
	sleep 1
	out=$(timeout 120 "ib_${mode}_bw" -d rxe0 -F -s 4194304 -n 64 -p "$port" "${ev[@]}" "$TARGET_ADDR" 2>&1)
	wait
	# The result line: bytes iterations BW-peak BW-average MsgRate (MB/sec, 10^6).
	bw=$(awk '$1 == 4194304 { print $4 }' <<<"$out" | tail -n1)
	note "raw rxe ib_${mode}_bw ($poll): ${bw:-?} MB/s"
	printf '{"raw": "ib_%s_bw", "poll": "%s", "msg_bytes": 4194304, "bw_mib_s": %s}\n' \
		"$mode" "$poll" "$(awk -v b="${bw:-0}" 'BEGIN { print b * 1e6 / 2^20 }')" >>"$OUTF"
}

rxe_setup && target_setup || { note "set-up failed"; exit 1; }
modprobe -a nvme-fabrics rdma_cm nvme-rdma
rsrdma_load || { note "cannot load nvme_rsrdma"; exit 1; }
printf '{"info": {"kernel": "%s", "vcpus": %d, "accel": "%s", "rounds": %d, "seconds": %d}}\n' \
	"$(uname -r)" "$CPUS" "${BENCH_ACCEL:-unknown}" "$ROUNDS" "$SECS" >>"$OUTF"

for poll in poll event; do
	raw_rxe write "$poll"
	raw_rxe read "$poll"
done

for backing in $BACKINGS; do
	bench_target "$backing" || { note "bench target ($backing) failed"; exit 1; }
	for ((r = 1; r <= ROUNDS; r++)); do
		# Interleaved A B, alternating which goes first.
		if ((r % 2)); then order="rsrdma rdma"; else order="rdma rsrdma"; fi
		for t in $order; do
			dev=$(connect "$t") || { note "connect $t failed"; exit 1; }
			note "$backing round $r: $t on $dev ($(cat "/sys/block/${dev##*/}/queue/max_hw_sectors_kb") KiB max I/O)"
			for job in "${JOBS[@]}"; do
				[ -z "${BENCH_JOBS:-}" ] || [[ " $BENCH_JOBS " == *" ${job%% *} "* ]] || continue
				run_job "$backing" "$t" "$r" "$dev" "$job"
			done
			host_disconnect_all >/dev/null
		done
	done
done
note "done"
