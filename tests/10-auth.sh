#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# rsrdma-timeout: 600
#
# NVMe in-band authentication (DH-HMAC-CHAP) over the transport. The exchange is the NVMe
# core's, run inside Fabrics Connect on each queue the transport connects; what the transport
# must get right is to run it on every (re)connect and to leave nothing behind when it fails.
# A subsystem of nvmet that admits one host, with that host's secret, the controller's secret,
# SHA-256 and the ffdhe2048 group: a connect without a secret (or with a wrong
# one) is refused; with the right one the controller authenticates, moves verified data, and
# authenticates again after a reset and after losing its target port; the controller
# authenticates itself when asked (bidirectional), and a wrong controller secret is refused.
set -u
. "$(dirname "$0")/lib/common.sh"

NQN_AUTH=nqn.2026-11.io.rsrdma:auth
HOST_AUTH=nqn.2014-08.io.rsrdma:host-auth
HOSTID_AUTH=8f3a2c5e-1b7d-4e2a-9c61-0d5f7a3b2e91

trap teardown_all EXIT
trap 'exit 143' TERM INT

# auth_target_setup: the subsystem (on rsrdma_null2, exported on port 1) and its one host.
auth_target_setup() {
	local s=$NVMET_CFS/subsystems/$NQN_AUTH h=$NVMET_CFS/hosts/$HOST_AUTH
	# The target checks that the kernel has the DH group when it is configured, and the
	# crypto API does not load the module for it by itself here.
	modprobe -a dh_generic cryptomgr || { ktap_diag "no dh_generic"; return 1; }
	mkdir "$s" && _w 0 "$s/attr_allow_any_host" && mkdir "$s/namespaces/1" &&
		_w /dev/rsrdma_null2 "$s/namespaces/1/device_path" && _w 1 "$s/namespaces/1/enable" &&
		mkdir "$h" && _w "$KEY" "$h/dhchap_key" && _w "$CKEY" "$h/dhchap_ctrl_key" &&
		_w 'hmac(sha256)' "$h/dhchap_hash" && _w ffdhe2048 "$h/dhchap_dhgroup" || return 1
	ln -s "$h" "$s/allowed_hosts/$HOST_AUTH" &&
		ln -s "$s" "$NVMET_CFS/ports/1/subsystems/$NQN_AUTH"
}

# auth_connect [nvme connect options...]: connect as the subsystem's host; nvme's output.
auth_connect() {
	timeout 60 nvme connect -t "$HOST_TRANSPORT" -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN_AUTH" \
		--hostnqn="$HOST_AUTH" --hostid="$HOSTID_AUTH" "$@" 2>&1
}

no_ctrl() { [ -z "$(ctrl_for "$NQN_AUTH")" ]; }

# authenticated MARK: the number of admin queue authentications the core logged since MARK.
authenticated() { dmesg_after "$1" | grep -c 'qid 0: authenticated with hash hmac(sha256) dhgroup ffdhe2048'; }

# refused NAME WANT_ERROR [connect options...]: the connect fails within 20 s (scaled: on the
# debug kernel nvmet took 30 s to set up a controller's authentication) with WANT_ERROR (an
# extended regex of nvme-cli's strerror text) and leaves no controller.
refused() {
	local name=$1 want=$2 out t=$SECONDS mark limit
	limit=$(scaled 20)
	shift 2
	mark=$(kmsg_mark)
	out=$(auth_connect "$@")
	t=$((SECONDS - t))
	ktap_diag "after $t s: $(head -n1 <<<"$out")"
	dmesg_after "$mark" | grep -E 'aborting|authentication failed|auth_(send|receive) failed' |
		head -n 4 | ktap_diag
	if grep -qE "$want" <<<"$out" && ((t <= limit)) && wait_for 10 no_ctrl; then
		ktap_test_pass "$name"
	else
		ktap_diag "$name: expected /$want/ within $limit s and no controller"
		ktap_test_fail "$name"
	fi
}

ktap_print_header
ktap_set_plan 9

KEY=$(nvme gen-dhchap-key -n "$HOST_AUTH" -m 1)
CKEY=$(nvme gen-dhchap-key -n "$NQN_AUTH" -m 1)
BAD=$(nvme gen-dhchap-key -n "$HOST_AUTH" -m 1)
if ! fabric_setup || ! target_setup || ! auth_target_setup || ! host_load; then
	bail_out "set-up failed"
fi
dmesg_mark
baseline=$(rdma_counts)

