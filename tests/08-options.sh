#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# rsrdma-timeout: 900
#
# Bad and edge-case connect options, written to /dev/nvme-fabrics (as nvme-cli does) and some
# given to nvme connect itself. Every one must end cleanly: the expected error code (or, for
# the edge cases the core accepts, a working controller), one explanatory kernel log line, no
# controller and no RDMA resource (CM id, QP, MR, PD, CQ in use) left behind, nothing in the
# kernel log that looks like a problem report, each checked per row; and the module still
# unloads at the end.
set -u
. "$(dirname "$0")/lib/common.sh"

trap teardown_all EXIT
trap 'exit 143' TERM INT

T=$HOST_TRANSPORT
A="traddr=$TARGET_ADDR,trsvcid=$TARGET_PORT"
N="nqn=$NQN_NULL"
long=$(printf 'x%.0s' $(seq 1 300))

# NAME | OPTIONS | EXPECTED ("error <strerror>" or "ok") | kernel log line (regex) it must leave
cases=(
	"missing traddr|transport=$T,trsvcid=$TARGET_PORT,$N|error Invalid argument|missing parameter 'traddr"
	"missing nqn|transport=$T,$A|error Invalid argument|missing parameter 'nqn"
	"malformed IPv4 (octet 256)|transport=$T,traddr=10.0.2.256,trsvcid=$TARGET_PORT,$N|error Invalid argument|traddr: malformed address"
	"malformed IPv4 (three octets)|transport=$T,traddr=10.0.2,trsvcid=$TARGET_PORT,$N|error Invalid argument|traddr: malformed address"
	"malformed IPv6|transport=$T,traddr=fe80::zz,trsvcid=$TARGET_PORT,$N|error Invalid argument|traddr: malformed address"
	"IPv6 with no route|transport=$T,traddr=2001:db8::1,trsvcid=$TARGET_PORT,$N|error *|queue 0: "
	"IPv4 with no RDMA device (loopback)|transport=$T,traddr=127.0.0.1,trsvcid=$TARGET_PORT,$N|error *|queue 0: "
	"unroutable address|transport=$T,traddr=192.0.2.1,trsvcid=$TARGET_PORT,$N|error *|queue 0: "
	"port 0|transport=$T,traddr=$TARGET_ADDR,trsvcid=0,$N|error Invalid argument|trsvcid: port 0"
	"port 0 in hex|transport=$T,traddr=$TARGET_ADDR,trsvcid=0x0,$N|error Invalid argument|trsvcid: port 0"
	"port 65536|transport=$T,traddr=$TARGET_ADDR,trsvcid=65536,$N|error Invalid argument|traddr: malformed address"
	"port not a number|transport=$T,traddr=$TARGET_ADDR,trsvcid=http,$N|error Invalid argument|traddr: malformed address"
	"queue_size 0|transport=$T,$A,$N,queue_size=0|error Invalid argument|[Ii]nvalid queue_size"
	"queue_size 15|transport=$T,$A,$N,queue_size=15|error Invalid argument|[Ii]nvalid queue_size"
	"queue_size 1025|transport=$T,$A,$N,queue_size=1025|error Invalid argument|[Ii]nvalid queue_size"
	"queue_size 1024 (clamped)|transport=$T,$A,$N,queue_size=1024|ok|clamping down"
	"nr_io_queues 0|transport=$T,$A,$N,nr_io_queues=0|error Invalid argument|[Ii]nvalid number of IOQs"
	"nr_io_queues 100000 (clamped)|transport=$T,$A,$N,nr_io_queues=100000|ok|creating [0-9]+ I/O queues"
	"nr_write_queues 4 and nr_poll_queues 4 (more than the CPUs)|transport=$T,$A,$N,nr_write_queues=4,nr_poll_queues=4|ok|mapped [0-9]+/[0-9]+/[1-9][0-9]* default/read/poll"
	"nr_write/poll_queues INT_MAX (each clamped to the CPUs)|transport=$T,$A,$N,nr_write_queues=2147483647,nr_poll_queues=2147483647|ok|creating [0-9]+ I/O queues"
	"nr_write_queues -1|transport=$T,$A,$N,nr_write_queues=-1|error Invalid argument|Invalid nr_write_queues"
	"nr_poll_queues not a number|transport=$T,$A,$N,nr_poll_queues=many|error Invalid argument|[Ii]nvalid|unknown parameter"
	"reconnect_delay 0|transport=$T,$A,$N,reconnect_delay=0|error Invalid argument|[Ii]nvalid reconnect_delay"
	"reconnect_delay -1|transport=$T,$A,$N,reconnect_delay=-1|error Invalid argument|[Ii]nvalid reconnect_delay"
	"reconnect_delay > ctrl_loss_tmo|transport=$T,$A,$N,reconnect_delay=20,ctrl_loss_tmo=10|ok|new ctrl"
	"ctrl_loss_tmo absurd (the core refuses silently)|transport=$T,$A,$N,ctrl_loss_tmo=99999999999|error Invalid argument|-"
	"keep_alive_tmo -1|transport=$T,$A,$N,keep_alive_tmo=-1|error Invalid argument|Invalid keep_alive_tmo"
	"fast_io_fail_tmo -2 (off)|transport=$T,$A,$N,fast_io_fail_tmo=-2|ok|new ctrl"
	"tos 256 (clamped)|transport=$T,$A,$N,tos=256|ok|[Cc]lamping type of service"
	"tos -1|transport=$T,$A,$N,tos=-1|error Invalid argument|[Ii]nvalid type of service"
	"oversized hostnqn|transport=$T,$A,$N,hostnqn=nqn.$long|error Invalid argument|needs to be <"
	"malformed host_traddr|transport=$T,$A,$N,host_traddr=1.2.3.4.5|error Invalid argument|host_traddr: malformed source address"
	"host_traddr not a local address|transport=$T,$A,$N,host_traddr=10.9.9.9|error *|queue 0: "
	"unknown key|transport=$T,$A,$N,frobnicate=1|error Invalid argument|unknown parameter"
	"TCP-only: hdr_digest|transport=$T,$A,$N,hdr_digest|error Invalid argument|invalid parameter 'hdr_digest'"
	"TCP-only: data_digest|transport=$T,$A,$N,data_digest|error Invalid argument|invalid parameter 'data_digest'"
	"TCP-only: host_iface|transport=$T,$A,$N,host_iface=eth0|error Invalid argument|invalid parameter 'host_iface"
	"TCP-only: tls|transport=$T,$A,$N,tls|error Invalid argument|TLS is not supported|invalid parameter 'tls'|unknown parameter or missing value 'tls'"
	"unknown subsystem (Connect refused, DNR)|transport=$T,$A,nqn=nqn.2026-11.io.rsrdma:none|error *|failed to connect queue: 0|Connect Invalid"
)

