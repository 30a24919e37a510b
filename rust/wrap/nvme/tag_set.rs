// SPDX-License-Identifier: GPL-2.0

//! The blk-mq tag sets of a controller, which the NVMe core allocates, changes and removes for
//! the transport (`nvme_alloc_*_tag_set`), and their readers.
//!
//! The set is embedded in the controller ([`Controller`](super::Controller)), which
//! allocates, changes and removes it one at a time under the set's lock. Readers that take no
//! lock (a response looking its request up, a walk over the requests in flight) see it only
//! while its tags stay put: they read inside an RCU read-side section ([`TagSet::ready`]), and
//! removing the set or changing its hardware queues first closes it to them and waits for
//! them.
//!
//! C headers: [`include/linux/blk-mq.h`](srctree/include/linux/blk-mq.h),
//! [`drivers/nvme/host/nvme.h`](srctree/drivers/nvme/host/nvme.h).

use super::super::bindings;
use super::super::sync::{self, Rcu, RcuReadGuard};
use super::request::{BusyRq, Pdu, Rq, REMOTE_SHARES};
use super::{status_result, CoreCtrl, Failure};
use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::ffi::c_void;
use kernel::prelude::*;
use kernel::sync::lock::{mutex::MutexBackend, Guard};
use kernel::sync::Mutex;
use kernel::types::Opaque;

/// Which of a controller's two tag sets.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum SetKind {
    Admin,
    Io,
}

/// A blk-mq tag set embedded in a controller, whose requests' PDUs are [`Pdu<P>`].
///
/// # Invariants
///
/// `set` is allocated exactly when `allocated` holds `true`; it changes state only while
/// `allocated`'s lock is held. `ready` is set only while it is allocated and its tags are not
/// being reallocated; the set is not removed, nor its tags reallocated, until the readers that
/// saw `ready` set ended their RCU read-side sections.
#[pin_data]
pub(crate) struct TagSet<P> {
    #[pin]
    set: Opaque<bindings::blk_mq_tag_set>,
    #[pin]
    allocated: Mutex<bool>,
    ready: AtomicBool,
    kind: SetKind,
    _pdu: PhantomData<P>,
}

// SAFETY: the set is changed only under its lock and read under RCU (type invariant); the core
// serializes the rest of its use.
unsafe impl<P: Send + Sync> Send for TagSet<P> {}
// SAFETY: as above.
unsafe impl<P: Send + Sync> Sync for TagSet<P> {}

/// The lock of a [`TagSet`], with whether it is allocated.
pub(in crate::wrap) type SetGuard<'a> = Guard<'a, bool, MutexBackend>;

impl<P> TagSet<P> {
    /// A zeroed set, not allocated, as the core's allocation expects it.
    pub(in crate::wrap) fn new(kind: SetKind) -> impl PinInit<Self> {
        // A lockdep class per kind, so that holding both (which the transport does not do
        // today) is not taken for recursion.
        let (name, key) = match kind {
            SetKind::Admin => (
                kernel::c_str!("rsrdma_tag_set::admin"),
                kernel::static_lock_class!(),
            ),
            SetKind::Io => (
                kernel::c_str!("rsrdma_tag_set::io"),
                kernel::static_lock_class!(),
            ),
        };
        pin_init!(Self {
            // SAFETY: zero is the state the core's allocation starts from.
            set <- Opaque::ffi_init(|t: *mut bindings::blk_mq_tag_set| unsafe { t.write_bytes(0, 1) }),
            allocated <- Mutex::new(false, name, key),
            ready: AtomicBool::new(false),
            kind,
            _pdu: PhantomData,
        })
    }

    pub(in crate::wrap) fn as_ptr(&self) -> *mut bindings::blk_mq_tag_set {
        self.set.get()
    }

