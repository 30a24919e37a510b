// SPDX-License-Identifier: GPL-2.0

//! Requests of the transport's tag sets, their hardware contexts and the tag sets themselves,
//! as blk-mq and the NVMe core hand them to the transport.
//!
//! The kernel crate's `block::mq` owns its tag sets; here the NVMe core allocates them
//! (`nvme_alloc_*_tag_set`) and the transport only supplies raw `blk_mq_ops`, which get raw
//! pointers. Each callback turns its pointer into a handle once; that is the one unsafe step,
//! and its contract is the callback's own. From there the transport works through safe
//! methods:
//! - [`Rq`]: a request of a tag set of ours, found by its PDU or by a response's command
//!   identifier; gives the PDU and nothing else.
//! - [`OwnedRq`]: a request the transport owns in blk-mq's sense, from `queue_rq` (or the
//!   response that is its last completion) until it ends it or sends its command. It reads the
//!   request's state; the calls that end the request consume it, so each runs once, and
//!   dropping it after the command went out leaves the request to the response.
//! - [`TimedOutRq`]: a request in blk-mq's timeout handler, which a response may be ending
//!   meanwhile: only the core's guarded completion is offered.
//! - [`BusyRq`]: a started request a tag-set walk holds for the call.
//! - [`Hctx`]: a hardware context whose driver data the transport set in `init_hctx`.
//! - [`TagSet`]: a tag set embedded in the controller. It allocates, changes and removes the
//!   set through the core, one at a time, and lets readers that take no lock (a response
//!   looking its request up, a walk over the requests in flight) see it only while its tags
//!   stay put: they read inside an RCU read-side section ([`TagSet::ready`]), and removing the
//!   set or changing its hardware queues first closes it to them and waits for them.
//! - [`Tags`]: the tags of one hardware queue, to look a command identifier up.

use crate::bindings;
use crate::nvme;
use crate::rdma::PageRange;
use crate::sync::{self, RcuReadGuard};
use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::ffi::c_void;
use kernel::init::PinInit;
use kernel::prelude::*;
use kernel::sync::Mutex;
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
/// Values of the type exist only as PDUs: the type has no constructor outside its own
/// `init_request`, which initializes it in place in the PDU of each request of tag sets
/// allocated for it (see [`TagSet::alloc`]). It starts with the core's `struct nvme_request`,
/// as `nvme_req(rq)` requires.
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
    unsafe fn from_raw(ptr: *mut bindings::request) -> Self {
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
        unsafe { &*(bindings::rsrdma_rq_pdu(self.ptr()) as *const T) }
    }

    fn ptr(self) -> *mut bindings::request {
        self.ptr.as_ptr()
    }

    /// # Safety
    ///
    /// The request has its tag (blk-mq assigns it before `queue_rq`) and is held (owned, or in
    /// the timeout handler): the tag stays.
    unsafe fn raw_tag(self) -> u32 {
        // SAFETY: per the contract.
        unsafe { (*self.ptr()).tag as u32 }
    }
}

/// The handles below are requests with more rights: each gives its request's PDU.
macro_rules! deref_to_rq {
    ($($handle:ident),*) => {$(
        impl<'a, T: Pdu> core::ops::Deref for $handle<'a, T> {
            type Target = Rq<'a, T>;

            fn deref(&self) -> &Rq<'a, T> {
                &self.0
            }
        }
    )*};
}

deref_to_rq!(OwnedRq, TimedOutRq, BusyRq);

/// A request the transport owns in blk-mq's sense (see the module's documentation).
#[must_use = "a request must be ended, handed back, or sent"]
pub(crate) struct OwnedRq<'a, T: Pdu>(Rq<'a, T>);

impl<'a, T: Pdu> OwnedRq<'a, T> {
    /// # Safety
    ///
    /// As for [`Rq`]'s handles; and the caller owns the request: blk-mq gave it to `queue_rq`
    /// or to `complete`, and nothing else ends it until the handle is consumed or dropped.
    pub(crate) unsafe fn from_raw(ptr: *mut bindings::request) -> Self {
        // SAFETY: per the contract.
        Self(unsafe { Rq::from_raw(ptr) })
    }

    /// # Safety
    ///
    /// The caller owns `rq`: it counted the request's last completion, say, after blk-mq
    /// started it and the command went out.
    pub(crate) unsafe fn assume(rq: Rq<'a, T>) -> Self {
        Self(rq)
    }

    /// The request's tag.
    pub(crate) fn tag(&self) -> u32 {
        // SAFETY: an owned request.
        unsafe { self.raw_tag() }
    }

