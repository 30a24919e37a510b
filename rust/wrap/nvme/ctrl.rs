// SPDX-License-Identifier: GPL-2.0

//! A transport's controller: the NVMe core's `struct nvme_ctrl` embedded in a Rust object with
//! the transport's data, its two tag sets and its work items, and every callback the core and
//! blk-mq make on it, dispatched to [`ControllerOps`].
//!
//! The core owns the controller's lifetime: it is created by [`Controller::create`] (for the
//! fabrics core's `create_ctrl`), referenced by counted [`CtrlRef`]s, and freed by the core's
//! `free_ctrl` on the last put. Its work items are cancelled and its tag sets removed when the
//! core is done with it (after `delete_ctrl`, or when its creation is undone), while the core's
//! queues still exist. A controller's
//! admin and I/O queues exist only while their tag sets are allocated: the core functions that
//! need them are on [`AdminQueue`] and [`IoQueues`], which hold the set's lock, so the set
//! cannot be removed while one is in use.
//!
//! C headers: [`drivers/nvme/host/nvme.h`](srctree/drivers/nvme/host/nvme.h),
//! [`drivers/nvme/host/fabrics.h`](srctree/drivers/nvme/host/fabrics.h),
//! [`include/linux/blk-mq.h`](srctree/include/linux/blk-mq.h).

use super::super::bindings;
use super::super::sync::{Rcu, TakeCell};
use super::super::vec::swap_remove;
use super::super::work::{DelayedWork, Wq};
use super::options::{OptionsMut, HCTX_MAX_TYPES};
use super::request::{Dispatched, OwnedRq, Pdu, TimedOutRq};
use super::tag_set::{SetGuard, SetKind, TagSet};
use super::{status_result, CoreCtrl, Failure};
use core::mem::MaybeUninit;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::ffi::c_void;
use kernel::prelude::*;
use kernel::str::CStr;
use kernel::sync::{Arc, CondVar, LockClassKey, Mutex};
use kernel::types::Opaque;

/// A transport's work items: their names, and one value per item.
pub(crate) trait WorkId: Copy + Send + Sync + 'static {
    /// Every item, in the order of [`WorkId::index`].
    const ALL: &'static [Self];
    /// The item's position in [`WorkId::ALL`].
    fn index(self) -> usize;
    /// The item's name, for lockdep (`(work_completion)name`).
    fn name(self) -> &'static CStr;
}

/// The most work items a controller has (a lockdep class each).
const MAX_WORKS: usize = 4;

/// What blk-mq's timeout handler is to do with a timed-out request.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimeoutAction {
    /// It is dealt with (completed, or it will be).
    Done,
    /// Wait for another timeout period.
    ResetTimer,
}

/// What the NVMe core and blk-mq call on a transport's controller. The controller is the
/// `Controller<Self>` the callbacks get; `Self` is the transport's data in it.
pub(crate) trait ControllerOps: Send + Sync + Sized + 'static {
    /// The transport's data of each request of both tag sets.
    type Pdu: Send + Sync;
    /// The transport's queue, each hardware context's data.
    type Queue: Send + Sync;
    /// The transport's work items (see [`Controller::queue_work`]).
    type Work: WorkId;

    /// `nvme_ctrl_ops::submit_async_event`: send the asynchronous event request.
    fn submit_async_event(ctrl: &Controller<Self>);
    /// `nvme_ctrl_ops::delete_ctrl`: tear down for deletion.
    fn delete_ctrl(ctrl: &Controller<Self>);
    /// `nvme_ctrl_ops::stop_ctrl`: no transport work may run afterwards.
    fn stop_ctrl(ctrl: &Controller<Self>);
    /// `nvme_ctrl_ops::supports_pci_p2pdma`: whether the namespaces the core adds take PCI
    /// peer-to-peer pages for I/O (asked as each is added).
    fn supports_pci_p2pdma(ctrl: &Controller<Self>) -> bool;
    /// The core's `reset_work`: reset the controller.
    fn reset_work(ctrl: &Controller<Self>);
    /// One of the transport's work items.
    fn run_work(ctrl: &Controller<Self>, work: Self::Work);

    /// The data of a request of tag set `set` on hardware queue `hctx_idx`, when blk-mq
    /// allocates it (`init_request`).
    fn init_pdu(ctrl: &Controller<Self>, set: SetKind, hctx_idx: u32) -> Result<Self::Pdu>;
    /// The queue of hardware context `hctx_idx` of tag set `set` (`init_hctx`).
    fn hctx_queue(ctrl: &Controller<Self>, set: SetKind, hctx_idx: u32) -> Option<&Self::Queue>;
    /// `blk_mq_ops::queue_rq`, inside blk-mq's RCU read-side section: hands the request on
    /// (see [`Dispatched`]).
    fn queue_rq<'a>(
        ctrl: &Controller<Self>,
        queue: &Self::Queue,
        rq: OwnedRq<'a, Self::Pdu>,
        rcu: &Rcu,
    ) -> Dispatched<'a>;
    /// `blk_mq_ops::complete`: end a request the core or blk-mq completed (its response's
    /// remote completion, a cancellation, a timeout).
    fn complete(ctrl: &Controller<Self>, rq: OwnedRq<'_, Self::Pdu>);
    /// `blk_mq_ops::timeout`.
    fn timeout(ctrl: &Controller<Self>, rq: TimedOutRq<'_, Self::Pdu>) -> TimeoutAction;
    /// `blk_mq_ops::poll` of a poll queue: completions handled.
    fn poll(ctrl: &Controller<Self>, queue: &Self::Queue) -> i32;
    /// `blk_mq_ops::map_queues`: the I/O queues of each kind (default, read, poll).
    fn map_queues(ctrl: &Controller<Self>) -> [u32; HCTX_MAX_TYPES];
}

/// One work item of a controller: the work, the controller, and which item it is.
///
/// # Invariants
///
/// `work` runs [`work_fn::<T>`]; `ctrl` is the controller that owns the slot, which cancels it
/// before it is dropped.
#[repr(C)]
#[pin_data]
struct WorkSlot<T: ControllerOps> {
    #[pin]
    work: DelayedWork,
    ctrl: *const Controller<T>,
    id: T::Work,
}

/// Lockdep classes of work items, one per position (see [`WorkId::index`]).
static WORK_KEYS: [LockClassKey; MAX_WORKS] =
    // SAFETY: lockdep expects uninitialized memory when the key is a static variable.
    unsafe { MaybeUninit::uninit().assume_init() };

/// The lockdep class of the core's reset work of our controllers.
static RESET_KEY: LockClassKey =
    // SAFETY: as above.
    unsafe { MaybeUninit::uninit().assume_init() };

/// An NVMe controller of the transport whose data is a `T` (see the module documentation).
///
/// # Invariants
///
/// `core` is first: the core's callbacks find the controller at its address. Once
/// [`Controller::create`] returns, `core` is initialized (`nvme_init_ctrl`) with `ops` as its
/// operations, and the object is pinned in a `KBox` that only `free_ctrl::<T>` frees; the work
/// items and tag sets are cancelled and removed before the other fields drop.
#[repr(C)]
#[pin_data(PinnedDrop)]
pub(crate) struct Controller<T: ControllerOps> {
    #[pin]
    core: Opaque<bindings::nvme_ctrl>,
    #[pin]
    ops: Opaque<bindings::nvme_ctrl_ops>,
    #[pin]
    admin_set: TagSet<T::Pdu>,
    #[pin]
    io_set: TagSet<T::Pdu>,
    works: KVec<Pin<KBox<WorkSlot<T>>>>,
    /// The list the controller is in, if any (see [`CtrlList`]).
    list: TakeCell<Arc<CtrlList<T>>>,
    /// Handed to the fabrics core: its options are the controller's to free.
    created: AtomicBool,
    #[pin]
    data: T,
}

// SAFETY: the embedded core structures are designed for concurrent use under the core's own
// locking; the rest is `Send`/`Sync` (`T` is), atomics, or pinned work items.
unsafe impl<T: ControllerOps> Send for Controller<T> {}
// SAFETY: as above.
unsafe impl<T: ControllerOps> Sync for Controller<T> {}

impl<T: ControllerOps> core::ops::Deref for Controller<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.data
    }
}

