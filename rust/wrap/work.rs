// SPDX-License-Identifier: GPL-2.0

//! Work items and the NVMe core's workqueues.
//!
//! 6.12's `kernel::workqueue` queues work through reference-counted pointers and has neither
//! delayed work nor flush or cancel. A controller is freed by the NVMe core, not by a reference
//! count, and its work items, like the core's own, are parts of it: the controller wrapper
//! (`nvme::Controller`) owns its items, binds each to its function, and cancels them before it
//! is freed. This module has the pieces: the raw item, and the core's workqueues.
//!
//! C header: [`include/linux/workqueue.h`](srctree/include/linux/workqueue.h).

use super::bindings;
use kernel::init::PinInit;
use kernel::prelude::*;
use kernel::str::CStr;
use kernel::sync::LockClassKey;
use kernel::types::Opaque;

/// The function of a work item. The kernel passes it the item, from which it finds the owner.
pub(in crate::wrap) type WorkFn = unsafe extern "C" fn(*mut bindings::work_struct);

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
    pub(in crate::wrap) fn as_ptr(self) -> *mut bindings::workqueue_struct {
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

/// A `struct delayed_work` bound to its function; queued without a delay it runs as soon as a
/// plain work item would. Its function gets the item's `work` member, at the item's own
/// address.
///
/// # Invariants
///
/// The item is initialized, bound to a function by [`DelayedWork::new`].
#[repr(transparent)]
#[pin_data]
pub(in crate::wrap) struct DelayedWork {
    #[pin]
    inner: Opaque<bindings::delayed_work>,
}

const _: () = assert!(core::mem::offset_of!(bindings::delayed_work, work) == 0);

// SAFETY: work items are made to be queued, flushed and cancelled from any thread.
unsafe impl Send for DelayedWork {}
// SAFETY: as above.
unsafe impl Sync for DelayedWork {}

impl DelayedWork {
    /// Initializes an item that runs `func`, in lockdep class `key` named `name`.
    ///
    /// # Safety
    ///
    /// `func` may run whenever the item is queued, until a cancel or flush that follows the
    /// last queueing returns: the owner keeps what `func` reaches from the item alive until
    /// then.
    pub(in crate::wrap) unsafe fn new(
        func: WorkFn,
        name: &'static CStr,
        key: &'static LockClassKey,
    ) -> impl PinInit<Self> {
        let key = key as *const LockClassKey as *mut bindings::lock_class_key;
        pin_init!(Self {
            // SAFETY: the glue initializes the item and its timer in place; the name and the
            // static key outlive it, as lockdep requires.
            inner <- Opaque::ffi_init(move |w| unsafe {
                bindings::rsrdma_init_delayed_work(w, Some(func), name.as_char_ptr(), key)
            }),
        })
    }

    /// Queues the item on `wq` to run in `delay_ms` unless it is pending; any context.
    pub(in crate::wrap) fn queue(&self, wq: Wq, delay_ms: u32) -> bool {
        // SAFETY: an initialized item (type invariant) on a live workqueue.
        unsafe { bindings::rsrdma_queue_delayed_work(wq.as_ptr(), self.inner.get(), delay_ms) }
    }

    /// Takes the item off its timer or queue if pending, without waiting for a running
    /// execution; any context. True if it was pending.
    pub(in crate::wrap) fn cancel(&self) -> bool {
        // SAFETY: an initialized item (type invariant).
        unsafe { bindings::cancel_delayed_work(self.inner.get()) }
    }

    /// As [`DelayedWork::cancel`], and waits for a running execution to end. Sleeps.
    pub(in crate::wrap) fn cancel_sync(&self) -> bool {
        // SAFETY: an initialized item (type invariant).
        unsafe { bindings::cancel_delayed_work_sync(self.inner.get()) }
    }

    /// Runs a pending item now (if its delay has not passed) and waits for its execution to
    /// end. Sleeps.
    pub(in crate::wrap) fn flush(&self) -> bool {
        // SAFETY: an initialized item (type invariant).
        unsafe { bindings::flush_delayed_work(self.inner.get()) }
    }
}

/// A work item of the NVMe core embedded in its controller (`reset_work`, `delete_work`,
/// `async_event_work`), which the transport waits for or cancels but does not queue.
///
/// # Invariants
///
/// An initialized item, alive as long as the reference to it.
#[repr(transparent)]
pub(crate) struct CoreWork(Opaque<bindings::work_struct>);

impl CoreWork {
    /// The item at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` is an initialized item that stays valid for `'a`.
    pub(in crate::wrap) unsafe fn from_raw<'a>(ptr: *mut bindings::work_struct) -> &'a Self {
        // SAFETY: `CoreWork` is a transparent wrapper of the item; valid per the contract.
        unsafe { &*ptr.cast::<Self>() }
    }

    /// Waits for the item's pending or running execution to end. Sleeps.
    pub(crate) fn flush(&self) -> bool {
        // SAFETY: an initialized item (type invariant).
        unsafe { bindings::flush_work(self.0.get()) }
    }

    /// Takes the item off its queue if pending and waits for a running execution to end.
    /// Sleeps.
    pub(crate) fn cancel_sync(&self) -> bool {
        // SAFETY: an initialized item (type invariant).
        unsafe { bindings::cancel_work_sync(self.0.get()) }
    }
}
