// SPDX-License-Identifier: GPL-2.0

//! Owned RDMA CM and verbs objects.
//!
//! Each type owns one object of the RDMA core and releases it on drop, so a connection is torn
//! down by dropping its parts in the right order (see `queue::Conn`). The kernel crate of 6.12
//! has no RDMA abstractions; these are the minimum the transport needs.

use crate::bindings;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use kernel::error::{from_err_ptr, to_result};
use kernel::ffi::c_void;
use kernel::prelude::*;
use kernel::str::CStr;
use kernel::types::Opaque;

/// The object a C constructor returned: an error pointer becomes its error, and a null one
/// (which the constructors used here do not return) `ENOMEM`.
fn created<T>(ptr: *mut T) -> Result<NonNull<T>> {
    NonNull::new(from_err_ptr(ptr)?).ok_or(ENOMEM)
}

/// Converts a negative errno from the RDMA core into an [`Error`].
pub(crate) fn errno(ret: i32) -> Result {
    to_result(ret)
}

/// An RDMA device, valid while a connection of ours uses it: the ib_client `remove` callback
/// tears down every connection on a device before it goes away.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Device(NonNull<bindings::ib_device>);

// SAFETY: an `ib_device` is shared by the whole RDMA stack; the attributes read here do not
// change after registration.
unsafe impl Send for Device {}
// SAFETY: as above.
unsafe impl Sync for Device {}

impl Device {
    /// Wraps a device pointer from the RDMA core (CM id, client callback); `None` for null.
    ///
    /// # Safety
    ///
    /// A non-null `dev` must be a registered device that stays registered for as long as the
    /// handle is used.
    pub(crate) unsafe fn from_raw(dev: *mut bindings::ib_device) -> Option<Self> {
        NonNull::new(dev).map(Self)
    }

    pub(crate) fn as_ptr(self) -> *mut bindings::ib_device {
        self.0.as_ptr()
    }

    fn attrs(&self) -> &bindings::ib_device_attr {
        // SAFETY: the device is alive (type invariant) and `attrs` is set at registration.
        unsafe { &(*self.0.as_ptr()).attrs }
    }

    /// The device name, e.g. `rxe0`.
    pub(crate) fn name(&self) -> &CStr {
        // SAFETY: the name lives as long as the registered device.
        unsafe { CStr::from_char_ptr(bindings::rsrdma_ibdev_name(self.0.as_ptr())) }
    }

    pub(crate) fn max_fast_reg_page_list_len(&self) -> u32 {
        self.attrs().max_fast_reg_page_list_len
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
        // SAFETY: the device is alive (type invariant).
        unsafe { bindings::rsrdma_dma_max_mapping_size(self.0.as_ptr()) }
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
        // SAFETY: the device is alive; `state` is a valid output.
        let ret = unsafe { bindings::ib_get_cached_port_state(self.as_ptr(), port, &mut state) };
        // SAFETY: the device is alive; the helper takes and drops its own netdev reference.
        ret == 0
            && state == bindings::ib_port_state_IB_PORT_ACTIVE
            && unsafe { bindings::rsrdma_port_netdev_up(self.as_ptr(), port) }
    }

    pub(crate) fn num_comp_vectors(&self) -> i32 {
        // SAFETY: the device is alive (type invariant).
        unsafe { (*self.0.as_ptr()).num_comp_vectors }
    }

    pub(crate) fn numa_node(&self) -> i32 {
        // SAFETY: the device is alive (type invariant).
        unsafe { bindings::rsrdma_ibdev_to_node(self.0.as_ptr()) }
    }

    /// Maps `len` bytes at `cpu_addr` for DMA in direction `dir`.
    ///
    /// # Safety
    ///
    /// `cpu_addr` must point to `len` bytes of kernel memory that outlive the returned mapping.
    pub(crate) unsafe fn map_single(
        self,
        cpu_addr: *mut c_void,
        len: usize,
        dir: DmaDir,
    ) -> Result<DmaMap> {
        // SAFETY: per the contract, `len` bytes at `cpu_addr` outlive the mapping.
        let addr =
            unsafe { bindings::rsrdma_dma_map_single(self.as_ptr(), cpu_addr, len, dir.raw()) };
        self.mapped(addr, len, dir)
    }

    /// Maps `range` for the device to read. The mapping is one `DmaMap` like any other: the
    /// DMA API unmaps a page mapping and a single one alike (`dma_unmap_single` is
    /// `dma_unmap_page`).
    ///
    /// # Safety
    ///
    /// The pages of `range` must outlive the returned mapping.
    pub(crate) unsafe fn map_pages(self, range: PageRange) -> Result<DmaMap> {
        let dir = DmaDir::ToDevice;
        // SAFETY: per the contract, the range's pages outlive the mapping.
        let addr = unsafe {
            bindings::rsrdma_dma_map_page(
                self.as_ptr(),
                range.page.as_ptr(),
                range.offset,
                range.len,
                dir.raw(),
            )
        };
        self.mapped(addr, range.len as usize, dir)
    }

