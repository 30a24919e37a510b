# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash
#
# Shared helpers for the guest tests (tests/NN-*.sh) and the demo. Sourced, not run; bash only.
# They run as root inside the guest (scripts/vm.sh), where the host root file system is visible
# read-only: write only under /tmp, $RSRDMA_OUT, /sys and /dev.
#
#   KTAP        ktap_header, ktap_plan N, ktap_ok NAME, ktap_fail NAME [REASON],
#               ktap_skip NAME REASON, ktap_check NAME CMD..., ktap_diag MSG..., ktap_finish
#   fabric      rxe_setup, rxe_teardown
#   target      target_setup, target_teardown (nvmet over configfs, port 1, three subsystems),
#               target_ipv6_setup, target_ipv6_teardown (ports 2 and 3 on IPv6 addresses)
#   host        rsrdma_load [PARAMS...], rsrdma_unload, host_disconnect_all, teardown_all,
#               rdma_counts, our_rkeys, ctrl_for NQN, nvme_dev_for_nqn NQN, fabrics_probe OPTIONS (write a connect string, report errno and "no handler")
#   kernel log  dmesg_mark, dmesg_since_mark, dmesg_check_clean, kmemleak_check, kernel_check
#   misc        wait_for TIMEOUT_S CMD..., run_diag CMD..., fio_verify DEV SECONDS [FIO ARGS...],
#               module_unload NAME
#   state       leftovers (what a test left behind), reset_guest (clean all of it)
#
# Helpers return non-zero on failure and say why on diagnostic ("# ...") lines; they never exit.

# These helpers load and unload kernel modules and rewrite configfs: refuse to run outside the
# virtme-ng guest unless told to (RSRDMA_ALLOW_HOST=1, on a machine you can break).
if ! grep -q virtme /proc/cmdline 2>/dev/null && [ -z "${RSRDMA_ALLOW_HOST:-}" ]; then
	echo "Bail out! not inside the nvme-rsrdma guest: run through scripts/vm.sh or make test" >&2
	exit 1
fi

