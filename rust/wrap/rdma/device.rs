// SPDX-License-Identifier: GPL-2.0

//! RDMA devices: a borrowed [`Device`], a counted [`DeviceRef`] that keeps one registered, and
//! a [`DeviceId`] that only tells devices apart.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).

use super::super::bindings;
use core::ptr::NonNull;
use kernel::str::CStr;
use kernel::types::Opaque;

/// An RDMA device (`struct ib_device`).
///
/// # Invariants
///
/// A `&Device` refers to a device that stays registered for the reference's lifetime: one the
/// RDMA core passes to a callback (for the call), one a CM id is bound to (while the id
/// exists: the device's removal waits for the id), or one a [`DeviceRef`] holds.
#[repr(transparent)]
pub(crate) struct Device(Opaque<bindings::ib_device>);

// SAFETY: an `ib_device` is shared by the whole RDMA stack; the methods here read attributes
// set at registration or call functions that lock for themselves.
unsafe impl Send for Device {}
// SAFETY: as above.
unsafe impl Sync for Device {}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        self.id() == other.id()
    }
}

impl Device {
    /// The device at `ptr`, if not null.
    ///
    /// # Safety
    ///
    /// A non-null `ptr` is a device that stays registered for `'a`.
    pub(in crate::wrap) unsafe fn from_raw<'a>(ptr: *mut bindings::ib_device) -> Option<&'a Self> {
        // SAFETY: a transparent wrapper; per the contract.
        unsafe { ptr.cast::<Self>().as_ref() }
    }

    pub(in crate::wrap) fn as_ptr(&self) -> *mut bindings::ib_device {
        self.0.get()
    }

    fn attrs(&self) -> &bindings::ib_device_attr {
        // SAFETY: registered (type invariant); `attrs` is set before registration and not
        // changed after.
        unsafe { &(*self.as_ptr()).attrs }
    }

    /// What tells this device apart from others while it is registered.
    pub(crate) fn id(&self) -> DeviceId {
        DeviceId(self.as_ptr() as usize)
    }

    /// A counted reference that keeps the device registered; `None` if it is being removed.
    pub(crate) fn get(&self) -> Option<DeviceRef> {
        // SAFETY: registered (type invariant).
        if !unsafe { bindings::rsrdma_ib_device_try_get(self.as_ptr()) } {
            return None;
        }
        // INVARIANT: the reference taken above.
        Some(DeviceRef(NonNull::from(self)))
    }

    /// The device name, e.g. `rxe0`.
    pub(crate) fn name(&self) -> &CStr {
        // SAFETY: the name lives as long as the registered device.
        unsafe { CStr::from_char_ptr(bindings::rsrdma_ibdev_name(self.as_ptr())) }
    }

    pub(crate) fn max_fast_reg_page_list_len(&self) -> u32 {
        self.attrs().max_fast_reg_page_list_len
    }

    /// What an MR of this device needs of its [`Self::max_fast_reg_page_list_len`] to map
    /// `pages` pages given as `entries` scatterlist entries: the pages, or on siw, which keeps
    /// an entry per scatterlist entry whatever its length, the entries.
    pub(crate) fn mr_slots(&self, pages: u64, entries: u64) -> u64 {
        // SAFETY: registered (type invariant); the call only reads the device's ops.
        if unsafe { bindings::rsrdma_ib_mr_limit_in_entries(self.as_ptr()) } {
            entries
        } else {
            pages
        }
    }

    /// The most gather elements a send work request may have on this device.
    pub(crate) fn max_send_sge(&self) -> u32 {
        self.attrs().max_send_sge.max(0) as u32
    }

    pub(crate) fn max_qp_rd_atom(&self) -> i32 {
        self.attrs().max_qp_rd_atom
    }

    pub(crate) fn page_size_cap(&self) -> u64 {
        self.attrs().page_size_cap
    }

    /// The largest buffer one DMA mapping on this device can cover.
    pub(crate) fn max_mapping_size(&self) -> usize {
        // SAFETY: registered (type invariant).
        unsafe { bindings::rsrdma_dma_max_mapping_size(self.as_ptr()) }
    }

