#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# rsrdma-timeout: 600
#
# The module as an administrator installs it. On the host, tests/run.sh ran
# `make install INSTALL_MOD_PATH=$RSRDMA_OUT/stage` before the guest booted; here:
#   - the staged tree: the module under lib/modules/<release>/updates, depmod's index with it
#     and its nvme-rsrdma alias;
#   - modinfo of the staged module: description, license, alias, its parameters; the udev rule
#     staged beside it;
#   - the staged module installed into the guest's module directory and depmod run there, as
#     `make install` does on a real system: its dependencies resolved, `modprobe nvme_rsrdma`
#     with parameters, and autoloading: `nvme connect -t rsrdma` with the module not loaded
#     loads it through the fabrics core's request_module("nvme-rsrdma") and connects;
#   - drop-in autoloading as the admin guide configures it (a modprobe.d alias of nvme-rdma to
#     nvme_rsrdma with dropin=1): `nvme connect -t rdma` loads nvme_rsrdma, not the C nvme-rdma.
#
# The guest's /lib/modules/<release> is a symlink into the read-only kernel build tree, but
# /lib/modules itself is writable: the test puts a module directory of its own in its place
# (the kernel's modules symlinked, the index files copied) and restores the symlink at the end.
# /etc is a writable overlay of the host's, discarded with the guest.
#
# Skipped when there is no staged tree (the guest suite run without tests/run.sh, or make
# install failed, which tests/run.sh counts as a failure of its own).
set -u
. "$(dirname "$0")/lib/common.sh"

KVER=$(uname -r)
MODDIR=/lib/modules/$KVER
STAGE=$RSRDMA_OUT/stage
STAGED=$STAGE/lib/modules/$KVER/updates/nvme_rsrdma.ko
SAVED=/lib/modules/.rsrdma-07-saved-$KVER
DROPIN_CONF=/etc/modprobe.d/rsrdma-07-dropin.conf

restore_moddir() {
	[ -e "$SAVED" ] || [ -L "$SAVED" ] || return 0
	rm -rf "$MODDIR" && mv "$SAVED" "$MODDIR"
}

cleanup() {
	rm -f "$DROPIN_CONF"
	host_disconnect_all >/dev/null 2>&1
	rsrdma_unload >/dev/null 2>&1
	restore_moddir
	target_teardown >/dev/null 2>&1
	fabric_teardown >/dev/null 2>&1
}
trap cleanup EXIT
trap 'exit 143' TERM INT

ktap_print_header
if [ ! -f "$STAGED" ]; then
	ktap_set_plan 1
	ktap_diag "install: no staged module at $STAGED (make install runs in tests/run.sh)"
	ktap_test_skip "install"
	ktap_finished
fi
ktap_set_plan 15

rsrdma_unload
module_unload nvme_rdma
dmesg_mark

# --- the staged tree --------------------------------------------------------------------------
ktap_diag "staged: $(cd "$STAGE" && find . -type f | sort | tr '\n' ' ')"
sdep=$(grep '^updates/nvme_rsrdma.ko:' "$STAGE/lib/modules/$KVER/modules.dep" 2>&1)
salias=$(grep -x 'alias nvme-rsrdma nvme_rsrdma' "$STAGE/lib/modules/$KVER/modules.alias" 2>&1)
ktap_diag "modules.dep: ${sdep:-none}; modules.alias: ${salias:-none}"
ktap_check "make install staged updates/nvme_rsrdma.ko with depmod's index and alias" \
	test -n "$sdep" -a -n "$salias"
if cmp -s "$STAGED" "$RSRDMA_KO"; then
	ktap_diag "the staged module is the build's nvme_rsrdma.ko"
else
	ktap_diag "the staged module differs from $RSRDMA_KO (rebuilt since make install?)"
fi

