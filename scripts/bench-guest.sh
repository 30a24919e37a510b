#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The guest side of `make bench` (run by scripts/bench.sh through scripts/vm.sh): the same fio
# jobs through nvme_rsrdma ("rsrdma"; "area" with fio's buffers in the controller's registered
# area, see AREA_JOBS) and the C nvme-rdma ("rdma") against the same kind of
# target over the same rxe device: nvmet-rdma with a null_blk namespace without and with memory
# backing, and the project's own target (tests/target, rsrdma-target: memory backed, MDTS 8 MiB,
# so that rsrdma moves 4 MiB in one command where the C driver, limited to 255 pages per
# registration, needs five); plus the raw bandwidth of rxe for each verb (perftest,
# rsrdma-target --raw-bw in event mode, and the kernel-side rsrdma_rawbw, two and four QPs).
# Both transports stay connected for a whole backing, each to a subsystem of its own (twin
# null_blk devices, or a second rsrdma-target), so that every job runs for one transport and
# then at once for the other (A B, then B A in the next round): a pair a few seconds apart,
# which the report turns into one ratio per round, instead of figures minutes apart on a
# machine whose speed drifts.
# Every measurement is one JSON object per line in $RSRDMA_OUT/bench.jsonl.
#
# Environment: BENCH_ROUNDS (4), BENCH_SECONDS per job (3), BENCH_SECONDS_LARGE per job of 1 MiB
# blocks or more (10), BENCH_BACKINGS ("null mem own device"),
# BENCH_JOBS (a subset of the job names below, default all; the own target runs OWN_JOBS),
# BENCH_RAW (1; 0 skips the raw rxe runs, for quick comparisons of the transports alone).
set -u
# shellcheck source=../tests/lib/common.sh
. "$RSRDMA_REPO/tests/lib/common.sh"

ROUNDS=${BENCH_ROUNDS:-4}
SECS=${BENCH_SECONDS:-3}
# Jobs of 4 MiB blocks complete 8 to 25 commands a second here: in 3 s, one command more or
# less moved a figure by up to 4 %, more than the differences between the transports.
SECS_LARGE=${BENCH_SECONDS_LARGE:-10}
BACKINGS=${BENCH_BACKINGS:-null mem own device}
NQN_BENCH=nqn.2026-11.io.rsrdma:bench
OUTF=$RSRDMA_OUT/bench.jsonl
RUNS=$RSRDMA_OUT/runs.txt
RUN_SEQ=0
CLK_TCK=$(getconf CLK_TCK)
CPUS=$(nproc)
: >"$OUTF"
: >"$RUNS"
mkdir -p "$RSRDMA_OUT/fio"

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
# The own target, memory backed, runs the jobs whose figures it is for: its MDTS lets nvme_rsrdma
# send 4 MiB in one command (the other jobs measured nvmet-rdma's figures again, and took the
# benchmark past 20 minutes).
OWN_JOBS="seqwrite4m seqread4m"
# These jobs also run on nvme_rsrdma with fio's buffers in the controller's registered area
# (--iomem=mmapshared:/dev/rsrdma/<controller>): the "area" runs, which send from and into the
# buffers without a copy, beside the same jobs from ordinary memory through the pool.
AREA_JOBS="iops4k seqread128k seqwrite128k seqwrite4m seqread4m"

TRANSPORTS="rsrdma rdma"
OWN_PIDS=

# The subsystem (nvmet) or the rsrdma-target instance of each transport.
sub_nqn() { echo "$NQN_BENCH-$1"; }
own_nqn() { echo "$HOSTILE_NQN-$1"; }
own_port() { [ "$1" = rsrdma ] && echo $((HOSTILE_PORT + 1)) || echo $((HOSTILE_PORT + 2)); }

