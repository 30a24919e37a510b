// SPDX-License-Identifier: GPL-2.0

//! One NVMe/RDMA queue: its RDMA CM connection, QP, CQ, command and response buffers.
//!
//! A queue outlives its connections. Connecting is done step by step from the controller's
//! set-up work, each step bounded by a timeout (address and route resolution, CM connect), so
//! a lost peer never leaves a work item waiting forever; the CM event handler only records
//! events and, once a connection is established, reports its loss to the controller.
//!
//! The connection ([`Conn`]) is in an RCU slot: the I/O path (`queue_rq`, completions, polls)
//! uses it inside RCU read-side sections, and the controller's set-up and teardown install and
//! take it out under the slot's writer lock, which also serializes stopping the queue.

use crate::ctrl::{Ctrl, RdmaCtrl};
use crate::devices;
use crate::proto::capsule::{CQE_SIZE, SQE_SIZE};
use crate::proto::cm::{CmReject, CmReply, CmRequest};
use crate::request;
use crate::stats::QueueStats;
use crate::wrap::errno;
use crate::wrap::log::{dbg_event, log_err, log_info};
use crate::wrap::nvme::{CtrlRef, State, AQ_BLK_MQ_DEPTH};
use crate::wrap::rdma::{
    Access, CmEvent, CmEventKind, CmHandler, CmId, CmQp, ConnParam, Cq, Device, MemoryRegion, Qp,
    QpCaps, QpEvent, QpHandler, SendData, Wc,
};
use crate::wrap::sync::{new_rcu_slot, Completion, Rcu, RcuReadGuard, RcuSlot, Retired, TakeCell};
use core::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use kernel::c_str;
use kernel::prelude::*;
use kernel::str::CStr;
use kernel::sync::Arc;

/// Admin queue depth (NVME_AQ_DEPTH): the Fabrics minimum, as the C transport uses.
pub(crate) const ADMIN_DEPTH: u32 = 32;
/// Command identifier of the asynchronous event request on the admin queue; it uses the
/// admin queue's command buffer of that index.
pub(crate) const AEN_COMMAND_ID: u16 = AQ_BLK_MQ_DEPTH;

/// Address and route resolution timeout, as the C transport.
const CM_RESOLVE_TIMEOUT_MS: u32 = 3000;
/// How long to wait for the CM connection to be established (the CM's own retries can take
/// minutes; a reconnect attempt gives up much sooner and tries again).
const CM_CONNECT_TIMEOUT_MS: u32 = 10000;
/// How long to wait for the pool registration work request to complete.
const REG_TIMEOUT_MS: u32 = 5000;
/// One command send in this many asks for a completion (see `Queue::post_command`), or in
/// fewer on a shallow queue (see `Conn::signal_mask`).
const SIGNAL_EVERY: u32 = 16;
/// A connection lends at most this share of its credits (1/`LEND_SHARE`) to commands of other
/// queues (see `Conn::lend_credit`).
const LEND_SHARE: u32 = 8;
/// A queue lends credits only once it has taken no command of its own for this long (see
/// `Queue::lends_credits`).
const LEND_IDLE_MS: u64 = 10;

/// Send completion ids of a queue's QP: the plain ones of command sends and of the
/// asynchronous event request, then the holding ones of the pool registration and of the
/// sends of a request's own pages, one per tag.
const SEND_ID_COMMAND: u32 = 0;
const SEND_ID_AEN: u32 = 1;
const PLAIN_SEND_IDS: u32 = 2;
const SEND_ID_REG: u32 = PLAIN_SEND_IDS;
const SEND_ID_PAGES: u32 = PLAIN_SEND_IDS + 1;

/// Queue flag bits.
const ALLOCATED: u32 = 1 << 0;
const LIVE: u32 = 1 << 1;
const ESTABLISHED: u32 = 1 << 2;
/// The fabrics Connect was sent: commands may be in flight and the queue's tag set exists.
const STARTED: u32 = 1 << 3;
/// The connection was lost while the controller was connecting (see
/// `Queue::lost_while_connecting`).
const LOST: u32 = 1 << 4;
/// A work request failed, or the QP reported a fatal error, while the controller was connecting
/// (see `Queue::report_while_connecting`); or the queue's RDMA device is being removed while the
/// controller is deleted (see `Queue::lost_to_removal`).
const FAILED: u32 = 1 << 5;
/// The CM reported the connection ended while the controller was connecting (see
/// `Queue::report_while_connecting`).
const ENDED: u32 = 1 << 6;

/// What a queue's CM id and QP report to: the queue, through its controller, which this holds
/// (a counted reference, released with the connection).
pub(crate) struct QueueLink {
    ctrl: CtrlRef<RdmaCtrl>,
    qid: u16,
}

impl QueueLink {
    fn new(ctrl: &Ctrl, qid: u16) -> Result<Self> {
        Ok(Self {
            ctrl: CtrlRef::get(ctrl).ok_or(ENODEV)?,
            qid,
        })
    }

    fn queue(&self) -> &Queue {
        self.ctrl.queue(self.qid)
    }
}

/// The QP of a queue's connection, with its CM id.
pub(crate) type QueueQp = CmQp<QueueLink, QueueLink>;

