// SPDX-License-Identifier: GPL-2.0

//! The requests of a transport's tag sets, which the NVMe core allocates (blk-mq's
//! `struct request` with the transport's data after the core's `struct nvme_request`).
//!
//! Each callback of [`Controller`](super::Controller) turns the request it is given into a
//! handle once; from there the transport works through safe methods:
//! - [`Rq`]: a request of a tag set of ours, found by a response's command identifier or by
//!   its tag; gives the transport's data ([`Rq::pdu`]) and ends a share of it.
//! - [`OwnedRq`]: a request the transport owns in blk-mq's sense, from `queue_rq` (or the
//!   last share's end) until it ends it or hands it out as shares; the calls that end the
//!   request consume it, so each runs once.
//! - [`Submitting`]: a request handed out as shares ([`OwnedRq::arm`]) while the submitter
//!   still holds its own: its command's response, and the completion of a send of its pages,
//!   each end one, and whoever ends the last one owns the request again.
//! - [`Dispatched`]: what `queue_rq` returns, which only the calls that hand the request on
//!   (sent, failed, requeued, ended) give, with the status that goes with what they did.
//! - [`TimedOutRq`]: a request in blk-mq's timeout handler, which a response may be ending
//!   meanwhile: it is completed only if its response share is still held, which it takes.
//! - [`BusyRq`]: a started request a tag-set walk holds for the call.
//!
//! C headers: [`include/linux/blk-mq.h`](srctree/include/linux/blk-mq.h),
//! [`drivers/nvme/host/nvme.h`](srctree/drivers/nvme/host/nvme.h).

use super::super::bindings;
use super::super::mem::{ChunkSet, Locate};
use super::super::rdma::PageRange;
use super::CoreCtrl;
use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU8, Ordering};
use kernel::ffi::{c_ulong, c_void};
use kernel::prelude::*;
use kernel::types::Opaque;

/// A blk-mq status (`blk_status_t`).
type BlkStatus = bindings::blk_status_t;
const BLK_STS_OK: BlkStatus = 0;
/// The target's side of the I/O failed; the block layer's `EREMOTEIO`.
const BLK_STS_TARGET: BlkStatus = 5;
/// Out of a resource: blk-mq retries the request when some I/O completes.
const BLK_STS_RESOURCE: BlkStatus = 9;
const BLK_STS_IOERR: BlkStatus = 10;

/// What `queue_rq` did with its request, and the status blk-mq gets for it: only the calls
/// that hand the request on give one, each the status that goes with what it did, so a
/// request is never both handed on and returned with an error.
///
/// # Invariants
///
/// Made only by a call that consumed the request of the `queue_rq` that returns it (`'a`, the
/// request's lifetime, is invariant), with the status that goes with what that call did.
#[must_use = "queue_rq returns it"]
pub(crate) struct Dispatched<'a> {
    status: BlkStatus,
    _rq: PhantomData<fn(&'a ()) -> &'a ()>,
}

impl Dispatched<'_> {
    fn new(status: BlkStatus) -> Self {
        Self {
            status,
            _rq: PhantomData,
        }
    }

    pub(in crate::wrap) fn status(&self) -> BlkStatus {
        self.status
    }
}

/// The size of an NVMe command capsule (`struct nvme_command`).
pub(crate) const SQE_BYTES: usize = 64;

/// The parties besides the submitter a request is handed out to while its command is in flight
/// (see [`OwnedRq::arm`]); the submitter's own share is the [`Submitting`] handle's.
#[derive(Clone, Copy)]
pub(crate) enum Share {
    /// The command's response.
    Response,
    /// The completion of a send of the request's own pages.
    Send,
}

/// The submitter's share (see [`Submitting`]).
const SUBMIT: u8 = 1;
/// The shares of the parties that end a request from the fabric: its response, its send.
pub(in crate::wrap) const REMOTE_SHARES: u8 = 2 | 4;

impl Share {
    fn bit(self) -> u8 {
        match self {
            Share::Response => 2,
            Share::Send => 4,
        }
    }
}

/// The share asked for is not held: the request is not in flight, or that party ended its
/// share already (a duplicate response, say).
#[derive(Debug)]
pub(crate) struct NotHeld;