bench_target_remove() {
	local t s d
	for t in $TRANSPORTS; do
		s=$NVMET_CFS/subsystems/$(sub_nqn "$t") d=$NULLB_CFS/rsrdma_bench_$t
		rm -f "$NVMET_CFS/ports/1/subsystems/$(sub_nqn "$t")" 2>/dev/null
		if [ -d "$s" ]; then
			echo 0 >"$s/namespaces/1/enable"
			rmdir "$s/namespaces/1" "$s"
		fi
		if [ -d "$d" ]; then
			echo 0 >"$d/power"
			rmdir "$d"
		fi
	done
	return 0
}

own_stop() {
	local p
	for p in $OWN_PIDS; do
		target_kill "$p"
	done
	OWN_PIDS=
}

cleanup() {
	host_disconnect_all >/dev/null 2>&1
	own_stop >/dev/null 2>&1
	rsrdma_unload >/dev/null 2>&1
	module_unload nvme_rdma >/dev/null 2>&1
	module_unload nvme >/dev/null 2>&1
	rmmod rsrdma_p2pmem >/dev/null 2>&1
	bench_target_remove >/dev/null 2>&1
	target_teardown >/dev/null 2>&1
	fabric_teardown >/dev/null 2>&1
}
trap cleanup EXIT

note() { echo "bench: $*" >&2; }

# The benchmark namespaces: per transport a null_blk "rsrdma_bench_<transport>" (512 MiB,
# 4 KiB blocks), memory backed or not, exported as $NQN_BENCH-<transport> on port 1 next to the
# test subsystems.
bench_target() { # null|mem
	local t d s backed=0
	[ "$1" = mem ] && backed=1
	bench_target_remove
	for t in $TRANSPORTS; do
		d=$NULLB_CFS/rsrdma_bench_$t s=$NVMET_CFS/subsystems/$(sub_nqn "$t")
		mkdir "$d" && echo 512 >"$d/size" && echo 4096 >"$d/blocksize" &&
			echo "$backed" >"$d/memory_backed" &&
			echo 1 >"$d/power" || return 1
		wait_for 10 test -b "/dev/rsrdma_bench_$t" || return 1
		mkdir "$s" && echo 1 >"$s/attr_allow_any_host" && mkdir "$s/namespaces/1" &&
			echo "/dev/rsrdma_bench_$t" >"$s/namespaces/1/device_path" &&
			echo 1 >"$s/namespaces/1/enable" &&
			ln -s "$s" "$NVMET_CFS/ports/1/subsystems/$(sub_nqn "$t")" || return 1
	done
}

# One rsrdma-target per transport (memory backed, 512 MiB, MDTS 8 MiB).
own_start() {
	local t rc
	for t in $TRANSPORTS; do
		target_launch "$(own_port "$t")" "$(own_nqn "$t")" "/tmp/rsrdma-bench-target-$t.log" \
			"/tmp/rsrdma-bench-target-$t.vlog" --mode polite -s 512 --mdts-kib 8192
		rc=$?
		OWN_PIDS="$OWN_PIDS $LAUNCHED_PID"
		((rc == 0)) || return 1
	done
}

