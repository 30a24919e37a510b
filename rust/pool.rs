// SPDX-License-Identifier: GPL-2.0

//! The controller's registered buffer pool: its memory, its slice allocators and its RDMA
//! registration.
//!
//! The memory is allocated (zeroed) once per controller and kept across reconnects; it is
//! DMA-mapped and registered as one fast-registration MR per connection, and deregistered
//! (its RKEY invalidated) whenever the connection goes away. The layout and the allocators are
//! the pure logic of `proto::pool`.

use crate::bindings;
use crate::proto::pool::{
    chunk_spans, map_size, mr_page_size, Buddy, PoolLayout, PoolParams, QueueParams, Slice,
};
use crate::rdma::{Device, DmaDir, DmaMap, Mr, Pd};
use crate::sync::{new_irq_lock, IrqLock};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use kernel::ffi::c_void;
use kernel::prelude::*;

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

/// One chunk of pool memory (`1 << order` pages).
struct Chunk {
    va: NonNull<u8>,
    order: u32,
}

impl Drop for Chunk {
    fn drop(&mut self) {
        // SAFETY: allocated by `rsrdma_alloc_chunk` with this order and no longer mapped (every
        // `PoolReg` is dropped before the pool, see `ctrl::RdmaCtrl`).
        unsafe { bindings::rsrdma_free_chunk(self.va.as_ptr().cast(), self.order) };
    }
}

/// Sizes asked for at controller creation.
pub(crate) struct PoolConfig {
    pub(crate) nr_io_queues: u16,
    pub(crate) io_depth: u32,
    pub(crate) slot_size: u32,
    pub(crate) io_large: u64,
    pub(crate) numa_node: i32,
}

/// The pool memory of one controller and its allocators.
#[pin_data]
pub(crate) struct Pool {
    layout: PoolLayout,
    chunks: KVec<Chunk>,
    #[pin]
    admin_large: IrqLock<KBox<Buddy>>,
    #[pin]
    io_large: IrqLock<KBox<Buddy>>,
    large_failures: AtomicU64,
    slots_in_use: AtomicU32,
    slots_high: AtomicU32,
}