    /// The mapping at `addr` that a mapping call of this device returned, or `ENOMEM` if it
    /// failed.
    fn mapped(self, addr: u64, len: usize, dir: DmaDir) -> Result<DmaMap> {
        // SAFETY: `addr` came from this device's mapping call.
        if unsafe { bindings::rsrdma_dma_mapping_error(self.as_ptr(), addr) } != 0 {
            return Err(ENOMEM);
        }
        Ok(DmaMap {
            dev: self,
            addr,
            len,
            dir,
        })
    }
}

/// A physically contiguous range of memory given by its first page (a piece of a request's
/// data, see [`OwnedRq::ranges`](crate::request::OwnedRq::ranges)).
#[derive(Clone, Copy)]
pub(crate) struct PageRange {
    pub(crate) page: NonNull<bindings::page>,
    pub(crate) offset: u32,
    pub(crate) len: u32,
}

impl PageRange {
    /// A placeholder for the unused entries of an array of ranges; it names no memory.
    pub(crate) const EMPTY: Self = Self {
        page: NonNull::dangling(),
        offset: 0,
        len: 0,
    };
}

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

/// A streaming DMA mapping of one buffer; unmapped on drop.
pub(crate) struct DmaMap {
    dev: Device,
    addr: u64,
    len: usize,
    dir: DmaDir,
}

impl DmaMap {
    /// The bus address of the start of the buffer.
    pub(crate) fn addr(&self) -> u64 {
        self.addr
    }

    /// The whole mapping as a local SGE through `lkey`, a key that covers DMA-mapped memory
    /// (the PD's local DMA key).
    pub(crate) fn sge(&self, lkey: u32) -> bindings::ib_sge {
        bindings::ib_sge {
            addr: self.addr,
            length: self.len as u32,
            lkey,
        }
    }

    /// Whether `[offset, offset + len)` lies in the mapping.
    fn holds(&self, offset: usize, len: usize) -> bool {
        offset.checked_add(len).is_some_and(|end| end <= self.len)
    }

