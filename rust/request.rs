// SPDX-License-Identifier: GPL-2.0

//! The transport's request: its data in each blk-mq request of the controller's tag sets, and
//! the data path of one command.
//!
//! - `queue_rq`: the core builds the command; data whose pages all lie in the controller's
//!   registered area (a process's direct I/O from its mapping) is named where it is, with the
//!   area's RKEY; other data gets a slice of the registered pool (its tag's slot, or a block of
//!   the large area), writes copied in; the command gets one SGL descriptor (keyed: address,
//!   length, the area's or the pool's RKEY; or in-capsule for small writes, sent from the
//!   request's own pages when the send has an SGE for each of their ranges) and is sent.
//! - The request completes when its response arrives (sends are signaled only now and then,
//!   see `Queue::post_command`), and the send of its own pages, if any, completed; reads are
//!   copied out of the pool in `complete`, on the submitting CPU, and the slice is returned.

use crate::clock::now_ms;
use crate::ctrl::Ctrl;
use crate::pool::{DataSlice, Dir, MemReg};
use crate::proto::capsule::{self, SQE_SIZE};
use crate::proto::pool::Slice;
use crate::proto::sgl::{InlineSgl, KeyedSgl, SGL_DESC_SIZE};
use crate::proto::spread::Owner;
use crate::queue::{Conn, Queue};
use crate::wrap::errno;
use crate::wrap::log::{dbg_event, log_err, log_err_ratelimited, log_warn};
use crate::wrap::nvme::{
    Dispatched, OwnedRq, Rq, Share, State, Submitting, TimedOutRq, TimeoutAction,
};
use crate::wrap::rdma::{MappedPages, SendData, MAX_PAGE_RANGES};
use crate::wrap::sync::{Rcu, RcuReadGuard};
use core::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, Ordering};
use kernel::prelude::*;

/// No data slice.
const NO_DATA: u64 = u64::MAX;

/// The transport's data of a request.
pub(crate) struct Request {
    /// The request's own queue (its hardware context's).
    qid: u16,
    /// The queue the command was sent on: its own, or another one (see `submit`).
    sent_on: AtomicU16,
    status: AtomicU16,
    result: AtomicU64,
    data_offset: AtomicU64,
    data_len: AtomicU32,
    data_large: AtomicBool,
    /// The data is in the registered area (at `data_offset`), not in the pool.
    data_area: AtomicBool,
    /// The pool slice is in the half for host writes (else the half for host reads).
    data_to_target: AtomicBool,
}

/// Where a request's data is while its command is in flight.
enum Held {
    /// A slice of the pool, which the request holds.
    Pool(DataSlice),
    /// The request's own pages, at this place in the registered area.
    Area(Slice),
}

/// A request of the controller's tag sets.
type Req<'a> = Rq<'a, Request>;
/// A request the transport owns.
type OwnedReq<'a> = OwnedRq<'a, Request>;

impl Request {
    /// The data of a request of queue `qid`, not in flight.
    pub(crate) fn new(qid: u16) -> Self {
        Self {
            qid,
            sent_on: AtomicU16::new(qid),
            status: AtomicU16::new(0),
            result: AtomicU64::new(0),
            data_offset: AtomicU64::new(NO_DATA),
            data_len: AtomicU32::new(0),
            data_large: AtomicBool::new(false),
            data_area: AtomicBool::new(false),
            data_to_target: AtomicBool::new(false),
        }
    }

