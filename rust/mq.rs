// SPDX-License-Identifier: GPL-2.0

//! The blk-mq side: the operations of the admin and I/O tag sets (which the NVMe core
//! allocates) and the per-request data of the transport.
//!
//! Data path of one command:
//! - `queue_rq`: the core builds the command; the data gets a slice of the registered pool
//!   (its tag's slot, or a block of the large area); writes are copied in; the command gets one
//!   SGL descriptor (keyed: pool address, length, the pool's RKEY; or in-capsule for small
//!   writes, sent from the request's own pages when the send has an SGE for each of their
//!   ranges) and is sent.
//! - The request completes when its response arrives (sends are signaled only now and then,
//!   see `Queue::post_command`), and the send of its own pages, if any, completed; reads are
//!   copied out of the pool in `complete`, on the submitting CPU, and the slice is returned.

use crate::bindings;
use crate::ctrl::RdmaCtrl;
use crate::errno;
use crate::glue::{dbg_event, log_err, log_warn};
use crate::nvme::State;
use crate::pool::{DataSlice, Pool};
use crate::proto::capsule::{self, SQE_SIZE};
use crate::proto::pool::Slice;
use crate::proto::sgl::{InlineSgl, KeyedSgl};
use crate::proto::spread::Owner;
use crate::queue::{Conn, DataSges, InCapsule, PageMaps, Queue, MAX_PAGE_SGES};
use crate::request::{
    BlkStatus, Hctx, OwnedRq, Pdu, Rq, TimedOutRq, BLK_STS_IOERR, BLK_STS_OK, BLK_STS_RESOURCE,
};
use crate::sync::{RcuReadGuard, TakeCell};
use core::mem::offset_of;
use core::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, Ordering};
use kernel::ffi::c_void;
use kernel::prelude::*;
use kernel::types::Opaque;

/// No data slice.
const NO_DATA: u64 = u64::MAX;

/// Per-request data (the PDU of a blk-mq request). It starts with the core's `nvme_request`,
/// as `nvme_req(rq)` requires.
#[repr(C)]
pub(crate) struct Request {
    nreq: Opaque<bindings::nvme_request>,
    cmd: Opaque<bindings::nvme_command>,
    queue: *const Queue,
    /// The queue the command was sent on: its own, or another one (see `submit`).
    sent_on: AtomicU16,
    /// The parties that may still end the request, each holding one reference; the last to
    /// drop it ends the request (`end_request`):
    /// - `queue_rq`, until the command is posted, so that a response, however early, never
    ///   ends a request that `queue_rq` still uses (or gives back to blk-mq when posting
    ///   fails);
    /// - the response;
    /// - the send's completion, when the in-capsule data goes from the request's own pages.
    ///
    /// 0 while the request is not in flight: every end of a request disarms it (`disarm`).
    refs: AtomicU32,
    /// Whether a response came since the command was armed (`map_command`); set too while the
    /// request is not in flight, so that a response naming it then is refused.
    responded: AtomicBool,
    status: AtomicU16,
    result: AtomicU64,
    data_offset: AtomicU64,
    data_len: AtomicU32,
    data_large: AtomicBool,
    /// A write's own pages, when its in-capsule data is sent from them instead of the pool
    /// (see `own_pages`). Released by the send's completion (`pages_send_done`), or by
    /// `unmap_data` when the request ends first (the queue was flushed, or nothing was sent).
    pages: TakeCell<PageMaps>,
    /// Completion entry of that send.
    send_cqe: Opaque<bindings::ib_cqe>,
}

const _: () = assert!(offset_of!(Request, nreq) == 0);

// SAFETY: nothing in this module (its fields are private to it) builds a `Request` but
// `init_request`, in place, in the PDU of each request of the controller's tag sets, which
// `TagSet` allocates with PDUs of this type; it starts with `nvme_request`.
unsafe impl Pdu for Request {}

impl Request {
    fn queue(&self) -> &Queue {
        // SAFETY: set in `init_request` to the queue of the hctx, which outlives the tag set's
        // requests.
        unsafe { &*self.queue }
    }

    /// The command the core built (`nvme_setup_cmd`) for the request in flight.
    fn sqe(&self) -> [u8; SQE_SIZE] {
        let mut sqe = [0u8; SQE_SIZE];
        // SAFETY: the command is plain bytes in the PDU, written by the core before the
        // request is started and not while it is in flight.
        unsafe {
            core::ptr::copy_nonoverlapping(self.cmd.get() as *const u8, sqe.as_mut_ptr(), SQE_SIZE)
        };
        sqe
    }