    /// Hands `[offset, offset + len)` to the CPU; a range outside the mapping is ignored.
    pub(crate) fn sync_for_cpu(&self, offset: usize, len: usize) {
        if !self.holds(offset, len) {
            return;
        }
        // SAFETY: the range is inside the mapping, checked above.
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
    pub(crate) fn sync_for_device(&self, offset: usize, len: usize) {
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
        // SAFETY: mapped in `Device::map_single` or `Device::map_pages` with these parameters.
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

/// An RDMA CM identifier of an RC connection, and the QP created on it (`rdma_create_qp`),
/// which it owns: dropping the id destroys the QP first.
pub(crate) struct CmId(NonNull<bindings::rdma_cm_id>);

// SAFETY: the RDMA CM serializes operations on an id internally; the handle can be used and
// dropped from any thread (not from its own event handler, see `Drop`).
unsafe impl Send for CmId {}
// SAFETY: as above.
unsafe impl Sync for CmId {}

/// The signature of a CM event handler.
pub(crate) type CmHandler =
    unsafe extern "C" fn(*mut bindings::rdma_cm_id, *mut bindings::rdma_cm_event) -> i32;

impl CmId {
    /// Creates an id whose events go to `handler` with `context`.
    ///
    /// # Safety
    ///
    /// `context` must stay valid for `handler` until the `CmId` is dropped.
    pub(crate) unsafe fn new(handler: CmHandler, context: *mut c_void) -> Result<Self> {
        // SAFETY: the glue calls rdma_create_id for a kernel RC id in init_net.
        Ok(Self(created(unsafe {
            bindings::rsrdma_create_id(Some(handler), context)
        })?))
    }

    pub(crate) fn as_ptr(&self) -> *mut bindings::rdma_cm_id {
        self.0.as_ptr()
    }

    /// Starts address resolution; the result arrives as a CM event.
    pub(crate) fn resolve_addr(
        &self,
        src: Option<&bindings::__kernel_sockaddr_storage>,
        dst: &bindings::__kernel_sockaddr_storage,
        timeout_ms: u32,
    ) -> Result {
        let src = src.map_or(core::ptr::null_mut(), |s| {
            s as *const _ as *mut bindings::sockaddr
        });
        // SAFETY: the id is owned; the addresses are valid sockaddrs that rdma_resolve_addr
        // copies before returning.
        errno(unsafe {
            bindings::rdma_resolve_addr(
                self.as_ptr(),
                src,
                (dst as *const bindings::__kernel_sockaddr_storage).cast::<bindings::sockaddr>(),
                timeout_ms as usize,
            )
        })
    }

    /// Starts route resolution; the result arrives as a CM event.
    pub(crate) fn resolve_route(&self, timeout_ms: u32) -> Result {
        // SAFETY: the id is owned and its address is resolved (called on ADDR_RESOLVED).
        errno(unsafe { bindings::rdma_resolve_route(self.as_ptr(), timeout_ms as usize) })
    }

    /// Sets the IP type of service of the connection.
    pub(crate) fn set_tos(&self, tos: u8) {
        // SAFETY: the id is owned.
        unsafe { bindings::rdma_set_service_type(self.as_ptr(), tos.into()) };
    }

    /// The device the id is bound to, once its address is resolved.
    pub(crate) fn device(&self) -> Option<Device> {
        // SAFETY: the id is owned; `device` is set by address resolution, and the device stays
        // registered while an id is bound to it (its removal waits for the id's destruction).
        unsafe { Device::from_raw((*self.as_ptr()).device) }
    }

    /// The device port the id is bound to, once its address is resolved.
    pub(crate) fn port_num(&self) -> u32 {
        // SAFETY: the id is owned.
        unsafe { (*self.as_ptr()).port_num }
    }

    /// Whether the id's port is up (see [`Device::port_active`]).
    pub(crate) fn port_active(&self) -> bool {
        self.device()
            .is_some_and(|d| d.port_active(self.port_num()))
    }

    /// Sends the connect request; the outcome arrives as a CM event. Not for use from the id's
    /// own event handler (it takes the handler lock).
    pub(crate) fn connect(&self, param: &bindings::rdma_conn_param) -> Result {
        // SAFETY: the id is owned and has a QP; the CM copies `param` and its private data.
        errno(unsafe { bindings::rdma_connect(self.as_ptr(), param as *const _ as *mut _) })
    }

    /// Starts a disconnect (DREQ); harmless if not connected.
    pub(crate) fn disconnect(&self) {
        // SAFETY: the id is owned.
        unsafe { bindings::rdma_disconnect(self.as_ptr()) };
    }

    /// Creates the RC QP of this id on `pd`. The id and its QP then travel together as a
    /// [`CmQp`]; on failure the id comes back without a QP.
    ///
    /// # Safety
    ///
    /// The CQs named in `attr` must outlive the QP, that is, the [`CmQp`] or its `destroy_qp`.
    pub(crate) unsafe fn create_qp(
        self,
        pd: &Pd,
        attr: &mut bindings::ib_qp_init_attr,
    ) -> core::result::Result<CmQp, (CmId, Error)> {
        // SAFETY: the id is owned and bound to the PD's device; `attr` is valid.
        let ret = unsafe { bindings::rdma_create_qp(self.as_ptr(), pd.as_ptr(), attr) };
        if let Err(e) = errno(ret) {
            return Err((self, e));
        }
        // SAFETY: the id is owned; rdma_create_qp succeeded and set `qp`.
        match NonNull::new(unsafe { (*self.as_ptr()).qp }) {
            Some(qp) => Ok(CmQp { id: self, qp }),
            None => Err((self, ENOMEM)),
        }
    }

    /// Detaches the id from its event handler's context: later events find a null context and
    /// are ignored, so the id can outlive what the context pointed to.
    pub(crate) fn detach(&self) {
        // SAFETY: owned id; the handler lock orders this write with running handlers.
        unsafe {
            bindings::rdma_lock_handler(self.as_ptr());
            (*self.as_ptr()).context = core::ptr::null_mut();
            bindings::rdma_unlock_handler(self.as_ptr());
        }
    }

    /// Destroys the QP of this id, if it has one, keeping the id. Private: a QP is only
    /// reachable through the [`CmQp`] that `create_qp` returned, whose `destroy_qp` consumes it.
    fn destroy_qp(&self) {
        // SAFETY: the id is owned; `qp` is set by rdma_create_qp and cleared by
        // rdma_destroy_qp.
        if !unsafe { (*self.as_ptr()).qp }.is_null() {
            // SAFETY: owned id with a QP; rdma_destroy_qp clears `qp` under the id's lock, so
            // the CM never touches the destroyed QP. No handle to the QP is left: the only one
            // was the `CmQp` this id was part of.
            unsafe { bindings::rdma_destroy_qp(self.as_ptr()) };
        }
    }
}

/// An event the RDMA CM passes to a CM id's handler, with the id; valid for the call.
pub(crate) struct CmEvent<'a> {
    /// Not a reference: the CM and the id's owner write other fields of the id meanwhile
    /// (its QP, its route).
    id: NonNull<bindings::rdma_cm_id>,
    ev: &'a bindings::rdma_cm_event,
}

/// What a rejection carries (see [`CmEvent::rejected`]).
pub(crate) struct Rejection<'a> {
    /// The CM's reason for the status (`rdma_reject_msg`).
    pub(crate) cm_msg: &'static CStr,
    /// The private data the peer's consumer put in it (`rdma_consumer_reject_data`).
    pub(crate) data: Option<&'a [u8]>,
}

impl<'a> CmEvent<'a> {
    /// # Safety
    ///
    /// `id` and `ev` are the arguments of a running CM event handler, and `'a` ends with the
    /// call.
    pub(crate) unsafe fn from_raw(
        id: *mut bindings::rdma_cm_id,
        ev: *mut bindings::rdma_cm_event,
    ) -> Self {
        Self {
            // SAFETY: per the contract, the id is not null.
            id: unsafe { NonNull::new_unchecked(id) },
            // SAFETY: per the contract; the CM does not change the event during the call.
            ev: unsafe { &*ev },
        }
    }