    /// The bytes of data the command moves: 0 for commands without data pages (flush, write
    /// zeroes), even when the request has a size.
    pub(crate) fn data_len(&self) -> u32 {
        // SAFETY: an owned request: its bios do not change while it is ours.
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
        // SAFETY: an owned request: its operation does not change while it is ours.
        unsafe { bindings::rsrdma_rq_is_write(self.ptr()) }
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

    /// The request's data as its bvecs, each a physically contiguous range (neighbours may be
    /// contiguous too: they count apart), when there are at most `N`; `None` when there are
    /// more, none, or a special payload (the range list of a discard, which the core
    /// allocates).
    pub(crate) fn ranges<const N: usize>(&self) -> Option<Ranges<N>> {
        let mut bv = [bindings::bio_vec::default(); N];
        // SAFETY: an owned request, whose bios do not change while it is ours; the glue stores
        // at most `N` entries into the local array.
        let n = unsafe { bindings::rsrdma_rq_bvecs(self.ptr(), bv.as_mut_ptr(), N as u32) };
        let n = (n as usize).min(N);
        let mut ranges = Ranges {
            ranges: [PageRange::EMPTY; N],
            n,
        };
        for (r, bv) in ranges.ranges.iter_mut().zip(&bv[..n]) {
            *r = PageRange {
                page: NonNull::new(bv.bv_page)?,
                offset: bv.bv_offset,
                len: bv.bv_len,
            };
        }
        (n > 0).then_some(ranges)
    }

    /// Whether controller `ctrl` can take the request now (`nvme_check_ready`).
    pub(crate) fn check_ready(&self, ctrl: nvme::Ctrl, queue_live: bool) -> bool {
        // SAFETY: a live controller (a `Ctrl`) and an owned request.
        unsafe { bindings::rsrdma_nvme_check_ready(ctrl.as_ptr(), self.ptr(), queue_live) }
    }

    /// Hands a request the controller cannot take now back to the core, which fails or
    /// requeues it (`nvme_fail_nonready_command`).
    pub(crate) fn fail_nonready(self, ctrl: nvme::Ctrl) -> BlkStatus {
        // SAFETY: a live controller and an owned request, which the handle gives up.
        unsafe { bindings::nvme_fail_nonready_command(ctrl.as_ptr(), self.ptr()) }
    }

    /// Builds the request's command in its PDU (`nvme_setup_cmd`), for the namespace of its
    /// request queue (none for the admin and connect queues).
    pub(crate) fn setup_cmd(&self) -> BlkStatus {
        // SAFETY: an owned request: its request queue is live, and the core set the queue's
        // `queuedata` to its namespace, or left it null, before any request.
        let ns = unsafe { (*(*self.ptr()).q).queuedata as *mut bindings::nvme_ns };
        // SAFETY: an owned request not yet started, with its queue's namespace.
        unsafe { bindings::nvme_setup_cmd(ns, self.ptr()) }
    }

    /// Undoes `setup_cmd` for a request handed back to blk-mq unsent (`nvme_cleanup_cmd`).
    pub(crate) fn cleanup_cmd(&self) {
        // SAFETY: an owned request.
        unsafe { bindings::nvme_cleanup_cmd(self.ptr()) }
    }

    /// Starts the request's timer (`nvme_start_request`).
    pub(crate) fn start(&self) {
        // SAFETY: an owned request.
        unsafe { bindings::rsrdma_nvme_start_request(self.ptr()) }
    }

    /// Completes the request with a host path error, for the core to retry or fail over
    /// (`nvme_host_path_error`).
    pub(crate) fn host_path_error(self) -> BlkStatus {
        // SAFETY: an owned request, which the handle gives up.
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
        // SAFETY: an owned request, which the handle gives up.
        unsafe { bindings::nvme_complete_rq(self.ptr()) }
    }
}

/// A request in blk-mq's timeout handler. The handler holds a reference to it for the call,
/// but a response may end it meanwhile: the only way to end it is the core's completion,
/// which checks that it has not ended.
pub(crate) struct TimedOutRq<'a, T: Pdu>(Rq<'a, T>);

impl<'a, T: Pdu> TimedOutRq<'a, T> {
    /// # Safety
    ///
    /// As for [`Rq`]'s handles; `ptr` is the request `blk_mq_ops::timeout` was given, and the
    /// handle does not outlive the call.
    pub(crate) unsafe fn from_raw(ptr: *mut bindings::request) -> Self {
        // SAFETY: per the contract.
        Self(unsafe { Rq::from_raw(ptr) })
    }

    /// The request's tag.
    pub(crate) fn tag(&self) -> u32 {
        // SAFETY: a started request, held by the timeout handler.
        unsafe { self.raw_tag() }
    }