    fn set_data(&self, data: Option<DataSlice>) {
        match data {
            Some(d) => {
                self.data_offset.store(d.slice.offset, Ordering::Relaxed);
                self.data_len.store(d.slice.len, Ordering::Relaxed);
                self.data_large.store(d.large, Ordering::Relaxed);
            }
            None => self.data_offset.store(NO_DATA, Ordering::Relaxed),
        }
    }

    fn take_data(&self) -> Option<DataSlice> {
        let offset = self.data_offset.swap(NO_DATA, Ordering::Relaxed);
        (offset != NO_DATA).then(|| DataSlice {
            slice: Slice {
                offset,
                len: self.data_len.load(Ordering::Relaxed),
            },
            large: self.data_large.load(Ordering::Relaxed),
        })
    }

    /// Arms the request for a command about to be sent: references for `queue_rq` and the
    /// response, and `with_send` one for the send's completion.
    fn arm(&self, with_send: bool) {
        self.refs.store(2 + u32::from(with_send), Ordering::Relaxed);
        self.responded.store(false, Ordering::Relaxed);
    }

    /// Marks the request as not in flight: it ended, or `queue_rq` takes it back unsent. A
    /// response naming it from now on, until it is armed again, is a stray one (the core's
    /// command identifier changes only when a response completes a request, so a request
    /// cancelled or failed keeps its identifier).
    fn disarm(&self) {
        self.refs.store(0, Ordering::Relaxed);
        self.responded.store(true, Ordering::Relaxed);
    }

    /// Drops a reference: `Some(true)` when it was the last, `None` when there was none (a
    /// completion for a command not in flight).
    fn put_ref(&self) -> Option<bool> {
        self.refs
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| r.checked_sub(1))
            .ok()
            .map(|old| old == 1)
    }
}

/// Ends a request whose last reference was just dropped, with its response's status.
fn finish(rq: OwnedRq<'_, Request>) {
    let req = rq.pdu();
    let (status, result) = (
        req.status.load(Ordering::Relaxed),
        req.result.load(Ordering::Relaxed),
    );
    if let Some(rq) = rq.try_complete(status, result) {
        // Not sent to the submitting CPU: ended here.
        complete(rq);
    }
}

/// Drops the reference of the response or of the send's completion, and ends the request if
/// it was the last.
fn end_request(req: &Request) {
    match req.put_ref() {
        Some(true) => {
            // SAFETY: the request's last reference was just dropped: it is ours to end.
            finish(unsafe { OwnedRq::assume(Rq::of(req)) });
        }
        Some(false) => {}
        None => {
            let q = req.queue();
            log_err!(
                q.ctrl().nvme().as_ptr(),
                "queue {}: completion for a command not in flight",
                q.qid()
            );
            q.ctrl()
                .error_recovery(format_args!("stray completion on queue {}", q.qid()));
        }
    }
}