/// The data of each request of a transport's tag sets (blk-mq's PDU).
///
/// # Invariants
///
/// Exists only in the PDU of a request of a tag set a [`Controller`](super::Controller)
/// allocated with PDUs of this type: its `init_request` callback initializes it in place, its
/// `exit_request` drops it. `nreq` comes first, as `nvme_req(rq)` requires, and its `cmd`
/// points to `cmd`. `shares` holds the bits of the shares handed out and not ended (the
/// submitter's, `SUBMIT`, and the [`Share`]s); a share is ended once, by its holder, or all of
/// them by whoever takes the request over from them (the timeout handler, a cancellation).
#[repr(C)]
pub(in crate::wrap) struct Pdu<P> {
    pub(in crate::wrap) nreq: Opaque<bindings::nvme_request>,
    pub(in crate::wrap) cmd: Opaque<bindings::nvme_command>,
    pub(in crate::wrap) shares: AtomicU8,
    pub(in crate::wrap) data: P,
}

const _: () = assert!(core::mem::offset_of!(Pdu<()>, nreq) == 0);

/// A request of a tag set whose PDU holds a `P`, allocated for `'a`.
///
/// # Invariants
///
/// `ptr` is a request whose PDU is an initialized [`Pdu<P>`], allocated for `'a`.
pub(crate) struct Rq<'a, P> {
    ptr: NonNull<bindings::request>,
    _pdu: PhantomData<&'a P>,
}

impl<P> Clone for Rq<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P> Copy for Rq<'_, P> {}

impl<'a, P> Rq<'a, P> {
    /// # Safety
    ///
    /// `ptr` is a request whose PDU is an initialized `Pdu<P>`, allocated for `'a`.
    pub(in crate::wrap) unsafe fn from_raw(ptr: *mut bindings::request) -> Self {
        // INVARIANT: per the contract.
        Self {
            // SAFETY: a request, per the contract, is not null.
            ptr: unsafe { NonNull::new_unchecked(ptr) },
            _pdu: PhantomData,
        }
    }

    pub(in crate::wrap) fn ptr(self) -> *mut bindings::request {
        self.ptr.as_ptr()
    }

    fn raw_pdu(self) -> &'a Pdu<P> {
        // SAFETY: an initialized `Pdu<P>`, allocated for `'a` (type invariant); only shared
        // (its mutable parts are atomics or `Opaque`).
        unsafe { &*(bindings::rsrdma_rq_pdu(self.ptr()) as *const Pdu<P>) }
    }

    /// The transport's data of the request.
    pub(crate) fn pdu(self) -> &'a P {
        &self.raw_pdu().data
    }

    /// The request's tag.
    pub(crate) fn tag(self) -> u32 {
        // SAFETY: an allocated request (type invariant); its tag is a plain word, set by
        // blk-mq before it hands the request out.
        unsafe { core::ptr::addr_of!((*self.ptr()).tag).read_volatile() as u32 }
    }

    /// Whether `share` is held now (a share a concurrent party may end meanwhile).
    pub(crate) fn holds(self, share: Share) -> bool {
        self.raw_pdu().shares.load(Ordering::Acquire) & share.bit() != 0
    }

    /// Ends `share`: `Err` if it is not held; `Some` with the request when it was the last
    /// one, whose owner the caller now is.
    pub(crate) fn end_share(self, share: Share) -> Result<Option<OwnedRq<'a, P>>, NotHeld> {
        self.end_bits(share.bit())
    }

    /// Ends the shares of `bits`, which must all be held.
    fn end_bits(self, bits: u8) -> Result<Option<OwnedRq<'a, P>>, NotHeld> {
        let old = self
            .raw_pdu()
            .shares
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s & bits == bits).then_some(s & !bits)
            })
            .map_err(|_| NotHeld)?;
        // INVARIANT (`OwnedRq`): the last share of a request handed out by its owner has
        // ended: ownership returns to whoever ended it, once.
        Ok((old == bits).then_some(OwnedRq(self)))
    }

    /// Takes every share of the request if one of `bits` is held: the caller then owns the
    /// request, and the other holders find their shares ended.
    pub(in crate::wrap) fn take_over(self, bits: u8) -> bool {
        self.raw_pdu()
            .shares
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s & bits != 0).then_some(0)
            })
            .is_ok()
    }

    /// The command the core built for the request (`nvme_setup_cmd`).
    fn sqe(self) -> [u8; SQE_BYTES] {
        let mut sqe = [0u8; SQE_BYTES];
        // SAFETY: the command is plain bytes in the PDU, written by the core while the
        // request is owned before it is started; callers hold a started request.
        unsafe {
            core::ptr::copy_nonoverlapping(
                self.raw_pdu().cmd.get() as *const u8,
                sqe.as_mut_ptr(),
                SQE_BYTES,
            )
        };
        sqe
    }
}

