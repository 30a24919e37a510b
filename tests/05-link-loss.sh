#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# rsrdma-timeout: 1800
#
# Link loss with I/O running and verified throughout: netdev flaps, RDMA device removal and
# re-add, target port removal and re-add, an nvmet-rdma reload (every old RKEY must be gone
# after each recovery), the target changing its number of queues (the host's hardware queues
# shrink and grow); no I/O may fail or read back wrong. Then the timeouts: link down
# longer than fast_io_fail_tmo (I/O fails fast, then resumes), and longer than ctrl_loss_tmo
# (the controller is deleted, nothing hangs); and reset and delete while reconnecting. Last, the
# target's subsystem torn down and created again while the host reconnects.
#
# Per recovery it reports the time from the link (device, port) coming back to the first
# completed read of a probe that reads in a loop.
#
# RSRDMA_FLAPS, RSRDMA_REMOVALS, RSRDMA_PORT_CYCLES, RSRDMA_RELOADS set the counts (6, 3, 3,
# 1: each kind of outage several times and every flap length twice, inside CI's time; make soak
# raises them to 100, 10, 10, 10).
set -u
. "$(dirname "$0")/lib/common.sh"

FLAPS=${RSRDMA_FLAPS:-6}
REMOVALS=${RSRDMA_REMOVALS:-3}
PORT_CYCLES=${RSRDMA_PORT_CYCLES:-3}
RELOADS=${RSRDMA_RELOADS:-1}

cleanup() {
	[ -n "${FIO_PID:-}" ] && kill -INT "$FIO_PID" 2>/dev/null
	probe_stop
	ip link set "$RDMA_NETDEV" up 2>/dev/null
	teardown_all
}
trap cleanup EXIT
trap 'exit 143' TERM INT


ktap_print_header
ktap_set_plan 25

if ! fabric_setup || ! target_setup || ! host_load; then
	bail_out "set-up failed"
fi
dmesg_mark
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
echo 'module nvme_rsrdma func rsrdma_dbg_pool +p' >/sys/kernel/debug/dynamic_debug/control 2>/dev/null

# The target must keep the association through every outage below: when its keep-alive timer
# expires while the port is down, nvmet-rdma's disconnect requests go out through the down port
# and soft-RoCE's GSI QP fails for good (admin guide, "soft-RoCE and link loss"), which no host
# can recover from. A 3 s flap can last over 6 s on the debug kernel, longer than the default
# 5 s keep-alive timeout.
timeout 60 nvme connect -t "$HOST_TRANSPORT" -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN_NULL" \
	--reconnect-delay=1 --ctrl-loss-tmo=120 --keep-alive-tmo=15 | ktap_diag
wait_for 30 nvme_dev_for_nqn "$NQN_NULL" >/dev/null
dev=$(nvme_dev_for_nqn "$NQN_NULL")
ctrl=$(basename "$(dirname "$(grep -lx "$NQN_NULL" /sys/class/nvme/nvme*/subsysnqn | head -n1)")")
ktap_diag "$dev on $ctrl, rkeys $(our_rkeys | tr '\n' ' ')"
probe_start "$dev"

# --- netdev flaps --------------------------------------------------------------------------------
fio_start "$dev" --size=16m
series "netdev flaps" flap "$FLAPS" "ip link set $RDMA_NETDEV down" 1-3 "ip link set $RDMA_NETDEV up" \
	"$FLAPS netdev flaps: every one recovered, old RKEYs gone"
if fio_stop; then
	ktap_test_pass "netdev flaps: fio verify saw no error"
else
	ktap_test_fail "netdev flaps: fio verify saw no error"
fi

# --- RDMA device removal and re-add ---------------------------------------------------------
fio_start "$dev" --size=16m
# The target shares the device: nvmet-rdma drops its listener when the device goes, so its port
# is re-enabled once the device is back (a separate target would not notice).
series "device removals" "device removal" "$REMOVALS" "timeout 60 rdma link delete $RDMA_LINK" 1 \
	"rdma link add $RDMA_LINK type $RDMA_TYPE netdev $RDMA_NETDEV && target_port_disable && target_port_enable" \
	"$REMOVALS RDMA device removals: removal completes, controller kept and reconnected"