    /// The request's own queue.
    fn queue<'a>(&self, ctrl: &'a Ctrl) -> &'a Queue {
        ctrl.queue(self.qid)
    }

    fn set_data(&self, data: Option<Held>) {
        let (slice, large, area, dir) = match data {
            Some(Held::Pool(d)) => (d.slice, d.large, false, d.dir),
            Some(Held::Area(slice)) => (slice, false, true, Dir::FromTarget),
            None => {
                self.data_offset.store(NO_DATA, Ordering::Relaxed);
                return;
            }
        };
        self.data_offset.store(slice.offset, Ordering::Relaxed);
        self.data_len.store(slice.len, Ordering::Relaxed);
        self.data_large.store(large, Ordering::Relaxed);
        self.data_area.store(area, Ordering::Relaxed);
        self.data_to_target
            .store(dir == Dir::ToTarget, Ordering::Relaxed);
    }

    fn take_data(&self) -> Option<Held> {
        let offset = self.data_offset.swap(NO_DATA, Ordering::Relaxed);
        if offset == NO_DATA {
            return None;
        }
        let slice = Slice {
            offset,
            len: self.data_len.load(Ordering::Relaxed),
        };
        Some(if self.data_area.load(Ordering::Relaxed) {
            Held::Area(slice)
        } else {
            Held::Pool(DataSlice {
                slice,
                large: self.data_large.load(Ordering::Relaxed),
                dir: Dir::of(self.data_to_target.load(Ordering::Relaxed)),
            })
        })
    }
}

/// Ends a request whose last share just ended, with its response's status.
fn finish(ctrl: &Ctrl, rq: OwnedReq<'_>) {
    let req = rq.pdu();
    let (status, result) = (
        req.status.load(Ordering::Relaxed),
        req.result.load(Ordering::Relaxed),
    );
    if let Some(rq) = rq.try_complete(status, result) {
        // Not sent to the submitting CPU: ended here.
        complete(ctrl, rq);
    }
}

/// Ends `share` of `rq`, and the request if it was the last; `false` if the share was not
/// held.
fn end_share(ctrl: &Ctrl, rq: Req<'_>, share: Share) -> bool {
    match rq.end_share(share) {
        Ok(Some(rq)) => finish(ctrl, rq),
        Ok(None) => {}
        Err(_) => return false,
    }
    true
}