/// What the fabrics core hands `create_ctrl`: the device of `/dev/nvme-fabrics` and the parsed
/// options, the transport's until it returns.
pub(crate) struct CreateArgs<'a> {
    pub(in crate::wrap) dev: *mut bindings::device,
    pub(in crate::wrap) opts: OptionsMut<'a>,
}

impl<'a> CreateArgs<'a> {
    pub(crate) fn opts(&self) -> &OptionsMut<'a> {
        &self.opts
    }
}

impl<T: ControllerOps> Controller<T> {
    /// The controller whose core controller is at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` is the `core` of a live `Controller<T>`, alive for `'a`.
    unsafe fn from_core<'a>(ptr: *const c_void) -> &'a Self {
        // SAFETY: per the contract; `core` is at the start of the `repr(C)` object.
        unsafe { &*(ptr as *const Self) }
    }

    /// The NVMe core's controller.
    pub(crate) fn core(&self) -> &CoreCtrl {
        // SAFETY: initialized before any `&Controller` reaches the transport (type invariant),
        // alive with `self`.
        unsafe { CoreCtrl::from_raw(self.core.get()) }
    }

    /// Creates a controller for the options of `args`, named after transport `name`, with
    /// `queue_count` queues (the admin queue included) of `sqsize` (0's based) and the data
    /// `data` initializes (`nvme_init_ctrl`, then `nvme_add_ctrl`). Returns the creation
    /// reference.
    pub(crate) fn create(
        args: &CreateArgs<'_>,
        name: &'static CStr,
        queue_count: u32,
        sqsize: u16,
        data: impl PinInit<T, Error>,
    ) -> Result<NewCtrl<T>> {
        if T::Work::ALL.len() > MAX_WORKS {
            return Err(EINVAL);
        }
        let opts = args.opts.as_ptr();
        let kato = args.opts.kato();
        let module = crate::THIS_MODULE.as_ptr().cast::<bindings::module>();
        let ctrl = KBox::try_pin_init(
            try_pin_init!(&this in Controller {
                // SAFETY: zeroed, as the core expects before `nvme_init_ctrl` (the C transports
                // kzalloc it), plus the fields a transport sets first.
                core <- Opaque::ffi_init(|n: *mut bindings::nvme_ctrl| unsafe {
                    n.write_bytes(0, 1);
                    (*n).opts = opts;
                    (*n).queue_count = queue_count;
                    (*n).sqsize = sqsize;
                    (*n).kato = kato;
                }),
                ops: Opaque::new(Self::ops_table(name, module)),
                admin_set <- TagSet::new(SetKind::Admin),
                io_set <- TagSet::new(SetKind::Io),
                works: Self::new_works(this.as_ptr())?,
                list: TakeCell::new(),
                created: AtomicBool::new(false),
                data <- data,
            }? Error),
            GFP_KERNEL,
        )?;
        let n = ctrl.core.get();
        // SAFETY: before `nvme_init_ctrl`, as the core expects from transports: nothing uses
        // the item yet. Its function reaches only the controller, whose deletion (before it is
        // freed) flushes the item.
        unsafe {
            bindings::rsrdma_init_work(
                core::ptr::addr_of_mut!((*n).reset_work),
                Some(reset_work_fn::<T>),
                kernel::c_str!("(work_completion)rsrdma_reset").as_char_ptr(),
                &RESET_KEY as *const LockClassKey as *mut bindings::lock_class_key,
            )
        };
        // SAFETY: `core` is zeroed apart from the fields set above; `ops` lives in the object,
        // which the core frees only through them (`free_ctrl`), last.
        kernel::error::to_result(unsafe {
            bindings::nvme_init_ctrl(n, args.dev, ctrl.ops.get(), 0)
        })?;
        // INVARIANT: initialized; from here the core owns the memory and frees it through
        // `free_ctrl` on the last put.
        // SAFETY: the box is not moved or freed but by `free_ctrl`.
        let ptr = KBox::into_raw(unsafe { Pin::into_inner_unchecked(ctrl) });
        // SAFETY: `ptr` is the box just leaked.
        let new = NewCtrl(unsafe { NonNull::new_unchecked(ptr) });
        // SAFETY: an initialized controller.
        if let Err(e) = kernel::error::to_result(unsafe { bindings::nvme_add_ctrl(n) }) {
            // Only `nvme_init_ctrl` to undo: its reference, whose put frees the controller.
            let ptr = new.0;
            core::mem::forget(new);
            // SAFETY: the creation reference, which `new` held.
            unsafe { bindings::rsrdma_nvme_put_ctrl(ptr.as_ptr().cast()) };
            return Err(e);
        }
        Ok(new)
    }