    /// The context the id was created with; null once detached (see [`CmId::detach`]).
    pub(crate) fn context(&self) -> *mut c_void {
        // SAFETY: a valid id; `context` changes only under the handler lock, which the CM
        // holds while the handler runs.
        unsafe { core::ptr::addr_of!((*self.id.as_ptr()).context).read() }
    }

    pub(crate) fn event(&self) -> bindings::rdma_cm_event_type {
        self.ev.event
    }

    pub(crate) fn status(&self) -> i32 {
        self.ev.status
    }

    /// The reason and private data of a `REJECTED` event; `None` for any other event.
    pub(crate) fn rejected(&self) -> Option<Rejection<'a>> {
        if self.event() != bindings::rdma_cm_event_type_RDMA_CM_EVENT_REJECTED {
            return None;
        }
        let (id, ev) = (self.id.as_ptr(), self.ev as *const _ as *mut _);
        let mut len = 0u8;
        // SAFETY: a rejection comes from the peer, on an id bound to a device (the calls read
        // it); both calls only read the id and the event, and return a static string and
        // `len` bytes of private data that live as long as the event.
        let (cm_msg, data) = unsafe {
            (
                CStr::from_char_ptr(bindings::rdma_reject_msg(id, self.status())),
                bindings::rdma_consumer_reject_data(id, ev, &mut len),
            )
        };
        Some(Rejection {
            cm_msg,
            // SAFETY: as above.
            data: (!data.is_null())
                .then(|| unsafe { core::slice::from_raw_parts(data.cast::<u8>(), len.into()) }),
        })
    }

    /// The device the id is bound to, if it is.
    pub(crate) fn device(&self) -> Option<Device> {
        // SAFETY: a valid id; `device` is set once the id is bound and does not change while
        // the handler runs, and the device's removal waits for this handler.
        unsafe { Device::from_raw(core::ptr::addr_of!((*self.id.as_ptr()).device).read()) }
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        self.destroy_qp();
        // SAFETY: owned id. rdma_destroy_id waits for a running event handler, so this must
        // not run from the handler itself; no `CmId` is dropped there.
        unsafe { bindings::rdma_destroy_id(self.as_ptr()) };
    }
}

/// A protection domain.
pub(crate) struct Pd(NonNull<bindings::ib_pd>);

// SAFETY: a PD is used by reference from many queues; the verbs core is thread safe for it.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Pd {
    pub(crate) fn new(dev: Device) -> Result<Self> {
        // SAFETY: `dev` is alive.
        Ok(Self(created(unsafe {
            bindings::rsrdma_alloc_pd(dev.as_ptr())
        })?))
    }

    pub(crate) fn as_ptr(&self) -> *mut bindings::ib_pd {
        self.0.as_ptr()
    }

    /// The lkey for local access to DMA-mapped memory.
    pub(crate) fn local_dma_lkey(&self) -> u32 {
        // SAFETY: the PD is owned.
        unsafe { (*self.as_ptr()).local_dma_lkey }
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: owned; every QP and MR on it was dropped first (field order of the owners).
        unsafe { bindings::rsrdma_dealloc_pd(self.as_ptr()) };
    }
}

/// The most commands a queue may have outstanding for a completion event raised in process
/// context to start its poll at once (see [`Cq::softirq`]). A software provider (soft-RoCE)
/// signals completions from a kernel thread, where raising the poll's softirq wakes ksoftirqd:
/// two context switches before the completion is handled. With one command in flight someone
/// is waiting on exactly that completion, so the poll is started from a self-interrupt
/// instead; with more, letting ksoftirqd gather the completions that arrive meanwhile costs
/// less per command (4 KiB random reads at QD32 and QD4 came out slower when every event was
/// handled at once).
const PROMPT_IN_FLIGHT: u32 = 1;

/// Completions handled per scheduled poll before it yields (as the RDMA core's softirq CQs).
const POLL_BUDGET: i32 = 256;

