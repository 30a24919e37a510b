#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The guest tests' helper for a controller's registered area (/dev/rsrdma/<controller>).

    area.py refusals AREA                 mmap calls the device must refuse, each with its errno
    area.py share AREA                    a fork and a second process see the same memory
    area.py straddle AREA NS              O_DIRECT from a buffer half in the area, half not
    area.py hold AREA NS READY DONE       map, fill, tell READY, wait for DONE, check the memory
                                          and that I/O from it to NS (opened before) now fails
    area.py reconnect AREA NS CTRL        I/O from one mapping before and after a reset
    area.py unmap AREA NS                 munmap of the area under 4 MiB writes from it in flight

Each prints what it did and exits non-zero when something is not as expected.
"""

import ctypes
import errno
import mmap
import os
import re
import sys
import threading
import time

PAGE = mmap.PAGESIZE
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.pwrite.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long]
libc.pread.argtypes = libc.pwrite.argtypes
libc.pwrite.restype = libc.pread.restype = ctypes.c_ssize_t
MAP_FAILED = ctypes.c_void_p(-1).value
MAP_FIXED = 0x10
DEBUGFS = "/sys/kernel/debug/nvme_rsrdma"


def area_size(ctrl):
    """The area's size from the controller's debugfs statistics."""
    return int(re.search(r"^area: (\d+) KiB", stats(ctrl), re.MULTILINE).group(1)) << 10


def stats(ctrl):
    with open(f"{DEBUGFS}/{ctrl}/stats", encoding="utf-8") as f:
        return f.read()


def counters(ctrl):
    """Bytes from the area, in capsules, copied (debugfs)."""
    m = re.search(r"^data bytes[^:]*: (\d+) from the area.*?, (\d+) in capsules.*?, (\d+) copied",
                  stats(ctrl), re.MULTILINE)
    return tuple(int(x) for x in m.groups())


def rkey(ctrl):
    return int(re.search(r"^area: .*rkey (0x[0-9a-f]+)", stats(ctrl), re.MULTILINE).group(1), 16)


def raw_mmap(addr, length, prot, flags, fd, offset):
    """libc mmap: the address, or -errno."""
    p = libc.mmap(addr, length, prot, flags, fd, offset)
    if p is None or p == MAP_FAILED:
        return -ctypes.get_errno()
    return p


def refusals(area):
    ctrl = os.path.basename(area)
    size = area_size(ctrl)
    fd = os.open(area, os.O_RDWR)
    rw = mmap.PROT_READ | mmap.PROT_WRITE
    cases = [
        ("beyond the size", size + PAGE, rw, mmap.MAP_SHARED, 0, errno.EINVAL),
        ("at an offset running past the end", 2 * PAGE, rw, mmap.MAP_SHARED, size - PAGE,
         errno.EINVAL),
        ("with PROT_EXEC", PAGE, rw | mmap.PROT_EXEC, mmap.MAP_SHARED, 0, errno.EPERM),
        ("MAP_PRIVATE", PAGE, rw, mmap.MAP_PRIVATE, 0, errno.EINVAL),
        ("at an unaligned offset", PAGE, rw, mmap.MAP_SHARED, 100, errno.EINVAL),
    ]
    bad = 0
    for name, length, prot, flags, off, want in cases:
        got = raw_mmap(None, length, prot, flags, fd, off)
        if got >= 0:
            libc.munmap(got, length)
            print(f"mmap {name}: accepted, expected {errno.errorcode[want]}")
            bad += 1
        elif -got != want:
            print(f"mmap {name}: {errno.errorcode.get(-got, -got)}, expected {errno.errorcode[want]}")
            bad += 1
        else:
            print(f"mmap {name}: refused with {errno.errorcode[want]}")
    # And the whole area, read-only or read-write, is fine.
    for prot in (mmap.PROT_READ, rw):
        p = raw_mmap(None, size, prot, mmap.MAP_SHARED, fd, 0)
        if p < 0:
            print(f"mmap of the whole area (prot {prot}): {errno.errorcode.get(-p, -p)}")
            bad += 1
        else:
            libc.munmap(p, size)
    os.close(fd)
    print(f"{len(cases) - bad} of {len(cases)} refusals as expected, whole-area maps tried")
    return 1 if bad else 0


def share(area):
    fd = os.open(area, os.O_RDWR)
    m = mmap.mmap(fd, 4 * PAGE, mmap.MAP_SHARED, offset=PAGE)
    token = os.urandom(PAGE)
    pid = os.fork()
    if pid == 0:
        m[:PAGE] = token
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    ok_fork = status == 0 and m[:PAGE] == token
    print(f"a forked child's write {'is' if ok_fork else 'is NOT'} seen by its parent")
    # A second process opens and maps the area on its own.
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        fd2 = os.open(area, os.O_RDWR)
        m2 = mmap.mmap(fd2, 4 * PAGE, mmap.MAP_SHARED, offset=PAGE)
        os.write(w, b"1" if m2[:PAGE] == token else b"0")
        m2[PAGE:2 * PAGE] = token[::-1]
        os._exit(0)
    os.close(w)
    seen = os.read(r, 1) == b"1"
    os.waitpid(pid, 0)
    ok_second = seen and m[PAGE:2 * PAGE] == token[::-1]
    print(f"a second process's own mapping {'shares' if ok_second else 'does NOT share'} "
          "the memory both ways")
    m.close()
    os.close(fd)
    return 0 if ok_fork and ok_second else 1


def straddle(area, ns):
    """8 KiB at an address whose first page is the area's last, the second anonymous."""
    ctrl = os.path.basename(area)
    size = area_size(ctrl)
    rw = mmap.PROT_READ | mmap.PROT_WRITE
    base = raw_mmap(None, 2 * PAGE, rw, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    fd = os.open(area, os.O_RDWR)
    p = raw_mmap(base, PAGE, rw, mmap.MAP_SHARED | MAP_FIXED, fd, size - PAGE)
    if base < 0 or p != base:
        print(f"cannot lay the area's last page before an anonymous one ({base}, {p})")
        return 1
    data = os.urandom(2 * PAGE)
    ctypes.memmove(base, data, 2 * PAGE)
    nfd = os.open(ns, os.O_RDWR | os.O_DIRECT)
    before = counters(ctrl)
    n = libc.pwrite(nfd, base, 2 * PAGE, 0)
    ctypes.memset(base, 0, 2 * PAGE)
    m = libc.pread(nfd, base, 2 * PAGE, 0)
    after = counters(ctrl)
    back = ctypes.string_at(base, 2 * PAGE)
    os.close(nfd)
    libc.munmap(base, 2 * PAGE)
    os.close(fd)
    copied = after[2] - before[2]
    print(f"wrote {n}, read {m} bytes across the area's edge: "
          f"{'the same' if back == data else 'DIFFERENT'} data; {copied} bytes copied, "
          f"{after[0] - before[0]} from the area")
    return 0 if n == m == 2 * PAGE and back == data and copied >= 4 * PAGE else 1


def hold(area, ns, ready, done):
    """Maps 1 MiB, fills it, opens NS, says READY, waits for DONE to exist, checks the memory,
    and that a write from it to NS fails (the controller was deleted meanwhile)."""
    fd = os.open(area, os.O_RDWR)
    m = mmap.mmap(fd, 1 << 20, mmap.MAP_SHARED)
    os.close(fd)
    data = os.urandom(1 << 20)
    m[:] = data
    nfd = os.open(ns, os.O_RDWR | os.O_DIRECT)
    with open(ready, "w", encoding="utf-8") as f:
        f.write(str(os.getpid()))
    while not os.path.exists(done):
        time.sleep(0.2)
    same = m[:] == data
    m[:] = bytes(1 << 20)
    print(f"1 MiB mapped: {'unchanged' if same else 'CHANGED'} after the wait, still writable")
    view = memoryview(m)
    try:
        os.pwrite(nfd, view[:PAGE], 0)
        failed = False
        print("a write from the mapping to the deleted controller's namespace succeeded")
    except OSError as e:
        failed = True
        print(f"a write from the mapping to the deleted controller's namespace: {e.strerror}")
    view.release()
    os.close(nfd)
    m.close()
    return 0 if same and failed else 1


def reconnect(area, ns, ctrl):
    """Blocks written and read back from one mapping, across a controller reset."""
    fd = os.open(area, os.O_RDWR)
    bs, n = 1 << 20, 4
    m = mmap.mmap(fd, bs * n, mmap.MAP_SHARED)
    view = memoryview(m)
    nfd = os.open(ns, os.O_RDWR | os.O_DIRECT)

    def round_trip(tag):
        data = [os.urandom(bs) for _ in range(n)]
        for i in range(n):
            view[i * bs:(i + 1) * bs] = data[i]
            os.pwrite(nfd, view[i * bs:(i + 1) * bs], i * bs)
        view[:] = bytes(bs * n)
        for i in range(n):
            os.preadv(nfd, [view[i * bs:(i + 1) * bs]], i * bs)
        good = sum(view[i * bs:(i + 1) * bs] == data[i] for i in range(n))
        print(f"{tag}: {good} of {n} blocks of 1 MiB read back intact")
        return good == n

    # Counted around the round trips only: the reset's own admin commands copy their data.
    before = counters(ctrl)
    key1 = rkey(ctrl)
    ok = round_trip("before the reset")
    mid = counters(ctrl)
    with open(f"/sys/class/nvme/{ctrl}/reset_controller", "w", encoding="utf-8") as f:
        f.write("1")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with open(f"/sys/class/nvme/{ctrl}/state", encoding="utf-8") as f:
            if f.read().strip() == "live" and rkey(ctrl) not in (0, key1):
                break
        time.sleep(0.2)
    key2 = rkey(ctrl)
    print(f"area rkey {key1:#x} before the reset, {key2:#x} after")
    mid2 = counters(ctrl)
    ok = round_trip("after the reset, same mapping") and ok
    after = counters(ctrl)
    copied = (mid[2] - before[2]) + (after[2] - mid2[2])
    moved = (mid[0] - before[0]) + (after[0] - mid2[0])
    print(f"{moved} bytes from the area, {copied} copied")
    view.release()
    m.close()
    os.close(nfd)
    os.close(fd)
    return 0 if ok and key2 not in (0, key1) and copied == 0 and moved >= 4 * bs * n else 1


def unmap(area, ns):
    """Four threads write 4 MiB blocks from 16 MiB of the area with O_DIRECT, each its own block
    over and over, and the mapping is unmapped under them. A write whose pages were all taken
    before the munmap writes its whole block, since direct I/O holds the pages: at least one
    begun before it and ended after it must be whole. One that was still taking its pages (a
    4 MiB write is submitted in several bios) may end short or with EFAULT, and one begun after
    the munmap must fail with EFAULT; none may fail or end short before the munmap. Every block
    then reads back as the area held it."""
    ctrl = os.path.basename(area)
    blk, nthr, aoff, noff = 4 << 20, 4, 32 << 20, 224 << 20
    length = blk * nthr
    rw = mmap.PROT_READ | mmap.PROT_WRITE
    fd = os.open(area, os.O_RDWR)
    base = raw_mmap(None, length, rw, mmap.MAP_SHARED, fd, aoff)
    if base < 0:
        print(f"mmap of 16 MiB of the area: {errno.errorcode.get(-base, -base)}")
        return 1
    data = os.urandom(length)
    ctypes.memmove(base, data, length)
    nfd = os.open(ns, os.O_RDWR | os.O_DIRECT)
    calls, lock, stop = [], threading.Lock(), threading.Event()

    def writer(i):
        while not stop.is_set():
            t0 = time.monotonic()
            n = libc.pwrite(nfd, base + i * blk, blk, noff + i * blk)
            err = ctypes.get_errno() if n < 0 else 0
            with lock:
                calls.append((t0, time.monotonic(), n, err))
            if n < 0:
                return

    before = counters(ctrl)
    threads = [threading.Thread(target=writer, args=(i,)) for i in range(nthr)]
    for t in threads:
        t.start()
    time.sleep(1)
    u0 = time.monotonic()
    r = libc.munmap(base, length)
    u1 = time.monotonic()
    stop.set()
    # This thread's own write from the unmapped range, at once.
    late = libc.pwrite(nfd, base, blk, noff)
    late_err = ctypes.get_errno() if late < 0 else 0
    for t in threads:
        t.join(120)
    mid = counters(ctrl)
    ok = r == 0 and not any(t.is_alive() for t in threads)
    over = [c for c in calls if c[0] < u0 and c[1] > u1]
    whole = [c for c in over if c[2] == blk]
    short = [c for c in calls if 0 <= c[2] < blk]
    early = [c for c in calls if c[2] != blk and c[1] < u0]
    after_ok = [c for c in calls if c[0] > u1 and c[2] >= 0]
    errs = sorted({errno.errorcode.get(c[3], c[3]) for c in calls if c[2] < 0})
    print(f"{len(calls)} writes of 4 MiB from the area, {len(over)} in flight across the munmap "
          f"({len(whole)} of them whole), {len(short)} short, {len(early)} failed or short "
          f"before it, {len(after_ok)} begun after it succeeded; failed ones: "
          f"{', '.join(errs) or 'none'}; a write from the unmapped range: "
          f"{late if late >= 0 else errno.errorcode.get(late_err, late_err)}")
    ok = (ok and bool(whole) and not early and not after_ok and late < 0
          and late_err == errno.EFAULT)
    moved, copied = mid[0] - before[0], mid[2] - before[2]
    print(f"{moved} bytes from the area, {copied} copied")
    ok = ok and moved >= blk * len([c for c in calls if c[2] == blk]) and copied == 0
    if errs and errs != ["EFAULT"]:
        print("a write failed with another error than EFAULT")
        ok = False
    # Read back into ordinary (aligned) memory: each block as the area held it.
    buf = raw_mmap(None, blk, rw, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    good = 0
    for i in range(nthr):
        n = libc.pread(nfd, buf, blk, noff + i * blk)
        if n == blk and ctypes.string_at(buf, blk) == data[i * blk:(i + 1) * blk]:
            good += 1
    print(f"{good} of {nthr} blocks ({good * blk} bytes) read back as the area held them")
    libc.munmap(buf, blk)
    os.close(nfd)
    os.close(fd)
    return 0 if ok and good == nthr else 1


def main(argv):
    cmds = {"refusals": (refusals, 1), "share": (share, 1), "straddle": (straddle, 2),
            "hold": (hold, 4), "reconnect": (reconnect, 3), "unmap": (unmap, 2)}
    if len(argv) < 2 or argv[1] not in cmds or len(argv) - 2 != cmds[argv[1]][1]:
        print(__doc__, file=sys.stderr)
        return 2
    fn, _ = cmds[argv[1]]
    return fn(*argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