/// The handles below are requests with more rights: each gives its request's data.
macro_rules! deref_to_rq {
    ($($handle:ident),*) => {$(
        impl<'a, P> core::ops::Deref for $handle<'a, P> {
            type Target = Rq<'a, P>;

            fn deref(&self) -> &Rq<'a, P> {
                &self.0
            }
        }
    )*};
}

deref_to_rq!(OwnedRq, Submitting, TimedOutRq, BusyRq);

/// A request the transport owns in blk-mq's sense (see the module's documentation).
///
/// # Invariants
///
/// The holder owns the request: blk-mq gave it to `queue_rq` or to `complete`, or the last of
/// its shares ended; nothing else ends it until the handle is consumed, and none of its shares
/// is held.
#[must_use = "a request must be ended, handed back, or sent"]
pub(crate) struct OwnedRq<'a, P>(Rq<'a, P>);

impl<'a, P> OwnedRq<'a, P> {
    /// # Safety
    ///
    /// The caller owns the request: blk-mq gave it to `queue_rq` or to `complete`.
    pub(in crate::wrap) unsafe fn from_raw(ptr: *mut bindings::request) -> Self {
        // SAFETY: per the contract.
        let rq = unsafe { Rq::from_raw(ptr) };
        // INVARIANT: owned; any share left from an earlier command of the request is void.
        rq.raw_pdu().shares.store(0, Ordering::Relaxed);
        Self(rq)
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
        // SAFETY: an owned request, whose `nvme_request` the core does not write meanwhile.
        unsafe { (*self.raw_pdu().nreq.get()).status }
    }

    /// The command the core built for the request (`nvme_setup_cmd`).
    pub(crate) fn sqe(&self) -> [u8; SQE_BYTES] {
        self.0.sqe()
    }

    /// Calls `f` with each segment of the request's data, mapped for the call (address,
    /// length); stops at the first error.
    fn for_each_segment<F: FnMut(*mut u8, u32) -> Result>(&self, mut f: F) -> Result {
        /// # Safety
        ///
        /// `ctx` is the closure `for_each_segment` passes to the glue.
        unsafe extern "C" fn visit<F: FnMut(*mut u8, u32) -> Result>(
            ctx: *mut c_void,
            va: *mut c_void,
            len: u32,
        ) -> i32 {
            // SAFETY: per the function's contract; the closure outlives the walk.
            let f = unsafe { &mut *(ctx as *mut F) };
            match f(va as *mut u8, len) {
                Ok(()) => 0,
                Err(e) => e.to_errno(),
            }
        }
        let ctx = &mut f as *mut F as *mut c_void;
        // SAFETY: an owned request, whose bios do not change while it is ours; `ctx` is the
        // closure `visit::<F>` expects, alive for the call.
        let ret = unsafe { bindings::rsrdma_rq_visit_segments(self.ptr(), Some(visit::<F>), ctx) };
        kernel::error::to_result(ret)
    }

    /// Copies the request's data (`len` bytes at most) into `set` at `offset`.
    pub(crate) fn copy_to(&self, set: &ChunkSet, offset: u64, len: u32) -> Result {
        let (mut at, mut left) = (offset, len);
        self.for_each_segment(|va, n| {
            let n = n.min(left);
            // SAFETY: the segment is mapped for `n` bytes or more during the call, and is page
            // memory of the request, not of the set.
            unsafe { set.copy_in(at, va, n) }?;
            at += u64::from(n);
            left -= n;
            Ok(())
        })
    }