/// A completion queue of one connection: polled by this module in softirq context, or, for
/// poll queues, directly by blk-mq.
pub(crate) struct Cq {
    cq: NonNull<bindings::ib_cq>,
    /// The softirq poller; `None` for a directly polled CQ. Dropped after the CQ.
    poller: Option<Pin<KBox<Poller>>>,
}

/// What runs the polls of a softirq CQ: an `irq_poll` instance, as the RDMA core's
/// `IB_POLL_SOFTIRQ` CQs have, and a self-interrupt to schedule it from (see
/// [`PROMPT_IN_FLIGHT`]).
#[pin_data]
struct Poller {
    #[pin]
    iop: Opaque<bindings::irq_poll>,
    #[pin]
    kick: Opaque<bindings::irq_work>,
    /// The CQ, set once it exists and before it is armed: no poll is scheduled before.
    cq: AtomicPtr<bindings::ib_cq>,
    /// The polls running (`poll_cq`). A poll ends its instance (`irq_poll_complete`) before
    /// it re-arms the CQ, so `irq_poll_disable` can return while it still uses the CQ, and a
    /// completion after the arming can start a second poll on another CPU meanwhile:
    /// `Cq::drop` waits for the count to fall to 0.
    polling: AtomicU32,
    /// The commands outstanding on the queue of the CQ; outlives the CQ (see
    /// [`Cq::softirq`]).
    in_flight: NonNull<AtomicU32>,
}

// SAFETY: the RDMA core and the poller's callbacks use the CQ from their own contexts; the
// handle is only used to create QPs, poll direct CQs (from any context: the provider's poll_cq
// serializes on the CQ, and each completion is handed to one caller) and release. The poller
// only reads `in_flight`, an atomic.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl Cq {
    /// Creates a CQ of `nr_cqe` entries polled in softirq context, from a self-interrupt when
    /// at most [`PROMPT_IN_FLIGHT`] commands are in flight (as `in_flight` counts them).
    ///
    /// # Safety
    ///
    /// `in_flight` must outlive the CQ.
    pub(crate) unsafe fn softirq(
        dev: Device,
        nr_cqe: u32,
        vector: i32,
        in_flight: &AtomicU32,
    ) -> Result<Self> {
        let poller = KBox::pin_init(
            pin_init!(Poller {
                // SAFETY: initialized in place and pinned; nothing schedules it before the CQ
                // is armed, and `Cq::drop` disables it before the box is freed.
                iop <- Opaque::ffi_init(|iop| unsafe {
                    bindings::irq_poll_init(iop, POLL_BUDGET, Some(poll_cq))
                }),
                // SAFETY: as above; `Cq::drop` waits for it before the box is freed.
                kick <- Opaque::ffi_init(|work| unsafe {
                    bindings::rsrdma_init_irq_work(work, Some(kick_poll))
                }),
                cq: AtomicPtr::new(core::ptr::null_mut()),
                polling: AtomicU32::new(0),
                in_flight: NonNull::from(in_flight),
            }),
            GFP_KERNEL,
        )?;
        let ctx = &*poller as *const Poller as *mut c_void;
        // SAFETY: `dev` is alive; `ctx` is the pinned poller, which outlives the CQ (see
        // `drop`), as the completion handler requires.
        let cq = created(unsafe {
            bindings::rsrdma_create_cq(dev.as_ptr(), Some(cq_event), ctx, nr_cqe as i32, vector)
        })?;
        poller.cq.store(cq.as_ptr(), Ordering::Release);
        let cq = Self {
            cq,
            poller: Some(poller),
        };
        // SAFETY: the CQ is ours and alive. Armed while empty (no QP uses it yet): the first
        // completion raises an event. A positive return (completions already there) cannot
        // be, and is no failure; on failure `cq` is dropped, which frees it.
        errno(unsafe { bindings::rsrdma_arm_cq(cq.as_ptr()) }.min(0))?;
        Ok(cq)
    }

    /// Allocates a CQ polled directly by the caller (blk-mq poll queues).
    pub(crate) fn direct(dev: Device, nr_cqe: u32, vector: i32, ctx: *mut c_void) -> Result<Self> {
        // SAFETY: `dev` is alive; `ctx` is stored, not dereferenced, by the core.
        let cq = created(unsafe {
            bindings::rsrdma_alloc_cq(
                dev.as_ptr(),
                ctx,
                nr_cqe as i32,
                vector,
                bindings::ib_poll_context_IB_POLL_DIRECT,
            )
        })?;
        Ok(Self { cq, poller: None })
    }

    pub(crate) fn as_ptr(&self) -> *mut bindings::ib_cq {
        self.cq.as_ptr()
    }

    /// Polls a direct CQ; returns the number of completions processed.
    pub(crate) fn poll_direct(&self, budget: i32) -> i32 {
        if self.poller.is_some() {
            return 0;
        }
        // SAFETY: a direct CQ owned by us, alive while `self` is. Callers may poll it at once
        // (blk-mq takes no lock around `poll`, a drain polls from teardown): the provider
        // serializes poll_cq, so each completion's handler runs once, on one of them.
        unsafe { bindings::ib_process_cq_direct(self.as_ptr(), budget) }
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        let Some(p) = &self.poller else {
            // SAFETY: owned, and the QPs using it were destroyed first.
            unsafe { bindings::ib_free_cq(self.as_ptr()) };
            return;
        };
        // The QPs using the CQ were destroyed first, so no completion arrives. Once the poller
        // is disabled nothing schedules a poll of the CQ (scheduling it does nothing), and
        // once `polling` is 0 none runs: a poll that had ended its instance may still have
        // been re-arming the CQ. Once the CQ is destroyed no event handler runs, and the sync
        // waits for a kick the last one raised. Then nothing refers to the poller.
        let kick = p.kick.get();
        // SAFETY: owned, initialized poller.
        unsafe { bindings::irq_poll_disable(p.iop.get()) };
        // Each poll counted itself before it ended its instance, whose release
        // `irq_poll_disable`'s test-and-set acquired.
        while p.polling.load(Ordering::Acquire) != 0 {
            // SAFETY: process context (a CQ is dropped where the queue is torn down).
            unsafe { bindings::msleep(1) };
        }
        // SAFETY: as said above; owned CQ.
        if unsafe { bindings::rsrdma_destroy_cq(self.as_ptr()) } != 0 {
            // Still in use: a QP on it was not destroyed, which the drop order of the
            // connection rules out (the glue warns). The CQ may still raise events, so its
            // poller is leaked; what the handler reads besides (the queue's in-flight count)
            // is not kept, so this only narrows the damage.
            core::mem::forget(self.poller.take());
            return;
        }
        // SAFETY: initialized; the CQ, whose handler queued it, is gone.
        unsafe { bindings::irq_work_sync(kick) };
    }
}