# --- modinfo ----------------------------------------------------------------------------------
# Looked up by name in the staging root, through the index depmod wrote there.
info=$(modinfo -b "$STAGE" -k "$KVER" nvme_rsrdma 2>&1)
ktap_diag "$(grep -vE '^(srcversion|sig|retpoline|intree|vermagic):' <<<"$info")"
field() { sed -n "s/^$1: *//p" <<<"$info"; }
desc_license() {
	grep -q '^NVMe over RDMA host transport' <<<"$(field description)" && [ "$(field license)" = GPL ]
}
ktap_check "modinfo by name finds the staged module" test "$(field filename)" -ef "$STAGED"
ktap_check "modinfo: description and license" desc_license
ktap_check "modinfo: alias nvme-rsrdma" test "$(field alias)" = nvme-rsrdma
params=$(field parm | cut -d: -f1 | sort | tr '\n' ' ')
ktap_check "modinfo: parameters area_mib, dropin, io_pool_mib, min_io_queues, slot_kib, spread_kib" \
	test "$params" = "area_mib dropin io_pool_mib min_io_queues slot_kib spread_kib "
# The udev rule that raises max_sectors_kb (11-area tests what it does).
ktap_check "make install staged the udev rule (lib/udev/rules.d/60-nvme-rsrdma.rules)" \
	cmp "$STAGE/lib/udev/rules.d/60-nvme-rsrdma.rules" "$RSRDMA_REPO/scripts/udev/60-nvme-rsrdma.rules"

# --- installed into the guest's module directory ---------------------------------------------
install_moddir() {
	local orig new=/lib/modules/.rsrdma-07-new-$KVER f
	orig=$(readlink -f "$MODDIR") || return 1
	rm -rf "$new"
	mkdir -p "$new/updates" || return 1
	cp -rs "$orig/kernel" "$new/kernel" || return 1
	for f in modules.order modules.builtin modules.builtin.modinfo; do
		[ -e "$orig/$f" ] && { cp -L "$orig/$f" "$new/$f" || return 1; }
	done
	cp "$STAGED" "$new/updates/" || return 1
	mv "$MODDIR" "$SAVED" && mv "$new" "$MODDIR" || return 1
	depmod -a "$KVER"
}
deps=
if run_diag install_moddir; then
	deps=$(sed -n 's|^updates/nvme_rsrdma.ko: *||p' "$MODDIR/modules.dep")
fi
ktap_diag "depends: ${deps:-none}"
ok=1
for m in nvme-fabrics nvme-core rdma_cm ib_core; do
	grep -q "/$m.ko" <<<"$deps" || ok=0
done
if ((ok)); then
	ktap_test_pass "installed with depmod: dependencies resolved (nvme-fabrics, nvme-core, rdma_cm, ib_core)"
else
	ktap_test_fail "installed with depmod: dependencies resolved (nvme-fabrics, nvme-core, rdma_cm, ib_core)"
fi

# modprobe by name, with parameters, pulls in its dependencies; modprobe -r takes it out again.
modprobe_params() {
	modprobe nvme_rsrdma slot_kib=32 io_pool_mib=12 || return 1
	local p=/sys/module/nvme_rsrdma/parameters
	echo "slot_kib=$(cat $p/slot_kib) io_pool_mib=$(cat $p/io_pool_mib) dropin=$(cat $p/dropin)"
	[ "$(cat $p/slot_kib)" = 32 ] && [ "$(cat $p/io_pool_mib)" = 12 ] && [ "$(cat $p/dropin)" = N ] &&
		_module_loaded nvme_fabrics && modprobe -r nvme_rsrdma && ! _module_loaded nvme_rsrdma
}
ktap_check "modprobe nvme_rsrdma with parameters, modprobe -r" modprobe_params