    fn ops_table(name: &'static CStr, module: *mut bindings::module) -> bindings::nvme_ctrl_ops {
        bindings::nvme_ctrl_ops {
            name: name.as_char_ptr(),
            module,
            flags: bindings::NVME_F_FABRICS,
            reg_read32: Some(bindings::nvmf_reg_read32),
            reg_read64: Some(bindings::nvmf_reg_read64),
            reg_write32: Some(bindings::nvmf_reg_write32),
            subsystem_reset: Some(bindings::nvmf_subsystem_reset),
            free_ctrl: Some(free_ctrl::<T>),
            submit_async_event: Some(submit_async_event::<T>),
            delete_ctrl: Some(delete_ctrl::<T>),
            stop_ctrl: Some(stop_ctrl::<T>),
            get_address: Some(bindings::nvmf_get_address),
            supports_pci_p2pdma: Some(supports_pci_p2pdma::<T>),
            ..Default::default()
        }
    }

    fn new_works(ctrl: *const Self) -> Result<KVec<Pin<KBox<WorkSlot<T>>>>> {
        let mut works = KVec::with_capacity(T::Work::ALL.len(), GFP_KERNEL)?;
        for (i, &id) in T::Work::ALL.iter().enumerate() {
            let slot = KBox::pin_init(
                pin_init!(WorkSlot {
                    // SAFETY: the function reaches the slot and the controller, which cancels
                    // the item before either is dropped (`PinnedDrop`).
                    work <- unsafe { DelayedWork::new(work_fn::<T>, id.name(), &WORK_KEYS[i]) },
                    ctrl,
                    id,
                }),
                GFP_KERNEL,
            )?;
            works.push(slot, GFP_KERNEL)?;
        }
        Ok(works)
    }

    fn work(&self, id: T::Work) -> Option<&DelayedWork> {
        self.works.get(id.index()).map(|s| &s.work)
    }

    /// Queues work item `id` on `wq` unless it is pending; any context. False if it was
    /// pending.
    pub(crate) fn queue_work(&self, id: T::Work, wq: Wq) -> bool {
        self.queue_delayed_work(id, wq, 0)
    }

    /// Queues work item `id` on `wq` to run in `delay_ms`, unless it is pending.
    pub(crate) fn queue_delayed_work(&self, id: T::Work, wq: Wq, delay_ms: u32) -> bool {
        self.work(id).is_some_and(|w| w.queue(wq, delay_ms))
    }

    /// Takes work item `id` off its timer or queue if pending, without waiting for a running
    /// execution; any context. True if it was pending.
    pub(crate) fn cancel_work(&self, id: T::Work) -> bool {
        self.work(id).is_some_and(DelayedWork::cancel)
    }

    /// As [`Controller::cancel_work`], and waits for a running execution. Sleeps.
    pub(crate) fn cancel_work_sync(&self, id: T::Work) -> bool {
        self.work(id).is_some_and(DelayedWork::cancel_sync)
    }

    /// Runs work item `id` now if it is pending and waits for its execution. Sleeps.
    pub(crate) fn flush_work(&self, id: T::Work) -> bool {
        self.work(id).is_some_and(DelayedWork::flush)
    }

    /// The admin tag set (for its readers).
    pub(crate) fn admin_tag_set(&self) -> &TagSet<T::Pdu> {
        &self.admin_set
    }

    /// The I/O tag set (for its readers).
    pub(crate) fn io_tag_set(&self) -> &TagSet<T::Pdu> {
        &self.io_set
    }

    /// The admin queue, if its tag set is allocated; the set is not removed meanwhile.
    pub(crate) fn admin_queue(&self) -> Option<AdminQueue<'_, T>> {
        let guard = self.admin_set.lock();
        // INVARIANT: allocated, under its lock.
        (*guard).then_some(AdminQueue { ctrl: self, guard })
    }

    /// Allocates the admin tag set (`nvme_alloc_admin_tag_set`) and gives its queue; `EBUSY`
    /// if it is allocated already.
    pub(crate) fn alloc_admin_queue(&self) -> Result<AdminQueue<'_, T>, Failure> {
        let mut guard = self.admin_set.lock();
        // SAFETY: the set's lock; the controller it is in; the admin ops initialize each PDU
        // as a `Pdu<T::Pdu>`.
        unsafe {
            self.admin_set
                .alloc(&mut guard, self.core(), OpsTable::<T>::admin(), 0)
        }?;
        // INVARIANT: allocated, under its lock.
        Ok(AdminQueue { ctrl: self, guard })
    }

    /// The I/O queues, if their tag set is allocated; the set is not removed meanwhile.
    pub(crate) fn io_queues(&self) -> Option<IoQueues<'_, T>> {
        let guard = self.io_set.lock();
        // INVARIANT: allocated, under its lock.
        (*guard).then_some(IoQueues { ctrl: self, guard })
    }

    /// Allocates the I/O tag set with `nr_maps` queue maps (`nvme_alloc_io_tag_set`) and gives
    /// its queues; `EBUSY` if it is allocated already.
    pub(crate) fn alloc_io_queues(&self, nr_maps: u32) -> Result<IoQueues<'_, T>, Failure> {
        let mut guard = self.io_set.lock();
        // SAFETY: as in `alloc_admin_queue`, for the I/O ops.
        unsafe {
            self.io_set
                .alloc(&mut guard, self.core(), OpsTable::<T>::io(), nr_maps)
        }?;
        // INVARIANT: allocated, under its lock.
        Ok(IoQueues { ctrl: self, guard })
    }
}

