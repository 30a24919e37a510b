#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""A checkpoint without a copy: write N blocks to a namespace and read them back.

The blocks are filled in the controller's registered area, mapped from /dev/rsrdma/<controller>
(the memory the transport registered with the connection; the controllers of one subsystem share
it, so a multipath namespace works the same), written to the namespace with
O_DIRECT straight from that mapping, the mapping cleared, the blocks read back into it and
checked. With the area, the NIC reads and writes the mapping itself: the controller's debugfs
counters show the bytes moved without a copy. `--memory device` does the same from device
memory (the GPUDirect path): PCI peer-to-peer memory a device's driver published, mapped from
/sys/bus/pci/devices/<bdf>/p2pmem/allocate, which the transport registered with the connection
and the NIC reads and writes directly. `--memory anon` does it from ordinary process memory,
which the transport copies through its pool.

    checkpoint.py /dev/nvme0n1 --blocks 8 --block-size 4M
    checkpoint.py /dev/nvme0n1 --memory device        # from device memory (P2PDMA)
    checkpoint.py /dev/nvme0n1 --memory anon          # for comparison
    checkpoint.py /dev/nvme0n1 --memory device --stage  # device memory staged through DRAM

`--stage` is the host CPU path for device memory, for transports that cannot send it (the C
nvme-rdma): each block is copied by the CPU from device memory into a DRAM buffer and written
from there, and read into the DRAM buffer and copied into device memory; the times include the
copies.