# --- autoload through the nvme-rsrdma alias ----------------------------------------------------
# autoload_connect TRANSPORT: nvme connect with nvme_rsrdma not loaded; it must be loaded
# (and the C nvme_rdma not), the controller live on TRANSPORT with its namespace.
autoload_connect() {
	local transport=$1 c out rc=0
	if _module_loaded nvme_rsrdma || _module_loaded nvme_rdma; then
		echo "a host transport module is loaded before the connect"
		return 1
	fi
	# The fabrics core requests "nvme-<transport>" through the kernel's modprobe helper.
	echo "kernel modprobe helper: $(cat /proc/sys/kernel/modprobe)"
	# nvme-cli talks to /dev/nvme-fabrics, which nvme-fabrics provides (the admin guide's step).
	modprobe nvme-fabrics || return 1
	out=$(timeout 60 nvme connect -t "$transport" -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN_NULL" 2>&1) ||
		rc=$?
	echo "nvme connect -t $transport: status $rc ${out}"
	lsmod | grep -E '^nvme_r' || true
	((rc == 0)) || return 1
	_module_loaded nvme_rsrdma || { echo "nvme_rsrdma was not loaded"; return 1; }
	! _module_loaded nvme_rdma || { echo "the C nvme_rdma was loaded"; return 1; }
	wait_for 30 nvme_dev_for_nqn "$NQN_NULL" || { echo "no namespace"; return 1; }
	c=$(ctrl_for "$NQN_NULL") || return 1
	echo "${c##*/}: transport=$(cat "$c/transport") state=$(cat "$c/state") $(nvme_dev_for_nqn "$NQN_NULL")"
	[ "$(cat "$c/transport")" = "$transport" ] && [ "$(cat "$c/state")" = live ]
}

# disconnect_unload: nvme disconnect, the controller gone, modprobe -r nvme_rsrdma.
disconnect_unload() {
	timeout 60 nvme disconnect -n "$NQN_NULL" || return 1
	wait_for 30 _no_fabrics_ctrl || { echo "controller still present"; return 1; }
	modprobe -r nvme_rsrdma && ! _module_loaded nvme_rsrdma
}

# pool_param_clamped: a large area above what its allocator spans is clamped, not a reason to
# refuse every connect; 4 MiB commands (the transport's largest) then use it.
pool_param_clamped() {
	local dev
	modprobe nvme_rsrdma io_pool_mib=64 || return 1
	echo "io_pool_mib=$(cat /sys/module/nvme_rsrdma/parameters/io_pool_mib)"
	timeout 60 nvme connect -t rsrdma -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN_NULL" || return 1
	wait_for 30 nvme_dev_for_nqn "$NQN_NULL" || { echo "no namespace"; return 1; }
	dev=$(nvme_dev_for_nqn "$NQN_NULL")
	fio_verify "$dev" --bs=4m --iodepth=4 || return 1
	disconnect_unload
}

if fabric_setup && target_setup; then
	ktap_check "nvme connect -t rsrdma autoloads nvme_rsrdma (alias nvme-rsrdma) and connects" \
		autoload_connect rsrdma
	ktap_check "disconnect, modprobe -r" disconnect_unload

	# Drop-in mode, configured as the admin guide says.
	printf '%s\n' "alias nvme-rdma nvme_rsrdma" "options nvme_rsrdma dropin=1" >"$DROPIN_CONF"
	ktap_diag "$DROPIN_CONF: $(tr '\n' ';' <"$DROPIN_CONF"); modprobe -n -v nvme-rdma: $(modprobe -n -v nvme-rdma 2>&1)"
	ktap_check "drop-in: nvme connect -t rdma autoloads nvme_rsrdma with dropin=1, not nvme_rdma" \
		autoload_connect rdma
	dropin=$(cat /sys/module/nvme_rsrdma/parameters/dropin 2>/dev/null)
	ktap_diag "dropin=${dropin:-not loaded}"
	ktap_check "drop-in: disconnect, modprobe -r" disconnect_unload
	rm -f "$DROPIN_CONF"
	ktap_check "io_pool_mib=64 is clamped to the 16 MiB the large area spans: connect, 4 MiB I/O" \
		pool_param_clamped
else
	for n in "autoload" "disconnect" "drop-in autoload" "drop-in disconnect" "io_pool_mib=64"; do
		ktap_diag "$n: soft-RoCE or the nvmet-rdma target did not come up"
		ktap_test_fail "$n"
	done
fi

host_disconnect_all
module_unload nvme_rsrdma
target_teardown
fabric_teardown
restore_moddir
ktap_check "module directory restored" test -L "$MODDIR"
ktap_check "kernel log clean" dmesg_check_clean
ktap_finished
