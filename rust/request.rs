// SPDX-License-Identifier: GPL-2.0

//! Requests of the transport's tag sets and their hardware contexts, as blk-mq and the NVMe
//! core hand them to the transport's `blk_mq_ops`.
//!
//! The NVMe core allocates the tag sets, so the transport supplies raw callbacks that get raw
//! pointers. Each callback turns its pointer into a handle once; that is the one unsafe step,
//! and its contract is the callback's own. From there the transport works through safe
//! methods:
//! - [`Rq`]: a live request of a tag set of ours; gives its PDU.
//! - [`Owned`]: a request the transport owns in blk-mq's sense, from `queue_rq` (or a
//!   completion the transport counted as the last) to the call that hands it back. It reads the
//!   request's state, and the calls that end the request consume it, so each runs once.
//! - [`Hctx`]: a hardware context whose driver data the transport set in `init_hctx`.
//! - [`TagSet`]: a tag set the NVMe core allocates in the controller. Its tags may be read
//!   from contexts that take no lock (a response looking its request up, a walk over the
//!   requests in flight) while it [`TagSet::ready`]; removing it or changing its hardware
//!   queues first waits for those readers.
//! - [`Tags`]: the tags of one hardware queue, to look a response's command identifier up.

use crate::bindings;
use crate::nvme;
use crate::sync::{self, RcuReadGuard};
use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::ffi::c_void;
use kernel::init::PinInit;
use kernel::prelude::*;
use kernel::types::Opaque;

/// A blk-mq status (`blk_status_t`).
pub(crate) type BlkStatus = bindings::blk_status_t;
pub(crate) const BLK_STS_OK: BlkStatus = 0;
pub(crate) const BLK_STS_RESOURCE: BlkStatus = 9;
pub(crate) const BLK_STS_IOERR: BlkStatus = 10;

/// The data a tag set keeps with each of its requests (the PDU, `blk_mq_rq_to_pdu`).
///
/// # Safety
///
/// Values of the type exist only as PDUs: the tag sets whose requests carry one are allocated
/// with a PDU of `size_of::<Self>()` bytes, initialize it in `init_request`, and no value is
/// created anywhere else. It starts with the core's `struct nvme_request`, as `nvme_req(rq)`
/// requires.
pub(crate) unsafe trait Pdu {}

/// A request of a tag set whose PDU is a `T`, allocated for `'a`.
pub(crate) struct Rq<'a, T: Pdu> {
    ptr: NonNull<bindings::request>,
    _pdu: PhantomData<&'a T>,
}

impl<T: Pdu> Clone for Rq<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Pdu> Copy for Rq<'_, T> {}

impl<'a, T: Pdu> Rq<'a, T> {
    /// # Safety
    ///
    /// `ptr` is a request of a tag set whose PDU is an initialized `T` (see [`Pdu`]), and the
    /// request stays allocated for `'a`.
    pub(crate) unsafe fn from_raw(ptr: *mut bindings::request) -> Self {
        Self {
            // SAFETY: a request, per the contract, is not null.
            ptr: unsafe { NonNull::new_unchecked(ptr) },
            _pdu: PhantomData,
        }
    }

    /// The request whose PDU is `pdu`.
    pub(crate) fn of(pdu: &'a T) -> Self {
        let pdu = pdu as *const T as *mut c_void;
        // SAFETY: a `T` exists only as the PDU of a request (see `Pdu`), which is allocated as
        // long as its PDU is.
        unsafe { Self::from_raw(bindings::rsrdma_rq_from_pdu(pdu)) }
    }

    /// The request's PDU.
    pub(crate) fn pdu(self) -> &'a T {
        // SAFETY: per `from_raw`, the PDU is an initialized `T`, allocated for `'a`; it is only
        // shared (its mutable state is the implementor's, behind atomics or `Opaque`).
        unsafe { &*(bindings::rsrdma_rq_pdu(self.ptr.as_ptr()) as *const T) }
    }

    /// Has blk-mq run the timeout handler now for the request, if it is in flight
    /// (`blk_abort_request`).
    pub(crate) fn abort(self) {
        // SAFETY: an allocated request (per `from_raw`); the call only moves its deadline and
        // kicks the timeout work, which handles started requests only.
        unsafe { bindings::blk_abort_request(self.ptr.as_ptr()) }
    }
}