    /// Takes the set's lock, which serializes allocation, change and removal.
    pub(in crate::wrap) fn lock(&self) -> SetGuard<'_> {
        self.allocated.lock()
    }

    /// Allocates the set for `ctrl` (`nvme_alloc_admin_tag_set` or `nvme_alloc_io_tag_set`),
    /// with `nr_maps` queue maps (I/O set) and PDUs of `Pdu<P>`, and opens it to readers.
    /// `EBUSY` if it is allocated already.
    ///
    /// # Safety
    ///
    /// `guard` is this set's lock; `ctrl` is the controller the set is embedded in; `ops`
    /// initialize each request's PDU as a `Pdu<P>` (their `init_request`).
    pub(in crate::wrap) unsafe fn alloc(
        &self,
        guard: &mut SetGuard<'_>,
        ctrl: &CoreCtrl,
        ops: &'static bindings::blk_mq_ops,
        nr_maps: u32,
    ) -> Result<(), Failure> {
        if **guard {
            return Err(EBUSY.into());
        }
        let size = core::mem::size_of::<Pdu<P>>() as u32;
        // SAFETY: a live controller, and this set, not allocated (the core's allocation zeroes
        // it first); `ops` is static and handles PDUs of `size` bytes (per the contract).
        let ret = unsafe {
            match self.kind {
                SetKind::Admin => {
                    bindings::nvme_alloc_admin_tag_set(ctrl.as_ptr(), self.as_ptr(), ops, size)
                }
                SetKind::Io => bindings::nvme_alloc_io_tag_set(
                    ctrl.as_ptr(),
                    self.as_ptr(),
                    ops,
                    nr_maps,
                    size,
                ),
            }
        };
        status_result(ret)?;
        // INVARIANT: allocated, under the lock; open to readers from here.
        **guard = true;
        self.ready.store(true, Ordering::Release);
        Ok(())
    }

    /// Closes the set to readers, waits for those already reading, and removes it
    /// (`nvme_remove_*_tag_set`), if it is allocated; the core's pointers to the tag set (and
    /// to the I/O connect queue, which the removal puts) are cleared, so that its own checks
    /// see them gone. The admin and fabrics request queues stay, dying, until the core frees
    /// the controller, as in the C transports. Sleeps.
    ///
    /// # Safety
    ///
    /// `guard` is this set's lock; `ctrl` is the controller the set is embedded in.
    pub(in crate::wrap) unsafe fn remove(&self, guard: &mut SetGuard<'_>, ctrl: &CoreCtrl) {
        if !**guard {
            return;
        }
        self.ready.store(false, Ordering::Relaxed);
        sync::synchronize_rcu();
        let n = ctrl.as_ptr();
        // SAFETY: the set was allocated for `ctrl`, which is alive while its sets are, and no
        // reader is left in it. The pointers cleared are the tag sets the removal freed, and
        // the connect queue it put.
        unsafe {
            match self.kind {
                SetKind::Admin => {
                    bindings::nvme_remove_admin_tag_set(n);
                    (*n).admin_tagset = core::ptr::null_mut();
                }
                SetKind::Io => {
                    bindings::nvme_remove_io_tag_set(n);
                    (*n).tagset = core::ptr::null_mut();
                    (*n).connect_q = core::ptr::null_mut();
                }
            }
        }
        // INVARIANT: removed, under the lock.
        **guard = false;
    }

    /// Ends the started requests of the set whose response or send completion is awaited, for
    /// the core to retry or fail them (`nvme_cancel_request`: a host-aborted status), taking
    /// their shares over, so that a response or completion that still comes finds none; then
    /// waits for the ends (`blk_mq_tagset_wait_completed_request`). A request whose last share
    /// ended is left to the party that ended it. Nothing if the set is not allocated.
    ///
    /// # Safety
    ///
    /// `guard` is this set's lock; `ctrl` is the controller the set is embedded in.
    pub(in crate::wrap) unsafe fn cancel(&self, guard: &SetGuard<'_>, ctrl: &CoreCtrl) {
        /// # Safety
        ///
        /// `rq` is a started request of a set whose PDUs are `Pdu<P>`, held by the walk;
        /// `data` is the set's core controller.
        unsafe extern "C" fn cancel_one<P>(rq: *mut bindings::request, data: *mut c_void) -> bool {
            // SAFETY: per the function's contract.
            if unsafe { Rq::<P>::from_raw(rq) }.take_over(REMOTE_SHARES) {
                // SAFETY: a started request of the controller `data`, whose shares this took
                // over: no other party ends it.
                unsafe { bindings::nvme_cancel_request(rq, data) };
            }
            true
        }
        if !**guard {
            return;
        }
        // SAFETY: an allocated set (the lock is held) of controller `ctrl`; the walk holds each
        // request for the call, and `cancel_one::<P>` reads PDUs of this set's type.
        unsafe {
            bindings::blk_mq_tagset_busy_iter(
                self.as_ptr(),
                Some(cancel_one::<P>),
                ctrl.as_ptr().cast(),
            );
            bindings::blk_mq_tagset_wait_completed_request(self.as_ptr());
        }
    }

    /// Sets the number of the set's hardware queues (`blk_mq_update_nr_hw_queues`), which
    /// reallocates its tags, with the set closed to readers; nothing if it is not allocated.
    /// Sleeps.
    pub(in crate::wrap) fn update_nr_hw_queues(&self, guard: &SetGuard<'_>, nr: u32) {
        if !**guard {
            return;
        }
        self.ready.store(false, Ordering::Relaxed);
        sync::synchronize_rcu();
        // SAFETY: an allocated set (the lock is held), with no reader in it; blk-mq freezes
        // its queues itself.
        unsafe { bindings::blk_mq_update_nr_hw_queues(self.as_ptr(), nr as i32) };
        self.ready.store(true, Ordering::Release);
    }

    /// The set, if it is allocated and open to readers; its tags and the requests in flight
    /// in them stay allocated while `rcu`'s section lasts.
    pub(crate) fn ready<'a>(&'a self, _rcu: &'a Rcu) -> Option<ReadySet<'a, P>> {
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
pub(crate) struct ReadySet<'a, P> {
    set: &'a TagSet<P>,
}

