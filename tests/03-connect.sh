#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# rsrdma-timeout: 900
#
# Controller lifecycle over the rsrdma transport against the in-kernel nvmet-rdma target:
# connect, what the core and sysfs show, repeated connect/disconnect without leaking RDMA
# resources, two controllers at once, duplicate connects, IPv6 (unique-local and link-local
# addresses), an unreachable address, refused options, discovery, and rmmod with controllers
# connected.
set -u
. "$(dirname "$0")/lib/common.sh"

CYCLES=${RSRDMA_CONNECT_CYCLES:-20}

trap teardown_all EXIT
trap 'exit 143' TERM INT

connect() { # NQN [nvme connect options...]
	local nqn=$1
	shift
	timeout 60 nvme connect -t "$HOST_TRANSPORT" -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$nqn" "$@" 2>&1
}

disconnect() { # NQN
	timeout 60 nvme disconnect -n "$1" >/dev/null 2>&1
	wait_for 30 _no_ctrl_for "$1"
}

_no_ctrl_for() {
	local c
	for c in /sys/class/nvme/nvme*; do
		[ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$1" ] && return 1
	done
	return 0
}

# refuse NAME OPTIONS EXPECT_ERRNO_TEXT LOG_REGEX: a connect string written to /dev/nvme-fabrics
# must fail with that error and leave a matching dmesg line, and no controller behind.
refuse() {
	local name=$1 opts=$2 want=$3 logre=$4 out result log
	dmesg_mark
	out=$(fabrics_probe "transport=$HOST_TRANSPORT,$opts")
	result=$(head -n1 <<<"$out")
	log=$(dmesg_since_mark | grep -E "$logre" | head -n1)
	ktap_diag "$opts: $result; log: ${log:-none}"
	if [ "$result" = "error $want" ] && [ -n "$log" ] && _no_ctrl_for nqn.refused; then
		ktap_test_pass "$name"
	else
		ktap_diag "$name: expected \"$want\" and a log line matching /$logre/"
		ktap_test_fail "$name"
	fi
}

ktap_print_header
ktap_set_plan 22

if ! fabric_setup || ! target_setup || ! host_load; then
	bail_out "set-up failed"
fi
dmesg_mark
baseline=$(rdma_counts)
ktap_diag "RDMA resources before: $(tr '\n' ' ' <<<"$baseline")"

# --- connect -------------------------------------------------------------------------------
out=$(connect "$NQN_NULL")
ktap_diag "$out"
if wait_for 30 nvme_dev_for_nqn "$NQN_NULL" >/dev/null; then
	ktap_test_pass "connect"
else
	ktap_diag "connect: no namespace for $NQN_NULL"
	ktap_test_fail "connect"
fi
c=$(ctrl_for "$NQN_NULL")
dev=$(nvme_dev_for_nqn "$NQN_NULL")

transport=$(cat "$c/transport" 2>/dev/null)
address=$(cat "$c/address" 2>/dev/null)
state=$(cat "$c/state" 2>/dev/null)
ktap_diag "${c##*/}: transport=$transport state=$state address=$address"
ktap_check "sysfs transport, state and address" \
	test "$transport" = "$HOST_TRANSPORT" -a "$state" = live -a \
	"$address" = "traddr=$TARGET_ADDR,trsvcid=$TARGET_PORT"

list=$(nvme list 2>&1)
ktap_diag "$list"
size=$(blockdev --getsize64 "$dev" 2>/dev/null)
if grep -q "${dev}" <<<"$list" && [ "$size" = "$NULL_SIZE" ]; then
	ktap_test_pass "nvme list shows the namespace with the right size"
else
	ktap_diag "nvme list shows the namespace with the right size: size $size, want $NULL_SIZE"
	ktap_test_fail "nvme list shows the namespace with the right size"
fi

line=$(dmesg_since_mark | grep -E 'new ctrl: NQN "'"$NQN_NULL"'".*I/O queues of depth [0-9]+, pool [0-9]+ KiB')
ktap_diag "${line:-no new ctrl line}"
ktap_check "connect traced in dmesg with queues and pool size" test -n "$line"

disconnect "$NQN_NULL"
ktap_check "disconnect removes the controller" _no_ctrl_for "$NQN_NULL"

# --- connect/disconnect cycles ---------------------------------------------------------------
failed=0
start=$SECONDS
for ((i = 1; i <= CYCLES; i++)); do
	connect "$NQN_NULL" >/dev/null
	if ! wait_for 30 nvme_dev_for_nqn "$NQN_NULL" >/dev/null; then
		ktap_diag "cycle $i: no namespace"
		failed=1
	fi
	if ! disconnect "$NQN_NULL"; then
		ktap_diag "cycle $i: controller did not go away"
		failed=1
	fi
	((failed)) && break
done
ktap_diag "$CYCLES connect/disconnect cycles in $((SECONDS - start)) s"
if ((failed == 0)); then
	ktap_test_pass "$CYCLES connect/disconnect cycles"
else
	ktap_test_fail "$CYCLES connect/disconnect cycles"
fi

after=$(rdma_counts)
ktap_diag "RDMA resources after: $(tr '\n' ' ' <<<"$after")"
if [ "$after" = "$baseline" ]; then
	ktap_test_pass "no RDMA resources leaked"
else
	ktap_diag "no RDMA resources leaked: before: $(tr '\n' ' ' <<<"$baseline")"
	ktap_test_fail "no RDMA resources leaked"
fi

# --- two controllers -------------------------------------------------------------------------
connect "$NQN_NULL" >/dev/null
connect "$NQN_NULL2" >/dev/null
dev1=$(wait_for 30 nvme_dev_for_nqn "$NQN_NULL" && nvme_dev_for_nqn "$NQN_NULL")
dev2=$(wait_for 30 nvme_dev_for_nqn "$NQN_NULL2" && nvme_dev_for_nqn "$NQN_NULL2")
ktap_diag "controllers: $dev1 $dev2"
r1=1 r2=1
if [ -n "$dev1" ] && [ -n "$dev2" ] && [ "$dev1" != "$dev2" ]; then
	fio_verify "$dev1" --size=4m &
	p=$!
	fio_verify "$dev2" --size=4m
	r2=$?
	wait "$p"
	r1=$?
fi
if ((r1 == 0 && r2 == 0)); then
	ktap_test_pass "two controllers to two subsystems at once"
else
	ktap_test_fail "two controllers to two subsystems at once"
fi

# --- duplicate connect -------------------------------------------------------------------------
# Written to /dev/nvme-fabrics directly: nvme-cli refuses duplicates itself before the kernel
# sees them. The same association needs the same host NQN and ID as the existing controller.
c=$(ctrl_for "$NQN_NULL")
assoc="traddr=$TARGET_ADDR,trsvcid=$TARGET_PORT,nqn=$NQN_NULL,hostnqn=$(cat "$c/hostnqn"),hostid=$(cat "$c/hostid")"
dmesg_mark
out=$(fabrics_probe "transport=$HOST_TRANSPORT,$assoc")
log=$(dmesg_since_mark | grep -m1 'already connected')
ktap_diag "second connect: $(head -n1 <<<"$out"); ${log:-no log line}"
if [ "$(head -n1 <<<"$out")" = "error Operation already in progress" ] && [ -n "$log" ]; then
	ktap_test_pass "duplicate connect refused"
else
	ktap_test_fail "duplicate connect refused"
fi
out=$(fabrics_probe "transport=$HOST_TRANSPORT,$assoc,duplicate_connect")
ktap_diag "with duplicate_connect: $(head -n1 <<<"$out")"
ktap_check "duplicate_connect allows a second controller" grep -q '^ok instance=' <<<"$out"
host_disconnect_all

# --- IPv6 ------------------------------------------------------------------------------------
# RoCE v2 over IPv6: nvmet ports 2 and 3 on a unique-local and a link-local address of the rxe
# netdev. The link-local one needs its interface (traddr=ADDR%IFNAME); the log shows the parsed
# address in brackets, and a scope as the interface index after the port, as the kernel prints
# socket addresses (%pISpcs).
# ipv6_connect NAME TRADDR SHOWN: connect, I/O with verification, the sysfs address, and the
# "new ctrl" line's address, then disconnect.
ipv6_connect() {
	local name=$1 traddr=$2 shown=$3 out ok=1 c d address line
	dmesg_mark
	out=$(timeout 60 nvme connect -t "$HOST_TRANSPORT" -a "$traddr" -s "$TARGET_PORT" -n "$NQN_NULL" 2>&1)
	[ -z "$out" ] || ktap_diag "$out"
	if wait_for 30 nvme_dev_for_nqn "$NQN_NULL"; then
		c=$(ctrl_for "$NQN_NULL") d=$(nvme_dev_for_nqn "$NQN_NULL")
		address=$(cat "$c/address" 2>/dev/null)
		line=$(dmesg_since_mark | grep -o 'new ctrl: NQN "'"$NQN_NULL"'", addr [^ ]*' | head -n1)
		ktap_diag "${c##*/}: address=$address; ${line:-no new ctrl line}"
		fio_verify "$d" --size=4m || ok=0
		[ "$address" = "traddr=$traddr,trsvcid=$TARGET_PORT" ] || ok=0
		[ "$line" = "new ctrl: NQN \"$NQN_NULL\", addr $shown," ] || ok=0
	else
		ok=0
	fi
	disconnect "$NQN_NULL" || ok=0
	if ((ok)); then
		ktap_test_pass "$name"
	else
		ktap_test_fail "$name"
	fi
}

if target_ipv6_setup; then
	ifindex=$(cat "/sys/class/net/$RDMA_NETDEV/ifindex")
	ipv6_connect "connect over IPv6 (unique-local), I/O, address shown as [$TARGET_ADDR6]:port" \
		"$TARGET_ADDR6" "[$TARGET_ADDR6]:$TARGET_PORT"
	ipv6_connect "connect over IPv6 (link-local with scope), I/O, address shown with the scope" \
		"$TARGET_LL6%$RDMA_NETDEV" "[$TARGET_LL6]:$TARGET_PORT%$ifindex"
else
	ktap_diag "connect over IPv6 (unique-local): IPv6 target set-up failed"
	ktap_test_fail "connect over IPv6 (unique-local)"
	ktap_diag "connect over IPv6 (link-local with scope): IPv6 target set-up failed"
	ktap_test_fail "connect over IPv6 (link-local with scope)"
fi
ktap_check "IPv6 target ports and addresses removed" target_ipv6_teardown

# --- unreachable address -----------------------------------------------------------------------
dmesg_mark
start=$(date +%s%N)
out=$(timeout 60 nvme connect -t "$HOST_TRANSPORT" -a 10.0.2.200 -s "$TARGET_PORT" -n "$NQN_NULL" 2>&1)
rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
ktap_diag "unreachable: status $rc after $ms ms: $out"
dmesg_since_mark | grep -E 'rsrdma|nvme' | tail -n 3 | ktap_diag
if ((rc != 0 && ms < $(scaled 10) * 1000)) && _no_ctrl_for "$NQN_NULL"; then
	ktap_test_pass "unreachable address fails within the resolution timeout"
else
	ktap_test_fail "unreachable address fails within the resolution timeout"
fi

# --- refused options ---------------------------------------------------------------------------
base="traddr=$TARGET_ADDR,trsvcid=$TARGET_PORT,nqn=nqn.refused"
refuse "malformed traddr" "traddr=10.0.2,trsvcid=$TARGET_PORT,nqn=nqn.refused" \
	"Invalid argument" "traddr: malformed address"
refuse "malformed trsvcid" "traddr=$TARGET_ADDR,trsvcid=port,nqn=nqn.refused" \
	"Invalid argument" "traddr: malformed address"
refuse "malformed host_traddr" "$base,host_traddr=1.2.3.4.5" \
	"Invalid argument" "host_traddr: malformed source address"
refuse "TCP-only option (hdr_digest)" "$base,hdr_digest" \
	"Invalid argument" "invalid parameter 'hdr_digest'"

# --- discovery -------------------------------------------------------------------------------
out=$(timeout 60 nvme discover -t "$HOST_TRANSPORT" -a "$TARGET_ADDR" -s "$TARGET_PORT" 2>&1)
ktap_diag "$(grep -E 'subnqn|trtype|traddr' <<<"$out" | sort -u)"
if grep -q "subnqn: *$NQN_NULL\$" <<<"$out" && grep -q "subnqn: *$NQN_FILE\$" <<<"$out"; then
	ktap_test_pass "discovery log page read"
else
	ktap_diag "$out"
	ktap_test_fail "discovery log page read"
fi

# --- rmmod with controllers connected -----------------------------------------------------------
connect "$NQN_NULL" >/dev/null
connect "$NQN_FILE" >/dev/null
wait_for 30 nvme_dev_for_nqn "$NQN_FILE" >/dev/null
ktap_diag "connected before rmmod: $(cat /sys/class/nvme/nvme*/subsysnqn 2>/dev/null | tr '\n' ' ')"
if timeout 120 rmmod nvme_rsrdma && ! _module_loaded nvme_rsrdma && _no_fabrics_ctrl; then
	ktap_test_pass "rmmod deletes connected controllers"
else
	ktap_test_fail "rmmod deletes connected controllers"
fi
after=$(rdma_counts)
ktap_diag "RDMA resources after rmmod: $(tr '\n' ' ' <<<"$after")"
ktap_check "no RDMA resources left after rmmod" test "$after" = "$baseline"

ktap_check "kernel log clean" dmesg_check_clean
ktap_finished
