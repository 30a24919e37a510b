# SPDX-License-Identifier: GPL-2.0
#
# nvme_rsrdma: out-of-tree build and the project's entry points.
#
#   make            build nvme_rsrdma.ko (against KDIR, or the project's cached guest kernel)
#   make run        the main job: boot the guest, bring up rxe + nvmet-rdma, load the module,
#                   connect with rsrdma, do real I/O and print the module's dmesg trace
#   make test       host unit tests + the KTAP suite in the guest; exits non-zero on failure
#   make bench      side-by-side benchmark against the C nvme-rdma
#   make rawbw      the benchmark's kernel-side raw RDMA bandwidth tool (out/rawbw)
#   make install    modules_install + depmod (INSTALL_MOD_PATH, INSTALL_MOD_DIR honoured) and
#                   the udev rule that lets 4 MiB go as one command (UDEV_RULES_DIR)
#   make docs       Documentation/*.rst to HTML in out/docs (docutils, warnings are errors)
#
# KDIR=/path/to/a/CONFIG_RUST/6.12/tree uses your own kernel tree instead of the cached one.
# KERNEL=debug selects the debug (KASAN, lockdep, kmemleak) flavour of the cached kernel.

KERNEL ?= default
RSRDMA_WERROR ?= 1
# Where `make install` puts the udev rule, below INSTALL_MOD_PATH.
UDEV_RULES_DIR ?= /lib/udev/rules.d
export KERNEL

# The kernel's Rust needs the distribution rustc with its core sources, not rustup's.
RUSTC ?= /usr/bin/rustc
ifeq ($(origin RUSTC),default)
RUSTC := /usr/bin/rustc
endif
export PATH := $(HOME)/.cargo/bin:$(PATH)

ifeq ($(KDIR),)
KDIR_CMD = scripts/kernel.sh $(KERNEL)
else
KDIR_CMD = scripts/check-kdir.sh $(KDIR)
endif

MAKE_FLAGS_debug = LLVM=1
# Extra Kbuild flags of the cached kernel's flavour (none for a KDIR tree).
KFLAGS = $(if $(KDIR),,$(MAKE_FLAGS_$(KERNEL)))

# Objects built against one kernel tree must not be linked against another tree of the same
# release: Kbuild records header dependencies relative to the tree it runs in, so it would not
# notice the switch (nor a changed .config). Each build directory keeps a stamp of its tree
# (the absolute path KDIR_CMD prints), configuration and flags; when that changes, the
# previous build is cleaned first. $(1): the M= directory. Expects $$kdir in the shell.
define kdir_guard
stamp="$$kdir $$(cksum <"$$kdir/.config" | cut -d' ' -f1) $(KFLAGS)"; \
if [ -f "$(1)/.kdir-stamp" ] && [ "$$(cat "$(1)/.kdir-stamp")" != "$$stamp" ]; then \
	echo "$(1): was built against another kernel tree or configuration: cleaning it first"; \
	$(MAKE) -C "$$kdir" M="$(1)" clean >/dev/null; \
fi; \
echo "$$stamp" >"$(1)/.kdir-stamp"
endef

.PHONY: all modules deps kernel run test test-full check bench soak rawbw p2pmem install docs clean
all: modules

deps:
	scripts/deps.sh

kernel: deps
	$(KDIR_CMD)

modules: $(if $(KDIR),,deps)
	@kdir=$$($(KDIR_CMD)) && \
	$(call kdir_guard,$(CURDIR)) && \
	$(MAKE) -C "$$kdir" M=$(CURDIR) RUSTC=$(RUSTC) BINDGEN=bindgen \
		$(KFLAGS) RSRDMA_WERROR=$(RSRDMA_WERROR) modules

check:
	cargo test -q --manifest-path tests/host/Cargo.toml

run: modules
	scripts/run.sh

test: modules
	tests/run.sh

# make test with the drop-in runs it leaves out (SUITE_FULL_ONLY in tests/lib/suite.sh).
test-full: modules
	RSRDMA_FULL=1 tests/run.sh