# The checkpoint of the two data paths for device memory: DEVICE_BLOCKS blocks of 4 MiB in
# device memory, written to the 4 MiB target and read back into device memory by
# scripts/checkpoint.py, four blocks in flight (as the 4 MiB fio jobs), from each of the two stand-ins scripts/vm.sh attaches: an ivshmem BAR
# of host RAM published by the test-only tests/p2pmem driver ("device-ram": memory the CPU
# reaches at memory speed, as a NIC's DMA reaches real device memory), and the emulated NVMe
# controller's memory buffer published by the NVMe PCI driver ("device-cmb": emulated MMIO,
# reached one access at a time). nvme_rsrdma sends them straight from device memory and
# writes them straight into it ("rsrdma"); the host CPU path stages each block through DRAM with
# a CPU copy and moves it with the C nvme-rdma ("rdma", checkpoint.py --stage), which cannot take
# device memory. Both against rsrdma-target, one after the other in each round (A B, then B A).
# nvme_core is reloaded with multipath=N (a 6.12 multipath head takes no P2PDMA pages).
DEVICE_BLOCKS=${BENCH_DEVICE_BLOCKS:-8}
p2p_provider() { # DRIVER
	local d
	for d in "/sys/bus/pci/drivers/$1"/0000:*; do
		[ "$(cat "$d/p2pmem/published" 2>/dev/null)" = 1 ] && { echo "${d##*/}"; return 0; }
	done
	return 1
}
device_bench() {
	local m t r bdf out wr rd ok order dev stage kind drv
	declare -A ddevs=()
	rsrdma_unload || { note "device: cannot unload nvme_rsrdma"; return 1; }
	for m in nvme_rdma nvme_fabrics nvme nvme_core; do
		module_unload "$m" || { note "device: cannot unload $m"; return 1; }
	done
	if ! modprobe nvme_core multipath=N || ! modprobe -a nvme nvme-fabrics nvme-rdma || ! rsrdma_load; then
		note "device: cannot load the NVMe modules"
		return 1
	fi
	insmod "$RSRDMA_REPO/out/p2pmem/rsrdma_p2pmem.ko" || note "device: no RAM-backed provider (make p2pmem)"
	wait_for 30 p2p_provider nvme >/dev/null || note "device: the NVMe controller publishes no p2pmem"
	# Both registered by the connections set up below.
	own_start || { note "device: rsrdma-target did not start"; return 1; }
	for t in $TRANSPORTS; do
		ddevs[$t]=$(connect "$t" "$(own_port "$t")" "$(own_nqn "$t")") ||
			{ note "device: connect $t failed"; return 1; }
	done
	for kind in ram cmb; do
		drv=$([ "$kind" = ram ] && echo rsrdma_p2pmem || echo nvme)
		bdf=$(p2p_provider "$drv") || { note "device-$kind: no provider"; continue; }
		note "device-$kind: peer memory of $bdf, $(($(cat "/sys/bus/pci/devices/$bdf/p2pmem/size") >> 20)) MiB"
		for ((r = 1; r <= ROUNDS; r++)); do
			order=$TRANSPORTS
			((r % 2)) || order=$(echo "$TRANSPORTS" | awk '{ for (i = NF; i > 0; i--) printf "%s ", $i }')
			for t in $order; do
				dev=${ddevs[$t]} stage=()
				[ "$t" = rdma ] && stage=(--stage)
				out=$(python3 "$RSRDMA_REPO/scripts/checkpoint.py" "$dev" --memory device --device "$bdf" \
					--blocks "$DEVICE_BLOCKS" --block-size 4M --offset "$((r * 64))M" --depth 4 \
					"${stage[@]}" 2>&1)
				wr=$(sed -n 's/^write: .*, \([0-9.]*\) MiB\/s$/\1/p' <<<"$out")
				rd=$(sed -n 's/^read: .*, \([0-9.]*\) MiB\/s$/\1/p' <<<"$out")
				ok=$(grep -c "^verified: $DEVICE_BLOCKS of $DEVICE_BLOCKS blocks" <<<"$out")
				note "device-$kind $t round $r: write ${wr:-?} MiB/s, read ${rd:-?} MiB/s, $(grep '^verified' <<<"$out")"
				if [ -z "$wr" ] || [ -z "$rd" ] || [ "$ok" != 1 ]; then
					printf '{"backing": "device-%s", "transport": "%s", "round": %d, "job": "checkpoint", "error": "%s"}\n' \
						"$kind" "$t" "$r" "$(tr '"\n' "' " <<<"$out" | cut -c1-300)" >>"$OUTF"
					continue
				fi
				printf '{"backing": "device-%s", "transport": "%s", "round": %d, "job": "ckptwrite4m", "iops": %s, "bw_mib_s": %s}\n' \
					"$kind" "$t" "$r" "$(awk -v b="$wr" 'BEGIN { print b / 4 }')" "$wr" >>"$OUTF"
				printf '{"backing": "device-%s", "transport": "%s", "round": %d, "job": "ckptread4m", "iops": %s, "bw_mib_s": %s}\n' \
					"$kind" "$t" "$r" "$(awk -v b="$rd" 'BEGIN { print b / 4 }')" "$rd" >>"$OUTF"
			done
		done
	done
	host_disconnect_all >/dev/null
	own_stop
	rsrdma_unload
	for m in nvme_rdma nvme_fabrics nvme nvme_core; do
		module_unload "$m"
	done
	rmmod rsrdma_p2pmem 2>/dev/null
	# The other backings, if any come after, load the modules again with their defaults.
	modprobe -a nvme-fabrics nvme-rdma && rsrdma_load
}

