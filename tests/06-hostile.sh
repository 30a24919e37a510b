#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# rsrdma-timeout: 900
# rsrdma-debug-timeout: 7200
#
# The transport against a peer that lies: tests/target (rsrdma-target), a userspace NVMe/RDMA
# target on the same rxe device, first polite (4 MiB commands in one piece: its MDTS is 8 MiB,
# nvmet-rdma's 1 MiB), then with one misbehaviour per test case: CM rejects with each NVMe/RDMA
# status, accepts with malformed private data, a Connect never answered, Connect errors with and
# without DNR (on the first connect and on a reconnect), completions with a wrong or unknown
# command_id, duplicate, truncated and oversized completions, SEND_WITH_INV of a wrong RKEY and of
# the pool's own, a command never completed, the association closed in the middle of a 4 MiB
# transfer, the target's QP put in the error state, no I/O queue granted, a media error with DNR
# (which the application must see), the event request completed 16 times at once, keep-alive
# answered late (past KATO, and within it), and an RDMA READ with the RKEY a write had on the
# previous association, which must fail at the target with a remote access error. The reach of the
# pool's keys: an RDMA READ of a host read's buffer and an RDMA WRITE into a host write's (each
# half of the pool is registered for one direction only) must fail with a remote access error, and
# what the host's writes left in the pool must not be readable through the next association's key.
#
# Each case asks of the module: no oops or WARN, a dmesg line naming the fault, recovery or a
# clean connect failure as the protocol prescribes (with DNR: no further attempt), the data
# written through the fault reads back intact, then a fresh connect to the same target (the
# misbehaviour is spent) moves verified data, and the module unloads.
set -u
. "$(dirname "$0")/lib/common.sh"

PAT=/tmp/rsrdma-hostile.pat
NVME_CORE=/sys/module/nvme_core/parameters
SAVED_ADMIN_TIMEOUT='' SAVED_IO_TIMEOUT=''