// SAFETY: the chunks are plain memory owned by the pool; concurrent access to slices is
// coordinated by the allocators (a slice belongs to one request at a time).
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

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
                crate::glue::log_err!(core::ptr::null(), "buffer pool: {}", e.msg());
                EINVAL
            })?;
            match Self::alloc_chunks(&layout, cfg.numa_node) {
                Ok(chunks) => {
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
                    return Ok(try_pin_init!(Self {
                        layout,
                        chunks,
                        admin_large <- new_irq_lock!(admin_buddy, "rsrdma_pool::admin_large"),
                        io_large <- new_irq_lock!(io_buddy, "rsrdma_pool::io_large"),
                        large_failures: AtomicU64::new(0),
                        slots_in_use: AtomicU32::new(0),
                        slots_high: AtomicU32::new(0),
                    }? Error));
                }
                Err(e) if chunk_size > MIN_CHUNK && e == ENOMEM => chunk_size /= 2,
                Err(e) => return Err(e),
            }
        }
    }

    fn alloc_chunks(layout: &PoolLayout, node: i32) -> Result<KVec<Chunk>> {
        let order = (layout.chunk_size() >> kernel::page::PAGE_SHIFT).trailing_zeros();
        let mut chunks = KVec::with_capacity(layout.nr_chunks(), GFP_KERNEL)?;
        for _ in 0..layout.nr_chunks() {
            // SAFETY: allocates zeroed pages; freed by `Chunk::drop`.
            let va = unsafe { bindings::rsrdma_alloc_chunk(order, node) };
            let va = NonNull::new(va.cast::<u8>()).ok_or(ENOMEM)?;
            chunks.push(Chunk { va, order }, GFP_KERNEL)?;
        }
        Ok(chunks)
    }

    pub(crate) fn total_size(&self) -> u64 {
        self.layout.total_size()
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

    /// In-use bytes and high-water mark of the I/O large area.
    pub(crate) fn io_large_usage(&self) -> (u64, u64) {
        let b = self.io_large.lock();
        (b.in_use_bytes(), b.high_water_bytes())
    }

    fn large(&self, qid: u16) -> &IrqLock<KBox<Buddy>> {
        if qid == 0 {
            &self.admin_large
        } else {
            &self.io_large
        }
    }

    /// Finds room for `len` bytes of data of tag `tag` on queue `qid`: the tag's own slot when
    /// it fits, else a block of the large area. `None` means "not now": the large area is full,
    /// or held for a larger transfer that is waiting (see `proto::pool::Buddy`), and the request
    /// must be retried when some I/O completes.
    pub(crate) fn alloc(&self, qid: u16, tag: u32, len: u32) -> Option<DataSlice> {
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
            });
        }
        let now = crate::ctrl::now_ms();
        match self.large(qid).lock().alloc(len, now) {
            Some(slice) => Some(DataSlice { slice, large: true }),
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
        } else if !self.large(qid).lock().free(data.slice) {
            crate::glue::log_err!(
                core::ptr::null(),
                "pool: bad free of slice {:#x}+{} on queue {}",
                data.slice.offset,
                data.slice.len,
                qid
            );
        }
    }

    /// The address `offset` bytes into chunk `chunk`; `offset` lies within the chunk.
    fn span_ptr(&self, chunk: usize, offset: usize) -> *mut u8 {
        // SAFETY: the callers pass in-range offsets (`chunk_spans` yields them for slices of
        // the layout; `map` for parts of a size that divides the chunk), so the pointer stays
        // inside the chunk's allocation.
        unsafe { self.chunks[chunk].va.as_ptr().add(offset) }
    }

    /// Copies `src` into the pool at `offset`.
    ///
    /// # Safety
    ///
    /// `src` must be valid for reads of `len` bytes and `offset..offset + len` must belong to a
    /// slice the caller owns, not accessed by the device meanwhile.
    pub(crate) unsafe fn copy_in(&self, offset: u64, src: *const u8, len: u32) {
        let mut done = 0;
        for (chunk, off, n) in chunk_spans(offset, len, self.layout.chunk_size()) {
            // SAFETY: per the contract and `span_ptr`; the ranges do not overlap (pool memory
            // is never a source of I/O pages).
            unsafe { core::ptr::copy_nonoverlapping(src.add(done), self.span_ptr(chunk, off), n) };
            done += n;
        }
    }

    /// Copies from the pool at `offset` into `dst`.
    ///
    /// # Safety
    ///
    /// As for [`Pool::copy_in`], with `dst` valid for writes of `len` bytes.
    pub(crate) unsafe fn copy_out(&self, offset: u64, dst: *mut u8, len: u32) {
        let mut done = 0;
        for (chunk, off, n) in chunk_spans(offset, len, self.layout.chunk_size()) {
            // SAFETY: as in `copy_in`.
            unsafe { core::ptr::copy_nonoverlapping(self.span_ptr(chunk, off), dst.add(done), n) };
            done += n;
        }
    }

    /// Maps the pool for DMA on `dev` and prepares an MR covering it (registered by the
    /// REG_MR work request the caller posts, see `queue::Queue::register_pool`).
    pub(crate) fn map(&self, dev: Device, pd: &Pd) -> Result<PoolReg> {
        let chunk = self.layout.chunk_size();
        // One mapping per chunk, or per part of a chunk on a device that maps less at once.
        let max = dev.max_mapping_size() as u64;
        let Some(piece) = map_size(chunk, max) else {
            crate::glue::log_err!(
                core::ptr::null(),
                "pool: {} maps at most {} bytes at once",
                dev.name(),
                max
            );
            return Err(EINVAL);
        };
        let per_chunk = (chunk / piece) as usize;
        let n = self.chunks.len() * per_chunk;
        let mut sg = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            sg.push(bindings::scatterlist::default(), GFP_KERNEL)?;
        }
        // SAFETY: `sg` holds `n` entries; init marks the last one.
        unsafe { bindings::sg_init_table(sg.as_mut_ptr(), n as u32) };
        let mut maps = KVec::with_capacity(n, GFP_KERNEL)?;
        for (i, entry) in sg.iter_mut().enumerate() {
            let va = self.span_ptr(i / per_chunk, (i % per_chunk) * piece as usize);
            // SAFETY: those `piece` bytes outlive the registration, which is dropped before
            // the pool (see `Chunk`).
            let map = unsafe {
                dev.map_single(va.cast::<c_void>(), piece as usize, DmaDir::Bidirectional)
            }
            .inspect_err(|_| {
                crate::glue::log_err!(
                    core::ptr::null(),
                    "pool: mapping {} KiB for {} failed after {} of {} mappings",
                    piece >> 10,
                    dev.name(),
                    i,
                    n
                )
            })?;
            // SAFETY: a valid entry of an initialized table; `map` maps its buffer.
            unsafe {
                bindings::rsrdma_sg_set_buf(entry, va.cast(), piece as u32);
                bindings::rsrdma_sg_set_dma(entry, map.addr(), piece as u32);
            }
            maps.push(map, GFP_KERNEL)?;
        }
        // The MR's page size: what the mappings' sizes and DMA addresses allow.
        let Some(page_size) =
            mr_page_size(piece, dev.page_size_cap(), maps.iter().map(|m| m.addr()))
        else {
            crate::glue::log_err!(core::ptr::null(), "pool: DMA addresses not page aligned");
            return Err(EINVAL);
        };
        let nr_pages = self.layout.total_size() / page_size;
        if nr_pages > u64::from(dev.max_fast_reg_page_list_len()) {
            crate::glue::log_err!(
                core::ptr::null(),
                "pool: {} MiB in {} KiB pages exceeds the {} pages one MR of {} can map",
                self.layout.total_size() >> 20,
                page_size >> 10,
                dev.max_fast_reg_page_list_len(),
                dev.name()
            );
            return Err(EINVAL);
        }

        let mr = Mr::new(pd, nr_pages as u32)?;
        mr.bump_key();
        // SAFETY: `sg` is a DMA-mapped list of `n` entries (the mappings are in `maps`).
        let mapped = unsafe { mr.map_sg(sg.as_mut_ptr(), n as i32, page_size as u32) };
        if mapped != n as i32 {
            crate::glue::log_err!(
                core::ptr::null(),
                "pool: ib_map_mr_sg mapped {} of {} mappings",
                mapped,
                n
            );
            return Err(if mapped < 0 {
                Error::from_errno(mapped)
            } else {
                EINVAL
            });
        }
        Ok(PoolReg {
            mr,
            maps,
            map_size: piece,
        })
    }
}

