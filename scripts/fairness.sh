#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# How a 4 MiB stream sent over all of a controller's I/O queues treats another CPU's small I/O:
# 4 KiB random reads at QD1 pinned to CPU 0, alone and while CPU 1 writes 4 MiB blocks at QD4,
# through nvme_rsrdma against the project's own target (MDTS 8 MiB: one command per block). The
# stream's commands may go out on the reads' queue ("spread", see spread_kib); the figures are
# the reads' completion latency (p50, p99, max) and the stream's MiB/s, per round.
#
# Runs in the guest: scripts/vm.sh -- scripts/fairness.sh (FAIR_ROUNDS, FAIR_SECONDS;
# FAIR_SPREAD_KIB sets spread_kib, 0 keeping every command on its own queue).
set -u
. "$(dirname "$0")/../tests/lib/common.sh"

ROUNDS=${FAIR_ROUNDS:-3}
SECS=${FAIR_SECONDS:-8}

cleanup() {
	hostile_stop
	host_disconnect_all >/dev/null 2>&1
	host_unload >/dev/null 2>&1
	fabric_teardown >/dev/null 2>&1
}
trap cleanup EXIT

# lat_job [STREAM]: one fio run; prints "p50 p99 max reads stream_mib_s" (microseconds).
lat_job() {
	local args=(--name=small --filename="$dev" --direct=1 --ioengine=libaio --rw=randread
		--bs=4k --iodepth=1 --cpus_allowed=0 --size=32m --time_based --runtime="$SECS")
	[ -n "${1:-}" ] && args+=(--name=stream --filename="$dev" --direct=1 --ioengine=libaio
		--rw=write --bs=4m --iodepth=4 --cpus_allowed=1 --offset=64m --size=256m
		--time_based --runtime="$SECS")
	(cd /tmp && fio --output-format=json "${args[@]}") | python3 -c '
import json, sys
j = json.load(sys.stdin)["jobs"]
r = j[0]["read"]
c = r["clat_ns"]
p = c["percentile"]
bw = j[1]["write"]["bw_bytes"] / 1048576 if len(j) > 1 else 0
print("%.0f %.0f %.0f %d %.1f" % (p["50.000000"] / 1e3, p["99.000000"] / 1e3, c["max"] / 1e3,
      r["total_ios"], bw))'
}

if ! fabric_setup || ! host_load; then bail_out "set-up failed"; fi
[ -z "${FAIR_SPREAD_KIB:-}" ] || echo "$FAIR_SPREAD_KIB" >/sys/module/nvme_rsrdma/parameters/spread_kib
hostile_start --mode polite -s 512 --mdts-kib 8192 || bail_out "target did not start"
timeout 60 nvme connect -t "$HOST_TRANSPORT" -a "$TARGET_ADDR" -s "$HOSTILE_PORT" \
	-n "$HOSTILE_NQN" >/dev/null || bail_out "connect failed"
wait_for 30 nvme_dev_for_nqn "$HOSTILE_NQN" || bail_out "no namespace"
dev=$(nvme_dev_for_nqn "$HOSTILE_NQN")
q=/sys/block/${dev##*/}/queue
cat "$q/max_hw_sectors_kb" >"$q/max_sectors_kb"
ctrl=$(hostile_ctrl)
echo "fairness: $dev on $ctrl, $(nproc) CPUs, $(cat "/sys/class/nvme/$ctrl/queue_count" 2>/dev/null) queues, spread_kib $(cat /sys/module/nvme_rsrdma/parameters/spread_kib), module $(git -C "$RSRDMA_REPO" rev-parse --short HEAD 2>/dev/null)"
echo "fairness: round alone(p50 p99 max us, reads) | with a 4 MiB stream on CPU 1 (p50 p99 max us, reads, stream MiB/s)"
for r in $(seq 1 "$ROUNDS"); do
	a=$(lat_job) || bail_out "fio failed"
	b=$(lat_job stream) || bail_out "fio failed"
	echo "fairness: round $r | $a | $b"
done
awk '/^(queue| *[0-9])/ { print "fairness: stats: " $0 }' "/sys/kernel/debug/nvme_rsrdma/$ctrl/stats"
