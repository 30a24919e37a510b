#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Build (or reuse) the guest kernel and print its build directory on stdout.
#
#   scripts/kernel.sh [default|debug]
#
# The tree is extracted from Debian's linux-source-6.12 and built in a cache outside the work
# tree, keyed by kernel version, flavour, config fragments and toolchain versions, so a second
# call returns at once. The "debug" flavour adds scripts/kernel-debug.config and builds with
# LLVM=1 (6.12 allows Rust with KASAN only on clang).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

flavour=${1:-${KERNEL:-default}}
fragments=("$here/kernel.config")
llvm=()
case "$flavour" in
default) ;;
debug)
	fragments+=("$here/kernel-debug.config")
	llvm=(LLVM=1)
	;;
*) die "unknown kernel flavour '$flavour' (default, debug)" ;;
esac

for f in "${fragments[@]}"; do
	# Checked here: the cache key below would hash a missing file as empty.
	[ -f "$f" ] || die "config fragment $f missing: the $flavour flavour cannot be built"
done

tarball=/usr/src/linux-source-6.12.tar.xz
[ -f "$tarball" ] || die "$tarball missing: run scripts/deps.sh"
# The series is pinned (6.12 LTS); the sublevel is whatever Debian's linux-source-6.12 ships
# now, and its security updates move it (6.12.117, then 6.12.118). The package version and the
# tarball itself are in the key, so an update builds a new tree instead of reusing the old one.
pkg=$(dpkg-query -W -f='${Version}' linux-source-6.12 2>/dev/null) || pkg=
version=${pkg%%-*}
[[ "$version" =~ ^6\.12\.[0-9]+$ ]] || version=6.12

key=$( {
	echo "$pkg $flavour ${llvm[*]}"
	stat -c '%s %Y' "$tarball"
	cat "${fragments[@]}"
	"$RUSTC" --version
	bindgen --version
	gcc --version | head -n1
	[ -z "${llvm[*]}" ] || clang --version | head -n1
} | sha256sum | cut -c1-12)
kdir=$cache/linux-$version-$flavour-$key
stamp=$kdir/.rsrdma-built

if [ -f "$stamp" ]; then
	echo "$kdir"
	exit 0
fi

mkdir -p "$cache"
# Keep the cache bounded: drop other trees of the same flavour.
for old in "$cache"/linux-*-"$flavour"-*; do
	[ -d "$old" ] && [ "$old" != "$kdir" ] && { log "removing stale kernel tree $old"; rm -rf "$old"; }
done

start=$(date +%s)
if [ ! -f "$kdir/Makefile" ]; then
	log "extracting $tarball into $kdir"
	rm -rf "$kdir.tmp"
	mkdir -p "$kdir.tmp"
	tar -xf "$tarball" -C "$kdir.tmp" --strip-components=1
	mv "$kdir.tmp" "$kdir"
fi

mk() { make -C "$kdir" -s "${llvm[@]}" RUSTC="$RUSTC" BINDGEN=bindgen "$@"; }

log "configuring $flavour kernel ($version, tinyconfig + ${fragments[*]##*/})"
mk tinyconfig >/dev/null
(cd "$kdir" && scripts/kconfig/merge_config.sh -m .config "${fragments[@]}" >/dev/null)
mk olddefconfig >/dev/null

# Every option the fragments ask for must have stuck; Kconfig drops unmet ones silently.
bad=0
while IFS= read -r line; do
	case "$line" in
	CONFIG_*=n) opt=${line%%=*}; grep -q "^$opt=" "$kdir/.config" && { log "$opt still set"; bad=1; } ;;
	CONFIG_*) grep -qx "$line" "$kdir/.config" || { log "config did not take $line"; bad=1; } ;;
	esac
done < <(cat "${fragments[@]}")
((bad == 0)) || die "kernel config is missing options (is the toolchain usable for Rust? try: make -C $kdir rustavailable)"

log "building kernel with $(nproc) jobs (about 13 minutes on 2 cores)"
mk -j"$(nproc)" >/dev/null
touch "$stamp"
log "kernel built in $(($(date +%s) - start)) s: $kdir"
echo "$kdir"