/// Handles a response capsule received on `queue` (called from the receive completion);
/// `credit` returns the credit of the command it answers, before the command's request may
/// end (so that blk-mq, which may dispatch at once, finds it). A response that answers no
/// command in flight on the queue starts error recovery.
pub(crate) fn process_response(
    ctrl: &Ctrl,
    queue: &Queue,
    raw: &[u8; 16],
    invalidated: bool,
    credit: impl FnOnce(),
) {
    let nvme = ctrl.core();
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
    if !rq.holds(Share::Response) {
        not_in_flight(ctrl, queue, cqe.command_id);
        return;
    }
    credit();
    if matches!(owner, Some(Owner::Other { .. })) {
        // The command of another queue held a loan of this queue's credit.
        if let Some(conn) = queue.conn(&rcu) {
            conn.lent_back();
        }
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
    if !end_share(ctrl, rq, Share::Response) {
        not_in_flight(ctrl, queue, cqe.command_id);
    }
}

/// A response named a command that is not in flight.
fn not_in_flight(ctrl: &Ctrl, queue: &Queue, command_id: u16) {
    log_err!(
        ctrl.core(),
        "queue {}: response for command_id {:#x}, which is not in flight (answered already, or ended without an answer)",
        queue.qid(),
        command_id
    );
    ctrl.error_recovery(format_args!(
        "response for a command not in flight on queue {}",
        queue.qid()
    ));
}

/// The send of the pages of the request with tag `tag` on `queue` completed (always signaled,
/// see [`SendData::Pages`]): the QP has released the pages.
pub(crate) fn pages_sent(ctrl: &Ctrl, queue: &Queue, tag: u32) {
    let rcu = RcuReadGuard::new();
    let Some(rq) = ctrl
        .tags(queue.qid(), &rcu)
        .and_then(|tags| tags.by_tag(tag))
    else {
        return;
    };
    // Not held if the request already ended without waiting for this completion (it was taken
    // back unsent, or its queue flushed): nothing left to do for it.
    end_share(ctrl, rq, Share::Send);
}

/// Where a command's data goes (see `map_command`).
enum Data<'q> {
    /// No data, or all of it in the pool (named by the command's SGL).
    None,
    /// In-capsule data in a pool slice.
    Pool(Slice),
    /// In-capsule data from the request's own pages, mapped for the queue's QP.
    Pages(MappedPages<'q>),
}

/// Why `submit` did not send a command.
enum NotSent<'a> {
    /// It failed before sending, and gives the request back.
    Failed(OwnedReq<'a>, Error),
    /// Posting failed, and another party (the timeout handler, a cancellation) had taken the
    /// request over meanwhile: it ends the request.
    TakenOver(Dispatched<'a>),
}

/// Takes back a request whose command was not posted (`e`, the error).
fn unsent(sub: Submitting<'_, Request>, e: Error) -> NotSent<'_> {
    match sub.reclaim() {
        Ok(rq) => NotSent::Failed(rq, e),
        Err(d) => NotSent::TakenOver(d),
    }
}

/// What `submit` did: sent the command, moving this many data bytes, written or not; or not.
type Submitted<'a> = core::result::Result<(Submitting<'a, Request>, u32, bool), NotSent<'a>>;

/// Maps the data of a request into the pool and sends its command; returns the number of data
/// bytes and whether they are written. The request is handed out as shares just before its
/// command is sent: its response may come as soon as it is, but cannot end it before
/// `queue_rq` ends its own share (`sent`). On failure, nothing was sent.
fn submit<'a>(
    ctrl: &Ctrl,
    queue: &Queue,
    conn: &Conn,
    rq: OwnedReq<'a>,
    rcu: &Rcu,
) -> Submitted<'a> {
    let (len, is_write) = (rq.data_len(), rq.is_write());
    let spread_min = crate::wrap::params::spread_bytes();
    // A credit of its own queue first, so that a write is copied into the pool only for a
    // command that can go. The core's tags keep this queue's commands within its depth;
    // commands of other queues hold a few of its credits at most (see `Conn::lend_credit`), so
    // when none is left commands of its own are in flight and blk-mq retries as they complete.
    let qid = queue.qid();
    if qid != 0 {
        // Only spreading asks when a queue last had I/O of its own.
        if spread_min != u32::MAX {
            queue.took_own(now_ms());
        }
        if !conn.take_credit(u32::MAX) {
            return Err(NotSent::Failed(rq, ENOMEM));
        }
    }
    let give_back = || {
        if qid != 0 {
            conn.return_credit();
        }
    };
    let (mut sqe, data) = match map_command(ctrl, queue, conn, &rq, len, is_write, rcu) {
        Ok(c) => c,
        Err(e) => {
            give_back();
            return Err(NotSent::Failed(rq, e));
        }
    };
    if len >= spread_min && matches!(data, Data::None) {
        if let Some((other, oconn)) = spread(ctrl, queue, rq.pdu(), &mut sqe, rcu) {
            // It holds a credit of the other queue instead.
            give_back();
            let sub = rq.arm(false);
            // No send buffer and no in-capsule data: it goes inline.
            return match other.post_command(oconn, &sqe, None, SendData::None, 0) {
                Ok(()) => {
                    queue.stats().spread.fetch_add(1, Ordering::Relaxed);
                    Ok((sub, len, is_write))
                }
                Err(e) => {
                    oconn.return_credit();
                    oconn.lent_back();
                    Err(unsent(sub, e))
                }
            };
        }
    }
    let tag = rq.tag();
    let (send_data, pages) = match data {
        Data::None => (SendData::None, false),
        Data::Pool(slice) => match ctrl.reg(rcu) {
            Some(reg) => (
                SendData::Region {
                    region: reg.half(Dir::ToTarget).region(),
                    offset: slice.offset,
                    len: slice.len,
                },
                false,
            ),
            None => {
                give_back();
                return Err(NotSent::Failed(rq, errno::ENOTCONN()));
            }
        },
        Data::Pages(maps) => (SendData::Pages(maps), true),
    };
    let sub = rq.arm(pages);
    // The command's send buffer is its tag's (checked by `map_command`), which belongs to this
    // request while it is in flight.
    match queue.post_command(conn, &sqe, Some(tag), send_data, tag) {
        Ok(()) => Ok((sub, len, is_write)),
        Err(e) => {
            give_back();
            Err(unsent(sub, e))
        }
    }
}