    /// Whether the device may be given PCI peer-to-peer memory at all: it maps it for DMA the
    /// peer-to-peer way, or it is soft-RoCE, which copies payloads with the CPU through the
    /// kernel's mapping (not siw). Whether it reaches one provider's is
    /// [`crate::wrap::peer_mem`]'s.
    pub(crate) fn takes_peer_mem(&self) -> bool {
        // SAFETY: a registered device (type invariant).
        unsafe { bindings::rsrdma_ib_p2p_capable(self.as_ptr()) }
    }

    /// Whether the device supports memory registration work requests (FRWR).
    pub(crate) fn has_mem_mgt_extensions(&self) -> bool {
        self.attrs().device_cap_flags
            & bindings::ib_device_cap_flags_IB_DEVICE_MEM_MGT_EXTENSIONS as u64
            != 0
    }

    /// Whether port `port` is up. Nothing may be sent through the CM (which uses the GSI QP)
    /// while it is down: soft-RoCE moves its GSI QP to the error state for good when a MAD
    /// send fails, which leaves every CM connection on the device dead until it is re-created.
    /// The core's cached port state lags behind a netdev being stopped, whose failing sends
    /// are often what starts error recovery, so the netdev under the port is checked too.
    pub(crate) fn port_active(&self, port: u32) -> bool {
        let mut state = bindings::ib_port_state_IB_PORT_NOP;
        // SAFETY: registered; `state` is a valid output.
        let ret = unsafe { bindings::ib_get_cached_port_state(self.as_ptr(), port, &mut state) };
        // SAFETY: registered; the helper takes and drops its own netdev reference.
        ret == 0
            && state == bindings::ib_port_state_IB_PORT_ACTIVE
            && unsafe { bindings::rsrdma_port_netdev_up(self.as_ptr(), port) }
    }

    /// The ports that are down, one bit per port number below 64.
    pub(crate) fn ports_down(&self) -> u64 {
        // SAFETY: registered (type invariant).
        unsafe { bindings::rsrdma_ports_down(self.as_ptr()) }
    }

    pub(crate) fn num_comp_vectors(&self) -> i32 {
        // SAFETY: registered (type invariant); set at registration.
        unsafe { (*self.as_ptr()).num_comp_vectors }
    }

    pub(crate) fn numa_node(&self) -> i32 {
        // SAFETY: registered (type invariant).
        unsafe { bindings::rsrdma_ibdev_to_node(self.as_ptr()) }
    }
}

/// A counted reference to an RDMA device (`ib_device_try_get`): the device's unregistration
/// waits for it (after the clients' `remove`, which releases everything on the device first).
///
/// # Invariants
///
/// Holds one reference to a registered device, dropped by `Drop`.
pub(crate) struct DeviceRef(NonNull<Device>);

// SAFETY: a counted reference to a device, which is `Sync`; it may be dropped on any thread.
unsafe impl Send for DeviceRef {}
// SAFETY: as above.
unsafe impl Sync for DeviceRef {}

impl core::ops::Deref for DeviceRef {
    type Target = Device;

    fn deref(&self) -> &Device {
        // SAFETY: registered while the reference is held (type invariant).
        unsafe { self.0.as_ref() }
    }
}

impl Clone for DeviceRef {
    fn clone(&self) -> Self {
        // SAFETY: registered while `self` holds its reference, so the count is not zero.
        unsafe { bindings::rsrdma_ib_device_try_get(self.as_ptr()) };
        // INVARIANT: the reference taken above.
        Self(self.0)
    }
}

impl Drop for DeviceRef {
    fn drop(&mut self) {
        // SAFETY: the reference this holds (type invariant).
        unsafe { bindings::ib_device_put(self.as_ptr()) };
    }
}

/// What tells RDMA devices apart: a device's address, never dereferenced. Two devices
/// registered at once have different identities; a device registered after another one was
/// removed may have that one's identity.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct DeviceId(usize);

impl DeviceId {
    /// No device.
    pub(crate) const NONE: Self = Self(0);

    /// The identity as a number, to keep in an atomic.
    pub(crate) fn to_bits(self) -> usize {
        self.0
    }

    /// The identity [`DeviceId::to_bits`] gave.
    pub(crate) fn from_bits(bits: usize) -> Self {
        Self(bits)
    }
}
