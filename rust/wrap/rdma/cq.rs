// SPDX-License-Identifier: GPL-2.0

//! Completion queues of one connection: polled by this module in softirq context, as the RDMA
//! core's `IB_POLL_SOFTIRQ` CQs are, or directly by the block layer (poll queues).
//!
//! Completions are handed to their work request's `ib_cqe` (see `super::qp`); a CQ only
//! decides when that runs.
//!
//! C headers: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h),
//! [`include/linux/irq_poll.h`](srctree/include/linux/irq_poll.h),
//! [`include/linux/irq_work.h`](srctree/include/linux/irq_work.h).

use super::super::bindings;
use super::device::Device;
use super::mr::created;
use core::mem::ManuallyDrop;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};
use kernel::error::to_result;
use kernel::ffi::c_void;
use kernel::prelude::*;
use kernel::types::Opaque;

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

/// A completion queue: polled in softirq context (from its completion events), or directly by
/// its owner ([`Cq::poll_direct`]).
///
/// # Invariants
///
/// `cq` is a CQ owned here, created on a registered device that the QPs on it keep
/// registered; `state` outlives it (it is dropped after the CQ is freed, see `drop`). A
/// softirq CQ's context is `state`, whose poller is initialized; a direct CQ has no context.
pub(crate) struct Cq {
    cq: NonNull<bindings::ib_cq>,
    /// Dropped by `drop` once the CQ is gone (leaked if it cannot be destroyed).
    state: ManuallyDrop<Pin<KBox<CqState>>>,
}

/// The state a CQ's callbacks and pollers share.
#[pin_data]
struct CqState {
    softirq: bool,
    /// The softirq poll of the CQ (unused on a direct CQ).
    #[pin]
    iop: Opaque<bindings::irq_poll>,
    /// A self-interrupt that schedules the poll from hard interrupt context (see
    /// [`PROMPT_IN_FLIGHT`]).
    #[pin]
    kick: Opaque<bindings::irq_work>,
    /// The CQ, set once it exists and before it is armed: no poll is scheduled before.
    cq: AtomicPtr<bindings::ib_cq>,
    /// The softirq polls running (`poll_cq`). A poll ends its instance (`irq_poll_complete`)
    /// before it re-arms the CQ, so `irq_poll_disable` can return while it still uses the CQ,
    /// and a completion after the arming can start a second poll on another CPU meanwhile:
    /// `Cq::drop` waits for the count to fall to 0.
    polling: AtomicU32,
    /// The direct polls running ([`Cq::poll_direct`]), and whether new ones may start.
    pollers: AtomicU32,
    open: AtomicBool,
    /// The commands outstanding on the queue the CQ serves, as its owner counts them.
    load: AtomicU32,
}