/// Handles a response capsule received on `queue` (called from the receive completion).
pub(crate) fn process_response(queue: &Queue, _conn: &Conn, raw: &[u8; 16], invalidated: bool) {
    let ctrl = queue.ctrl();
    let nvme = ctrl.nvme().as_ptr();
    let cqe = capsule::Cqe::decode(raw);
    // A command of this queue, or one of another I/O queue sent here (see `spread`).
    let owner = match ctrl.spread() {
        Some(sp) if queue.qid() != 0 => sp.decode(queue.qid(), cqe.command_id),
        _ => Some(Owner::Own(cqe.command_id)),
    };
    // The tags, and the request found in them, stay valid while this is held.
    let rcu = RcuReadGuard::new();
    let found = match owner {
        Some(Owner::Own(cid)) => ctrl.tags(queue.qid(), &rcu).map(|t| (t, cid)),
        // The queue named by the command identifier may not have its tags (yet).
        Some(Owner::Other { qid, command_id }) => ctrl.tags(qid, &rcu).map(|t| (t, command_id)),
        None => None,
    };
    let Some(rq) = found.and_then(|(tags, cid)| tags.find(cid)) else {
        log_err!(
            nvme,
            "queue {}: response with unknown command_id {:#x} (status {:#x})",
            queue.qid(),
            cqe.command_id,
            cqe.status
        );
        ctrl.error_recovery(format_args!("bad command_id on queue {}", queue.qid()));
        return;
    };
    let req = rq.pdu();
    let sent_on = req.sent_on.load(Ordering::Relaxed);
    if sent_on != queue.qid() {
        log_err!(
            nvme,
            "queue {}: response with command_id {:#x} of a command sent on queue {}",
            queue.qid(),
            cqe.command_id,
            sent_on
        );
        ctrl.error_recovery(format_args!("response on the wrong queue {}", queue.qid()));
        return;
    }
    if invalidated {
        log_err!(nvme, "queue {}: target sent SEND_WITH_INV for command_id {:#x}: the pool RKEY is never offered for invalidation",
            queue.qid(), cqe.command_id);
        ctrl.error_recovery(format_args!("remote invalidation on queue {}", queue.qid()));
        return;
    }
    if req.responded.swap(true, Ordering::AcqRel) {
        log_err!(
            nvme,
            "queue {}: response for command_id {:#x}, which is not in flight (answered already, or ended without an answer)",
            queue.qid(),
            cqe.command_id
        );
        ctrl.error_recovery(format_args!(
            "response for a command not in flight on queue {}",
            queue.qid()
        ));
        return;
    }
    if queue.qid() != 0 {
        queue.return_credit();
    }
    req.status
        .store(u16::from_le_bytes([raw[14], raw[15]]), Ordering::Relaxed);
    req.result.store(cqe.result, Ordering::Relaxed);
    dbg_event!(
        Io,
        nvme,
        "queue {}: response cid {:#x} status {:#x}",
        queue.qid(),
        cqe.command_id,
        cqe.status
    );
    end_request(req);
}

/// Completion of the send of a command whose in-capsule data went from the request's own pages
/// (always signaled, see [`InCapsule::Pages`]): the device is done with them.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn pages_send_done(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
    // SAFETY: the RDMA core passes a valid completion whose `wr_cqe` is the `send_cqe` of a
    // request (see `map_command`), which lives as long as its tag set, past the QP's drain.
    let (wc, req) = unsafe {
        let wc = &*wc;
        let req = kernel::container_of!(wc.__bindgen_anon_1.wr_cqe, Request, send_cqe);
        (wc, &*req)
    };
    if wc.status != bindings::ib_wc_status_IB_WC_SUCCESS {
        req.queue().wr_error(wc, "SEND");
    }
    // Not there if the request already ended without waiting for this completion (see
    // `unmap_data`): nothing left to do for it.
    let Some(pages) = req.pages.take() else {
        return;
    };
    drop(pages);
    end_request(req);
}

/// Copies the data of `rq` into (`to_pool`) or out of its pool slice.
fn copy_data(pool: &Pool, rq: &OwnedRq<'_, Request>, slice: Slice, to_pool: bool) {
    let (mut offset, mut left) = (slice.offset, slice.len);
    rq.for_each_segment(|va, len| {
        let n = len.min(left);
        // SAFETY: the segment is mapped for `len` bytes during the call; the slice is the
        // request's own, and the device does not access it between the calls of `submit` and
        // `unmap_data` that copy.
        unsafe {
            if to_pool {
                pool.copy_in(offset, va, n);
            } else {
                pool.copy_out(offset, va, n);
            }
        }
        offset += u64::from(n);
        left -= n;
    });
}

/// What `submit` did: sent the command, moving this many data bytes, written or not; or failed,
/// without sending it. The request comes back either way.
type Submitted<'a> =
    core::result::Result<(OwnedRq<'a, Request>, u32, bool), (OwnedRq<'a, Request>, Error)>;