if fio_stop; then
	ktap_test_pass "device removals: fio verify saw no error"
else
	ktap_test_fail "device removals: fio verify saw no error"
fi

# --- target port removal and re-add, nvmet-rdma reload -----------------------------------------
fio_start "$dev" --size=16m
series "target port removals" "target port removal" "$PORT_CYCLES" target_port_disable 2 \
	target_port_enable "$PORT_CYCLES target port removals"
series "nvmet-rdma reloads" "nvmet-rdma reload" "$RELOADS" \
	"target_port_disable && modprobe -r nvmet_rdma" 1 "modprobe nvmet_rdma && target_port_enable" \
	"nvmet-rdma module reload"
if fio_stop; then
	ktap_test_pass "target port removals: fio verify saw no error"
else
	ktap_test_fail "target port removals: fio verify saw no error"
fi

# --- reset while live, with I/O -----------------------------------------------------------------
fio_start "$dev" --size=16m
# The reset is the outage: the controller logs it, and its RKEYs are replaced.
if cycle "reset" "$ctrl" "timeout 60 nvme reset /dev/$ctrl" 0 true; then
	ktap_test_pass "nvme reset with I/O running: reset, new RKEYs, I/O back within the bound"
else
	ktap_test_fail "nvme reset with I/O running: reset, new RKEYs, I/O back within the bound"
fi
if fio_stop; then
	ktap_test_pass "reset: fio verify saw no error"
else
	ktap_test_fail "reset: fio verify saw no error"
fi

# --- the target changes its number of queues -------------------------------------------------------
# nvmet drops a subsystem's controllers when its qid_max changes. The host reconnects with the
# I/O queues the target grants now, one and then as many as before: the block layer's hardware
# queues shrink and grow again (update_nr_hw_queues) under the running I/O, and nothing is lost.
created() { dmesg_after "$1" | grep -q "$ctrl: creating $2 I/O queues"; }

# requeue MAX COUNT: qid_max to MAX; the controller must come back with COUNT I/O queues and
# COUNT hardware queues. Prints what it saw.
requeue() {
	local mark t ms n
	mark=$(kmsg_mark) t=$(now)
	_w "$1" "$qid_max" || return 1
	wait_for 60 created "$mark" "$2" || { echo "no 'creating $2 I/O queues'"; return 1; }
	ms=$(recovered "$ctrl" "$t") || { echo "not back with $2 I/O queues"; return 1; }
	n=$(hw_queues "/sys/class/nvme/$ctrl")
	echo "qid_max $1: $2 I/O queues, $n hardware queues, I/O back after $ms ms"
	((n == $2))
}

qid_max=$NVMET_CFS/subsystems/$NQN_NULL/attr_qid_max
qmax=$(cat "$qid_max") n0=$(hw_queues "/sys/class/nvme/$ctrl")
fio_start "$dev" --size=16m
ok=0 out=
if ((n0 > 1)) && out=$(requeue 1 1); then
	ktap_diag "$out"
	out=$(requeue "$qmax" "$n0") && ok=1
fi
ktap_diag "$out"
if ((ok)); then
	ktap_test_pass "target changes its queue count: $n0 -> 1 -> $n0 hardware queues under I/O"
else
	ktap_diag "hardware queues before: $n0"
	dmesg_since_mark | grep -E "$ctrl: " | tail -n 20 | ktap_diag
	ktap_test_fail "target changes its queue count: $n0 -> 1 -> $n0 hardware queues under I/O"
	# Writing qid_max drops the controllers again: only when it was left changed.
	[ "$(cat "$qid_max")" = "$qmax" ] || _w "$qmax" "$qid_max"
fi
if fio_stop; then
	ktap_test_pass "queue count changes: fio verify saw no error"
else
	ktap_test_fail "queue count changes: fio verify saw no error"
fi