impl<T: ControllerOps> Controller<T> {
    /// What the transport must have done when the core is done with the controller (after
    /// its `delete_ctrl`, or when its creation is undone): its work items cancelled, its tag
    /// sets removed. Done here in case it did not; the core still has its queues.
    fn finish(&self) {
        for w in self.works.iter() {
            w.work.cancel_sync();
        }
        for set in [&self.io_set, &self.admin_set] {
            let mut guard = set.lock();
            // SAFETY: the set's lock; the controller it is in, whose core queues still exist.
            unsafe { set.remove(&mut guard, self.core()) };
        }
    }

    /// Whether a tag set is still allocated (which `finish` rules out).
    fn sets_allocated(&self) -> bool {
        *self.io_set.lock() || *self.admin_set.lock()
    }
}

#[pinned_drop]
impl<T: ControllerOps> PinnedDrop for Controller<T> {
    fn drop(self: Pin<&mut Self>) {
        // Idle since `finish`: cancelled once more before what they reach goes.
        for w in self.works.iter() {
            w.work.cancel_sync();
        }
    }
}

/// The admin queue of a controller, whose tag set is allocated and is not removed while this
/// lives (it holds the set's lock).
///
/// # Invariants
///
/// `guard` holds the lock of `ctrl`'s admin tag set, which is allocated.
pub(crate) struct AdminQueue<'a, T: ControllerOps> {
    ctrl: &'a Controller<T>,
    guard: SetGuard<'a>,
}

/// Wraps the core functions that take a controller whose queues of one kind exist.
macro_rules! queue_calls {
    ($ty:ident, $($(#[$m:meta])* $name:ident => $f:ident;)*) => {
        impl<T: ControllerOps> $ty<'_, T> {
            $(
                $(#[$m])*
                pub(crate) fn $name(&self) {
                    // SAFETY: a live controller whose tag set of this kind is allocated and
                    // stays so (type invariant); the core function does its own locking.
                    unsafe { bindings::$f(self.ctrl.core().as_ptr()) };
                }
            )*
        }
    };
}

queue_calls! {
    AdminQueue,
    /// Stops dispatch on the admin queue (`nvme_quiesce_admin_queue`).
    quiesce => nvme_quiesce_admin_queue;
    /// Restarts dispatch on the admin queue (`nvme_unquiesce_admin_queue`).
    unquiesce => nvme_unquiesce_admin_queue;
    /// Starts what the core runs for a live controller: keep-alive, asynchronous events,
    /// namespace scanning (`nvme_start_ctrl`).
    start_ctrl => nvme_start_ctrl;
}

impl<'a, T: ControllerOps> AdminQueue<'a, T> {
    /// Ends the admin commands in flight, for the core to retry or fail them (see
    /// [`TagSet`]'s cancellation, which takes their shares over). The transport stops its queue
    /// first, so that no response of them comes late.
    pub(crate) fn cancel_requests(&self) {
        // SAFETY: the set's lock is held (type invariant); the controller it is in.
        unsafe { self.ctrl.admin_set.cancel(&self.guard, self.ctrl.core()) };
    }

    /// Waits for the admin queue's timeout work (`blk_sync_queue`). Sleeps.
    pub(crate) fn sync(&self) {
        // SAFETY: the admin queue exists while its set is allocated (type invariant).
        unsafe { bindings::blk_sync_queue((*self.ctrl.core().as_ptr()).admin_q) };
    }

    /// Enables the controller. Its property accesses may fail with an NVMe status (a command
    /// aborted when the connection went, say), which is a failure like an errno.
    pub(crate) fn enable(&self) -> Result<(), Failure> {
        // SAFETY: a live controller with an admin queue (type invariant).
        status_result(unsafe { bindings::nvme_enable_ctrl(self.ctrl.core().as_ptr()) })
    }

    /// Disables (or shuts down) the controller; a failure (queue gone) needs no handling.
    pub(crate) fn disable(&self, shutdown: bool) {
        // SAFETY: as above.
        unsafe { bindings::nvme_disable_ctrl(self.ctrl.core().as_ptr(), shutdown) };
    }

    /// Identifies the controller; like [`AdminQueue::enable`], it may fail with an NVMe
    /// status.
    pub(crate) fn init_finish(&self) -> Result<(), Failure> {
        // SAFETY: as above; the admin queue is connected and enabled.
        status_result(unsafe { bindings::nvme_init_ctrl_finish(self.ctrl.core().as_ptr(), false) })
    }

    /// Sets Number of Queues; returns how many I/O queues the controller granted: 0 when it
    /// answered with an error status (the core's rule for degraded controllers). A host path
    /// error, the command lost with the connection, is a failure.
    pub(crate) fn set_queue_count(&self, wanted: u32) -> Result<u32, Failure> {
        let mut count = wanted as i32;
        // SAFETY: as above; `count` is a valid in/out parameter.
        status_result(unsafe {
            bindings::nvme_set_queue_count(self.ctrl.core().as_ptr(), &mut count)
        })?;
        Ok(count as u32)
    }

    /// Sends the Fabrics Connect command of the admin queue.
    pub(crate) fn connect(&self) -> Result<(), Failure> {
        // SAFETY: as above; the transport connected its queue.
        status_result(unsafe { bindings::nvmf_connect_admin_queue(self.ctrl.core().as_ptr()) })
    }

    /// Removes the admin tag set (`nvme_remove_admin_tag_set`), after waiting for its readers.
    pub(crate) fn remove(mut self) {
        // SAFETY: the set's lock; the controller it is in.
        unsafe {
            self.ctrl
                .admin_set
                .remove(&mut self.guard, self.ctrl.core())
        };
    }
}

/// The I/O queues of a controller, whose tag set is allocated and is not removed or changed
/// by others while this lives (it holds the set's lock).
///
/// # Invariants
///
/// `guard` holds the lock of `ctrl`'s I/O tag set, which is allocated.
pub(crate) struct IoQueues<'a, T: ControllerOps> {
    ctrl: &'a Controller<T>,
    guard: SetGuard<'a>,
}

queue_calls! {
    IoQueues,
    /// Stops dispatch on the I/O queues (`nvme_quiesce_io_queues`).
    quiesce => nvme_quiesce_io_queues;
    /// Restarts dispatch on the I/O queues (`nvme_unquiesce_io_queues`).
    unquiesce => nvme_unquiesce_io_queues;
    /// Waits for the namespaces' timeout work (`nvme_sync_io_queues`).
    sync => nvme_sync_io_queues;
    /// Starts freezing the namespaces' queues (`nvme_start_freeze`).
    start_freeze => nvme_start_freeze;
    /// Unfreezes them (`nvme_unfreeze`).
    unfreeze => nvme_unfreeze;
}

impl<T: ControllerOps> IoQueues<'_, T> {
    /// Ends the I/O commands in flight, for the core to retry or fail them (see
    /// [`AdminQueue::cancel_requests`]).
    pub(crate) fn cancel_requests(&self) {
        // SAFETY: the set's lock is held (type invariant); the controller it is in.
        unsafe { self.ctrl.io_set.cancel(&self.guard, self.ctrl.core()) };
    }

    /// Waits at most `timeout_ms` for the queues to freeze; false on timeout.
    pub(crate) fn wait_freeze_timeout(&self, timeout_ms: u32) -> bool {
        let jiffies = kernel::time::msecs_to_jiffies(timeout_ms);
        // SAFETY: a live controller with I/O queues (type invariant).
        unsafe {
            bindings::nvme_wait_freeze_timeout(self.ctrl.core().as_ptr(), jiffies as isize) > 0
        }
    }

    /// Sends the Fabrics Connect command of I/O queue `qid`.
    pub(crate) fn connect(&self, qid: u16) -> Result<(), Failure> {
        // SAFETY: as above; the transport connected its queue.
        status_result(unsafe { bindings::nvmf_connect_io_queue(self.ctrl.core().as_ptr(), qid) })
    }

    /// Sets the number of the set's hardware queues, which reallocates its tags (see
    /// [`TagSet`]).
    pub(crate) fn update_nr_hw_queues(&self, nr: u32) {
        self.ctrl.io_set.update_nr_hw_queues(&self.guard, nr);
    }

    /// Removes the I/O tag set (`nvme_remove_io_tag_set`), after waiting for its readers.
    pub(crate) fn remove(mut self) {
        // SAFETY: the set's lock; the controller it is in.
        unsafe { self.ctrl.io_set.remove(&mut self.guard, self.ctrl.core()) };
    }
}