/// A request the transport owns in blk-mq's sense (see the module's documentation).
pub(crate) struct Owned<'a, T: Pdu>(Rq<'a, T>);

impl<'a, T: Pdu> Owned<'a, T> {
    /// # Safety
    ///
    /// As for [`Rq::from_raw`]; and the caller owns the request until it ends or hands it back
    /// through one of the methods that consume the handle: `queue_rq`, `complete` and
    /// `timeout` own the request they are given for the call.
    pub(crate) unsafe fn from_raw(ptr: *mut bindings::request) -> Self {
        // SAFETY: per the contract.
        Self(unsafe { Rq::from_raw(ptr) })
    }

    /// # Safety
    ///
    /// The caller owns `rq` (it holds the request's last completion, for one).
    pub(crate) unsafe fn assume(rq: Rq<'a, T>) -> Self {
        Self(rq)
    }

    fn ptr(&self) -> *mut bindings::request {
        self.0.ptr.as_ptr()
    }

    /// The request's PDU.
    pub(crate) fn pdu(&self) -> &'a T {
        self.0.pdu()
    }

    /// The request's tag.
    pub(crate) fn tag(&self) -> u32 {
        // SAFETY: an owned request: its tag is assigned and does not change while it is ours.
        unsafe { (*self.ptr()).tag as u32 }
    }

    /// The bytes of data the command moves: 0 for commands without data pages (flush, write
    /// zeroes), even when the request has a size.
    pub(crate) fn data_len(&self) -> u32 {
        // SAFETY: an owned request; its bios do not change while it is ours.
        unsafe {
            if bindings::rsrdma_rq_nr_phys_segments(self.ptr()) == 0 {
                0
            } else {
                bindings::rsrdma_rq_payload_bytes(self.ptr())
            }
        }
    }

    /// Whether the request moves data to the device.
    pub(crate) fn is_write(&self) -> bool {
        // SAFETY: an owned request.
        unsafe { bindings::rsrdma_rq_is_write(self.ptr()) }
    }

    /// The command identifier the core gave the request's command (`nvme_cid`).
    pub(crate) fn command_id(&self) -> u16 {
        // SAFETY: an owned request.
        unsafe { bindings::rsrdma_nvme_cid(self.ptr()) }
    }

    /// The NVMe status the core recorded for the request (`nvme_req(rq)->status`).
    pub(crate) fn nvme_status(&self) -> u16 {
        let nreq = self.pdu() as *const T as *const bindings::nvme_request;
        // SAFETY: the PDU starts with the core's `nvme_request` (see `Pdu`), which the core
        // does not write while the request is ours.
        unsafe { (*nreq).status }
    }

    /// Calls `f` with each segment of the request's data, mapped for the call: its address
    /// and length.
    pub(crate) fn for_each_segment<F: FnMut(*mut u8, u32)>(&self, mut f: F) {
        /// # Safety
        ///
        /// `ctx` is the closure `for_each_segment` passes to the glue.
        unsafe extern "C" fn visit<F: FnMut(*mut u8, u32)>(
            ctx: *mut c_void,
            va: *mut c_void,
            len: u32,
        ) -> i32 {
            // SAFETY: per the function's contract; the closure outlives the walk.
            let f = unsafe { &mut *(ctx as *mut F) };
            f(va as *mut u8, len);
            0
        }
        let ctx = &mut f as *mut F as *mut c_void;
        // SAFETY: an owned request, whose bios do not change while it is ours; `ctx` is the
        // closure `visit::<F>` expects, alive for the call.
        unsafe { bindings::rsrdma_rq_visit_segments(self.ptr(), Some(visit::<F>), ctx) };
    }

    /// Whether controller `ctrl` can take the request now (`nvme_check_ready`).
    pub(crate) fn check_ready(&self, ctrl: nvme::Ctrl, queue_live: bool) -> bool {
        // SAFETY: a live controller (a `Ctrl`) and an owned request.
        unsafe { bindings::rsrdma_nvme_check_ready(ctrl.as_ptr(), self.ptr(), queue_live) }
    }

    /// Hands a request the controller cannot take now back to the core, which fails or
    /// requeues it (`nvme_fail_nonready_command`).
    pub(crate) fn fail_nonready(self, ctrl: nvme::Ctrl) -> BlkStatus {
        // SAFETY: as in `check_ready`; the handle is consumed.
        unsafe { bindings::nvme_fail_nonready_command(ctrl.as_ptr(), self.ptr()) }
    }

    /// Builds the request's command in its PDU (`nvme_setup_cmd`).
    pub(crate) fn setup_cmd(&self, ns: Ns) -> BlkStatus {
        // SAFETY: an owned request not yet started; `ns` is its queue's namespace.
        unsafe { bindings::nvme_setup_cmd(ns.0, self.ptr()) }
    }

    /// Undoes `setup_cmd` for a request handed back to blk-mq unsent (`nvme_cleanup_cmd`).
    pub(crate) fn cleanup_cmd(&self) {
        // SAFETY: an owned request.
        unsafe { bindings::nvme_cleanup_cmd(self.ptr()) }
    }

    /// Starts the request's timer (`nvme_start_request`).
    pub(crate) fn start(&self) {
        // SAFETY: an owned request, not started yet.
        unsafe { bindings::rsrdma_nvme_start_request(self.ptr()) }
    }

    /// Completes the request with a host path error, for the core to retry or fail over
    /// (`nvme_host_path_error`).
    pub(crate) fn host_path_error(self) -> BlkStatus {
        // SAFETY: an owned request; the handle is consumed.
        unsafe { bindings::nvme_host_path_error(self.ptr()) }
    }

    /// Records the response (its status field as received, the result) in the request
    /// (`nvme_try_complete_req`). Returns the request when the caller is to end it now;
    /// `None` when blk-mq ends it on the submitting CPU, through the `complete` callback.
    pub(crate) fn try_complete(self, status: u16, result: u64) -> Option<Self> {
        // SAFETY: an owned request; when the call returns true, blk-mq has taken it back.
        let remote = unsafe { bindings::rsrdma_nvme_try_complete_req(self.ptr(), status, result) };
        (!remote).then_some(self)
    }

    /// Ends the request (`nvme_complete_rq`).
    pub(crate) fn complete(self) {
        // SAFETY: an owned request; the handle is consumed.
        unsafe { bindings::nvme_complete_rq(self.ptr()) }
    }

    /// Ends a request whose timeout handler gives it up (`nvmf_complete_timed_out_request`).
    pub(crate) fn complete_timed_out(self) {
        // SAFETY: an owned request; the handle is consumed.
        unsafe { bindings::rsrdma_nvmf_complete_timed_out_request(self.ptr()) }
    }
}

