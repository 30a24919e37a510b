#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# rsrdma-timeout: 900
#
# The registered area (/dev/rsrdma/<controller>): direct I/O from a process's mapping of it goes
# out with a keyed SGL at its place in the area, without a copy, and the debugfs counters show
# every such byte moved from the area and none copied; the checkpoint example checks every byte
# of blocks from 4 KiB to 4 MiB; ordinary memory and a buffer straddling the area's edge take
# the pool, with the same bytes; the mmap calls that must fail fail with their errno; a fork and
# a second process share the area; the area stays registered across a reset, a target outage
# and a link flap (a new RKEY, the same mapping); fio killed with I/O in flight; a second controller of
# the subsystem shares the area, and I/O through the multipath head goes from it on both paths
# without a copy; against the 4 MiB test
# target, each 4 MiB block is one command (the udev rule) and the previous association's area
# RKEY is dead; an area above the limit is refused; a device that cannot register the area
# connects without it, its I/O copied through the pool, and a multipath head whose paths are on
# soft-iWARP, which cannot register it, and soft-RoCE sends from it on the one and copies on the
# other; a controller deleted, and the module
# unloaded, while a process has the area mapped; the mapping unmapped under writes in flight;
# the whole area in flight at once, beside I/O through the pool.
set -u
. "$(dirname "$0")/lib/common.sh"

AREA_PY=$RSRDMA_LIB/area.py
CHECKPOINT=$RSRDMA_REPO/scripts/checkpoint.py
RUN=/tmp/rsrdma-area

cleanup() {
	[ -n "${HOLD_PID:-}" ] && kill "$HOLD_PID" 2>/dev/null
	hostile_stop
	mixed_teardown
	rm -rf "$RUN" "${UDEV_RULE:-}"
	teardown_all
}
trap cleanup EXIT
trap 'exit 143' TERM INT

ktap_print_header
ktap_set_plan 25

if ! fabric_setup || ! target_setup || ! host_load; then
	bail_out "set-up failed"
fi
mkdir -p "$RUN"
# The project's udev rule (make install puts it in /lib/udev/rules.d), for this test's run.
UDEV_RULE=/run/udev/rules.d/60-nvme-rsrdma.rules
mkdir -p "${UDEV_RULE%/*}" && cp "$RSRDMA_REPO/scripts/udev/60-nvme-rsrdma.rules" "$UDEV_RULE"
dmesg_mark
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
timeout 60 nvme connect -t "$HOST_TRANSPORT" -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN_NULL" | ktap_diag
wait_for 30 nvme_dev_for_nqn "$NQN_NULL" >/dev/null
dev=$(nvme_dev_for_nqn "$NQN_NULL")
ctrl=$(basename "$(ctrl_for "$NQN_NULL")")
area=/dev/rsrdma/$ctrl
stats=/sys/kernel/debug/nvme_rsrdma/$ctrl/stats
udevadm settle 2>/dev/null
ktap_diag "device $dev, controller $ctrl, area $area"

# since_mark_has TEXT: the kernel log since the test's mark holds TEXT.
since_mark_has() { dmesg_since_mark | grep -qF -- "$1"; }