    /// Copies `len` bytes of `set` at `offset` into the request's data.
    pub(crate) fn copy_from(&self, set: &ChunkSet, offset: u64, len: u32) -> Result {
        let (mut at, mut left) = (offset, len);
        self.for_each_segment(|va, n| {
            let n = n.min(left);
            // SAFETY: as in `copy_to`, the other way round.
            unsafe { set.copy_out(at, va, n) }?;
            at += u64::from(n);
            left -= n;
            Ok(())
        })
    }

    /// Whether the request's data lies in PCI peer-to-peer memory (see
    /// [`crate::wrap::peer_mem`]): all of it, in one provider's memory (`true`), or none of it
    /// (`false`); `EREMOTEIO` when it is mixed, since the CPU must not copy peer memory the
    /// way it copies other data.
    pub(crate) fn in_peer_mem(&self) -> Result<bool> {
        // SAFETY: an owned request, whose bios do not change while it is ours.
        match unsafe { bindings::rsrdma_rq_p2p(self.ptr()) } {
            0 => Ok(false),
            1 => Ok(true),
            e => Err(Error::from_errno(e)),
        }
    }

    /// Where the request's data lies in `set`, if all of it does, as one run of the set's
    /// offsets: the offset of its first byte. `None` for data elsewhere (even in part), in
    /// several runs, or a special payload. The pages are the request's, pinned by its owner
    /// (a direct I/O's submitter) until it ends: a device may use them at that offset
    /// meanwhile, through a registration of the set.
    pub(crate) fn offset_in<L: Locate>(&self, set: &L) -> Option<u64> {
        /// The walk's state: the set, and the run found so far (its start, and where the
        /// next bvec must be).
        struct Walk<'s, L> {
            set: &'s L,
            start: Option<u64>,
            next: u64,
        }
        /// # Safety
        ///
        /// `ctx` is the `Walk` `offset_in` passes to the glue.
        unsafe extern "C" fn visit<L: Locate>(
            ctx: *mut c_void,
            pfn: c_ulong,
            offset: u32,
            len: u32,
        ) -> i32 {
            // SAFETY: per the function's contract; the walk outlives the call.
            let w = unsafe { &mut *(ctx as *mut Walk<'_, L>) };
            match w.set.locate(pfn as u64, offset, len) {
                Some(at) if w.start.is_none() || at == w.next => {
                    w.start.get_or_insert(at);
                    w.next = at + u64::from(len);
                    0
                }
                _ => 1,
            }
        }
        let mut walk = Walk {
            set,
            start: None,
            next: 0,
        };
        // SAFETY: an owned request, whose bios do not change while it is ours; `ctx` is the
        // `Walk` `visit` expects, alive for the call.
        let ret = unsafe {
            bindings::rsrdma_rq_visit_bvecs(
                self.ptr(),
                Some(visit::<L>),
                &mut walk as *mut Walk<'_, L> as *mut c_void,
            )
        };
        if ret != 0 {
            return None;
        }
        walk.start
    }

    /// The request's data as its bvecs, each a physically contiguous range (neighbours may be
    /// contiguous too: they count apart), when there are at most `N`; `None` when there are
    /// more, none, or a special payload (the range list of a discard).
    pub(crate) fn ranges<const N: usize>(&self) -> Option<Ranges<'_, N>> {
        let mut bv = [bindings::bio_vec::default(); N];
        // SAFETY: an owned request, whose bios do not change while it is ours; the glue stores
        // at most `N` entries into the local array.
        let n = unsafe { bindings::rsrdma_rq_bvecs(self.ptr(), bv.as_mut_ptr(), N as u32) };
        let n = (n as usize).min(N);
        let mut ranges = [PageRange::EMPTY; N];
        for (r, bv) in ranges.iter_mut().zip(&bv[..n]) {
            // SAFETY: a range of the owned request's data, borrowed for the `Ranges`.
            *r = unsafe { PageRange::new(NonNull::new(bv.bv_page)?, bv.bv_offset, bv.bv_len) };
        }
        (n > 0).then_some(Ranges { ranges, n })
    }

    /// Whether controller `ctrl` can take the request now (`nvme_check_ready`).
    pub(crate) fn check_ready(&self, ctrl: &CoreCtrl, queue_live: bool) -> bool {
        // SAFETY: a live controller and an owned request.
        unsafe { bindings::rsrdma_nvme_check_ready(ctrl.as_ptr(), self.ptr(), queue_live) }
    }