/// Maps the data of a request into the pool and sends its command; returns the number of data
/// bytes and whether they are written. The request is armed (`Request::arm`): its response
/// may come as soon as the command is sent, but cannot end it before `queue_rq` drops its
/// own reference (`sent`). On failure, nothing was sent.
fn submit<'a>(queue: &Queue, conn: &Conn, rq: OwnedRq<'a, Request>) -> Submitted<'a> {
    let (len, is_write) = (rq.data_len(), rq.is_write());
    let (mut sqe, inline) = match map_command(queue, conn, &rq, len, is_write) {
        Ok(c) => c,
        Err(e) => return Err((rq, e)),
    };
    if len >= crate::glue::spread_bytes() && inline.is_none() {
        if let Some(res) = spread(queue, rq.pdu(), &mut sqe) {
            return match res {
                Ok(()) => Ok((rq, len, is_write)),
                Err(e) => Err((rq, e)),
            };
        }
    }
    // The core's tags keep this queue's commands within its depth, unless commands of other
    // queues took credits here: then blk-mq retries when I/O completes.
    let qid = queue.qid();
    if qid != 0 && !queue.take_credit(u32::MAX) {
        return Err((rq, ENOMEM));
    }
    // SAFETY: ring entry `tag` (checked by `map_command`) belongs to this request while it
    // is in flight; `inline` is pool memory, or the request's pages, mapped until their send
    // completes (see `own_pages`), with the request's own completion entry.
    match unsafe { queue.post_command(conn, &sqe, Some(rq.tag() as usize), inline) } {
        Ok(()) => Ok((rq, len, is_write)),
        Err(e) => {
            if qid != 0 {
                queue.return_credit();
            }
            Err((rq, e))
        }
    }
}

/// Prepares the command of a request to be sent: gives its data a pool slice (copying a
/// write's data in) or, for in-capsule data, maps its own pages; and gives the command its SGL
/// descriptor. Returns the command and the in-capsule data, if any.
fn map_command(
    queue: &Queue,
    conn: &Conn,
    rq: &OwnedRq<'_, Request>,
    len: u32,
    is_write: bool,
) -> Result<([u8; SQE_SIZE], Option<InCapsule>)> {
    let ctrl = queue.ctrl();
    let qid = queue.qid();
    let req = rq.pdu();
    let tag = rq.tag();
    let mut sqe = req.sqe();

    req.set_data(None);

    let mut inline = None;
    let in_capsule = || {
        InlineSgl {
            offset: u64::from(ctrl.nvme().icdoff()),
            len,
        }
        .encode()
    };
    let desc = if len == 0 {
        KeyedSgl::default().encode()
    } else if let Some(sges) = own_pages(queue, conn, rq, len, is_write) {
        inline = Some(InCapsule::Pages(sges, req.send_cqe.get()));
        Some(in_capsule())
    } else {
        // SAFETY: the controller's set-up work registers the pool before any command is sent
        // and removes it only after every queue was stopped.
        let reg = unsafe { ctrl.reg() }.ok_or(errno::ENOTCONN())?;
        let data = ctrl.pool().alloc(qid, tag, len).ok_or(EAGAIN)?;
        req.set_data(Some(data));
        let slice = data.slice;
        if is_write {
            copy_data(ctrl.pool(), rq, slice, true);
        }
        // The device owns the slice until the response: it reads a write's data, it writes
        // a read's (a no-op with coherent DMA or soft-RoCE).
        reg.sync_for_device(slice);
        let addr = reg.iova(slice.offset);
        if is_write && ctrl.inline_fits(qid, len) && !data.large {
            inline = Some(InCapsule::Pool(bindings::ib_sge {
                addr,
                length: len,
                lkey: reg.mr().lkey(),
            }));
            dbg_event!(
                Io,
                ctrl.nvme().as_ptr(),
                "queue {} tag {}: {} bytes in capsule, copied",
                qid,
                tag,
                len
            );
            Some(in_capsule())
        } else {
            let key = reg.mr().rkey();
            dbg_event!(
                Io,
                ctrl.nvme().as_ptr(),
                "queue {} tag {}: keyed sgl addr {:#x} len {} key {:#x} ({})",
                qid,
                tag,
                addr,
                len,
                key,
                if data.large { "large area" } else { "slot" }
            );
            KeyedSgl {
                addr,
                len,
                key,
                invalidate: false,
            }
            .encode()
        }
    };
    capsule::set_sgl(&mut sqe, &desc.ok_or(EINVAL)?);
    if tag as usize >= queue.ring_depth() as usize {
        return Err(EINVAL);
    }
    // Once, now that it is known whether the send completes into the request; before any
    // failure above the request stays disarmed.
    req.arm(matches!(inline, Some(InCapsule::Pages(..))));
    Ok((sqe, inline))
}