# --- refused -------------------------------------------------------------------------------------
refused "no secret: refused (key not available), no controller" "Required key not available"
# A wrong host secret: nvmet answers the host's response with failure1 and drops the connection
# at the same moment (nvmet_ctrl_fatal_error). Either comes first: the failure message (the key
# is rejected), or the disconnect, on which the transport aborts the pending authentication
# receive and fails its retries at once (without that, the connect waited out the admin timeout
# five times, the core retrying authentication commands): EKEYREJECTED or EIO, within seconds.
refused "wrong secret: refused within seconds, no controller" "rejected|Input/output error" \
	--dhchap-secret="$BAD"

# --- authenticated -------------------------------------------------------------------------------
mark=$(kmsg_mark)
out=$(auth_connect --dhchap-secret="$KEY" --reconnect-delay=1)
[ -z "$out" ] || ktap_diag "$out"
c='' dev=''
if wait_for 30 nvme_dev_for_nqn "$NQN_AUTH"; then
	c=$(ctrl_for "$NQN_AUTH") c=${c##*/} dev=$(nvme_dev_for_nqn "$NQN_AUTH")
fi
n=$(authenticated "$mark")
ktap_diag "controller ${c:-none}, admin queue authentications logged: $n"
if [ -n "$dev" ] && ((n == 1)) && fio_verify "$dev" --size=4m; then
	ktap_test_pass "host secret: authenticated (SHA-256, ffdhe2048), verified I/O"
else
	ktap_test_fail "host secret: authenticated (SHA-256, ffdhe2048), verified I/O"
fi

# again_after NAME CMD...: CMD takes the controller's connection down; it must come back live,
# authenticated once more, and move verified data.
again_after() {
	local name=$1 mark n
	shift
	mark=$(kmsg_mark)
	if [ -z "$c" ] || ! "$@"; then
		ktap_diag "$name: no controller, or '$*' failed"
		ktap_test_fail "$name"
		return
	fi
	if wait_for "$RECOVERY_TIMEOUT" in_state "$c" live; then
		n=$(authenticated "$mark")
		ktap_diag "$name: live, admin queue authentications logged: $n"
		((n >= 1)) && fio_verify "$dev" --size=4m && ktap_test_pass "$name" && return
	else
		ktap_diag "$name: state $(ctrl_state "$c")"
	fi
	ktap_test_fail "$name"
}
# nvme reset reports failure (ENETRESET) when the reset's own reconnect failed and one is
# scheduled; the controller then comes back through the reconnect path, which this test also
# requires to authenticate. Seen once here: an I/O queue's authentication command found no
# reserved tag free (-EAGAIN), not reproduced in 88 resets with either transport.
reset_ctrl() {
	local out
	out=$(timeout 60 nvme reset "/dev/$c" 2>&1) && return 0
	ktap_diag "nvme reset: $out; $(dmesg_after "$mark" | grep -m1 -E 'failed to connect queue|reconnect failed')"
	[ -n "$(ctrl_for "$NQN_AUTH")" ]
}
port_cycle() {
	target_port_disable && wait_for 30 not_live "$c" &&
		target_port_enable 1 "$NQN_AUTH" "$NQN_NULL" "$NQN_FILE" "$NQN_NULL2"
}
again_after "nvme reset: authenticated again, verified I/O" reset_ctrl
again_after "target port lost and back: reconnect authenticated again, verified I/O" port_cycle
timeout 60 nvme disconnect -n "$NQN_AUTH" >/dev/null
wait_for 30 no_ctrl

# --- bidirectional -------------------------------------------------------------------------------
mark=$(kmsg_mark)
out=$(auth_connect --dhchap-secret="$KEY" --dhchap-ctrl-secret="$CKEY")
[ -z "$out" ] || ktap_diag "$out"
line=$(dmesg_after "$mark" | grep -m1 'qid 0: controller authenticated')
ktap_diag "${line:-no controller authentication logged}"
authenticated() { wait_for 30 nvme_dev_for_nqn "$NQN_AUTH" && test -n "$line"; }
ktap_check "controller secret: the controller authenticates itself" authenticated
timeout 60 nvme disconnect -n "$NQN_AUTH" >/dev/null
wait_for 30 no_ctrl
refused "wrong controller secret: refused, no controller" "rejected" \
	--dhchap-secret="$KEY" --dhchap-ctrl-secret="$BAD"

after=$(rdma_counts)
ktap_diag "RDMA resources after: $(tr '\n' ' ' <<<"$after")"
ktap_check "no RDMA resources left" test "$after" = "$baseline"
ktap_check "kernel log clean" dmesg_check_clean
ktap_finished