# --- resets while another RDMA device comes and goes --------------------------------------------
# A device added or a port coming up brings forward a reconnect attempt that waits out its
# delay, and nothing else: a reset's own set-up, under way at that moment, stays the only one.
# A second rxe device, on a dummy netdev, flaps its port (every "port active" is such an event)
# while the controller resets ten times; then it is removed and added again during a reset.
resets_with_device_events() {
	local ctrl=$1 dev=$2 mark i n flapper rc=0
	modprobe dummy numdummies=0 && ip link add rsrdma_dm0 type dummy &&
		ip link set rsrdma_dm0 up && timeout 60 rdma link add rsrdma_x type "$RDMA_TYPE" netdev rsrdma_dm0 ||
		return 1
	mark=$(kmsg_mark)
	fio_start "$dev" --size=8m
	(while :; do
		ip link set rsrdma_dm0 down && sleep 0.1 && ip link set rsrdma_dm0 up && sleep 0.1
	done) >/dev/null 2>&1 &
	flapper=$!
	for ((i = 1; i <= 10; i++)); do
		timeout 60 nvme reset "/dev/$ctrl" >/dev/null 2>&1
		if ! wait_for 60 in_state "$ctrl" live; then
			echo "reset $i: $ctrl $(ctrl_state "$ctrl")"
			rc=1
			break
		fi
	done
	kill "$flapper" && wait "$flapper" 2>/dev/null
	ip link set rsrdma_dm0 up
	timeout 60 nvme reset "/dev/$ctrl" >/dev/null 2>&1 &
	i=$!
	timeout 60 rdma link delete rsrdma_x && timeout 60 rdma link add rsrdma_x type "$RDMA_TYPE" netdev rsrdma_dm0
	wait "$i"
	wait_for 60 in_state "$ctrl" live || { echo "after the last reset: $(ctrl_state "$ctrl")"; rc=1; }
	fio_stop || { echo "fio: an error, or blocks not verified"; rc=1; }
	timeout 60 rdma link delete rsrdma_x
	ip link delete rsrdma_dm0
	# The controller never lost its link: no reconnect attempt has a reason to run.
	n=$(dmesg_after "$mark" | grep -cE 'Successfully reconnected|Failed reconnect attempt')
	echo "11 resets, $(dmesg_after "$mark" | grep -c 'rsrdma_x port 1 active') port events of rsrdma_x;" \
		"reconnect attempts beside them: $n"
	dmesg_after "$mark" | grep -E 'reconnect' | head -n 8
	# A reset stops the controller as deletion does; it must still reconnect after a link loss.
	cycle "link loss after the resets" "$ctrl" "ip link set $RDMA_NETDEV down" 2 \
		"ip link set $RDMA_NETDEV up" || rc=1
	((rc == 0 && n == 0))
}
ktap_check "resets while another RDMA device flaps, goes and comes: one set-up at a time, I/O verified, reconnects after" \
	resets_with_device_events "$ctrl" "$dev"
probe_stop
host_disconnect_all

# --- link down longer than fast_io_fail_tmo ---------------------------------------------------
# keep_alive_tmo is long so that the target keeps the association through the outage.
opts="transport=$HOST_TRANSPORT,traddr=$TARGET_ADDR,trsvcid=$TARGET_PORT,nqn=$NQN_NULL,keep_alive_tmo=30"
ctrl=$(fabrics_connect "$opts,reconnect_delay=1,ctrl_loss_tmo=60,fast_io_fail_tmo=1")
wait_for 30 nvme_dev_for_nqn "$NQN_NULL" >/dev/null
dev=$(nvme_dev_for_nqn "$NQN_NULL")
ktap_diag "fast_io_fail_tmo=1: $dev on ${ctrl:-none}"
ip link set "$RDMA_NETDEV" down
sleep 3
t0=$(date +%s%N)
timeout 30 dd if="$dev" of=/dev/null bs=4k count=1 iflag=direct 2>/dev/null
rc=$?
fail_ms=$((($(date +%s%N) - t0) / 1000000))
ktap_diag "read during the outage: status $rc after $fail_ms ms (state $(ctrl_state "$ctrl"))"
if ((rc != 0 && rc != 124 && fail_ms < 5000)); then
	ktap_test_pass "link down longer than fast_io_fail_tmo: I/O fails fast"
else
	ktap_test_fail "link down longer than fast_io_fail_tmo: I/O fails fast"
