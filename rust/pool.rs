// SPDX-License-Identifier: GPL-2.0

//! The controller's registered buffer pool: its memory, its slice allocators and its RDMA
//! registration.
//!
//! The pool is two halves of the same layout, one per direction of the data ([`Dir`]): the
//! data of host writes, which the target only reads, and the data of host reads, which the
//! target only writes. Each half is registered as a memory region of its own with only that
//! access, so the key of one half never lets a target write what it is sent or read what it
//! is meant to fill.
//!
//! The memory is allocated (zeroed) once per controller and kept across reconnects; each half
//! is DMA-mapped and registered as one fast-registration MR per connection, and deregistered
//! (its RKEY invalidated) whenever the connection goes away. Before the half a target may read
//! is registered again it is cleared, so nothing of one association is readable through the
//! key of the next. The layout and the allocators are the pure logic of `proto::pool`.

use crate::clock::now_ms;
use crate::proto::buddy::Buddy;
use crate::proto::pool::{map_size, mr_page_size, PoolLayout, PoolParams, QueueParams, Slice};
use crate::wrap::log::{log_err, log_info, Prefix};
use crate::wrap::mem::ChunkSet;
use crate::wrap::rdma::{Access, ChunkMaps, MemoryRegion, Pd};
use crate::wrap::sync::{new_irq_lock, IrqLock};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::sync::Arc;

/// Which way a command's data goes, and so which half of the pool holds it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Dir {
    /// The data of a host write: the target reads it (RDMA READ) and may not write it.
    ToTarget,
    /// The data of a host read: the target writes it (RDMA WRITE) and may not read it.
    FromTarget,
}

impl Dir {
    /// Both, in the order the halves are shown.
    pub(crate) const ALL: [Dir; 2] = [Dir::ToTarget, Dir::FromTarget];

    /// The direction of a command's data.
    pub(crate) fn of(is_write: bool) -> Self {
        if is_write {
            Dir::ToTarget
        } else {
            Dir::FromTarget
        }
    }

    /// What the half's registration lets the device and the target do.
    pub(crate) fn access(self) -> Access {
        match self {
            Dir::ToTarget => Access::TARGET_READS,
            Dir::FromTarget => Access::TARGET_WRITES,
        }
    }

    /// The half, for the log and debugfs.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Dir::ToTarget => "host writes (target reads)",
            Dir::FromTarget => "host reads (target writes)",
        }
    }

    /// Its index in arrays of both halves.
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// The largest transfer of one command: the transport's own limit (the core clamps it further
/// to the controller's MDTS).
pub(crate) const MAX_IO_BYTES: u32 = 4 << 20;

/// Preferred chunk size; halved down to [`MIN_CHUNK`] when the page allocator cannot provide
/// chunks that large.
const PREFERRED_CHUNK: u64 = 1 << 20;
const MIN_CHUNK: u64 = 64 << 10;

/// Admin queue: slots for its tags (and the AEN command) and one max-size transfer.
const ADMIN_DEPTH: u32 = 32;
const ADMIN_SLOT: u32 = 16 << 10;
const ADMIN_LARGE: u64 = MAX_IO_BYTES as u64;

/// Sizes asked for at controller creation.
pub(crate) struct PoolConfig {
    pub(crate) nr_io_queues: u16,
    pub(crate) io_depth: u32,
    pub(crate) slot_size: u32,
    pub(crate) io_large: u64,
    pub(crate) numa_node: i32,
}

/// One half of the pool: its memory and its large areas' allocators.
#[pin_data]
struct Half {
    mem: Arc<ChunkSet>,
    #[pin]
    admin_large: IrqLock<KBox<Buddy>>,
    #[pin]
    io_large: IrqLock<KBox<Buddy>>,
}

impl Half {
    fn new(layout: &PoolLayout, mem: ChunkSet) -> Result<impl PinInit<Self, Error>> {
        let admin = layout.region(0).ok_or(EINVAL)?;
        let admin_buddy = KBox::new(
            Buddy::new(admin.large_offset, admin.large_size).ok_or(EINVAL)?,
            GFP_KERNEL,
        )?;
        let io_buddy = KBox::new(
            match layout.region(1) {
                Some(r) if r.large_size > 0 => {
                    Buddy::new(r.large_offset, r.large_size).ok_or(EINVAL)?
                }
                // No I/O queue (discovery): an allocator that never hands out a block.
                _ => Buddy::new(0, 0).ok_or(EINVAL)?,
            },
            GFP_KERNEL,
        )?;
        Ok(try_pin_init!(Self {
            mem: Arc::new(mem, GFP_KERNEL)?,
            admin_large <- new_irq_lock!(admin_buddy, "rsrdma_pool::admin_large"),
            io_large <- new_irq_lock!(io_buddy, "rsrdma_pool::io_large"),
        }? Error))
    }

    fn large(&self, qid: u16) -> &IrqLock<KBox<Buddy>> {
        if qid == 0 {
            &self.admin_large
        } else {
            &self.io_large
        }
    }
}