    /// The command identifier the core gave the request's command (`nvme_cid`).
    pub(crate) fn command_id(&self) -> u16 {
        // SAFETY: as above; the identifier's generation changes only when a response is
        // recorded, and a stale one only makes the log line name the previous generation.
        unsafe { bindings::rsrdma_nvme_cid(self.ptr()) }
    }

    /// Ends the request as timed out, unless it already ended
    /// (`nvmf_complete_timed_out_request`).
    pub(crate) fn complete(self) {
        // SAFETY: a started request, held by the timeout handler; the core completes it only
        // if it has not completed.
        unsafe { bindings::rsrdma_nvmf_complete_timed_out_request(self.ptr()) }
    }
}

/// A started request of a set being walked, held by the walk for the call (see
/// [`ReadySet::busy_iter`]).
pub(crate) struct BusyRq<'a, T: Pdu>(Rq<'a, T>);

impl<T: Pdu> BusyRq<'_, T> {
    /// Has blk-mq run the timeout handler now for the request (`blk_abort_request`).
    pub(crate) fn abort(&self) {
        // SAFETY: a started request, held by the walk; the call moves its deadline and kicks
        // its queue's timeout work.
        unsafe { bindings::blk_abort_request(self.ptr()) }
    }
}

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
}

/// Which of the controller's two tag sets a [`TagSet`] is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum SetKind {
    Admin,
    /// The I/O set, with its number of queue maps (default, read, poll).
    Io {
        nr_maps: u32,
    },
}

/// A blk-mq tag set embedded in the controller, whose requests carry a `T` (see the module's
/// documentation).
#[pin_data]
pub(crate) struct TagSet<T: Pdu> {
    #[pin]
    set: Opaque<bindings::blk_mq_tag_set>,
    /// The controller the set is allocated for, while it is; held across allocation, change
    /// and removal, which it serializes.
    #[pin]
    owner: Mutex<Option<nvme::Ctrl>>,
    /// Set (Release) once the set is allocated; cleared, and the readers waited for, before it
    /// is removed or its tags are reallocated.
    ready: AtomicBool,
    kind: SetKind,
    _pdu: PhantomData<T>,
}

impl<T: Pdu> TagSet<T> {
    /// A zeroed set, not allocated, as the core's allocation expects it.
    pub(crate) fn new(kind: SetKind) -> impl PinInit<Self> {
        pin_init!(Self {
            // SAFETY: zero is the state the core's allocation starts from.
            set <- Opaque::ffi_init(|t: *mut bindings::blk_mq_tag_set| unsafe { t.write_bytes(0, 1) }),
            owner <- kernel::new_mutex!(None),
            ready: AtomicBool::new(false),
            kind,
            _pdu: PhantomData,
        })
    }

    pub(crate) fn as_ptr(&self) -> *mut bindings::blk_mq_tag_set {
        self.set.get()
    }

    /// Allocates the set for `ctrl` (`nvme_alloc_admin_tag_set` or `nvme_alloc_io_tag_set`),
    /// with PDUs of `T`, and opens it to readers. Returns what the core returns (an errno or
    /// an NVMe status); `EBUSY` if the set is allocated already.
    ///
    /// # Safety
    ///
    /// `ops` handle requests whose PDU is a `T`: their `init_request` initializes it.
    pub(crate) unsafe fn alloc(&self, ctrl: nvme::Ctrl, ops: &'static bindings::blk_mq_ops) -> i32 {
        let mut owner = self.owner.lock();
        if owner.is_some() {
            return EBUSY.to_errno();
        }
        let size = core::mem::size_of::<T>() as u32;
        // SAFETY: a live controller, and this set, not allocated (the core's allocation
        // zeroes it first); `ops` is static and handles PDUs of `size` bytes (per the
        // contract).
        let ret = unsafe {
            match self.kind {
                SetKind::Admin => {
                    bindings::nvme_alloc_admin_tag_set(ctrl.as_ptr(), self.as_ptr(), ops, size)
                }
                SetKind::Io { nr_maps } => bindings::nvme_alloc_io_tag_set(
                    ctrl.as_ptr(),
                    self.as_ptr(),
                    ops,
                    nr_maps,
                    size,
                ),
            }
        };
        if ret == 0 {
            *owner = Some(ctrl);
            self.ready.store(true, Ordering::Release);
        }
        ret
    }

    /// Closes the set to readers, waits for those already reading, and removes it
    /// (`nvme_remove_*_tag_set`), if it is allocated. Sleeps.
    pub(crate) fn remove(&self) {
        let mut owner = self.owner.lock();
        let Some(ctrl) = owner.take() else {
            return;
        };
        self.ready.store(false, Ordering::Relaxed);
        sync::synchronize_rcu();
        // SAFETY: the set was allocated for `ctrl`, which is alive while its sets are, and no
        // reader is left in it.
        unsafe {
            match self.kind {
                SetKind::Admin => bindings::nvme_remove_admin_tag_set(ctrl.as_ptr()),
                SetKind::Io { .. } => bindings::nvme_remove_io_tag_set(ctrl.as_ptr()),
            }
        }
    }