/// The completion event handler of a softirq CQ (see [`PROMPT_IN_FLIGHT`]).
///
/// # Safety
///
/// Called by the RDMA core with the CQ and the context it was created with.
unsafe extern "C" fn cq_event(_cq: *mut bindings::ib_cq, ctx: *mut c_void) {
    // SAFETY: `ctx` is the CQ's poller (`Cq::softirq`), alive until the CQ is destroyed.
    let p = unsafe { &*(ctx as *const Poller) };
    // SAFETY: `in_flight` outlives the CQ (contract of `Cq::softirq`).
    let in_flight = unsafe { p.in_flight.as_ref() }.load(Ordering::Relaxed);
    // SAFETY: no context requirement; says whether a softirq raised here runs on the way out
    // of this context rather than in ksoftirqd.
    if in_flight > PROMPT_IN_FLIGHT || unsafe { bindings::rsrdma_in_interrupt() } {
        // SAFETY: the poller is initialized and not yet disabled-and-freed (as above).
        unsafe { bindings::irq_poll_sched(p.iop.get()) };
    } else {
        // SAFETY: as above; `Cq::drop` syncs the work before the poller is freed.
        unsafe { bindings::irq_work_queue(p.kick.get()) };
    }
}

/// The self-interrupt of a softirq CQ: schedules its poll from hard interrupt context, so the
/// softirq runs on the way out of it.
///
/// # Safety
///
/// Called by the kernel with the work it was initialized for.
unsafe extern "C" fn kick_poll(work: *mut bindings::irq_work) {
    // SAFETY: `work` is the `kick` field of a live poller (`Cq::drop` syncs it first).
    let p = unsafe { &*kernel::container_of!(work, Poller, kick) };
    // SAFETY: scheduling a disabled poller does nothing; a live one is initialized.
    unsafe { bindings::irq_poll_sched(p.iop.get()) };
}

/// One poll of a softirq CQ, as the RDMA core polls its own: up to `budget` completions, each
/// handed to its `ib_cqe`; then re-armed, and scheduled again if completions came meanwhile.
///
/// # Safety
///
/// Called by the kernel with the instance it was initialized for.
unsafe extern "C" fn poll_cq(iop: *mut bindings::irq_poll, budget: i32) -> i32 {
    // SAFETY: `iop` is the `iop` field of a live poller: `Cq::drop` disables it and waits for
    // `polling` to clear before the CQ and the poller go.
    let p = unsafe { &*kernel::container_of!(iop, Poller, iop) };
    // Ordered before `irq_poll_complete` below by its release (see `Cq::drop`).
    p.polling.fetch_add(1, Ordering::Relaxed);
    let cq = p.cq.load(Ordering::Acquire);
    // SAFETY: the CQ exists (it was armed after `cq` was set, and only an event of it
    // schedules this poll) and is only polled here: irq_poll runs one poll of an instance at a
    // time.
    let done = unsafe { bindings::ib_process_cq_direct(cq, budget) };
    if done < budget {
        // SAFETY: as above; ends this poll, then re-arms the CQ, reporting completions that
        // arrived between the last poll and the arming.
        unsafe {
            bindings::irq_poll_complete(iop);
            if bindings::rsrdma_arm_cq(cq) > 0 {
                bindings::irq_poll_sched(iop);
            }
        }
    }
    // The last use of the CQ and the poller by this poll.
    p.polling.fetch_sub(1, Ordering::Release);
    done
}