/// The pool memory of one controller and its allocators.
#[pin_data]
pub(crate) struct Pool {
    layout: PoolLayout,
    /// Indexed by [`Dir`].
    #[pin]
    to_target: Half,
    #[pin]
    from_target: Half,
    large_failures: AtomicU64,
    slots_in_use: AtomicU32,
    slots_high: AtomicU32,
}

impl Pool {
    /// Lays out and allocates the pool, zeroed.
    pub(crate) fn new(cfg: &PoolConfig) -> Result<impl PinInit<Self, Error>> {
        let mut chunk_size = PREFERRED_CHUNK;
        loop {
            let params = PoolParams {
                chunk_size,
                nr_queues: cfg.nr_io_queues + 1,
                admin: QueueParams {
                    depth: ADMIN_DEPTH,
                    slot_size: ADMIN_SLOT,
                    large_size: ADMIN_LARGE,
                },
                io: QueueParams {
                    depth: cfg.io_depth,
                    slot_size: cfg.slot_size,
                    large_size: cfg.io_large,
                },
            };
            let layout = PoolLayout::new(params).map_err(|e| {
                log_err!(Prefix::NONE, "buffer pool: {}", e.msg());
                EINVAL
            })?;
            let half = || ChunkSet::new(layout.nr_chunks(), layout.chunk_size(), cfg.numa_node);
            match half().and_then(|a| Ok((a, half()?))) {
                Ok((to, from)) => {
                    return Ok(try_pin_init!(Self {
                        layout,
                        to_target <- Half::new(layout, to)?,
                        from_target <- Half::new(layout, from)?,
                        large_failures: AtomicU64::new(0),
                        slots_in_use: AtomicU32::new(0),
                        slots_high: AtomicU32::new(0),
                    }? Error));
                }
                Err(e) if chunk_size > MIN_CHUNK && e == ENOMEM => {
                    log_info!(
                        Prefix::NONE,
                        "pool: no {} chunks of {} KiB free, trying chunks of {} KiB",
                        2 * layout.nr_chunks(),
                        chunk_size >> 10,
                        chunk_size >> 11
                    );
                    chunk_size /= 2;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn half(&self, dir: Dir) -> &Half {
        match dir {
            Dir::ToTarget => &self.to_target,
            Dir::FromTarget => &self.from_target,
        }
    }

    /// The size of one half.
    pub(crate) fn half_size(&self) -> u64 {
        self.layout.total_size()
    }

    /// The size of one chunk of the memory.
    pub(crate) fn chunk_size(&self) -> u64 {
        self.layout.chunk_size()
    }

    /// The size of both halves.
    pub(crate) fn total_size(&self) -> u64 {
        2 * self.layout.total_size()
    }

    /// Times a large slice could not be allocated (the request was retried later).
    pub(crate) fn large_failures(&self) -> u64 {
        self.large_failures.load(Ordering::Relaxed)
    }

    /// Slots in use and their high-water mark.
    pub(crate) fn slot_usage(&self) -> (u32, u32) {
        (
            self.slots_in_use.load(Ordering::Relaxed),
            self.slots_high.load(Ordering::Relaxed),
        )
    }

    /// In-use bytes and high-water mark of the I/O large area of half `dir`.
    pub(crate) fn io_large_usage(&self, dir: Dir) -> (u64, u64) {
        let b = self.half(dir).io_large.lock();
        (b.in_use_bytes(), b.high_water_bytes())
    }

    /// Finds room for `len` bytes of data of tag `tag` on queue `qid`, going `dir`: the tag's
    /// own slot of that half when it fits, else a block of the half's large area. `None` means
    /// "not now": the large area is full, or held for a larger transfer that is waiting (see
    /// `proto::buddy::Buddy`), and the request must be retried when some I/O completes.
    pub(crate) fn alloc(&self, dir: Dir, qid: u16, tag: u32, len: u32) -> Option<DataSlice> {
        let region = self.layout.region(qid)?;
        if len <= region.slot_size {
            let slot = region.slot(tag)?;
            let n = self.slots_in_use.fetch_add(1, Ordering::Relaxed) + 1;
            self.slots_high.fetch_max(n, Ordering::Relaxed);
            return Some(DataSlice {
                slice: Slice {
                    offset: slot.offset,
                    len,
                },
                large: false,
                dir,
            });
        }
        let now = now_ms();
        match self.half(dir).large(qid).lock().alloc(len, now) {
            Some(slice) => Some(DataSlice {
                slice,
                large: true,
                dir,
            }),
            None => {
                self.large_failures.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Returns a slice from [`Pool::alloc`].
    pub(crate) fn free(&self, qid: u16, data: DataSlice) {
        if !data.large {
            self.slots_in_use.fetch_sub(1, Ordering::Relaxed);
        } else if !self.half(data.dir).large(qid).lock().free(data.slice) {
            log_err!(
                Prefix::NONE,
                "pool: bad free of slice {:#x}+{} on queue {} ({})",
                data.slice.offset,
                data.slice.len,
                qid,
                data.dir.as_str()
            );
        }
    }

    /// The memory of half `dir`, which requests copy their data into and out of.
    pub(crate) fn mem(&self, dir: Dir) -> &ChunkSet {
        &self.half(dir).mem
    }

    /// Clears half `dir`: what an association left in it is gone before it is registered
    /// again. Only while no request holds a slice of it (between connections).
    pub(crate) fn clear(&self, dir: Dir) {
        self.half(dir).mem.clear();
    }

    /// Maps both halves for DMA on the device of `pd` and prepares a memory region over
    /// each, registered by the REG_MR work requests the caller posts with each half's access
    /// (see `Queue::register_region`).
    pub(crate) fn map(&self, pd: &Arc<Pd>) -> Result<PoolReg> {
        let size = self.layout.total_size();
        Ok(PoolReg([
            map_chunks(&self.to_target.mem, size, pd, "pool")?,
            map_chunks(&self.from_target.mem, size, pd, "pool")?,
        ]))
    }
}

/// The registrations of the pool's halves on one connection, indexed by [`Dir`].
pub(crate) struct PoolReg([MemReg; 2]);

impl PoolReg {
    /// The registration of half `dir`.
    pub(crate) fn half(&self, dir: Dir) -> &MemReg {
        &self.0[dir.index()]
    }

    /// The RKEYs of the halves, indexed by [`Dir`].
    pub(crate) fn rkeys(&self) -> [u32; 2] {
        Dir::ALL.map(|d| self.half(d).region().rkey())
    }
}

/// Maps the first `size` bytes of `mem` for DMA on the device of `pd` and prepares a memory
/// region over them (`what` names the memory in errors).
pub(crate) fn map_chunks(
    mem: &Arc<ChunkSet>,
    size: u64,
    pd: &Arc<Pd>,
    what: &str,
) -> Result<MemReg> {
    let dev = pd.device();
    // One mapping per chunk, or per part of a chunk on a device that maps less at once.
    let max = dev.max_mapping_size() as u64;
    let Some(piece) = map_size(mem.chunk_size(), max) else {
        log_err!(
            Prefix::NONE,
            "{}: {} maps at most {} bytes at once",
            what,
            dev.name(),
            max
        );
        return Err(EINVAL);
    };
    let maps = ChunkMaps::map(dev, mem.clone(), piece).inspect_err(|_| {
        log_err!(
            Prefix::NONE,
            "{}: mapping {} KiB in pieces of {} KiB for {} failed",
            what,
            mem.len() >> 10,
            piece >> 10,
            dev.name()
        )
    })?;
    // The MR's page size: what the mappings' sizes and DMA addresses allow.
    let Some(page_size) = mr_page_size(piece, dev.page_size_cap(), maps.addrs()) else {
        log_err!(Prefix::NONE, "{}: DMA addresses not page aligned", what);
        return Err(EINVAL);
    };
    let nr_pages = size.checked_div(page_size).ok_or(EINVAL)?;
    let slots = dev.mr_slots(nr_pages, maps.addrs().count() as u64);
    if slots > u64::from(dev.max_fast_reg_page_list_len()) {
        log_err!(
            Prefix::NONE,
            "{}: {} MiB in {} KiB pages needs {} entries of an MR, one MR of {} has {}",
            what,
            size >> 20,
            page_size >> 10,
            slots,
            dev.name(),
            dev.max_fast_reg_page_list_len()
        );
        return Err(EINVAL);
    }
    let region = MemoryRegion::new(pd, maps, page_size).inspect_err(|e| {
        log_err!(Prefix::NONE, "{}: memory region: {:?}", what, e);
    })?;
    Ok(MemReg(Arc::new(region, GFP_KERNEL)?))
}

/// A data slice of a request.
#[derive(Clone, Copy)]
pub(crate) struct DataSlice {
    pub(crate) slice: Slice,
    /// From the large area (else the tag's slot).
    pub(crate) large: bool,
    /// The half it is in.
    pub(crate) dir: Dir,
}

/// Registered memory (the pool, the area) as seen by one connection's device: its DMA mappings
/// and a memory region over them. Dropping it (and the registration work request that holds
/// it, if it never completed) deregisters the region, which invalidates its RKEY, and unmaps
/// the memory.
pub(crate) struct MemReg(Arc<MemoryRegion>);

impl MemReg {
    /// The memory region, as registration work requests take it.
    pub(crate) fn region(&self) -> &Arc<MemoryRegion> {
        &self.0
    }

    /// The keyed address of offset `offset` of the memory.
    pub(crate) fn iova(&self, offset: u64) -> u64 {
        self.0.iova() + offset
    }

    /// Hands a slice to the device, before a command names it.
    pub(crate) fn sync_for_device(&self, slice: Slice) {
        if let Some(maps) = self.0.chunk_maps() {
            maps.sync_for_device(slice.offset, slice.len);
        }
    }

    /// Hands a slice to the CPU (before it reads what the device wrote).
    pub(crate) fn sync_for_cpu(&self, slice: Slice) {
        if let Some(maps) = self.0.chunk_maps() {
            maps.sync_for_cpu(slice.offset, slice.len);
        }
    }
}