/// The namespace of a hardware context's request queue, or none for the admin queues; what
/// [`Owned::setup_cmd`] needs.
#[derive(Clone, Copy)]
pub(crate) struct Ns(*mut bindings::nvme_ns);

/// A hardware context whose driver data is a `D`, live for `'a`.
pub(crate) struct Hctx<'a, D> {
    ptr: NonNull<bindings::blk_mq_hw_ctx>,
    _data: PhantomData<&'a D>,
}

impl<'a, D> Hctx<'a, D> {
    /// # Safety
    ///
    /// `ptr` is a live hardware context whose driver data [`Hctx::init`] set to a `D` that
    /// outlives `'a`, and so does the context.
    pub(crate) unsafe fn from_raw(ptr: *mut bindings::blk_mq_hw_ctx) -> Self {
        Self {
            // SAFETY: a hardware context, per the contract, is not null.
            ptr: unsafe { NonNull::new_unchecked(ptr) },
            _data: PhantomData,
        }
    }

    /// Sets the driver data of a hardware context blk-mq is initializing (`init_hctx`).
    ///
    /// # Safety
    ///
    /// `ptr` is that context, and `data` outlives it.
    pub(crate) unsafe fn init(ptr: *mut bindings::blk_mq_hw_ctx, data: &D) {
        // SAFETY: per the contract; nothing else reads the field before `init_hctx` returns.
        unsafe { (*ptr).driver_data = data as *const D as *mut c_void };
    }