/// Maps the pages of a write whose data goes in the capsule, to send them as they are: a
/// copy into the pool would cost more than the send's completion, which the mapping needs
/// (see [`InCapsule::Pages`]). The data must be in no more ranges (bvecs) than the send has
/// SGEs for (`Conn::data_sges`, as many as the C driver's; 4 KiB of data aligned to the
/// NVMe core's 4 KiB virtual boundary is never more than two). Returns the data's SGEs, the
/// mappings being kept in the request; `None` to go through the pool instead.
fn own_pages(
    queue: &Queue,
    conn: &Conn,
    rq: &OwnedRq<'_, Request>,
    len: u32,
    is_write: bool,
) -> Option<DataSges> {
    if !is_write || !queue.ctrl().inline_fits(queue.qid(), len) {
        return None;
    }
    let ranges = rq.ranges::<MAX_PAGE_SGES>()?;
    let total: u64 = ranges.iter().map(|r| u64::from(r.len)).sum();
    if total != u64::from(len) {
        return None;
    }
    // Refused when the device gives a send fewer SGEs than the ranges need: the pool then.
    // SAFETY: the request keeps its pages until it ends, and the mappings are released before
    // it does: by the send's completion, or by `unmap_data`, which every end of the request
    // passes through (`complete`, or `queue_rq` when nothing was sent).
    let (pages, sges) = unsafe { conn.map_pages(&ranges) }.ok()?;
    rq.pdu().pages.put(pages).ok()?;
    dbg_event!(
        Io,
        queue.ctrl().nvme().as_ptr(),
        "queue {} tag {}: {} bytes in capsule, from its pages in {} range{}",
        queue.qid(),
        rq.tag(),
        len,
        ranges.len(),
        if ranges.len() == 1 { "" } else { "s" }
    );
    Some(sges)
}

/// Sends a large transfer's command on the controller's next I/O queue in turn, when that is
/// another queue than its own: one submitter's stream then keeps several QPs busy instead of
/// one (soft-RoCE, like an adapter, works through each QP in order). The command keeps its own
/// pool slice, goes as inline data (so that QP never refers to this queue's ring) and gets an
/// identifier unique on the other queue (see `proto::spread`); it may take at most half of that
/// queue's credits, so the queue's own commands find room. `None` when it stays on its own
/// queue.
fn spread(queue: &Queue, req: &Request, sqe: &mut [u8; SQE_SIZE]) -> Option<Result> {
    if queue.qid() == 0 {
        return None;
    }
    let ctrl = queue.ctrl();
    let sp = ctrl.spread()?;
    let other = ctrl.next_spread_queue(sp)?;
    // Not on a queue whose connection was reported lost while connecting: its commands in
    // flight were aborted then, a command sent now would wait out its timeout.
    if other.qid() == queue.qid() || !other.is_live() || !other.connected() {
        return None;
    }
    // SAFETY: `queue_rq` after `nvme_check_ready` accepted the request: the I/O queues are
    // not quiesced, and a live queue's connection is replaced only after quiescing them all.
    let conn = unsafe { other.conn() }?;
    if !conn.inline_capsules() {
        return None;
    }
    let cid = u16::from_le_bytes([sqe[2], sqe[3]]);
    let wire = sp.encode(queue.qid(), cid)?;
    if !other.take_credit(other.credits() / 2) {
        return None;
    }
    sqe[2..4].copy_from_slice(&wire.to_le_bytes());
    req.sent_on.store(other.qid(), Ordering::Relaxed);
    dbg_event!(
        Io,
        ctrl.nvme().as_ptr(),
        "queue {}: command_id {:#x} sent on queue {} as {:#x}",
        queue.qid(),
        cid,
        other.qid(),
        wire
    );
    // SAFETY: no ring entry and no in-capsule data.
    let res = unsafe { other.post_command(conn, sqe, None, None) };
    match res {
        Ok(()) => {
            queue.stats().spread.fetch_add(1, Ordering::Relaxed);
        }
        Err(_) => other.return_credit(),
    }
    Some(res)
}

/// Releases a request's data slice, copying read data out first when the command succeeded.
fn unmap_data(ctrl: &RdmaCtrl, qid: u16, rq: &OwnedRq<'_, Request>, copy_out: bool) {
    // Pages still mapped here were not sent, or their send was flushed: the device no longer
    // reads them.
    drop(rq.pdu().pages.take());
    let Some(data) = rq.pdu().take_data() else {
        return;
    };
    if copy_out {
        // SAFETY: called from completion context of a request of ours; the pool registration
        // outlives every in-flight request (see `ConnCell`).
        if let Some(reg) = unsafe { ctrl.reg() } {
            reg.sync_for_cpu(data.slice);
        }
        copy_data(ctrl.pool(), rq, data.slice, false);
    }
    ctrl.pool().free(qid, data);
}