/// The reference a new controller is created with (see [`Controller::create`]). Dropping it
/// abandons the controller (`nvme_uninit_ctrl` and the put that frees it); the fabrics core
/// takes it over when the transport's `create_ctrl` returns it.
///
/// # Invariants
///
/// Holds the creation reference of a controller added with `nvme_add_ctrl` and not yet handed
/// to the fabrics core.
pub(crate) struct NewCtrl<T: ControllerOps>(NonNull<Controller<T>>);

// SAFETY: a reference to a controller, which is `Send + Sync`.
unsafe impl<T: ControllerOps> Send for NewCtrl<T> {}
// SAFETY: as above.
unsafe impl<T: ControllerOps> Sync for NewCtrl<T> {}

impl<T: ControllerOps> core::ops::Deref for NewCtrl<T> {
    type Target = Controller<T>;

    fn deref(&self) -> &Controller<T> {
        // SAFETY: the reference held keeps the controller alive (type invariant).
        unsafe { self.0.as_ref() }
    }
}

impl<T: ControllerOps> NewCtrl<T> {
    /// Hands the controller to the fabrics core, whose reference this becomes; its options are
    /// the controller's to free from now on.
    pub(in crate::wrap) fn into_core(self) -> *mut bindings::nvme_ctrl {
        self.created.store(true, Ordering::Release);
        let ptr = self.0.as_ptr();
        core::mem::forget(self);
        ptr.cast()
    }
}

impl<T: ControllerOps> Drop for NewCtrl<T> {
    fn drop(&mut self) {
        self.finish();
        let n = self.core().as_ptr();
        // SAFETY: an added controller that was never handed out (type invariant): undone as
        // the core expects, `nvme_uninit_ctrl` then the creation reference's put.
        unsafe {
            bindings::nvme_uninit_ctrl(n);
            bindings::rsrdma_nvme_put_ctrl(n);
        }
    }
}

/// A counted reference to a controller (`nvme_get_ctrl`), which is not freed while it lives.
///
/// # Invariants
///
/// Holds one reference to a live controller.
pub(crate) struct CtrlRef<T: ControllerOps>(NonNull<Controller<T>>);

// SAFETY: a reference to a controller, which is `Send + Sync`; it may be put on any thread.
unsafe impl<T: ControllerOps> Send for CtrlRef<T> {}
// SAFETY: as above.
unsafe impl<T: ControllerOps> Sync for CtrlRef<T> {}

impl<T: ControllerOps> CtrlRef<T> {
    /// A reference to `ctrl`, unless it is being freed (its count fell to zero).
    pub(crate) fn get(ctrl: &Controller<T>) -> Option<Self> {
        // SAFETY: a live controller; the count is taken only if it is not zero.
        if !unsafe { bindings::rsrdma_nvme_tryget_ctrl(ctrl.core().as_ptr()) } {
            return None;
        }
        // INVARIANT: the reference taken above.
        Some(Self(NonNull::from(ctrl)))
    }
}

impl<T: ControllerOps> core::ops::Deref for CtrlRef<T> {
    type Target = Controller<T>;

    fn deref(&self) -> &Controller<T> {
        // SAFETY: the reference held keeps the controller alive (type invariant).
        unsafe { self.0.as_ref() }
    }
}

impl<T: ControllerOps> Clone for CtrlRef<T> {
    fn clone(&self) -> Self {
        // SAFETY: a live controller whose count is not zero (`self` holds one).
        unsafe { bindings::rsrdma_nvme_get_ctrl(self.core().as_ptr()) };
        // INVARIANT: the reference taken above.
        Self(self.0)
    }
}