cleanup() {
	hostile_stop
	[ -z "$SAVED_ADMIN_TIMEOUT" ] || echo "$SAVED_ADMIN_TIMEOUT" >"$NVME_CORE/admin_timeout" 2>/dev/null
	[ -z "$SAVED_IO_TIMEOUT" ] || echo "$SAVED_IO_TIMEOUT" >"$NVME_CORE/io_timeout" 2>/dev/null
	host_disconnect_all >/dev/null 2>&1
	host_unload >/dev/null 2>&1
	fabric_teardown >/dev/null 2>&1
	rm -f "$PAT"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# --- helpers ------------------------------------------------------------------------------------

hconnect() { # [NVME CONNECT OPTIONS...]
	timeout 90 nvme connect -t "$HOST_TRANSPORT" -a "$TARGET_ADDR" -s "$HOSTILE_PORT" \
		-n "$HOSTILE_NQN" "$@" 2>&1
}

_no_hctrl() { ! hostile_ctrl >/dev/null; }

hdisconnect() {
	local c
	c=$(hostile_ctrl) || return 0
	echo 1 >"/sys/class/nvme/$c/delete_controller" 2>/dev/null
	wait_for 60 _no_hctrl
}

# hdev: the namespace's block device once it is there (and udev is done with it), with
# max_sectors_kb raised to the hardware limit so that 4 MiB goes as one command.
hdev() {
	local dev
	wait_for 30 nvme_dev_for_nqn "$HOSTILE_NQN" || return 1
	dev=$(nvme_dev_for_nqn "$HOSTILE_NQN")
	udevadm settle -t 10 >/dev/null 2>&1
	cat "/sys/block/${dev##*/}/queue/max_hw_sectors_kb" >"/sys/block/${dev##*/}/queue/max_sectors_kb" 2>/dev/null
	echo "$dev"
}

# The host transport's QPs, MRs, PDs and CM ids, as the RDMA core lists them ("type count").

# write_bytes DEV OFFSET BYTES: a new random pattern, written in one direct write;
# check_bytes DEV OFFSET BYTES: read it back in one direct read and compare.
write_bytes() {
	head -c "$3" /dev/urandom >"$PAT"
	timeout 180 dd if="$PAT" of="$1" bs="$3" count=1 seek="$2" oflag=direct,seek_bytes \
		conv=notrunc status=none
}
check_bytes() {
	timeout 180 dd if="$1" bs="$3" count=1 skip="$2" iflag=direct,skip_bytes status=none |
		cmp -s - "$PAT"
}

# write_pattern DEV MIB_OFFSET MIB, read_check DEV MIB_OFFSET MIB: the same in MiB.
write_pattern() { write_bytes "$1" "$(($2 << 20))" "$(($3 << 20))"; }
read_check() { check_bytes "$1" "$(($2 << 20))" "$(($3 << 20))"; }

dmesg_has() { dmesg_since_mark | grep -qE -- "$1"; }
dmesg_count() { dmesg_since_mark | grep -cE -- "$1"; }
not() { ! "$@"; }

# fresh_verify: a new controller to the target (whose misbehaviour is spent) moves verified
# data, and goes away again.
fresh_verify() {
	local dev rc=1
	hdisconnect || return 1
	hconnect >/dev/null || return 1
	if dev=$(hdev); then
		write_pattern "$dev" 16 1 && read_check "$dev" 16 1 && rc=0
	fi
	hdisconnect || rc=1
	return $rc
}

# RSRDMA_HOSTILE_CASES (an extended regular expression, unanchored) runs only the cases whose
# name matches; the polite connect and the final unload always run, the other cases are
# reported as skipped. selected NAME: whether to run the case, reporting the skip if not.
selected() {
	[ -z "${RSRDMA_HOSTILE_CASES:-}" ] || [[ $1 =~ $RSRDMA_HOSTILE_CASES ]] && return 0
	ktap_diag "$1: not selected by RSRDMA_HOSTILE_CASES"
	ktap_test_skip "$1"
	return 1
}

# A test case: case_begin, expectations (expect DESCRIPTION CMD...), case_end NAME. A failed
# expectation is a diagnostic line; the case fails if any did. case_end also asks for a clean
# kernel log and for the module to unload (and loads it again).
case_begin() {
	BAD=()
	dmesg_mark
	CASE_START=$SECONDS
}

expect() {
	local what=$1
	shift
	"$@" >/dev/null 2>&1 && return 0
	BAD+=("$what")
	return 1
}

case_end() {
	local name=$1 b
	hostile_stop
	hdisconnect || BAD+=("the controller does not go away")
	wait_for 10 no_module_rdma_resources ||
		BAD+=("RDMA resources of the module left: $(module_rdma_resources | tr '\n' ' ')")
	dmesg_since_mark | grep -E 'nvme|rsrdma' | grep -vE 'rsrdma-mark' | head -n 14 | ktap_diag
	grep -E '^(hostile|stale-rkey|scope|residue)' "$HOSTILE_LOG" | grep -v ': armed$' | head -n 6 | ktap_diag
	dmesg_check_clean || BAD+=("the kernel log has problems (above)")
	host_unload || BAD+=("the module does not unload")
	host_load || BAD+=("the module does not load again")
	ktap_diag "$name: $((SECONDS - CASE_START)) s"
	if ((${#BAD[@]})); then
		for b in "${BAD[@]}"; do ktap_diag "$name: failed: $b"; done
		ktap_test_fail "$name"
	else
		ktap_test_pass "$name"
	fi
}

# Reject message of each NVMe/RDMA CM reject status, as the module prints it.
REJECT_MSG=("" "invalid private data length" "invalid record format" "invalid queue ID"
	"invalid host SQ size" "invalid host RQ size" "resource not found" "invalid IRD"
	"invalid ORD" "invalid controller ID")

# --- cases --------------------------------------------------------------------------------------

# connect_fails NAME MODE DMESG_REGEX [TARGET ARGS...]: a misbehaviour on the first connect:
# nvme connect fails cleanly after one attempt, naming the fault, within 15 s (the cases that
# wait for a timeout set the admin timeout to 5 s); then connecting works.
connect_fails() {
	local name=$1 mode=$2 re=$3 out rc t
	shift 3
	selected "$name" || return 0
	case_begin
	if hostile_start --mode "$mode" "$@"; then
		t=$SECONDS
		out=$(hconnect)
		rc=$?
		t=$((SECONDS - t))
		ktap_diag "nvme connect: status $rc after $t s: $out"
		expect "nvme connect fails" test "$rc" != 0
		expect "nvme connect fails within 15 s ($t s)" test "$t" -le 15
		expect "no controller is left behind" wait_for 30 _no_hctrl
		expect "the target misbehaved ($mode)" hostile_wait 5 "^hostile $mode:"
		expect "dmesg names the fault (/$re/)" dmesg_has "$re"
		expect "one connect attempt, no retries" test "$(hostile_count '^conn: qid 0 connect request')" = 1
		expect "then a connect to the same target works and moves verified data" fresh_verify
	else
		BAD+=("the target did not start")
	fi
	case_end "$name"
}

# io_fault NAME write|read MODE DMESG_REGEX [TARGET ARGS...]: a misbehaviour on the first I/O
# command once armed, a 4 MiB write (or a 4 MiB read of data written before arming): the I/O
# still succeeds, after error recovery and a reconnect, the data reads back intact, and a fresh
# connect works. With RESULT_RE set, the target's log must also show a line matching it.
RESULT_RE=''
io_fault() {
	local name=$1 on=$2 mode=$3 re=$4 dev ctrl
	shift 4
	selected "$name" || return 0
	case_begin
	if hostile_start --mode "$mode" --arm signal "$@" && hconnect --reconnect-delay=1 \
		--ctrl-loss-tmo=60 | ktap_diag && dev=$(hdev) && ctrl=$(hostile_ctrl) &&
		{ [ "$on" = write ] || write_pattern "$dev" 8 4; } && hostile_arm; then
		if [ "$on" = write ]; then
			expect "a 4 MiB write through the fault succeeds" write_pattern "$dev" 8 4
		else
			expect "a 4 MiB read through the fault returns the data" read_check "$dev" 8 4
		fi
		expect "the target misbehaved ($mode)" hostile_wait 5 "^hostile $mode:"
		[ -z "$RESULT_RE" ] || expect "the target reports /$RESULT_RE/" hostile_wait 30 "$RESULT_RE"
		expect "dmesg names the fault (/$re/)" wait_for 30 dmesg_has "$re"
		expect "error recovery ran" dmesg_has "starting error recovery"
		expect "the controller reconnected" wait_for 60 dmesg_has "Successfully reconnected"
		expect "the controller is live again" wait_for 30 in_state "$ctrl" live
		expect "the data reads back intact" read_check "$dev" 8 4
		expect "then a fresh connect moves verified data" fresh_verify
	else
		BAD+=("set-up failed (target, connect or arming)")
	fi
	case_end "$name"
}

# reconnect_fault NAME MODE DNR DMESG_REGEX [TARGET ARGS...]: a connect misbehaviour on the
# reconnect that the target forces (it closes the association after the first armed I/O).
# Without DNR the host tries again and the controller comes back; with DNR it makes no further
# attempt and deletes the controller.
reconnect_fault() {
	local name=$1 mode=$2 dnr=$3 re=$4 dev ctrl n
	shift 4
	selected "$name" || return 0
	case_begin
	if hostile_start --mode "$mode" --after-reconnect --arm signal "$@" &&
		hconnect --reconnect-delay=1 --ctrl-loss-tmo=30 | ktap_diag && dev=$(hdev) &&
		ctrl=$(hostile_ctrl) && hostile_arm; then
		expect "a 4 MiB write succeeds" write_pattern "$dev" 8 4
		expect "the target closed the association" hostile_wait 10 "^hostile $mode: closing"
		expect "the target misbehaved on the reconnect" hostile_wait 60 "^hostile $mode: [^c]"
		expect "dmesg names the fault (/$re/)" wait_for 60 dmesg_has "$re"
		if ((dnr)); then
			expect "the controller is deleted" wait_for 30 in_state "$ctrl" gone
			expect "dmesg: gives up because of DNR" dmesg_has "giving up reconnecting: connect failed with DNR"
			sleep 3
		else
			expect "the controller reconnected" wait_for 60 dmesg_has "Successfully reconnected"
			expect "the controller is live again" wait_for 30 in_state "$ctrl" live
			expect "the data reads back intact" read_check "$dev" 8 4
		fi
		n=$(sed -n '/^hostile .*: closing/,$p' "$HOSTILE_LOG" | grep -c '^conn: qid 0 connect request')
		ktap_diag "admin queue connect attempts after the target closed the association: $n"
		if ((dnr)); then
			expect "no retry after DNR (1 attempt, not $n)" test "$n" = 1
		else
			expect "retried after the failure ($n attempts)" test "$n" -ge 2
		fi
		expect "then a fresh connect moves verified data" fresh_verify
	else
		BAD+=("set-up failed (target, connect or arming)")
	fi
	case_end "$name"
}

ktap_print_header
ktap_set_plan 63

if ! fabric_setup || ! host_load; then
	bail_out "set-up failed"
fi
# Shorter command timeouts for the cases that wait for them (set around those cases only).
SAVED_ADMIN_TIMEOUT=$(cat "$NVME_CORE/admin_timeout")
SAVED_IO_TIMEOUT=$(cat "$NVME_CORE/io_timeout")
[ -x "$HOSTILE_BIN" ] ||
	bail_out "$HOSTILE_BIN missing (tests/run.sh builds it: cargo build --release --manifest-path tests/target/Cargo.toml)"

# --- polite ---------------------------------------------------------------------------------------
dmesg_mark
hostile_start --mode polite -v
out=$(hconnect)
rc=$?
ktap_diag "nvme connect: status $rc ${out}"
dev=$(hdev)
ctrl=$(hostile_ctrl)
ktap_diag "device ${dev:-none} on ${ctrl:-no controller}"
ktap_check "polite: connect, namespace of 64 MiB" test -n "$dev" -a "$(blockdev --getsize64 "$dev" 2>/dev/null)" = $((64 << 20))

kb=$(cat "/sys/block/${dev##*/}/queue/max_hw_sectors_kb" 2>/dev/null)
ktap_diag "max_hw_sectors_kb ${kb:-?} (transport limit 4096, target MDTS 8192 KiB)"
ktap_check "polite: max_hw_sectors_kb is the transport's 4 MiB" test "$kb" = 4096

# A 4 MiB write and read at LBA 16384 (8 MiB): exactly one command each at the target.
one_command_each() {
	local w r
	if ! write_pattern "$dev" 8 4 || ! read_check "$dev" 8 4; then
		echo "data mismatch"
		return 1
	fi
	sleep 0.5
	w=$(grep -E '^q[0-9]+ cid \S+ write slba (1[6-9]|2[0-4])[0-9]{3} ' "$HOSTILE_VLOG")
	r=$(grep -E '^q[0-9]+ cid \S+ read slba (1[6-9]|2[0-4])[0-9]{3} ' "$HOSTILE_VLOG")
	echo "target saw: $w"
	echo "target saw: $r"
	[ "$(wc -l <<<"$w")" = 1 ] && [ "$(wc -l <<<"$r")" = 1 ] &&
		grep -q 'slba 16384 nlb 8192 len 4194304 keyed' <<<"$w" &&
		grep -q 'slba 16384 nlb 8192 len 4194304 keyed' <<<"$r"
}
ktap_check "polite: a 4 MiB write and a 4 MiB read go as one command each" one_command_each
ktap_check "polite: fio verify 4 KiB, QD16" fio_verify "$dev" --size=16m
ktap_check "polite: fio verify 4 MiB, QD2" fio_verify "$dev" --size=64m --bs=4m --iodepth=2
n4k=$(grep -c 'len 4096 in-capsule' "$HOSTILE_VLOG")
n4m=$(grep -c 'len 4194304 keyed' "$HOSTILE_VLOG")
ktap_diag "target saw $n4k in-capsule 4 KiB writes and $n4m keyed 4 MiB transfers"
ktap_check "polite: in-capsule writes and 4 MiB keyed transfers both used" test "$n4k" -gt 0 -a "$n4m" -gt 0
hdisconnect
hostile_stop
ktap_check "polite: kernel log clean" dmesg_check_clean

# --- connect: CM reject with each NVMe/RDMA status ------------------------------------------------
for n in 1 2 3 4 5 6 7 8 9; do
	connect_fails "reject:$n (${REJECT_MSG[n]}): connect fails cleanly" "reject:$n" \
		"connect rejected: .*nvme status $n \(${REJECT_MSG[n]}\)"
done
connect_fails "reject:4@io (I/O queue rejected): connect fails cleanly" "reject:4@io" \
	"queue 1: connect rejected: .*nvme status 4"
connect_fails "no-io-queues: Set Features grants no I/O queue: connect fails cleanly" \
	no-io-queues "unable to set any I/O queues"

# --- connect: Connect never answered, Connect errors ----------------------------------------------
echo 5 >"$NVME_CORE/admin_timeout"
connect_fails "connect-hang: the Connect times out, connect fails cleanly" connect-hang \
	"opcode 0x7f \(connect\) QID 0 timeout"
echo "$SAVED_ADMIN_TIMEOUT" >"$NVME_CORE/admin_timeout"
# The target closes the connection instead of answering the Connect: the host aborts the
# command as soon as the CM reports the disconnect, rather than at its timeout (the admin
# timeout, 60 s, for the Connect of any queue; the C nvme-rdma waits for it).
connect_fails "connect-drop: connection closed before the Connect response, connect fails at once" \
	connect-drop "queue 0: disconnected while connecting: aborting 1 command"
connect_fails "connect-drop@io: an I/O queue's connection closed the same way, connect fails at once" \
	connect-drop@io "queue [1-9][0-9]*: disconnected while connecting: aborting 1 command"
# The Connect's response fails the host's receive (SEND_WITH_INV of an unknown RKEY) and the target
# keeps the connection: only the failed work request tells the host, which aborts the Connect
# then rather than at its timeout.
connect_fails "connect-inv: the Connect's response fails the host's receive, connect fails at once" \
	connect-inv "queue 0: connection failed while connecting: aborting 1 command"
connect_fails "connect-inv@io: an I/O queue's Connect response fails the same way, connect fails at once" \
	connect-inv@io "queue [1-9][0-9]*: connection failed while connecting: aborting 1 command"
connect_fails "connect-error: Connect status 'controller busy', connect fails cleanly" connect-error \
	"Connect command failed: controller is busy"
connect_fails "connect-error-dnr: Connect status with DNR, connect fails cleanly" connect-error-dnr \
	"Connect command failed: controller is busy"
# The statuses a target answers while its configuration changes end a first connect (DNR), as for
# any other status with DNR; on a reconnect they are retried (below).
connect_fails "connect-host-denied: host not allowed, a first connect fails cleanly" \
	connect-host-denied "Connect for subsystem .* is not allowed"
connect_fails "connect-no-subsys: subsystem not found, a first connect fails cleanly" \
	connect-no-subsys "Connect Invalid Data Parameter, subsysnqn"
# The accept's private data is checked (the C nvme-rdma does not read it): a record format other
# than 0, or no controller receive queue, ends the connect with the reason. RoCE pads a 2-byte
# reply with zeroes: a receive queue of 0.
connect_fails "bad-accept:recfmt: accept of record format 1, connect fails cleanly" \
	bad-accept:recfmt "queue 0: the target's accept is malformed: record format 1, not 0"
connect_fails "bad-accept:short: 2 bytes of accept private data, connect fails cleanly" \
	bad-accept:short \
	"queue 0: the target's accept is malformed: (2 bytes of private data|a receive queue of 0)"

# shallow_accept NAME MODE first|reconnect: the target accepts a queue with a receive queue
# (CRQSIZE) of half the host's send queue, as SPDK does when its own depth is smaller: the
# connect (or the reconnect) succeeds and says so, and the host keeps no more commands in flight
# on that queue than the target receives. For an I/O queue, two fio jobs (one per CPU, so that
# each default queue has 128 in flight) write 32 KiB blocks at QD128 and verify them (keyed, from
# the pool's shared area, which holds all 256; 128 KiB blocks would exhaust it first); the
# target's queue must never have had more commands outstanding than its receive queue, and at
# least 7/8 of it at its peak (so that a host that did not hold back would have gone past it).
shallow_accept() {
	# The target accepts half the depth: 16 of the admin queue's 32, 64 of an I/O queue's 128.
	local name=$1 mode=$2 when=$3 dev ctrl re line qid peak past depth=32 crq
	[[ $mode != *@io ]] || depth=128
	crq=$((depth / 2))
	selected "$name" || return 0
	case_begin
	if [ "$when" = reconnect ]; then
		set -- --after-reconnect --arm signal
	else
		set --
	fi
	if hostile_start --mode "$mode" "$@" &&
		hconnect --reconnect-delay=1 --ctrl-loss-tmo=30 | ktap_diag && dev=$(hdev) &&
		ctrl=$(hostile_ctrl) && { [ "$when" = first ] || hostile_arm; }; then
		if [ "$when" = reconnect ]; then
			expect "a 4 MiB write succeeds" write_pattern "$dev" 8 4
			expect "the target closed the association" hostile_wait 10 "^hostile $mode: closing"
			expect "the controller reconnected" wait_for 60 dmesg_has "Successfully reconnected"
			expect "the controller is live again" wait_for 30 in_state "$ctrl" live
			expect "the data reads back intact" read_check "$dev" 8 4
		fi
		expect "the target accepted a queue with a receive queue of $crq" \
			hostile_wait 30 "^hostile $mode: accepted the CM connect of qid [0-9]+ .*\[00, 00, $(printf %02x "$crq"), 00[],]"
		if [[ $mode == *@io ]]; then
			re="queue [1-9][0-9]*: the target receives $crq commands at a time: at most $crq of $depth in flight"
		else
			re="queue 0: the target receives $crq commands at a time, of the admin queue's $depth"
		fi
		expect "dmesg says so (/$re/)" wait_for 30 dmesg_has "$re"
		expect "no connect attempt failed" not dmesg_has "accept is malformed|failed to connect"
		if [[ $mode == *@io ]]; then
			expect "fio 32 KiB writes at QD128 from both CPUs, verified" fio_verify "$dev" \
				--size=32m --bs=32k --iodepth=128 --numjobs=2 --cpus_allowed=0-1 \
				--cpus_allowed_policy=split
		else
			expect "fio verify 4 KiB, QD16" fio_verify "$dev" --size=16m
		fi
		hdisconnect || BAD+=("the controller does not go away")
		if [[ $mode == *@io ]]; then
			hostile_wait 10 "^hostile $mode: qid [0-9]+ closed:"
			line=$(grep -E "^hostile $mode: qid [0-9]+ closed:" "$HOSTILE_LOG" | tail -n 1)
			ktap_diag "target: ${line:-no report of the shallow queue}"
			qid=$(sed -nE 's/.* qid ([0-9]+) closed.*/\1/p' <<<"$line")
			peak=$(sed -nE "s/.* at most ([0-9]+) commands outstanding of the $crq of its accept.*/\\1/p" <<<"$line")
			past=$(sed -nE 's/.* of its accept, ([0-9]+) past it.*/\1/p' <<<"$line")
			expect "the target's queue ${qid:-?} never had more than $crq commands outstanding (${peak:-?}, ${past:-?} arrived past it)" \
				test -n "$peak" -a "${past:-1}" = 0 -a "${peak:-$((crq + 1))}" -le "$crq"
			# The target counts what it received and has not answered: responses on their
			# way back to the host hold some of the host's credits at any time.
			expect "and at least 7/8 of them at its peak (${peak:-?}): the load pressed against it" \
				test "${peak:-0}" -ge $((crq * 7 / 8))
		fi
		expect "then a fresh connect moves verified data" fresh_verify
	else
		BAD+=("set-up failed (target, connect or arming)")
	fi
	case_end "$name"
}
shallow_accept "bad-accept:crqsize@io: an I/O queue's receive queue of half the depth, kept within" \
	bad-accept:crqsize@io first

# --- reconnect: the same faults when the target forces a reconnect ----------------------------------
reconnect_fault "reconnect, reject:6: the host tries again, controller back" "reject:6" 0 \
	"connect rejected: .*nvme status 6"
echo 5 >"$NVME_CORE/admin_timeout"
reconnect_fault "reconnect, connect-hang: the attempt times out, the next one works" connect-hang 0 \
	"opcode 0x7f \(connect\) QID 0 timeout"
echo "$SAVED_ADMIN_TIMEOUT" >"$NVME_CORE/admin_timeout"
reconnect_fault "reconnect, connect-drop: the Connect is aborted, the next attempt works" connect-drop 0 \
	"queue 0: disconnected while connecting: aborting 1 command"
reconnect_fault "reconnect, connect-inv: the Connect is aborted, the next attempt works" connect-inv 0 \
	"queue 0: connection failed while connecting: aborting 1 command"
shallow_accept "reconnect, bad-accept:crqsize: a shallower admin receive queue, controller back" \
	bad-accept:crqsize reconnect
reconnect_fault "reconnect, connect-error without DNR: retried, controller back" connect-error 0 \
	"Connect command failed: controller is busy"
reconnect_fault "reconnect, connect-error with DNR: no retry, controller deleted" connect-error-dnr 1 \
	"Connect command failed: controller is busy"
# A controller that was live meets a target whose configuration is changing (nvmet refuses the
# Connect with DNR while the host is not yet allowed, or the subsystem not yet there or not yet on
# the port): retried until ctrl_loss_tmo, said in the log, and the controller comes back.
reconnect_fault "reconnect, host not allowed (DNR): retried, controller back" connect-host-denied 0 \
	"connect refused: host not allowed \(status 0x4184\).*retrying until ctrl_loss_tmo"
reconnect_fault "reconnect, subsystem not found (DNR): retried, controller back" connect-no-subsys 0 \
	"connect refused: invalid connect parameters \(subsystem not found\) \(status 0x4182\)"

# A refusal that never ends is retried only until ctrl_loss_tmo: the controller is then deleted.
persistent_refusal() {
	local name="reconnect, host never allowed again: retried until ctrl_loss_tmo (8 s), then deleted"
	local dev ctrl n
	selected "$name" || return 0
	case_begin
	if hostile_start --mode connect-host-denied --after-reconnect --persist --arm signal &&
		hconnect --reconnect-delay=1 --ctrl-loss-tmo=8 | ktap_diag && dev=$(hdev) &&
		ctrl=$(hostile_ctrl) && hostile_arm; then
		expect "a 1 MiB write succeeds" write_pattern "$dev" 8 1
		expect "the target closed the association" \
			hostile_wait 10 "^hostile connect-host-denied: closing"
		expect "the controller is deleted" wait_for 40 in_state "$ctrl" gone
		expect "dmesg: gives up at the loss timeout, not at the DNR" \
			dmesg_has "giving up reconnecting: controller loss timeout expired"
		n=$(dmesg_count "connect refused: host not allowed")
		ktap_diag "connects refused and retried before the loss timeout: $n"
		expect "the refusals were retried ($n, at least 3)" test "$n" -ge 3
	else
		BAD+=("set-up failed (target, connect or arming)")
	fi
	case_end "$name"
}
persistent_refusal
echo 5 >"$NVME_CORE/admin_timeout"
reconnect_fault "reconnect, connect-hang@io: an I/O queue's Connect times out, retried" connect-hang@io 0 \
	"opcode 0x7f \(connect\) QID [1-9][0-9]* timeout"
echo "$SAVED_ADMIN_TIMEOUT" >"$NVME_CORE/admin_timeout"
reconnect_fault "reconnect, connect-error-dnr@io: an I/O queue's Connect fails with DNR, no retry" \
	connect-error-dnr@io 1 "Connect command failed: controller is busy"

# --- I/O: lying completions ------------------------------------------------------------------------
io_fault "bad-cid: completion with a wrong command_id" write bad-cid \
	"response with unknown command_id"
io_fault "dup-cqe: duplicate completion" write dup-cqe \
	"response for command_id 0x[0-9a-f]+, which is not in flight|response with unknown command_id"
io_fault "short-recv: truncated response (8 bytes)" write short-recv \
	"truncated response of 8 bytes"
io_fault "stray-cqe: completion for a command never sent" write stray-cqe \
	"response with unknown command_id"
# The held write is cancelled when the association closes and waits, unsent, for the reconnect;
# the target answers it on the new association before the host sends it again: that answer
# names a command not in flight (its identifier is unchanged, no response completed it). The
# target sends it right after the Connect response of that queue, and the host resends held
# commands only once all its queues are connected, so the refusal comes before the resend. While
# connecting, the refusal does not start another recovery (the core allows RESETTING only from
# LIVE): the recovery the case sees is the one the closed association started.
io_fault "late-cqe: completion of a cancelled command, on the next association" write late-cqe \
	"response for command_id 0x[0-9a-f]+, which is not in flight"
io_fault "send-inv: SEND_WITH_INV naming a wrong RKEY" write send-inv \
	"RECV failed with status remote invalid request error"
io_fault "send-inv:pool: SEND_WITH_INV of the pool RKEY" write send-inv:pool \
	"target sent SEND_WITH_INV for command_id"
echo 5 >"$NVME_CORE/io_timeout"
io_fault "no-complete: a command never completed (timeout, 5 s)" write no-complete \
	"opcode 0x1 \(write\) QID [0-9]+ timeout"
echo "$SAVED_IO_TIMEOUT" >"$NVME_CORE/io_timeout"
io_fault "close-mid-transfer: association closed during a 4 MiB write" write close-mid-transfer \
	"starting error recovery: (queue [0-9]+: disconnected|RECV failed|SEND failed)"
io_fault "close-mid-transfer: association closed during a 4 MiB read" read close-mid-transfer \
	"starting error recovery: (queue [0-9]+: disconnected|RECV failed|SEND failed)"
io_fault "long-rsp: a response of 64 bytes, longer than a completion" write long-rsp \
	"starting error recovery: .*(RECV failed|response of 64 bytes)"
# Nothing else goes to that queue: the host notices when the held command times out (5 s here).
echo 5 >"$NVME_CORE/io_timeout"
io_fault "qp-error: the target's QP in the error state, no disconnect (timeout, 5 s)" write qp-error \
	"starting error recovery: command timeout"
echo "$SAVED_IO_TIMEOUT" >"$NVME_CORE/io_timeout"

# --- I/O: an error the application must see ----------------------------------------------------------
# A 4 MiB read answered with an unrecovered read error and DNR: the read fails at the
# application, once (the target lies once: a retry would have succeeded), without error
# recovery, and the same read then returns the data.
io_error() {
	local name="io-error: a media error with DNR reaches the application, no retry, no recovery"
	local dev ctrl
	selected "$name" || return 0
	case_begin
	if hostile_start --mode io-error --arm signal -v && hconnect | ktap_diag && dev=$(hdev) &&
		ctrl=$(hostile_ctrl) && write_pattern "$dev" 8 4 && hostile_arm; then
		expect "the 4 MiB read answered with the error fails at the application" \
			not dd if="$dev" of=/dev/null bs=4M count=1 skip=2 iflag=direct
		expect "the target answered it with a media error and DNR" \
			hostile_wait 5 "^hostile io-error: answered the read .* with status 0x4281"
		expect "the target saw that read once" \
			test "$(grep -cE '^q[0-9]+ cid \S+ read slba 16384 ' "$HOSTILE_VLOG")" = 1
		expect "dmesg names the error (sct 0x2 / sc 0x81, DNR)" dmesg_has "sc 0x81.*DNR"
		expect "no error recovery" not dmesg_has "starting error recovery"
		expect "the controller stays live" in_state "$ctrl" live
		expect "the same read then returns the data" read_check "$dev" 8 4
		expect "then a fresh connect moves verified data" fresh_verify
	else
		BAD+=("set-up failed (target, connect or arming)")
	fi
	case_end "$name"
}
io_error

# --- asynchronous events: a flood ---------------------------------------------------------------
# The Asynchronous Event Request completed 16 times in a row (a namespace attribute notice each
# time), while a 4 MiB write runs: the host takes the first as an event and the others as
# completions of a command not in flight, or as events (it rescans, once or a few times), the
# write succeeds, the controller ends live and the data reads back.
aen_flood() {
	local name="aen-flood: 16 completions of the event request at once: live, data intact"
	local dev ctrl
	selected "$name" || return 0
	case_begin
	if hostile_start --mode aen-flood:16 --arm signal -v && hconnect --reconnect-delay=1 \
		--ctrl-loss-tmo=60 | ktap_diag && dev=$(hdev) && ctrl=$(hostile_ctrl) && hostile_arm; then
		expect "a 4 MiB write during the flood succeeds" write_pattern "$dev" 8 4
		expect "the target flooded the host" hostile_wait 5 "^hostile aen-flood:.* 16 times"
		grep -E 'async-event|^hostile' "$HOSTILE_VLOG" "$HOSTILE_LOG" | head -n 5 | ktap_diag
		expect "the controller is live" wait_for 60 in_state "$ctrl" live
		expect "the host took the notice (rescan)" wait_for 10 dmesg_has "rescanning namespaces"
		dmesg_since_mark | grep -E "$ctrl: " | grep -vE 'rkey|registered|pool' | sort | uniq -c |
			sort -rn | head -n 6 | ktap_diag
		expect "the data reads back intact" read_check "$dev" 8 4
		expect "then a fresh connect moves verified data" fresh_verify
	else
		BAD+=("set-up failed (target, connect or arming)")
	fi
	case_end "$name"
}
aen_flood

# --- keep-alive answered late -----------------------------------------------------------------------
late_keepalive() { # NAME HOLD_MS|"" EXPECT_RECOVERY
	local name=$1 ms=$2 recovery=$3 dev ctrl
	selected "$name" || return 0
	case_begin
	if hostile_start --mode "late-keepalive${ms:+:$ms}" --arm signal &&
		hconnect --keep-alive-tmo=5 --reconnect-delay=1 --ctrl-loss-tmo=60 | ktap_diag &&
		dev=$(hdev) && ctrl=$(hostile_ctrl) && write_pattern "$dev" 8 1 && hostile_arm; then
		expect "the target held a keep-alive" hostile_wait 15 "^hostile late-keepalive: holding"
		if ((recovery)); then
			expect "dmesg names the keep-alive timeout" wait_for 30 dmesg_has \
				"opcode 0x18 \(keep alive\) QID 0 timeout"
			expect "error recovery ran" dmesg_has "starting error recovery"
			expect "the controller reconnected" wait_for 60 dmesg_has "Successfully reconnected"
		else
			expect "the target answered late" hostile_wait 15 "^hostile late-keepalive: answered"
			sleep 2
			expect "no error recovery" eval '! dmesg_has "starting error recovery|timeout"'
		fi
		expect "the controller is live" wait_for 30 in_state "$ctrl" live
		expect "the data reads back intact" read_check "$dev" 8 1
		expect "a 4 MiB write and read work" eval "write_pattern $dev 8 4 && read_check $dev 8 4"
		expect "then a fresh connect moves verified data" fresh_verify
	else
		BAD+=("set-up failed (target, connect or arming)")
	fi
	case_end "$name"
}
late_keepalive "late-keepalive: answered after KATO (5 s) + 3 s, recovery" "" 1
late_keepalive "late-keepalive:1500: answered late but within KATO, tolerated" 1500 0

# --- the previous association's RKEY must be dead ---------------------------------------------------
# The target records the RKEY of a 4 MiB write, closes the association; on the new one it tries
# an RDMA READ (the access the write's key was registered for) with the recorded RKEY before
# serving the next command.
stale_rkey() {
	local name="stale-rkey: RDMA READ with the previous association's RKEY fails at the target"
	local dev ctrl key
	selected "$name" || return 0
	case_begin
	if hostile_start --mode stale-rkey --arm signal -v &&
		hconnect --reconnect-delay=1 --ctrl-loss-tmo=60 | ktap_diag && dev=$(hdev) &&
		ctrl=$(hostile_ctrl) && hostile_arm; then
		expect "a 4 MiB write succeeds" write_pattern "$dev" 8 4
		expect "the target recorded the RKEY and closed the association" \
			hostile_wait 10 "^hostile stale-rkey: recorded"
		key=$(sed -n 's/^hostile stale-rkey: recorded rkey \(0x[0-9a-f]*\) .*/\1/p' "$HOSTILE_LOG")
		expect "the controller reconnected" wait_for 60 dmesg_has "Successfully reconnected"
		expect "the controller is live again" wait_for 30 in_state "$ctrl" live
		ktap_diag "recorded rkey ${key:-none}; the module's MRs now: $(our_rkeys | tr '\n' ' ')"
		expect "the recorded RKEY is no longer registered" eval "[ -n '$key' ] && ! our_rkeys | grep -qx '$key'"
		expect "the data reads back intact (through the stale WRITE and a second recovery)" \
			read_check "$dev" 8 4
		expect "the target tried the stale RKEY" hostile_wait 30 "^hostile stale-rkey: RDMA READ"
		expect "the stale READ failed with a remote access error at the target" \
			hostile_wait 30 "^stale-rkey result: remote-access-error"
		grep '^stale-rkey result' "$HOSTILE_LOG" | ktap_diag
		expect "then a fresh connect moves verified data" fresh_verify
	else
		BAD+=("set-up failed (target, connect or arming)")
	fi
	case_end "$name"
}
stale_rkey

# --- the reach of the pool's keys ---------------------------------------------------------------------
# Each half of the pool is registered for one direction: the target may read the buffer of a host
# write and write the buffer of a host read, nothing else. It tries the other way round with the
# command's own RKEY; the operation must fail at the target with a remote access error, and the
# host recover and finish the I/O.
RESULT_RE='^scope result: remote-access-error'
io_fault "scope:read-dest: RDMA READ of a host read's buffer fails at the target" read \
	scope:read-dest "starting error recovery"
io_fault "scope:write-src: RDMA WRITE into a host write's buffer fails at the target" write \
	scope:write-src "starting error recovery"
RESULT_RE=''

# The target records the buffers of the host's writes (fio, 64 KiB at QD8: several blocks of the
# pool's large area); after a reset, at the host's first write on the new association, it reads
# those buffers through the new RKEY and compares them with what they held. The host clears that
# half of the pool before registering it again: nothing of the old data may be found.
# _residue_clean: the target read some bytes of the old buffers and found none of their data,
# nor any byte other than zero (the buffers it reads are not the new write's).
_residue_clean() {
	grep -qE '^residue result: clean: [1-9][0-9]* bytes read in [1-9][0-9]* buffer\(s\), 0 holding .*, 0 nonzero bytes$' \
		"$HOSTILE_LOG"
}

residue() {
	local name="residue: the next association's RKEY reads nothing the last one was sent"
	local dev ctrl
	selected "$name" || return 0
	case_begin
	if hostile_start --mode residue --arm signal &&
		hconnect --reconnect-delay=1 --ctrl-loss-tmo=60 | ktap_diag && dev=$(hdev) &&
		ctrl=$(hostile_ctrl) && hostile_arm; then
		expect "fio writes 4 MiB in 64 KiB blocks at QD8 and verifies them" \
			fio_verify "$dev" --rw=write --ioengine=libaio --bs=64k --iodepth=8 --offset=16m --size=4m
		expect "the target recorded the host's write buffers" \
			hostile_wait 10 "^hostile residue: recording"
		expect "nvme reset starts a new association" nvme reset "/dev/$ctrl"
		expect "the controller is live again" wait_for 30 in_state "$ctrl" live
		expect "the host cleared the pool's half for host writes before registering it again" \
			wait_for 10 dmesg_has "pool: cleared the [0-9]+ KiB half for host writes"
		dmesg_since_mark | grep -oE 'pool: cleared .*' | ktap_diag
		# 16 KiB: past the in-capsule size, a keyed SGL to a slot of the pool.
		expect "a 16 KiB write on the new association succeeds" write_bytes "$dev" $((40 << 20)) 16384
		expect "the target read the old buffers through the new RKEY" \
			hostile_wait 10 "^hostile residue: RDMA READ of [1-9]"
		expect "the target's reads completed" hostile_wait 10 "^residue result: "
		grep -E '^(hostile residue: RDMA|residue result)' "$HOSTILE_LOG" | ktap_diag
		expect "they read some bytes and found none of the old data, only zeroes" _residue_clean
		expect "the write reads back intact" check_bytes "$dev" $((40 << 20)) 16384
		expect "then a fresh connect moves verified data" fresh_verify
	else
		BAD+=("set-up failed (target, connect or arming)")
	fi
	case_end "$name"
}
residue

ktap_check "module unloads at the end" host_unload
ktap_finished
