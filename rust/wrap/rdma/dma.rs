// SPDX-License-Identifier: GPL-2.0

//! DMA mappings for an RDMA device: each mapping keeps its device registered
//! ([`DeviceRef`]) and the memory it maps alive, and is unmapped on drop.
//!
//! - [`DmaBuf`]: a buffer of kernel memory that a mapping owns (the command and response
//!   rings of a connection).
//! - [`PageMaps`]: up to [`MAX_PAGE_RANGES`] ranges of a request's pages, for the QP that sends
//!   them (see `super::qp`).
//! - [`ChunkMaps`]: a [`ChunkSet`] (the registered pool), piece by piece.
//!
//! C headers: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h) (`ib_dma_*`),
//! [`include/linux/dma-mapping.h`](srctree/include/linux/dma-mapping.h).

use super::super::bindings;
use super::super::mem::ChunkSet;
use super::device::{Device, DeviceRef};
use core::marker::PhantomData;
use core::ptr::NonNull;
use kernel::prelude::*;
use kernel::sync::Arc;

/// The most ranges of a request's pages one [`PageMaps`] maps: as many as the C driver sends
/// in one capsule (`NVME_RDMA_MAX_INLINE_SEGMENTS`).
pub(crate) const MAX_PAGE_RANGES: usize = 4;

/// Direction of a DMA mapping.
#[derive(Clone, Copy)]
pub(crate) enum DmaDir {
    ToDevice,
    FromDevice,
    Bidirectional,
}

impl DmaDir {
    fn raw(self) -> bindings::dma_data_direction {
        match self {
            DmaDir::ToDevice => bindings::dma_data_direction_DMA_TO_DEVICE,
            DmaDir::FromDevice => bindings::dma_data_direction_DMA_FROM_DEVICE,
            DmaDir::Bidirectional => bindings::dma_data_direction_DMA_BIDIRECTIONAL,
        }
    }
}

/// A streaming DMA mapping of `len` bytes for a device, which it holds.
///
/// # Invariants
///
/// `addr` is the mapping of `len` bytes, in direction `dir`, for `dev`, made by
/// `dma_map_single` or `dma_map_page` (the DMA API unmaps both alike); the memory outlives it
/// (its owner drops the mapping first).
struct DmaMap {
    dev: DeviceRef,
    addr: u64,
    len: usize,
    dir: DmaDir,
}

impl DmaMap {
    /// Maps `len` bytes at `cpu_addr`.
    ///
    /// # Safety
    ///
    /// The memory is kernel memory that outlives the mapping.
    unsafe fn single(dev: &Device, cpu_addr: *mut u8, len: usize, dir: DmaDir) -> Result<Self> {
        let dev = dev.get().ok_or(ENODEV)?;
        // SAFETY: a registered device (held); the memory per the contract.
        let addr = unsafe {
            bindings::rsrdma_dma_map_single(dev.as_ptr(), cpu_addr.cast(), len, dir.raw())
        };
        Self::mapped(dev, addr, len, dir)
    }

    /// The mapping at `addr` that a mapping call for `dev` returned, or `ENOMEM` if it failed.
    fn mapped(dev: DeviceRef, addr: u64, len: usize, dir: DmaDir) -> Result<Self> {
        // SAFETY: `addr` came from this device's mapping call.
        if unsafe { bindings::rsrdma_dma_mapping_error(dev.as_ptr(), addr) } != 0 {
            return Err(ENOMEM);
        }
        // INVARIANT: a successful mapping of these parameters.
        Ok(Self {
            dev,
            addr,
            len,
            dir,
        })
    }

    /// Whether `[offset, offset + len)` lies in the mapping.
    fn holds(&self, offset: usize, len: usize) -> bool {
        offset.checked_add(len).is_some_and(|end| end <= self.len)
    }

    /// Hands `[offset, offset + len)` to the CPU; a range outside the mapping is ignored.
    fn sync_for_cpu(&self, offset: usize, len: usize) {
        if !self.holds(offset, len) {
            return;
        }
        // SAFETY: a range of the mapping (checked above), whose device is held.
        unsafe {
            bindings::rsrdma_dma_sync_for_cpu(
                self.dev.as_ptr(),
                self.addr + offset as u64,
                len,
                self.dir.raw(),
            )
        }
    }

