# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash
# Shared settings for the scripts. Sourced, not run.
# shellcheck disable=SC2034 # the settings are for the scripts that source this file

BINDGEN_VERSION=0.69.5
VIRTME_NG_VERSION=1.42
FSX_VERSION=0.3.2
# The kernel's Rust needs the distribution rustc that ships its core sources, not rustup's.
export RUSTC=${RUSTC:-/usr/bin/rustc}
export PATH="$HOME/.cargo/bin:$PATH"

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${RSRDMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nvme-rsrdma}

log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "error: $*"; exit 1; }
sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