/// Prepares the command of a request to be sent: gives its data a pool slice (copying a
/// write's data in) or, for in-capsule data, maps its own pages; and gives the command its SGL
/// descriptor. Returns the command and where its in-capsule data is, if any.
fn map_command<'q>(
    ctrl: &Ctrl,
    queue: &Queue,
    conn: &'q Conn,
    rq: &OwnedReq<'_>,
    len: u32,
    is_write: bool,
    rcu: &Rcu,
) -> Result<([u8; SQE_SIZE], Data<'q>)> {
    let qid = queue.qid();
    let req = rq.pdu();
    let tag = rq.tag();
    if tag >= queue.ring_depth() {
        return Err(EINVAL);
    }
    let mut sqe = rq.sqe();
    req.set_data(None);

    let in_capsule = || {
        InlineSgl {
            offset: u64::from(ctrl.core().icdoff()),
            len,
        }
        .encode()
    };
    let mut data = Data::None;
    let desc = if len == 0 {
        KeyedSgl::default().encode()
    } else if let Some((reg, slice)) = in_area(ctrl, qid, rq, len, rcu) {
        req.set_data(Some(Held::Area(slice)));
        // As for the pool: the device owns the pages until the response.
        reg.sync_for_device(slice);
        let (addr, key) = (reg.iova(slice.offset), reg.region().rkey());
        dbg_event!(
            Io,
            ctrl.core(),
            "queue {} tag {}: keyed sgl addr {:#x} len {} key {:#x} (area, no copy)",
            qid,
            tag,
            addr,
            len,
            key
        );
        queue.stats().moved_area(len);
        keyed(addr, len, key)
    } else if in_peer_mem(ctrl, qid, rq)? {
        // Peer memory goes out from its registration or not at all: the CPU must not copy it.
        // Asked after the area, whose walk of the request's pages already tells its data is
        // no peer memory: the zero-copy path walks them once.
        let (r, offset) = ctrl
            .peer_regs(rcu)
            .and_then(|regs| regs.find(rq))
            .ok_or_else(|| {
                log_err_ratelimited!(
                    ctrl.core(),
                    "queue {} tag {}: {} bytes of device memory no registration of this connection covers in one run: EREMOTEIO",
                    qid,
                    tag,
                    len
                );
                errno::EREMOTEIO()
            })?;
        let (addr, key) = (r.region().iova() + offset, r.region().rkey());
        dbg_event!(
            Io,
            ctrl.core(),
            "queue {} tag {}: keyed sgl addr {:#x} len {} key {:#x} (device memory of {}, no copy)",
            qid,
            tag,
            addr,
            len,
            key,
            r.mem().name()
        );
        queue.stats().moved_peer(len);
        keyed(addr, len, key)
    } else if let Some(maps) = own_pages(ctrl, queue, conn, rq, len, is_write) {
        data = Data::Pages(maps);
        queue.stats().moved_pages(len);
        Some(in_capsule())
    } else {
        // The controller's set-up work registers the pool before any command is sent and
        // removes it only after every queue was stopped.
        let dir = Dir::of(is_write);
        let reg = ctrl.reg(rcu).ok_or(errno::ENOTCONN())?.half(dir);
        let slice_of = ctrl.pool().alloc(dir, qid, tag, len).ok_or(EAGAIN)?;
        req.set_data(Some(Held::Pool(slice_of)));
        let slice = slice_of.slice;
        if is_write {
            rq.copy_to(ctrl.pool().mem(dir), slice.offset, slice.len)?;
            queue.stats().copied(len);
        }
        // The device owns the slice until the response: it reads a write's data, it writes
        // a read's (a no-op with coherent DMA or soft-RoCE).
        reg.sync_for_device(slice);
        let addr = reg.iova(slice.offset);
        if is_write && ctrl.inline_fits(qid, len) && !slice_of.large {
            data = Data::Pool(slice);
            dbg_event!(
                Io,
                ctrl.core(),
                "queue {} tag {}: {} bytes in capsule, copied",
                qid,
                tag,
                len
            );
            Some(in_capsule())
        } else {
            let key = reg.region().rkey();
            dbg_event!(
                Io,
                ctrl.core(),
                "queue {} tag {}: keyed sgl addr {:#x} len {} key {:#x} ({})",
                qid,
                tag,
                addr,
                len,
                key,
                if slice_of.large { "large area" } else { "slot" }
            );
            keyed(addr, len, key)
        }
    };
    capsule::set_sgl(&mut sqe, &desc.ok_or(EINVAL)?);
    Ok((sqe, data))
}

