// SPDX-License-Identifier: GPL-2.0

//! PCI peer-to-peer memory (P2PDMA): device memory that a PCI driver published for its peers
//! (`pci_p2pmem_publish()`), such as an accelerator's or an NVMe controller's memory buffer.
//! Processes map it from `/sys/bus/pci/devices/<bdf>/p2pmem/allocate` and do direct I/O from
//! it on block devices that accept such pages; the transport registers each provider's memory
//! with every connection, like the pool, and sends data from and into it without a copy.
//!
//! - [`PeerMem`]: one provider's published memory, held (its page map cannot go away while
//!   a [`PeerMem`] exists).
//! - [`PeerMap`]: that memory mapped for one RDMA device the peer-to-peer way.
//! - [`ProviderWatch`]: tells the driver when a provider's driver is about to release its
//!   memory (before it waits for the last reference to it).
//!
//! C headers: [`include/linux/pci-p2pdma.h`](srctree/include/linux/pci-p2pdma.h),
//! [`include/linux/memremap.h`](srctree/include/linux/memremap.h),
//! [`include/linux/device/bus.h`](srctree/include/linux/device/bus.h) (bus notifiers),
//! [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h) (`ib_dma_map_sgtable_attrs`).

use super::bindings;
use super::mem::Locate;
use super::rdma::{Device, DeviceRef};
use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::ffi::{c_int, c_ulong, c_void};
use kernel::prelude::*;
use kernel::str::CStr;
use kernel::sync::Arc;
use kernel::types::Opaque;

/// A PCI device that provides peer memory, as an identity: only compared, never dereferenced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Provider(usize);

/// How an RDMA device reaches a provider's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reach {
    /// By DMA, the peer-to-peer way (the distance check passed).
    Dma,
    /// By the CPU, through the kernel's mapping of the memory: soft-RoCE, which has no DMA (its
    /// "DMA addresses" are kernel addresses) and copies payloads into its packets with the CPU.
    Cpu,
}

impl Reach {
    /// How the logs and debugfs say it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reach::Dma => "peer-to-peer DMA",
            Reach::Cpu => "the CPU (no DMA)",
        }
    }
}

/// The peer memory one PCI device publishes.
///
/// # Invariants
///
/// `pgmap` is a page map of type `MEMORY_DEVICE_PCI_P2PDMA` referenced by this value (so its
/// pages and their kernel mapping stay), covering the `nr` page frames from `pfn`; `pdev` is
/// the PCI device whose BAR holds it, referenced by this value.
pub(crate) struct PeerMem {
    pgmap: NonNull<bindings::dev_pagemap>,
    pdev: NonNull<bindings::pci_dev>,
    pfn: u64,
    nr: u64,
}

// SAFETY: the references are counted ones, dropped from any thread; the rest is plain data.
unsafe impl Send for PeerMem {}
// SAFETY: as above; nothing is mutated through a shared reference.
unsafe impl Sync for PeerMem {}

impl PeerMem {
    /// The peer memory of every PCI device that publishes some.
    pub(crate) fn all() -> Result<KVec<Arc<PeerMem>>> {
        let mut found = KVec::new();
        let mut pdev: *mut bindings::pci_dev = core::ptr::null_mut();
        loop {
            // SAFETY: `pdev` is null or the referenced device of the previous step, whose
            // reference this call drops.
            pdev = unsafe { bindings::rsrdma_pci_next(pdev) };
            let Some(dev) = NonNull::new(pdev) else {
                return Ok(found);
            };
            let (mut pfn, mut nr) = (0, 0);
            // SAFETY: a referenced PCI device; the out parameters are locals.
            let pgmap = unsafe { bindings::rsrdma_p2p_get(dev.as_ptr(), &mut pfn, &mut nr) };
            let Some(pgmap) = NonNull::new(pgmap) else {
                continue;
            };
            // INVARIANT: the page map, referenced by `rsrdma_p2p_get`, of `nr` frames from
            // `pfn` in a BAR of `dev`, which gets a reference of its own here.
            let mem = PeerMem {
                pgmap,
                // SAFETY: a referenced PCI device; the new reference is the value's.
                pdev: unsafe { NonNull::new_unchecked(bindings::rsrdma_pci_dev_get(pdev)) },
                pfn: pfn as u64,
                nr: nr as u64,
            };
            let pushed = match Arc::new(mem, GFP_KERNEL) {
                Ok(m) => found.push(m, GFP_KERNEL),
                Err(e) => Err(e),
            };
            if let Err(e) = pushed {
                // SAFETY: the reference the loop holds.
                unsafe { bindings::rsrdma_pci_dev_put(pdev) };
                return Err(e.into());
            }
        }
    }