fi
ip link set "$RDMA_NETDEV" up
wait_for "$RECOVERY_TIMEOUT" in_state "$ctrl" live
ktap_check "after fast_io_fail: I/O resumes when the link returns" fio_verify "$dev" --size=8m
host_disconnect_all

# --- link down longer than ctrl_loss_tmo --------------------------------------------------------
ctrl=$(fabrics_connect "$opts,reconnect_delay=1,ctrl_loss_tmo=3")
wait_for 30 nvme_dev_for_nqn "$NQN_NULL" >/dev/null
dev=$(nvme_dev_for_nqn "$NQN_NULL")
ktap_diag "ctrl_loss_tmo=3: $dev on ${ctrl:-none}"
(timeout 60 dd if="$dev" of=/dev/null bs=1M count=64 iflag=direct 2>/dev/null; echo $? >/tmp/rsrdma-dd.rc) &
dd_pid=$!
ip link set "$RDMA_NETDEV" down
start=$SECONDS
wait_for 30 in_state "$ctrl" gone
gone_after=$((SECONDS - start))
wait "$dd_pid"
dd_rc=$(cat /tmp/rsrdma-dd.rc 2>/dev/null)
ktap_diag "controller gone after ${gone_after} s; reader status ${dd_rc:-none}"
ip link set "$RDMA_NETDEV" up
if [ "$(ctrl_state "$ctrl")" = gone ] && ((gone_after < 20)) && [ -n "$dd_rc" ] && [ "$dd_rc" != 0 ] &&
	[ "$dd_rc" != 124 ]; then
	ktap_test_pass "link down longer than ctrl_loss_tmo: controller deleted, I/O fails, nothing hangs"
else
	ktap_test_fail "link down longer than ctrl_loss_tmo: controller deleted, I/O fails, nothing hangs"
fi

# --- ctrl_loss_tmo changed through sysfs while reconnecting -------------------------------------
# The core accepts a write to a controller's ctrl_loss_tmo at any time; a reconnecting controller
# must follow it: with ctrl_loss_tmo=5 it would be deleted about 5 s after the loss (as above),
# -1 written meanwhile keeps it reconnecting until the link returns.
wait_for 30 _fabric_active
ctrl=$(fabrics_connect "$opts,reconnect_delay=1,ctrl_loss_tmo=5")
wait_for 30 nvme_dev_for_nqn "$NQN_NULL" >/dev/null
dev=$(nvme_dev_for_nqn "$NQN_NULL")
ip link set "$RDMA_NETDEV" down
wait_for 30 in_state "$ctrl" connecting
written=no
echo -1 >"/sys/class/nvme/$ctrl/ctrl_loss_tmo" && written=yes
sleep "$(scaled 10)"
down_state=$(ctrl_state "$ctrl")
ip link set "$RDMA_NETDEV" up
wait_for "$RECOVERY_TIMEOUT" in_state "$ctrl" live
ktap_diag "ctrl_loss_tmo -1 written ($written) while reconnecting: $down_state $(scaled 10) s later, $(ctrl_state "$ctrl") once the link is back"
if [ "$written" = yes ] && [ "$down_state" = connecting ] && in_state "$ctrl" live &&
	fio_verify "$dev" --size=8m; then
	ktap_test_pass "ctrl_loss_tmo raised through sysfs while reconnecting: controller kept, live again"
else
	ktap_test_fail "ctrl_loss_tmo raised through sysfs while reconnecting: controller kept, live again"
fi
host_disconnect_all

# --- reset and delete while reconnecting -------------------------------------------------------
wait_for 30 _fabric_active
ctrl=$(fabrics_connect "$opts,reconnect_delay=1,ctrl_loss_tmo=60")
wait_for 30 nvme_dev_for_nqn "$NQN_NULL" >/dev/null
ip link set "$RDMA_NETDEV" down
wait_for 30 in_state "$ctrl" connecting
out=$(timeout 30 nvme reset "/dev/$ctrl" 2>&1)
ktap_diag "reset while $(ctrl_state "$ctrl"): ${out:-accepted}"
ktap_check "reset while reconnecting is refused or handled, controller intact" \
	test "$(ctrl_state "$ctrl")" = connecting -o "$(ctrl_state "$ctrl")" = resetting