/// A keyed data block descriptor of `len` bytes at `addr` with RKEY `key`, which the target
/// does not invalidate (the key is the connection's).
fn keyed(addr: u64, len: u32, key: u32) -> Option<[u8; SGL_DESC_SIZE]> {
    KeyedSgl {
        addr,
        len,
        key,
        invalidate: false,
    }
    .encode()
}

/// Whether the request's data is peer memory (all of it: a request that mixes it with other
/// memory fails with `EREMOTEIO`, as does one on the admin queue).
fn in_peer_mem(ctrl: &Ctrl, qid: u16, rq: &OwnedReq<'_>) -> Result<bool> {
    match rq.in_peer_mem() {
        Ok(true) if qid == 0 => Err(errno::EREMOTEIO()),
        Err(e) => {
            log_err_ratelimited!(
                ctrl.core(),
                "queue {}: a request mixes device memory with other memory: EREMOTEIO",
                qid
            );
            Err(e)
        }
        r => r,
    }
}

/// The area's registration and the place of the request's `len` bytes in the area, if the
/// controller has one, registered, and all of the data lies in it in one run (I/O queues
/// only: the admin queue's data is the kernel's).
fn in_area<'r>(
    ctrl: &'r Ctrl,
    qid: u16,
    rq: &OwnedReq<'_>,
    len: u32,
    rcu: &'r Rcu,
) -> Option<(&'r MemReg, Slice)> {
    if qid == 0 {
        return None;
    }
    let area = ctrl.area()?;
    let reg = ctrl.area_reg(rcu)?;
    let offset = rq.offset_in(area.mem())?;
    Some((reg, Slice { offset, len }))
}

/// Maps the pages of a write whose data goes in the capsule, to send them as they are: a
/// copy into the pool would cost more than the send's completion, which the mapping needs
/// (see [`SendData::Pages`]). The data must be in no more ranges (bvecs) than the send has
/// SGEs for (as many as the C driver's; 4 KiB of data aligned to the NVMe core's 4 KiB
/// virtual boundary is never more than two). `None` to go through the pool instead.
fn own_pages<'q>(
    ctrl: &Ctrl,
    queue: &Queue,
    conn: &'q Conn,
    rq: &OwnedReq<'_>,
    len: u32,
    is_write: bool,
) -> Option<MappedPages<'q>> {
    if !is_write || !ctrl.inline_fits(queue.qid(), len) {
        return None;
    }
    let ranges = rq.ranges::<MAX_PAGE_RANGES>()?;
    let ranges = ranges.as_slice();
    let total: u64 = ranges.iter().map(|r| u64::from(r.len())).sum();
    if total != u64::from(len) {
        return None;
    }
    // Refused when the device gives a send fewer SGEs than the ranges need: the pool then.
    let maps = conn.qp().map_pages(ranges).ok()?;
    dbg_event!(
        Io,
        ctrl.core(),
        "queue {} tag {}: {} bytes in capsule, from its pages in {} range{}",
        queue.qid(),
        rq.tag(),
        len,
        ranges.len(),
        if ranges.len() == 1 { "" } else { "s" }
    );
    Some(maps)
}

