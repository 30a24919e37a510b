// SPDX-License-Identifier: GPL-2.0

//! Memory the transport lends to RDMA devices: a set of physically contiguous, zeroed chunks
//! of pages (the registered pool, the registered area), which the CPU reads and writes only by
//! copying, since a device may write into it at any time; processes may map it (see
//! [`super::map_dev`]), and a request's pages may be found in it ([`ChunkSet::locate`]).
//!
//! C headers: [`include/linux/gfp.h`](srctree/include/linux/gfp.h),
//! [`include/linux/mm.h`](srctree/include/linux/mm.h).

use super::bindings;
use core::ptr::NonNull;
use kernel::prelude::*;

/// Memory in which a run of bytes can be found by page frame: the transport's chunks, or a
/// provider's peer memory.
pub(crate) trait Locate {
    /// The offset in the memory of the `len` bytes at byte `offset` of page frame `pfn`
    /// (which may run over into the following frames), if they all lie in it, one after the
    /// other in its order. A lookup, nothing is dereferenced.
    fn locate(&self, pfn: u64, offset: u32, len: u32) -> Option<u64>;
}

/// One chunk: `1 << order` zeroed pages.
///
/// # Invariants
///
/// `va` is the address of `1 << order` pages allocated by `rsrdma_alloc_chunk`, owned here.
struct Chunk {
    va: NonNull<u8>,
    order: u32,
}

impl Drop for Chunk {
    fn drop(&mut self) {
        // SAFETY: allocated with this order and owned (type invariant); a mapping of it holds
        // the chunk set alive (`dma::ChunkMaps`), so none is left.
        unsafe { bindings::rsrdma_free_chunk(self.va.as_ptr().cast(), self.order) };
    }
}

/// Chunks of memory of one size, seen as one range of `len()` bytes, chunk after chunk.
///
/// # Invariants
///
/// Every chunk is `chunk_size` bytes (a power of two, at least a page). No Rust reference to
/// the memory exists: the CPU touches it only through [`ChunkSet::copy_in`],
/// [`ChunkSet::copy_out`] and [`ChunkSet::clear`] (and processes through mappings of it), and
/// devices through DMA mappings. `by_pfn` holds each chunk's first page frame and index, sorted by frame.
pub(crate) struct ChunkSet {
    chunks: KVec<Chunk>,
    chunk_size: u64,
    by_pfn: KVec<(u64, usize)>,
}

// SAFETY: the chunks are plain memory owned by the set; it is accessed by copies only (type
// invariant), from any thread.
unsafe impl Send for ChunkSet {}
// SAFETY: as above.
unsafe impl Sync for ChunkSet {}

impl Locate for ChunkSet {
    fn locate(&self, pfn: u64, offset: u32, len: u32) -> Option<u64> {
        let shift = kernel::page::PAGE_SHIFT;
        let pos = (pfn << shift).checked_add(u64::from(offset))?;
        crate::proto::pool::locate(
            &self.by_pfn,
            shift as u32,
            self.chunk_size,
            pos,
            u64::from(len),
        )
    }
}

impl ChunkSet {
    /// Allocates `n` zeroed chunks of `chunk_size` bytes on NUMA node `node` (-1: any).
    /// `ENOMEM` when the page allocator has no chunks that large (a caller may try smaller).
    pub(crate) fn new(n: usize, chunk_size: u64, node: i32) -> Result<Self> {
        if !chunk_size.is_power_of_two() || chunk_size < kernel::page::PAGE_SIZE as u64 {
            return Err(EINVAL);
        }
        let order = (chunk_size >> kernel::page::PAGE_SHIFT).trailing_zeros();
        let mut chunks = KVec::with_capacity(n, GFP_KERNEL)?;
        let mut by_pfn = KVec::with_capacity(n, GFP_KERNEL)?;
        for i in 0..n {
            // SAFETY: allocates zeroed pages; the `Chunk` frees them.
            let va = unsafe { bindings::rsrdma_alloc_chunk(order, node) };
            let va = NonNull::new(va.cast::<u8>()).ok_or(ENOMEM)?;
            // INVARIANT: `1 << order` pages just allocated, owned by the chunk.
            chunks.push(Chunk { va, order }, GFP_KERNEL)?;
            // SAFETY: the address of pages of the page allocator, allocated just above.
            let pfn = unsafe { bindings::rsrdma_virt_to_pfn(va.as_ptr().cast()) };
            by_pfn.push((pfn as u64, i), GFP_KERNEL)?;
        }
        by_pfn.sort_unstable_by_key(|&(pfn, _)| pfn);
        // INVARIANT: every chunk is `chunk_size` bytes, checked above; `by_pfn` as computed.
        Ok(Self {
            chunks,
            chunk_size,
            by_pfn,
        })
    }