impl<T: ControllerOps> Drop for CtrlRef<T> {
    fn drop(&mut self) {
        // SAFETY: the reference this holds (type invariant); the last put frees the controller
        // (`free_ctrl`).
        unsafe { bindings::rsrdma_nvme_put_ctrl(self.core().as_ptr()) };
    }
}

/// A transport's list of its controllers, and how many of them are not freed yet (their
/// `free_ctrl` is module code, which module unload must wait for).
///
/// # Invariants
///
/// Every pointer in `ctrls` is a live controller that holds a reference to this list; it is
/// removed, under the lock, before the controller is freed. `alive` counts the controllers
/// added and not yet freed.
#[pin_data]
pub(crate) struct CtrlList<T: ControllerOps> {
    #[pin]
    ctrls: Mutex<KVec<NonNull<Controller<T>>>>,
    #[pin]
    alive: Mutex<usize>,
    #[pin]
    freed: CondVar,
}

// SAFETY: the pointers are to controllers, which are `Send + Sync`, used under the lock.
unsafe impl<T: ControllerOps> Send for CtrlList<T> {}
// SAFETY: as above.
unsafe impl<T: ControllerOps> Sync for CtrlList<T> {}

impl<T: ControllerOps> CtrlList<T> {
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            ctrls <- kernel::new_mutex!(KVec::new(), "rsrdma_ctrl_list::ctrls"),
            alive <- kernel::new_mutex!(0, "rsrdma_ctrl_list::alive"),
            freed <- kernel::new_condvar!("rsrdma_ctrl_list::freed"),
        })
    }

    /// Makes room for one more controller, so that adding it cannot fail.
    pub(crate) fn reserve(&self) -> Result {
        Ok(self.ctrls.lock().reserve(1, GFP_KERNEL)?)
    }

    /// Adds a new controller; `ENOMEM` if there is no room (see [`CtrlList::reserve`]),
    /// `EBUSY` if it is in a list already.
    pub(crate) fn add(self: &Arc<Self>, ctrl: &NewCtrl<T>) -> Result {
        let mut ctrls = self.ctrls.lock();
        if ctrls.len() == ctrls.capacity() {
            return Err(ENOMEM);
        }
        ctrl.list.put(self.clone()).map_err(|_| EBUSY)?;
        // Within the capacity checked above: does not allocate, nor fail.
        let _ = ctrls.push(ctrl.0, GFP_KERNEL);
        // INVARIANT: listed, holding a reference to the list, counted alive.
        *self.alive.lock() += 1;
        Ok(())
    }

    /// Takes a reference to every listed controller (skipping those being freed); `None` when
    /// the room for them cannot be allocated.
    pub(crate) fn get_all(&self) -> Option<KVec<CtrlRef<T>>> {
        let ctrls = self.ctrls.lock();
        // Room first: a reference taken and then dropped under the lock could be the last
        // one, and freeing the controller takes the lock.
        let mut out = KVec::with_capacity(ctrls.len(), GFP_KERNEL).ok()?;
        for c in ctrls.iter() {
            // SAFETY: listed controllers are alive while the lock is held (type invariant).
            if let Some(r) = CtrlRef::get(unsafe { c.as_ref() }) {
                // Within the capacity reserved above.
                let _ = out.push(r, GFP_KERNEL);
            }
        }
        Some(out)
    }

    /// Whether a listed controller satisfies `f` (called under the list's lock).
    pub(crate) fn any(&self, mut f: impl FnMut(&Controller<T>) -> bool) -> bool {
        let ctrls = self.ctrls.lock();
        // SAFETY: listed controllers are alive while the lock is held (type invariant).
        ctrls.iter().any(|c| f(unsafe { c.as_ref() }))
    }

    /// The number of controllers added and not freed yet.
    pub(crate) fn alive(&self) -> usize {
        *self.alive.lock()
    }

    /// Waits until a controller is freed, if any is left; returns how many are left then.
    pub(crate) fn wait_freed(&self) -> usize {
        let mut alive = self.alive.lock();
        if *alive != 0 {
            self.freed.wait(&mut alive);
        }
        *alive
    }

    /// Removes a controller being freed.
    fn remove(&self, ctrl: *const Controller<T>) {
        let mut ctrls = self.ctrls.lock();
        if let Some(i) = ctrls.iter().position(|c| core::ptr::eq(c.as_ptr(), ctrl)) {
            swap_remove(&mut ctrls, i);
        }
    }

    /// Counts a listed controller as freed.
    fn released(&self) {
        let mut alive = self.alive.lock();
        *alive = alive.saturating_sub(1);
        self.freed.notify_all();
    }
}

/// The blk-mq operations of a controller's tag sets.
struct OpsTable<T: ControllerOps>(core::marker::PhantomData<T>);

impl<T: ControllerOps> OpsTable<T> {
    const IO: bindings::blk_mq_ops = bindings::blk_mq_ops {
        queue_rq: Some(queue_rq::<T>),
        complete: Some(complete::<T>),
        init_request: Some(init_request::<T>),
        exit_request: Some(exit_request::<T>),
        init_hctx: Some(init_hctx::<T>),
        timeout: Some(timeout::<T>),
        map_queues: Some(map_queues::<T>),
        poll: Some(poll::<T>),
        // SAFETY: `blk_mq_ops` holds only optional function pointers, for which zero is `None`.
        ..unsafe { MaybeUninit::zeroed().assume_init() }
    };

    /// The admin queue has neither poll queues nor a queue map.
    const ADMIN: bindings::blk_mq_ops = bindings::blk_mq_ops {
        map_queues: None,
        poll: None,
        ..Self::IO
    };

    fn io() -> &'static bindings::blk_mq_ops {
        &Self::IO
    }

    fn admin() -> &'static bindings::blk_mq_ops {
        &Self::ADMIN
    }
}

/// The controller a request of our tag sets belongs to.
///
/// # Safety
///
/// `rq` is a request of a tag set of a live `Controller<T>`, alive for `'a`, whose PDU was
/// initialized by `init_request::<T>`.
unsafe fn ctrl_of_rq<'a, T: ControllerOps>(rq: *mut bindings::request) -> &'a Controller<T> {
    // SAFETY: the PDU starts with `nvme_request`, whose `ctrl` `init_request` set to the
    // controller's core, at its start.
    unsafe {
        let nreq = bindings::rsrdma_rq_pdu(rq) as *const bindings::nvme_request;
        Controller::from_core((*nreq).ctrl.cast())
    }
}