/// A CM id and the RC queue pair created on it. The id owns the QP (dropping this destroys the
/// QP, then the id), and this is the only handle to the QP, so no use of it can outlive it.
pub(crate) struct CmQp {
    id: CmId,
    qp: NonNull<bindings::ib_qp>,
}

// SAFETY: posting work requests is thread safe in the verbs API; the id is `Send` and `Sync`.
unsafe impl Send for CmQp {}
// SAFETY: as above.
unsafe impl Sync for CmQp {}

impl core::ops::Deref for CmQp {
    type Target = CmId;

    fn deref(&self) -> &CmId {
        &self.id
    }
}

impl CmQp {
    fn qp_ptr(&self) -> *mut bindings::ib_qp {
        self.qp.as_ptr()
    }

    pub(crate) fn qp_num(&self) -> u32 {
        // SAFETY: the QP lives as long as `self` (type invariant).
        unsafe { (*self.qp_ptr()).qp_num }
    }

    /// Destroys the QP and gives back the id, which can be kept without it.
    pub(crate) fn destroy_qp(self) -> CmId {
        self.id.destroy_qp();
        self.id
    }

    /// Posts a chain of send work requests.
    ///
    /// # Safety
    ///
    /// Every buffer and `ib_cqe` the chain refers to must stay valid until its completion (or
    /// the QP is drained).
    pub(crate) unsafe fn post_send(&self, wr: &bindings::ib_send_wr) -> Result {
        // SAFETY: a live QP; the caller guarantees the lifetime of what `wr` refers to.
        errno(unsafe { bindings::rsrdma_post_send(self.qp_ptr(), wr) })
    }

    /// Posts a receive work request.
    ///
    /// # Safety
    ///
    /// As for [`CmQp::post_send`].
    pub(crate) unsafe fn post_recv(&self, wr: &bindings::ib_recv_wr) -> Result {
        // SAFETY: as above.
        errno(unsafe { bindings::rsrdma_post_recv(self.qp_ptr(), wr) })
    }

    /// Moves the QP to the error state and waits until every posted work request completed.
    pub(crate) fn drain(&self) {
        // SAFETY: a live QP whose CQ is alive.
        unsafe { bindings::ib_drain_qp(self.qp_ptr()) };
    }
}

/// A fast-registration memory region.
pub(crate) struct Mr(NonNull<bindings::ib_mr>);

// SAFETY: an MR is registered by one work request and then only read (keys, iova).
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Mr {
    /// Allocates an MR able to map `max_pages` pages.
    pub(crate) fn new(pd: &Pd, max_pages: u32) -> Result<Self> {
        // SAFETY: owned PD.
        Ok(Self(created(unsafe {
            bindings::ib_alloc_mr(
                pd.as_ptr(),
                bindings::ib_mr_type_IB_MR_TYPE_MEM_REG,
                max_pages,
            )
        })?))
    }

    pub(crate) fn as_ptr(&self) -> *mut bindings::ib_mr {
        self.0.as_ptr()
    }

    pub(crate) fn rkey(&self) -> u32 {
        // SAFETY: owned MR.
        unsafe { (*self.as_ptr()).rkey }
    }

    pub(crate) fn lkey(&self) -> u32 {
        // SAFETY: owned MR.
        unsafe { (*self.as_ptr()).lkey }
    }

    pub(crate) fn iova(&self) -> u64 {
        // SAFETY: owned MR.
        unsafe { (*self.as_ptr()).iova }
    }

    pub(crate) fn length(&self) -> u64 {
        // SAFETY: owned MR.
        unsafe { (*self.as_ptr()).length }
    }

    /// Maps a DMA-mapped scatterlist of `nents` entries into the MR with pages of `page_size`
    /// bytes; returns the number of entries mapped.
    ///
    /// # Safety
    ///
    /// `sg` must be a DMA-mapped list of at least `nents` entries.
    pub(crate) unsafe fn map_sg(
        &self,
        sg: *mut bindings::scatterlist,
        nents: i32,
        page_size: u32,
    ) -> i32 {
        // SAFETY: owned MR; the caller guarantees the list.
        unsafe {
            bindings::ib_map_mr_sg(self.as_ptr(), sg, nents, core::ptr::null_mut(), page_size)
        }
    }

    /// Moves the key to a fresh value, so a registration never reuses the previous RKEY.
    pub(crate) fn bump_key(&self) {
        let key = self.rkey();
        // SAFETY: owned MR, not registered at this point.
        unsafe {
            bindings::rsrdma_update_fast_reg_key(
                self.as_ptr(),
                bindings::rsrdma_inc_rkey(key) as u8,
            )
        };
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: owned MR; deregistration also invalidates its keys.
        unsafe { bindings::rsrdma_dereg_mr(self.as_ptr()) };
    }
}