busy_jiffies() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }

# rxe_retries: the times soft-RoCE's requesters sent again what was not acknowledged in time
# (the target's RDMA READ of a write's data, after rdma_cm's ACK timeout for RoCE: 537 ms).
rxe_retries() { cat "/sys/class/infiniband/$RDMA_LINK/ports/1/hw_counters/completer_retry_err" 2>/dev/null || echo 0; }

# copied_moved STATS: "COPIED MOVED", the I/O queues' data bytes copied through the pool and
# moved in all (from the area, from their own pages, through the pool), from a controller's
# debugfs (data_bytes).
copied_moved() {
	local area pages copied
	read -r area pages copied < <(data_bytes "$1")
	# In the shell's 64-bit arithmetic: awk would print large sums in floating point.
	echo "$copied $((area + pages + copied))"
}

# run_job BACKING TRANSPORT ROUND DEV "name rw bs iodepth numjobs": one fio run, its JSON output
# in $RSRDMA_OUT/fio/ and a line in $RUNS for the host's `bench.py record` (Python's start-up
# alone takes 1-3 s here, which once per run added minutes to the benchmark). TRANSPORT "area"
# is nvme_rsrdma (DEV its namespace) with fio's buffers in the controller's registered area
# ($AREA_DEV); for it and "rsrdma", the bytes copied and moved during the run ($AREA_STATS, the
# controller's debugfs) go in the line too. It runs RUN_SECS seconds if set, else SECS, or
# SECS_LARGE for blocks of 1 MiB or more.
run_job() {
	local backing=$1 transport=$2 round=$3 dev=$4 name rw bs qd nj j0 j1 out c0 m0 c1 m1 r0 secs
	read -r name rw bs qd nj <<<"$5"
	secs=${RUN_SECS:-$SECS}
	[ -n "${RUN_SECS:-}" ] || [[ $bs != *m ]] || secs=$SECS_LARGE
	# One job per vCPU means one on each: left to the scheduler, two jobs sometimes share a
	# vCPU (and so one queue) and the figure halves, for either transport.
	local pin=() mem=()
	((nj > 1)) && pin=(--cpus_allowed="0-$((CPUS - 1))" --cpus_allowed_policy=split)
	# Each job maps the area from its start: with several, their buffers are the same memory,
	# which is harmless for a benchmark that checks no data.
	[ "$transport" = area ] && mem=(--iomem="mmapshared:$AREA_DEV")
	out=fio/$backing-$transport-$round-$name-$((++RUN_SEQ)).json
	c0=- m0=- c1=- m1=-
	[ "$transport" = rdma ] || read -r c0 m0 < <(copied_moved "$AREA_STATS")
	r0=$(rxe_retries)
	j0=$(busy_jiffies)
	(cd /tmp && fio --output-format=json --name="$name" --filename="$dev" --direct=1 \
		--ioengine=io_uring --rw="$rw" --bs="$bs" --iodepth="$qd" --numjobs="$nj" "${pin[@]}" \
		"${mem[@]}" --group_reporting --time_based --runtime="$secs" --ramp_time=1 --size=512m \
		--norandommap --randrepeat=0 >"$RSRDMA_OUT/$out" 2>/dev/null)
	j1=$(busy_jiffies)
	[ "$transport" = rdma ] || read -r c1 m1 < <(copied_moved "$AREA_STATS")
	local copied=- moved=-
	[ "$c0" = - ] || [ "$c1" = - ] || copied=$((c1 - c0)) moved=$((m1 - m0))
	echo "$backing $transport $round $name $rw $bs $qd $nj $((j1 - j0)) $CLK_TCK $out $copied $moved" >>"$RUNS"
	note "$backing $transport round $round $name: done ($secs s, rxe retries $(($(rxe_retries) - r0)))"
}