    /// The provider's PCI name (`0000:00:04.0`).
    pub(crate) fn name(&self) -> &CStr {
        // SAFETY: a referenced device (type invariant), whose name is its device's, as long
        // lived as the reference.
        unsafe { CStr::from_char_ptr(bindings::rsrdma_pci_name(self.pdev.as_ptr())) }
    }

    /// Its size in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.nr << kernel::page::PAGE_SHIFT
    }

    /// Its physical address.
    pub(crate) fn phys(&self) -> u64 {
        self.pfn << kernel::page::PAGE_SHIFT
    }

    /// Its provider.
    pub(crate) fn provider(&self) -> Provider {
        Provider(self.pdev.as_ptr() as usize)
    }

    /// How `dev` reaches the memory; `EREMOTEIO` if it cannot.
    pub(crate) fn reach(&self, dev: &Device) -> Result<Reach> {
        // SAFETY: a registered RDMA device (`Device` invariant) and a referenced PCI device.
        match unsafe { bindings::rsrdma_p2p_reach(dev.as_ptr(), self.pdev.as_ptr()) } {
            1 => Ok(Reach::Dma),
            2 => Ok(Reach::Cpu),
            e if e < 0 => Err(Error::from_errno(e)),
            _ => Err(EINVAL),
        }
    }
}

impl Locate for PeerMem {
    fn locate(&self, pfn: u64, offset: u32, len: u32) -> Option<u64> {
        let shift = kernel::page::PAGE_SHIFT;
        let at = pfn
            .checked_sub(self.pfn)?
            .checked_shl(shift as u32)?
            .checked_add(u64::from(offset))?;
        (at.checked_add(u64::from(len))? <= self.len()).then_some(at)
    }
}

impl Drop for PeerMem {
    fn drop(&mut self) {
        // SAFETY: the references this value holds (type invariant).
        unsafe {
            bindings::rsrdma_p2p_put(self.pgmap.as_ptr());
            bindings::rsrdma_pci_dev_put(self.pdev.as_ptr());
        }
    }
}

/// A provider's memory mapped for one RDMA device in pieces of `1 << piece_shift` bytes, which
/// holds the memory and the device.
///
/// # Invariants
///
/// `sgt` is a table mapped by `rsrdma_p2p_map` for `dev`, of the pages of `mem` in order, to
/// be unmapped and freed on drop.
pub(crate) struct PeerMap {
    sgt: KBox<bindings::sg_table>,
    dev: DeviceRef,
    mem: Arc<PeerMem>,
    piece: u64,
}

// SAFETY: the table is only read after mapping, and unmapped on drop, from any thread.
unsafe impl Send for PeerMap {}
// SAFETY: as above.
unsafe impl Sync for PeerMap {}

impl PeerMap {
    /// Maps `mem` for `dev` in pieces of `1 << shift` bytes (`EINVAL` unless they divide its
    /// place and size); `EREMOTEIO` when the DMA API cannot map it for `dev`.
    pub(crate) fn map(dev: &Device, mem: Arc<PeerMem>, shift: u32) -> Result<Self> {
        if shift > 31 || mem.phys().trailing_zeros() < shift || mem.len().trailing_zeros() < shift {
            return Err(EINVAL);
        }
        let dev = dev.get().ok_or(ENODEV)?;
        let mut sgt = KBox::new(bindings::sg_table::default(), GFP_KERNEL)?;
        // SAFETY: a registered device (held by `dev`), an empty table this call fills, and the
        // page frames of peer memory held by `mem`.
        kernel::error::to_result(unsafe {
            bindings::rsrdma_p2p_map(dev.as_ptr(), &mut *sgt, mem.pfn as _, mem.nr as _, shift)
        })?;
        // INVARIANT: mapped above, for `dev`, the pages of `mem` in order.
        Ok(Self {
            sgt,
            dev,
            mem,
            piece: 1 << shift,
        })
    }

    /// The size of each piece.
    pub(crate) fn piece(&self) -> u64 {
        self.piece
    }