RSRDMA_REPO=${RSRDMA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
RSRDMA_OUT=${RSRDMA_OUT:-/tmp/rsrdma-out}
RSRDMA_KO=${RSRDMA_KO:-$RSRDMA_REPO/nvme_rsrdma.ko}
export RSRDMA_REPO RSRDMA_OUT RSRDMA_KO

. "$(dirname "${BASH_SOURCE[0]}")/suite.sh"

# scaled SECONDS: a wait for the kernel under test, times the suite's timeout scale (3 on the
# debug kernel, where everything takes several times as long; see tests/lib/suite.sh).
scaled() { echo $(($1 * $(suite_timeout_scale))); }

export TARGET_ADDR=10.0.2.15 TARGET_PORT=4420
export NQN_NULL=nqn.2026-11.io.rsrdma:null
export NQN_FILE=nqn.2026-11.io.rsrdma:file
export NQN_NULL2=nqn.2026-11.io.rsrdma:null2
# Sizes of the backing devices, in bytes, for tests that check them.
export NULL_SIZE=$((256 << 20)) FILE_SIZE=$((128 << 20))

NVMET_CFS=/sys/kernel/config/nvmet
NULLB_CFS=/sys/kernel/config/nullb
TARGET_TMPFS=/tmp/rsrdma-target
RXE_NAME=rxe0
RXE_NETDEV=eth0

# ---- KTAP ------------------------------------------------------------------------------------
# One KTAP document per test script: header, plan, one result line per test case, diagnostics
# as "# " lines. ktap_finish exits with the kselftest code: 0 all passed (skips allowed), 1 any
# failed or the plan was not met, 4 everything skipped.

_ktap_n=0 _ktap_plan= _ktap_pass=0 _ktap_fail=0 _ktap_skip=0

ktap_header() { echo "KTAP version 1"; }

ktap_plan() {
	_ktap_plan=$1
	echo "1..$1"
}

# Every line of the arguments (or of stdin without arguments) as a diagnostic line.
ktap_diag() {
	if (($#)); then
		printf '%s\n' "$*" | sed 's/^/# /'
	else
		sed 's/^/# /'
	fi
}

_ktap_name() { printf '%s' "$*" | tr '\n#' ' _'; }

ktap_ok() {
	_ktap_n=$((_ktap_n + 1)) _ktap_pass=$((_ktap_pass + 1))
	echo "ok $_ktap_n $(_ktap_name "$1")"
}

ktap_fail() {
	_ktap_n=$((_ktap_n + 1)) _ktap_fail=$((_ktap_fail + 1))
	[ -z "${2:-}" ] || ktap_diag "$1: $2"
	echo "not ok $_ktap_n $(_ktap_name "$1")"
}

ktap_skip() {
	_ktap_n=$((_ktap_n + 1)) _ktap_skip=$((_ktap_skip + 1))
	echo "ok $_ktap_n $(_ktap_name "$1") # SKIP $(_ktap_name "${2:-}")"
}

# ktap_check NAME CMD...: one test case from a command's status; its output becomes diagnostics.
ktap_check() {
	local name=$1
	shift
	if run_diag "$@"; then
		ktap_ok "$name"
	else
		ktap_fail "$name"
		return 1
	fi
}

# Number of test cases reported so far, and of failures (for tests that adapt their plan).
ktap_count() { echo "$_ktap_n"; }
ktap_failures() { echo "$_ktap_fail"; }

ktap_finish() {
	if [ -n "$_ktap_plan" ] && [ "$_ktap_n" != "$_ktap_plan" ]; then
		ktap_diag "planned $_ktap_plan test cases, ran $_ktap_n"
		_ktap_fail=$((_ktap_fail + 1))
	fi
	ktap_diag "totals: pass:$_ktap_pass fail:$_ktap_fail skip:$_ktap_skip"
	if ((_ktap_fail)); then
		exit 1
	elif ((_ktap_pass == 0 && _ktap_skip > 0)); then
		exit 4
	fi
	exit 0
}

# ---- misc ------------------------------------------------------------------------------------

# run_diag CMD...: run CMD with its stdout and stderr as diagnostic lines; CMD's status.
run_diag() {
	local out rc=0
	out=$("$@" 2>&1) || rc=$?
	[ -z "$out" ] || ktap_diag "$out"
	return $rc
}

# wait_for TIMEOUT_S CMD...: retry CMD (silently) until it succeeds; 1 on timeout.
wait_for() {
	local timeout=$1 deadline
	shift
	deadline=$((SECONDS + timeout))
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || return 1
		sleep 0.5
	done
}

_w() { # _w VALUE FILE: write a configfs/sysfs attribute, saying what failed
	if ! printf '%s' "$1" >"$2" 2>/dev/null; then
		ktap_diag "cannot write '$1' to $2"
		return 1
	fi
}

_module_loaded() { [ -e "/sys/module/$1/initstate" ]; }

# module_unload NAME: unload a module (and its unused dependencies) if loaded, retrying for a
# few seconds while it is still busy (references are dropped asynchronously after teardown).
module_unload() {
	_module_loaded "$1" || return 0
	wait_for 15 modprobe -r "$1" && return 0
	ktap_diag "cannot unload $1: $(modprobe -r "$1" 2>&1)"
	return 1
}

# ---- fabric: soft-RoCE on eth0 -------------------------------------------------------------

_rxe_active() { rdma link show "$RXE_NAME/1" 2>/dev/null | grep -q 'state ACTIVE'; }

rxe_setup() {
	modprobe rdma_rxe || { ktap_diag "modprobe rdma_rxe failed"; return 1; }
	modprobe -a rdma_cm ib_uverbs 2>/dev/null || true
	if [ -n "${RXE_MTU:-}" ]; then
		ip link set "$RXE_NETDEV" mtu "$RXE_MTU" ||
			{ ktap_diag "cannot set the MTU of $RXE_NETDEV to $RXE_MTU"; return 1; }
	fi
	if ! rdma link show "$RXE_NAME/1" >/dev/null 2>&1; then
		rdma link add "$RXE_NAME" type rxe netdev "$RXE_NETDEV" ||
			{ ktap_diag "rdma link add $RXE_NAME failed"; return 1; }
	fi
	wait_for 30 _rxe_active || {
		ktap_diag "$RXE_NAME not ACTIVE after 30 s: $(rdma link show 2>&1)"
		return 1
	}
}

rxe_teardown() {
	local rc=0
	if rdma link show "$RXE_NAME/1" >/dev/null 2>&1; then
		rdma link delete "$RXE_NAME" || rc=1
	fi
	module_unload rdma_rxe || rc=1
	return $rc
}

# ---- target: nvmet-rdma over configfs ------------------------------------------------------
# Port 1 (rdma, ipv4, $TARGET_ADDR:$TARGET_PORT) exports, to any host:
#   $NQN_NULL   null_blk "rsrdma_null",  memory backed, 256 MiB, 512-byte blocks
#   $NQN_FILE   a 128 MiB file on a private tmpfs (4 KiB blocks: nvmet takes the file system's)
#   $NQN_NULL2  null_blk "rsrdma_null2", like the first (for two-controller tests)
# target_setup brings rxe up first if needed. target_teardown disconnects every host controller
# first (a connected host would retry forever against a vanished port), then removes ports,
# subsystems, hosts, null_blk devices and the tmpfs, and unloads nvmet-rdma, nvmet and null_blk.
# It is idempotent and safe after a partial setup.

_configfs() {
	mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
}

_nullb_create() { # NAME SIZE_MIB BLOCKSIZE
	local d=$NULLB_CFS/$1
	[ -d "$d" ] || mkdir "$d" || { ktap_diag "cannot create null_blk $1"; return 1; }
	if [ "$(cat "$d/power")" != 1 ]; then
		_w "$2" "$d/size" && _w "$3" "$d/blocksize" && _w 1 "$d/memory_backed" &&
			_w 1 "$d/power" || return 1
	fi
	wait_for 10 test -b "/dev/$1" || { ktap_diag "/dev/$1 did not appear"; return 1; }
}

_subsys_create() { # NQN PATH
	local s=$NVMET_CFS/subsystems/$1
	[ -d "$s" ] || mkdir "$s" || { ktap_diag "cannot create subsystem $1"; return 1; }
	_w 1 "$s/attr_allow_any_host" || return 1
	[ -d "$s/namespaces/1" ] || mkdir "$s/namespaces/1" || return 1
	if [ "$(cat "$s/namespaces/1/enable")" != 1 ]; then
		_w "$2" "$s/namespaces/1/device_path" && _w 1 "$s/namespaces/1/enable" || return 1
	fi
}

target_setup() {
	local nqn p=$NVMET_CFS/ports/1
	_rxe_active || rxe_setup || return 1
	_configfs || return 1
	modprobe null_blk nr_devices=0 || { ktap_diag "modprobe null_blk failed"; return 1; }
	modprobe nvmet-rdma || { ktap_diag "modprobe nvmet-rdma failed"; return 1; }
	_nullb_create rsrdma_null 256 512 || return 1
	_nullb_create rsrdma_null2 256 512 || return 1
	mkdir -p "$TARGET_TMPFS"
	mountpoint -q "$TARGET_TMPFS" || mount -t tmpfs -o size=160M rsrdma-target "$TARGET_TMPFS" ||
		return 1
	[ -f "$TARGET_TMPFS/file.img" ] || truncate -s "$FILE_SIZE" "$TARGET_TMPFS/file.img" || return 1
	_subsys_create "$NQN_NULL" /dev/rsrdma_null || return 1
	_subsys_create "$NQN_FILE" "$TARGET_TMPFS/file.img" || return 1
	_subsys_create "$NQN_NULL2" /dev/rsrdma_null2 || return 1
	[ -d "$p" ] || mkdir "$p" || return 1
	if [ -z "$(ls "$p/subsystems")" ]; then
		_w rdma "$p/addr_trtype" && _w ipv4 "$p/addr_adrfam" && _w "$TARGET_ADDR" "$p/addr_traddr" &&
			_w "$TARGET_PORT" "$p/addr_trsvcid" || return 1
	fi
	for nqn in "$NQN_NULL" "$NQN_FILE" "$NQN_NULL2"; do
		[ -e "$p/subsystems/$nqn" ] && continue
		# Linking the first subsystem enables the port: nvmet-rdma binds the address now.
		ln -s "$NVMET_CFS/subsystems/$nqn" "$p/subsystems/$nqn" ||
			{ ktap_diag "cannot export $nqn on port 1 (is $RXE_NAME up?)"; return 1; }
	done
}

target_teardown() {
	local rc=0 p s ns d
	host_disconnect_all || rc=1
	if [ -d "$NVMET_CFS" ]; then
		for p in "$NVMET_CFS"/ports/*/; do
			[ -d "$p" ] || continue
			rm -f "$p"subsystems/* "$p"referrals/* 2>/dev/null
			for d in "$p"ana_groups/*/; do
				[ "$(basename "$d")" = 1 ] || rmdir "$d" 2>/dev/null
			done
			rmdir "$p" || rc=1
		done
		for s in "$NVMET_CFS"/subsystems/*/; do
			[ -d "$s" ] || continue
			rm -f "$s"allowed_hosts/* 2>/dev/null
			for ns in "$s"namespaces/*/; do
				[ -d "$ns" ] || continue
				echo 0 >"${ns}enable" 2>/dev/null
				rmdir "$ns" || rc=1
			done
			rmdir "$s" || rc=1
		done
		for d in "$NVMET_CFS"/hosts/*/; do
			[ -d "$d" ] && { rmdir "$d" || rc=1; }
		done
	fi
	if [ -d "$NULLB_CFS" ]; then
		for d in "$NULLB_CFS"/*/; do
			[ -d "$d" ] && { rmdir "$d" || rc=1; }
		done
	fi
	if mountpoint -q "$TARGET_TMPFS" 2>/dev/null; then
		umount "$TARGET_TMPFS" || rc=1
	fi
	[ ! -d "$TARGET_TMPFS" ] || rmdir "$TARGET_TMPFS" || rc=1
	for m in nvmet_rdma nvme_loop nvmet null_blk; do
		module_unload "$m" || rc=1
	done
	return $rc
}

# ---- target over IPv6 ----------------------------------------------------------------------------
# target_ipv6_setup (after target_setup): a unique-local ($TARGET_ADDR6) and a link-local
# ($TARGET_LL6) address on $RXE_NETDEV, each with its RoCE v2 GID in rxe's table, and nvmet
# ports 2 and 3 exporting $NQN_NULL on them at $TARGET_PORT. target_ipv6_teardown removes the
# ports and the addresses (target_teardown removes the ports too).
export TARGET_ADDR6=fd00::15 TARGET_LL6=fe80::15

_rxe_has_gid() { # ADDRESS
	local full
	full=$(python3 -c 'import ipaddress, sys; print(ipaddress.ip_address(sys.argv[1]).exploded)' "$1")
	grep -qx "$full" /sys/class/infiniband/"$RXE_NAME"/ports/1/gids/* 2>/dev/null
}

_ipv6_port() { # PORT_ID TRADDR
	local p=$NVMET_CFS/ports/$1
	[ -d "$p" ] || mkdir "$p" || return 1
	if [ -z "$(ls "$p/subsystems")" ]; then
		_w rdma "$p/addr_trtype" && _w ipv6 "$p/addr_adrfam" && _w "$2" "$p/addr_traddr" &&
			_w "$TARGET_PORT" "$p/addr_trsvcid" || return 1
		ln -s "$NVMET_CFS/subsystems/$NQN_NULL" "$p/subsystems/$NQN_NULL" ||
			{ ktap_diag "cannot export $NQN_NULL on [$2]:$TARGET_PORT"; return 1; }
	fi
}

target_ipv6_setup() {
	local a
	for a in "$TARGET_ADDR6/64" "$TARGET_LL6/64"; do
		ip -6 addr show dev "$RXE_NETDEV" | grep -q "inet6 $a " && continue
		# No duplicate address detection: the address is usable at once.
		ip -6 addr add "$a" dev "$RXE_NETDEV" nodad ||
			{ ktap_diag "cannot add $a to $RXE_NETDEV"; return 1; }
	done
	for a in "$TARGET_ADDR6" "$TARGET_LL6"; do
		wait_for 10 _rxe_has_gid "$a" || { ktap_diag "no GID for $a on $RXE_NAME"; return 1; }
	done
	_ipv6_port 2 "$TARGET_ADDR6" && _ipv6_port 3 "$TARGET_LL6%$RXE_NETDEV"
}

target_ipv6_teardown() {
	local p a rc=0
	for p in 2 3; do
		[ -d "$NVMET_CFS/ports/$p" ] || continue
		rm -f "$NVMET_CFS/ports/$p"/subsystems/*
		rmdir "$NVMET_CFS/ports/$p" || rc=1
	done
	for a in "$TARGET_ADDR6/64" "$TARGET_LL6/64"; do
		if ip -6 addr show dev "$RXE_NETDEV" 2>/dev/null | grep -q "inet6 $a "; then
			ip -6 addr del "$a" dev "$RXE_NETDEV" || rc=1
		fi
	done
	return $rc
}

# ---- host --------------------------------------------------------------------------------------
# The host transport under test: nvme_rsrdma as "rsrdma" (RSRDMA_MODE=rsrdma, the default) or
# in drop-in mode as "rdma" (RSRDMA_MODE=dropin: loaded with dropin=1, the C nvme_rdma unloaded).
# RSRDMA_HOST=c runs a test against the kernel's C nvme-rdma instead, for comparison; it is not
# part of the suite.
if [ "${RSRDMA_HOST:-}" = c ] || [ "${RSRDMA_MODE:-}" = dropin ]; then
	HOST_TRANSPORT=rdma
else
	HOST_TRANSPORT=rsrdma
fi
export HOST_TRANSPORT

# host_load [PARAMS...] / host_unload: the host transport under test. In drop-in mode the C
# nvme-rdma must stay out: the fabrics core asks modprobe for "nvme-rdma" on every "rdma"
# connect, so modprobe is told not to load it (as a drop-in user would, see the admin guide).
DROPIN_MODPROBE_CONF=/etc/modprobe.d/rsrdma-dropin.conf

host_load() {
	if [ "${RSRDMA_HOST:-}" = c ]; then
		modprobe nvme-rdma
	elif [ "${RSRDMA_MODE:-}" = dropin ]; then
		module_unload nvme_rdma || return 1
		echo "install nvme_rdma /bin/false" >"$DROPIN_MODPROBE_CONF" || return 1
		rsrdma_load dropin=1 "$@"
	else
		rsrdma_load "$@"
	fi
}

host_unload() {
	if [ "${RSRDMA_HOST:-}" = c ]; then
		module_unload nvme_rdma
	else
		rm -f "$DROPIN_MODPROBE_CONF"
		rsrdma_unload
	fi
}

rsrdma_load() {
	modprobe -a nvme-fabrics rdma_cm || { ktap_diag "modprobe nvme-fabrics rdma_cm failed"; return 1; }
	[ -f "$RSRDMA_KO" ] || { ktap_diag "$RSRDMA_KO missing: run make modules"; return 1; }
	insmod "$RSRDMA_KO" "$@" 2>&1 | ktap_diag
	_module_loaded nvme_rsrdma && _rsrdma_record_text
}

rsrdma_unload() {
	_module_loaded nvme_rsrdma || return 0
	rmmod nvme_rsrdma 2>&1 | ktap_diag
	! _module_loaded nvme_rsrdma
}

# Delete every fabrics controller (any transport) and wait until they are gone.
host_disconnect_all() {
	local c
	for c in /sys/class/nvme/nvme*; do
		[ -e "$c/delete_controller" ] || continue
		[ -e "$c/transport" ] && [ "$(cat "$c/transport")" = pcie ] && continue
		echo 1 >"$c/delete_controller" 2>/dev/null || true
	done
	wait_for 60 _no_fabrics_ctrl || { ktap_diag "controllers still present: $(ls /sys/class/nvme)"; return 1; }
}

_no_fabrics_ctrl() {
	local c
	for c in /sys/class/nvme/nvme*; do
		[ -e "$c/transport" ] && [ "$(cat "$c/transport")" != pcie ] && return 1
	done
	return 0
}

# rdma_counts: RDMA resources of the kernel (the QPs, CQs, MRs, PDs and CM ids the host
# transport and the target hold), one "type count" per line. CQs count only when in use: the
# RDMA core keeps the CQs of its shared CQ pool (ib_cq_pool_get) allocated until the device goes.
rdma_counts() {
	local t
	for t in qp mr pd cm_id; do
		echo "$t $(rdma resource show "$t" 2>/dev/null | grep -c .)"
	done
	echo "cq $(rdma resource show cq 2>/dev/null | grep -cE 'users [1-9]')"
}

# our_rkeys: the RKEYs of the MRs the host transport holds, as the RDMA core lists them.
our_rkeys() {
	rdma resource show mr 2>/dev/null | grep -E '\[nvme_(rsrdma|rdma)\]' | grep -o 'rkey 0x[0-9a-f]*' |
		cut -d' ' -f2 | sort
}

# teardown_all: the usual end of a test: disconnect, unload the host transport, remove the
# target and soft-RoCE, quietly (a test's EXIT trap).
teardown_all() {
	host_disconnect_all >/dev/null 2>&1
	host_unload >/dev/null 2>&1
	target_ipv6_teardown >/dev/null 2>&1
	target_teardown >/dev/null 2>&1
	rxe_teardown >/dev/null 2>&1
}

# ctrl_for NQN: print the sysfs directory of the (first) controller connected to NQN.
ctrl_for() {
	local c
	for c in /sys/class/nvme/nvme*; do
		[ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$1" ] && { echo "$c"; return 0; }
	done
	return 1
}

# path_dev CTRL_DIR: the blk-mq device of the controller's path to the namespace (nvmeXcYnZ
# with native multipath, else nvmeXnY itself), whose per-hctx counters are in debugfs.
path_dev() {
	local n
	for n in "$1"/nvme*n*; do
		[ -e "$n/queue" ] && { echo "${n##*/}"; return 0; }
	done
	return 1
}

# hw_queues CTRL: the number of blk-mq hardware queues of the path device of controller CTRL (a
# sysfs path: /sys/class/nvme/nvmeN).
hw_queues() { ls -d "$1/$(path_dev "$1")/mq/"* 2>/dev/null | wc -l; }

# nvme_dev_for_nqn NQN: print /dev/nvmeXnY, the block device of the first namespace of the
# subsystem NQN as seen through a connected controller (the multipath head node when native
# multipath is on, else the controller's own namespace node). 1 if there is none yet.
nvme_dev_for_nqn() {
	local nqn=$1 c s n name
	for c in /sys/class/nvme/nvme*; do
		[ -r "$c/subsysnqn" ] && [ "$(cat "$c/subsysnqn")" = "$nqn" ] || continue
		# Multipath: the namespace head lives under the subsystem (nvme-subsysN/nvmeNnM).
		for s in /sys/class/nvme-subsystem/nvme-subsys*; do
			[ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$nqn" ] || continue
			for n in "$s"/nvme*n*; do
				name=${n##*/}
				[[ $name =~ ^nvme[0-9]+n[0-9]+$ ]] && [ -b "/dev/$name" ] &&
					{ echo "/dev/$name"; return 0; }
			done
		done
		for n in "$c"/nvme*n*; do
			name=${n##*/}
			[[ $name =~ ^nvme[0-9]+n[0-9]+$ ]] && [ -b "/dev/$name" ] &&
				{ echo "/dev/$name"; return 0; }
		done
	done
	return 1
}

# fabrics_probe OPTIONS: write a connect string to /dev/nvme-fabrics the way nvme-cli does, with
# the kernel's module autoloading disabled (so "transport=rdma" cannot pull in the C nvme-rdma).
# Prints one line: "ok instance=N,cntlid=M" if a controller was created (it is deleted again
# at once), else "error <strerror text>"; then "no-handler" if the fabrics core logged
# "no handler found for transport" meanwhile, else "handler". Always returns 0.
fabrics_probe() {
	local opts=$1 err line mark modprobe_path
	[ -c /dev/nvme-fabrics ] || modprobe nvme-fabrics
	modprobe_path=$(cat /proc/sys/kernel/modprobe)
	echo /bin/true >/proc/sys/kernel/modprobe
	mark="rsrdma-probe-$$-$RANDOM"
	echo "$mark" >/dev/kmsg
	if err=$(
		exec 2>&1
		exec 3<>/dev/nvme-fabrics || exit 2
		printf '%s' "$opts" >&3 || exit 1
		read -r -u 3 line && echo "$line"
	); then
		echo "ok $err"
		line=${err#instance=}
		line=${line%%,*}
		[ -e "/sys/class/nvme/nvme$line/delete_controller" ] &&
			echo 1 >"/sys/class/nvme/nvme$line/delete_controller"
	else
		err=${err##*: }
		echo "error ${err:-unknown}"
	fi
	echo "$modprobe_path" >/proc/sys/kernel/modprobe
	if dmesg | sed -n "/$mark/,\$p" | grep -q 'no handler found for transport'; then
		echo no-handler
	else
		echo handler
	fi
}

# ---- kernel log --------------------------------------------------------------------------------
# dmesg_mark writes a unique marker into the kernel log; dmesg_since_mark prints what came after
# it (all of dmesg if the marker was lost). dmesg_check_clean fails, printing the offending part
# of the log as diagnostics, if anything after the mark looks like a kernel problem report
# (DMESG_BAD: WARN/BUG/Oops, KASAN, UBSAN, lockdep, debugobjects, RCU stalls, hung tasks, Rust
# panics), or if kmemleak_check finds a leak of ours. The mark clears kmemleak's earlier reports.
# kernel_check is what the suite runner checks after every test (tests/guest-suite.sh).

DMESG_BAD='WARNING:|BUG:|kernel BUG|Oops|KASAN|UBSAN|ODEBUG|panicked at|Kernel panic|general protection fault|possible recursive locking|circular locking|inconsistent lock state|non-static key|INFO: task .* blocked|rcu: INFO|detected stall|Call Trace'
# The text of every nvme_rsrdma loaded since boot, one "LOW HIGH" line each (16 hex digits):
# kmemleak prints the frames of an unloaded module as bare addresses, attributed through these.
RSRDMA_TEXT_RANGES=/tmp/rsrdma-text-ranges
_dmesg_mark=

# _kmemleak CMD: write CMD (scan, clear) to kmemleak; non-zero if the kernel has none, or if
# kmemleak turned itself off.
_kmemleak() {
	[ -e /sys/kernel/debug/kmemleak ] ||
		{ mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug 2>/dev/null; }
	[ -w /sys/kernel/debug/kmemleak ] && echo "$1" >/sys/kernel/debug/kmemleak 2>/dev/null
}

# kmemleak_available: the kernel has kmemleak (the debug flavour); it may have turned itself off.
kmemleak_available() {
	_kmemleak nop 2>/dev/null
	[ -e /sys/kernel/debug/kmemleak ]
}

# _rsrdma_record_text: add the loaded nvme_rsrdma's text to RSRDMA_TEXT_RANGES (from its lowest
# to its highest function symbol, plus a page for the last function).
_rsrdma_record_text() {
	local lo hi
	read -r lo hi < <(awk '$4 == "[nvme_rsrdma]" && $2 ~ /^[tT]$/ { print $1 }' /proc/kallsyms |
		sort | sed -n '1p;$p' | paste -s -d ' ')
	[ -n "$lo" ] && [ "$lo" != 0000000000000000 ] || return 0
	printf '%s %016x\n' "$lo" $((0x${hi:-$lo} + 4096)) >>"$RSRDMA_TEXT_RANGES"
}

# kmemleak_check: on a kernel with kmemleak, scan twice (an object is reported once it is older
# than 5 s and unchanged since the previous scan) and show the suspected leaks as diagnostics.
# Fails if kmemleak is off, or if a leak's allocation backtrace names nvme_rsrdma ("[nvme_rsrdma]",
# or an address in the text of an nvme_rsrdma loaded earlier); the others are shown, not counted.
# Then clears them, so that each is shown once. 0 on kernels without kmemleak.
kmemleak_check() {
	local f=/sys/kernel/debug/kmemleak leaks ours others
	kmemleak_available || return 0
	if ! _kmemleak scan; then
		ktap_diag "kmemleak is off: $(dmesg | grep -i 'kmemleak' | tail -n 3)"
		return 1
	fi
	sleep 1
	_kmemleak scan
	leaks=$(awk -v ranges="$(cat "$RSRDMA_TEXT_RANGES" 2>/dev/null)" '
		BEGIN {
			n = split(ranges, r, /[ \n]+/)
			for (i = 1; i + 1 <= n; i += 2) { lo[++nr] = "0x" r[i]; hi[nr] = "0x" r[i + 1] }
		}
		function flush(   i) {
			for (i = 1; i <= nl; i++) print (mine ? "Y " : "N ") line[i]
			nl = 0; mine = 0
		}
		/^unreferenced object/ { flush() }
		{
			line[++nl] = $0
			if ($0 ~ /\[nvme_rsrdma\]/) mine = 1
			rest = $0
			while (match(rest, /0x[0-9a-f]+/)) {
				a = substr(rest, RSTART, RLENGTH); rest = substr(rest, RSTART + RLENGTH)
				if (length(a) != 18) continue
				for (i = 1; i <= nr; i++) if (a >= lo[i] && a < hi[i]) mine = 1
			}
		}
		END { flush() }' "$f")
	_kmemleak clear
	ours=$(sed -n 's/^Y //p' <<<"$leaks")
	others=$(sed -n 's/^N //p' <<<"$leaks")
	if [ -n "$others" ]; then
		ktap_diag "kmemleak: $(grep -c '^unreferenced object' <<<"$others") suspected leaks elsewhere (not nvme_rsrdma's, not counted):"
		head -n 60 <<<"$others" | ktap_diag
	fi
	if [ -n "$ours" ]; then
		ktap_diag "kmemleak: $(grep -c '^unreferenced object' <<<"$ours") suspected leaks allocated by nvme_rsrdma:"
		head -n 200 <<<"$ours" | ktap_diag
		return 1
	fi
}

# kmsg_mark: write a unique line to the kernel log and print it, for dmesg_after.
kmsg_mark() {
	local mark="rsrdma-mark-$$-$BASHPID-$RANDOM-$SECONDS"
	echo "$mark" >/dev/kmsg
	echo "$mark"
}

# dmesg_after MARK: the kernel log after MARK (all of it when MARK is not, or no longer, there).
dmesg_after() {
	if [ -n "$1" ] && dmesg | grep -q -- "$1"; then
		dmesg | sed -n "/$1/,\$p" | tail -n +2
	else
		dmesg
	fi
}

# dmesg_mark: the test's mark, which dmesg_since_mark and dmesg_check_clean read from.
dmesg_mark() {
	_kmemleak clear || true
	_dmesg_mark=$(kmsg_mark)
}

dmesg_since_mark() {
	dmesg_after "$_dmesg_mark"
}

# _upstream_lockdep: the kernel log on stdin, each line prefixed "U " if it is part of a lockdep
# report that this project knows comes from upstream code, not nvme_rsrdma, else "L " (as
# kmemleak_check splits leaks). Known: the circular dependency nvmet-rdma's target reports
# between nvmet_config_sem and the RDMA CM's handler_mutex (a port's removal destroys its
# listening CM id under the semaphore; a Fabrics Connect that arrived before the target's
# ESTABLISHED event is executed from the connection's CM handler and takes the semaphore). The
# two mutexes are different ids' of one lock class; any host can trigger it: its Connect
# overtaking the CM's RTU is a matter of timing.
_upstream_lockdep() {
	awk '
		function flush(   i) {
			for (i = 1; i <= n; i++) print (sem && mutex && !mine ? "U " : "L ") line[i]
			n = 0; sem = 0; mutex = 0; mine = 0; inrep = 0
		}
		/WARNING: possible circular locking dependency detected/ { flush(); inrep = 1 }
		{ line[++n] = $0 }
		/nvmet_config_sem/ { sem = 1 }
		/handler_mutex/ { mutex = 1 }
		/nvme_rsrdma/ { mine = 1 }
		!inrep || /<\/TASK>/ { flush() }
		END { flush() }'
}

dmesg_check_clean() {
	local log known rc=0
	kmemleak_check || rc=1
	log=$(dmesg_since_mark | _upstream_lockdep)
	known=$(sed -n 's/^U //p' <<<"$log")
	log=$(sed -n 's/^L //p' <<<"$log")
	if [ -n "$known" ]; then
		ktap_diag "lockdep report from the target's upstream code (nvmet-rdma, rdma_cm), not nvme_rsrdma's (not counted; lockdep is off for the rest of this boot):"
		grep -E 'WARNING:|is trying to acquire|already holding|^[^#]*-> #|\(.*\)\{' <<<"$known" |
			head -n 12 | ktap_diag
	fi
	if grep -qE "$DMESG_BAD" <<<"$log"; then
		ktap_diag "kernel log since the mark has problems:"
		# From 5 lines before the first problem, at most 150 lines.
		awk -v re="$DMESG_BAD" '{ l[NR] = $0 } $0 ~ re && !f { f = NR }
			END { if (f) for (i = (f > 5 ? f - 5 : 1); i <= NR && i < f + 145; i++) print l[i] }' \
			<<<"$log" | ktap_diag
		rc=1
	fi
	return $rc
}

# kernel_check: the suite runner's check after each test and its clean-up, dmesg_check_clean on
# kmemleak kernels after a wait, so that what the test freed or leaked last is old enough to be
# reported (kmemleak skips objects younger than 5 s).
kernel_check() {
	kmemleak_available && sleep 5
	dmesg_check_clean
}

# ---- state ---------------------------------------------------------------------------------------

# leftovers: print, one per line, what a test must not leave behind (modules of the test stack,
# fabrics controllers, RDMA links, target configuration); nothing when the guest is clean.
leftovers() {
	local m c
	for m in nvme_rsrdma nvme_rdma nvmet_rdma nvme_loop nvmet null_blk rdma_rxe; do
		_module_loaded "$m" && echo "module $m"
	done
	for c in /sys/class/nvme/nvme*; do
		[ -e "$c/transport" ] && [ "$(cat "$c/transport")" != pcie ] &&
			echo "controller ${c##*/} ($(cat "$c/transport") $(cat "$c/subsysnqn" 2>/dev/null))"
	done
	rdma link show 2>/dev/null | awk '{ print "rdma link " $2 }'
	[ -d "$NULLB_CFS" ] && ls "$NULLB_CFS" | grep -v '^features$' | sed 's/^/null_blk /'
	mountpoint -q "$TARGET_TMPFS" 2>/dev/null && echo "mount $TARGET_TMPFS"
	ip -6 -o addr show dev "$RXE_NETDEV" 2>/dev/null |
		awk -v a="$TARGET_ADDR6/64" -v l="$TARGET_LL6/64" '$4 == a || $4 == l { print "address " $4 }'
	[ ! -e "$DROPIN_MODPROBE_CONF" ] || echo "file $DROPIN_MODPROBE_CONF"
	[ "$(cat /proc/sys/kernel/modprobe)" = /bin/true ] && echo "module autoloading off (fabrics_probe)"
	return 0
}

# reset_guest: undo whatever a failed or killed test may have left (see leftovers).
reset_guest() {
	[ "$(cat /proc/sys/kernel/modprobe)" = /bin/true ] && echo /sbin/modprobe >/proc/sys/kernel/modprobe
	rm -f "$DROPIN_MODPROBE_CONF"
	host_disconnect_all
	rsrdma_unload
	target_ipv6_teardown
	target_teardown
	module_unload nvme_rdma
	rxe_teardown
}

# ---- I/O ---------------------------------------------------------------------------------------

# fio_verify DEV SECONDS [FIO ARGS...]: mixed random read/write with crc32c verification, direct
# I/O on io_uring (libaio if fio lacks it), on the first 32 MiB of DEV (at most the device), 4 KiB
# blocks, queue depth 16. Extra arguments come last, so they override these. Non-zero on any I/O
# or verify error; prints a short summary (the full output too on failure) as diagnostics.
fio_verify() {
	local dev=$1 secs=$2 out rc=0
	shift 2
	out=$(_fio_run "$dev" --time_based --runtime="$secs" "$@") || rc=$?
	_fio_report "$dev" "$rc" "$out"
}

# _fio_run DEV [FIO ARGS...]: the fio_verify job (without its run time); fio's output.
_fio_run() {
	local dev=$1 engine=io_uring size
	shift
	fio --enghelp=io_uring >/dev/null 2>&1 || engine=libaio
	size=$(blockdev --getsize64 "$dev" 2>/dev/null) || { echo "$dev: not a block device"; return 1; }
	((size > 32 << 20)) && size=$((32 << 20))
	cd /tmp && fio --name=verify --filename="$dev" --direct=1 --ioengine="$engine" \
		--rw=randrw --bs=4k --iodepth=16 --size="$size" \
		--verify=crc32c --verify_backlog=256 --verify_fatal=1 --verify_state_save=0 \
		--do_verify=1 --group_reporting "$@" 2>&1
}

# _fio_report DEV STATUS OUTPUT: fio_verify's verdict and diagnostics.
_fio_report() {
	local dev=$1 rc=$2 out=$3
	if ((rc == 0)) && grep -qE 'err= *[1-9]|verify: bad|fio: (pid|io_u) .*error' <<<"$out"; then
		rc=1
	fi
	if ((rc)); then
		ktap_diag "fio on $dev failed (status $rc); $(grep -c '^verify: bad' <<<"$out") bad verify reads:"
		# Its own error and verify messages (the first ones), then the summary.
		grep -E '^(fio|verify):|error' <<<"$out" | head -n 15 | ktap_diag
		grep -E 'err=|^ *(READ|WRITE):|issued rwts' <<<"$out" | sed 's/^ *//' | ktap_diag
		grep -qE 'err=|^ *(READ|WRITE):' <<<"$out" || tail -n 20 <<<"$out" | ktap_diag
	else
		grep -E 'err=|^ *(READ|WRITE):|issued rwts' <<<"$out" | sed 's/^ *//' | ktap_diag
	fi
	return "$rc"
}

# fio_start DEV [FIO ARGS...]: the fio_verify job in the background until fio_stop, which
# interrupts it (fio finishes its verification and reports) and gives fio_verify's verdict.
# Call both from the test's own shell (not in a subshell such as ktap_check's), which owns the
# job.
# Returns once fio's job process runs (fio takes seconds to start under TCG, more on a busy
# guest), so that what the caller does next happens under I/O.
fio_start() {
	local dev=$1 secs
	shift
	secs=$(scaled 60)
	FIO_DEV=$dev FIO_OUT=$(mktemp /tmp/rsrdma-fio.XXXXXX)
	_fio_run "$dev" --time_based --runtime=3600 "$@" >"$FIO_OUT" 2>&1 &
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

fio_stop() {
	local rc=0 pids
	[ -n "${FIO_PID:-}" ] || return 1
	# Every fio process of the job (the main one and its job processes) gets the interrupt; fio
	# stops, verifies what is outstanding and prints its summary, exiting with 128 or 130. A
	# job without a fio process (it failed, or never started) is ended with its shell.
	if pids=$(_fio_pids); then
		# shellcheck disable=SC2086
		kill -INT $pids 2>/dev/null
	else
		kill "$FIO_PID" 2>/dev/null
	fi
	wait "$FIO_PID" || rc=$?
	FIO_PID=
	((rc == 128 || rc == 130)) && rc=0
	_fio_report "$FIO_DEV" "$rc" "$(cat "$FIO_OUT")"
	rc=$?
	rm -f "$FIO_OUT"
	return "$rc"
}

# ---- link loss -----------------------------------------------------------------------------------

# fabrics_connect OPTIONS: connect by writing OPTIONS to /dev/nvme-fabrics, for options nvme-cli
# lacks (fast_io_fail_tmo); prints the controller name (nvmeN). The controller stays.
fabrics_connect() {
	local line
	line=$(
		exec 2>&1
		exec 3<>/dev/nvme-fabrics || exit 1
		printf '%s' "$1" >&3 || exit 1
		read -r -u 3 l && echo "$l"
	) || { ktap_diag "connect $1: ${line##*: }"; return 1; }
	line=${line#instance=}
	echo "nvme${line%%,*}"
}

# ctrl_state CTRL: the controller's state (live, connecting, resetting...), or "gone".
ctrl_state() { cat "/sys/class/nvme/$1/state" 2>/dev/null || echo gone; }
# in_state CTRL STATE, not_live CTRL: for wait_for, which re-runs them.
in_state() { [ "$(ctrl_state "$1")" = "$2" ]; }
not_live() { ! in_state "$1" live; }

# target_port_disable [PORT]: nvmet port PORT (1 by default) without its subsystems. Unlinking
# the last one disables the port, so nvmet-rdma stops listening and drops its connections.
target_port_disable() {
	rm -f "$NVMET_CFS/ports/${1:-1}"/subsystems/*
}

# target_port_enable [PORT [NQN...]]: link the subsystems back, in the order given (by default
# port 1's three of target_setup, port 2's and 3's $NQN_NULL). The first link enables the port,
# and a host reconnecting before its subsystem is linked is refused for good (invalid subsystem,
# DNR): give the one a controller waits for first.
target_port_enable() {
	local port=${1:-1} nqn
	shift $(($# > 0))
	if (($# == 0)); then
		if ((port == 1)); then set -- "$NQN_NULL" "$NQN_FILE" "$NQN_NULL2"; else set -- "$NQN_NULL"; fi
	fi
	for nqn; do
		[ -e "$NVMET_CFS/ports/$port/subsystems/$nqn" ] ||
			ln -s "$NVMET_CFS/subsystems/$nqn" "$NVMET_CFS/ports/$port/subsystems/$nqn" || return 1
	done
}

# probe_start DEV: read one 4 KiB block with direct I/O in a loop, logging each completion's
# time (seconds since boot) to $PROBE_LOG; probe_first_after T prints the first completion after
# T; probe_stop ends it. A read issued while the controller reconnects completes when it is back,
# so the probe measures when I/O resumes, as an application sees it.
now() { cut -d' ' -f1 /proc/uptime; }

probe_start() {
	PROBE_LOG=$(mktemp /tmp/rsrdma-probe.XXXXXX)
	(
		while :; do
			dd if="$1" of=/dev/null bs=4k count=1 iflag=direct skip=$((RANDOM % 1024)) \
				2>/dev/null && now
		done
	) >"$PROBE_LOG" &
	PROBE_PID=$!
}

probe_stop() {
	[ -n "${PROBE_PID:-}" ] && kill "$PROBE_PID" 2>/dev/null && wait "$PROBE_PID" 2>/dev/null
	PROBE_PID=
	rm -f "$PROBE_LOG"
}

probe_first_after() {
	awk -v t="$1" '$1 > t { print $1; exit }' "$PROBE_LOG"
}

# ---- hostile target (tests/target: rsrdma-target) -----------------------------------------------
# A userspace NVMe/RDMA target on the same rxe device (librdmacm/libibverbs), built on the host
# by tests/run.sh (cargo build --release --manifest-path tests/target/Cargo.toml). It serves
# $HOSTILE_NQN on $TARGET_ADDR:$HOSTILE_PORT (not nvmet-rdma's port) from memory, politely or
# with one misbehaviour (--mode, see rsrdma-target --help), applied once. Its stdout (a line per
# connection, controller and misbehaviour) goes to $HOSTILE_LOG, its per-command log (-v) to
# $HOSTILE_VLOG.
#
#   hostile_start [TARGET ARGS...]   start it (stopping an earlier one), wait until it listens
#   hostile_stop                     stop it (TERM, then KILL)
#   hostile_arm                      SIGUSR1: arm a mode started with --arm signal
#   hostile_wait TIMEOUT_S REGEX     wait for a line of its stdout
#   hostile_count REGEX              count lines of its stdout
#   hostile_ctrl                     the host controller (nvmeN) connected to it, if any

HOSTILE_BIN=${HOSTILE_BIN:-$RSRDMA_REPO/tests/target/target/release/rsrdma-target}
HOSTILE_NQN=nqn.2026-11.io.rsrdma:hostile
HOSTILE_PORT=4421
HOSTILE_LOG=/tmp/rsrdma-hostile.log
HOSTILE_VLOG=/tmp/rsrdma-hostile.vlog
HOSTILE_PID=

_pid_gone() { [ ! -d "/proc/$1" ] || grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }

# target_launch PORT NQN LOG VLOG [rsrdma-target options...]: starts an rsrdma-target in the
# background (its pid in LAUNCHED_PID) and waits until it listens.
target_launch() {
	local port=$1 nqn=$2 log=$3 vlog=$4
	shift 4
	LAUNCHED_PID=
	[ -x "$HOSTILE_BIN" ] || {
		ktap_diag "$HOSTILE_BIN missing: cargo build --release --manifest-path tests/target/Cargo.toml"
		return 1
	}
	modprobe -a rdma_ucm ib_uverbs 2>/dev/null
	: >"$log"
	: >"$vlog"
	"$HOSTILE_BIN" -a "$TARGET_ADDR" -p "$port" -n "$nqn" "$@" >"$log" 2>"$vlog" </dev/null &
	LAUNCHED_PID=$!
	wait_for 15 grep -q '^target: listening' "$log" && return 0
	ktap_diag "rsrdma-target did not start: $(tail -n 5 "$log" "$vlog")"
	return 1
}

# target_kill PID: stops a launched rsrdma-target (TERM, then KILL after 10 s).
target_kill() {
	[ -n "$1" ] || return 0
	kill -TERM "$1" 2>/dev/null
	wait_for 10 _pid_gone "$1" || kill -KILL "$1" 2>/dev/null
	wait "$1" 2>/dev/null
}

hostile_start() {
	local rc=0
	hostile_stop
	target_launch "$HOSTILE_PORT" "$HOSTILE_NQN" "$HOSTILE_LOG" "$HOSTILE_VLOG" "$@" || rc=1
	HOSTILE_PID=$LAUNCHED_PID
	((rc == 0)) || hostile_stop
	return $rc
}

hostile_stop() {
	target_kill "$HOSTILE_PID"
	HOSTILE_PID=
}

hostile_arm() {
	kill -USR1 "$HOSTILE_PID" 2>/dev/null && hostile_wait 10 ': armed$'
}

hostile_wait() { wait_for "$1" grep -qE -- "$2" "$HOSTILE_LOG"; }

hostile_count() { grep -cE -- "$1" "$HOSTILE_LOG"; }

hostile_ctrl() {
	local c
	c=$(ctrl_for "$HOSTILE_NQN") && echo "${c##*/}"
}
