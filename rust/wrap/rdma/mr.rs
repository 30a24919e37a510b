// SPDX-License-Identifier: GPL-2.0

//! Protection domains and memory regions.
//!
//! A [`Pd`] is shared ([`Arc`]) by everything created on it, so it is released after the
//! last of them. A [`MemoryRegion`] is a fast-registration MR over a mapped [`ChunkSet`]
//! (`super::dma::ChunkMaps`), which it owns: it is deregistered (its keys invalidated) before
//! the memory is unmapped.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).
//!
//! [`ChunkSet`]: super::super::mem::ChunkSet

use super::super::bindings;
use super::super::peer_mem::PeerMap;
use super::device::{Device, DeviceRef};
use super::dma::ChunkMaps;
use core::ptr::NonNull;
use kernel::error::from_err_ptr;
use kernel::prelude::*;
use kernel::sync::Arc;

/// The object a C constructor returned: an error pointer becomes its error, and a null one
/// (which the constructors used here do not return) `ENOMEM`.
pub(in crate::wrap) fn created<T>(ptr: *mut T) -> Result<NonNull<T>> {
    NonNull::new(from_err_ptr(ptr)?).ok_or(ENOMEM)
}

/// A protection domain.
///
/// # Invariants
///
/// `ptr` is a PD allocated on `dev`, owned here; whatever is created on it holds an
/// `Arc<Pd>`, so it is deallocated after them.
pub(crate) struct Pd {
    ptr: NonNull<bindings::ib_pd>,
    dev: DeviceRef,
}

// SAFETY: a PD is used by reference from many queues; the verbs core is thread safe for it.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Pd {
    /// Allocates a PD on `dev`.
    pub(crate) fn new(dev: &Device) -> Result<Arc<Self>> {
        let dev = dev.get().ok_or(ENODEV)?;
        // SAFETY: a registered device (held).
        let ptr = created(unsafe { bindings::rsrdma_alloc_pd(dev.as_ptr()) })?;
        // INVARIANT: allocated on `dev` above.
        Ok(Arc::new(Self { ptr, dev }, GFP_KERNEL)?)
    }

    pub(in crate::wrap) fn as_ptr(&self) -> *mut bindings::ib_pd {
        self.ptr.as_ptr()
    }

    /// The device of the PD.
    pub(crate) fn device(&self) -> &Device {
        &self.dev
    }

    /// The lkey for local access to DMA-mapped memory.
    pub(in crate::wrap) fn local_dma_lkey(&self) -> u32 {
        // SAFETY: the PD is owned (type invariant); the key is set at allocation.
        unsafe { (*self.as_ptr()).local_dma_lkey }
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: owned; everything created on it held an `Arc<Pd>` and is gone (type
        // invariant).
        unsafe { bindings::rsrdma_dealloc_pd(self.as_ptr()) };
    }
}

/// What a memory registration lets the local and the remote side do.
#[derive(Clone, Copy)]
pub(crate) struct Access(u32);

impl Access {
    /// Memory the remote side only reads (the data of host writes).
    pub(crate) const TARGET_READS: Access = Access(bindings::ib_access_flags_IB_ACCESS_REMOTE_READ);
    /// Memory the remote side only writes (the data of host reads): the device writes it too.
    pub(crate) const TARGET_WRITES: Access = Access(
        bindings::ib_access_flags_IB_ACCESS_LOCAL_WRITE
            | bindings::ib_access_flags_IB_ACCESS_REMOTE_WRITE,
    );
    /// Memory the remote side reads and writes (the area, device memory: the same buffers
    /// carry data both ways).
    pub(crate) const BOTH_WAYS: Access = Access(
        bindings::ib_access_flags_IB_ACCESS_LOCAL_WRITE
            | bindings::ib_access_flags_IB_ACCESS_REMOTE_READ
            | bindings::ib_access_flags_IB_ACCESS_REMOTE_WRITE,
    );

    pub(in crate::wrap) fn raw(self) -> i32 {
        self.0 as i32
    }
}

/// The mapped memory a [`MemoryRegion`] covers.
enum Backing {
    /// The transport's chunks (the pool, the area).
    Chunks(ChunkMaps),
    /// A provider's peer memory (held for the region, unmapped after it).
    Peer { _map: PeerMap },
}

/// A fast-registration memory region over mapped memory, which it owns. It is registered with
/// the device by a REG_MR work request (`Qp::post_reg_mr`); dropping it deregisters it, which
/// invalidates its keys, then unmaps the memory.
///
/// # Invariants
///
/// `mr` is an MR allocated on `_pd` and owned here, whose pages are the pieces of `backing`.
pub(crate) struct MemoryRegion {
    mr: NonNull<bindings::ib_mr>,
    // Dropped after `mr` is deregistered (in `drop`), in this order.
    backing: Backing,
    _pd: Arc<Pd>,
}