ktap_print_header
ktap_set_plan $((${#cases[@]} + 4))

if ! fabric_setup || ! target_setup || ! host_load; then
	bail_out "set-up failed"
fi
dmesg_mark
baseline=$(rdma_counts)
ktap_diag "RDMA resources before: $(tr '\n' ' ' <<<"$baseline")"

for c in "${cases[@]}"; do
	IFS='|' read -r name opts want logre <<<"$c"
	mark=$(kmsg_mark)
	start=$(date +%s%N)
	out=$(fabrics_probe "$opts")
	ms=$((($(date +%s%N) - start) / 1000000))
	result=$(head -n1 <<<"$out")
	if [ "$logre" = - ]; then
		# Refused by the fabrics core's parser before the transport sees it; the core is silent.
		log="(none expected: the fabrics core refuses it silently)"
	else
		log=$(dmesg_after "$mark" | grep -m1 -E "$logre")
	fi
	ok=1
	# fabrics_probe deletes the controller it created (synchronously): any other is a leftover
	# of the row, which fails it before the clean-up below removes it.
	if ! _no_fabrics_ctrl; then
		ok=0
		ktap_diag "$name: controllers left behind: $(grep -H . /sys/class/nvme/nvme*/transport | tr '\n' ' ')"
	fi
	host_disconnect_all >/dev/null 2>&1
	# The row's own kernel log: no problem report (the whole test's log is checked again at the end).
	dmesg_clean_after "$mark" || ok=0
	case "$want" in
	ok) [[ $result == ok* ]] || ok=0 ;;
	"error *") [[ $result == error* ]] || ok=0 ;;
	*) [ "$result" = "$want" ] || ok=0 ;;
	esac
	[ -n "$log" ] || ok=0
	now_counts=$(rdma_counts)
	[ "$now_counts" = "$baseline" ] || { ok=0; ktap_diag "RDMA resources now: $(tr '\n' ' ' <<<"$now_counts")"; }
	ktap_diag "$name: ${result} in ${ms} ms; log: ${log:-none}"
	if ((ok)); then
		ktap_test_pass "$name"
	else
		ktap_diag "$name: expected $want and a log line matching /$logre/"
		ktap_test_fail "$name"
	fi