// SAFETY: the RDMA core and the poller's callbacks use the CQ from their own contexts; the
// handle only creates QPs, polls (from any context: the provider's poll_cq serializes on the
// CQ, and each completion is handed to one caller) and releases it.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl Cq {
    fn new_state(softirq: bool) -> Result<Pin<KBox<CqState>>> {
        KBox::pin_init(
            pin_init!(CqState {
                softirq,
                // SAFETY: initialized in place and pinned; nothing schedules it before the CQ
                // is armed, and `Cq::drop` disables it before the state is freed.
                iop <- Opaque::ffi_init(|iop| unsafe {
                    bindings::irq_poll_init(iop, POLL_BUDGET, Some(poll_cq))
                }),
                // SAFETY: as above; `Cq::drop` waits for it before the state is freed.
                kick <- Opaque::ffi_init(|work| unsafe {
                    bindings::rsrdma_init_irq_work(work, Some(kick_poll))
                }),
                cq: AtomicPtr::new(core::ptr::null_mut()),
                polling: AtomicU32::new(0),
                pollers: AtomicU32::new(0),
                open: AtomicBool::new(true),
                load: AtomicU32::new(0),
            }),
            GFP_KERNEL,
        )
    }

    /// Creates a CQ of `nr_cqe` entries on completion vector `vector` of `dev`, polled in
    /// softirq context: from a self-interrupt when at most [`PROMPT_IN_FLIGHT`] commands are
    /// in flight (as [`Cq::load`] counts them), else from the softirq raised at once.
    pub(crate) fn softirq(dev: &Device, nr_cqe: u32, vector: i32) -> Result<Self> {
        let state = Self::new_state(true)?;
        let ctx = &*state as *const CqState as *mut c_void;
        // SAFETY: a registered device; `ctx` is the pinned state, which outlives the CQ (see
        // `drop`), as the completion handler requires.
        let cq = created(unsafe {
            bindings::rsrdma_create_cq(dev.as_ptr(), Some(cq_event), ctx, nr_cqe as i32, vector)
        })?;
        state.cq.store(cq.as_ptr(), Ordering::Release);
        // INVARIANT: an owned CQ whose context is `state`.
        let cq = Self {
            cq,
            state: ManuallyDrop::new(state),
        };
        // SAFETY: the CQ is owned and alive. Armed while empty (no QP uses it yet): the first
        // completion raises an event. A positive return (completions already there) cannot
        // be, and is no failure; on failure `cq` is dropped, which frees it.
        to_result(unsafe { bindings::rsrdma_arm_cq(cq.cq.as_ptr()) }.min(0))?;
        Ok(cq)
    }

    /// Allocates a CQ polled directly by its owner (blk-mq poll queues).
    pub(crate) fn direct(dev: &Device, nr_cqe: u32, vector: i32) -> Result<Self> {
        let state = Self::new_state(false)?;
        // SAFETY: a registered device; the core stores no context it dereferences.
        let cq = created(unsafe {
            bindings::rsrdma_alloc_cq(
                dev.as_ptr(),
                core::ptr::null_mut(),
                nr_cqe as i32,
                vector,
                bindings::ib_poll_context_IB_POLL_DIRECT,
            )
        })?;
        // INVARIANT: an owned direct CQ.
        Ok(Self {
            cq,
            state: ManuallyDrop::new(state),
        })
    }

    pub(in crate::wrap) fn as_ptr(&self) -> *mut bindings::ib_cq {
        self.cq.as_ptr()
    }

    /// The commands outstanding on the queue the CQ serves: its owner counts them here, and a
    /// softirq CQ reads the count to decide how to start its poll.
    pub(crate) fn load(&self) -> &AtomicU32 {
        &self.state.load
    }

    /// Polls a direct CQ, handing each completion to its handler; returns the number
    /// processed. Nothing on a softirq CQ, or once [`Cq::stop_polls`] ran.
    pub(crate) fn poll_direct(&self) -> i32 {
        let s = &self.state;
        if s.softirq {
            return 0;
        }
        s.pollers.fetch_add(1, Ordering::SeqCst);
        // Sequentially consistent with `stop_polls`, which closes and then waits for the
        // count: either this poll sees the CQ closed, or `stop_polls` waits for it.
        let done = if s.open.load(Ordering::SeqCst) {
            // SAFETY: a direct CQ owned here. Callers may poll it at once (blk-mq takes no lock
            // around `poll`, a drain polls from teardown): the provider serializes poll_cq,
            // so each completion's handler runs once, on one of them.
            unsafe { bindings::ib_process_cq_direct(self.as_ptr(), -1) }
        } else {
            0
        };
        s.pollers.fetch_sub(1, Ordering::Release);
        done
    }

    /// Closes a direct CQ to [`Cq::poll_direct`] and waits for the polls running there. A
    /// drain of a QP on it polls beside them, and one of them may still be handling
    /// completions it took before the drain's own ended: after this, no completion handler of
    /// the CQ runs but the drain's. The polls poll a bounded CQ without sleeping.
    pub(crate) fn stop_polls(&self) {
        self.state.open.store(false, Ordering::SeqCst);
        while self.state.pollers.load(Ordering::SeqCst) != 0 {
            core::hint::spin_loop();
        }
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        if self.state.softirq {
            if !self.stop_softirq() {
                // Still in use: a QP on it was not destroyed, which the ownership of QPs rules
                // out (the glue warns). The CQ may still raise events, so its state is leaked.
                return;
            }
        } else {
            self.stop_polls();
            // SAFETY: owned, no poll runs (above), and the QPs using it were destroyed first
            // (they own it, see `super::qp`).
            unsafe { bindings::ib_free_cq(self.as_ptr()) };
        }
        // SAFETY: the CQ is gone and no callback or poll uses the state any more (above); it
        // is not used after this.
        unsafe { ManuallyDrop::drop(&mut self.state) };
    }
}

