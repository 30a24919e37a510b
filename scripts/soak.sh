#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make soak`: the link-loss test (tests/05-link-loss.sh) at soak counts, in one guest boot:
# 100 netdev flaps, 10 RDMA device removals, 10 target port removals and 10 nvmet-rdma reloads
# (RSRDMA_FLAPS, RSRDMA_REMOVALS, RSRDMA_PORT_CYCLES, RSRDMA_RELOADS override them), each under
# verified I/O, each series' whole region read back at its end. Then a table: outages per kind
# with the time from the link's return to the first completed read (median, maximum), the
# blocks written and verified, and the failed cases. Not part of make test (it takes about
# 20 minutes). Logs in out/soak-<time>/. Exit status 0 only if every case passed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

[ -f "$repo/nvme_rsrdma.ko" ] || die "nvme_rsrdma.ko is not built: run make (or make soak)"
flaps=${RSRDMA_FLAPS:-100} removals=${RSRDMA_REMOVALS:-10}
ports=${RSRDMA_PORT_CYCLES:-10} reloads=${RSRDMA_RELOADS:-10}
out=$repo/out/soak-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
start=$(date +%s)
rc=0
log "soak: $flaps flaps, $removals device removals, $ports port removals, $reloads nvmet-rdma reloads"
"$here/vm.sh" -t 3600 -o "$out/vm" -- env RSRDMA_FLAPS="$flaps" RSRDMA_REMOVALS="$removals" \
	RSRDMA_PORT_CYCLES="$ports" RSRDMA_RELOADS="$reloads" RSRDMA_TIMEOUT_SCALE=3 \
	tests/05-link-loss.sh >"$out/05-link-loss.log" 2>&1 || rc=$?
secs=$(($(date +%s) - start))

# The table, from the test's KTAP output.
awk -v secs="$secs" '
	/recoveries, link back to first I\/O/ {
		sub(/^# */, ""); sub(/^# */, "")
		kind = $0; sub(/:.*/, "", kind)
		n = $0; sub(/^[^:]*: /, "", n); sub(/ .*/, "", n)
		med = $0; sub(/.*median /, "", med); sub(/ ms.*/, "", med)
		max = $0; sub(/.*max /, "", max); sub(/ ms.*/, "", max)
		rows[++nr] = sprintf("   %-22s %8d %12d %10d", kind, n, med, max)
	}
	/verified (while running|by the final pass)$/ {
		match($0, /: [0-9]+ blocks/); w += substr($0, RSTART + 2, RLENGTH - 9)
		match($0, /written, [0-9]+ /); v += substr($0, RSTART + 9, RLENGTH - 10)
	}
	/the whole region read back and verified/ { match($0, /verified: [0-9]+/); rb += substr($0, RSTART + 10, RLENGTH - 10); series++ }
	/^ok / { pass++ }
	/^not ok / { fail++; failed[fail] = $0 }
	END {
		print "   outages                   count   median (ms)   max (ms)"
		for (i = 1; i <= nr; i++) print rows[i]
		printf "   blocks written %d, read back and verified %d (while running, or in a final pass); %d series read back whole at their end: %d blocks\n", w, v, series, rb
		printf "   cases: %d passed, %d failed; %d s\n", pass, fail, secs
		for (i = 1; i <= fail; i++) print "   " failed[i]
	}' "$out/05-link-loss.log" | tee "$out/table.txt"
grep -q '^not ok ' "$out/05-link-loss.log" && rc=1
grep -q '^ok ' "$out/05-link-loss.log" || rc=1
log "make soak: $( ((rc)) && echo "FAILED (status $rc)" || echo "passed") in $secs s; logs in ${out#"$repo"/}"
exit $rc