/// Asynchronous events of one RDMA device (port up and down) delivered to a handler, from
/// registration until drop.
#[pin_data(PinnedDrop)]
pub(crate) struct EventWatch {
    #[pin]
    handler: Opaque<bindings::ib_event_handler>,
    /// The ports last reported down, one bit per port number below 64, to act on changes
    /// only (soft-RoCE reports a port coming up twice). Starts from the ports' state when the
    /// watch begins, so that a device added with a port down reports that port coming up.
    ports_down: core::sync::atomic::AtomicU64,
}

/// The signature of an asynchronous event handler.
pub(crate) type EventHandler =
    unsafe extern "C" fn(*mut bindings::ib_event_handler, *mut bindings::ib_event);

// SAFETY: the RDMA core owns the list linkage; `Self` exposes nothing else.
unsafe impl Send for EventWatch {}
// SAFETY: as above.
unsafe impl Sync for EventWatch {}

impl EventWatch {
    pub(crate) fn new(dev: Device, handler: EventHandler) -> impl PinInit<Self> {
        pin_init!(Self {
            // Set before the handler is registered: an event may be delivered at once. An
            // event the driver raised before this query (at its registration) brings the
            // state read here, and is taken as a repeat; only a port changing between the
            // query and the registration goes unseen, until its next change.
            // SAFETY: `dev` is alive (see below); process context (ib_client `add`).
            ports_down: core::sync::atomic::AtomicU64::new(unsafe {
                bindings::rsrdma_ports_down(dev.as_ptr())
            }),
            // SAFETY: the handler is initialized in place, then registered; it stays pinned
            // until `drop` unregisters it, and `dev` is alive until its ib_client `remove`,
            // where the watch is dropped.
            handler <- Opaque::ffi_init(move |h: *mut bindings::ib_event_handler| unsafe {
                h.write(bindings::ib_event_handler {
                    device: dev.as_ptr(),
                    handler: Some(handler),
                    ..Default::default()
                });
                bindings::ib_register_event_handler(h);
            }),
        })
    }

    /// Records the state of port `port` carried by an event delivered to `handler`; false if
    /// it is the state already known (a repeated event). Ports from 64 up are not tracked:
    /// every event of theirs counts.
    ///
    /// # Safety
    ///
    /// `handler` must be the handler of a live `EventWatch` (as passed to its handler).
    pub(crate) unsafe fn port_changed(
        handler: *mut bindings::ib_event_handler,
        port: u32,
        active: bool,
    ) -> bool {
        use core::sync::atomic::Ordering::AcqRel;
        // SAFETY: per the contract, `handler` is the `handler` field of an `EventWatch`.
        let watch = unsafe { &*kernel::container_of!(handler, EventWatch, handler) };
        let Some(bit) = 1u64.checked_shl(port) else {
            return true;
        };
        if active {
            watch.ports_down.fetch_and(!bit, AcqRel) & bit != 0
        } else {
            watch.ports_down.fetch_or(bit, AcqRel) & bit == 0
        }
    }
}

#[pinned_drop]
impl PinnedDrop for EventWatch {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: registered in `new`; unregistering waits for running handlers.
        unsafe { bindings::ib_unregister_event_handler(self.handler.get()) };
    }
}

/// Human-readable name of a work completion status.
pub(crate) fn wc_status_msg(status: bindings::ib_wc_status) -> &'static CStr {
    // SAFETY: returns a static string for any value.
    unsafe { CStr::from_char_ptr(bindings::ib_wc_status_msg(status)) }
}

/// Human-readable name of a CM event.
pub(crate) fn cm_event_msg(event: bindings::rdma_cm_event_type) -> &'static CStr {
    // SAFETY: returns a static string for any value.
    unsafe { CStr::from_char_ptr(bindings::rdma_event_msg(event)) }
}

/// Human-readable name of an asynchronous event.
pub(crate) fn event_msg(event: bindings::ib_event_type) -> &'static CStr {
    // SAFETY: returns a static string for any value.
    unsafe { CStr::from_char_ptr(bindings::ib_event_msg(event)) }
}