impl<'a, P> ReadySet<'a, P> {
    pub(crate) fn nr_hw_queues(&self) -> u32 {
        // SAFETY: an allocated set, not being changed (`TagSet` invariant).
        unsafe { (*self.set.as_ptr()).nr_hw_queues }
    }

    /// The tags of hardware queue `hctx`, if the set has it.
    pub(crate) fn tags(&self, hctx: u32) -> Option<Tags<'a, P>> {
        if hctx >= self.nr_hw_queues() {
            return None;
        }
        // SAFETY: an allocated set has one entry in `tags` per hardware queue, which stays
        // allocated while the set is ready.
        let tags = unsafe { *(*self.set.as_ptr()).tags.add(hctx as usize) };
        // INVARIANT (`Tags`): tags of a set ready for `'a`.
        Some(Tags {
            ptr: NonNull::new(tags)?,
            _pdu: PhantomData,
        })
    }

    /// Calls `f` for each started request of the set (`blk_mq_tagset_busy_iter`), which the
    /// walk holds for the call. `f` runs inside the RCU read-side section the set is ready in:
    /// it must not sleep (the kernel's atomic-sleep check reports it if it does).
    pub(crate) fn busy_iter<F: FnMut(BusyRq<'_, P>)>(&self, mut f: F) {
        /// # Safety
        ///
        /// `rq` is a started request of the walked set, held by the walk; `data` the closure
        /// `busy_iter` passes.
        unsafe extern "C" fn visit<P, F: FnMut(BusyRq<'_, P>)>(
            rq: *mut bindings::request,
            data: *mut c_void,
        ) -> bool {
            // SAFETY: per the function's contract; the set's PDUs are `Pdu<P>`.
            unsafe { (*(data as *mut F))(BusyRq(Rq::from_raw(rq))) };
            true
        }
        let data = &mut f as *mut F as *mut c_void;
        // SAFETY: an allocated set whose tags are not reallocated or freed during the walk;
        // `data` is the closure `visit::<P, F>` expects, alive for the walk.
        unsafe { bindings::blk_mq_tagset_busy_iter(self.set.as_ptr(), Some(visit::<P, F>), data) };
    }
}

/// The tags of one hardware queue of a ready tag set (see [`ReadySet::tags`]).
///
/// # Invariants
///
/// `ptr` is the tags of a hardware queue of a set ready for `'a`, whose PDUs are `Pdu<P>`.
pub(crate) struct Tags<'a, P> {
    ptr: NonNull<bindings::blk_mq_tags>,
    _pdu: PhantomData<&'a P>,
}

impl<'a, P> Tags<'a, P> {
    /// The request that command identifier `cid` names, if its tag is in use: the core checks
    /// the tag's range and the identifier's generation (`nvme_find_rq`).
    ///
    /// A request in flight stays allocated for `'a`. A stray identifier can name a tag whose
    /// request came from the I/O scheduler's tags, which a scheduler change frees: the C
    /// drivers share that window (`nvme_find_rq`), and only a misbehaving target opens it;
    /// it is the one known exception to this wrapper's soundness.
    pub(crate) fn find(&self, cid: u16) -> Option<Rq<'a, P>> {
        // SAFETY: the tags of a ready set (type invariant).
        let rq = unsafe { bindings::rsrdma_nvme_find_rq(self.ptr.as_ptr(), cid) };
        // SAFETY: a request of the set, whose PDU is a `Pdu<P>`; allocated as said above.
        (!rq.is_null()).then(|| unsafe { Rq::from_raw(rq) })
    }

    /// The request that holds tag `tag` now, if any (`blk_mq_tag_to_rq`); as for
    /// [`Tags::find`].
    pub(crate) fn by_tag(&self, tag: u32) -> Option<Rq<'a, P>> {
        // SAFETY: the tags of a ready set (type invariant); out-of-range tags give null.
        let rq = unsafe { bindings::rsrdma_tag_to_rq(self.ptr.as_ptr(), tag) };
        // SAFETY: as in `find`.
        (!rq.is_null()).then(|| unsafe { Rq::from_raw(rq) })
    }
}