/// `blk_mq_ops::queue_rq`.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn queue_rq(
    hctx: *mut bindings::blk_mq_hw_ctx,
    bd: *const bindings::blk_mq_queue_data,
) -> BlkStatus {
    // SAFETY: blk-mq passes a live hctx whose driver data `init_hctx` set to its queue, and
    // hands us a request of its tag set.
    let (hctx, rq) = unsafe {
        (
            Hctx::<Queue>::from_raw(hctx),
            OwnedRq::<Request>::from_raw((*bd).rq),
        )
    };
    let queue = hctx.data();
    let ctrl = queue.ctrl();
    let nvme = ctrl.nvme();

    if !rq.check_ready(nvme, queue.is_live()) {
        return rq.fail_nonready(nvme);
    }
    // SAFETY: `queue_rq` after `nvme_check_ready` accepted the request.
    let conn = match unsafe { queue.conn() } {
        // While the controller is connecting, the core lets Connect and authentication
        // commands through on a queue that is not live; one whose connection is gone (stopped
        // or reported lost) cannot carry them, and failing them now spares the core's retries
        // a wait for their timeouts.
        Some(conn) if queue.connected() || nvme.state() == State::Live => conn,
        _ => return rq.host_path_error(),
    };
    let ret = rq.setup_cmd();
    if ret != BLK_STS_OK {
        return ret;
    }
    // Where it goes, for the abort walk (see `abort_sent_on`) once it is started; `spread`
    // may name another queue before sending it.
    rq.pdu().sent_on.store(queue.qid(), Ordering::Relaxed);
    rq.start();

    match submit(queue, conn, rq) {
        Ok((rq, len, write)) => {
            queue.stats().sent(len, write);
            sent(rq);
            BLK_STS_OK
        }
        Err((rq, e)) => {
            // Taken back unsent: a response naming it now is a stray one (a speculative
            // response may have dropped its reference, but never the last: ours).
            rq.pdu().disarm();
            unmap_data(ctrl, queue.qid(), &rq, false);
            if e == EAGAIN || e == ENOMEM {
                // The large area or the send queue is full: blk-mq retries when I/O
                // completes.
                rq.cleanup_cmd();
                return BLK_STS_RESOURCE;
            }
            if e == EINVAL {
                log_err!(nvme.as_ptr(), "queue {}: cannot map request", queue.qid());
                rq.cleanup_cmd();
                return BLK_STS_IOERR;
            }
            // The queue is going away: complete with a path error so the core retries or
            // fails over, and let error recovery rebuild the queue. A spread command names
            // the queue it was posted on, the one that failed.
            ctrl.error_recovery(format_args!(
                "posting to queue {} failed ({:?})",
                rq.pdu().sent_on.load(Ordering::Relaxed),
                e
            ));
            rq.host_path_error()
        }
    }
}

/// `queue_rq` has sent the command of `rq`: drops its reference, and ends the request if the
/// response (and the send's completion) came meanwhile.
fn sent(rq: OwnedRq<'_, Request>) {
    // `None` (no reference left) cannot be: the request was armed with `queue_rq`'s, which
    // only this drops.
    if rq.pdu().put_ref() == Some(true) {
        finish(rq);
    }
    // Else the response, or the send's completion, ends it.
}

/// Completes a request: copies read data out of the pool, frees its slice, ends it. Every
/// end of a request that `queue_rq` accepted comes here: its response's, a cancellation
/// (the queue drained first), the timeout handler's.
fn complete(rq: OwnedRq<'_, Request>) {
    rq.pdu().disarm();
    let queue = rq.pdu().queue();
    let ok = rq.nvme_status() == 0;
    unmap_data(queue.ctrl(), queue.qid(), &rq, ok && !rq.is_write());
    queue.stats().completed(ok);
    rq.complete();
}

/// `blk_mq_ops::complete`.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn complete_rq(rq: *mut bindings::request) {
    // SAFETY: blk-mq hands us a request of our tag set to complete.
    complete(unsafe { OwnedRq::from_raw(rq) });
}