/// The resources of one connection of a queue: the CM id with its QP, CQ and buffers.
pub(crate) struct Conn {
    qp: QueueQp,
    /// Capsules without data go as inline data (see `Queue::post_command`).
    inline_capsule: bool,
    /// One command send in `signal_mask + 1` asks for a completion: [`SIGNAL_EVERY`], or the
    /// largest power of two not above the depth, so that the sends a provider may hold until
    /// the next signaled completion (fewer than that) fit beside the depth's own in the send
    /// queue. A power of two keeps the pattern across the wrap of the send counter.
    signal_mask: u32,
    /// Commands sent on an I/O queue's connection and not answered (its own and those spread
    /// to it) stay within this: the receives posted for their responses, or the target's
    /// receive queue if that is shallower (the accept's CRQSIZE).
    credits: u32,
    /// Credits held by commands of other queues (see [`Conn::lend_credit`]).
    lent: AtomicU32,
}

impl Conn {
    /// Whether capsules without data go as inline data on this connection.
    pub(crate) fn inline_capsules(&self) -> bool {
        self.inline_capsule
    }

    /// The QP.
    pub(crate) fn qp(&self) -> &QueueQp {
        &self.qp
    }

    /// Takes one of the connection's credits for a command, if fewer than `limit` are taken (a
    /// command without a credit would find no receive posted for its response).
    pub(crate) fn take_credit(&self, limit: u32) -> bool {
        take_credit(self.qp.cq(), limit.min(self.credits))
    }

    /// Returns the credit of a command that was not sent.
    pub(crate) fn return_credit(&self) {
        return_credit(self.qp.cq());
    }

    /// Lends a credit to a command of another queue, if the connection carries no command of
    /// its own and lends fewer than 1/[`LEND_SHARE`] of its credits: a queue busy with its own
    /// I/O is not made to wait behind another queue's large transfer, and the credits it
    /// needs are never all lent (so when it finds none, commands of its own are in flight,
    /// and blk-mq runs it again as they complete). Racing submitters make both bounds
    /// approximate, never the credit count.
    pub(crate) fn lend_credit(&self) -> bool {
        let cap = (self.credits / LEND_SHARE).max(1);
        let Ok(lent) = self
            .lent
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < cap).then_some(n + 1)
            })
        else {
            return false;
        };
        // Every credit taken is a lent one: none of its own is in flight.
        if take_credit(self.qp.cq(), lent + 1) {
            return true;
        }
        self.lent_back();
        false
    }

    /// Ends the loan of a credit (the lent credit itself is returned as any other).
    pub(crate) fn lent_back(&self) {
        let _ = self
            .lent
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| n.checked_sub(1));
    }
}

/// Takes a credit counted on `cq`, if fewer than `limit` are taken.
fn take_credit(cq: &Cq, limit: u32) -> bool {
    cq.load()
        .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
            (n < limit).then_some(n + 1)
        })
        .is_ok()
}

/// Returns a credit counted on `cq`.
fn return_credit(cq: &Cq) {
    let _ = cq
        .load()
        .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| n.checked_sub(1));
}

/// An NVMe/RDMA queue.
#[pin_data]
pub(crate) struct Queue {
    qid: u16,
    /// The largest depth this queue may be connected with.
    ring_depth: u32,
    flags: AtomicU32,
    #[pin]
    cm_done: Completion,
    cm_event: AtomicI32,
    cm_status: AtomicI32,
    /// The first four bytes of the private data of the target's accept and its length (bits
    /// 32 and up), for the connect step's check of it.
    accept_head: AtomicU64,
    /// The CM event behind `ENDED`, for the abort work's log line.
    ended_by: AtomicI32,
    /// The current connection. Its writer lock also serializes stopping the queue (error
    /// recovery against the timeout handler), as the C driver's queue lock does.
    #[pin]
    conn: RcuSlot<Conn>,
    /// A connection taken out and not yet released (see `Queue::retire`).
    retired: TakeCell<Retired<Conn>>,
    #[pin]
    reg_done: Completion,
    reg_status: AtomicI32,
    /// Command sends posted, for choosing the ones to signal.
    sends: AtomicU32,
    /// When the queue last took a command of its own (`clock::now_ms`), see
    /// [`Queue::lends_credits`].
    own_at: AtomicU64,
    stats: QueueStats,
}

impl Queue {
    /// A disconnected queue `qid` that may be connected with up to `ring_depth` entries.
    pub(crate) fn new(qid: u16, ring_depth: u32) -> impl PinInit<Self> {
        pin_init!(Self {
            qid,
            ring_depth,
            flags: AtomicU32::new(0),
            cm_done <- Completion::new(),
            cm_event: AtomicI32::new(-1),
            cm_status: AtomicI32::new(0),
            accept_head: AtomicU64::new(0),
            ended_by: AtomicI32::new(0),
            conn <- new_rcu_slot!("rsrdma_queue::conn"),
            retired: TakeCell::new(),
            reg_done <- Completion::new(),
            reg_status: AtomicI32::new(0),
            sends: AtomicU32::new(0),
            own_at: AtomicU64::new(0),
            stats: QueueStats::default(),
        })
    }

    /// Notes that the queue takes a command of its own (submitted on its hardware context).
    pub(crate) fn took_own(&self, now_ms: u64) {
        self.own_at.store(now_ms, Ordering::Relaxed);
    }