    /// Hands a request the controller cannot take now back to the core, which fails or
    /// requeues it (`nvme_fail_nonready_command`).
    pub(crate) fn fail_nonready(self, ctrl: &CoreCtrl) -> Dispatched<'a> {
        // SAFETY: a live controller and an owned request, which the handle gives up.
        let status = unsafe { bindings::nvme_fail_nonready_command(ctrl.as_ptr(), self.ptr()) };
        // INVARIANT: the core's status for what it did with the request.
        Dispatched::new(status)
    }

    /// Builds the request's command in its PDU (`nvme_setup_cmd`), for the namespace of its
    /// request queue (none for the admin and connect queues); on failure, the request goes
    /// back to blk-mq with the core's status.
    pub(crate) fn setup_cmd(self) -> Result<Self, Dispatched<'a>> {
        // SAFETY: an owned request: its request queue is live, and the core set the queue's
        // `queuedata` to its namespace, or left it null, before any request.
        let ns = unsafe { (*(*self.ptr()).q).queuedata as *mut bindings::nvme_ns };
        // SAFETY: an owned request not yet started, with its queue's namespace.
        let status = unsafe { bindings::nvme_setup_cmd(ns, self.ptr()) };
        if status == BLK_STS_OK {
            return Ok(self);
        }
        // INVARIANT: blk-mq ends the request with the core's error status.
        Err(Dispatched::new(status))
    }

    /// Undoes `setup_cmd` (`nvme_cleanup_cmd`).
    fn cleanup_cmd(&self) {
        // SAFETY: an owned request.
        unsafe { bindings::nvme_cleanup_cmd(self.ptr()) }
    }

    /// Hands the request back to blk-mq unsent, to retry it when some I/O completes (its
    /// command undone).
    pub(crate) fn requeue(self) -> Dispatched<'a> {
        self.cleanup_cmd();
        // INVARIANT: blk-mq keeps the request and dispatches it again.
        Dispatched::new(BLK_STS_RESOURCE)
    }

    /// Hands the request back to blk-mq unsent, to end it with an I/O error (its command
    /// undone).
    pub(crate) fn fail(self) -> Dispatched<'a> {
        self.cleanup_cmd();
        // INVARIANT: blk-mq ends the request with the error.
        Dispatched::new(BLK_STS_IOERR)
    }

    /// Hands the request back to blk-mq unsent, to end it with `EREMOTEIO`
    /// (`BLK_STS_TARGET`): its data is memory the transport must not send (peer memory no
    /// registration of the connection covers).
    pub(crate) fn fail_remote_io(self) -> Dispatched<'a> {
        self.cleanup_cmd();
        // INVARIANT: blk-mq ends the request with the error.
        Dispatched::new(BLK_STS_TARGET)
    }

    /// Starts the request's timer (`nvme_start_request`).
    pub(crate) fn start(&self) {
        // SAFETY: an owned request.
        unsafe { bindings::rsrdma_nvme_start_request(self.ptr()) }
    }

    /// Completes the request with a host path error, for the core to retry or fail over
    /// (`nvme_host_path_error`).
    pub(crate) fn host_path_error(self) -> Dispatched<'a> {
        // SAFETY: an owned request, which the handle gives up.
        let status = unsafe { bindings::nvme_host_path_error(self.ptr()) };
        // INVARIANT: the core completed the request and gives its status.
        Dispatched::new(status)
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

    /// Hands the request out for its command: the submitter's share, returned, the
    /// response's, and with `send` the share of its pages' send completion (see [`Share`]).
    pub(crate) fn arm(self, send: bool) -> Submitting<'a, P> {
        let mut bits = SUBMIT | Share::Response.bit();
        if send {
            bits |= Share::Send.bit();
        }
        // Release: whoever ends the last share sees what the owner wrote before.
        self.raw_pdu().shares.store(bits, Ordering::Release);
        Submitting(self.0)
    }
}

/// A request handed out as shares while its submitter holds its own (see
/// [`OwnedRq::arm`]).
///
/// # Invariants
///
/// The holder holds the submitter's share.
#[must_use = "the submitter's share must be ended"]
pub(crate) struct Submitting<'a, P>(Rq<'a, P>);