start=$SECONDS
timeout 60 nvme disconnect -d "$ctrl" 2>&1 | ktap_diag
wait_for 30 in_state "$ctrl" gone
ktap_diag "deleted while reconnecting in $((SECONDS - start)) s"
ktap_check "delete while reconnecting" test "$(ctrl_state "$ctrl")" = gone
ip link set "$RDMA_NETDEV" up
wait_for 30 _fabric_active

# link_readd: the RDMA device back after its removal, and the target port, whose listener
# nvmet-rdma dropped with the device, enabled again.
link_readd() {
	rdma link add "$RDMA_LINK" type "$RDMA_TYPE" netdev "$RDMA_NETDEV" && wait_for 30 _fabric_active &&
		target_port_disable && target_port_enable
}

# --- another RDMA device removed while a reconnect waits ------------------------------------------
# Device removal waits for any reconnect attempt that may be using the device; one that only
# waits out its delay keeps its time. reconnect_delay=20 and ctrl_loss_tmo=20 allow one attempt
# after the first failed one, 20 s after the loss (the core rounds ctrl_loss_tmo to whole delays,
# so 30 would allow two): an attempt the removal pushed back would fall past the deadline and
# the controller would be deleted. The first attempt races the target's listener going away
# and has been seen to fail only 10 s after the loss; the delay leaves room for that.
waiting_reconnect() { dmesg_after "$1" | grep -q "$2: Reconnecting in"; }

# second_device_loss up|down OPTS: a second rxe device, rsrdma_x on the dummy netdev rsrdma_dm0
# (up or down), then a controller connected with OPTS whose target port goes, until its first
# reconnect attempt has failed and the next one waits. Sets the caller's added (a log mark
# before the device), ctrl, mark and t (the time of the loss); fails when any step does.
# second_device_cleanup undoes it all.
second_device_loss() {
	ctrl=
	modprobe dummy numdummies=0 && ip link add rsrdma_dm0 type dummy || return 1
	if [ "$1" = up ]; then ip link set rsrdma_dm0 up || return 1; fi
	added=$(kmsg_mark)
	timeout 60 rdma link add rsrdma_x type "$RDMA_TYPE" netdev rsrdma_dm0 || return 1
	ctrl=$(fabrics_connect "$2") && wait_for 30 in_state "$ctrl" live || return 1
	mark=$(kmsg_mark)
	t=$SECONDS
	target_port_disable
	if ! wait_for 25 waiting_reconnect "$mark" "$ctrl"; then
		echo "no reconnect scheduled $((SECONDS - t)) s after the loss"
		return 1
	fi
	echo "first attempt failed, next one waiting, $((SECONDS - t)) s after the loss"
}
second_device_cleanup() {
	target_port_enable
	[ -z "$ctrl" ] || timeout 60 nvme disconnect -d "$ctrl" >/dev/null 2>&1
	timeout 60 rdma link delete rsrdma_x 2>/dev/null
	ip link delete rsrdma_dm0 2>/dev/null
}

other_device_removed_while_reconnecting() {
	local added ctrl mark='' t rc=0
	second_device_loss up "$opts,reconnect_delay=20,ctrl_loss_tmo=20" || rc=1
	if ((rc == 0)); then
		timeout 60 rdma link delete rsrdma_x || rc=1
		echo "rsrdma_x removed $((SECONDS - t)) s after the loss, $ctrl $(ctrl_state "$ctrl")"
		target_port_enable
		if wait_for 40 in_state "$ctrl" live; then
			echo "$ctrl live again $((SECONDS - t)) s after the loss"
		else
			echo "$ctrl $(ctrl_state "$ctrl") $((SECONDS - t)) s after the loss"
			rc=1
		fi
	fi
	# All of the controller's lines when it failed (why the first attempt took long).
	if ((rc == 0)); then
		dmesg_after "$mark" | grep -E "$ctrl: .*([Rr]econnect|giving up)"
	elif [ -n "$mark" ]; then
		dmesg_after "$mark" | grep -E "$ctrl: " | tail -n 40
	fi
	second_device_cleanup
	return $rc
}
ktap_check "another RDMA device removed while a reconnect waits: the attempt keeps its time" \
	other_device_removed_while_reconnecting