    /// Whether the queue may lend credits to commands of other queues: only once it has been
    /// idle of its own I/O for [`LEND_IDLE_MS`]. A command of another queue delays what the
    /// queue sends after it by its whole transfer (the target moves a QP's data in order), so
    /// a queue whose CPU is doing I/O keeps its QP to itself even between two of its commands.
    pub(crate) fn lends_credits(&self, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.own_at.load(Ordering::Relaxed)) >= LEND_IDLE_MS
    }

    pub(crate) fn qid(&self) -> u16 {
        self.qid
    }

    pub(crate) fn stats(&self) -> &QueueStats {
        &self.stats
    }

    pub(crate) fn ring_depth(&self) -> u32 {
        self.ring_depth
    }

    pub(crate) fn is_live(&self) -> bool {
        self.flags.load(Ordering::Acquire) & LIVE != 0
    }

    pub(crate) fn set_live(&self) {
        self.flags.fetch_or(LIVE, Ordering::Release);
    }

    pub(crate) fn is_established(&self) -> bool {
        self.flags.load(Ordering::Acquire) & ESTABLISHED != 0
    }

    /// Marks the queue as about to send its fabrics Connect.
    pub(crate) fn set_started(&self) {
        self.flags.fetch_or(STARTED, Ordering::Release);
    }

    /// Whether the queue's connection was lost while the controller was connecting (see
    /// [`Queue::lost_while_connecting`]).
    pub(crate) fn lost(&self) -> bool {
        self.flags.load(Ordering::Acquire) & LOST != 0
    }

    /// Whether the queue's connection can carry commands: established, not stopped, and not
    /// reported lost, ended or failed.
    pub(crate) fn connected(&self) -> bool {
        self.flags.load(Ordering::Acquire) & (ESTABLISHED | LOST | FAILED | ENDED) == ESTABLISHED
    }

    pub(crate) fn is_allocated(&self) -> bool {
        self.flags.load(Ordering::Acquire) & ALLOCATED != 0
    }

    /// The current connection, for the I/O path.
    pub(crate) fn conn<'a>(&'a self, rcu: &'a Rcu) -> Option<&'a Conn> {
        self.conn.get(rcu)
    }

    // --- Connecting -----------------------------------------------------------------------

    /// Connects the queue at the RDMA level: CM id, address and route resolution, CQ, QP,
    /// CM connect with the NVMe/RDMA private data, receives posted. `depth` is the queue size
    /// to announce. The protection domain is the controller's, created on the device the admin
    /// queue resolves to.
    pub(crate) fn connect(&self, ctrl: &Ctrl, depth: u32) -> Result {
        self.try_connect(ctrl, depth).inspect_err(|e| {
            log_info!(
                ctrl.core(),
                "queue {}: connecting failed ({:?})",
                self.qid,
                e
            );
        })
    }

    fn try_connect(&self, ctrl: &Ctrl, depth: u32) -> Result {
        let nvme = ctrl.core();
        if depth > self.ring_depth {
            return Err(EINVAL);
        }
        let cm_id = CmId::new(QueueLink::new(ctrl, self.qid)?)?;
        self.begin_cm_step();
        cm_id.resolve_addr(ctrl.src_addr(), ctrl.addr(), CM_RESOLVE_TIMEOUT_MS)?;
        self.wait_cm_step(
            ctrl,
            CmEventKind::AddrResolved,
            CM_RESOLVE_TIMEOUT_MS + 1000,
        )?;

        // Held: the id moves into its QP below.
        let dev = cm_id.device().and_then(Device::get).ok_or(ENODEV)?;
        let dev = &*dev;
        let port = cm_id.port_num();
        if !dev.port_active(port) {
            // Sending a CM request now would break the device's CM for good (see
            // `Device::port_active`): wait for the port to come back.
            dbg_event!(
                Cm,
                nvme,
                "queue {}: port {} of {} is down, not connecting",
                self.qid,
                port,
                dev.name()
            );
            return Err(errno::ENETDOWN());
        }
        let pd = ctrl.pd_for(self.qid, dev, port)?;

        // One CQE per receive and per send queue entry (a flush completes unsignaled sends
        // too), plus the registration, the AEN and the drain's two.
        let cq_size = 3 * depth + 6;
        let vector = if self.qid == 0 {
            0
        } else {
            (self.qid as i32 - 1) % dev.num_comp_vectors().max(1)
        };
        let cq = if ctrl.is_poll_queue(self.qid) {
            Cq::direct(dev, cq_size, vector)?
        } else {
            Cq::softirq(dev, cq_size, vector)?
        };
        let caps = QpCaps {
            // SEND per command, plus REG_MR (admin), the AEN and the drain. Room for twice the
            // depth: with selective signaling, a provider may only reclaim the entries of sends
            // that completed unsignaled at the next signaled completion.
            send_wr: 2 * depth + 3,
            recv_bufs: depth,
            recv_size: CQE_SIZE,
            send_bufs: self.ring_depth,
            send_size: SQE_SIZE,
            send_ids: PLAIN_SEND_IDS,
            held_ids: 1 + self.ring_depth,
            // The capsule's in-capsule data: one pool slice, or up to four ranges of a
            // request's own pages. Every device that can carry NVMe/RDMA has two.
            data_sges: crate::wrap::rdma::MAX_PAGE_RANGES,
            // Room to send a capsule without data as inline data, when the device has it.
            inline: SQE_SIZE as u32,
        };
        let qp = cm_id
            .create_qp(&pd, cq, &caps, QueueLink::new(ctrl, self.qid)?)
            .map_err(|(_, e)| e)?;
        // The provider reports the inline room it actually gave the QP.
        let inline_capsule = qp.inline_capacity() as usize >= SQE_SIZE;

        let tos = nvme.opts().tos();
        if (0..=255).contains(&tos) {
            qp.id().set_tos(tos as u8);
        }
        self.begin_cm_step();
        qp.id().resolve_route(CM_RESOLVE_TIMEOUT_MS)?;
        self.wait_cm_step(
            ctrl,
            CmEventKind::RouteResolved,
            CM_RESOLVE_TIMEOUT_MS + 1000,
        )?;

        let cntlid = if self.qid == 0 { 0 } else { nvme.cntlid() };
        let req = CmRequest::new(self.qid, depth as u16, cntlid).ok_or(EINVAL)?;
        let private = req.encode();
        let param = ConnParam {
            private_data: &private,
            responder_resources: dev.max_qp_rd_atom().clamp(0, 255) as u8,
            retry_count: 7,
            rnr_retry_count: 7,
        };
        dbg_event!(
            Cm,
            nvme,
            "queue {}: connecting qp {:#x} on {} (hrqsize {}, hsqsize {}, cntlid {})",
            self.qid,
            qp.qp_num(),
            dev.name(),
            req.hrqsize,
            req.hsqsize,
            req.cntlid
        );
        self.begin_cm_step();
        qp.connect(&param)?;
        self.wait_cm_step(ctrl, CmEventKind::Established, CM_CONNECT_TIMEOUT_MS)?;
        let head = self.accept_head.load(Ordering::Relaxed);
        let bytes = (head as u32).to_le_bytes();
        let reply = CmReply::check(&bytes[..(head >> 32).min(4) as usize]).map_err(|e| {
            log_err!(
                nvme,
                "queue {}: the target's accept is malformed: {}",
                self.qid,
                e
            );
            errno::EPROTO()
        })?;
        let credits = reply.credits(&req);
        if credits < depth && self.qid == 0 {
            // The admin queue's commands are few and not counted (the core bounds them by its
            // tags, the event request aside): one past the target's receive queue waits in
            // the receiver-not-ready retries the connect asked to be unlimited.
            log_info!(
                nvme,
                "queue 0: the target receives {} commands at a time, of the admin queue's {}",
                reply.crqsize,
                depth
            );
        } else if credits < depth {
            log_info!(
                nvme,
                "queue {}: the target receives {} commands at a time: at most {} of {} in flight",
                self.qid,
                reply.crqsize,
                credits,
                depth
            );
        } else {
            dbg_event!(
                Cm,
                nvme,
                "queue {}: accepted, controller receive queue {}",
                self.qid,
                reply.crqsize
            );
        }

        let data_sges = qp.data_sges();
        let conn = KBox::new(
            Conn {
                qp,
                inline_capsule,
                signal_mask: prev_power_of_two(depth.clamp(1, SIGNAL_EVERY)) - 1,
                credits,
                lent: AtomicU32::new(0),
            },
            GFP_KERNEL,
        )?;
        // Installed before the receives are posted: whatever the target sends completes a
        // receive of a queue that has its connection.
        let mut w = self.conn.write();
        w.install(conn).map_err(|_| EBUSY)?;
        self.flags.store(ALLOCATED | ESTABLISHED, Ordering::Release);
        let posted = match w.get() {
            Some(conn) => (0..depth).try_for_each(|i| self.post_recv(ctrl, conn.qp(), i)),
            None => Err(errno::ENOTCONN()),
        };
        drop(w);
        if let Err(e) = posted {
            self.stop();
            self.free(ctrl, true);
            return Err(e);
        }
        dbg_event!(
            Queue,
            nvme,
            "queue {}: connected, depth {}, capsules {}, {} send SGEs",
            self.qid,
            depth,
            if inline_capsule {
                "inline"
            } else {
                "by reference"
            },
            1 + data_sges
        );
        Ok(())
    }

    fn begin_cm_step(&self) {
        self.cm_event.store(-1, Ordering::Relaxed);
        self.cm_status.store(0, Ordering::Relaxed);
        self.cm_done.reinit();
    }

    /// Waits for the CM event that ends one step of connecting.
    fn wait_cm_step(&self, ctrl: &Ctrl, expected: CmEventKind, timeout_ms: u32) -> Result {
        if !self.cm_done.wait_ms(timeout_ms) {
            log_info!(
                ctrl.core(),
                "queue {}: no {} within {} ms",
                self.qid,
                expected.msg(),
                timeout_ms
            );
            return Err(errno::ETIMEDOUT());
        }
        let event = CmEventKind::from_code(self.cm_event.load(Ordering::Acquire) as u32);
        if event == expected {
            return Ok(());
        }
        let status = self.cm_status.load(Ordering::Relaxed);
        log_info!(
            ctrl.core(),
            "queue {}: {} instead of {} (status {})",
            self.qid,
            event.msg(),
            expected.msg(),
            status
        );
        Err(if status < 0 {
            Error::from_errno(status)
        } else {
            errno::ECONNREFUSED()
        })
    }

    /// Handles an event of this queue's CM id.
    fn cm_event(&self, ctrl: &Ctrl, ev: &CmEvent<'_>) {
        let nvme = ctrl.core();
        let (kind, status) = (ev.kind(), ev.status());
        dbg_event!(
            Cm,
            nvme,
            "queue {}: {} ({}) status {}",
            self.qid,
            kind.msg(),
            kind.code(),
            status
        );
        match kind {
            CmEventKind::AddrResolved | CmEventKind::RouteResolved => self.cm_signal(kind, 0),
            CmEventKind::Established => {
                let data = ev.accepted().unwrap_or(&[]);
                let mut head = [0u8; 4];
                let n = data.len().min(4);
                head[..n].copy_from_slice(&data[..n]);
                let len = u64::try_from(data.len()).unwrap_or(u64::MAX);
                self.accept_head.store(
                    (len << 32) | u64::from(u32::from_le_bytes(head)),
                    Ordering::Relaxed,
                );
                self.cm_signal(kind, 0)
            }
            CmEventKind::Rejected => {
                if let Some(rej) = ev.rejected() {
                    let cm_msg = rej.cm_msg;
                    match rej.data.and_then(CmReject::decode) {
                        Some(r) => log_err!(
                            nvme,
                            "queue {}: connect rejected: status {} ({}) nvme status {} ({})",
                            self.qid,
                            status,
                            cm_msg,
                            r.sts,
                            r.msg()
                        ),
                        None => log_err!(
                            nvme,
                            "queue {}: connect rejected: status {} ({})",
                            self.qid,
                            status,
                            cm_msg
                        ),
                    }
                }
                self.cm_signal(kind, errno::ECONNRESET().to_errno());
            }
            CmEventKind::AddrError
            | CmEventKind::RouteError
            | CmEventKind::ConnectError
            | CmEventKind::Unreachable => {
                let err = if status < 0 {
                    status
                } else {
                    errno::ECONNRESET().to_errno()
                };
                self.cm_signal(kind, err);
            }
            CmEventKind::Disconnected | CmEventKind::AddrChange | CmEventKind::TimewaitExit => {
                self.cm_lost(ctrl, kind);
                self.cm_signal(kind, errno::ECONNRESET().to_errno());
            }
            CmEventKind::DeviceRemoval => {
                // The RDMA client's remove, which runs before the CM's, released everything
                // on the device of the controllers it found; an id still here belongs to one
                // it did not (being created, say). The CM waits until the id is destroyed:
                // the controller stops using the device, and its teardown destroys the id
                // instead of parking it.
                if let Some(dev) = ev.device() {
                    ctrl.block_device(dev.id());
                }
                self.cm_lost(ctrl, kind);
                self.cm_signal(kind, ENODEV.to_errno());
            }
            CmEventKind::Other(code) => {
                log_err!(
                    nvme,
                    "queue {}: unexpected RDMA CM event {} ({})",
                    self.qid,
                    kind.msg(),
                    code
                );
                ctrl.error_recovery(format_args!(
                    "queue {}: unexpected CM event {}",
                    self.qid, code
                ));
            }
        }
    }

    /// Handles CM event `event` ending this queue's connection, if it was established: error
    /// recovery, or while connecting the abort of its commands in flight.
    fn cm_lost(&self, ctrl: &Ctrl, event: CmEventKind) {
        if self.is_established() {
            ctrl.error_recovery(format_args!("queue {}: {}", self.qid, event.msg()));
            // Events of one CM id come one at a time: only the first report's event is kept.
            if self.flags.load(Ordering::Acquire) & ENDED == 0 {
                self.ended_by.store(event.code() as i32, Ordering::Relaxed);
            }
            self.report_while_connecting(ctrl, ENDED);
        }
    }

    /// Records a CM event for the waiting set-up step.
    fn cm_signal(&self, event: CmEventKind, status: i32) {
        self.cm_status.store(status, Ordering::Relaxed);
        self.cm_event.store(event.code() as i32, Ordering::Release);
        self.cm_done.complete();
    }

    /// Registers a region (`what`: a half of the pool, the area, device memory) with `access`
    /// on this (admin) queue's QP and waits for it to take effect.
    pub(crate) fn register_region(
        &self,
        ctrl: &Ctrl,
        region: &Arc<MemoryRegion>,
        access: Access,
        what: &str,
    ) -> Result {
        self.reg_done.reinit();
        {
            let rcu = RcuReadGuard::new();
            let conn = self.conn(&rcu).ok_or(errno::ENOTCONN())?;
            conn.qp().post_reg_mr(region.clone(), access, SEND_ID_REG)?;
        }
        if !self.reg_done.wait_ms(REG_TIMEOUT_MS) {
            log_err!(
                ctrl.core(),
                "{} registration did not complete within {} ms",
                what,
                REG_TIMEOUT_MS
            );
            return Err(errno::ETIMEDOUT());
        }
        if self.reg_status.load(Ordering::Acquire) != 0 {
            log_err!(ctrl.core(), "{} registration failed", what);
            return Err(EIO);
        }
        Ok(())
    }

    // --- Stopping -------------------------------------------------------------------------

    /// Stops the queue: disconnects and drains the QP, so no completion of it runs afterwards
    /// (for commands posted after this, see below). The connection stays installed until
    /// [`Queue::free`].
    ///
    /// A queue stopped before is drained again: the timeout handler stops a queue while blk-mq
    /// still dispatches, and a command posted after that drain is flushed by this one. The
    /// controller's teardown stops its queues after quiescing them, so once that stop returns
    /// no completion can reach a request (a flushed send of a request's own pages names the
    /// request, see `request::pages_sent`) before the core cancels the requests and may free
    /// them.
    pub(crate) fn stop(&self) {
        if !self.is_allocated() {
            return;
        }
        let w = self.conn.write();
        let was = self
            .flags
            .fetch_and(!(LIVE | ESTABLISHED | STARTED), Ordering::SeqCst);
        let Some(conn) = w.get() else {
            return;
        };
        // No DREQ while the port is down (see `Device::port_active`); the target learns from
        // its own timeouts, or from the DREQ sent when the id is released.
        if was & (LIVE | ESTABLISHED) != 0 && conn.qp.id().port_active() {
            conn.qp.disconnect();
        }
        conn.qp.drain();
        // On a poll queue's CQ the drain polls beside blk-mq's pollers, one of which may still
        // be handling completions it took before the drain's own ended.
        conn.qp.cq().stop_polls();
    }

    /// Handles the loss of this queue's connection while the controller is connecting. Error
    /// recovery does not run in that state, and the set-up sequence waits for the commands in
    /// flight (Connect, authentication, the first admin commands): left alone they would wait
    /// out their timeouts although no response can come, and the core sends authentication
    /// commands again. So the queue stops carrying commands (see [`Queue::connected`]) and the
    /// timeout handler, run now for each command in flight (`blk_abort_request`), stops the
    /// queue and completes them.
    ///
    /// Runs in the controller's abort work, or in a device removal (see
    /// [`Queue::lost_to_removal`]). `cause` is the flag that reported the loss: the loss is
    /// handled only while it is set, so a report about a connection that was replaced meanwhile
    /// is ignored.
    fn lost_while_connecting(&self, ctrl: &Ctrl, why: &CStr, cause: u32) {
        // Reported while connecting; a deletion begun since then waits for the set-up too.
        let during = match ctrl.core().state() {
            State::Connecting => "connecting",
            State::Deleting | State::DeletingNoIo => "deleting",
            _ => return,
        };
        let guard = self.conn.write();
        let need = ESTABLISHED | cause;
        // Not when stopped, nor twice per connection (ended and failed).
        let Ok(was) = self
            .flags
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| {
                (f & (need | LOST) == need).then_some(f | LOST)
            })
        else {
            return;
        };
        drop(guard);
        // Only a started queue has carried commands. Nothing is walked while a reconnect
        // changes the number of I/O queues: the I/O is frozen then, so none of their commands
        // is in flight.
        let n = if was & STARTED != 0 {
            // `queue_rq` runs inside an RCU read-side section (blk-mq's dispatch, the tag sets
            // are not BLOCKING) and, the controller not being live, fails a command for a lost
            // queue before starting it. So once a grace period has passed, no `queue_rq` is
            // between starting a command for this queue and sending it: the walk aborts only
            // commands that went out, whose requests `queue_rq` has given up.
            crate::wrap::sync::synchronize_rcu();
            request::abort_sent_on(ctrl, self.qid).unwrap_or(0)
        } else {
            0
        };
        log_info!(
            ctrl.core(),
            "queue {}: {} while {}: aborting {} command(s) in flight",
            self.qid,
            why,
            during,
            n
        );
    }

    /// Handles the removal of this queue's RDMA device while the controller is being deleted,
    /// once the removal has waited for the deletion for a while (see
    /// `Ctrl::device_removed`). The deletion's last commands, the shutdown's Property Set
    /// among them, may wait for responses that will not come (a target on the same device whose
    /// removal ran first has dropped its queues), and would hold the removal for their
    /// timeouts, 60 s for an admin command. So the queue stops carrying commands and those in
    /// flight are aborted, as for a connection lost while connecting.
    pub(crate) fn lost_to_removal(&self, ctrl: &Ctrl) {
        self.flags.fetch_or(FAILED, Ordering::AcqRel);
        self.lost_while_connecting(ctrl, c_str!("RDMA device removed"), FAILED);
    }

    /// Reports the end of this queue's connection while the controller is connecting: `ENDED`
    /// from the CM handler, `FAILED` for a failed work request or a fatal QP event (completion or
    /// event context). Error recovery does not run in that state, and the commands in flight
    /// would wait out their timeouts (see [`Queue::lost_while_connecting`]). The controller's
    /// abort work handles the queue: completion and event handlers cannot take the
    /// connection's writer lock, and the CM handler must not wait for it (nor for a
    /// reconnect's change of hardware queues): the CM delivers other connections' events from
    /// the same work queue, one at a time. Each cause counts once per established connection:
    /// the other reports are its flushed work requests or its later CM events.
    fn report_while_connecting(&self, ctrl: &Ctrl, cause: u32) {
        if ctrl.core().state() != State::Connecting {
            return;
        }
        let first = self
            .flags
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| {
                (f & (ESTABLISHED | cause) == ESTABLISHED).then_some(f | cause)
            })
            .is_ok();
        if first {
            ctrl.queue_abort();
        }
    }

    /// The controller's abort work: handles a loss reported by
    /// [`Queue::report_while_connecting`], named after the CM's event if there was one.
    pub(crate) fn abort_if_lost(&self, ctrl: &Ctrl) {
        let flags = self.flags.load(Ordering::Acquire);
        if flags & ENDED != 0 {
            let event = CmEventKind::from_code(self.ended_by.load(Ordering::Relaxed) as u32);
            self.lost_while_connecting(ctrl, event.msg(), ENDED);
        } else if flags & FAILED != 0 {
            self.lost_while_connecting(ctrl, c_str!("connection failed"), FAILED);
        }
    }

    /// Takes the connection out (its QP drained again: a queue freed without having been
    /// stopped, a set-up failing after its connect, may still have a completion handler
    /// running on another CPU). Its release waits for its RCU readers (see
    /// [`Queue::release`]); connections taken out together wait once.
    pub(crate) fn retire(&self) {
        // Every flag: the queue has no connection from here.
        if self.flags.swap(0, Ordering::SeqCst) & ALLOCATED == 0 {
            return;
        }
        let mut w = self.conn.write();
        if let Some(conn) = w.get() {
            conn.qp.drain();
            conn.qp.cq().stop_polls();
        }
        if let Some(r) = w.take() {
            if let Err(r) = self.retired.put(r) {
                // A connection retired and never released: released now.
                drop(r);
            }
        }
    }

    /// Releases a connection [`Queue::retire`] took out, once its readers are gone. While the
    /// port is down the CM id is parked (see `devices::park`) instead of being destroyed,
    /// since destroying a connected id sends a DREQ through the CM; its QP goes now. `force`
    /// destroys it in any case (device removal).
    pub(crate) fn release(&self, ctrl: &Ctrl, force: bool) {
        let Some(conn) = self.retired.take() else {
            return;
        };
        let conn = KBox::into_inner(conn.wait());
        dbg_event!(
            Queue,
            ctrl.core(),
            "queue {}: released qp {:#x}",
            self.qid,
            conn.qp.qp_num()
        );
        let dev_gone = conn
            .qp
            .id()
            .device()
            .is_some_and(|d| ctrl.device_blocked(d.id()));
        if force || dev_gone || conn.qp.id().port_active() {
            return;
        }
        let id = conn.qp.into_id();
        devices::park(id.detach());
    }

    /// Releases the connection's resources (see [`Queue::retire`] and [`Queue::release`]).
    pub(crate) fn free(&self, ctrl: &Ctrl, force: bool) {
        self.retire();
        self.release(ctrl, force);
    }

    /// Polls the connection's CQ for blk-mq (a poll queue's `poll`); 0 without a connection.
    pub(crate) fn poll(&self) -> i32 {
        let rcu = RcuReadGuard::new();
        self.conn(&rcu).map_or(0, |c| c.qp.cq().poll_direct())
    }

    // --- Posting --------------------------------------------------------------------------

    /// Sends command `sqe` on `conn`, with its in-capsule data if any. `index` is the command's
    /// send buffer, used when the capsule goes by reference; a command of another queue (see
    /// `request::spread`) has none and can only go as inline data (`EINVAL` otherwise). `tag`
    /// names the request a send of its own pages completes into.
    ///
    /// Only one send in [`SIGNAL_EVERY`] (fewer on a shallow queue) asks for a completion (a
    /// failed send always completes, and starts error recovery); the request completes on its
    /// response alone. That is safe because the response proves that the target received the
    /// whole capsule, and the send buffers and the pool stay registered until the QP is
    /// drained: a send the adapter retransmits after its buffer or slot was reused is a
    /// duplicate the target drops. The C driver signals every send because it unmaps and
    /// invalidates per command; so does this one for in-capsule data sent from the request's
    /// own pages ([`SendData::Pages`]), which the QP holds mapped until their send completes.
    /// Returns `ENOMEM` when the send queue is full.
    pub(crate) fn post_command(
        &self,
        conn: &Conn,
        sqe: &[u8; SQE_SIZE],
        index: Option<u32>,
        data: SendData<'_>,
        tag: u32,
    ) -> Result {
        let n = self.sends.fetch_add(1, Ordering::Relaxed);
        let now_and_then = n & conn.signal_mask == conn.signal_mask;
        let id = match data {
            SendData::Pages(_) => SEND_ID_PAGES + tag,
            _ => SEND_ID_COMMAND,
        };
        conn.qp.post_send(sqe, index, data, id, now_and_then)
    }

    fn post_recv(&self, ctrl: &Ctrl, qp: &Qp<QueueLink>, index: u32) -> Result {
        qp.post_recv(index).inspect_err(|e| {
            log_err!(
                ctrl.core(),
                "queue {}: posting receive failed ({:?})",
                self.qid,
                e
            );
        })
    }

    /// Sends the asynchronous event request (admin queue).
    pub(crate) fn submit_async_event(&self, ctrl: &Ctrl) {
        let rcu = RcuReadGuard::new();
        let Some(conn) = self.conn(&rcu) else {
            return;
        };
        let mut cmd = [0u8; SQE_SIZE];
        cmd[0] = crate::proto::capsule::NVME_ADMIN_ASYNC_EVENT;
        cmd[2..4].copy_from_slice(&AEN_COMMAND_ID.to_le_bytes());
        crate::proto::capsule::set_sgl(
            &mut cmd,
            &crate::proto::sgl::KeyedSgl::default()
                .encode()
                .unwrap_or_default(),
        );
        // The AEN's command buffer is used by nothing else and only one AEN is outstanding.
        let res = conn.qp.post_send(
            &cmd,
            Some(u32::from(AEN_COMMAND_ID)),
            SendData::None,
            SEND_ID_AEN,
            true,
        );
        if let Err(e) = res {
            log_err!(
                ctrl.core(),
                "posting the async event request failed ({:?})",
                e
            );
        }
    }

    /// Logs a failed work request and starts error recovery (or, while connecting, aborts the
    /// commands in flight on the queue).
    pub(crate) fn wr_error(&self, ctrl: &Ctrl, wc: &Wc<'_>, op: &str) {
        let state = ctrl.core().state();
        if state == State::Live || (state == State::Connecting && self.connected()) {
            log_info!(
                ctrl.core(),
                "queue {}: {} failed with status {} ({})",
                self.qid,
                op,
                wc.status_msg(),
                wc.status()
            );
        }
        ctrl.error_recovery(format_args!("{} failed on queue {}", op, self.qid));
        self.report_while_connecting(ctrl, FAILED);
    }

    /// A receive completed: a response capsule, or a flushed receive.
    fn recv_done(&self, ctrl: &Ctrl, qp: &Qp<QueueLink>, index: u32, wc: &Wc<'_>) {
        if !wc.ok() {
            self.wr_error(ctrl, wc, "RECV");
            return;
        }
        if (wc.byte_len() as usize) < CQE_SIZE {
            log_err!(
                ctrl.core(),
                "queue {}: truncated response of {} bytes",
                self.qid,
                wc.byte_len()
            );
            ctrl.error_recovery(format_args!("truncated response on queue {}", self.qid));
            return;
        }
        let mut raw = [0u8; CQE_SIZE];
        if qp.read_recv(index, &mut raw).is_err() {
            return;
        }
        let cqe = crate::proto::capsule::Cqe::decode(&raw);
        if self.qid == 0 && cqe.command_id & 0xfff >= AEN_COMMAND_ID {
            ctrl.core()
                .complete_async_event(u16::from_le_bytes([raw[14], raw[15]]), cqe.result);
        } else {
            request::process_response(ctrl, self, &raw, wc.with_invalidate(), || {
                if self.qid != 0 {
                    return_credit(qp.cq());
                }
            });
        }
        let _ = self.post_recv(ctrl, qp, index);
    }
}