    /// The context's driver data.
    pub(crate) fn data(&self) -> &'a D {
        // SAFETY: set by `init` to a `D` that outlives `'a` (see `from_raw`).
        unsafe { &*((*self.ptr.as_ptr()).driver_data as *const D) }
    }

    /// The namespace of the context's request queue (`queuedata`).
    pub(crate) fn ns(&self) -> Ns {
        // SAFETY: a live context's request queue is live; the NVMe core sets its `queuedata`
        // to the namespace (I/O queues) or leaves it null (admin queues) before any request.
        Ns(unsafe { (*(*self.ptr.as_ptr()).queue).queuedata as *mut bindings::nvme_ns })
    }
}

/// The tags of one hardware queue of a tag set whose PDU is a `T`, valid for `'a`.
pub(crate) struct Tags<'a, T: Pdu> {
    ptr: NonNull<bindings::blk_mq_tags>,
    _pdu: PhantomData<&'a T>,
}

impl<'a, T: Pdu> Tags<'a, T> {
    /// # Safety
    ///
    /// `ptr` is the tags of a hardware queue of a tag set whose PDU is a `T`, and they and
    /// their requests stay allocated for `'a`.
    pub(crate) unsafe fn from_raw(ptr: NonNull<bindings::blk_mq_tags>) -> Self {
        Self {
            ptr,
            _pdu: PhantomData,
        }
    }

    /// The request that command identifier `cid` names, if it is in use: the core checks the
    /// tag's range and the identifier's generation (`nvme_find_rq`).
    pub(crate) fn find(&self, cid: u16) -> Option<Rq<'a, T>> {
        // SAFETY: allocated tags (see `from_raw`).
        let rq = unsafe { bindings::rsrdma_nvme_find_rq(self.ptr.as_ptr(), cid) };
        // SAFETY: a request of these tags, allocated as long as they are.
        (!rq.is_null()).then(|| unsafe { Rq::from_raw(rq) })
    }
}

/// A blk-mq tag set embedded in the controller, whose requests carry a `T`; the NVMe core
/// allocates it (`nvme_alloc_*_tag_set`) and removes it (`nvme_remove_*_tag_set`).
///
/// Readers that take no lock find it through [`TagSet::ready`], inside an RCU read-side
/// section: from its allocation until [`TagSet::retire`], except during [`TagSet::change`].
/// Queues receive from the moment they are connected, before the set is allocated.
#[pin_data]
pub(crate) struct TagSet<T: Pdu> {
    #[pin]
    set: Opaque<bindings::blk_mq_tag_set>,
    /// Set (Release) once the core allocated the set; cleared, and the readers waited for,
    /// before it is removed or its tags are reallocated.
    ready: AtomicBool,
    _pdu: PhantomData<T>,
}

