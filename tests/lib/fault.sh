# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash
#
# The guest tests' helpers: the kernel's fault injection (failslab, fail_page_alloc) aimed at
# nvme_rsrdma's allocations, for the tests of what an allocation failure does.
# Sourced by tests/lib/common.sh, not run.

# fi_on ATTR PROBABILITY [MIN_ORDER]: ATTR (failslab, fail_page_alloc) fails PROBABILITY % of the
# allocations that have nvme_rsrdma's text on their stack, sleeping or not (of order MIN_ORDER
# or more for pages). Counts what it injects from FI_TIMES down. fi_on and fi_off mark the time
# in between in the kernel log (FI_MARK_ON, FI_MARK_OFF): the kernel's reports of allocations
# failed then (a vmalloc without __GFP_NOWARN in soft-RoCE's queue set-up, for one) are the
# injection's, not problems (dmesg_clean_after).
# Not failed: the allocations of the RDMA CM's port space (cma_alloc_port, the text up to the
# next symbol of rdma_cm), where a CM id takes its port when its address is resolved. Its
# xa_insert, when a node allocation fails after it linked the nodes it got before, leaves those
# empty nodes in the port space's XArray (xas_create does not undo them): the port space is then
# never empty again and rdma_cm's unload warns (cma_exit_net) that ports are left, as it would
# for a CM id never destroyed. That warning is kept for what it is meant for.
FI=/sys/kernel/debug
FI_TIMES=1000000
fi_available() { [ -e "$FI/failslab/require-start" ] && [ -e "$FI/fail_page_alloc/min-order" ]; }
cma_port_alloc_text() {
	awk '$4 == "[rdma_cm]" && $2 ~ /^[tT]$/ { print $1, $3 }' /proc/kallsyms | sort |
		awk 'lo { print lo, $1; exit } $2 == "cma_alloc_port" { lo = $1 }'
}
fi_on() {
	local a=$FI/$1 lo hi rlo rhi
	read -r lo hi < <(tail -n1 "$RSRDMA_TEXT_RANGES")
	read -r rlo rhi < <(cma_port_alloc_text)
	[ -n "$rhi" ] || { echo "rdma_cm's cma_alloc_port not found in /proc/kallsyms"; return 1; }
	_w 0 "$a/probability" && _w "0x$lo" "$a/require-start" && _w "0x$hi" "$a/require-end" &&
		_w "0x$rlo" "$a/reject-start" && _w "0x$rhi" "$a/reject-end" &&
		_w 32 "$a/stacktrace-depth" && _w N "$a/ignore-gfp-wait" && _w 1 "$a/verbose" &&
		_w 1 "$a/interval" && _w "$FI_TIMES" "$a/times" || return 1
	[ "$1" = fail_page_alloc ] && { _w "${3:-0}" "$a/min-order" || return 1; }
	echo "$FI_MARK_ON ($1 $2 %)" >/dev/kmsg
	_w "$2" "$a/probability"
}
fi_off() {
	local a
	for a in failslab fail_page_alloc; do
		[ -w "$FI/$a/probability" ] && echo 0 >"$FI/$a/probability"
	done
	echo "$FI_MARK_OFF" >/dev/kmsg
	return 0
}
fi_injected() { echo $((FI_TIMES - $(cat "$FI/$1/times"))); }