    /// Sets the number of the set's hardware queues (`blk_mq_update_nr_hw_queues`), which
    /// reallocates its tags, with the set closed to readers; nothing if it is not allocated.
    /// Sleeps.
    pub(crate) fn update_nr_hw_queues(&self, nr: u32) {
        let owner = self.owner.lock();
        if owner.is_none() {
            return;
        }
        self.ready.store(false, Ordering::Relaxed);
        sync::synchronize_rcu();
        // SAFETY: an allocated set, with no reader in it; blk-mq freezes its queues itself.
        unsafe { bindings::blk_mq_update_nr_hw_queues(self.as_ptr(), nr as i32) };
        self.ready.store(true, Ordering::Release);
    }

    /// The set, if it is allocated and open to readers; its tags and the requests in flight
    /// in them stay allocated while `_rcu` is held.
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
        // SAFETY: an allocated set, not being changed (see `TagSet::update_nr_hw_queues`).
        unsafe { (*self.set.as_ptr()).nr_hw_queues }
    }

    /// The tags of hardware queue `hctx`, if the set has it.
    pub(crate) fn tags(&self, hctx: u32) -> Option<Tags<'a, T>> {
        if hctx >= self.nr_hw_queues() {
            return None;
        }
        // SAFETY: an allocated set has one entry in `tags` per hardware queue, which stays
        // allocated while the set is ready.
        let tags = unsafe { *(*self.set.as_ptr()).tags.add(hctx as usize) };
        Some(Tags {
            ptr: NonNull::new(tags)?,
            _pdu: PhantomData,
        })
    }

    /// Calls `f` for each started request of the set (`blk_mq_tagset_busy_iter`), which the
    /// walk holds for the call. `f` runs inside the RCU read-side section the set is ready in:
    /// it must not sleep (the kernel's atomic-sleep check reports it if it does).
    pub(crate) fn busy_iter<F: FnMut(BusyRq<'_, T>)>(&self, mut f: F) {
        /// # Safety
        ///
        /// `rq` is a started request of the walked set, held by the walk; `data` the closure
        /// `busy_iter` passes.
        unsafe extern "C" fn visit<T: Pdu, F: FnMut(BusyRq<'_, T>)>(
            rq: *mut bindings::request,
            data: *mut c_void,
        ) -> bool {
            // SAFETY: per the function's contract; the set's PDU is a `T`.
            unsafe { (*(data as *mut F))(BusyRq(Rq::from_raw(rq))) };
            true
        }
        let data = &mut f as *mut F as *mut c_void;
        // SAFETY: an allocated set whose tags are not reallocated or freed during the walk;
        // `data` is the closure `visit::<T, F>` expects, alive for the walk.
        unsafe { bindings::blk_mq_tagset_busy_iter(self.set.as_ptr(), Some(visit::<T, F>), data) };
    }
}

/// The tags of one hardware queue of a ready tag set whose PDU is a `T` (see
/// [`ReadySet::tags`]).
pub(crate) struct Tags<'a, T: Pdu> {
    ptr: NonNull<bindings::blk_mq_tags>,
    _pdu: PhantomData<&'a T>,
}

impl<'a, T: Pdu> Tags<'a, T> {
    /// The request that command identifier `cid` names, if its tag is in use: the core checks
    /// the tag's range and the identifier's generation (`nvme_find_rq`).
    ///
    /// A request in flight stays allocated for `'a`. A stray identifier can name a tag whose
    /// request came from the I/O scheduler's tags, which a scheduler change frees: the C
    /// drivers share that window, and only a misbehaving target opens it.
    pub(crate) fn find(&self, cid: u16) -> Option<Rq<'a, T>> {
        // SAFETY: the tags of a ready set (see `ReadySet::tags`).
        let rq = unsafe { bindings::rsrdma_nvme_find_rq(self.ptr.as_ptr(), cid) };
        // SAFETY: a request of the set, whose PDU is a `T`; allocated as said above.
        (!rq.is_null()).then(|| unsafe { Rq::from_raw(rq) })
    }
}

/// A request's data as ranges, at most `N` (see [`OwnedRq::ranges`]).
pub(crate) struct Ranges<const N: usize> {
    ranges: [PageRange; N],
    n: usize,
}

impl<const N: usize> core::ops::Deref for Ranges<N> {
    type Target = [PageRange];

    fn deref(&self) -> &[PageRange] {
        &self.ranges[..self.n]
    }
}