# --- a port coming up on a device added while it was down ----------------------------------------
# An RDMA device can be added while its netdev is down (no carrier yet at boot). The first
# "active" event of its port is then a change like any other, and brings forward a reconnect
# attempt that waits out its delay. The device is added before the loss (adding one brings the
# attempts forward too); with reconnect_delay=60 the attempt after the first failed one would
# come a minute after it. The port's "down" event at the device's registration may reach the
# handler before or after the watch starts: either way it is no change (the port was down), and
# a module that took the port for up would log it, or swallow the "active" one.
port_up_on_device_added_down() {
	local added ctrl mark='' t rc=0
	second_device_loss down "$opts,reconnect_delay=60,ctrl_loss_tmo=120" || rc=1
	if ((rc == 0)); then
		target_port_enable
		t=$SECONDS
		ip link set rsrdma_dm0 up
		if wait_for 15 in_state "$ctrl" live; then
			echo "$ctrl live $((SECONDS - t)) s after rsrdma_x's port came up"
		else
			echo "$ctrl $(ctrl_state "$ctrl") $((SECONDS - t)) s after rsrdma_x's port came up"
			rc=1
		fi
		if ! dmesg_after "$mark" | grep -q "rsrdma_x port 1 active"; then
			echo "no \"rsrdma_x port 1 active\" line"
			rc=1
		fi
		if dmesg_after "$added" | grep -q "rsrdma_x port 1 down"; then
			echo "the port, down from the start, was reported going down"
			rc=1
		fi
	fi
	[ -z "$mark" ] || dmesg_after "$mark" | grep -E "rsrdma_x port|$ctrl: .*([Rr]econnect|giving up)"
	second_device_cleanup
	return $rc
}
ktap_check "a port coming up on a device added while it was down brings the reconnect forward" \
	port_up_on_device_added_down

# --- disconnect while the RDMA device goes --------------------------------------------------------
# The core deletes a controller in the context of the "nvme disconnect" that asked, not in a
# work item: device removal must still wait until that deletion has released the device (its
# queues, the pool's MR, the protection domain) before the RDMA core frees it. But not for the
# deletion's shutdown command's timeout (60 s): when the target's removal (on the same device)
# runs first, it drops its queues and that command gets no response; after 10 s the removal
# aborts it.
disconnect_during_device_removal() {
	local i ctrl pid mark t secs rc=0
	for ((i = 1; i <= 3; i++)); do
		if ! ctrl=$(fabrics_connect "$opts,reconnect_delay=1,ctrl_loss_tmo=60") ||
			! wait_for 30 in_state "$ctrl" live; then
			rc=1
			break
		fi
		mark=$(kmsg_mark)
		timeout 60 nvme disconnect -d "$ctrl" >/dev/null 2>&1 &
		pid=$!
		t=$SECONDS
		timeout 60 rdma link delete "$RDMA_LINK" || { echo "round $i: device removal failed"; rc=1; }
		secs=$((SECONDS - t))
		wait "$pid"
		echo "round $i: the removal took $secs s"
		((secs <= $(scaled 30))) || { echo "round $i: longer than $(scaled 30) s"; rc=1; }
		wait_for 30 in_state "$ctrl" gone || { echo "round $i: $ctrl $(ctrl_state "$ctrl")"; rc=1; }
		echo "round $i: $(dmesg_after "$mark" | grep -oE 'RDMA device .* removed \([0-9]+ controllers released it\)|waiting for .*|queue 0: RDMA device removed while deleting.*')"
		link_readd || { rc=1; break; }
		((rc == 0)) || break
	done
	echo "left: $(rdma_counts | grep -vE ' 0$' | tr '\n' ' ')"
	return $rc
}
ktap_check "nvme disconnect while its RDMA device is removed" disconnect_during_device_removal

