# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash
#
# The guest tests' helpers: the kernel log and kmemleak checks.
# Sourced by tests/lib/common.sh, not run.

# dmesg_mark writes a unique marker into the kernel log; dmesg_since_mark prints what came after
# it (all of dmesg if the marker was lost). dmesg_check_clean fails, printing the offending part
# of the log as diagnostics, if anything after the mark looks like a kernel problem report
# (DMESG_BAD: WARN/BUG/Oops, KASAN, UBSAN, lockdep, debugobjects, RCU stalls, hung tasks, Rust
# panics; dmesg_clean_after checks the same after a kmsg_mark), or if kmemleak_check finds a
# leak of ours. The mark clears kmemleak's earlier reports.
# kernel_check is what the suite checks after every test (suite_supervise in tests/lib/suite.sh).

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

# log_has MARK TEXT: the kernel log after MARK holds TEXT (for wait_for).
log_has() { dmesg_after "$1" | grep -qF -- "$2"; }

# dmesg_mark: the test's mark, which dmesg_since_mark and dmesg_check_clean read from.
dmesg_mark() {
	_kmemleak clear || true
	_dmesg_mark=$(kmsg_mark)
}

dmesg_since_mark() {
	dmesg_after "$_dmesg_mark"
}

# Lines that fi_on and fi_off (fault.sh) write to the kernel log around the fault injection they
# turn on: the kernel's allocation failure reports between them are those of failures the test
# injected (_known_reports).
FI_MARK_ON="rsrdma-fault-injection: on"
FI_MARK_OFF="rsrdma-fault-injection: off"

# _known_reports: the kernel log on stdin, each line prefixed with what it is part of (as
# kmemleak_check splits leaks): "U " a lockdep report that this project knows comes from upstream
# code, not nvme_rsrdma; "F " an allocation failure report (warn_alloc: "page allocation
# failure", "vmalloc error") logged while a test injected allocation failures; "L " anything
# else, checked. Known upstream: the circular dependency nvmet-rdma's target reports between
# nvmet_config_sem and the RDMA CM's handler_mutex (a port's removal destroys its listening CM id
# under the semaphore; a Fabrics Connect that arrived before the target's ESTABLISHED event is
# executed from the connection's CM handler and takes the semaphore). The two mutexes are
# different ids' of one lock class; any host can trigger it: its Connect overtaking the CM's RTU
# is a matter of timing. An injected failure deep in an allocation the module asked for (the
# vm_struct of soft-RoCE's vmalloc'ed queues, for one) ends in the kernel's own report with a
# stack dump unless the allocation said __GFP_NOWARN: the failure is the test's, the report the
# kernel's way of saying so. Its trace must pass through warn_alloc.
_known_reports() {
	awk -v on="$FI_MARK_ON" -v off="$FI_MARK_OFF" '
		function flush(   i, k) {
			k = "L "
			if (rep == "lockdep" && sem && mutex && !mine) k = "U "
			if (rep == "alloc" && warn) k = "F "
			for (i = 1; i <= n; i++) print k line[i]
			n = 0; sem = 0; mutex = 0; mine = 0; warn = 0; rep = ""
		}
		index($0, on) { fi = 1 }
		index($0, off) { fi = 0 }
		/WARNING: possible circular locking dependency detected/ { flush(); rep = "lockdep" }
		fi && /: (page allocation failure|vmalloc error): / { flush(); rep = "alloc" }
		{ line[++n] = $0 }
		/nvmet_config_sem/ { sem = 1 }
		/handler_mutex/ { mutex = 1 }
		/nvme_rsrdma/ { mine = 1 }
		/ warn_alloc\+/ { warn = 1 }
		rep == "" || /<\/TASK>/ { flush() }
		END { flush() }'
}

dmesg_check_clean() {
	local rc=0
	kmemleak_check || rc=1
	dmesg_clean_after "$_dmesg_mark" || rc=1
	return $rc
}

# dmesg_clean_after MARK: fails, printing the offending part of the log as diagnostics, if
# anything in the kernel log after MARK looks like a kernel problem report (DMESG_BAD), apart
# from the reports _known_reports knows (the upstream lockdep report, allocation failure reports
# of injected failures), which are shown and not counted.
LOCKDEP_UPSTREAM_NOTE="lockdep report from the target's upstream code"
dmesg_clean_after() {
	local log known injected
	log=$(dmesg_after "$1" | _known_reports)
	known=$(sed -n 's/^U //p' <<<"$log")
	injected=$(sed -n 's/^F //p' <<<"$log")
	log=$(sed -n 's/^L //p' <<<"$log")
	if [ -n "$known" ]; then
		ktap_diag "$LOCKDEP_UPSTREAM_NOTE (nvmet-rdma, rdma_cm), not nvme_rsrdma's (not counted; lockdep is off for the rest of this boot):"
		grep -E 'WARNING:|is trying to acquire|already holding|^[^#]*-> #|\(.*\)\{' <<<"$known" |
			head -n 12 | ktap_diag
	fi
	if [ -n "$injected" ]; then
		ktap_diag "the kernel's reports of allocations failed by the test's fault injection (not counted):"
		grep -E ': (page allocation failure|vmalloc error): ' <<<"$injected" | ktap_diag
	fi
	if grep -qE "$DMESG_BAD" <<<"$log"; then
		ktap_diag "kernel log since the mark has problems:"
		# From 5 lines before the first problem, at most 150 lines.
		awk -v re="$DMESG_BAD" '{ l[NR] = $0 } $0 ~ re && !f { f = NR }
			END { if (f) for (i = (f > 5 ? f - 5 : 1); i <= NR && i < f + 145; i++) print l[i] }' \
			<<<"$log" | ktap_diag
		return 1
	fi
}

# lockdep_state: on a kernel with lockdep, 1 while it checks and 0 once it turned itself off
# (debug_locks, which its first report clears for the rest of the boot); empty without lockdep.
lockdep_state() {
	awk '$1 == "debug_locks:" { print $2 }' /proc/lockdep_stats 2>/dev/null
}

# kernel_check: the suite's check after each test and its clean-up, dmesg_check_clean on
# kmemleak kernels after a wait, so that what the test freed or leaked last is old enough to be
# reported (kmemleak skips objects younger than 5 s).
kernel_check() {
	kmemleak_available && sleep 5
	dmesg_check_clean
}