/// `blk_mq_ops::timeout`.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn timeout(rq: *mut bindings::request) -> bindings::blk_eh_timer_return {
    // SAFETY: blk-mq's timeout handler holds a started request of our tag set for the call.
    let rq = unsafe { TimedOutRq::<Request>::from_raw(rq) };
    let req = rq.pdu();
    let queue = req.queue();
    let ctrl = queue.ctrl();
    let sqe = req.sqe();
    // A spread command went out on another queue: that is where its response would come.
    let sent_on = ctrl
        .try_queue(req.sent_on.load(Ordering::Relaxed))
        .filter(|q| q.qid() != queue.qid());
    let lost = sent_on.unwrap_or(queue).lost();
    log_warn!(
        ctrl.nvme().as_ptr(),
        "I/O tag {} ({:04x}) opcode {:#x} ({}) QID {} {}{}",
        rq.tag(),
        rq.command_id(),
        capsule::opcode(&sqe),
        capsule::command_name(queue.qid() == 0, &sqe),
        queue.qid(),
        if lost {
            "aborted: connection lost"
        } else {
            "timeout"
        },
        SentOn(sent_on.map(Queue::qid))
    );

    if ctrl.nvme().state() != State::Live {
        // Resetting, connecting or deleting: complete it now, it may be blocking the teardown
        // or set-up sequence (connect, enable, identify...). Stopping the queue it went out on
        // keeps a late response from completing it a second time. `queue_rq` no longer holds
        // the request (see `sent`): the abort walk waits for an RCU grace period first (see
        // `Queue::report_while_connecting`), and a timer cannot expire within `queue_rq`.
        queue.stop();
        if let Some(q) = sent_on {
            q.stop();
        }
        rq.complete();
        return bindings::blk_eh_timer_return_BLK_EH_DONE;
    }
    ctrl.error_recovery(format_args!("command timeout on queue {}", queue.qid()));
    bindings::blk_eh_timer_return_BLK_EH_RESET_TIMER
}

/// Has the timeout handler run now for every started request whose command went out on queue
/// `qid`; returns how many there were, or `None` if the queue's tag set is not ready (see
/// [`TagSet::ready`](crate::request::TagSet::ready)).
pub(crate) fn abort_sent_on(ctrl: &RdmaCtrl, qid: u16) -> Option<u32> {
    let rcu = RcuReadGuard::new();
    let set = ctrl.tag_set_of(qid).ready(&rcu)?;
    let mut count = 0;
    // The walk completes nothing itself: the timeout handler runs later, in its own work.
    set.busy_iter(|rq| {
        if rq.pdu().sent_on.load(Ordering::Relaxed) == qid {
            rq.abort();
            count += 1;
        }
    });
    Some(count)
}

/// " (sent on QID n)" for a command sent on another queue than its own, else nothing.
struct SentOn(Option<u16>);

impl core::fmt::Display for SentOn {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(qid) => write!(f, " (sent on QID {qid})"),
            None => Ok(()),
        }
    }
}

/// `blk_mq_ops::poll` (poll queues).
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn poll(
    hctx: *mut bindings::blk_mq_hw_ctx,
    _iob: *mut bindings::io_comp_batch,
) -> i32 {
    // SAFETY: blk-mq passes a live hctx whose driver data `init_hctx` set to its queue.
    let queue = unsafe { Hctx::<Queue>::from_raw(hctx) }.data();
    // SAFETY: this queue's `poll`.
    unsafe { queue.poll() }
}

/// # Safety
///
/// `data` is the tag set's driver data: the core's controller, embedded in an `RdmaCtrl`.
unsafe fn ctrl_of<'a>(data: *mut c_void) -> &'a RdmaCtrl {
    // SAFETY: per the contract.
    unsafe { RdmaCtrl::from_nvme(data as *mut bindings::nvme_ctrl) }
}

/// `blk_mq_ops::init_hctx` of the I/O tag set.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn init_hctx(
    hctx: *mut bindings::blk_mq_hw_ctx,
    data: *mut c_void,
    hctx_idx: u32,
) -> i32 {
    // SAFETY: the I/O tag set's driver data (see `ctrl_of`).
    let ctrl = unsafe { ctrl_of(data) };
    let Some(queue) = ctrl.try_queue(hctx_idx as u16 + 1) else {
        return EINVAL.to_errno();
    };
    // SAFETY: blk-mq is initializing `hctx`; the queue outlives the tag set.
    unsafe { Hctx::init(hctx, queue) };
    0
}