    pub(crate) fn chunk_size(&self) -> u64 {
        self.chunk_size
    }

    pub(crate) fn nr_chunks(&self) -> usize {
        self.chunks.len()
    }

    /// The size of the whole set in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.chunk_size * self.chunks.len() as u64
    }

    /// The address of byte `offset` of chunk `chunk`, if the chunk has it.
    pub(in crate::wrap) fn ptr(&self, chunk: usize, offset: u64) -> Option<*mut u8> {
        let c = self.chunks.get(chunk)?;
        if offset >= self.chunk_size {
            return None;
        }
        // SAFETY: within the chunk's allocation, checked above (type invariant: its size).
        Some(unsafe { c.va.as_ptr().add(offset as usize) })
    }

    /// The pieces of `[offset, offset + len)` in the chunks: (chunk, offset in it, length).
    /// `EINVAL` if the range leaves the set.
    pub(in crate::wrap) fn spans(
        &self,
        offset: u64,
        len: u32,
    ) -> Result<impl Iterator<Item = (usize, u64, usize)>> {
        let end = offset.checked_add(u64::from(len)).ok_or(EINVAL)?;
        if end > self.len() {
            return Err(EINVAL);
        }
        Ok(
            crate::proto::pool::chunk_spans(offset, len, self.chunk_size)
                .map(|(c, off, n)| (c, off as u64, n)),
        )
    }

    /// The address of `n` bytes at `offset` of chunk `chunk`, if they lie in it.
    fn span_ptr(&self, chunk: usize, offset: u64, n: usize) -> Result<*mut u8> {
        let end = offset.checked_add(n as u64).ok_or(EINVAL)?;
        if end > self.chunk_size {
            return Err(EINVAL);
        }
        self.ptr(chunk, offset).ok_or(EINVAL)
    }

    /// Zeroes the whole set. What a device does meanwhile to its bytes decides only what
    /// they hold; callers clear a set no device is given (see `pool::Pool::clear`).
    pub(crate) fn clear(&self) {
        for c in self.chunks.iter() {
            // SAFETY: the chunk's allocation is `chunk_size` bytes (type invariant), and the
            // set's memory is not behind any reference (type invariant).
            unsafe { core::ptr::write_bytes(c.va.as_ptr(), 0, self.chunk_size as usize) };
        }
    }

    /// Copies `len` bytes from `src` into the set at `offset`; `EINVAL` if they leave the set.
    /// What a device does meanwhile to those bytes decides only what they hold.
    ///
    /// # Safety
    ///
    /// `src` is valid for reads of `len` bytes, and is not memory of the set.
    pub(in crate::wrap) unsafe fn copy_in(&self, offset: u64, src: *const u8, len: u32) -> Result {
        let mut done = 0;
        for (chunk, off, n) in self.spans(offset, len)? {
            let dst = self.span_ptr(chunk, off, n)?;
            // SAFETY: `n` bytes at `dst` lie in the chunk (checked by `span_ptr`);
            // `src` per the contract; the two do not overlap (per the contract); the set's
            // memory is not behind any reference (type invariant).
            unsafe { core::ptr::copy_nonoverlapping(src.add(done), dst, n) };
            done += n;
        }
        Ok(())
    }

    /// Copies `len` bytes of the set at `offset` to `dst`; `EINVAL` if they leave the set.
    ///
    /// # Safety
    ///
    /// `dst` is valid for writes of `len` bytes, and is not memory of the set.
    pub(in crate::wrap) unsafe fn copy_out(&self, offset: u64, dst: *mut u8, len: u32) -> Result {
        let mut done = 0;
        for (chunk, off, n) in self.spans(offset, len)? {
            let src = self.span_ptr(chunk, off, n)?;
            // SAFETY: as in `copy_in`, the other way round.
            unsafe { core::ptr::copy_nonoverlapping(src, dst.add(done), n) };
            done += n;
        }
        Ok(())
    }
}
