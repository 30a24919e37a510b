#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# rsrdma-timeout: 400
#
# The module itself: metadata, load/unload cycles with a clean kernel log, and registration
# with the fabrics core, seen through its transport lookup: a connect string written to
# /dev/nvme-fabrics for an unregistered transport fails with EINVAL after the core logs
# "no handler found for transport X"; for a registered one it gets past the lookup (whatever
# error follows, it is not that one). Module autoloading is off during these probes so that
# "transport=rdma" cannot pull in the C nvme-rdma. No RDMA device or target is needed.
set -u
. "$(dirname "$0")/lib/common.sh"

CYCLES=20
CONNECT="traddr=$TARGET_ADDR,trsvcid=$TARGET_PORT,nqn=nqn.x"

cleanup() {
	host_disconnect_all >/dev/null 2>&1
	rsrdma_unload >/dev/null 2>&1
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# lookup_case NAME TRANSPORT EXPECT: EXPECT is "unknown" or "registered".
lookup_case() {
	local name=$1 transport=$2 expect=$3 out result log
	out=$(fabrics_probe "transport=$transport,$CONNECT")
	result=$(head -n1 <<<"$out")
	log=$(tail -n1 <<<"$out")
	ktap_diag "transport=$transport: write: $result; fabrics core: $log"
	case "$expect" in
	unknown)
		if [ "$result" = "error Invalid argument" ] && [ "$log" = no-handler ]; then
			ktap_test_pass "$name"
		else
			ktap_diag "$name: expected EINVAL and \"no handler found for transport $transport\""
			ktap_test_fail "$name"
		fi
		;;
	registered)
		if [ "$log" = handler ] && [ "$result" != "error Invalid argument" ]; then
			ktap_test_pass "$name"
		else
			ktap_diag "$name: expected the lookup of \"$transport\" to succeed"
			ktap_test_fail "$name"
		fi
		;;
	esac
}

ktap_print_header
ktap_set_plan 15

modprobe -a nvme-fabrics rdma_cm || ktap_diag "modprobe nvme-fabrics rdma_cm failed"
rsrdma_unload
module_unload nvme_rdma
dmesg_mark

# --- metadata ---
info=$(modinfo "$RSRDMA_KO" 2>&1)
ktap_diag "$(grep -E '^(alias|depends|vermagic|parm):' <<<"$info")"
if grep -qE '^alias: +nvme-rsrdma$' <<<"$info"; then
	ktap_test_pass "modinfo_alias_nvme_rsrdma"
else
	ktap_diag "modinfo_alias_nvme_rsrdma: no 'alias: nvme-rsrdma' in modinfo"
	ktap_test_fail "modinfo_alias_nvme_rsrdma"
fi

# --- before loading: rsrdma is unknown ---
lookup_case "rsrdma_unknown_before_load" rsrdma unknown

# --- load: registered, parameters ---
if rsrdma_load; then
	ktap_test_pass "load"
else
	ktap_diag "load: insmod $RSRDMA_KO failed"
	ktap_test_fail "load"
fi
lookup_case "rsrdma_registered_when_loaded" rsrdma registered

# Every parameter in sysfs is described by modinfo, and "dropin" (used below) is among them.
params_ok=1
sysfs_params=$(ls /sys/module/nvme_rsrdma/parameters 2>/dev/null)
ktap_diag "parameters in sysfs: $(paste -s -d ' ' <<<"$sysfs_params")"
for p in $sysfs_params; do
	grep -qE "^parm: +$p:" <<<"$info" || { ktap_diag "parameter $p has no modinfo description"; params_ok=0; }
done
grep -qE '^parm: +dropin:' <<<"$info" || { ktap_diag "modinfo lists no dropin parameter"; params_ok=0; }
[ -n "$sysfs_params" ] || params_ok=0
if ((params_ok)); then
	ktap_test_pass "modinfo_parameters"
else
	ktap_test_fail "modinfo_parameters"
fi
lookup_case "rdma_unknown_without_dropin" rdma unknown

# --- unload: unknown again ---
if rsrdma_unload; then
	ktap_test_pass "unload"
else
	ktap_diag "unload: rmmod nvme_rsrdma failed"
	ktap_test_fail "unload"
fi
lookup_case "rsrdma_unknown_after_unload" rsrdma unknown

# --- load/unload cycles ---
failed_at=
for ((i = 1; i <= CYCLES; i++)); do
	if ! rsrdma_load; then
		failed_at="load $i"
		break
	fi
	if ! rsrdma_unload; then
		failed_at="unload $i"
		break
	fi
done
if [ -z "$failed_at" ]; then
	ktap_test_pass "load_unload_${CYCLES}_times"
else
	ktap_diag "load_unload_${CYCLES}_times: failed at $failed_at"
	ktap_test_fail "load_unload_${CYCLES}_times"
fi

# --- dropin=1: registers "rdma" instead of "rsrdma" ---
if _module_loaded nvme_rdma; then
	ktap_diag "dropin_load: the C nvme_rdma is loaded"
	ktap_test_fail "dropin_load"
elif rsrdma_load dropin=1; then
	ktap_diag "dropin=$(cat /sys/module/nvme_rsrdma/parameters/dropin)"
	ktap_test_pass "dropin_load"
else
	ktap_diag "dropin_load: insmod $RSRDMA_KO dropin=1 failed"
	ktap_test_fail "dropin_load"
fi
lookup_case "dropin_rdma_registered" rdma registered
lookup_case "dropin_rsrdma_unknown" rsrdma unknown
if _module_loaded nvme_rdma; then
	ktap_diag "the C nvme_rdma got loaded during the dropin checks"
fi
if rsrdma_unload && ! _module_loaded nvme_rdma; then
	ktap_test_pass "dropin_unload"
else
	ktap_test_fail "dropin_unload"
fi

# --- dropin=1 with the C nvme-rdma loaded: refused, not silently shadowing it ---
modprobe nvme-rdma
mark="rsrdma-dropin-$RANDOM"
echo "$mark" >/dev/kmsg
out=$(insmod "$RSRDMA_KO" dropin=1 2>&1)
rc=$?
line=$(dmesg | sed -n "/$mark/,\$p" | grep -m1 'dropin=1: the C nvme_rdma transport is loaded')
ktap_diag "insmod dropin=1 with nvme_rdma loaded: status $rc: $out; ${line:-no log line}"
if ((rc != 0)) && [ -n "$line" ] && ! _module_loaded nvme_rsrdma; then
	ktap_test_pass "dropin_refused_with_c_rdma_loaded"
else
	ktap_test_fail "dropin_refused_with_c_rdma_loaded"
	rsrdma_unload
fi
module_unload nvme_rdma

# --- the kernel log ---
ktap_diag "module log lines:"
dmesg_since_mark | grep -E 'nvme_rsrdma|nvme_fabrics' | tail -n 12 | ktap_diag
if dmesg_check_clean; then
	ktap_test_pass "dmesg_clean"
else
	ktap_test_fail "dmesg_clean"
fi

ktap_finished