# --- a connect while the port goes down and the device goes --------------------------------------
# A controller being created is not yet in the list that device removal walks: its queues learn
# of the removal from the RDMA CM, and one stopped while the port is down must not park its CM
# id once the removal has released the parked ones (the removal would wait for it for good).
connect_during_device_removal() {
	local i out pid mark t ctrl first rc=0
	first=$(kmsg_mark)
	echo 'module nvme_rsrdma func rsrdma_dbg_cm +p' >/sys/kernel/debug/dynamic_debug/control
	for ((i = 0; i < 6; i++)); do
		mark=$(kmsg_mark)
		out=/tmp/rsrdma-connect.$i
		fabrics_connect "$opts,reconnect_delay=1,ctrl_loss_tmo=60" >"$out" 2>&1 &
		pid=$!
		sleep "$(printf '0.%02d' $((i * 5)))"
		ip link set "$RDMA_NETDEV" down
		t=$SECONDS
		timeout 60 rdma link delete "$RDMA_LINK" || { echo "round $i: removal failed or hung"; rc=1; }
		wait "$pid"
		echo "round $i: removal took $((SECONDS - t)) s, connect: $(sed 's/^# connect .*: //' "$out" | tr '\n' ' ')"
		ip link set "$RDMA_NETDEV" up
		link_readd || { rc=1; break; }
		ctrl=$(grep -o '^nvme[0-9]*$' "$out")
		[ -z "$ctrl" ] || timeout 60 nvme disconnect -d "$ctrl" >/dev/null 2>&1
		if dmesg_after "$mark" | grep "parked CM id is still on a device being removed"; then
			rc=1
		fi
		((rc == 0)) || break
	done
	echo 'module nvme_rsrdma func rsrdma_dbg_cm -p' >/sys/kernel/debug/dynamic_debug/control
	echo "CM ids parked: $(dmesg_after "$first" | grep -c 'CM id parked'), destroyed instead" \
		"(device going): $(dmesg_after "$first" | grep -c 'CM id destroyed, not parked')"
	rm -f /tmp/rsrdma-connect.*
	return $rc
}
ktap_check "connect while the port goes down and the RDMA device is removed" connect_during_device_removal

# --- the target reconfigured while the host reconnects ---------------------------------------------
# The sequence a new user runs: a subsystem of its own that allows only one host, fio writing to
# it, and the subsystem torn down and created again six times in the order configfs scripts use
# (subsystem, namespace, port link, then the allowed host), with keep-alive 1 s and reconnect
# delay 1 s. Reconnects land while the subsystem is gone (nvmet: invalid parameter, subsystem not
# found) or linked but the host not yet allowed (invalid host), both with DNR: the controller must
# keep retrying, come back each time, and every block written through it read back intact.
NQN_RECONF=nqn.2026-12.io.rsrdma:reconf
HOSTNQN_RECONF=nqn.2026-12.io.rsrdma:reconf-host
RECONF_CYCLES=6

# The namespace keeps its identifiers, as a saved configuration restores them (nvmet would draw a
# new UUID and NGUID, and the host would drop the namespace as another one).
RECONF_UUID=5f1fde70-12c4-4811-a1fe-1418bb8010e1
reconf_create() {
	local s=$NVMET_CFS/subsystems/$NQN_RECONF
	mkdir "$s" && _w 0 "$s/attr_allow_any_host" && _w 5f1fde7012c44811 "$s/attr_serial" &&
		mkdir "$s/namespaces/1" && _w "$RECONF_UUID" "$s/namespaces/1/device_uuid" &&
		_w "$RECONF_UUID" "$s/namespaces/1/device_nguid" &&
		_w /dev/rsrdma_reconf "$s/namespaces/1/device_path" && _w 1 "$s/namespaces/1/enable" &&
		ln -s "$s" "$NVMET_CFS/ports/1/subsystems/$NQN_RECONF"
}
reconf_allow() {
	ln -s "$NVMET_CFS/hosts/$HOSTNQN_RECONF" \
		"$NVMET_CFS/subsystems/$NQN_RECONF/allowed_hosts/$HOSTNQN_RECONF"
}
reconf_remove() {
	local s=$NVMET_CFS/subsystems/$NQN_RECONF
	rm "$NVMET_CFS/ports/1/subsystems/$NQN_RECONF" "$s/allowed_hosts/$HOSTNQN_RECONF" &&
		_w 0 "$s/namespaces/1/enable" && rmdir "$s/namespaces/1" && rmdir "$s"
}

