#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# rsrdma-timeout: 1200
#
# Lifecycle races under I/O and allocation failures. rmmod with I/O in flight and while a
# controller reconnects: refused, or every controller deleted, the I/O ended and nothing left.
# Resets, target port outages and a deletion from several threads at once while fio writes and
# verifies.
# Resets issued while a controller is still connecting. Many controllers deleted at once while
# they reconnect. Then the kernel's fault injection (failslab, fail_page_alloc), limited to
# allocations made with nvme_rsrdma on the stack: connects under failing allocations end
# working or with an error and leave nothing; a reconnect under them keeps retrying and
# loses nothing; a pool whose preferred chunks cannot be allocated falls back to smaller ones.
set -u
. "$(dirname "$0")/lib/common.sh"

BG_PIDS=()

cleanup() {
	fi_off
	pkill -x fio
	ip link set "$RDMA_NETDEV" up 2>/dev/null
	teardown_all
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# connect NQN [OPTIONS]: connect through /dev/nvme-fabrics with a reconnect delay of 1 s, a
# controller loss timeout of 60 s, keep-alive 15 s and OPTIONS (comma-separated); print the new
# controller's name (nvmeN).
connect() {
	fabrics_connect "transport=$HOST_TRANSPORT,traddr=$TARGET_ADDR,trsvcid=$TARGET_PORT,nqn=$1,reconnect_delay=1,ctrl_loss_tmo=60,keep_alive_tmo=15${2:+,$2}"
}

# connect3: three controllers, to the three subsystems; their names, or a failure said on stdout.
connect3() {
	local n c out=()
	for n in "$NQN_NULL" "$NQN_NULL2" "$NQN_FILE"; do
		c=$(connect "$n") || { echo "connect to $n failed: $c"; return 1; }
		out+=("$c")
	done
	echo "${out[@]}"
}

# ns_dev NQN: the block device of NQN's namespace, once the core has scanned it.
ns_dev() { wait_for "$(scaled 30)" nvme_dev_for_nqn "$1" && nvme_dev_for_nqn "$1"; }

# load DEV: plain random writes on DEV in the background for up to 120 s, scaled (pid in
# BG_PIDS); I/O errors end it with a non-zero status.
load() {
	(cd /tmp && exec fio --name=load --filename="$1" --direct=1 --ioengine=libaio --rw=randwrite \
		--bs=64k --iodepth=8 --size=16m --time_based --runtime="$(scaled 120)" >/dev/null 2>&1) &
	BG_PIDS+=($!)
}

# moving DEV: DEV completed writes in the last half second.
moving() {
	local a b
	a=$(awk '{ print $5 }' "/sys/block/${1##*/}/stat")
	sleep 0.5
	b=$(awk '{ print $5 }' "/sys/block/${1##*/}/stat")
	((b > a))
}

# ended_within SECS PID...: every PID has exited within SECS seconds.
ended_within() {
	local secs=$1 p
	shift
	for p in "$@"; do
		wait_for "$secs" eval "! kill -0 $p" || return 1
	done
}

# ours_gone: the module holds no RDMA resource within 10 s (what it holds is printed if not). The
# target's, nvmet-rdma's, are not counted: an association the host dropped while the link was
# down stays at the target until its keep-alive timer ends it.
ours_gone() {
	wait_for 10 no_module_rdma_resources && return 0
	echo "RDMA resources of nvme_rsrdma left: $(module_rdma_resources | tr '\n' ' ')"
	return 1
}

ktap_print_header
ktap_set_plan 11

if ! fabric_setup || ! target_setup || ! host_load; then
	bail_out "set-up failed"
fi
dmesg_mark
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug

# --- rmmod under I/O ---------------------------------------------------------------------------
all_live() {
	local c
	for c in "$@"; do in_state "$c" live || return 1; done
}

# rmmod_outcome WANT MS RC: whether an rmmod that returned RC after MS milliseconds was refused
# cleanly (the module and its controllers still there and live) or unloaded cleanly (the
# controllers deleted, the I/O ended, no RDMA resource left). Prints which.
rmmod_outcome() {
	local want=$1 ms=$2 rc=$3 c
	if ((rc != 0)); then
		_module_loaded nvme_rsrdma || { echo "rmmod failed ($rc) but the module is gone"; return 1; }
		for c in "${ctrls[@]}"; do
			in_state "$c" live || [ "$want" != live ] ||
				{ echo "refused, but $c is $(ctrl_state "$c")"; return 1; }
		done
		echo "refused in $ms ms (status $rc), module and controllers kept"
		REFUSED=1
		return 0
	fi
	REFUSED=0
	_module_loaded nvme_rsrdma && { echo "rmmod returned 0 but the module is loaded"; return 1; }
	_no_fabrics_ctrl || { echo "unloaded, but controllers remain: $(ls /sys/class/nvme)"; return 1; }
	ended_within 30 "${BG_PIDS[@]}" || { echo "unloaded in $ms ms, but fio still runs"; return 1; }
	ours_gone || { echo "unloaded in $ms ms, RDMA resources left"; return 1; }
	echo "unloaded in $ms ms: controllers deleted, fio ended, no RDMA resource left"
}

# rmmod_during WANT SETUP [BEFORE]: three controllers with I/O running, SETUP (a command) then,
# once every controller is in state WANT, BEFORE (a command) and rmmod. The module is loaded
# again at the end, whatever happened.
rmmod_during() {
	local rc=0
	_rmmod_during "$@" || rc=1
	ip link set "$RDMA_NETDEV" up
	((${#BG_PIDS[@]})) && kill "${BG_PIDS[@]}" 2>/dev/null
	host_disconnect_all >/dev/null
	_module_loaded nvme_rsrdma || host_load || rc=1
	return $rc
}
_rmmod_during() {
	local want=$1 setup=$2 before=${3:-true} c d t ms rc=0 out
	ctrls=() BG_PIDS=()
	for n in "$NQN_NULL" "$NQN_NULL2" "$NQN_FILE"; do
		c=$(connect "$n") || return 1
		ctrls+=("$c")
		d=$(ns_dev "$n") || { echo "$n: no namespace"; return 1; }
		load "$d"
		wait_for "$(scaled 30)" moving "$d" || { echo "$d: no I/O in $(scaled 30) s"; return 1; }
	done
	eval "$setup" || { echo "'$setup' failed"; return 1; }
	for c in "${ctrls[@]}"; do
		wait_for "$(scaled 30)" in_state "$c" "$want" ||
			{ echo "$c: $(ctrl_state "$c"), not $want"; return 1; }
	done
	eval "$before" || { echo "'$before' failed"; return 1; }
	echo "before rmmod: $(for c in "${ctrls[@]}"; do printf '%s %s ' "$c" "$(ctrl_state "$c")"; done)"
	t=$(date +%s%N)
	out=$(timeout 120 rmmod nvme_rsrdma 2>&1) || rc=$?
	ms=$((($(date +%s%N) - t) / 1000000))
	[ -n "$out" ] && echo "rmmod: $out"
	ip link set "$RDMA_NETDEV" up
	rmmod_outcome "$want" "$ms" "$rc" || return 1
	if ((REFUSED)); then
		wait_for 60 all_live "${ctrls[@]}" || { echo "not live again: ${ctrls[*]}"; return 1; }
		for p in "${BG_PIDS[@]}"; do
			kill -0 "$p" 2>/dev/null || { echo "fio ended while the module stayed"; return 1; }
		done
		kill "${BG_PIDS[@]}" && wait "${BG_PIDS[@]}" 2>/dev/null
	fi
	BG_PIDS=()
}
ktap_check "rmmod with I/O in flight on three controllers: refused or clean" \
	rmmod_during live true
# The link comes back before rmmod, while the controllers wait to reconnect (1 s) or reconnect:
# with the port down, soft-RoCE's CM would send the disconnect requests of rmmod through it and
# its GSI QP fail for good (admin guide, "soft-RoCE and link loss"), for every later test.
ktap_check "rmmod while three controllers with I/O queued reconnect: refused or clean" \
	rmmod_during connecting "ip link set $RDMA_NETDEV down" "ip link set $RDMA_NETDEV up"

# --- resets, flaps and a deletion at once -----------------------------------------------------
# Three controllers: verified writes on the first (fio_start), a verified job on the second,
# the third deleted halfway. Two threads reset the first two (nvme reset and the sysfs file),
# one takes the target's port away for a second every 4 s, for 20 s (all but the outage's second
# scaled on the debug kernel, where a reset takes seconds: with an outage every 4 s there, every
# reset ran into one and ended not live, refused). Not the netdev: a reset's CM messages (the MAD
# layer's retries) can meet the port going down, and soft-RoCE's GSI QP, shared here with the
# target, then fails for good (admin guide, "soft-RoCE and link loss").
storm() {
	local c1 c2 c3 d1 d2 end resets=0 refused=0 flaps=0 r1 r2 fl v2 rc=0 out=/tmp/rsrdma-storm
	host_disconnect_all >/dev/null
	out=$(connect3) || { echo "$out"; host_disconnect_all >/dev/null; return 1; }
	read -r c1 c2 c3 <<<"$out"
	out=/tmp/rsrdma-storm
	if ! d1=$(ns_dev "$NQN_NULL") || ! d2=$(ns_dev "$NQN_NULL2"); then
		echo "no namespace on $c1 or $c2"
		host_disconnect_all >/dev/null
		return 1
	fi
	fio_start "$d1" --size=16m
	# libaio: io_uring's reads can end with EAGAIN when resets keep the namespace's queue frozen
	# (a REQ_NOWAIT bio finds it so and io_uring does not always issue it again).
	(fio_verify "$d2" --size=8m --loops=6 --ioengine=libaio >"$out.v2" 2>&1) &
	v2=$!
	end=$((SECONDS + $(scaled 20)))
	(while ((SECONDS < end)); do
		if timeout 60 nvme reset "/dev/$c1" 2>/dev/null; then echo ok; else echo refused; fi
		sleep 0.3
	done) >"$out.r1" &
	r1=$!
	(while ((SECONDS < end)); do
		if echo 1 2>/dev/null >"/sys/class/nvme/$c2/reset_controller"; then echo ok; else echo refused; fi
		sleep 0.4
	done) >"$out.r2" &
	r2=$!
	(while ((SECONDS < end)); do
		target_port_disable && sleep 1 && target_port_enable && echo flap
		sleep "$(scaled 3)"
	done) >"$out.fl" 2>&1 &
	fl=$!
	sleep "$(scaled 8)"
	timeout 60 nvme disconnect -d "$c3" >/dev/null || { echo "deleting $c3 failed"; rc=1; }
	wait "$r1" "$r2" "$fl"
	target_port_enable >/dev/null 2>&1
	resets=$(cat "$out.r1" "$out.r2" | grep -c '^ok')
	refused=$(cat "$out.r1" "$out.r2" | grep -c '^refused')
	flaps=$(grep -c flap "$out.fl")
	echo "$resets resets accepted, $refused refused (busy), $flaps target port outages, $c3 deleted"
	for c in "$c1" "$c2"; do
		wait_for 60 in_state "$c" live || { echo "$c: $(ctrl_state "$c") 60 s after the storm"; rc=1; }
	done
	[ -e "/sys/class/nvme/$c3" ] && { echo "$c3 still there"; rc=1; }
	fio_stop || rc=1
	if wait "$v2"; then
		grep -h 'fio on' "$out.v2"
	else
		echo "verified job on $d2 failed:"
		cat "$out.v2"
		rc=1
	fi
	rm -f "$out".*
	((resets > 0 && flaps > 0)) || { echo "no reset accepted, or no port outage"; rc=1; }
	host_disconnect_all
	ours_gone || rc=1
	return $rc
}
ktap_check "resets, port outages and a deletion from several threads under I/O: nothing lost" storm

# --- resets while connecting ----------------------------------------------------------------
# Each round: nvme connect in the background, and resets written to the new controller's sysfs
# file from the moment it appears until the connect returns.
reset_while_connecting() {
	local i p c f deadline accepted=0 refused=0 ok=0 failed=0 rc=0
	host_disconnect_all >/dev/null
	for ((i = 1; i <= 8; i++)); do
		connect "$NQN_NULL" >/dev/null 2>&1 &
		p=$!
		c=''
		deadline=$((SECONDS + 120))
		while kill -0 "$p" 2>/dev/null; do
			if ((SECONDS > deadline)); then
				echo "round $i: the connect has not returned in 120 s (${c:-no controller}: $(ctrl_state "${c:-none}"))"
				return 1
			fi
			for f in /sys/class/nvme/nvme*/subsysnqn; do
				[ "$(cat "$f" 2>/dev/null)" = "$NQN_NULL" ] && c=$(basename "$(dirname "$f")")
			done
			if [ -n "$c" ]; then
				if echo 1 2>/dev/null >"/sys/class/nvme/$c/reset_controller"; then
					accepted=$((accepted + 1))
				else
					refused=$((refused + 1))
				fi
			fi
		done
		if wait "$p"; then ok=$((ok + 1)); else failed=$((failed + 1)); fi
		if [ -n "$c" ] && [ -e "/sys/class/nvme/$c" ]; then
			if ! wait_for 60 in_state "$c" live; then
				echo "round $i: $c $(ctrl_state "$c")"
				rc=1
			elif ! fio_verify "$(ns_dev "$NQN_NULL")" --size=1m --bs=64k; then
				echo "round $i: no verified I/O on $c"
				rc=1
			fi
		fi
		host_disconnect_all || rc=1
		ours_gone || rc=1
	done
	echo "8 connects: $ok succeeded, $failed failed; resets during them: $accepted accepted, $refused refused"
	# A reset can only be accepted once the controller is live, before the connect returns: that
	# race is the point of the case.
	((ok > 0 && accepted > 0)) || { echo "no connect succeeded, or no reset was accepted"; rc=1; }
	return $rc
}
ktap_check "resets while the controller connects: live afterwards or a clean error" \
	reset_while_connecting

# --- many controllers deleted while they reconnect ------------------------------------------------
# The target's port goes away (the link stays up: see rmmod_during), the controllers reconnect
# in vain, and all are deleted at once; the port comes back during the deletions.
delete_reconnecting() {
	local n=8 i c ctrls=() t ms rc=0
	host_disconnect_all >/dev/null
	for ((i = 0; i < n; i++)); do
		c=$(connect "$NQN_NULL" duplicate_connect,nr_io_queues=1) ||
			{ echo "connect $((i + 1)) failed: $c"; host_disconnect_all >/dev/null; return 1; }
		ctrls+=("$c")
	done
	target_port_disable
	for c in "${ctrls[@]}"; do
		wait_for 60 in_state "$c" connecting || { echo "$c: $(ctrl_state "$c")"; rc=1; }
	done
	sleep 2
	t=$(date +%s%N)
	for c in "${ctrls[@]}"; do
		echo 1 >"/sys/class/nvme/$c/delete_controller" &
	done
	sleep 0.3
	target_port_enable
	wait
	wait_for 60 _no_fabrics_ctrl || { echo "controllers left: $(ls /sys/class/nvme)"; rc=1; }
	ms=$((($(date +%s%N) - t) / 1000000))
	echo "$n controllers deleted while reconnecting (the target's port back during the deletions) in $ms ms"
	ours_gone || rc=1
	return $rc
}
ktap_check "8 controllers deleted at once while they reconnect" delete_reconnecting

# --- allocation failures (tests/lib/fault.sh) --------------------------------------------------
# Connects through /dev/nvme-fabrics (as nvme-cli writes them) with allocations failing: each
# ends with a controller that works or with an error, and nothing left behind.
connect_failing() {
	local attr=$1 pct=$2 i out ok=0 err=0 injected c errs=() rc=0
	local opts="transport=$HOST_TRANSPORT,traddr=$TARGET_ADDR,trsvcid=$TARGET_PORT,nqn=$NQN_NULL"
	host_disconnect_all >/dev/null
	for ((i = 1; i <= 16; i++)); do
		fi_on "$attr" "$pct" || return 1
		out=$(
			exec 2>&1
			exec 3<>/dev/nvme-fabrics || exit 2
			printf '%s' "$opts,reconnect_delay=1,ctrl_loss_tmo=10" >&3 || exit 1
			read -r -u 3 line && echo "$line"
		)
		injected=$(fi_injected "$attr")
		fi_off
		if [[ $out == instance=* ]]; then
			ok=$((ok + 1))
			c=nvme${out#instance=}
			c=${c%%,*}
			wait_for 30 in_state "$c" live || { echo "attempt $i: $c $(ctrl_state "$c")"; rc=1; }
		else
			err=$((err + 1))
			errs+=("${out##*: }")
		fi
		host_disconnect_all || rc=1
		ours_gone || { echo "attempt $i: resources left"; rc=1; }
	done
	echo "$attr at $pct %: 16 connects, $ok live, $err refused ($(printf '%s\n' "${errs[@]}" |
		sort | uniq -c | tr -s ' ' | paste -s -d,)); $injected failures injected in the last"
	connect "$NQN_NULL" >/dev/null && fio_verify "$(ns_dev "$NQN_NULL")" --size=4m || rc=1
	host_disconnect_all
	((err > 0)) || { echo "no connect failed: the injection did not reach the connect path"; rc=1; }
	return $rc
}

# A controller with verified writes running loses its link; the reconnects run with allocations
# failing for 8 s, then without.
reconnect_failing() {
	local attr=$1 pct=$2 c d mark injected failed rc=0
	host_disconnect_all >/dev/null
	c=$(connect "$NQN_NULL") && d=$(ns_dev "$NQN_NULL") || return 1
	fio_start "$d" --size=8m
	mark=$(kmsg_mark)
	ip link set "$RDMA_NETDEV" down
	wait_for 30 in_state "$c" connecting || { echo "$c: $(ctrl_state "$c"), not connecting"; rc=1; }
	fi_on "$attr" "$pct" || rc=1
	sleep 2
	ip link set "$RDMA_NETDEV" up
	sleep 6
	injected=$(fi_injected "$attr")
	fi_off
	wait_for 60 in_state "$c" live || { echo "$c: $(ctrl_state "$c") 60 s after"; rc=1; }
	failed=$(dmesg_after "$mark" | grep -c "$c: Failed reconnect attempt")
	echo "$attr at $pct % for 8 s: $injected failures injected, $failed reconnect attempts failed," \
		"$c $(ctrl_state "$c")"
	dmesg_after "$mark" | grep -E "$c: " | grep -viE 'rkey|registered|pool:' | head -n 6
	fio_stop || rc=1
	host_disconnect_all
	ours_gone || rc=1
	((injected > 0)) || { echo "nothing injected"; rc=1; }
	return $rc
}

# Page allocations of 1 MiB and more fail: the pool falls back to chunks of 512 KiB.
pool_fallback() {
	local c mark stats rc=0
	host_disconnect_all >/dev/null
	mark=$(kmsg_mark)
	fi_on fail_page_alloc 100 8 || return 1
	c=$(connect "$NQN_NULL")
	fi_off
	[ -n "$c" ] || return 1
	dmesg_after "$mark" | grep -E 'pool: no .* chunks' | head -n 3
	stats=/sys/kernel/debug/nvme_rsrdma/$c/stats
	grep -h '^pool:' "$stats" 2>/dev/null
	dmesg_after "$mark" | grep -q 'pool: no [0-9]* chunks of 1024 KiB free, trying chunks of 512 KiB' || rc=1
	grep -q '^pool: .*chunks of 512 KiB' "$stats" 2>/dev/null || { echo "debugfs: no 512 KiB chunks"; rc=1; }
	fio_verify "$(ns_dev "$NQN_NULL")" --size=16m --bs=128k || rc=1
	host_disconnect_all
	ours_gone || rc=1
	return $rc
}

if fi_available; then
	ktap_check "connects with 20 % of slab allocations failing: live or an error, nothing left" \
		connect_failing failslab 20
	ktap_check "connects with 20 % of page allocations failing: live or an error, nothing left" \
		connect_failing fail_page_alloc 20
	ktap_check "reconnects with 30 % of slab allocations failing: retried, back, nothing lost" \
		reconnect_failing failslab 30
	ktap_check "pool chunks of 1 MiB unavailable: falls back to 512 KiB, data verified" pool_fallback
else
	for t in "connects with slab allocations failing" "connects with page allocations failing" \
		"reconnects with slab allocations failing" "pool chunk fallback"; do
		ktap_test_skip "$t (the kernel has no fault injection with a stack trace filter)"
	done
fi

ktap_check "module unloads" host_unload
ktap_check "kernel log clean" dmesg_check_clean
ktap_finished