connect() { # TRANSPORT PORT NQN: prints the block device
	local dev q
	timeout 60 nvme connect -t "$1" -a "$TARGET_ADDR" -s "$2" -n "$3" >/dev/null || return 1
	wait_for 30 nvme_dev_for_nqn "$3" >/dev/null || return 1
	dev=$(nvme_dev_for_nqn "$3")
	# Let the block layer build commands as large as the transport and target allow (its
	# default stops at 1280 KiB).
	q=/sys/block/${dev##*/}/queue
	cat "$q/max_hw_sectors_kb" >"$q/max_sectors_kb" 2>/dev/null
	echo "$dev"
}

# raw_record NAME TOOL VERB POLL QPS MIB_S LOG: says one raw run's result (or that it gave
# none, see LOG) and records it.
raw_record() {
	local name=$1 tool=$2 verb=$3 poll=$4 qps=$5 bw=$6 log=$7
	note "raw rxe RDMA $verb ($tool, $poll, $qps QP): ${bw:-?} MiB/s$([ -n "$bw" ] || echo " (no result: $log)")"
	[ -n "$bw" ] || return 0
	printf '{"raw": "%s", "tool": "%s", "verb": "%s", "poll": "%s", "qps": %d, "msg_bytes": 4194304, "bw_mib_s": %s}\n' \
		"$name" "$tool" "$verb" "$poll" "$qps" "$bw" >>"$OUTF"
}

# raw_rxe MODE(write|read) POLL(poll|event) QPS: ib_{write,read}_bw between two processes on
# rxe0, 4 MiB messages over QPS queue pairs. perftest's output is kept in $RSRDMA_OUT.
raw_rxe() {
	local mode=$1 poll=$2 qps=$3 args port=$((18515 + RANDOM % 1000)) out bw
	local log=$RSRDMA_OUT/raw-ib_${mode}_bw-$poll-q$qps.txt
	args=(-d rxe0 -F -s 4194304 -n 64 -q "$qps" -p "$port")
	[ "$poll" = event ] && args+=(-e)
	timeout 120 "ib_${mode}_bw" "${args[@]}" >"$log.server" 2>&1 &
	sleep 1
	out=$(timeout 120 "ib_${mode}_bw" "${args[@]}" "$TARGET_ADDR" 2>&1)
	wait
	echo "$out" >"$log"
	# The result line: bytes iterations BW-peak BW-average MsgRate (MB/sec, 10^6).
	bw=$(awk '$1 == 4194304 && $4 ~ /^[0-9.]+$/ { printf "%.1f", $4 * 1e6 / 2^20 }' <<<"$out" |
		tail -n1)
	raw_record "ib_${mode}_bw" perftest "$mode" "$poll" "$qps" "$bw" "$log"
}

# raw_own MODE(write|read) QPS: the same in event mode for both verbs (perftest has no event
# mode for RDMA WRITE, the verb that moves NVMe read data): rsrdma-target --raw-bw connects
# QPS queue pairs to itself and keeps two 4 MiB messages in flight on each for 5 s.
raw_own() {
	local mode=$1 qps=$2 port=$((17515 + RANDOM % 1000)) out bw
	local log=$RSRDMA_OUT/raw-rsrdma-target-$mode-q$qps.txt
	out=$(timeout 60 "$HOSTILE_BIN" -a "$TARGET_ADDR" -p "$port" --raw-bw "$mode" --qps "$qps" \
		--msg-bytes 4194304 --seconds 5 2>&1)
	echo "$out" >"$log"
	bw=$(sed -n 's/^raw: .*: \([0-9.]*\) MiB\/s.*/\1/p' <<<"$out" | tail -n1)
	raw_record "rdma_$mode" rsrdma-target "$mode" event "$qps" "$bw" "$log"
}

# raw_kernel MODE(write|read) QPS: the same from the kernel, the way the transports move data
# (scripts/rawbw/rsrdma_rawbw.c, built by `make rawbw`): kernel memory, a region registered
# once, completions polled in softirq context. It connects QPS queue pairs to itself and keeps
# two 4 MiB messages in flight on each for 5 s after a second of warm-up.
raw_kernel() {
	local mode=$1 qps=$2 ko=$RSRDMA_REPO/out/rawbw/rsrdma_rawbw.ko bw=
	local log=$RSRDMA_OUT/raw-kernel-$mode-q$qps.txt
	if [ ! -f "$ko" ]; then
		echo "no $ko: make rawbw builds it" >"$log"
		raw_record "rdma_$mode" kernel "$mode" softirq "$qps" "" "$log"
		return 0
	fi
	rmmod rsrdma_rawbw 2>/dev/null
	dmesg_mark
	if timeout 60 insmod "$ko" addr="$TARGET_ADDR" port=$((16515 + RANDOM % 1000)) \
		verb="$mode" qps="$qps" depth=2 msg_kib=4096 secs=5 >"$log" 2>&1; then
		bw=$(awk '{ printf "%.1f", $1 / 1024 }' /sys/module/rsrdma_rawbw/parameters/result_kib_s)
	fi
	dmesg_since_mark | grep rsrdma_rawbw >>"$log"
	# Loaded from the tree, not installed: modprobe -r does not know it.
	rmmod rsrdma_rawbw 2>/dev/null
	raw_record "rdma_$mode" kernel "$mode" softirq "$qps" "$bw" "$log"
}

if ! fabric_setup || ! target_setup; then
	note "set-up failed"
	exit 1
fi
modprobe -a nvme-fabrics rdma_cm nvme-rdma
rsrdma_load || { note "cannot load nvme_rsrdma"; exit 1; }
# The controllers' counters of copied bytes.
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
netdev_mtu=$(cat "/sys/class/net/$RDMA_NETDEV/mtu")
roce_mtu=$(ibv_devinfo -d "$RDMA_LINK" | awk '/active_mtu/ { print $2; exit }')
note "rxe on $RDMA_NETDEV: netdev MTU $netdev_mtu, RoCE MTU ${roce_mtu:-?}"
# The idle loop: halt (the default) or idle=poll (make bench BENCH_IDLE=poll). The clock is
# "icount" when BENCH_ICOUNT_SHIFT is set (make bench BENCH_CLOCK=icount), else "real".
idle=$(sed -n 's/.*\bidle=\([a-z]*\).*/\1/p' /proc/cmdline)
clock=${BENCH_ICOUNT_SHIFT:+icount}
printf '{"info": {"kernel": "%s", "vcpus": %d, "accel": "%s", "clock": "%s", "icount_shift": %s, "idle": "%s", "rounds": %d, "seconds": %d, "seconds_large": %d, "netdev_mtu": %s, "roce_mtu": %s}}\n' \
	"$(uname -r)" "$CPUS" "${BENCH_ACCEL:-unknown}" "${clock:-real}" "${BENCH_ICOUNT_SHIFT:-null}" \
	"${idle:-halt}" "$ROUNDS" "$SECS" "$SECS_LARGE" \
	"${netdev_mtu:-null}" "${roce_mtu:-null}" >>"$OUTF"

# perftest has no event mode for RDMA WRITE ("Events feature not available on WRITE verb"),
# and its polling RDMA READ stays below its event mode one: polling WRITE and event READ over
# two QPs, then both verbs in event mode through rsrdma-target, and from the kernel, over two
# and four QPs (one QP is never the best; leaving it out keeps the whole run under 20 minutes).
if [ "${BENCH_RAW:-1}" = 1 ]; then
	raw_rxe write poll 2
	raw_rxe read event 2
	for qps in 2 4; do
		raw_own write "$qps"
		raw_own read "$qps"
		raw_kernel write "$qps"
		raw_kernel read "$qps"
	done
fi

for backing in $BACKINGS; do
	if [ "$backing" = device ]; then
		device_bench || note "device memory checkpoint failed"
		continue
	fi
	if [ "$backing" = own ]; then
		own_start || { note "rsrdma-target did not start"; exit 1; }
		jobs=$OWN_JOBS
	else
		bench_target "$backing" || { note "bench target ($backing) failed"; exit 1; }
		jobs=
	fi
	declare -A devs=()
	AREA_DEV='' AREA_STATS=''
	for t in $TRANSPORTS; do
		if [ "$backing" = own ]; then
			port=$(own_port "$t") nqn=$(own_nqn "$t")
		else
			port=$TARGET_PORT nqn=$(sub_nqn "$t")
		fi
		if ! devs[$t]=$(connect "$t" "$port" "$nqn"); then
			note "connect $t to the $backing target failed"
			printf '{"backing": "%s", "transport": "%s", "round": 0, "job": "connect", "error": "connect failed"}\n' \
				"$backing" "$t" >>"$OUTF"
			unset "devs[$t]"
			continue
		fi
		if [ "$t" = rsrdma ]; then
			c=$(ctrl_for "$nqn")
			AREA_DEV=/dev/rsrdma/${c##*/} AREA_STATS=/sys/kernel/debug/nvme_rsrdma/${c##*/}/stats
			[ -c "$AREA_DEV" ] || note "$backing: no registered area at $AREA_DEV"
		fi
		max_kb=$(cat "/sys/block/${devs[$t]##*/}/queue/max_sectors_kb")
		# The hardware queues of the controller's path device (the multipath head has none).
		nq=$(hw_queues "$(ctrl_for "$nqn")")
		note "$backing: $t on ${devs[$t]} ($max_kb KiB max I/O, $nq I/O queues)"
		printf '{"max_io": {"backing": "%s", "transport": "%s", "kib": %d, "io_queues": %d}}\n' \
			"$backing" "$t" "$max_kb" "$nq" >>"$OUTF"
	done
	for ((r = 1; r <= ROUNDS; r++)); do
		k=0
		for job in "${JOBS[@]}"; do
			[ -z "${BENCH_JOBS:-}" ] || [[ " $BENCH_JOBS " == *" ${job%% *} "* ]] || continue
			[ -z "$jobs" ] || [[ " $jobs " == *" ${job%% *} "* ]] || continue
			# A B, then B A for the next job and the next round: with an even number of
			# rounds each transport goes first in half of every job's pairs. Going first
			# is not neutral: the first run of a pair follows a different job; 4 KiB
			# random writes on null came out at 0.92x when nvme_rsrdma led and 1.05x
			# when the C driver led (Documentation/testing.rst).
			# The area runs, where the job has one, go beside the rsrdma runs.
			if (((r + k++) % 2)); then order="rsrdma area rdma"; else order="rdma area rsrdma"; fi
			for t in $order; do
				if [ "$t" = area ]; then
					[[ " $AREA_JOBS " == *" ${job%% *} "* ]] && [ -n "${devs[rsrdma]:-}" ] &&
						[ -c "${AREA_DEV:-}" ] &&
						run_job "$backing" area "$r" "${devs[rsrdma]}" "$job"
					continue
				fi
				[ -n "${devs[$t]:-}" ] && run_job "$backing" "$t" "$r" "${devs[$t]}" "$job"
			done
		done
	done
	host_disconnect_all >/dev/null
	unset devs
	[ "$backing" != own ] || own_stop
done
# BENCH_PROFILE=1: where the time goes, for each transport: perf over the whole guest (-a -g)
# for 6 s of the 4 KiB QD32 random read job (or BENCH_PROFILE_JOB) against the null target;
# the top symbols and modules go to $RSRDMA_OUT/profile-<transport>.txt.
if [ "${BENCH_PROFILE:-0}" = 1 ]; then
	echo -1 >/proc/sys/kernel/perf_event_paranoid
	echo 0 >/proc/sys/kernel/kptr_restrict
	pjob=${BENCH_PROFILE_JOB:-iops4k}
	bench_target null || { note "bench target (null) failed"; exit 1; }
	# perf report of transport $1's samples, with the out-of-tree module's symbols from kallsyms.
	# -g none: the shares only, without call chains (whose lines would pass for rows below).
	preport() { perf report -i "/tmp/perf.$1" --kallsyms=/proc/kallsyms --no-children -g none "${@:2}"; }
	# perf_ctl COMMAND: a command to the running perf record, answered once perf has done it.
	perf_ctl() {
		echo "$1" >&"$pctl"
		local ack
		read -r -t 120 -u "$pack" ack && [ "$ack" = ack ]
	}
	for t in $TRANSPORTS; do
		dev=$(connect "$t" "$TARGET_PORT" "$(sub_nqn "$t")") || { note "connect $t failed"; exit 1; }
		for job in "${JOBS[@]}"; do
			[ "${job%% *}" = "$pjob" ] || continue
			# perf starts with its events off and samples only between enable and disable:
			# started as "perf record -- sleep 6" during the job, it sampled an idle guest
			# while the job ran (its own start-up under load, it seems, outlasted the window).
			rm -f /tmp/perf.ctl /tmp/perf.ack
			mkfifo /tmp/perf.ctl /tmp/perf.ack
			exec {pctl}<>/tmp/perf.ctl {pack}<>/tmp/perf.ack
			perf record -q -a -g -D -1 --control fd:"$pctl","$pack" -o "/tmp/perf.$t" \
				-- sleep 600 >/dev/null 2>&1 &
			perf_pid=$!
			perf_ctl ping || note "perf for $t did not start"
			RUN_SECS=14 run_job profile "$t" 1 "$dev" "$job" &
			sleep 5
			perf_ctl enable || note "perf for $t did not enable its events"
			sleep 6
			perf_ctl disable || note "perf for $t did not disable its events"
			kill -INT "$perf_pid"
			wait
			exec {pctl}>&- {pack}>&-
		done
		host_disconnect_all >/dev/null
		{
			echo "== $t, $pjob: share of samples by module"
			preport "$t" --sort dso --stdio 2>/dev/null |
				grep -E '^ +[0-9]' | head -n 15
			echo "== $t, $pjob: top symbols (self)"
			preport "$t" --sort dso,symbol --stdio 2>/dev/null |
				grep -E '^ +[0-9]' | head -n 40
			mod=$([ "$t" = rsrdma ] && echo nvme_rsrdma || echo nvme_rdma)
			echo "== $t, $pjob: the transport's own functions (share of all samples)"
			preport "$t" --sort symbol --dsos "[$mod]" \
				--percentage absolute --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -n 12
		} >"$RSRDMA_OUT/profile-$t.txt"
		note "profile of $t: $(grep -c . "$RSRDMA_OUT/profile-$t.txt") lines in profile-$t.txt"
	done
fi
note "done"