    /// Hands `[offset, offset + len)` back to the device; a range outside the mapping is
    /// ignored.
    fn sync_for_device(&self, offset: usize, len: usize) {
        if !self.holds(offset, len) {
            return;
        }
        // SAFETY: as in `sync_for_cpu`.
        unsafe {
            bindings::rsrdma_dma_sync_for_device(
                self.dev.as_ptr(),
                self.addr + offset as u64,
                len,
                self.dir.raw(),
            )
        }
    }
}

impl Drop for DmaMap {
    fn drop(&mut self) {
        // SAFETY: mapped with these parameters for this device, which is held (type
        // invariant).
        unsafe {
            bindings::rsrdma_dma_unmap_single(
                self.dev.as_ptr(),
                self.addr,
                self.len,
                self.dir.raw(),
            )
        };
    }
}

/// Zeroed kernel memory, owned until drop.
///
/// # Invariants
///
/// `ptr`, `len` and `cap` are the raw parts of a `KVec<u8>` of `len` initialized bytes.
struct RawBuf {
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
}

impl RawBuf {
    fn zeroed(len: usize) -> Result<Self> {
        let mut v = KVec::<u8>::with_capacity(len, GFP_KERNEL)?;
        v.extend_with(len, 0, GFP_KERNEL)?;
        let (ptr, len, cap) = v.into_raw_parts();
        // INVARIANT: the raw parts of the vector above.
        Ok(Self {
            ptr: NonNull::new(ptr).ok_or(ENOMEM)?,
            len,
            cap,
        })
    }
}

impl Drop for RawBuf {
    fn drop(&mut self) {
        // SAFETY: the raw parts of a vector (type invariant), not used after this.
        drop(unsafe { KVec::from_raw_parts(self.ptr.as_ptr(), self.len, self.cap) });
    }
}

/// A buffer of kernel memory mapped for DMA by one device, which the CPU reads and writes by
/// copying (the device may access it at any time): a ring of fixed-size entries.
///
/// # Invariants
///
/// `map` maps all of `buf`; no Rust reference to the memory exists.
pub(crate) struct DmaBuf {
    // Field order is drop order: unmapped, then freed.
    map: DmaMap,
    buf: RawBuf,
}

// SAFETY: the memory is owned and only copied in and out (type invariant); the mapping's device
// reference may be dropped on any thread.
unsafe impl Send for DmaBuf {}
// SAFETY: as above.
unsafe impl Sync for DmaBuf {}

impl DmaBuf {
    /// Allocates `len` zeroed bytes and maps them for `dev` in direction `dir`; `EINVAL` for
    /// none.
    pub(crate) fn new(dev: &Device, len: usize, dir: DmaDir) -> Result<Self> {
        if len == 0 {
            return Err(EINVAL);
        }
        let buf = RawBuf::zeroed(len)?;
        // SAFETY: the memory is owned by `buf`, which the returned value drops after the
        // mapping (field order).
        let map = unsafe { DmaMap::single(dev, buf.ptr.as_ptr(), len, dir) }?;
        // INVARIANT: `map` maps all of `buf`.
        Ok(Self { map, buf })
    }

    /// The device address of byte `offset`, if the buffer has it.
    pub(in crate::wrap) fn dma_addr(&self, offset: usize, len: usize) -> Option<u64> {
        self.map
            .holds(offset, len)
            .then(|| self.map.addr + offset as u64)
    }

    /// Copies `data` into the buffer at `offset` and hands those bytes to the device; `EINVAL`
    /// if they leave the buffer.
    pub(crate) fn write(&self, offset: usize, data: &[u8]) -> Result {
        if !self.map.holds(offset, data.len()) {
            return Err(EINVAL);
        }
        // SAFETY: inside the buffer (checked above), which no reference covers (type
        // invariant); `data` is a distinct Rust slice.
        unsafe {
            core::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.buf.ptr.as_ptr().add(offset),
                data.len(),
            )
        };
        self.map.sync_for_device(offset, data.len());
        Ok(())
    }

    /// Takes `out.len()` bytes at `offset` back from the device and copies them into `out`;
    /// `EINVAL` if they leave the buffer.
    pub(crate) fn read(&self, offset: usize, out: &mut [u8]) -> Result {
        if !self.map.holds(offset, out.len()) {
            return Err(EINVAL);
        }
        self.map.sync_for_cpu(offset, out.len());
        // SAFETY: as in `write`, the other way round.
        unsafe {
            core::ptr::copy_nonoverlapping(
                self.buf.ptr.as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            )
        };
        Ok(())
    }

    /// Hands `len` bytes at `offset` back to the device after a [`DmaBuf::read`] (a receive
    /// buffer about to be reposted).
    pub(crate) fn give_back(&self, offset: usize, len: usize) {
        self.map.sync_for_device(offset, len);
    }
}