    /// The mapped memory.
    pub(crate) fn mem(&self) -> &Arc<PeerMem> {
        &self.mem
    }

    /// The mapped table: its first entry and its number of mapped entries.
    pub(in crate::wrap) fn sg(&self) -> (*mut bindings::scatterlist, u32) {
        (self.sgt.sgl, self.sgt.nents)
    }
}

impl Drop for PeerMap {
    fn drop(&mut self) {
        // SAFETY: mapped for `dev`, which is still registered (held), by `rsrdma_p2p_map`
        // (type invariant).
        unsafe { bindings::rsrdma_p2p_unmap(self.dev.as_ptr(), &mut *self.sgt) };
    }
}

/// What the owner of a [`ProviderWatch`] does as PCI devices' drivers go. Runs in process
/// context, in the driver core's unbinding, which waits for it.
pub(crate) trait ProviderHandler: Send + Sync + 'static {
    /// `provider`'s driver is about to be unbound: it will release the peer memory it
    /// published, waiting for every reference to it to go.
    fn leaving(provider: Provider);
    /// `provider`'s driver is unbound, or the device is gone: the identity may be reused.
    fn gone(provider: Provider);
}

/// PCI device events delivered to `H`, from initialization until drop.
///
/// # Invariants
///
/// `nb` is registered as a notifier of the PCI bus with [`pci_bus_event::<H>`] from
/// initialization until `registered` is cleared, by [`ProviderWatch::unregister`] or `drop`,
/// which unregister it.
#[pin_data(PinnedDrop)]
pub(crate) struct ProviderWatch<H: ProviderHandler> {
    #[pin]
    nb: Opaque<bindings::notifier_block>,
    /// Whether `nb` is still registered (see [`ProviderWatch::unregister`]).
    registered: AtomicBool,
    _handler: PhantomData<H>,
}

// SAFETY: the driver core owns the notifier's linkage; there is nothing else.
unsafe impl<H: ProviderHandler> Send for ProviderWatch<H> {}
// SAFETY: as above.
unsafe impl<H: ProviderHandler> Sync for ProviderWatch<H> {}

impl<H: ProviderHandler> ProviderWatch<H> {
    /// Starts watching the PCI bus.
    pub(crate) fn new() -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            registered: AtomicBool::new(true),
            _handler: PhantomData,
            // SAFETY: the block is initialized in place, then registered; it stays pinned
            // until `drop` unregisters it. On failure it was not registered.
            nb <- unsafe {
                kernel::init::pin_init_from_closure(|slot: *mut Opaque<bindings::notifier_block>| {
                    let nb = Opaque::raw_get(slot);
                    nb.write(bindings::notifier_block {
                        notifier_call: Some(pci_bus_event::<H>),
                        ..Default::default()
                    });
                    kernel::error::to_result(bindings::rsrdma_pci_bus_notifier(nb, true))
                })
            },
        }? Error)
    }
}

impl<H: ProviderHandler> ProviderWatch<H> {
    /// Stops the watch: unregisters the notifier, waiting for a call that runs. Must not be
    /// called from the handler (the chain's lock is held there).
    pub(crate) fn unregister(&self) {
        if self.registered.swap(false, Ordering::AcqRel) {
            // SAFETY: registered until now (type invariant), unregistered once (the flag).
            unsafe { bindings::rsrdma_pci_bus_notifier(self.nb.get(), false) };
        }
    }
}

#[pinned_drop]
impl<H: ProviderHandler> PinnedDrop for ProviderWatch<H> {
    fn drop(self: Pin<&mut Self>) {
        self.unregister();
    }
}

/// The notifier function of every [`ProviderWatch<H>`].
///
/// # Safety
///
/// Called by the driver core's PCI bus notifier chain with a device event of a PCI device.
unsafe extern "C" fn pci_bus_event<H: ProviderHandler>(
    _nb: *mut bindings::notifier_block,
    action: c_ulong,
    data: *mut c_void,
) -> c_int {
    let mut pdev = core::ptr::null_mut();
    // SAFETY: `data` is the event's device, a PCI device (per the contract).
    let what = unsafe { bindings::rsrdma_pci_bus_event(action, data, &mut pdev) };
    let provider = Provider(pdev as usize);
    match what {
        1 => H::leaving(provider),
        2 => H::gone(provider),
        _ => {}
    }
    // NOTIFY_DONE: nothing to say to the chain.
    0
}
