#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# rsrdma-timeout: 900
#
# Data moved through the rsrdma transport: fio with crc32c verification over random reads and
# writes from 512 bytes to 4 MiB and mixed sizes, on both I/O queues and several queue depths,
# with more large I/O in flight than the pool's large area holds; an ext4 file round trip through
# the page cache; a file-backed namespace; write zeroes, discard, flush and a passthrough read;
# namespaces added and removed while connected (asynchronous events); in-capsule writes; QD1
# reads completed from a self-interrupt; a disconnect with I/O in flight.
set -u
. "$(dirname "$0")/lib/common.sh"

# Two jobs, one per CPU; for fio_verify, each in a region of its own (blocks of different sizes
# from the two jobs would overlap and tear each other's pattern).
SPLIT=(--numjobs=2 --cpus_allowed=0-1 --cpus_allowed_policy=split --offset_increment=64m)

cleanup() {
	mountpoint -q /tmp/rsrdma-mnt && umount /tmp/rsrdma-mnt
	teardown_all
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# The NVMe core's nvme_setup_cmd trace event, one line per command sent.
TRACING=/sys/kernel/tracing
trace_cmds() { # 1|0: the event on (the trace cleared) or off; 1 if the kernel has no such event
	mountpoint -q "$TRACING" || mount -t tracefs nodev "$TRACING" 2>/dev/null
	[ -e "$TRACING/events/nvme/nvme_setup_cmd/enable" ] || return 1
	(($1)) && echo >"$TRACING/trace"
	echo "$1" >"$TRACING/events/nvme/nvme_setup_cmd/enable"
}

# The queue IDs commands went to during a short fio run: "qid=N count" per queue. The
# namespace's I/O queues are qid 1 and up.
queues_used() { # DEV
	trace_cmds 1 || { echo "no nvme trace events"; return; }
	# Reads and writes: with write queues (min_io_queues) they go on different queues.
	fio --name=spread --filename="$1" --direct=1 --rw=randrw --bs=4k --iodepth=8 --size=8m \
		--runtime=2 --time_based "${SPLIT[@]}" >/dev/null 2>&1
	trace_cmds 0
	grep -o 'qid=[0-9]*' "$TRACING/trace" | sort | uniq -c | awk '{ print $2, $1 }'
}

ktap_print_header
ktap_set_plan 25

if ! fabric_setup || ! target_setup || ! host_load; then
	bail_out "set-up failed"
fi
dmesg_mark
baseline=$(rdma_counts)
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
timeout 60 nvme connect -t "$HOST_TRANSPORT" -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN_NULL" | ktap_diag
wait_for 30 nvme_dev_for_nqn "$NQN_NULL" >/dev/null
dev=$(nvme_dev_for_nqn "$NQN_NULL")
ctrl=$(dirname "$(grep -lx "$NQN_NULL" /sys/class/nvme/nvme*/subsysnqn | head -n1)")
pdev=$(path_dev "$ctrl")
ktap_diag "device $dev, path $pdev, controller ${ctrl##*/}"

# nvmet-rdma advertises an MDTS of 1 MiB: the core clamps our 4 MiB transport limit to it.
kb=$(cat "/sys/block/${dev##*/}/queue/max_hw_sectors_kb" 2>/dev/null)
ktap_diag "max_hw_sectors_kb $kb (transport limit 4096, target MDTS 1 MiB)"
ktap_check "transfer size limited by the target's MDTS" test "$kb" = 1024

ktap_check "fio verify 512 B, QD1" fio_verify "$dev" --bs=512 --iodepth=1 --size=2m
ktap_check "fio verify 4 KiB, QD32, 2 jobs" fio_verify "$dev" --bs=4k --iodepth=32 "${SPLIT[@]}"
ktap_check "fio verify 128 KiB, QD8" fio_verify "$dev" --bs=128k --iodepth=8
ktap_check "fio verify 1 MiB, QD4, 2 jobs" fio_verify "$dev" --bs=1m --iodepth=4 "${SPLIT[@]}"
# 4 MiB commands exist only against rsrdma-target (06-hostile, 11-area): here each block is four.
ktap_check "fio verify 4 MiB blocks (1 MiB commands), QD2" fio_verify "$dev" --bs=4m --iodepth=2 --size=64m
ktap_check "fio verify mixed sizes, QD16, 2 jobs" fio_verify "$dev" \
	--bssplit=512/10:4k/45:16k/10:128k/20:1m/10:4m/5 --iodepth=16 "${SPLIT[@]}"
# 64 x 1 MiB in flight: far more than the large area of the pool holds at once, so requests
# wait for room (and are retried by blk-mq) instead of failing or deadlocking.
ktap_check "fio verify 1 MiB, QD32, 2 jobs (pool large area exhausted)" fio_verify "$dev" \
	--bs=1m --iodepth=32 --size=64m "${SPLIT[@]}"

counts=$(queues_used "$dev")
ktap_diag "commands per queue: $(tr '\n' ' ' <<<"$counts")"
io_queues=$(grep -c '^qid=[1-9]' <<<"$counts")
nr_io=$(hw_queues "$ctrl")
ktap_diag "$io_queues of $nr_io I/O queues used"
ktap_check "I/O went through every I/O queue" test "$io_queues" -ge 2 -a "$io_queues" = "$nr_io"

# --- statistics ---------------------------------------------------------------------------------
stats=/sys/kernel/debug/nvme_rsrdma/${ctrl##*/}/stats
ktap_diag "$(cat "$stats" 2>&1)"
stats_ok() {
	local f=$1
	grep -qE '^rkey: 0x[0-9a-f]*[1-9a-f]' "$f" || return 1
	grep -qE '^state: Live' "$f" || return 1
	# Slots are counted when taken and returned: none in use once idle, some at the peak.
	grep -qE '^pool slots in use: 0 \(high-water [1-9]' "$f" || return 1
	# Every I/O queue moved data, reads and writes went out (on the same queues, or on read
	# and write queues), nothing in flight once idle.
	awk '$1 ~ /^[1-9][0-9]*$/ { q++; r += $3; w += $4; if ($3 + $4 > 0 && $6 + $7 > 0 && $8 == 0) ok++ }
		END { exit !(q >= 2 && ok == q && r > 0 && w > 0) }' "$f"
}
ktap_check "debugfs statistics: RKEY, per-queue commands and bytes, nothing in flight" stats_ok "$stats"
# The verified runs of 128 KiB and more went out on both I/O queues, not only their own
# (spread_kib, 128 by default): their data above read back intact.
# shellcheck disable=SC2016 # an awk program
ktap_check "large transfers were spread over the I/O queues (debugfs 'spread')" \
	awk '$1 ~ /^[12]$/ && $10 > 0 { n++ } END { exit !(n >= 1) }' "$stats"

# --- ext4 through the page cache ---------------------------------------------------------------
ext4_round_trip() {
	local mnt=/tmp/rsrdma-mnt i
	mkdir -p "$mnt"
	mkfs.ext4 -q -F "$dev" || return 1
	mount "$dev" "$mnt" || return 1
	for i in $(seq 1 24); do
		head -c $((RANDOM * 40 + i * 4096)) /dev/urandom >"$mnt/f$i" || return 1
	done
	mkdir -p "$mnt/dir" && cp "$mnt/f1" "$mnt/f2" "$mnt/dir/"
	(cd "$mnt" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >/tmp/rsrdma-sums
	ktap_diag "$(du -sh "$mnt" | cut -f1) in $(wc -l </tmp/rsrdma-sums) files written"
	umount "$mnt" || return 1
	echo 3 >/proc/sys/vm/drop_caches
	mount "$dev" "$mnt" || return 1
	(cd "$mnt" && sha256sum --quiet -c /tmp/rsrdma-sums) 2>&1 | ktap_diag
	local rc=${PIPESTATUS[0]}
	umount "$mnt" || return 1
	return "$rc"
}
ktap_check "ext4 files read back after dropping caches match" ext4_round_trip

# --- file-backed namespace ---------------------------------------------------------------------
timeout 60 nvme connect -t "$HOST_TRANSPORT" -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN_FILE" | ktap_diag
if wait_for 30 nvme_dev_for_nqn "$NQN_FILE" >/dev/null; then
	fdev=$(nvme_dev_for_nqn "$NQN_FILE")
	ktap_check "fio verify on a file-backed namespace" fio_verify "$fdev" --bs=4k --iodepth=8
else
	ktap_diag "fio verify on a file-backed namespace: no namespace for $NQN_FILE"
	ktap_test_fail "fio verify on a file-backed namespace"
fi

# --- commands besides read and write -------------------------------------------------------------
# Write Zeroes (no data, the range in the command) on the null_blk namespace; Dataset Management,
# whose range list is the request's special payload, on the file-backed one, where the target
# punches a hole in its tmpfs file; Flush (nvmet reports a volatile write cache) and a read
# passed through by nvme-cli. Each must reach the target with its own range: what lies outside it
# stays as written, and the commands show in the core's nvme_setup_cmd trace.
PAT=/tmp/rsrdma-pat BACK=/tmp/rsrdma-back
head -c $((8 << 20)) /dev/urandom >"$PAT"
traced() { # OPCODE_NAME: the trace has such a command; its first ones as diagnostics
	grep -o "cmd=($1 [^)]*" "$TRACING/trace" | head -n 3 | ktap_diag
	grep -q "cmd=($1 " "$TRACING/trace"
}
mib() { dd if="$1" bs=1M skip="$2" count="$3" status=none; } # FILE OFFSET_MIB LENGTH_MIB
# has_hole FILE: its first 8 MiB are the pattern, except [2, 4) MiB, which is all zeros.
has_hole() {
	cmp -s <(mib "$1" 0 2) <(mib "$PAT" 0 2) && cmp -s <(mib "$1" 2 2) <(mib /dev/zero 0 2) &&
		cmp -s <(mib "$1" 4 4) <(mib "$PAT" 4 4)
}
dev_has_hole() { dd if="$1" of="$BACK" bs=1M count=8 iflag=direct status=none && has_hole "$BACK"; }
write_zeroes() {
	local rc
	trace_cmds 1
	dd if="$PAT" of="$dev" bs=1M oflag=direct status=none &&
		blkdiscard -z -o $((2 << 20)) -l $((2 << 20)) "$dev" && dev_has_hole "$dev"
	rc=$?
	trace_cmds 0
	traced nvme_cmd_write_zeroes && return $rc
}
ktap_check "write zeroes: the range reads back as zeros, the data around it intact" write_zeroes
# On the target's side the discarded range is a hole in the file: 2 MiB fewer allocated.
discard() {
	local img=$TARGET_TMPFS/file.img before after rc
	trace_cmds 1
	dd if="$PAT" of="$fdev" bs=1M oflag=direct status=none && before=$(stat -c %b "$img") &&
		blkdiscard -o $((2 << 20)) -l $((2 << 20)) "$fdev" && after=$(stat -c %b "$img") &&
		dev_has_hole "$fdev" && has_hole "$img" && ((before - after == 4096))
	rc=$?
	trace_cmds 0
	ktap_diag "target file: ${before:-?} blocks of 512 B before the discard, ${after:-?} after"
	traced nvme_cmd_dsm && return $rc
}
ktap_check "discard: the target frees exactly the range, the data around it intact" discard
passthrough() {
	local rc
	trace_cmds 1
	nvme flush "$dev" -n 1 2>&1 | ktap_diag && ((PIPESTATUS[0] == 0)) &&
		nvme read "$dev" -n 1 -s 0 -c 15 -z 8192 -d "$BACK" 2>&1 | ktap_diag &&
		((PIPESTATUS[0] == 0)) && cmp -s -n 8192 "$BACK" "$PAT"
	rc=$?
	trace_cmds 0
	traced nvme_cmd_flush && return $rc
}
ktap_check "flush and a passthrough read (nvme-cli) succeed, the read returns the data" passthrough
rm -f "$PAT" "$BACK"

# --- namespace changes: asynchronous events ------------------------------------------------------
# The target adds a namespace to a connected subsystem, then disables it: each change reaches
# the host as an asynchronous event on the admin queue (the transport keeps one Asynchronous
# Event Request posted there), and the core rescans. The second change needs the request the
# host posts again after the first event.
NS2=$NVMET_CFS/subsystems/$NQN_NULL2/namespaces/2
timeout 60 nvme connect -t "$HOST_TRANSPORT" -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN_NULL2" | ktap_diag
has_ns2() { grep -qx 2 "$(ctrl_for "$NQN_NULL2")"/nvme*n*/nsid 2>/dev/null; }
no_ns2() { ! has_ns2; }
ns_events() {
	wait_for 30 nvme_dev_for_nqn "$NQN_NULL2" >/dev/null && no_ns2 &&
		truncate -s 16M "$TARGET_TMPFS/ns2.img" && mkdir "$NS2" &&
		_w "$TARGET_TMPFS/ns2.img" "$NS2/device_path" && _w 1 "$NS2/enable" || return 1
	wait_for 30 has_ns2 || { ktap_diag "the added namespace did not appear"; return 1; }
	ktap_diag "namespace 2 appeared: $(grep -lx 2 "$(ctrl_for "$NQN_NULL2")"/nvme*n*/nsid)"
	_w 0 "$NS2/enable" || return 1
	wait_for 30 no_ns2 || { ktap_diag "the disabled namespace did not go away"; return 1; }
}
ktap_check "a namespace added and removed on the target: the host follows both" ns_events
host_disconnect_all
[ ! -d "$NS2" ] || rmdir "$NS2"
rm -f "$TARGET_TMPFS/ns2.img"

# --- in-capsule data ----------------------------------------------------------------------------
# nvmet-rdma advertises in-capsule data (SGLS bit 20, inline_data_size = a page, here; a port can
# be given up to 16 KiB): writes that fit travel inside the command capsule on I/O queues, and
# the io debug class says so per command. Data in up to 4 physically contiguous ranges (the send's
# gather elements after the capsule's) is sent from the request's own pages; data in more is
# copied into the pool first (Documentation/design.rst, "The data path"). Every write must read
# back. The pieces are written with one pwritev: the tail of one page, whole pages, the head of
# another, as the NVMe core's virtual boundary lets the block layer keep them in one request.
# inline_write DEV BLOCK RANGES: write at 4 KiB block BLOCK, in RANGES pieces, 4 KiB (one piece)
# or (RANGES-1)*4 KiB (a half page, whole pages, a half page); read it back and compare.
inline_write() {
	python3 - "$@" <<'PY'
import mmap, os, sys
dev, block, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
P = 4096  # the NVMe core's virtual boundary (and the guest's page size)
half = P // 2
data = os.urandom(P if n == 1 else (n - 1) * P)
# Pages 2(n-1), ..., 2, 0 of a buffer whose pages are touched in ascending order: consecutive
# pieces are never physically adjacent pages (which the block layer would merge into one range),
# however the allocator hands them out in order.
buf = memoryview(mmap.mmap(-1, 2 * n * P))
buf[0:2 * n * P] = bytes(2 * n * P)
pages = [2 * (n - 1 - i) for i in range(n)]
if n == 1:
    iov = [buf[0:P]]
else:
    iov = [buf[pages[0] * P + half:(pages[0] + 1) * P]]
    iov += [buf[p * P:(p + 1) * P] for p in pages[1:-1]]
    iov += [buf[pages[-1] * P:pages[-1] * P + half]]
at = 0
for piece in iov:
    piece[:] = data[at:at + len(piece)]
    at += len(piece)
fd = os.open(dev, os.O_RDWR | os.O_DIRECT)
os.pwritev(fd, iov, block * P)
back = mmap.mmap(-1, len(data))
os.preadv(fd, [back], block * P)
os.close(fd)
sys.exit(0 if back[:] == data else 1)
PY
}
capsule_lines() { dmesg | grep -c "bytes in capsule, $1"; }
# capsule_case DEV BLOCK RANGES WHAT: the write reads back, and was logged as "bytes in capsule,
# WHAT" (once, or again if it was retried)
capsule_case() {
	local before after ok=0
	before=$(capsule_lines "$4")
	inline_write "$1" "$2" "$3" || ok=1
	after=$(capsule_lines "$4")
	dmesg | grep 'bytes in capsule' | tail -n 1
	((ok == 0 && after > before))
}
echo 'module nvme_rsrdma func rsrdma_dbg_io +p' >/sys/kernel/debug/dynamic_debug/control
timeout 60 nvme connect -t "$HOST_TRANSPORT" -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN_NULL" | ktap_diag
wait_for 30 nvme_dev_for_nqn "$NQN_NULL" >/dev/null
dev=$(nvme_dev_for_nqn "$NQN_NULL")
ktap_check "4 KiB write in one range goes in the command capsule from its own pages and reads back" \
	capsule_case "$dev" 7 1 "from its pages in 1 range"
ktap_check "4 KiB write in two pieces goes in the command capsule from its own pages and reads back" \
	capsule_case "$dev" 9 2 "from its pages in 2 ranges"
host_disconnect_all
# A second port, at the next service ID, with 16 KiB of in-capsule data. nvmet-rdma sizes its
# receive buffers per RDMA device, from the port of the first queue while any queue exists, and
# frees the queues of a disconnect asynchronously: the port is used once they are all gone.
inline16=$NVMET_CFS/ports/4
no_qps() { [ "$(rdma resource show qp 2>/dev/null | grep -c 'type RC')" = 0 ]; }
port16() {
	wait_for 30 no_qps || ktap_diag "RC QPs left after disconnecting: $(rdma resource show qp | grep -c 'type RC')"
	mkdir -p "$inline16" && _w rdma "$inline16/addr_trtype" && _w ipv4 "$inline16/addr_adrfam" &&
		_w "$TARGET_ADDR" "$inline16/addr_traddr" && _w $((TARGET_PORT + 1)) "$inline16/addr_trsvcid" &&
		_w 16384 "$inline16/param_inline_data_size" &&
		ln -s "$NVMET_CFS/subsystems/$NQN_NULL" "$inline16/subsystems/$NQN_NULL" &&
		timeout 60 nvme connect -t "$HOST_TRANSPORT" -a "$TARGET_ADDR" -s $((TARGET_PORT + 1)) \
			-n "$NQN_NULL" | ktap_diag && wait_for 30 nvme_dev_for_nqn "$NQN_NULL" >/dev/null
}
if port16; then
	dev=$(nvme_dev_for_nqn "$NQN_NULL")
	ktap_check "12 KiB write in four pieces goes in a 16 KiB capsule from its own pages and reads back" \
		capsule_case "$dev" 16 4 "from its pages in 4 ranges"
	ktap_check "16 KiB write in five pieces goes in a 16 KiB capsule through the pool and reads back" \
		capsule_case "$dev" 24 5 "copied"
else
	ktap_test_fail "12 KiB write in four pieces goes in a 16 KiB capsule from its own pages and reads back"
	ktap_test_fail "16 KiB write in five pieces goes in a 16 KiB capsule through the pool and reads back"
fi
echo 'module nvme_rsrdma func rsrdma_dbg_io -p' >/sys/kernel/debug/dynamic_debug/control
host_disconnect_all
rm -f "$inline16/subsystems/$NQN_NULL"
rmdir "$inline16" 2>/dev/null
timeout 60 nvme connect -t "$HOST_TRANSPORT" -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN_NULL" | ktap_diag
wait_for 30 nvme_dev_for_nqn "$NQN_NULL" >/dev/null
dev=$(nvme_dev_for_nqn "$NQN_NULL")

# --- prompt completions -------------------------------------------------------------------------
# Soft-RoCE signals completions from a kernel worker; with one command outstanding the queue's
# poll starts from a self-interrupt (an IRQ work interrupt, "IWI" in /proc/interrupts) instead of
# waking ksoftirqd (Documentation/design.rst, "The data path"). QD1 reads: about one each.
iwi() { awk '$1 == "IWI:" { for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) n += $i; print n + 0 }' /proc/interrupts; }
if [ "$RDMA_TYPE" != rxe ]; then
	# siw signals a read's completion from the network receive path (softirq), where the poll
	# is scheduled directly: 25 self-interrupts for 400 reads, from its send thread.
	ktap_test_skip "QD1 reads complete from a self-interrupt (soft-RoCE only, not $RDMA_TYPE)"
elif [ -z "$(iwi)" ]; then
	ktap_diag "QD1 reads complete from a self-interrupt: no IWI line in /proc/interrupts"
	ktap_test_skip "QD1 reads complete from a self-interrupt"
else
	reads=400 iwi0=$(iwi)
	dd if="$dev" of=/dev/null bs=4k count="$reads" iflag=direct 2>/dev/null
	iwi1=$(iwi)
	ktap_diag "$reads QD1 reads: $((iwi1 - iwi0)) IRQ work interrupts"
	ktap_check "QD1 reads complete from a self-interrupt" test $((iwi1 - iwi0)) -ge $((reads / 2))
fi
host_disconnect_all

# --- write and poll queues ----------------------------------------------------------------------
mark_io=$(kmsg_mark)
timeout 60 nvme connect -t "$HOST_TRANSPORT" -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN_NULL" \
	--nr-write-queues=1 --nr-poll-queues=1 | ktap_diag
wait_for 30 nvme_dev_for_nqn "$NQN_NULL" >/dev/null
dev=$(nvme_dev_for_nqn "$NQN_NULL")
mapped=$(dmesg_after "$mark_io" | grep -m1 'default/read/poll queues')
ktap_diag "${mapped:-no queue map line}"
if grep -qE 'mapped [0-9]+/[0-9]+/1 default/read/poll' <<<"$mapped" &&
	fio_verify "$dev" --bs=4k --iodepth=8 --hipri --size=8m; then
	ktap_test_pass "write and poll queues: polled I/O verifies"
else
	ktap_test_fail "write and poll queues: polled I/O verifies"
fi
host_disconnect_all

# --- disconnect with I/O in flight ------------------------------------------------------------
# Deleting a controller under load cancels its commands in flight: the application gets errors
# instead of hanging, the disconnect returns, and the controller's RDMA resources are released.
fio_ended() { ! kill -0 "$busy" 2>/dev/null; }
timeout 60 nvme connect -t "$HOST_TRANSPORT" -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN_NULL" | ktap_diag
wait_for 30 nvme_dev_for_nqn "$NQN_NULL" >/dev/null
dev=$(nvme_dev_for_nqn "$NQN_NULL")
(cd /tmp && exec fio --name=busy --filename="$dev" --direct=1 --ioengine=io_uring --rw=randrw \
	--bs=64k --iodepth=32 "${SPLIT[@]}" --time_based --runtime=120 --group_reporting) \
	>/tmp/rsrdma-busy.out 2>&1 &
busy=$!
sleep 3
start=$SECONDS
out=$(timeout 60 nvme disconnect -n "$NQN_NULL" 2>&1)
rc=$?
secs=$((SECONDS - start))
wait_for 30 fio_ended
ended=$?
wait "$busy" 2>/dev/null
fio_rc=$?
after=$(rdma_counts)
ktap_diag "disconnect: status $rc after $secs s ($out); fio ended: $((!ended)), status $fio_rc," \
	"$(grep -cE 'error|err=' /tmp/rsrdma-busy.out) error lines; RDMA resources $(tr '\n' ' ' <<<"$after")"
if ((rc == 0 && ended == 0 && fio_rc != 0)) && [ -z "$(ctrl_for "$NQN_NULL")" ] && [ "$after" = "$baseline" ]; then
	ktap_test_pass "disconnect with I/O in flight: returns, I/O ends with errors, no RDMA resources left"
else
	ktap_test_fail "disconnect with I/O in flight: returns, I/O ends with errors, no RDMA resources left"
	tail -n 20 /tmp/rsrdma-busy.out | ktap_diag
fi
kill -9 "$busy" 2>/dev/null
rm -f /tmp/rsrdma-busy.out

ktap_check "kernel log clean" dmesg_check_clean
ktap_finished