impl<'a, P> Submitting<'a, P> {
    /// Ends the submitter's share once the command is sent; with it the request if the other
    /// shares ended meanwhile (the caller ends it), or if one took it over.
    pub(crate) fn sent(self) -> (Dispatched<'a>, Option<OwnedRq<'a, P>>) {
        // INVARIANT: the command is sent; blk-mq gets success, the request is the shares'.
        // The submitter's share may be gone: the timeout handler or a cancellation took the
        // request over, and ends it.
        (
            Dispatched::new(BLK_STS_OK),
            self.0.end_bits(SUBMIT).ok().flatten(),
        )
    }

    /// Takes the request back unsent: every share ends, and a response or send completion
    /// naming it from now on finds none. `Err` if another party took the request over (and
    /// ends it): `queue_rq` is done with it.
    pub(crate) fn reclaim(self) -> Result<OwnedRq<'a, P>, Dispatched<'a>> {
        if self.0.take_over(SUBMIT) {
            // INVARIANT: the submitter held the request before it handed it out, and takes
            // every share back.
            Ok(OwnedRq(self.0))
        } else {
            // INVARIANT: the request is another party's, which ends it.
            Err(Dispatched::new(BLK_STS_OK))
        }
    }
}

/// A request in blk-mq's timeout handler. The handler holds a reference to it for the call,
/// but a response may end it meanwhile: it is ended here only if its response share is still
/// held, which the handler takes over, with every other share.
pub(crate) struct TimedOutRq<'a, P>(Rq<'a, P>);

impl<'a, P> TimedOutRq<'a, P> {
    /// # Safety
    ///
    /// `ptr` is the request `blk_mq_ops::timeout` was given, whose PDU is a `Pdu<P>`, and the
    /// handle does not outlive the call.
    pub(in crate::wrap) unsafe fn from_raw(ptr: *mut bindings::request) -> Self {
        // SAFETY: per the contract.
        Self(unsafe { Rq::from_raw(ptr) })
    }

    /// The command identifier the core gave the request's command (`nvme_cid`).
    pub(crate) fn command_id(&self) -> u16 {
        // SAFETY: a started request, held by the timeout handler; the identifier's generation
        // changes only when a response is recorded, and a stale one only makes a log line name
        // the previous generation.
        unsafe { bindings::rsrdma_nvme_cid(self.ptr()) }
    }

    /// The command the core built for the request.
    pub(crate) fn sqe(&self) -> [u8; SQE_BYTES] {
        self.0.sqe()
    }

    /// Ends the request as timed out if its response is still awaited: takes every share over
    /// and completes it (`nvmf_complete_timed_out_request`). False if a response came (its
    /// last share's holder ends it).
    pub(crate) fn complete(self) -> bool {
        if !self.0.take_over(Share::Response.bit()) {
            return false;
        }
        // SAFETY: a started request, held by the timeout handler, whose shares were all taken
        // over above: no other party ends it; the core completes it unless it has completed.
        unsafe { bindings::rsrdma_nvmf_complete_timed_out_request(self.ptr()) };
        true
    }
}

/// A started request of a set being walked, held by the walk for the call (see
/// [`ReadySet::busy_iter`](super::ReadySet::busy_iter)).
pub(crate) struct BusyRq<'a, P>(pub(in crate::wrap) Rq<'a, P>);

impl<P> BusyRq<'_, P> {
    /// Has blk-mq run the timeout handler now for the request (`blk_abort_request`).
    pub(crate) fn abort(&self) {
        // SAFETY: a started request, held by the walk; the call moves its deadline and kicks
        // its queue's timeout work.
        unsafe { bindings::blk_abort_request(self.ptr()) }
    }
}

/// A request's data as ranges, at most `N` (see [`OwnedRq::ranges`]).
pub(crate) struct Ranges<'a, const N: usize> {
    ranges: [PageRange<'a>; N],
    n: usize,
}

impl<'a, const N: usize> Ranges<'a, N> {
    /// The ranges, in order.
    pub(crate) fn as_slice(&self) -> &[PageRange<'a>] {
        &self.ranges[..self.n]
    }
}