It prints the throughput of each direction, how many blocks and bytes it verified, and the
controller's counters before and after; it exits 1 if any block differs or none was checked,
and with --expect-zero-copy also if any byte was copied or fewer than the checkpoint's bytes
moved from the area (or device memory).
"""

import argparse
import concurrent.futures
import mmap
import os
import queue
import random
import re
import struct
import sys
import time

DEBUGFS = "/sys/kernel/debug/nvme_rsrdma"
PCI = "/sys/bus/pci/devices"


def size_arg(text):
    """A size with an optional K, M or G suffix (powers of 1024)."""
    m = re.fullmatch(r"(\d+)([KMG]?)i?B?", text.strip(), re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


def controllers_of(namespace):
    """The controllers (nvmeN) behind a namespace block device: its own, or, for a multipath
    head, every controller of its subsystem."""
    name = os.path.basename(namespace)
    dev = os.path.realpath(f"/sys/block/{name}/device")
    base = os.path.basename(dev)
    if re.fullmatch(r"nvme\d+", base):
        return [base]
    if base.startswith("nvme-subsys"):
        ctrls = sorted(e for e in os.listdir(dev) if re.fullmatch(r"nvme\d+", e))
        if ctrls:
            return ctrls
    sys.exit(f"{namespace}: not an NVMe namespace")


def p2pmem_providers():
    """The PCI devices that publish peer-to-peer memory (their BDFs)."""
    found = []
    for bdf in sorted(os.listdir(PCI)):
        try:
            with open(f"{PCI}/{bdf}/p2pmem/published", encoding="ascii") as f:
                if f.read().strip() == "1":
                    found.append(bdf)
        except OSError:
            continue
    return found


def counters(ctrls):
    """Bytes from the area, in capsules, copied, and from device memory, summed over the
    controllers (debugfs)."""
    total = [0, 0, 0, 0]
    for ctrl in ctrls:
        try:
            with open(f"{DEBUGFS}/{ctrl}/stats", encoding="utf-8") as f:
                text = f.read()
        except OSError:
            continue
        m = re.search(r"^data bytes[^:]*: (\d+) from the area.*?, (\d+) in capsules.*?, (\d+) copied",
                      text, re.MULTILINE)
        d = re.search(r"^data bytes[^:]*:.*, (\d+) from device memory", text, re.MULTILINE)
        if not m or not d:
            return None
        total = [t + int(x) for t, x in zip(total, m.groups() + d.groups())]
    return total


def pattern(block, size, seed):
    """The content of block `block`: a seeded random block, rotated per block, its index first."""
    base = random.Random(seed).randbytes(size)
    k = (block * 4099 * 8) % size
    data = bytearray(base[k:] + base[:k])
    data[:16] = struct.pack("<QQ", block, seed)
    return data


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("namespace", help="namespace block device, e.g. /dev/nvme0n1")
    ap.add_argument("--blocks", type=int, default=8, help="number of blocks (default 8)")
    ap.add_argument("--block-size", type=size_arg, default=4 << 20,
                    help="block size (default 4M)")
    ap.add_argument("--offset", type=size_arg, default=0,
                    help="where the checkpoint starts on the namespace (default 0)")
    ap.add_argument("--memory", choices=("area", "device", "anon"), default="area",
                    help="the registered area (default), device memory or ordinary process "
                         "memory")
    ap.add_argument("--device", help="the PCI device whose peer memory to use (its BDF; "
                                     "default the first that publishes some)")
    ap.add_argument("--area", help="the area's device (default /dev/rsrdma/<controller>)")
    ap.add_argument("--area-offset", type=size_arg, default=0,
                    help="where in the area the blocks are (default 0)")
    ap.add_argument("--stage", action="store_true",
                    help="stage each block through a DRAM buffer with a CPU copy (the host CPU "
                         "path, with --memory device)")
    ap.add_argument("--depth", type=int, default=1,
                    help="blocks in flight at once, each from a thread of its own (default 1)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--expect-zero-copy", action="store_true",
                    help="fail unless every byte moved from the area and none was copied")
    args = ap.parse_args()

    bs, n = args.block_size, args.blocks
    total = bs * n
    if args.depth < 1:
        sys.exit("--depth: at least 1")
    if args.stage and args.memory != "device":
        sys.exit("--stage stages device memory: use it with --memory device")
    if n <= 0 or bs <= 0 or bs % 4096 or args.offset % 4096 or args.area_offset % 4096:
        sys.exit("blocks must be positive; sizes and offsets multiples of 4 KiB")
    ctrls = controllers_of(args.namespace)
    ctrl = " + ".join(ctrls)

    if args.memory == "area":
        area = args.area or next((f"/dev/rsrdma/{c}" for c in ctrls
                                  if os.path.exists(f"/dev/rsrdma/{c}")), "/dev/rsrdma/?")
        try:
            afd = os.open(area, os.O_RDWR)
            mem = mmap.mmap(afd, total, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                            offset=args.area_offset)
        except OSError as e:
            sys.exit(f"{area}: cannot map {total} bytes at offset {args.area_offset}: {e}")
        os.close(afd)
    elif args.memory == "device":
        providers = p2pmem_providers()
        bdf = args.device or (providers[0] if providers else None)
        if not bdf:
            sys.exit("no PCI device publishes peer-to-peer memory (CONFIG_PCI_P2PDMA, a driver "
                     "that publishes some such as nvme with a CMB)")
        area = f"device memory of {bdf}"
        try:
            afd = os.open(f"{PCI}/{bdf}/p2pmem/allocate", os.O_RDWR)
            mem = mmap.mmap(afd, total, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as e:
            sys.exit(f"{bdf}: cannot map {total} bytes of its peer memory: {e}")
        os.close(afd)
    else:
        area = "anonymous memory"
        mem = mmap.mmap(-1, total)
    view = memoryview(mem)

    fd = os.open(args.namespace, os.O_RDWR | os.O_DIRECT)
    before = counters(ctrls)
    # The DRAM buffers of --stage, one per I/O in flight: what the I/O goes from and into.
    free = queue.Queue()
    if args.stage:
        for _ in range(args.depth):
            free.put(memoryview(mmap.mmap(-1, bs)))

    def write_block(i):
        """Writes block i (from its staging buffer, copied there first, with --stage)."""
        block = view[i * bs:(i + 1) * bs]
        buf = free.get() if args.stage else block
        try:
            if args.stage:
                buf[:] = block
            if os.pwrite(fd, buf, args.offset + i * bs) != bs:
                return f"short write of block {i}"
        except OSError as e:
            return f"write of block {i} from {area}: {e}"
        finally:
            if args.stage:
                free.put(buf)
        return None

    def read_block(i):
        """Reads block i back (into its staging buffer, then copied, with --stage)."""
        block = view[i * bs:(i + 1) * bs]
        buf = free.get() if args.stage else block
        try:
            if os.preadv(fd, [buf], args.offset + i * bs) != bs:
                return f"short read of block {i}"
            if args.stage:
                block[:] = buf
        except OSError as e:
            return f"read of block {i} into {area}: {e}"
        finally:
            if args.stage:
                free.put(buf)
        return None

    def run(fn):
        """fn over every block, --depth at a time; exits at the first error."""
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.depth) as pool:
            for err in pool.map(fn, range(n)):
                if err:
                    sys.exit(err)

    for i in range(n):
        view[i * bs:(i + 1) * bs] = pattern(i, bs, args.seed)
    t0 = time.monotonic()
    run(write_block)
    os.fsync(fd)
    t_write = time.monotonic() - t0

    view[:] = bytes(total)
    t0 = time.monotonic()
    run(read_block)
    t_read = time.monotonic() - t0
    after = counters(ctrls)
    os.close(fd)

    good = sum(view[i * bs:(i + 1) * bs] == pattern(i, bs, args.seed) for i in range(n))
    if args.stage:
        area += ", staged through DRAM"
    view.release()
    mem.close()

    mib = total / (1 << 20)
    print(f"checkpoint of {n} x {bs >> 10} KiB from {area} to {args.namespace} "
          f"at offset {args.offset}, {args.depth} at a time")
    print(f"write: {mib:.1f} MiB in {t_write:.3f} s, {mib / t_write:.1f} MiB/s")
    print(f"read:  {mib:.1f} MiB in {t_read:.3f} s, {mib / t_read:.1f} MiB/s")
    print(f"verified: {good} of {n} blocks, {good * bs} of {total} bytes")
    rc = 0 if good == n and n > 0 else 1
    if before and after:
        area_b, page_b, copied, dev_b = (a - b for a, b in zip(after, before))
        print(f"{ctrl}: {area_b} bytes moved from the area without a copy, "
              f"{page_b} in capsules from their pages, {copied} copied through the pool")
        print(f"{ctrl}: {dev_b} bytes moved from device memory without a copy")
        moved = dev_b if args.memory == "device" else area_b
        if args.expect_zero_copy and (copied != 0 or moved < 2 * total):
            print(f"expected {2 * total} bytes from {area} and none copied")
            rc = 1
    elif args.expect_zero_copy:
        print(f"{ctrl}: no counters in {DEBUGFS} (debugfs mounted? an rsrdma controller?)")
        rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