/// The queue a large transfer's command goes on instead of its own: the controller's next I/O
/// queue in turn, when that is another queue than its own. One submitter's stream then keeps
/// several QPs busy instead of one (soft-RoCE, like an adapter, works through each QP in
/// order). The command keeps its own pool slice, goes as inline data (so that QP never refers
/// to this queue's buffers) and gets an identifier unique on the other queue (see
/// `proto::spread`), written into `sqe`; it borrows one of that queue's credits, which only a
/// queue idle of its own I/O lends, and only a few of (see `Queue::lends_credits`,
/// `Conn::lend_credit`). `None` when it stays on its own queue.
fn spread<'a>(
    ctrl: &'a Ctrl,
    queue: &Queue,
    req: &Request,
    sqe: &mut [u8; SQE_SIZE],
    rcu: &'a Rcu,
) -> Option<(&'a Queue, &'a Conn)> {
    if queue.qid() == 0 {
        return None;
    }
    let sp = ctrl.spread()?;
    let other = ctrl.next_spread_queue(sp)?;
    // Not on a queue whose connection was reported lost while connecting: its commands in
    // flight were aborted then, a command sent now would wait out its timeout.
    if other.qid() == queue.qid()
        || !other.is_live()
        || !other.connected()
        || !other.lends_credits(now_ms())
    {
        return None;
    }
    let conn = other.conn(rcu)?;
    if !conn.inline_capsules() {
        return None;
    }
    let cid = capsule::command_id(sqe);
    let wire = sp.encode(queue.qid(), cid)?;
    if !conn.lend_credit() {
        return None;
    }
    sqe[2..4].copy_from_slice(&wire.to_le_bytes());
    req.sent_on.store(other.qid(), Ordering::Relaxed);
    dbg_event!(
        Io,
        ctrl.core(),
        "queue {}: command_id {:#x} sent on queue {} as {:#x}",
        queue.qid(),
        cid,
        other.qid(),
        wire
    );
    Some((other, conn))
}

/// Releases a request's data slice, copying read data out first when the command succeeded.
/// Data in the area is handed back to the CPU.
fn unmap_data(ctrl: &Ctrl, qid: u16, rq: &OwnedReq<'_>, copy_out: bool) {
    let data = match rq.pdu().take_data() {
        None => return,
        Some(Held::Area(slice)) => {
            if copy_out {
                let rcu = RcuReadGuard::new();
                // Registered as long as a request in flight uses it, as the pool.
                if let Some(reg) = ctrl.area_reg(&rcu) {
                    reg.sync_for_cpu(slice);
                }
            }
            return;
        }
        Some(Held::Pool(data)) => data,
    };
    if copy_out {
        let rcu = RcuReadGuard::new();
        // The pool registration outlives every in-flight request (the set-up registers it
        // before any command, teardown removes it after the queues were stopped).
        if let Some(reg) = ctrl.reg(&rcu) {
            reg.half(data.dir).sync_for_cpu(data.slice);
        }
        drop(rcu);
        if rq
            .copy_from(ctrl.pool().mem(data.dir), data.slice.offset, data.slice.len)
            .is_err()
        {
            log_err!(ctrl.core(), "queue {}: read data not copied out", qid);
        } else {
            ctrl.queue(qid).stats().copied(data.slice.len);
        }
    }
    ctrl.pool().free(qid, data);
}