/// Which of the controller's sets `set` is.
fn kind_of<T: ControllerOps>(ctrl: &Controller<T>, set: *mut bindings::blk_mq_tag_set) -> SetKind {
    if set == ctrl.io_set.as_ptr() {
        SetKind::Io
    } else {
        SetKind::Admin
    }
}

/// `blk_mq_ops::queue_rq`.
///
/// # Safety
///
/// Called by blk-mq with a hardware context of one of our sets (initialized by `init_hctx`)
/// and a request it hands the driver.
unsafe extern "C" fn queue_rq<T: ControllerOps>(
    hctx: *mut bindings::blk_mq_hw_ctx,
    bd: *const bindings::blk_mq_queue_data,
) -> bindings::blk_status_t {
    // SAFETY: a request of our set, which blk-mq hands us; its controller outlives the set.
    let (rq, ctrl) = unsafe {
        let rq = (*bd).rq;
        (OwnedRq::from_raw(rq), ctrl_of_rq::<T>(rq))
    };
    // SAFETY: `init_hctx` set the driver data to a queue of the controller, which outlives
    // its tag sets.
    let queue = unsafe { &*((*hctx).driver_data as *const T::Queue) };
    // SAFETY: blk-mq dispatches a hardware context that is not BLOCKING (the core sets that
    // flag only for transports that ask) inside an RCU read-side section, for all of this call.
    let rcu = unsafe { Rcu::assume() };
    T::queue_rq(ctrl, queue, rq, &rcu).status()
}

/// `blk_mq_ops::complete`.
///
/// # Safety
///
/// Called by blk-mq with a request of one of our sets to end.
unsafe extern "C" fn complete<T: ControllerOps>(rq: *mut bindings::request) {
    // SAFETY: a request of our set, which blk-mq hands us to end.
    let (rq, ctrl) = unsafe { (OwnedRq::from_raw(rq), ctrl_of_rq::<T>(rq)) };
    T::complete(ctrl, rq);
}

/// `blk_mq_ops::timeout`.
///
/// # Safety
///
/// Called by blk-mq's timeout handler with a started request of one of our sets, held for the
/// call.
unsafe extern "C" fn timeout<T: ControllerOps>(
    rq: *mut bindings::request,
) -> bindings::blk_eh_timer_return {
    // SAFETY: as said; the handle does not outlive the call.
    let (trq, ctrl) = unsafe { (TimedOutRq::from_raw(rq), ctrl_of_rq::<T>(rq)) };
    match T::timeout(ctrl, trq) {
        TimeoutAction::Done => bindings::blk_eh_timer_return_BLK_EH_DONE,
        TimeoutAction::ResetTimer => bindings::blk_eh_timer_return_BLK_EH_RESET_TIMER,
    }
}

/// `blk_mq_ops::poll`.
///
/// # Safety
///
/// Called by blk-mq with a hardware context of our I/O set, initialized by `init_hctx`.
unsafe extern "C" fn poll<T: ControllerOps>(
    hctx: *mut bindings::blk_mq_hw_ctx,
    _iob: *mut bindings::io_comp_batch,
) -> i32 {
    // SAFETY: the context's queue (see `queue_rq`), and its set's controller.
    let (queue, ctrl) = unsafe {
        (
            &*((*hctx).driver_data as *const T::Queue),
            Controller::<T>::from_core((*(*(*hctx).queue).tag_set).driver_data),
        )
    };
    T::poll(ctrl, queue)
}

/// `blk_mq_ops::init_hctx`.
///
/// # Safety
///
/// Called by blk-mq with a hardware context it is initializing and its set's driver data, the
/// core controller of a `Controller<T>` (the core sets it at allocation).
unsafe extern "C" fn init_hctx<T: ControllerOps>(
    hctx: *mut bindings::blk_mq_hw_ctx,
    data: *mut c_void,
    hctx_idx: u32,
) -> i32 {
    // SAFETY: per the contract; the controller outlives its tag sets.
    let ctrl = unsafe { Controller::<T>::from_core(data) };
    // SAFETY: the context being initialized belongs to one of the controller's sets.
    let kind = kind_of(ctrl, unsafe { (*(*hctx).queue).tag_set });
    let Some(queue) = T::hctx_queue(ctrl, kind, hctx_idx) else {
        return EINVAL.to_errno();
    };
    // SAFETY: nothing else reads the field before `init_hctx` returns; the queue, borrowed
    // from the controller, lives as long as it, which outlives the context.
    unsafe { (*hctx).driver_data = queue as *const T::Queue as *mut c_void };
    0
}

/// `blk_mq_ops::init_request`.
///
/// # Safety
///
/// Called by blk-mq for a request of a set whose driver data is the core controller of a
/// `Controller<T>` allocated with PDUs of `Pdu<T::Pdu>` bytes, not yet used.
unsafe extern "C" fn init_request<T: ControllerOps>(
    set: *mut bindings::blk_mq_tag_set,
    rq: *mut bindings::request,
    hctx_idx: u32,
    _node: u32,
) -> i32 {
    // SAFETY: per the contract; the controller outlives its tag sets.
    let ctrl = unsafe { Controller::<T>::from_core((*set).driver_data) };
    let data = match T::init_pdu(ctrl, kind_of(ctrl, set), hctx_idx) {
        Ok(d) => d,
        Err(e) => return e.to_errno(),
    };
    // SAFETY: the PDU is `size_of::<Pdu<T::Pdu>>()` bytes that nothing else uses yet; each
    // field is written in place.
    unsafe {
        let pdu = bindings::rsrdma_rq_pdu(rq) as *mut Pdu<T::Pdu>;
        let nreq = core::ptr::addr_of_mut!((*pdu).nreq).cast::<bindings::nvme_request>();
        nreq.write_bytes(0, 1);
        (*nreq).ctrl = ctrl.core.get();
        (*nreq).cmd = core::ptr::addr_of_mut!((*pdu).cmd).cast();
        core::ptr::addr_of_mut!((*pdu).shares).write(core::sync::atomic::AtomicU8::new(0));
        core::ptr::addr_of_mut!((*pdu).data).write(data);
    }
    0
}