bench: modules rawbw p2pmem
	scripts/bench.sh

# Not part of make test: 100 link flaps and more, about 20 minutes (scripts/soak.sh).
soak: modules
	scripts/soak.sh

# Built out of the tree (scripts/rawbw stays sources only), like the module against KDIR or
# the cached kernel.
RAWBW_DIR = $(CURDIR)/out/rawbw
rawbw: $(if $(KDIR),,deps)
	@mkdir -p $(RAWBW_DIR) && cp -u scripts/rawbw/rsrdma_rawbw.c scripts/rawbw/Kbuild $(RAWBW_DIR)/ && \
	kdir=$$($(KDIR_CMD)) && \
	$(call kdir_guard,$(RAWBW_DIR)) && \
	$(MAKE) -C "$$kdir" M=$(RAWBW_DIR) W=1 $(KFLAGS) modules

# The guest's test-only provider of peer-to-peer memory (tests/p2pmem), built out of the tree
# like rawbw; 12-device-memory and the benchmark's device-memory rows use it.
P2PMEM_DIR = $(CURDIR)/out/p2pmem
p2pmem: $(if $(KDIR),,deps)
	@mkdir -p $(P2PMEM_DIR) && cp -u tests/p2pmem/rsrdma_p2pmem.c tests/p2pmem/Kbuild $(P2PMEM_DIR)/ && \
	kdir=$$($(KDIR_CMD)) && \
	$(call kdir_guard,$(P2PMEM_DIR)) && \
	$(MAKE) -C "$$kdir" M=$(P2PMEM_DIR) W=1 $(KFLAGS) modules

# Installs what `make` built (building it first if there is no nvme_rsrdma.ko), the way the
# kernel's modules_install does: $(INSTALL_MOD_PATH)/lib/modules/<release>/$(INSTALL_MOD_DIR)
# (default "updates"), then one depmod. It needs neither rustc nor bindgen when the module is
# built, so `sudo make install KDIR=...` works with the toolchain in the user's own PATH. The
# kernel's own depmod run is replaced by a plain one: it checks symbols with -e, which in a
# staging root without the kernel's modules warns about every symbol nvme_rsrdma imports.
install: $(if $(wildcard nvme_rsrdma.ko),,modules)
	@set -e; PATH=$$PATH:/usr/sbin:/sbin; \
	kdir=$$($(if $(KDIR),cd "$(KDIR)" && pwd,$(KDIR_CMD))); \
	release=$$($(MAKE) -s --no-print-directory -C "$$kdir" kernelrelease); \
	built=$$(modinfo -F vermagic nvme_rsrdma.ko | cut -d' ' -f1); \
	if [ "$$built" != "$$release" ]; then \
		echo "nvme_rsrdma.ko is built for $$built but $$kdir is $$release:" \
			"run make$(if $(KDIR), KDIR=$(KDIR)) first" >&2; \
		exit 1; \
	fi; \
	$(MAKE) -C "$$kdir" M=$(CURDIR) DEPMOD=true modules_install; \
	out=$$(depmod $(if $(INSTALL_MOD_PATH),-b "$(INSTALL_MOD_PATH)") -a "$$release" 2>&1) || \
		{ echo "$$out" >&2; exit 1; }; \
	$(if $(INSTALL_MOD_PATH),out=$$(echo "$$out" | grep -v 'could not open modules\.' || true);) \
	[ -z "$$out" ] || echo "$$out" >&2; \
	install -D -m 644 scripts/udev/60-nvme-rsrdma.rules \
		"$(INSTALL_MOD_PATH)$(UDEV_RULES_DIR)/60-nvme-rsrdma.rules"; \
	$(if $(INSTALL_MOD_PATH),,! command -v udevadm >/dev/null || udevadm control --reload || true)

docs:
	scripts/docs.sh out/docs

clean:
	@kdir=$$($(KDIR_CMD) 2>/dev/null) && [ -n "$$kdir" ] && \
	$(MAKE) -C "$$kdir" M=$(CURDIR) clean || true
	rm -rf tests/host/target .kdir-stamp