impl<T: Pdu> TagSet<T> {
    /// A zeroed set, not allocated, as the core's allocation expects it.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            // SAFETY: zero is the state the core's allocation starts from.
            set <- Opaque::ffi_init(|t: *mut bindings::blk_mq_tag_set| unsafe { t.write_bytes(0, 1) }),
            ready: AtomicBool::new(false),
            _pdu: PhantomData,
        })
    }

    pub(crate) fn as_ptr(&self) -> *mut bindings::blk_mq_tag_set {
        self.set.get()
    }

    /// Allocates the set with `alloc` (which returns what the core's allocation returns),
    /// and opens it to readers when that succeeds.
    ///
    /// # Safety
    ///
    /// `alloc` allocates this set (at `as_ptr()`) through the NVMe core with a PDU of `T`,
    /// and returns 0 only when it did.
    pub(crate) unsafe fn alloc(
        &self,
        alloc: impl FnOnce(*mut bindings::blk_mq_tag_set) -> i32,
    ) -> i32 {
        let ret = alloc(self.as_ptr());
        if ret == 0 {
            self.ready.store(true, Ordering::Release);
        }
        ret
    }

    /// Closes the set to readers and waits for those already reading, before the core removes
    /// it. Sleeps.
    pub(crate) fn retire(&self) {
        self.ready.store(false, Ordering::Relaxed);
        sync::synchronize_rcu();
    }

    /// Runs `f`, which may reallocate the set's tags (`blk_mq_update_nr_hw_queues`), with the
    /// set closed to readers. Sleeps.
    pub(crate) fn change(&self, f: impl FnOnce()) {
        let was_ready = self.ready.swap(false, Ordering::Relaxed);
        sync::synchronize_rcu();
        f();
        if was_ready {
            self.ready.store(true, Ordering::Release);
        }
    }

    /// The set, if it is allocated and open to readers; it and its tags stay valid while
    /// `_rcu` is held.
    pub(crate) fn ready<'a>(&'a self, _rcu: &'a RcuReadGuard) -> Option<ReadySet<'a, T>> {
        // Acquire: pairs with the Release that opened the set after its allocation.
        self.ready
            .load(Ordering::Acquire)
            .then_some(ReadySet { set: self })
    }

    /// The number of the set's hardware queues, if it is allocated.
    pub(crate) fn nr_hw_queues(&self) -> Option<u32> {
        Some(self.ready(&RcuReadGuard::new())?.nr_hw_queues())
    }
}

/// An allocated tag set whose tags are neither reallocated nor freed for `'a` (see
/// [`TagSet::ready`]).
pub(crate) struct ReadySet<'a, T: Pdu> {
    set: &'a TagSet<T>,
}

impl<'a, T: Pdu> ReadySet<'a, T> {
    pub(crate) fn nr_hw_queues(&self) -> u32 {
        // SAFETY: an allocated set, not being changed (see `TagSet::change`).
        unsafe { (*self.set.as_ptr()).nr_hw_queues }
    }

    /// The tags of hardware queue `hctx`, if the set has it.
    pub(crate) fn tags(&self, hctx: u32) -> Option<Tags<'a, T>> {
        if hctx >= self.nr_hw_queues() {
            return None;
        }
        // SAFETY: an allocated set has one entry in `tags` per hardware queue, which stays
        // allocated, as do its requests, while the set is ready.
        let tags = unsafe { *(*self.set.as_ptr()).tags.add(hctx as usize) };
        // SAFETY: as above; the set's requests carry a `T`.
        Some(unsafe { Tags::from_raw(NonNull::new(tags)?) })
    }

    /// Calls `f` for each started request of the set (`blk_mq_tagset_busy_iter`). The walk
    /// holds each request for the call and takes the tags' lock: `f` must not sleep (nor can
    /// it, inside the RCU read-side section the set is ready in).
    pub(crate) fn busy_iter<F: FnMut(Rq<'_, T>)>(&self, mut f: F) {
        /// # Safety
        ///
        /// `rq` is a started request of the walked set; `data` the closure `busy_iter`
        /// passes.
        unsafe extern "C" fn visit<T: Pdu, F: FnMut(Rq<'_, T>)>(
            rq: *mut bindings::request,
            data: *mut c_void,
        ) -> bool {
            // SAFETY: per the function's contract; the walk holds the request for the call.
            unsafe { (*(data as *mut F))(Rq::from_raw(rq)) };
            true
        }
        let data = &mut f as *mut F as *mut c_void;
        // SAFETY: an allocated set whose tags are not reallocated or freed during the walk;
        // `data` is the closure `visit::<T, F>` expects, alive for the walk.
        unsafe { bindings::blk_mq_tagset_busy_iter(self.set.as_ptr(), Some(visit::<T, F>), data) };
    }
}
