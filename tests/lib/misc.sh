# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash
#
# The guest tests' helpers: waiting, sysfs writes, module unloading.
# Sourced by tests/lib/common.sh, not run.

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
