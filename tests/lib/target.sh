# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash
#
# The guest tests' helpers: the nvmet-rdma target over configfs, on IPv4 and IPv6.
# Sourced by tests/lib/common.sh, not run.

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
	_fabric_active || fabric_setup || return 1
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
			{ ktap_diag "cannot export $nqn on port 1 (is $RDMA_LINK up?)"; return 1; }
	done
}

# target_export_null NQN NAME SIZE_MIB BLOCKSIZE: one more subsystem on port 1, NQN, with a
# memory-backed null_blk NAME as its namespace (target_teardown removes both).
target_export_null() {
	_nullb_create "$2" "$3" "$4" && _subsys_create "$1" "/dev/$2" || return 1
	[ -e "$NVMET_CFS/ports/1/subsystems/$1" ] ||
		ln -s "$NVMET_CFS/subsystems/$1" "$NVMET_CFS/ports/1/subsystems/$1" ||
		{ ktap_diag "cannot export $1 on port 1"; return 1; }
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

# target_ipv6_setup (after target_setup): a unique-local ($TARGET_ADDR6) and a link-local
# ($TARGET_LL6) address on $RDMA_NETDEV, each with its RoCE v2 GID in rxe's table (iWARP has
# none: its CM resolves IP addresses), and nvmet
# ports 2 and 3 exporting $NQN_NULL on them at $TARGET_PORT. target_ipv6_teardown removes the
# ports and the addresses (target_teardown removes the ports too).

_fabric_has_gid() { # ADDRESS
	local full
	[ "$RDMA_TYPE" != siw ] || return 0
	full=$(python3 -c 'import ipaddress, sys; print(ipaddress.ip_address(sys.argv[1]).exploded)' "$1")
	grep -qx "$full" /sys/class/infiniband/"$RDMA_LINK"/ports/1/gids/* 2>/dev/null
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
		ip -6 addr show dev "$RDMA_NETDEV" | grep -q "inet6 $a " && continue
		# No duplicate address detection: the address is usable at once.
		ip -6 addr add "$a" dev "$RDMA_NETDEV" nodad ||
			{ ktap_diag "cannot add $a to $RDMA_NETDEV"; return 1; }
	done
	for a in "$TARGET_ADDR6" "$TARGET_LL6"; do
		wait_for 10 _fabric_has_gid "$a" || { ktap_diag "no GID for $a on $RDMA_LINK"; return 1; }
	done
	_ipv6_port 2 "$TARGET_ADDR6" && _ipv6_port 3 "$TARGET_LL6%$RDMA_NETDEV"
}

target_ipv6_teardown() {
	local p a rc=0
	for p in 2 3; do
		[ -d "$NVMET_CFS/ports/$p" ] || continue
		rm -f "$NVMET_CFS/ports/$p"/subsystems/*
		rmdir "$NVMET_CFS/ports/$p" || rc=1
	done
	for a in "$TARGET_ADDR6/64" "$TARGET_LL6/64"; do
		if ip -6 addr show dev "$RDMA_NETDEV" 2>/dev/null | grep -q "inet6 $a "; then
			ip -6 addr del "$a" dev "$RDMA_NETDEV" || rc=1
		fi
	done
	return $rc
}