target_reconfigured() {
	local dev c i t mark fio_pid out=/tmp/rsrdma-reconf.json rc=0 ms=() refused gaveup verified
	local back host subsys
	_nullb_create rsrdma_reconf 64 512 || return 1
	mkdir -p "$NVMET_CFS/hosts/$HOSTNQN_RECONF" && reconf_create && reconf_allow || return 1
	timeout 60 nvme connect -t "$HOST_TRANSPORT" -a "$TARGET_ADDR" -s "$TARGET_PORT" \
		-n "$NQN_RECONF" --hostnqn="$HOSTNQN_RECONF" --keep-alive-tmo=1 --reconnect-delay=1 \
		--ctrl-loss-tmo=60 >/dev/null || return 1
	wait_for 30 nvme_dev_for_nqn "$NQN_RECONF" || return 1
	dev=$(nvme_dev_for_nqn "$NQN_RECONF")
	c=$(basename "$(dirname "$(grep -lx "$NQN_RECONF" /sys/class/nvme/nvme*/subsysnqn | head -n1)")")
	mark=$(kmsg_mark)
	# 48 blocks of 1 MiB at one a second, then fio's verify pass over all of them.
	(cd /tmp && fio --name=reconf --filename="$dev" --direct=1 --ioengine=libaio --rw=write \
		--bs=1m --size=48m --rate=1m --verify=crc32c --do_verify=1 --verify_fatal=1 \
		--verify_state_save=0 --output-format=json --output="$out") &
	fio_pid=$!
	sleep 3
	for ((i = 1; i <= RECONF_CYCLES; i++)); do
		reconf_remove || { echo "cycle $i: removing the subsystem failed"; rc=1; break; }
		sleep 2
		reconf_create || { echo "cycle $i: creating the subsystem failed"; rc=1; break; }
		sleep 1.5
		reconf_allow || { echo "cycle $i: allowing the host failed"; rc=1; break; }
		t=$(now)
		if ! wait_for 20 in_state "$c" live; then
			echo "cycle $i: not live 20 s after the host was allowed again ($(ctrl_state "$c"))"
			rc=1
			break
		fi
		ms+=("$(awk -v a="$t" -v b="$(now)" 'BEGIN { printf "%d", (b - a) * 1000 }')")
		sleep 1
	done
	wait "$fio_pid" || { echo "fio failed (status $?): $(grep -m3 -E 'err|verify' "$out")"; rc=1; }
	verified=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["jobs"][0]["read"]["io_bytes"])' "$out" 2>/dev/null)
	refused=$(dmesg_after "$mark" | grep -c "$c: connect refused: ")
	host=$(dmesg_after "$mark" | grep -c "$c: connect refused: host not allowed")
	subsys=$(dmesg_after "$mark" | grep -c "$c: connect refused: invalid connect parameters")
	back=$(dmesg_after "$mark" | grep -c "$c: Successfully reconnected")
	gaveup=$(dmesg_after "$mark" | grep -c "$c: giving up reconnecting")
	echo "$RECONF_CYCLES cycles; live again after the host was allowed: ${ms[*]} ms; reconnects: $back;" \
		"connects refused and retried: $refused ($host host not allowed, $subsys subsystem not found);" \
		"given up: $gaveup; bytes verified by fio: ${verified:-none}"
	dmesg_after "$mark" | grep -m3 "$c: connect refused: "
	# Every cycle went through a reconnect, and some attempts met the refusals.
	((${#ms[@]} == RECONF_CYCLES && back >= RECONF_CYCLES)) || rc=1
	((refused > 0 && gaveup == 0)) || rc=1
	[ "$verified" = $((48 << 20)) ] || rc=1
	timeout 60 nvme disconnect -d "$c" >/dev/null 2>&1
	rm -f "$out"
	return $rc
}
ktap_check "target reconfigured $RECONF_CYCLES times while reconnecting: refusals retried, every block verified" \
	target_reconfigured

ktap_check "module unloads" host_unload
ktap_check "kernel log clean" dmesg_check_clean
ktap_finished