/// `blk_mq_ops::exit_request`.
///
/// # Safety
///
/// Called by blk-mq for a request `init_request::<T>` initialized, which it frees next.
unsafe extern "C" fn exit_request<T: ControllerOps>(
    _set: *mut bindings::blk_mq_tag_set,
    rq: *mut bindings::request,
    _hctx_idx: u32,
) {
    // SAFETY: an initialized PDU, not used after this.
    unsafe {
        let pdu = bindings::rsrdma_rq_pdu(rq) as *mut Pdu<T::Pdu>;
        core::ptr::drop_in_place(core::ptr::addr_of_mut!((*pdu).data));
    }
}

/// `blk_mq_ops::map_queues`.
///
/// # Safety
///
/// Called by blk-mq with our I/O set, whose driver data is our core controller.
unsafe extern "C" fn map_queues<T: ControllerOps>(set: *mut bindings::blk_mq_tag_set) {
    // SAFETY: per the contract.
    let ctrl = unsafe { Controller::<T>::from_core((*set).driver_data) };
    let mut io_queues = T::map_queues(ctrl);
    // SAFETY: our set and controller; `io_queues` has HCTX_MAX_TYPES entries, only read.
    unsafe { bindings::nvmf_map_queues(set, ctrl.core().as_ptr(), io_queues.as_mut_ptr()) };
}

/// `nvme_ctrl_ops::free_ctrl`: the last reference is gone.
///
/// # Safety
///
/// Called by the core with the core controller of a `Controller<T>`, which nothing uses
/// afterwards.
unsafe extern "C" fn free_ctrl<T: ControllerOps>(n: *mut bindings::nvme_ctrl) {
    let ptr = n as *mut Controller<T>;
    // SAFETY: per the contract; alive until the box is dropped below.
    let ctrl = unsafe { &*ptr };
    if ctrl.sets_allocated() {
        // The core tore its queues down already: a set cannot be removed now, nor freed.
        crate::wrap::log::log_err!(
            ctrl.core(),
            "freed with a tag set allocated: the controller is leaked"
        );
        return;
    }
    let list = ctrl.list.take();
    if let Some(l) = &list {
        l.remove(ptr);
    }
    let opts = ctrl
        .created
        .load(Ordering::Acquire)
        .then(|| ctrl.core().opts().as_ptr());
    // SAFETY: allocated with `KBox` in `Controller::create` and leaked to the core, which is done
    // with it; the drop cancels its work items and removes its tag sets first.
    drop(unsafe { KBox::from_raw(ptr) });
    if let Some(opts) = opts {
        // SAFETY: after a successful creation the options are the controller's to free, as
        // in the C transports; nothing uses them any more.
        unsafe { bindings::nvmf_free_options(opts) };
    }
    if let Some(l) = list {
        // Module unload may go on once this notifies it; the list's reference goes right after
        // (the module's registry holds another until unload is past several grace periods).
        l.released();
    }
}

/// `nvme_ctrl_ops::submit_async_event`.
///
/// # Safety
///
/// Called by the core with the core controller of a live `Controller<T>`.
unsafe extern "C" fn submit_async_event<T: ControllerOps>(n: *mut bindings::nvme_ctrl) {
    // SAFETY: per the contract.
    T::submit_async_event(unsafe { Controller::<T>::from_core(n.cast()) });
}

/// `nvme_ctrl_ops::delete_ctrl`.
///
/// # Safety
///
/// As for `submit_async_event`.
unsafe extern "C" fn delete_ctrl<T: ControllerOps>(n: *mut bindings::nvme_ctrl) {
    // SAFETY: per the contract.
    let ctrl = unsafe { Controller::<T>::from_core(n.cast()) };
    T::delete_ctrl(ctrl);
    // Next the core uninitializes the controller, and then frees it.
    ctrl.finish();
}

/// `nvme_ctrl_ops::stop_ctrl`.
///
/// # Safety
///
/// As for `submit_async_event`.
unsafe extern "C" fn stop_ctrl<T: ControllerOps>(n: *mut bindings::nvme_ctrl) {
    // SAFETY: per the contract.
    T::stop_ctrl(unsafe { Controller::<T>::from_core(n.cast()) });
}

/// `nvme_ctrl_ops::supports_pci_p2pdma` of our controllers.
///
/// # Safety
///
/// Called by the NVMe core with one of our live controllers (as it adds a namespace).
unsafe extern "C" fn supports_pci_p2pdma<T: ControllerOps>(n: *mut bindings::nvme_ctrl) -> bool {
    // SAFETY: per the contract.
    T::supports_pci_p2pdma(unsafe { Controller::<T>::from_core(n.cast()) })
}

/// The function of the core's `reset_work` of our controllers.
///
/// # Safety
///
/// Called by the kernel with that item of a live controller (its deletion flushes it first).
unsafe extern "C" fn reset_work_fn<T: ControllerOps>(work: *mut bindings::work_struct) {
    // SAFETY: `work` is the `reset_work` of the core controller at the start of a
    // `Controller<T>`.
    let ctrl = unsafe {
        let n = kernel::container_of!(work, bindings::nvme_ctrl, reset_work);
        Controller::<T>::from_core(n.cast())
    };
    T::reset_work(ctrl);
}

/// The function of every work slot of a `Controller<T>`.
///
/// # Safety
///
/// Called by the kernel with the `work` member of a slot's item (at the slot's address), which
/// its controller cancels before either is dropped.
unsafe extern "C" fn work_fn<T: ControllerOps>(work: *mut bindings::work_struct) {
    // SAFETY: the item's `work` is at the start of the `repr(C)` slot (see `DelayedWork`); the
    // slot and its controller are alive (`WorkSlot` invariant).
    let (ctrl, id) = unsafe {
        let slot = &*(work as *const WorkSlot<T>);
        (&*slot.ctrl, slot.id)
    };
    T::run_work(ctrl, id);
}