done

# The same refusals through nvme-cli, which users type.
out=$(timeout 30 nvme connect -t "$T" -a 10.0.2.256 -s "$TARGET_PORT" -n "$NQN_NULL" 2>&1)
rc=$?
ktap_diag "nvme connect -a 10.0.2.256: status $rc: $out"
ktap_check "nvme connect with a malformed address fails" test "$rc" -ne 0 -a -n "$out"
out=$(timeout 30 nvme connect -t "$T" -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN_NULL" -Q 8 2>&1)
rc=$?
ktap_diag "nvme connect -Q 8: status $rc: $out"
ktap_check "nvme connect with queue size 8 fails" test "$rc" -ne 0
host_disconnect_all >/dev/null 2>&1

# The descriptor of /dev/nvme-fabrics that created a controller holds a reference to it until
# it is closed, and the controller's last put runs the module's free_ctrl: unloading must wait
# for that close, then finish.
unload_waits_for_fabrics_fd() {
	local fd line pid mark rc=0
	exec {fd}<>/dev/nvme-fabrics || return 1
	if ! { printf '%s' "transport=$T,$A,$N" >&"$fd" && read -r -u "$fd" line; }; then
		ktap_diag "connect through the held descriptor failed"
		exec {fd}>&-
		return 1
	fi
	ktap_diag "connected through the held descriptor: $line"
	mark=$(kmsg_mark)
	# Without the descriptor: rmmod would hold it open itself and wait for its own close.
	(
		exec {fd}>&-
		exec rmmod nvme_rsrdma
	) &
	pid=$!
	if wait_for 30 log_has "$mark" "waiting for 1 controller(s) still referenced"; then
		sleep 1
		if kill -0 "$pid" 2>/dev/null; then
			ktap_diag "rmmod waits while the descriptor is open"
		else
			ktap_diag "rmmod returned before the descriptor was closed"
			rc=1
		fi
	else
		ktap_diag "no 'waiting for 1 controller(s) still referenced' within 30 s: $(dmesg_after "$mark" | tail -n 5)"
		rc=1
	fi
	exec {fd}>&-
	if ! wait "$pid"; then
		ktap_diag "rmmod failed"
		rc=1
	fi
	if _module_loaded nvme_rsrdma; then
		ktap_diag "module still loaded"
		rc=1
	fi
	# After the connect: drop-in mode's guard against the core loading the C nvme-rdma for it.
	rm -f "$DROPIN_MODPROBE_CONF"
	return $rc
}
ktap_check "module unload waits for a controller an open /dev/nvme-fabrics holds" unload_waits_for_fabrics_fd
ktap_check "kernel log clean" dmesg_check_clean
ktap_finished