# counters: "AREA PAGES COPIED" of the controller whose stats file is $stats.
counters() { data_bytes "$stats"; }
# moved_copied BEFORE AFTER: "AREA COPIED", the bytes moved from the area and copied through the
# pool between two readings of counters.
moved_copied() {
	local a0 c0 a1 c1
	read -r a0 _ c0 <<<"$1"
	read -r a1 _ c1 <<<"$2"
	echo "$((a1 - a0)) $((c1 - c0))"
}
area_rkey() { sed -nE 's/^area: .*rkey (0x[0-9a-f]+).*/\1/p' "$stats"; }
registrations() { sed -nE 's/^area: .*registrations ([0-9]+).*/\1/p' "$stats"; }
# other_ctrl NQN CTRL: the controller of subsystem NQN that is not CTRL.
other_ctrl() {
	local c
	for c in /sys/class/nvme/nvme*; do
		[ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$1" ] && [ "${c##*/}" != "$2" ] &&
			{ echo "${c##*/}"; return 0; }
	done
	return 1
}
# subsys_of CTRL: the sysfs directory of CTRL's subsystem.
subsys_of() {
	local sub
	for sub in /sys/class/nvme-subsystem/*; do
		[ -e "$sub/$1" ] && { echo "$sub"; return 0; }
	done
	return 1
}

area_present() {
	grep '^area:' "$stats" | ktap_diag
	[ -c "$area" ] &&
		grep -qE '^area: 65536 KiB, registered, rkey 0x0*[1-9a-f][0-9a-f]*, registrations 1,' "$stats" &&
		since_mark_has "registered area: 64 MiB, mapped through $area"
}
ktap_check "area: /dev/rsrdma/$ctrl, 64 MiB, registered with an RKEY (debugfs, dmesg)" area_present

# --- every byte through the area ---------------------------------------------------------------
checkpoint() { # BLOCKS SIZE [ARGS...]
	python3 "$CHECKPOINT" "$dev" --blocks "$1" --block-size "$2" "${@:3}"
}
ktap_check "checkpoint from the area, 4 KiB blocks: every byte checked, none copied" \
	checkpoint 64 4K --expect-zero-copy
ktap_check "checkpoint from the area, 128 KiB blocks: every byte checked, none copied" \
	checkpoint 32 128K --expect-zero-copy --offset 8M
ktap_check "checkpoint from the area, 1 MiB blocks: every byte checked, none copied" \
	checkpoint 16 1M --expect-zero-copy --offset 16M --area-offset 4M
ktap_check "checkpoint from the area, 4 MiB blocks: every byte checked, none copied" \
	checkpoint 8 4M --expect-zero-copy --offset 64M --area-offset 28M

# The same from ordinary memory: the pool, with a copy each way.
anon_copied() {
	local out
	out=$(checkpoint 8 1M --memory anon --offset 128M) || { echo "$out"; return 1; }
	echo "$out"
	# 8 MiB written and 8 MiB read, copied through the pool both ways.
	awk -v c="$ctrl:" '$1 == c && /copied through the pool/ && $(NF - 4) + 0 >= 16777216 { ok = 1 } END { exit !ok }' <<<"$out"
}
ktap_check "checkpoint from ordinary memory: same bytes, through the pool (copied)" anon_copied

# fio with its buffers in the area (fio maps the device shared): verified random I/O at depth,
# through libaio and through io_uring with the buffers registered (pinned once, long-term).
fio_area() { # BS IODEPTH [FIO ARGS...]
	local before after moved copied
	before=$(counters)
	fio_verify "$dev" --bs="$1" --iodepth="$2" --iomem="mmapshared:$area" "${@:3}" || return 1
	after=$(counters)
	ktap_diag "counters (area, capsule pages, copied) before: $before, after: $after"
	read -r moved copied < <(moved_copied "$before" "$after")
	((moved > 0 && copied == 0))
}
ktap_check "fio verify, libaio 4 KiB QD32, buffers in the area: none copied" \
	fio_area 4k 32 --ioengine=libaio
ktap_check "fio verify, io_uring registered buffers 1 MiB QD4, in the area: none copied" \
	fio_area 1m 4 --ioengine=io_uring --fixedbufs

# --- bad input ---------------------------------------------------------------------------------
ktap_check "a buffer straddling the area's edge goes through the pool, data intact" \
	python3 "$AREA_PY" straddle "$area" "$dev"
ktap_check "mmap refused beyond the size, past the end, PROT_EXEC, MAP_PRIVATE, unaligned" \
	python3 "$AREA_PY" refusals "$area"
ktap_check "a forked child and a second process share the area" python3 "$AREA_PY" share "$area"

# fio killed (SIGKILL) with I/O in flight from the area: the pages stay pinned until the I/O
# ends, then go with the mapping; the controller stays live and I/O goes on.
kill_in_flight() {
	local pid
	(cd /tmp && exec fio --name=kill --filename="$dev" --direct=1 --ioengine=libaio --rw=randrw \
		--bs=128k --iodepth=16 --size=32m --time_based --runtime=60 \
		--iomem="mmapshared:$area" >/dev/null 2>&1) &
	pid=$!
	wait_for 30 pgrep -f -- '--name=kill' >/dev/null || return 1
	sleep 2
	pkill -KILL -f -- '--name=kill'
	wait "$pid" 2>/dev/null
	sleep 1
	in_state "$ctrl" live && checkpoint 4 1M --expect-zero-copy --offset 160M
}
ktap_check "fio killed with I/O in flight from the area: live, I/O goes on" kill_in_flight

unmap_in_flight() {
	python3 "$AREA_PY" unmap "$area" "$dev" && in_state "$ctrl" live
}
ktap_check "munmap under 4 MiB writes from the area: in flight whole, then EFAULT, data intact" \
	unmap_in_flight

# The area used up: fio keeps 63 commands of 1 MiB in flight from 63 of the area's 64 MiB while a
# second fio writes from ordinary memory through the pool, each verifying what it wrote; the
# area's I/O none copied. fio maps its buffers and two alignment pages (libaio: one buffer per
# command; io_uring takes one more). A job that needs more than the area (64 buffers) cannot
# map it: the kernel refuses and says why, fio's I/O fails, the controller goes on.
area_full() {
	local before after pid rc=0 moved copied out
	before=$(counters)
	fio_verify "$dev" --bs=128k --iodepth=8 --offset=64m --size=32m &
	pid=$!
	fio_verify "$dev" --ioengine=libaio --bs=1m --iodepth=63 --size=63m --iomem="mmapshared:$area" ||
		rc=1
	wait "$pid" || rc=1
	after=$(counters)
	ktap_diag "counters (area, capsule pages, copied) before: $before, after: $after"
	read -r moved copied < <(moved_copied "$before" "$after")
	# 63 MiB written and read back from the area; 32 MiB each way through the pool.
	((moved >= 126 << 20 && copied >= 64 << 20)) || rc=1
	out=$(cd /tmp && fio --name=toobig --filename="$dev" --direct=1 --ioengine=libaio --rw=write \
		--bs=1m --iodepth=64 --size=64m --iomem="mmapshared:$area" 2>&1) &&
		{ ktap_diag "fio with buffers past the area ran"; rc=1; }
	grep -m 3 -iE 'mmap|error' <<<"$out" | ktap_diag
	dmesg_since_mark | grep -qE "area: mmap refused: [0-9]+ bytes at offset 0 exceed its $((64 << 20)) bytes" ||
		{ ktap_diag "no refusal of fio's mapping in the kernel log"; rc=1; }
	in_state "$ctrl" live || rc=1
	return $rc
}
ktap_check "area used up: 63 MiB in flight from it beside pool I/O, verified; more refused" area_full

# --- reconnects ----------------------------------------------------------------------------------
ktap_check "reset while mapped: a new RKEY, I/O from the same mapping, none copied" \
	python3 "$AREA_PY" reconnect "$area" "$dev" "$ctrl"

# outage DOWN UP: DOWN, then UP, under verified fio from the area: the controller leaves live and
# comes back, the area's old RKEY invalidated (dmesg) and a new one registered.
outage() {
	local key1 key2 regs rc=0 before after moved copied
	key1=$(area_rkey) regs=$(registrations)
	fio_start "$dev" --bs=64k --iodepth=8 --iomem="mmapshared:$area"
	before=$(counters)
	eval "$1" || { ktap_diag "'$1' failed"; rc=1; }
	wait_for 30 not_live "$ctrl" || rc=1
	ktap_diag "controller $(ctrl_state "$ctrl") after '$1'; $(grep '^area:' "$stats")"
	eval "$2" || { ktap_diag "'$2' failed"; rc=1; }
	wait_for 60 in_state "$ctrl" live || rc=1
	# fio's commands held through the outage went out again on the new connection from the
	# area, under its new key: nothing copied from before the outage to live again and after.
	sleep 1
	after=$(counters)
	ktap_diag "counters (area, capsule pages, copied) across the outage: $before -> $after"
	read -r moved copied < <(moved_copied "$before" "$after")
	((moved > 0 && copied == 0)) || { ktap_diag "copied through the pool during the outage"; rc=1; }
	fio_stop || rc=1
	key2=$(area_rkey)
	ktap_diag "area rkey $key1 before, $key2 after; registrations $regs before, $(registrations) after"
	[ "$key1" != "$key2" ] && [ "$key2" != 0x0 ] && (($(registrations) > regs)) &&
		since_mark_has "area: invalidating rkey $key1" && return $rc
	return 1
}
ktap_check "target outage under fio from the area: re-registered, none copied, verified" \
	outage target_port_disable target_port_enable
ktap_check "link flap under fio from the area: re-registered, none copied, verified" \
	outage "ip link set $RDMA_NETDEV down; sleep 2" "ip link set $RDMA_NETDEV up"

# --- multipath ----------------------------------------------------------------------------------
# A second controller of the subsystem (its IPv6 port) shares the area: both devices map the same
# memory, and I/O through the multipath head, sent round-robin on both paths, goes from the area
# without a copy on each.
multipath() {
	local c6 sub s4 s6 b4 b6 a4 a6 m4 k4 m6 k6
	target_ipv6_setup || return 1
	timeout 60 nvme connect -t "$HOST_TRANSPORT" -a "$TARGET_ADDR6" -s "$TARGET_PORT" -n "$NQN_NULL" |
		ktap_diag
	c6=$(other_ctrl "$NQN_NULL" "$ctrl") || { echo "no second controller"; return 1; }
	wait_for 30 in_state "$c6" live || return 1
	sub=$(subsys_of "$ctrl") || return 1
	echo "second path $c6; $(basename "$sub"): $(cat "$sub/iopolicy") -> round-robin"
	# The udev rule's line for a multipath head matches it (its subsystem has rsrdma paths).
	udevadm test --action=add "/sys/block/${dev##*/}" 2>&1 | grep -F "60-nvme-rsrdma.rules" |
		grep -F "max_sectors_kb" || { echo "the udev rule did not match the head ${dev##*/}"; return 1; }
	echo round-robin >"$sub/iopolicy" || return 1
	python3 - "$area" "/dev/rsrdma/$c6" <<-'PY' || return 1
		import mmap, os, sys
		a, b = (mmap.mmap(os.open(p, os.O_RDWR), 4096, mmap.MAP_SHARED, offset=60 << 20) for p in sys.argv[1:])
		tok = os.urandom(4096); a[:] = tok
		print("the two controllers' devices map", "the same memory" if b[:] == tok else "DIFFERENT memory")
		sys.exit(b[:] != tok)
	PY
	s4=/sys/kernel/debug/nvme_rsrdma/$ctrl/stats s6=/sys/kernel/debug/nvme_rsrdma/$c6/stats
	b4=$(data_bytes "$s4") b6=$(data_bytes "$s6")
	python3 "$CHECKPOINT" "$dev" --blocks 16 --block-size 1M --offset 192M --area "$area" \
		--expect-zero-copy || return 1
	a4=$(data_bytes "$s4") a6=$(data_bytes "$s6")
	echo "$ctrl (area, capsule pages, copied): $b4 -> $a4; $c6: $b6 -> $a6"
	nvme disconnect -d "$c6" >/dev/null
	read -r m4 k4 < <(moved_copied "$b4" "$a4")
	read -r m6 k6 < <(moved_copied "$b6" "$a6")
	((m4 > 0 && m6 > 0 && k4 == 0 && k6 == 0))
}
ktap_check "multipath: the controllers share the area, both paths send from it; udev rule on the head" \
	multipath

# --- the 4 MiB test target ------------------------------------------------------------------------
# rsrdma-target (tests/target) allows 8 MiB commands. The project's udev rule (make install puts
# it in /lib/udev/rules.d; here it goes in /run/udev/rules.d) raises max_sectors_kb to the 4 MiB
# the transport allows, so each 4 MiB block is one command: the target's log shows each with a
# keyed SGL of 4 MiB and the area's RKEY.
hconnect() {
	timeout 90 nvme connect -t "$HOST_TRANSPORT" -a "$TARGET_ADDR" -s "$HOSTILE_PORT" \
		-n "$HOSTILE_NQN" --reconnect-delay=1 --ctrl-loss-tmo=60 2>&1
}
hdev() { wait_for 30 nvme_dev_for_nqn "$HOSTILE_NQN" >/dev/null && nvme_dev_for_nqn "$HOSTILE_NQN"; }
hstats() { echo "/sys/kernel/debug/nvme_rsrdma/$(hostile_ctrl)/stats"; }
# udev_apply DEV: the rules applied to DEV's add event. The virtme-ng guest has no running udevd
# (it exits at once there): then udev's own rules engine applies them, through udevadm test.
udev_apply() {
	if udevadm control --ping >/dev/null 2>&1; then
		udevadm control --reload && udevadm settle -t 10
	else
		ktap_diag "no udevd in this guest: the rules applied by udevadm test"
		udevadm test --action=add "/sys/block/${1##*/}" 2>&1 | grep -F 60-nvme-rsrdma | ktap_diag
	fi
}

one_command() {
	local hd key n
	hconnect | ktap_diag && hd=$(hdev) || return 1
	udev_apply "$hd"
	ktap_diag "$hd: max_hw_sectors_kb $(cat "/sys/block/${hd##*/}/queue/max_hw_sectors_kb"), max_sectors_kb $(cat "/sys/block/${hd##*/}/queue/max_sectors_kb")"
	[ "$(cat "/sys/block/${hd##*/}/queue/max_sectors_kb")" = 4096 ] || return 1
	key=$(sed -nE 's/^area: .*rkey (0x[0-9a-f]+).*/\1/p' "$(hstats)")
	python3 "$CHECKPOINT" "$hd" --blocks 8 --block-size 4M --expect-zero-copy || return 1
	n=$(grep -cE "^q[0-9]+ cid 0x[0-9a-f]+ (write|read) .* len 4194304 keyed addr 0x[0-9a-f]+ len 4194304 key $key\$" "$HOSTILE_VLOG")
	ktap_diag "the target saw $n commands of 4 MiB with the area's rkey $key"
	((n == 16))
}
# Started here, in the test's own shell, which stops it (ktap_check runs cases in a subshell).
hostile_start -v
ktap_check "4 MiB blocks against the 4 MiB target: one command each, the area's RKEY, none copied" \
	one_command
hdisconnect() {
	hostile_stop
	timeout 60 nvme disconnect -n "$HOSTILE_NQN" >/dev/null 2>&1
	wait_for 30 eval '! hostile_ctrl >/dev/null'
}
hdisconnect

# The previous association's RKEY of the area must be dead: the target records the RKEY of a
# 4 MiB write from the area and closes the association; on the new one, it tries an RDMA READ
# with the recorded RKEY before serving the next command.
stale_area_key() {
	local hd key rc=0
	hconnect | ktap_diag && hd=$(hdev) || return 1
	# Armed once the namespace's first reads (the rules' blkid) are done: the next keyed
	# command is the checkpoint's write.
	udev_apply "$hd"
	hostile_arm || return 1
	key=$(sed -nE 's/^area: .*rkey (0x[0-9a-f]+).*/\1/p' "$(hstats)")
	python3 "$CHECKPOINT" "$hd" --blocks 1 --block-size 4M --expect-zero-copy || rc=1
	grep -E '^(hostile )?stale-rkey' "$HOSTILE_LOG" | ktap_diag
	grep -q "^hostile stale-rkey: recorded rkey $key " "$HOSTILE_LOG" ||
		{ ktap_diag "the recorded rkey is not the area's ($key)"; rc=1; }
	hostile_wait 30 "^stale-rkey result: remote-access-error" || rc=1
	ktap_diag "area now: $(grep '^area:' "$(hstats)")"
	return $rc
}
hostile_start --mode stale-rkey --arm signal -v
ktap_check "the area's RKEY of the previous association fails at the target; data intact" \
	stale_area_key
hdisconnect

# An area above the limit is refused with a clear error, nothing left behind.
area_limit() {
	local p=/sys/module/nvme_rsrdma/parameters/area_mib out rc=0
	echo 2048 >"$p" || return 1
	out=$(timeout 60 nvme connect -t "$HOST_TRANSPORT" -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN_NULL2" 2>&1) &&
		{ echo "connect with area_mib=2048 succeeded: $out"; rc=1; }
	echo 64 >"$p"
	echo "nvme connect: $out"
	ctrl_for "$NQN_NULL2" >/dev/null 2>&1 && { echo "a controller was left"; rc=1; }
	since_mark_has "area_mib=2048: a controller's registered area is at most 1024 MiB" || rc=1
	return $rc
}
ktap_check "area_mib=2048: connect refused with the limit in dmesg" area_limit

# connect_fragmented MIB MIN_ORDER ADDR: a controller of $NQN_NULL2 at ADDR, created with an area
# of MIB MiB while page allocations of order MIN_ORDER and more fail (as in a fragmented
# memory): the area comes in smaller chunks. area_mib is 64 again afterwards.
connect_fragmented() {
	local p=/sys/module/nvme_rsrdma/parameters/area_mib rc=0
	fi_available || { echo "no fault injection with a stack trace filter"; return 1; }
	echo "$1" >"$p" || return 1
	if fi_on fail_page_alloc 100 "$2"; then
		timeout 60 nvme connect -t "$HOST_TRANSPORT" -a "$3" -s "$TARGET_PORT" -n "$NQN_NULL2" \
			>/dev/null 2>&1 || { echo "nvme connect to $3 failed"; rc=1; }
		fi_off
		echo "area_mib=$1 at $3: $(fi_injected fail_page_alloc) page allocations failed"
	else
		rc=1
	fi
	echo 64 >"$p"
	return $rc
}

# A device that cannot take the area in one memory region: while the controller of a second
# subsystem is created with area_mib=256, page allocations of 512 KiB and more fail (as in a
# fragmented memory), so its area comes in 1024 chunks of 256 KiB, more pages than a soft-RoCE
# memory region has (512). The controller connects without the area's registration (said in
# dmesg and debugfs), the area can still be mapped, and direct I/O from it goes through the
# pool, copied, every byte checked.
area_unregistered() {
	local c s mark before after moved copied rc=0
	mark=$(kmsg_mark)
	connect_fragmented 256 7 "$TARGET_ADDR" || return 1
	wait_for 30 nvme_dev_for_nqn "$NQN_NULL2" || return 1
	c=$(basename "$(ctrl_for "$NQN_NULL2")")
	s=/sys/kernel/debug/nvme_rsrdma/$c/stats
	dmesg_after "$mark" | grep -E 'area: (no [0-9]+ chunks|.* not registered with)' | tail -n 2
	grep '^area:' "$s"
	dmesg_after "$mark" | grep -qF "area: 256 MiB in chunks of 256 KiB not registered with $RDMA_LINK: I/O from it goes through the pool, copied" || rc=1
	grep -qE '^area: 262144 KiB, not registered, no rkey, registrations 0, .*chunks of 256 KiB$' "$s" ||
		{ echo "debugfs: not an unregistered area in chunks of 256 KiB"; rc=1; }
	udevadm settle 2>/dev/null
	before=$(data_bytes "$s")
	python3 "$CHECKPOINT" "$(nvme_dev_for_nqn "$NQN_NULL2")" --blocks 4 --block-size 4M \
		--area "/dev/rsrdma/$c" || rc=1
	after=$(data_bytes "$s")
	read -r moved copied < <(moved_copied "$before" "$after")
	echo "from the area: $moved bytes, copied: $copied bytes"
	# 16 MiB written and read back, copied both ways.
	((moved == 0 && copied >= 2 * 16777216)) || rc=1
	timeout 60 nvme disconnect -n "$NQN_NULL2" >/dev/null || rc=1
	return $rc
}
ktap_check "a device that cannot register the area: connected without it, I/O copied, checked" \
	area_unregistered

# Two paths of a subsystem on two devices: soft-iWARP on a dummy netdev, with its own address
# and a target port on it, and soft-RoCE. The subsystem's area (area_mib=384) comes in chunks of
# 1 MiB (page allocations of 2 MiB and more fail while the first controller, the iWARP path's,
# is created): 384 entries, more than a soft-iWARP memory region takes (256), fewer pages than
# a soft-RoCE one has (512). Through the multipath head, round-robin, I/O from the area goes
# without a copy on the RoCE path and through the pool on the iWARP path; every byte checked.
MIX_NETDEV=rsrdma_mx0 MIX_LINK=rsrdma_siw MIX_ADDR=10.99.0.1 MIX_PORT=$NVMET_CFS/ports/4
mixed_teardown() {
	rm -f "$MIX_PORT"/subsystems/* 2>/dev/null
	[ ! -d "$MIX_PORT" ] || rmdir "$MIX_PORT"
	timeout 60 rdma link delete "$MIX_LINK" 2>/dev/null
	ip link delete "$MIX_NETDEV" 2>/dev/null
	module_unload siw
}
mixed_paths() {
	local cw cr sub hd sw sr bw br aw ar xw yw xr yr rc=0
	modprobe siw && modprobe dummy numdummies=0 && ip link add "$MIX_NETDEV" type dummy &&
		ip addr add "$MIX_ADDR/24" dev "$MIX_NETDEV" && ip link set "$MIX_NETDEV" up &&
		timeout 60 rdma link add "$MIX_LINK" type siw netdev "$MIX_NETDEV" || return 1
	mkdir "$MIX_PORT" && _w rdma "$MIX_PORT/addr_trtype" && _w ipv4 "$MIX_PORT/addr_adrfam" &&
		_w "$MIX_ADDR" "$MIX_PORT/addr_traddr" && _w "$TARGET_PORT" "$MIX_PORT/addr_trsvcid" &&
		ln -s "$NVMET_CFS/subsystems/$NQN_NULL2" "$MIX_PORT/subsystems/$NQN_NULL2" || return 1
	connect_fragmented 384 9 "$MIX_ADDR" || return 1
	cw=$(ctrl_for "$NQN_NULL2") || { echo "no iWARP path"; return 1; }
	cw=${cw##*/}
	timeout 60 nvme connect -t "$HOST_TRANSPORT" -a "$TARGET_ADDR" -s "$TARGET_PORT" \
		-n "$NQN_NULL2" >/dev/null || return 1
	cr=$(other_ctrl "$NQN_NULL2" "$cw") || { echo "no RoCE path"; return 1; }
	wait_for 30 in_state "$cr" live || { echo "$cr: $(ctrl_state "$cr")"; return 1; }
	sub=$(subsys_of "$cw") || return 1
	echo round-robin >"$sub/iopolicy" || return 1
	sw=/sys/kernel/debug/nvme_rsrdma/$cw/stats sr=/sys/kernel/debug/nvme_rsrdma/$cr/stats
	echo "iWARP path $cw: $(grep '^area:' "$sw")"
	echo "RoCE path $cr: $(grep '^area:' "$sr")"
	grep -qE '^area: 393216 KiB, not registered, .*chunks of 1024 KiB$' "$sw" || rc=1
	grep -qE '^area: 393216 KiB, registered, rkey .*chunks of 1024 KiB$' "$sr" || rc=1
	udevadm settle 2>/dev/null
	hd=$(nvme_dev_for_nqn "$NQN_NULL2")
	bw=$(data_bytes "$sw") br=$(data_bytes "$sr")
	python3 "$CHECKPOINT" "$hd" --blocks 16 --block-size 1M --area "/dev/rsrdma/$cw" || rc=1
	aw=$(data_bytes "$sw") ar=$(data_bytes "$sr")
	read -r xw yw < <(moved_copied "$bw" "$aw")
	read -r xr yr < <(moved_copied "$br" "$ar")
	echo "iWARP path $cw: $xw bytes from the area, $yw copied; RoCE path $cr: $xr from the area, $yr copied"
	((xw == 0 && yw > 0 && xr > 0 && yr == 0)) || rc=1
	timeout 60 nvme disconnect -n "$NQN_NULL2" >/dev/null || rc=1
	mixed_teardown || rc=1
	return $rc
}
ktap_check "multipath over soft-iWARP and soft-RoCE: the area unregistered on one, I/O copied there, zero-copy on the other" \
	mixed_paths

# --- lifetimes ------------------------------------------------------------------------------------
# A process holds 1 MiB of the area mapped (and the namespace open) while the controller is
# deleted: the memory stays (and keeps what it held) until it unmaps, I/O from it to the
# namespace fails; the device nodes go; the module cannot be unloaded meanwhile, and can be
# afterwards.
delete_while_mapped() {
	local rc=0
	python3 "$AREA_PY" hold "$area" "$dev" "$RUN/ready" "$RUN/done" >"$RUN/hold.log" 2>&1 &
	HOLD_PID=$!
	wait_for 30 test -e "$RUN/ready" || return 1
	nvme disconnect -d "$ctrl" | ktap_diag
	wait_for 30 test ! -e "$area" || { ktap_diag "$area still there"; rc=1; }
	wait_for 30 test ! -b "$dev" || { ktap_diag "$dev still there"; rc=1; }
	if rmmod nvme_rsrdma 2>"$RUN/rmmod.err"; then
		ktap_diag "rmmod succeeded with the area mapped"
		rc=1
	else
		ktap_diag "rmmod with the area mapped: $(cat "$RUN/rmmod.err")"
	fi
	touch "$RUN/done"
	wait "$HOLD_PID" || rc=1
	HOLD_PID=
	ktap_diag "$(cat "$RUN/hold.log")"
	host_unload || { ktap_diag "unload after the last unmap failed"; rc=1; }
	return $rc
}
ktap_check "controller deleted and rmmod while mapped: memory kept, unload refused then done" \
	delete_while_mapped
registered_invalidated() {
	local again
	again=$(dmesg_since_mark |
		grep -E "area: 64 MiB registered at iova 0x[0-9a-f]+ with rkey 0x[0-9a-f]+ \(registration ([2-9]|[1-9][0-9]+)\)")
	tail -n 2 <<<"$again" | ktap_diag
	[ -n "$again" ] && since_mark_has "area: invalidating rkey"
}
ktap_check "area registration (again after reconnects) and invalidation in dmesg" \
	registered_invalidated
