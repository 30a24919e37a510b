# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash
#
# The guest tests' helpers: the host transport under test and its controllers.
# Sourced by tests/lib/common.sh, not run.

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

# module_rdma_resources: the QPs, MRs, PDs and CM ids the host transport holds, as the RDMA core
# lists them, one "type count" per line (its CQs come from the core's shared pool, which keeps
# them). no_module_rdma_resources: all of them 0.
module_rdma_resources() {
	local t
	for t in qp mr pd cm_id; do
		echo "$t $(rdma resource show "$t" 2>/dev/null | grep -cE '\[nvme_(rsrdma|rdma)\]')"
	done
}
no_module_rdma_resources() { ! module_rdma_resources | grep -qv ' 0$'; }

# our_rkeys: the RKEYs of the MRs the host transport holds, as the RDMA core lists them.
our_rkeys() {
	rdma resource show mr 2>/dev/null | grep -E '\[nvme_(rsrdma|rdma)\]' | grep -o 'rkey 0x[0-9a-f]*' |
		cut -d' ' -f2 | sort
}

# data_bytes STATS: "AREA PAGES COPIED", the I/O queues' data bytes of a controller (its debugfs
# stats file): moved from the registered area, sent in capsules from their own pages, copied
# through the pool.
data_bytes() {
	sed -nE 's/^data bytes[^:]*: ([0-9]+) from the area.*, ([0-9]+) in capsules.*, ([0-9]+) copied.*/\1 \2 \3/p' "$1"
}

# teardown_all: the usual end of a test: disconnect, unload the host transport, remove the
# target and soft-RoCE, quietly (a test's EXIT trap).
teardown_all() {
	host_disconnect_all >/dev/null 2>&1
	host_unload >/dev/null 2>&1
	target_ipv6_teardown >/dev/null 2>&1
	target_teardown >/dev/null 2>&1
	fabric_teardown >/dev/null 2>&1
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
hw_queues() {
	local q=("$1/$(path_dev "$1")/mq/"*)
	if [ -e "${q[0]}" ]; then echo ${#q[@]}; else echo 0; fi
}

# nvme_dev_for_nqn NQN: print /dev/nvmeXnY, the block device of the first namespace of the
# subsystem NQN as seen through a connected controller (the multipath head node when native
# multipath is on, else the controller's own namespace node). 1 if there is none yet.
nvme_dev_for_nqn() {
	local nqn=$1 c s n name
	for c in /sys/class/nvme/nvme*; do
		[ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$nqn" ] || continue
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