impl Cq {
    /// Stops and destroys a softirq CQ; false if it could not be destroyed.
    fn stop_softirq(&self) -> bool {
        let s = &self.state;
        // The QPs using the CQ were destroyed first, so no completion arrives. Once the poller
        // is disabled nothing schedules a poll of the CQ (scheduling it does nothing), and
        // once `polling` is 0 none runs: a poll that had ended its instance may still have
        // been re-arming the CQ. Once the CQ is destroyed no event handler runs, and the sync
        // waits for a kick the last one raised. Then nothing refers to the state.
        // SAFETY: an initialized poller (type invariant).
        unsafe { bindings::irq_poll_disable(s.iop.get()) };
        // Each poll counted itself before it ended its instance, whose release
        // `irq_poll_disable`'s test-and-set acquired.
        while s.polling.load(Ordering::Acquire) != 0 {
            // SAFETY: process context (a CQ is dropped where its connection is torn down).
            unsafe { bindings::msleep(1) };
        }
        // SAFETY: as said above; owned CQ.
        if unsafe { bindings::rsrdma_destroy_cq(self.as_ptr()) } != 0 {
            return false;
        }
        // SAFETY: initialized; the CQ, whose handler queued it, is gone.
        unsafe { bindings::irq_work_sync(s.kick.get()) };
        true
    }
}

/// The completion event handler of a softirq CQ (see [`PROMPT_IN_FLIGHT`]).
///
/// # Safety
///
/// Called by the RDMA core with a CQ created by [`Cq::softirq`] and its context, its state.
unsafe extern "C" fn cq_event(_cq: *mut bindings::ib_cq, ctx: *mut c_void) {
    // SAFETY: `ctx` is the CQ's state (per the contract), alive until the CQ is destroyed.
    let s = unsafe { &*(ctx as *const CqState) };
    let in_flight = s.load.load(Ordering::Relaxed);
    // SAFETY: no context requirement; says whether a softirq raised here runs on the way out
    // of this context rather than in ksoftirqd.
    if in_flight > PROMPT_IN_FLIGHT || unsafe { bindings::rsrdma_in_interrupt() } {
        // SAFETY: the poller is initialized and not yet disabled-and-freed (as above).
        unsafe { bindings::irq_poll_sched(s.iop.get()) };
    } else {
        // SAFETY: as above; `Cq::drop` syncs the work before the state is freed.
        unsafe { bindings::irq_work_queue(s.kick.get()) };
    }
}

/// The self-interrupt of a softirq CQ: schedules its poll from hard interrupt context, so the
/// softirq runs on the way out of it.
///
/// # Safety
///
/// Called by the kernel with the work it was initialized for.
unsafe extern "C" fn kick_poll(work: *mut bindings::irq_work) {
    // SAFETY: `work` is the `kick` field of a live state (`Cq::drop` syncs it first).
    let s = unsafe { &*kernel::container_of!(work, CqState, kick) };
    // SAFETY: scheduling a disabled poller does nothing; a live one is initialized.
    unsafe { bindings::irq_poll_sched(s.iop.get()) };
}

/// One poll of a softirq CQ, as the RDMA core polls its own: up to `budget` completions, each
/// handed to its `ib_cqe`; then re-armed, and scheduled again if completions came meanwhile.
///
/// # Safety
///
/// Called by the kernel with the instance it was initialized for.
unsafe extern "C" fn poll_cq(iop: *mut bindings::irq_poll, budget: i32) -> i32 {
    // SAFETY: `iop` is the `iop` field of a live state: `Cq::drop` disables it and waits for
    // `polling` to clear before the CQ and the state go.
    let s = unsafe { &*kernel::container_of!(iop, CqState, iop) };
    // Ordered before `irq_poll_complete` below by its release (see `Cq::drop`).
    s.polling.fetch_add(1, Ordering::Relaxed);
    let cq = s.cq.load(Ordering::Acquire);
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
    // The last use of the CQ and the state by this poll.
    s.polling.fetch_sub(1, Ordering::Release);
    done
}