/// `blk_mq_ops::queue_rq`.
pub(crate) fn queue_rq<'a>(
    ctrl: &Ctrl,
    queue: &Queue,
    rq: OwnedReq<'a>,
    rcu: &Rcu,
) -> Dispatched<'a> {
    let nvme = ctrl.core();
    if !rq.check_ready(nvme, queue.is_live()) {
        return rq.fail_nonready(nvme);
    }
    let conn = match queue.conn(rcu) {
        // While the controller is connecting, the core lets Connect and authentication
        // commands through on a queue that is not live; one whose connection is gone (stopped
        // or reported lost) cannot carry them, and failing them now spares the core's retries
        // a wait for their timeouts.
        Some(conn) if queue.connected() || nvme.state() == State::Live => conn,
        _ => return rq.host_path_error(),
    };
    let rq = match rq.setup_cmd() {
        Ok(rq) => rq,
        Err(d) => return d,
    };
    // Where it goes, for the abort walk (see `abort_sent_on`) once it is started; `spread`
    // may name another queue before sending it.
    rq.pdu().sent_on.store(queue.qid(), Ordering::Relaxed);
    rq.start();

    match submit(ctrl, queue, conn, rq, rcu) {
        Ok((sub, len, write)) => {
            queue.stats().sent(len, write);
            // Its share ended: the request is ours again if the response (and the send's
            // completion) came meanwhile.
            let (dispatched, rq) = sub.sent();
            if let Some(rq) = rq {
                finish(ctrl, rq);
            }
            dispatched
        }
        Err(NotSent::TakenOver(d)) => d,
        Err(NotSent::Failed(rq, e)) => {
            unmap_data(ctrl, queue.qid(), &rq, false);
            if e == EAGAIN || e == ENOMEM {
                // The large area or the send queue is full: blk-mq retries when I/O
                // completes.
                return rq.requeue();
            }
            if e == EINVAL {
                log_err!(nvme, "queue {}: cannot map request", queue.qid());
                return rq.fail();
            }
            if e == errno::EREMOTEIO() {
                // Device memory the connection cannot send (said in the log where found):
                // the request's own error, not the queue's.
                return rq.fail_remote_io();
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

/// Completes a request: copies read data out of the pool, frees its slice, ends it. Every
/// end of a request that `queue_rq` accepted comes here: its response's, a cancellation
/// (the queue drained first), the timeout handler's.
pub(crate) fn complete(ctrl: &Ctrl, rq: OwnedReq<'_>) {
    let queue = rq.pdu().queue(ctrl);
    let ok = rq.nvme_status() == 0;
    unmap_data(ctrl, queue.qid(), &rq, ok && !rq.is_write());
    queue.stats().completed(ok);
    rq.complete();
}

/// `blk_mq_ops::timeout`.
pub(crate) fn timeout(ctrl: &Ctrl, rq: TimedOutRq<'_, Request>) -> TimeoutAction {
    let req = rq.pdu();
    let queue = req.queue(ctrl);
    let sqe = rq.sqe();
    // A spread command went out on another queue: that is where its response would come.
    let sent_on = ctrl
        .try_queue(req.sent_on.load(Ordering::Relaxed))
        .filter(|q| q.qid() != queue.qid());
    let lost = sent_on.unwrap_or(queue).lost();
    log_warn!(
        ctrl.core(),
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

    if ctrl.core().state() != State::Live {
        // Resetting, connecting or deleting: complete it now, it may be blocking the teardown
        // or set-up sequence (connect, enable, identify...). Stopping the queue it went out on
        // keeps a late response from completing it a second time. `queue_rq` no longer holds
        // the request (see `queue_rq`): the abort walk waits for an RCU grace period first (see
        // `Queue::report_while_connecting`), and a timer cannot expire within `queue_rq`.
        queue.stop();
        if let Some(q) = sent_on {
            q.stop();
        }
        // Ended here unless its response came meanwhile (which then ends it).
        rq.complete();
        return TimeoutAction::Done;
    }
    ctrl.error_recovery(format_args!("command timeout on queue {}", queue.qid()));
    TimeoutAction::ResetTimer
}

/// Has the timeout handler run now for every started request whose command went out on queue
/// `qid`; returns how many there were, or `None` if the queue's tag set is not ready.
pub(crate) fn abort_sent_on(ctrl: &Ctrl, qid: u16) -> Option<u32> {
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