/// A piece of a request's data: a physically contiguous range of pages given by its first
/// page, valid while the request is borrowed for `'a` (see the request handles).
///
/// # Invariants
///
/// `len` bytes at `offset` into `page` belong to the data of a request that stays owned for
/// `'a`, so its pages are not freed.
#[derive(Clone, Copy)]
pub(crate) struct PageRange<'a> {
    page: NonNull<bindings::page>,
    offset: u32,
    len: u32,
    _rq: PhantomData<&'a ()>,
}

impl PageRange<'static> {
    /// A placeholder for the unused entries of an array of ranges; it names no memory (and is
    /// never mapped: its length is 0, and arrays of ranges are used up to their count only).
    pub(in crate::wrap) const EMPTY: Self = Self {
        page: NonNull::dangling(),
        offset: 0,
        len: 0,
        _rq: PhantomData,
    };
}

impl PageRange<'_> {
    /// # Safety
    ///
    /// As the type invariant says, for `'a`.
    pub(in crate::wrap) unsafe fn new<'a>(
        page: NonNull<bindings::page>,
        offset: u32,
        len: u32,
    ) -> PageRange<'a> {
        // INVARIANT: per the contract.
        PageRange {
            page,
            offset,
            len,
            _rq: PhantomData,
        }
    }

    pub(crate) fn len(&self) -> u32 {
        self.len
    }
}

/// Ranges of a request's pages mapped for a device to read: the in-capsule data of a write
/// sent from the request's own pages. Only a QP makes them (`Qp::map_pages`), and keeps them
/// until the send completes: the request, whose send share that completion ends, keeps its
/// pages meanwhile.
///
/// # Invariants
///
/// The first `n` entries of `maps` are (device address, length) of mappings to the device of
/// `dev`, which outlives them (the QP that owns them holds its PD's device).
pub(in crate::wrap) struct PageMaps {
    dev: NonNull<bindings::ib_device>,
    maps: [(u64, u32); MAX_PAGE_RANGES],
    n: usize,
}

// SAFETY: the mappings are only unmapped, once, from any thread; the device is `Sync`.
unsafe impl Send for PageMaps {}
// SAFETY: shared access reads the addresses only.
unsafe impl Sync for PageMaps {}