// SAFETY: an MR is registered by one work request and then only read (keys, iova); the owned
// mappings and PD are `Send`/`Sync`.
unsafe impl Send for MemoryRegion {}
// SAFETY: as above.
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    /// Allocates an MR on `pd` able to map `maps` in pages of `page_size` bytes, maps them into
    /// it, and moves the key to a fresh value (so that a registration never reuses the previous
    /// RKEY). `EINVAL` if the device cannot map that many pages (or, on siw, pieces) in one
    /// MR.
    pub(crate) fn new(pd: &Arc<Pd>, maps: ChunkMaps, page_size: u64) -> Result<Self> {
        let (len, entries) = (maps.set().len(), maps.addrs().count() as u64);
        let region = Self::alloc(pd, Backing::Chunks(maps), len, page_size, entries)?;
        region.map_pieces(page_size as u32)?;
        Ok(region)
    }

    /// The same over a provider's peer memory, in pages of its pieces.
    pub(crate) fn new_peer(pd: &Arc<Pd>, map: PeerMap) -> Result<Self> {
        let (len, page_size) = (map.mem().len(), map.piece());
        let (sgl, n) = map.sg();
        let region = Self::alloc(pd, Backing::Peer { _map: map }, len, page_size, n.into())?;
        // SAFETY: the table `map` mapped for the PD's device, held by the region.
        unsafe { region.map_sg(sgl, n, page_size as u32) }?;
        Ok(region)
    }

    /// Allocates an MR on `pd` for `len` bytes of `backing` in pages of `page_size` bytes, to
    /// be given as `entries` scatterlist entries, and moves its key to a fresh value; its pages
    /// are still to be set.
    fn alloc(
        pd: &Arc<Pd>,
        backing: Backing,
        len: u64,
        page_size: u64,
        entries: u64,
    ) -> Result<Self> {
        let dev = pd.device();
        if page_size == 0 || page_size > u64::from(u32::MAX) || len % page_size != 0 {
            return Err(EINVAL);
        }
        let slots = dev.mr_slots(len / page_size, entries);
        if slots > u64::from(dev.max_fast_reg_page_list_len()) {
            return Err(EINVAL);
        }
        // SAFETY: an owned PD.
        let mr = created(unsafe {
            bindings::ib_alloc_mr(
                pd.as_ptr(),
                bindings::ib_mr_type_IB_MR_TYPE_MEM_REG,
                slots as u32,
            )
        })?;
        // INVARIANT: allocated on `pd`; its pages are set by the caller (or it is dropped).
        let region = Self {
            mr,
            backing,
            _pd: pd.clone(),
        };
        region.bump_key();
        Ok(region)
    }

    /// Maps the `n` entries of the DMA-mapped list `sgl` into the MR, in order.
    ///
    /// # Safety
    ///
    /// `sgl` is a list of at least `n` entries mapped for the PD's device, alive for the call.
    unsafe fn map_sg(&self, sgl: *mut bindings::scatterlist, n: u32, page_size: u32) -> Result {
        // SAFETY: an owned MR (type invariant) and a mapped list (contract), which
        // `ib_map_mr_sg` reads into the MR's page list before returning.
        let mapped = unsafe {
            bindings::ib_map_mr_sg(
                self.mr.as_ptr(),
                sgl,
                n as i32,
                core::ptr::null_mut(),
                page_size,
            )
        };
        match mapped {
            m if m == n as i32 => Ok(()),
            m if m < 0 => Err(Error::from_errno(m)),
            _ => Err(EINVAL),
        }
    }

    /// Maps the pieces of the chunks into the MR, in order.
    fn map_pieces(&self, page_size: u32) -> Result {
        let Backing::Chunks(maps) = &self.backing else {
            return Err(EINVAL);
        };
        let piece = maps.piece();
        let n = maps.addrs().count();
        let mut sg = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            sg.push(bindings::scatterlist::default(), GFP_KERNEL)?;
        }
        // SAFETY: `sg` holds `n` entries; init marks the last one.
        unsafe { bindings::sg_init_table(sg.as_mut_ptr(), n as u32) };
        for (entry, (va, dma)) in sg.iter_mut().zip(maps.pieces()) {
            // SAFETY: a valid entry of an initialized table, set to a mapped piece.
            unsafe {
                bindings::rsrdma_sg_set_buf(entry, va.cast(), piece as u32);
                bindings::rsrdma_sg_set_dma(entry, dma, piece as u32);
            }
        }
        // SAFETY: `sg` holds `n` entries, each set to a piece mapped for the device.
        unsafe { self.map_sg(sg.as_mut_ptr(), n as u32, page_size) }
    }

    /// Moves the key to a fresh value.
    fn bump_key(&self) {
        let key = self.rkey();
        // SAFETY: an owned MR, not registered yet.
        unsafe {
            bindings::rsrdma_update_fast_reg_key(
                self.mr.as_ptr(),
                bindings::rsrdma_inc_rkey(key) as u8,
            )
        };
    }

    pub(in crate::wrap) fn as_ptr(&self) -> *mut bindings::ib_mr {
        self.mr.as_ptr()
    }

    /// The mapped chunks, if the region is over the transport's own memory.
    pub(crate) fn chunk_maps(&self) -> Option<&ChunkMaps> {
        match &self.backing {
            Backing::Chunks(maps) => Some(maps),
            Backing::Peer { .. } => None,
        }
    }

    pub(crate) fn rkey(&self) -> u32 {
        // SAFETY: an owned MR (type invariant).
        unsafe { (*self.as_ptr()).rkey }
    }

    pub(crate) fn lkey(&self) -> u32 {
        // SAFETY: an owned MR (type invariant).
        unsafe { (*self.as_ptr()).lkey }
    }

    /// The address of the region's first byte, as keyed SGLs name it.
    pub(crate) fn iova(&self) -> u64 {
        // SAFETY: an owned MR (type invariant).
        unsafe { (*self.as_ptr()).iova }
    }

    pub(crate) fn length(&self) -> u64 {
        // SAFETY: an owned MR (type invariant).
        unsafe { (*self.as_ptr()).length }
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: owned MR; deregistration also invalidates its keys. Its pages stay mapped
        // until the fields drop after this.
        unsafe { bindings::rsrdma_dereg_mr(self.as_ptr()) };
    }
}