/// `blk_mq_ops::init_hctx` of the admin tag set.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn init_admin_hctx(
    hctx: *mut bindings::blk_mq_hw_ctx,
    data: *mut c_void,
    _hctx_idx: u32,
) -> i32 {
    // SAFETY: the admin tag set's driver data (see `ctrl_of`).
    let ctrl = unsafe { ctrl_of(data) };
    // SAFETY: blk-mq is initializing `hctx`; the queue outlives the tag set.
    unsafe { Hctx::init(hctx, ctrl.queue(0)) };
    0
}

/// `blk_mq_ops::init_request`.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn init_request(
    set: *mut bindings::blk_mq_tag_set,
    rq: *mut bindings::request,
    hctx_idx: u32,
    _node: u32,
) -> i32 {
    // SAFETY: blk-mq initializes a request of a tag set whose driver data is our controller;
    // the PDU is `size_of::<Request>()` zeroed bytes that nothing else uses yet.
    unsafe {
        let ctrl = ctrl_of((*set).driver_data);
        let qid = if set == ctrl.io_tag_set().as_ptr() {
            hctx_idx as u16 + 1
        } else {
            0
        };
        let Some(queue) = ctrl.try_queue(qid) else {
            return EINVAL.to_errno();
        };
        let pdu = bindings::rsrdma_rq_pdu(rq) as *mut Request;
        core::ptr::addr_of_mut!((*pdu).queue).write(queue);
        core::ptr::addr_of_mut!((*pdu).sent_on).write(AtomicU16::new(qid));
        core::ptr::addr_of_mut!((*pdu).refs).write(AtomicU32::new(0));
        // Not in flight (see `Request::disarm`).
        core::ptr::addr_of_mut!((*pdu).responded).write(AtomicBool::new(true));
        core::ptr::addr_of_mut!((*pdu).status).write(AtomicU16::new(0));
        core::ptr::addr_of_mut!((*pdu).result).write(AtomicU64::new(0));
        core::ptr::addr_of_mut!((*pdu).data_offset).write(AtomicU64::new(NO_DATA));
        core::ptr::addr_of_mut!((*pdu).data_len).write(AtomicU32::new(0));
        core::ptr::addr_of_mut!((*pdu).data_large).write(AtomicBool::new(false));
        core::ptr::addr_of_mut!((*pdu).pages).write(TakeCell::new());
        core::ptr::addr_of_mut!((*pdu).send_cqe).write(Opaque::new(bindings::ib_cqe {
            done: Some(pages_send_done),
        }));
        let nreq = (*pdu).nreq.get();
        (*nreq).ctrl = ctrl.nvme().as_ptr();
        (*nreq).cmd = (*pdu).cmd.get();
    }
    0
}

/// `blk_mq_ops::map_queues`.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn map_queues(set: *mut bindings::blk_mq_tag_set) {
    // SAFETY: the I/O tag set of our controller.
    let ctrl = unsafe { ctrl_of((*set).driver_data) };
    let mut io_queues = ctrl.io_queues();
    // SAFETY: as above; `io_queues` has HCTX_MAX_TYPES entries and is only read.
    unsafe { bindings::nvmf_map_queues(set, ctrl.nvme().as_ptr(), io_queues.as_mut_ptr()) };
}

/// Operations of the I/O tag set.
pub(crate) static IO_MQ_OPS: bindings::blk_mq_ops = bindings::blk_mq_ops {
    queue_rq: Some(queue_rq),
    complete: Some(complete_rq),
    init_request: Some(init_request),
    init_hctx: Some(init_hctx),
    timeout: Some(timeout),
    map_queues: Some(map_queues),
    poll: Some(poll),
    ..ZEROED_OPS
};

/// Operations of the admin tag set.
pub(crate) static ADMIN_MQ_OPS: bindings::blk_mq_ops = bindings::blk_mq_ops {
    queue_rq: Some(queue_rq),
    complete: Some(complete_rq),
    init_request: Some(init_request),
    init_hctx: Some(init_admin_hctx),
    timeout: Some(timeout),
    ..ZEROED_OPS
};

// SAFETY: `blk_mq_ops` holds only optional function pointers, for which zero is `None`.
const ZEROED_OPS: bindings::blk_mq_ops = unsafe { core::mem::zeroed() };
