// SPDX-License-Identifier: GPL-2.0

//! Work items that live inside the controller, and the NVMe core's workqueues.
//!
//! 6.12's `kernel::workqueue` queues work through reference-counted pointers and has neither
//! delayed work nor flush or cancel. A controller is freed by the NVMe core (`free_ctrl`),
//! not by a reference count, and its work items, like the core's own, are fields of it.
//! [`Work`] and [`DelayedWork`] wrap such items. Binding an item to its function is the unsafe
//! step: its contract is that the function may run whenever the item is queued, until a
//! cancel or flush after the last queueing returns, so the owner cancels or flushes before it
//! frees what the function reaches. Queueing, flushing and cancelling are then safe.

use crate::bindings;
use kernel::init::PinInit;
use kernel::prelude::*;
use kernel::types::Opaque;

/// The function of a work item. The kernel passes it the item, from which it finds the owner.
pub(crate) type WorkFn = unsafe extern "C" fn(*mut bindings::work_struct);

/// Names an item's lockdep class (the glue keeps one per kind of item).
pub(crate) type WorkClass = bindings::rsrdma_work_class;

/// The NVMe core's workqueues, the ones the C transports use for the same work.
#[derive(Clone, Copy)]
pub(crate) enum Wq {
    /// `nvme_wq`: reconnect attempts, the abort of a lost queue's commands.
    Nvme,
    /// `nvme_reset_wq`: resets and error recovery.
    Reset,
    /// `nvme_delete_wq`: controller deletion.
    Delete,
}

impl Wq {
    fn as_ptr(self) -> *mut bindings::workqueue_struct {
        // SAFETY: nvme-core sets these in its module init and frees them at its exit; this
        // module links against nvme-core, so they are set while it is loaded. Only the
        // pointer is read.
        unsafe {
            match self {
                Wq::Nvme => bindings::nvme_wq,
                Wq::Reset => bindings::nvme_reset_wq,
                Wq::Delete => bindings::nvme_delete_wq,
            }
        }
    }

    /// Waits until every item queued on this workqueue before the call has run. Sleeps.
    pub(crate) fn flush(self) {
        // SAFETY: a live workqueue (see `as_ptr`).
        unsafe { bindings::rsrdma_flush_workqueue(self.as_ptr()) };
    }
}

/// A `struct work_struct` bound to its function.
#[repr(transparent)]
#[pin_data]
pub(crate) struct Work {
    #[pin]
    inner: Opaque<bindings::work_struct>,
}

// SAFETY: work items are made to be queued, flushed and cancelled from any thread.
unsafe impl Send for Work {}
// SAFETY: as above.
unsafe impl Sync for Work {}

impl Work {
    /// Initializes an item that runs `func`.
    ///
    /// # Safety
    ///
    /// `func` may run whenever the item is queued, until a cancel or flush that follows the
    /// last queueing returns: the owner keeps what `func` reaches from the item alive until
    /// then.
    pub(crate) unsafe fn new(func: WorkFn, class: WorkClass) -> impl PinInit<Self> {
        pin_init!(Self {
            // SAFETY: the glue initializes the item in place.
            inner <- Opaque::ffi_init(move |w| unsafe {
                bindings::rsrdma_init_work(w, Some(func), class)
            }),
        })
    }

    /// Initializes in place an item that another structure embeds (the core's controller).
    ///
    /// # Safety
    ///
    /// As for [`Work::new`]; besides, `ptr` is valid for writes and the item is not in use
    /// (never queued, or cancelled).
    pub(crate) unsafe fn init_raw(ptr: *mut bindings::work_struct, func: WorkFn, class: WorkClass) {
        // SAFETY: per the contract.
        unsafe { bindings::rsrdma_init_work(ptr, Some(func), class) };
    }

    /// The item at `ptr`, embedded in another structure.
    ///
    /// # Safety
    ///
    /// `ptr` is an initialized item that stays valid for `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::work_struct) -> &'a Self {
        // SAFETY: `Work` is a transparent wrapper of the item; valid per the contract.
        unsafe { &*ptr.cast::<Self>() }
    }

    /// Queues the item on `wq` unless it is pending; any context. False if it was pending.
    pub(crate) fn queue(&self, wq: Wq) -> bool {
        // SAFETY: an initialized item (`new`, `init_raw` or `from_raw`) on a live workqueue.
        unsafe { bindings::rsrdma_queue_work(wq.as_ptr(), self.inner.get()) }
    }

    /// Waits for the item's pending or running execution to end. Sleeps.
    pub(crate) fn flush(&self) -> bool {
        // SAFETY: an initialized item.
        unsafe { bindings::flush_work(self.inner.get()) }
    }

    /// Takes the item off its queue if pending and waits for a running execution to end.
    /// Sleeps.
    pub(crate) fn cancel_sync(&self) -> bool {
        // SAFETY: an initialized item.
        unsafe { bindings::cancel_work_sync(self.inner.get()) }
    }
}

/// A `struct delayed_work` bound to its function. The function gets the item's `work`
/// member, at the item's own address: an owner finds itself from it by the item's offset.
#[repr(transparent)]
#[pin_data]
pub(crate) struct DelayedWork {
    #[pin]
    inner: Opaque<bindings::delayed_work>,
}

const _: () = assert!(core::mem::offset_of!(bindings::delayed_work, work) == 0);

// SAFETY: as for `Work`.
unsafe impl Send for DelayedWork {}
// SAFETY: as above.
unsafe impl Sync for DelayedWork {}

impl DelayedWork {
    /// Initializes an item that runs `func`; its function gets the `work` member.
    ///
    /// # Safety
    ///
    /// As for [`Work::new`].
    pub(crate) unsafe fn new(func: WorkFn, class: WorkClass) -> impl PinInit<Self> {
        pin_init!(Self {
            // SAFETY: the glue initializes the item and its timer in place.
            inner <- Opaque::ffi_init(move |w| unsafe {
                bindings::rsrdma_init_delayed_work(w, Some(func), class)
            }),
        })
    }

    /// Queues the item on `wq` to run in `delay_ms` unless it is pending; any context.
    pub(crate) fn queue(&self, wq: Wq, delay_ms: u32) -> bool {
        // SAFETY: an initialized item on a live workqueue.
        unsafe { bindings::rsrdma_queue_delayed_work(wq.as_ptr(), self.inner.get(), delay_ms) }
    }

    /// Takes the item off its timer or queue if pending, without waiting for a running
    /// execution; any context. True if it was pending.
    pub(crate) fn cancel(&self) -> bool {
        // SAFETY: an initialized item.
        unsafe { bindings::cancel_delayed_work(self.inner.get()) }
    }

    /// As [`DelayedWork::cancel`], and waits for a running execution to end. Sleeps.
    pub(crate) fn cancel_sync(&self) -> bool {
        // SAFETY: an initialized item.
        unsafe { bindings::cancel_delayed_work_sync(self.inner.get()) }
    }
}