impl CmHandler for QueueLink {
    fn event(&self, ev: &CmEvent<'_>) {
        self.queue().cm_event(&self.ctrl, ev);
    }
}

impl QpHandler for QueueLink {
    fn recv_done(qp: &Qp<Self>, index: u32, wc: &Wc<'_>) {
        let link = qp.handler();
        link.queue().recv_done(&link.ctrl, qp, index, wc);
    }

    fn send_done(qp: &Qp<Self>, id: u32, wc: &Wc<'_>) {
        let link = qp.handler();
        let (ctrl, queue) = (&*link.ctrl, link.queue());
        match id {
            SEND_ID_REG => {
                queue.reg_status.store(
                    if wc.ok() { 0 } else { wc.status() as i32 + 1 },
                    Ordering::Release,
                );
                if !wc.ok() {
                    log_err!(ctrl.core(), "registration failed: {}", wc.status_msg());
                }
                queue.reg_done.complete();
            }
            SEND_ID_AEN if !wc.ok() => queue.wr_error(ctrl, wc, "ASYNC"),
            id if id >= SEND_ID_PAGES => {
                // The device is done with the pages, which the QP unmapped.
                if !wc.ok() {
                    queue.wr_error(ctrl, wc, "SEND");
                }
                request::pages_sent(ctrl, queue, id - SEND_ID_PAGES);
            }
            _ if !wc.ok() => queue.wr_error(ctrl, wc, "SEND"),
            _ => {}
        }
    }

    fn event(qp: &Qp<Self>, event: QpEvent) {
        let link = qp.handler();
        let (ctrl, queue) = (&*link.ctrl, link.queue());
        dbg_event!(
            Queue,
            ctrl.core(),
            "queue {}: QP event {} ({})",
            queue.qid,
            event.msg(),
            event.code()
        );
        if event.is_fatal() {
            log_err!(ctrl.core(), "queue {}: QP event {}", queue.qid, event.msg());
            ctrl.error_recovery(format_args!("queue {}: {}", queue.qid, event.msg()));
            queue.report_while_connecting(ctrl, FAILED);
        }
    }
}

/// The largest power of two not above `n` (at least 1).
fn prev_power_of_two(n: u32) -> u32 {
    1 << (u32::BITS - 1 - n.max(1).leading_zeros())
}