impl PageMaps {
    /// Maps `ranges` for `dev` to read; `EINVAL` for more than [`MAX_PAGE_RANGES`].
    ///
    /// # Safety
    ///
    /// `dev` outlives the returned value, and so do the ranges' pages.
    pub(in crate::wrap) unsafe fn map(dev: &Device, ranges: &[PageRange<'_>]) -> Result<Self> {
        if ranges.len() > MAX_PAGE_RANGES {
            return Err(EINVAL);
        }
        // INVARIANT: no entry mapped yet, for a device that outlives the value (contract).
        let mut maps = Self {
            dev: NonNull::from(dev).cast(),
            maps: [(0, 0); MAX_PAGE_RANGES],
            n: 0,
        };
        let dir = DmaDir::ToDevice.raw();
        for r in ranges {
            // SAFETY: a registered device; the range is a piece of a request's data (`PageRange`
            // invariant), whose pages outlive the mapping (contract).
            let addr = unsafe {
                bindings::rsrdma_dma_map_page(dev.as_ptr(), r.page.as_ptr(), r.offset, r.len, dir)
            };
            // SAFETY: from this device's mapping call.
            if unsafe { bindings::rsrdma_dma_mapping_error(dev.as_ptr(), addr) } != 0 {
                // The ranges mapped so far are unmapped as `maps` drops.
                return Err(ENOMEM);
            }
            // INVARIANT: one more mapping for `dev`.
            maps.maps[maps.n] = (addr, r.len);
            maps.n += 1;
        }
        Ok(maps)
    }

    /// Whether the mappings are for `dev`.
    pub(in crate::wrap) fn is_for(&self, dev: &Device) -> bool {
        self.dev.as_ptr() == dev.as_ptr()
    }

    /// The mapped ranges as (device address, length).
    pub(in crate::wrap) fn ranges(&self) -> &[(u64, u32)] {
        &self.maps[..self.n]
    }
}

impl Drop for PageMaps {
    fn drop(&mut self) {
        for &(addr, len) in self.ranges() {
            // SAFETY: mapped to the device for `dev`, which is alive (type invariant).
            unsafe {
                bindings::rsrdma_dma_unmap_single(
                    self.dev.as_ptr(),
                    addr,
                    len as usize,
                    DmaDir::ToDevice.raw(),
                )
            };
        }
    }
}

/// A [`ChunkSet`] mapped for one device in both directions, in pieces of `piece` bytes (whole
/// chunks, or parts of them on a device that maps less at once), which holds the set.
///
/// # Invariants
///
/// `maps[i]` maps bytes `[i * piece, (i + 1) * piece)` of `set`; `piece` divides the chunk
/// size.
pub(crate) struct ChunkMaps {
    // Field order is drop order: unmapped, then the set released.
    maps: KVec<DmaMap>,
    piece: u64,
    set: Arc<ChunkSet>,
}

impl ChunkMaps {
    /// Maps `set` for `dev` in pieces of `piece` bytes, a power of two that divides the chunk
    /// size (`EINVAL` otherwise).
    pub(crate) fn map(dev: &Device, set: Arc<ChunkSet>, piece: u64) -> Result<Self> {
        if piece == 0 || set.chunk_size() % piece != 0 {
            return Err(EINVAL);
        }
        // At least one (`piece` divides the chunk size), which spares the divisions below a
        // check for zero.
        let per_chunk = ((set.chunk_size() / piece) as usize).max(1);
        let n = set.nr_chunks() * per_chunk;
        let mut maps = KVec::with_capacity(n, GFP_KERNEL)?;
        for i in 0..n {
            let va = set
                .ptr(i / per_chunk, (i % per_chunk) as u64 * piece)
                .ok_or(EINVAL)?;
            // SAFETY: `piece` bytes of the set (in one chunk: `piece` divides it), which the
            // returned value holds until after the mapping is dropped (field order).
            let map = unsafe { DmaMap::single(dev, va, piece as usize, DmaDir::Bidirectional) }?;
            maps.push(map, GFP_KERNEL)?;
        }
        // INVARIANT: piece `i` maps the bytes at `i * piece`, in order.
        Ok(Self { maps, piece, set })
    }

    /// The size of each piece.
    pub(crate) fn piece(&self) -> u64 {
        self.piece
    }

    /// The device address of each piece, in order.
    pub(crate) fn addrs(&self) -> impl Iterator<Item = u64> + '_ {
        self.maps.iter().map(|m| m.addr)
    }

    /// Each piece as (CPU address, device address), in order.
    pub(in crate::wrap) fn pieces(&self) -> impl Iterator<Item = (*mut u8, u64)> + '_ {
        // As in `map`: the piece divides the chunk size (type invariant).
        let per_chunk =
            (self.set.chunk_size().checked_div(self.piece).unwrap_or(1) as usize).max(1);
        self.maps.iter().enumerate().map(move |(i, m)| {
            let va = self
                .set
                .ptr(i / per_chunk, (i % per_chunk) as u64 * self.piece)
                .unwrap_or(core::ptr::null_mut());
            (va, m.addr)
        })
    }

    /// The mapped set.
    pub(crate) fn set(&self) -> &Arc<ChunkSet> {
        &self.set
    }

    /// Hands `[offset, offset + len)` of the set to the device, before a command names it.
    pub(crate) fn sync_for_device(&self, offset: u64, len: u32) {
        for (map, off, n) in crate::proto::pool::chunk_spans(offset, len, self.piece) {
            if let Some(m) = self.maps.get(map) {
                m.sync_for_device(off, n);
            }
        }
    }

    /// Hands `[offset, offset + len)` of the set to the CPU, before it reads what the device
    /// wrote.
    pub(crate) fn sync_for_cpu(&self, offset: u64, len: u32) {
        for (map, off, n) in crate::proto::pool::chunk_spans(offset, len, self.piece) {
            if let Some(m) = self.maps.get(map) {
                m.sync_for_cpu(off, n);
            }
        }
    }
}