/// A data slice of a request.
#[derive(Clone, Copy)]
pub(crate) struct DataSlice {
    pub(crate) slice: Slice,
    /// From the large area (else the tag's slot).
    pub(crate) large: bool,
}

/// The pool as seen by one connection's device: DMA mappings and the MR. Dropping it
/// deregisters the MR, which invalidates its RKEY, and unmaps the memory.
pub(crate) struct PoolReg {
    // Field order is drop order: deregister before unmapping.
    mr: Mr,
    /// The pool in order, `map_size` bytes each.
    maps: KVec<DmaMap>,
    map_size: u64,
}

impl PoolReg {
    pub(crate) fn mr(&self) -> &Mr {
        &self.mr
    }

    /// The keyed address of pool offset `offset`.
    pub(crate) fn iova(&self, offset: u64) -> u64 {
        self.mr.iova() + offset
    }

    /// Hands a slice to the device, before a command names it.
    pub(crate) fn sync_for_device(&self, slice: Slice) {
        for (map, off, n) in chunk_spans(slice.offset, slice.len, self.map_size) {
            self.maps[map].sync_for_device(off, n);
        }
    }

    /// Hands a slice to the CPU (before it reads what the device wrote).
    pub(crate) fn sync_for_cpu(&self, slice: Slice) {
        for (map, off, n) in chunk_spans(slice.offset, slice.len, self.map_size) {
            self.maps[map].sync_for_cpu(off, n);
        }
    }
}
