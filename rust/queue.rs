// SPDX-License-Identifier: GPL-2.0

//! One NVMe/RDMA queue: its RDMA CM connection, QP, CQ, command and response rings.
//!
//! A queue outlives its connections. Connecting is done step by step from the controller's
//! set-up work, each step bounded by a timeout (address and route resolution, CM connect), so
//! a lost peer never leaves a work item waiting forever; the CM event handler only records
//! events and, once a connection is established, reports its loss to the controller.

use crate::bindings;
use crate::ctrl::RdmaCtrl;
use crate::errno;
use crate::glue::{dbg_event, log_err, log_info};
use crate::nvme::State;
use crate::pool::PoolReg;
use crate::proto::capsule::{CQE_SIZE, SQE_SIZE};
use crate::proto::cm::{CmReject, CmRequest, CM_REQ_SIZE};
use crate::rdma::{self, CmEvent, CmId, CmQp, Cq, Device, DmaDir, DmaMap, PageRange};
use crate::stats::QueueStats;
use crate::sync::{Completion, ConnCell};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use kernel::c_str;
use kernel::ffi::c_void;
use kernel::prelude::*;
use kernel::sync::Mutex;
use kernel::types::Opaque;

/// Admin queue depth (NVME_AQ_DEPTH): the Fabrics minimum, as the C transport uses.
pub(crate) const ADMIN_DEPTH: u32 = 32;
/// Command identifier of the asynchronous event request on the admin queue.
pub(crate) const AEN_COMMAND_ID: u16 = bindings::NVME_AQ_BLK_MQ_DEPTH as u16;

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
/// The most ranges of a request's own pages one command send carries as in-capsule data (see
/// [`InCapsule::Pages`]), when the device has the gather elements: as many as the C driver
/// (`NVME_RDMA_MAX_INLINE_SEGMENTS`).
pub(crate) const MAX_PAGE_SGES: usize = 4;

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
/// (see `Queue::report_while_connecting`).
const FAILED: u32 = 1 << 5;
/// The CM reported the connection ended while the controller was connecting (see
/// `Queue::report_while_connecting`).
const ENDED: u32 = 1 << 6;

/// A command and response ring buffer: zeroed memory, DMA-mapped per connection.
struct RingBuf {
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
}

impl RingBuf {
    fn new(len: usize) -> Result<Self> {
        let mut v = KVec::<u8>::with_capacity(len, GFP_KERNEL)?;
        v.extend_with(len, 0, GFP_KERNEL)?;
        let (ptr, len, cap) = v.into_raw_parts();
        Ok(Self {
            ptr: NonNull::new(ptr).ok_or(ENOMEM)?,
            len,
            cap,
        })
    }

    /// Maps the ring for DMA by `dev`. The mapping must be dropped before the ring: connections
    /// hold their rings' mappings, and a queue outlives its connections.
    fn map(&self, dev: Device, dir: DmaDir) -> Result<DmaMap> {
        // SAFETY: `len` bytes at `ptr` are the ring's, which outlives the mapping (see above).
        unsafe { dev.map_single(self.ptr.as_ptr().cast(), self.len, dir) }
    }

    fn entry(&self, index: usize, size: usize) -> *mut u8 {
        debug_assert!((index + 1) * size <= self.len);
        // SAFETY: callers pass indices below the ring depth the buffer was sized for.
        unsafe { self.ptr.as_ptr().add(index * size) }
    }
}

impl Drop for RingBuf {
    fn drop(&mut self) {
        // SAFETY: from `into_raw_parts` in `new`, not used after this.
        drop(unsafe { KVec::from_raw_parts(self.ptr.as_ptr(), self.len, self.cap) });
    }
}

/// The completion entry of one response buffer.
#[repr(C)]
struct RecvCqe {
    cqe: bindings::ib_cqe,
    queue: *const Queue,
    index: u32,
}

/// A completion entry with a completion to wait on, for one-off work requests (pool
/// registration).
#[repr(C)]
struct WaitCqe {
    cqe: bindings::ib_cqe,
    status: AtomicI32,
}

/// The resources of one connection of a queue. Field order is drop order: the CM id with its
/// QP (the QP goes first), then the CQ and the ring mappings.
pub(crate) struct Conn {
    qp: CmQp,
    cq: Cq,
    sqe_map: DmaMap,
    rsp_map: DmaMap,
    lkey: u32,
    /// The QP takes a whole command capsule as inline data (see `Queue::post_capsule`).
    inline_capsule: bool,
    /// How many data SGEs a command send may have after the capsule's (at least 1, at most
    /// [`MAX_PAGE_SGES`]): the QP's send SGEs less one.
    data_sges: usize,
    /// One command send in `signal_mask + 1` asks for a completion: [`SIGNAL_EVERY`], or the
    /// largest power of two not above the depth, so that the sends a provider may hold until
    /// the next signaled completion (fewer than that) fit beside the depth's own in the send
    /// queue. A power of two keeps the pattern across the wrap of the send counter.
    signal_mask: u32,
}

impl Conn {
    /// Whether capsules without data go as inline data on this connection.
    pub(crate) fn inline_capsules(&self) -> bool {
        self.inline_capsule
    }

    pub(crate) fn cq(&self) -> &Cq {
        &self.cq
    }

    /// Maps `ranges` for this connection's device to read, as [`InCapsule::Pages`] data: the
    /// mappings, and their SGEs through the PD's local DMA key. Refuses (`EINVAL`, before
    /// mapping any) more ranges than a send has SGEs for (`Conn::data_sges`).
    ///
    /// # Safety
    ///
    /// As for [`Device::map_pages`], for each range.
    pub(crate) unsafe fn map_pages(&self, ranges: &[PageRange]) -> Result<(PageMaps, DataSges)> {
        if ranges.len() > self.data_sges {
            return Err(EINVAL);
        }
        let dev = self.qp.device().ok_or(ENODEV)?;
        let mut maps = PageMaps::default();
        let mut sges = DataSges::default();
        for (i, range) in ranges.iter().enumerate() {
            // On an error the ranges mapped so far are unmapped as `maps` drops.
            // SAFETY: the caller guarantees that the pages of every range outlive the mappings
            // returned (this function's contract, which is `Device::map_pages`' own).
            let map = unsafe { dev.map_pages(*range) }?;
            sges.sge[i] = map.sge(self.lkey);
            sges.n = i + 1;
            maps.0[i] = Some(map);
        }
        Ok((maps, sges))
    }
}

/// The mappings of in-capsule data sent from a request's own pages, one per range (see
/// [`InCapsule::Pages`]); unmapped on drop.
#[derive(Default)]
pub(crate) struct PageMaps([Option<DmaMap>; MAX_PAGE_SGES]);

/// The SGEs of a command send's in-capsule data (see [`InCapsule`]).
#[derive(Clone, Copy, Default)]
pub(crate) struct DataSges {
    sge: [bindings::ib_sge; MAX_PAGE_SGES],
    n: usize,
}

impl DataSges {
    fn as_slice(&self) -> &[bindings::ib_sge] {
        &self.sge[..self.n]
    }
}

/// An NVMe/RDMA queue.
#[pin_data]
pub(crate) struct Queue {
    /// First, so that a connection still installed when the queue is dropped goes before the
    /// rings and completion entries its QP refers to (teardown normally freed it already).
    conn: ConnCell<Conn>,
    ctrl: *const RdmaCtrl,
    qid: u16,
    /// Number of entries of the rings (largest depth this queue may be connected with).
    ring_depth: u32,
    flags: AtomicU32,
    #[pin]
    cm_done: Completion,
    cm_event: AtomicI32,
    cm_status: AtomicI32,
    /// The CM event behind `ENDED`, for the abort work's log line.
    ended_by: AtomicI32,
    /// Serializes stopping the queue (error recovery vs. timeout handler), as in C.
    #[pin]
    stop_lock: Mutex<()>,
    sqes: RingBuf,
    rsps: RingBuf,
    recv_cqes: KVec<RecvCqe>,
    #[pin]
    reg_done: Completion,
    reg_cqe: Opaque<WaitCqe>,
    aen_cqe: Opaque<bindings::ib_cqe>,
    /// Completion entry of every command send (see `post_command`).
    send_cqe: Opaque<bindings::ib_cqe>,
    /// Command sends posted, for choosing the ones to signal.
    sends: AtomicU32,
    /// Commands sent on this queue's QP and not yet answered, its own and those spread to it
    /// from other queues (see `mq::submit`); never more than `credits`, the receives posted.
    outstanding: AtomicU32,
    credits: AtomicU32,
    /// Block-layer polls running on the connection's CQ (poll queues): blk-mq polls without a
    /// lock or quiesce, so `stop` and `free` wait for them.
    pollers: AtomicU32,
    stats: QueueStats,
}

// SAFETY: the raw pointers refer to the owning controller (which outlives the queue) and to
// the queue itself; shared state is atomic, behind locks, or in a `ConnCell`.
unsafe impl Send for Queue {}
// SAFETY: as above.
unsafe impl Sync for Queue {}

impl Queue {
    /// A disconnected queue `qid` of `ctrl` whose rings hold `ring_depth` entries.
    pub(crate) fn new(
        ctrl: *const RdmaCtrl,
        qid: u16,
        ring_depth: u32,
    ) -> Result<impl PinInit<Self, Error>> {
        let n = ring_depth as usize;
        let sqes = RingBuf::new(n * SQE_SIZE)?;
        let rsps = RingBuf::new(n * CQE_SIZE)?;
        let mut recv_cqes = KVec::with_capacity(n, GFP_KERNEL)?;
        for index in 0..ring_depth {
            recv_cqes.push(
                RecvCqe {
                    cqe: bindings::ib_cqe {
                        done: Some(recv_done),
                    },
                    queue: core::ptr::null(),
                    index,
                },
                GFP_KERNEL,
            )?;
        }
        Ok(try_pin_init!(&this in Self {
            ctrl,
            qid,
            ring_depth,
            flags: AtomicU32::new(0),
            cm_done <- Completion::new(),
            cm_event: AtomicI32::new(-1),
            cm_status: AtomicI32::new(0),
            ended_by: AtomicI32::new(0),
            stop_lock <- kernel::new_mutex!(()),
            sqes,
            rsps,
            recv_cqes: {
                // The completion entries find their queue through this back pointer; the
                // queue is pinned, so its address is final.
                let mut v = recv_cqes;
                for c in v.iter_mut() {
                    c.queue = this.as_ptr();
                }
                v
            },
            reg_done <- Completion::new(),
            reg_cqe: Opaque::new(WaitCqe {
                cqe: bindings::ib_cqe { done: Some(reg_wr_done) },
                status: AtomicI32::new(0),
            }),
            aen_cqe: Opaque::new(bindings::ib_cqe { done: Some(aen_send_done) }),
            send_cqe: Opaque::new(bindings::ib_cqe { done: Some(send_done) }),
            sends: AtomicU32::new(0),
            outstanding: AtomicU32::new(0),
            credits: AtomicU32::new(0),
            pollers: AtomicU32::new(0),
            conn: ConnCell::new(),
            stats: QueueStats::default(),
        }? Error))
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

    pub(crate) fn ctrl(&self) -> &RdmaCtrl {
        // SAFETY: the controller owns the queue and outlives it.
        unsafe { &*self.ctrl }
    }

    fn nvme(&self) -> *const bindings::nvme_ctrl {
        self.ctrl().nvme().as_ptr()
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
    ///
    /// # Safety
    ///
    /// The caller is `queue_rq` after `nvme_check_ready` accepted the request, a completion
    /// handler of this queue's CQ, or the controller's set-up/teardown work: in all of these the
    /// connection cannot be replaced concurrently (see [`ConnCell`]).
    pub(crate) unsafe fn conn(&self) -> Option<&Conn> {
        // SAFETY: per the contract.
        unsafe { self.conn.get() }
    }

    // --- Connecting -----------------------------------------------------------------------

    /// Connects the queue at the RDMA level: CM id, address and route resolution, CQ, QP,
    /// CM connect with the NVMe/RDMA private data, receives posted. `depth` is the queue size
    /// to announce. The protection domain is the controller's, created on the device the admin
    /// queue resolves to.
    pub(crate) fn connect(&self, depth: u32) -> Result {
        self.try_connect(depth).inspect_err(|e| {
            log_info!(
                self.nvme(),
                "queue {}: connecting failed ({:?})",
                self.qid,
                e
            );
        })
    }

    fn try_connect(&self, depth: u32) -> Result {
        let ctrl = self.ctrl();
        let nvme = self.nvme();
        if depth > self.ring_depth {
            return Err(EINVAL);
        }
        // SAFETY: the queue is pinned inside the controller and outlives the id (the id is
        // dropped with the connection, before the queue).
        let cm_id = unsafe { CmId::new(cm_handler, self as *const Self as *mut c_void) }?;
        self.begin_cm_step();
        cm_id.resolve_addr(ctrl.src_addr(), ctrl.addr(), CM_RESOLVE_TIMEOUT_MS)?;
        self.wait_cm_step(
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_RESOLVED,
            CM_RESOLVE_TIMEOUT_MS + 1000,
        )?;

        let dev = cm_id.device().ok_or(ENODEV)?;
        if !dev.port_active(cm_id.port_num()) {
            // Sending a CM request now would break the device's CM for good (see
            // `Device::port_active`): wait for the port to come back.
            dbg_event!(
                Cm,
                self.nvme(),
                "queue {}: port {} of {} is down, not connecting",
                self.qid,
                cm_id.port_num(),
                dev.name()
            );
            return Err(errno::ENETDOWN());
        }
        let pd = ctrl.pd_for(self.qid, dev, cm_id.port_num())?;

        let sqe_map = self.sqes.map(dev, DmaDir::ToDevice)?;
        let rsp_map = self.rsps.map(dev, DmaDir::FromDevice)?;
        // One CQE per receive and per send queue entry (a flush completes unsignaled sends
        // too), plus the registration, the AEN and the drain's two.
        let cq_size = 3 * depth + 6;
        let vector = if self.qid == 0 {
            0
        } else {
            (self.qid as i32 - 1) % dev.num_comp_vectors().max(1)
        };
        let cq = if ctrl.is_poll_queue(self.qid) {
            Cq::direct(dev, cq_size, vector, self as *const Self as *mut c_void)?
        } else {
            // SAFETY: `outstanding` is a field of the queue, which outlives its connections.
            unsafe { Cq::softirq(dev, cq_size, vector, &self.outstanding) }?
        };
        let mut attr = bindings::ib_qp_init_attr {
            event_handler: Some(qp_event),
            qp_context: self as *const Self as *mut c_void,
            send_cq: cq.as_ptr(),
            recv_cq: cq.as_ptr(),
            sq_sig_type: bindings::ib_sig_type_IB_SIGNAL_REQ_WR,
            qp_type: bindings::ib_qp_type_IB_QPT_RC,
            ..Default::default()
        };
        // SEND per command, plus REG_MR (admin), the AEN and the drain. Room for twice the
        // depth: with selective signaling, a provider may only reclaim the entries of sends
        // that completed unsignaled at the next signaled completion.
        attr.cap.max_send_wr = 2 * depth + 3;
        attr.cap.max_recv_wr = depth + 1;
        // The capsule and its in-capsule data: one pool slice, or up to `MAX_PAGE_SGES` ranges
        // of a request's own pages. Every device that can carry NVMe/RDMA has two.
        let data_sges = (dev.max_send_sge().saturating_sub(1) as usize).clamp(1, MAX_PAGE_SGES);
        attr.cap.max_send_sge = 1 + data_sges as u32;
        attr.cap.max_recv_sge = 1;
        // Room to send a capsule without data as inline data, when the device has it.
        attr.cap.max_inline_data = SQE_SIZE as u32;
        // SAFETY: the CQ goes into the same `Conn` as the id, which drops the id (and so the
        // QP) first; if creating the QP fails there is no QP.
        let qp = match unsafe { cm_id.create_qp(pd, &mut attr) } {
            Ok(qp) => qp,
            Err((cm_id, e)) if e == EINVAL || e == ENOMEM => {
                // A device without (this much) inline data: capsules go by reference.
                attr.cap.max_inline_data = 0;
                // SAFETY: as above; the failed call left no QP behind.
                unsafe { cm_id.create_qp(pd, &mut attr) }.map_err(|(_, e)| e)?
            }
            Err((_, e)) => return Err(e),
        };
        // The provider reports the inline room it actually gave the QP.
        let inline_capsule = attr.cap.max_inline_data as usize >= SQE_SIZE;
        let conn = Conn {
            qp,
            cq,
            sqe_map,
            rsp_map,
            lkey: pd.local_dma_lkey(),
            inline_capsule,
            data_sges,
            signal_mask: prev_power_of_two(depth.clamp(1, SIGNAL_EVERY)) - 1,
        };

        let tos = ctrl.nvme().opts().tos();
        if (0..=255).contains(&tos) {
            conn.qp.set_tos(tos as u8);
        }
        self.begin_cm_step();
        conn.qp.resolve_route(CM_RESOLVE_TIMEOUT_MS)?;
        self.wait_cm_step(
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ROUTE_RESOLVED,
            CM_RESOLVE_TIMEOUT_MS + 1000,
        )?;

        let cntlid = if self.qid == 0 {
            0
        } else {
            ctrl.nvme().cntlid()
        };
        let req = CmRequest::new(self.qid, depth as u16, cntlid).ok_or(EINVAL)?;
        let private = req.encode();
        let param = bindings::rdma_conn_param {
            private_data: private.as_ptr().cast(),
            private_data_len: CM_REQ_SIZE as u8,
            responder_resources: dev.max_qp_rd_atom().clamp(0, 255) as u8,
            flow_control: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            qp_num: conn.qp.qp_num(),
            ..Default::default()
        };
        dbg_event!(
            Cm,
            nvme,
            "queue {}: connecting qp {:#x} on {} (hrqsize {}, hsqsize {}, cntlid {})",
            self.qid,
            conn.qp.qp_num(),
            dev.name(),
            req.hrqsize,
            req.hsqsize,
            req.cntlid
        );
        self.begin_cm_step();
        conn.qp.connect(&param)?;
        self.wait_cm_step(
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ESTABLISHED,
            CM_CONNECT_TIMEOUT_MS,
        )?;

        // A new QP: whatever was outstanding on the old one was flushed and is being retried.
        self.outstanding.store(0, Ordering::Relaxed);
        self.credits.store(depth, Ordering::Relaxed);
        // Installed before the receives are posted: whatever the target sends completes a
        // receive of a queue that has its connection.
        // SAFETY: called from the set-up work; the queue was freed before (no connection
        // installed), so nothing uses the cell.
        let old = unsafe { self.conn.replace(Some(conn)) };
        debug_assert!(old.is_none());
        self.flags.store(ALLOCATED | ESTABLISHED, Ordering::Release);
        // SAFETY: the set-up work, which just installed it.
        let conn = unsafe { self.conn() }.ok_or(errno::ENOTCONN())?;
        let posted = (0..depth).try_for_each(|i| self.post_recv(conn, i));
        if let Err(e) = posted {
            self.stop();
            self.free(true);
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
    fn wait_cm_step(&self, expected: bindings::rdma_cm_event_type, timeout_ms: u32) -> Result {
        if !self.cm_done.wait_ms(timeout_ms) {
            log_info!(
                self.nvme(),
                "queue {}: no {} within {} ms",
                self.qid,
                rdma::cm_event_msg(expected),
                timeout_ms
            );
            return Err(errno::ETIMEDOUT());
        }
        let event = self.cm_event.load(Ordering::Acquire);
        if event == expected as i32 {
            return Ok(());
        }
        let status = self.cm_status.load(Ordering::Relaxed);
        log_info!(
            self.nvme(),
            "queue {}: {} instead of {} (status {})",
            self.qid,
            rdma::cm_event_msg(event as u32),
            rdma::cm_event_msg(expected),
            status
        );
        Err(if status < 0 {
            Error::from_errno(status)
        } else {
            errno::ECONNREFUSED()
        })
    }

    /// Handles CM event `event` ending this queue's connection, if it was established: error
    /// recovery, or while connecting the abort of its commands in flight.
    fn cm_lost(&self, event: bindings::rdma_cm_event_type) {
        if self.is_established() {
            self.ctrl().error_recovery(format_args!(
                "queue {}: {}",
                self.qid,
                rdma::cm_event_msg(event)
            ));
            // Events of one CM id come one at a time: only the first report's event is kept.
            if self.flags.load(Ordering::Acquire) & ENDED == 0 {
                self.ended_by.store(event as i32, Ordering::Relaxed);
            }
            self.report_while_connecting(ENDED);
        }
    }

    /// Records a CM event for the waiting set-up step.
    fn cm_signal(&self, event: bindings::rdma_cm_event_type, status: i32) {
        self.cm_status.store(status, Ordering::Relaxed);
        self.cm_event.store(event as i32, Ordering::Release);
        self.cm_done.complete();
    }

    /// Registers the pool MR on this (admin) queue's QP and waits for it to take effect.
    pub(crate) fn register_pool(&self, reg: &PoolReg) -> Result {
        // SAFETY: called from the set-up work with the connection just installed.
        let conn = unsafe { self.conn() }.ok_or(errno::ENOTCONN())?;
        let mr = reg.mr();
        let access = bindings::ib_access_flags_IB_ACCESS_LOCAL_WRITE
            | bindings::ib_access_flags_IB_ACCESS_REMOTE_READ
            | bindings::ib_access_flags_IB_ACCESS_REMOTE_WRITE;
        let mut wr = bindings::ib_reg_wr {
            mr: mr.as_ptr(),
            key: mr.rkey(),
            access: access as i32,
            ..Default::default()
        };
        wr.wr.opcode = bindings::ib_wr_opcode_IB_WR_REG_MR;
        wr.wr.send_flags = bindings::ib_send_flags_IB_SEND_SIGNALED;
        wr.wr.__bindgen_anon_1.wr_cqe = self.reg_cqe.get().cast();
        self.reg_done.reinit();
        // SAFETY: `reg_cqe` lives in the queue, which outlives the QP (and the drain at
        // teardown completes any outstanding request).
        unsafe { conn.qp.post_send(&wr.wr) }?;
        if !self.reg_done.wait_ms(REG_TIMEOUT_MS) {
            log_err!(
                self.nvme(),
                "pool registration did not complete within {} ms",
                REG_TIMEOUT_MS
            );
            return Err(errno::ETIMEDOUT());
        }
        // SAFETY: `reg_cqe` is only written by `reg_done`, which has run.
        let status = unsafe { (*self.reg_cqe.get()).status.load(Ordering::Acquire) };
        if status != bindings::ib_wc_status_IB_WC_SUCCESS as i32 {
            log_err!(
                self.nvme(),
                "pool registration failed: {}",
                rdma::wc_status_msg(status as u32)
            );
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
    /// request, see `mq::pages_send_done`) before the core cancels the requests and may free
    /// them.
    pub(crate) fn stop(&self) {
        if !self.is_allocated() {
            return;
        }
        let _guard = self.stop_lock.lock();
        let was = self
            .flags
            .fetch_and(!(LIVE | ESTABLISHED | STARTED), Ordering::SeqCst);
        // SAFETY: allocated queues have a connection, which only `free` removes, and `free` is
        // not concurrent with `stop` (both run from the controller's work items, or `stop` from
        // the timeout handler while the queue is allocated).
        let Some(conn) = (unsafe { self.conn() }) else {
            return;
        };
        // No DREQ while the port is down (see `Device::port_active`); the target learns from
        // its own timeouts, or from the DREQ sent when the id is released.
        if was & (LIVE | ESTABLISHED) != 0 && conn.qp.port_active() {
            conn.qp.disconnect();
        }
        conn.qp.drain();
        // On a poll queue's CQ the drain polls beside blk-mq's pollers, one of which may still
        // be handling completions it took before the drain's own ended. Polls started after
        // ESTABLISHED was cleared above leave the CQ alone, so this waits only for those that
        // began before (see `poll`).
        self.wait_for_pollers();
    }

    /// Waits for the block-layer polls running on this queue's CQ (`poll`) to return. They
    /// poll a bounded CQ without sleeping.
    fn wait_for_pollers(&self) {
        while self.pollers.load(Ordering::SeqCst) != 0 {
            core::hint::spin_loop();
        }
    }

    /// Handles the loss of this queue's connection while the controller is connecting. Error
    /// recovery does not run in that state, and the set-up sequence waits for the commands in
    /// flight (Connect, authentication, the first admin commands): left alone they would wait
    /// out their timeouts although no response can come, and the core sends authentication
    /// commands again. So the queue stops carrying commands (see [`Queue::connected`]) and the
    /// timeout handler, run now for each command in flight (`blk_abort_request`), stops the
    /// queue and completes them.
    ///
    /// Runs in the controller's abort work. `cause` is the flag that reported the loss: the loss
    /// is handled only while it is set, so a report about a connection that was replaced
    /// meanwhile is ignored.
    fn lost_while_connecting(&self, why: &CStr, cause: u32) {
        // Reported while connecting; a deletion begun since then waits for the set-up too.
        if !matches!(
            self.ctrl().nvme().state(),
            State::Connecting | State::Deleting | State::DeletingNoIo
        ) {
            return;
        }
        let _guard = self.stop_lock.lock();
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
        // Only a started queue has carried commands. Nothing is walked while a reconnect
        // changes the number of I/O queues: the I/O is frozen then, so none of their commands
        // is in flight.
        let n = if was & STARTED != 0 {
            // `queue_rq` runs inside an RCU read-side section (blk-mq's dispatch, the tag sets
            // are not BLOCKING) and, the controller not being live, fails a command for a lost
            // queue before starting it. So once a grace period has passed, no `queue_rq` is
            // between starting a command for this queue and sending it: the walk aborts only
            // commands that went out, whose requests `queue_rq` has given up.
            crate::sync::synchronize_rcu();
            crate::mq::abort_sent_on(self.ctrl(), self.qid).unwrap_or(0)
        } else {
            0
        };
        log_info!(
            self.nvme(),
            "queue {}: {} while connecting: aborting {} command(s) in flight",
            self.qid,
            why,
            n
        );
    }

    /// Reports the end of this queue's connection while the controller is connecting: `ENDED`
    /// from the CM handler, `FAILED` for a failed work request or a fatal QP event (completion or
    /// event context). Error recovery does not run in that state, and the commands in flight
    /// would wait out their timeouts (see [`Queue::lost_while_connecting`]). The controller's
    /// abort work handles the queue: completion and event handlers cannot take its stop lock,
    /// and the CM handler must not wait for it (nor for a reconnect's change of hardware
    /// queues): the CM delivers other connections' events from the same work queue, one at a
    /// time. Each cause counts once per established connection: the other reports are its
    /// flushed work requests or its later CM events.
    fn report_while_connecting(&self, cause: u32) {
        if self.ctrl().nvme().state() != State::Connecting {
            return;
        }
        let first = self
            .flags
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| {
                (f & (ESTABLISHED | cause) == ESTABLISHED).then_some(f | cause)
            })
            .is_ok();
        if first {
            self.ctrl().queue_abort();
        }
    }

    /// The controller's abort work: handles a loss reported by
    /// [`Queue::report_while_connecting`], named after the CM's event if there was one.
    pub(crate) fn abort_if_lost(&self) {
        let flags = self.flags.load(Ordering::Acquire);
        if flags & ENDED != 0 {
            let event = self.ended_by.load(Ordering::Relaxed);
            self.lost_while_connecting(rdma::cm_event_msg(event as u32), ENDED);
        } else if flags & FAILED != 0 {
            self.lost_while_connecting(c_str!("connection failed"), FAILED);
        }
    }

    /// Releases the connection's resources. While the port is down the CM id is parked (see
    /// `registration::park`) instead of being destroyed, since destroying a connected id sends
    /// a DREQ through the CM; its QP goes now. `force` destroys it in any case (device
    /// removal).
    pub(crate) fn free(&self, force: bool) {
        // Every flag: the queue has no connection from here. Sequentially consistent, as is
        // the poller's count and check (`poll`): either a poller sees no connection, or this
        // sees the poller and waits for it.
        if self.flags.swap(0, Ordering::SeqCst) & ALLOCATED == 0 {
            return;
        }
        self.wait_for_pollers();
        // Drained (again) before the connection is taken out of the cell: a queue that is freed
        // without having been stopped (a set-up failing after its connect) may still have a
        // completion handler running on another CPU, using the connection; the drain waits
        // for it and flushes what the QP holds.
        // SAFETY: the controller's teardown or set-up work.
        if let Some(conn) = unsafe { self.conn() } {
            conn.qp.drain();
        }
        // SAFETY: the queue's QP is drained, so no completion handler runs for it any more,
        // and `queue_rq` cannot reach it (above): nothing uses the connection.
        let Some(conn) = (unsafe { self.conn.replace(None) }) else {
            return;
        };
        dbg_event!(
            Queue,
            self.nvme(),
            "queue {}: released qp {:#x}",
            self.qid,
            conn.qp.qp_num()
        );
        let dev_gone = conn
            .qp
            .device()
            .is_some_and(|d| self.ctrl().device_blocked(d));
        if force || dev_gone || conn.qp.port_active() {
            drop(conn);
            return;
        }
        let Conn {
            qp,
            cq,
            sqe_map,
            rsp_map,
            ..
        } = conn;
        let cm_id = qp.destroy_qp();
        drop((cq, sqe_map, rsp_map));
        crate::registration::park(cm_id);
    }

    /// Polls the connection's CQ for blk-mq (a poll queue's `poll`); 0 without a connection.
    ///
    /// # Safety
    ///
    /// Called from `blk_mq_ops::poll` of this queue's hardware context.
    pub(crate) unsafe fn poll(&self) -> i32 {
        self.pollers.fetch_add(1, Ordering::SeqCst);
        // Sequentially consistent with `stop` and `free`, which clear the flags and then wait
        // for the count: either this poll sees them cleared and leaves the CQ alone, or they
        // wait for it. A stopped queue is not polled: its drain has taken what the CQ held.
        let found = if self.flags.load(Ordering::SeqCst) & (ALLOCATED | ESTABLISHED)
            == ALLOCATED | ESTABLISHED
        {
            // SAFETY: `free` clears ALLOCATED before it releases the connection, then waits
            // for this poll to end (see there).
            match unsafe { self.conn.get() } {
                Some(conn) => conn.cq().poll_direct(-1),
                None => 0,
            }
        } else {
            0
        };
        self.pollers.fetch_sub(1, Ordering::Release);
        found
    }

    // --- Posting --------------------------------------------------------------------------

    /// Takes one of the queue's credits for a command, if fewer than `limit` are taken (a
    /// command without a credit would find no receive posted for its response).
    pub(crate) fn take_credit(&self, limit: u32) -> bool {
        let limit = limit.min(self.credits.load(Ordering::Relaxed));
        self.outstanding
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_ok()
    }

    /// Returns the credit of a command that was not sent, or whose response arrived.
    pub(crate) fn return_credit(&self) {
        let _ = self
            .outstanding
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// The number of credits of the current connection (its depth).
    pub(crate) fn credits(&self) -> u32 {
        self.credits.load(Ordering::Relaxed)
    }

    /// Sends command `sqe`, with its in-capsule data if any. `index` is the command's entry of
    /// this queue's ring, used when the capsule goes by reference; a command of another queue
    /// (see `mq::spread`) has none and can only go as inline data (`EINVAL` otherwise).
    ///
    /// Only one send in [`SIGNAL_EVERY`] (fewer on a shallow queue) asks for a completion (a
    /// failed send always completes, and starts error recovery); the request completes on its
    /// response alone.
    /// That is safe because the response proves that the target received the whole capsule, and
    /// the command ring and the pool stay registered until the QP is drained: a send the
    /// adapter retransmits after its ring entry or slot was reused is a duplicate the target
    /// drops. The C driver signals every send because it unmaps and invalidates per command;
    /// so does this one for in-capsule data sent from the request's own pages
    /// ([`InCapsule::Pages`]), which stay mapped until their send completes.
    /// Returns `ENOMEM` when the send queue is full.
    ///
    /// # Safety
    ///
    /// Ring entry `index`, if any, must belong to the command while it is in flight; `data`
    /// must be as [`InCapsule`] describes.
    pub(crate) unsafe fn post_command(
        &self,
        conn: &Conn,
        sqe: &[u8; SQE_SIZE],
        index: Option<usize>,
        data: Option<InCapsule>,
    ) -> Result {
        let n = self.sends.fetch_add(1, Ordering::Relaxed);
        let now_and_then = n & conn.signal_mask == conn.signal_mask;
        let (sges, cqe, signaled) = match &data {
            None => (&[][..], self.send_cqe.get(), now_and_then),
            Some(InCapsule::Pool(sge)) => (
                core::slice::from_ref(sge),
                self.send_cqe.get(),
                now_and_then,
            ),
            Some(InCapsule::Pages(sges, cqe)) => (sges.as_slice(), *cqe, true),
        };
        // SAFETY: `send_cqe` lives in the queue, which outlives the QP; a `Pages` completion
        // entry lives until the send completes (see `InCapsule`); `index` and `data` per the
        // contract.
        unsafe { self.post_capsule(conn, sqe, index, cqe, signaled, sges) }
    }

    /// Posts the SEND of capsule `sqe`: as inline data when there is no in-capsule data and the
    /// QP has room (the provider copies it at post time), else copied to ring entry `index` and
    /// sent from there.
    ///
    /// # Safety
    ///
    /// Ring entry `index`, if any, must be the caller's until the send completes or the QP is
    /// drained; so must `cqe`; `inline` (at most `Conn::data_sges` elements) must describe
    /// memory the device may read through its key until then (registered pool memory, or pages
    /// mapped for the device).
    unsafe fn post_capsule(
        &self,
        conn: &Conn,
        sqe: &[u8; SQE_SIZE],
        index: Option<usize>,
        cqe: *mut bindings::ib_cqe,
        signaled: bool,
        inline: &[bindings::ib_sge],
    ) -> Result {
        if inline.len() > conn.data_sges {
            return Err(EINVAL);
        }
        let mut send_flags = if signaled {
            bindings::ib_send_flags_IB_SEND_SIGNALED
        } else {
            0
        };
        // A capsule without in-capsule data goes as inline data when the QP has room: the
        // provider copies its 64 bytes into the work request at post time instead of fetching
        // them by key when it transmits. Inline SGEs carry CPU addresses.
        let capsule = if inline.is_empty() && conn.inline_capsule {
            send_flags |= bindings::ib_send_flags_IB_SEND_INLINE;
            bindings::ib_sge {
                addr: sqe.as_ptr() as u64,
                length: SQE_SIZE as u32,
                lkey: 0,
            }
        } else {
            let index = index.ok_or(EINVAL)?;
            // SAFETY: the entry is the caller's (see the contract) and inside the ring.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    sqe.as_ptr(),
                    self.sqes.entry(index, SQE_SIZE),
                    SQE_SIZE,
                )
            };
            let offset = index * SQE_SIZE;
            conn.sqe_map.sync_for_device(offset, SQE_SIZE);
            bindings::ib_sge {
                addr: conn.sqe_map.addr() + offset as u64,
                length: SQE_SIZE as u32,
                lkey: conn.lkey,
            }
        };
        let mut sge = [bindings::ib_sge::default(); 1 + MAX_PAGE_SGES];
        sge[0] = capsule;
        for (to, from) in sge[1..].iter_mut().zip(inline) {
            *to = *from;
        }
        let mut wr = bindings::ib_send_wr {
            sg_list: sge.as_mut_ptr(),
            num_sge: 1 + inline.len() as i32,
            opcode: bindings::ib_wr_opcode_IB_WR_SEND,
            send_flags,
            ..Default::default()
        };
        wr.__bindgen_anon_1.wr_cqe = cqe;
        // SAFETY: the SGEs name the capsule (by CPU address when inline, copied before the
        // call returns; else its ring entry through the mapped ring) and (per the contract)
        // memory the device may read; the verbs provider copies the WR before returning.
        unsafe { conn.qp.post_send(&wr) }
    }

    fn post_recv(&self, conn: &Conn, index: u32) -> Result {
        let offset = index as usize * CQE_SIZE;
        let mut sge = bindings::ib_sge {
            addr: conn.rsp_map.addr() + offset as u64,
            length: CQE_SIZE as u32,
            lkey: conn.lkey,
        };
        let mut wr = bindings::ib_recv_wr {
            sg_list: &mut sge,
            num_sge: 1,
            ..Default::default()
        };
        wr.__bindgen_anon_1.wr_cqe = &self.recv_cqes[index as usize].cqe as *const _ as *mut _;
        // SAFETY: the receive buffer is part of the mapped ring and its completion entry lives
        // in the queue, which outlives the QP.
        let ret = unsafe { conn.qp.post_recv(&wr) };
        if let Err(e) = ret {
            log_err!(
                self.nvme(),
                "queue {}: posting receive failed ({:?})",
                self.qid,
                e
            );
        }
        ret
    }

    /// Sends the asynchronous event request (admin queue).
    pub(crate) fn submit_async_event(&self) {
        // SAFETY: called by the core while the admin queue is live.
        let Some(conn) = (unsafe { self.conn() }) else {
            return;
        };
        let index = AEN_COMMAND_ID as usize;
        let mut cmd = [0u8; SQE_SIZE];
        cmd[0] = bindings::nvme_admin_opcode_nvme_admin_async_event as u8;
        cmd[2..4].copy_from_slice(&AEN_COMMAND_ID.to_le_bytes());
        crate::proto::capsule::set_sgl(
            &mut cmd,
            &crate::proto::sgl::KeyedSgl::default()
                .encode()
                .unwrap_or_default(),
        );
        // SAFETY: the AEN ring entry is used by nothing else and only one AEN is outstanding;
        // `aen_cqe` lives in the queue.
        let res =
            unsafe { self.post_capsule(conn, &cmd, Some(index), self.aen_cqe.get(), true, &[]) };
        if let Err(e) = res {
            log_err!(
                self.nvme(),
                "posting the async event request failed ({:?})",
                e
            );
        }
    }

    /// Logs a failed work request and starts error recovery (or, while connecting, aborts the
    /// commands in flight on the queue).
    pub(crate) fn wr_error(&self, wc: &bindings::ib_wc, op: &str) {
        let ctrl = self.ctrl();
        let state = ctrl.nvme().state();
        if state == State::Live || (state == State::Connecting && self.connected()) {
            log_info!(
                self.nvme(),
                "queue {}: {} failed with status {} ({})",
                self.qid,
                op,
                rdma::wc_status_msg(wc.status),
                wc.status
            );
        }
        ctrl.error_recovery(format_args!("{} failed on queue {}", op, self.qid));
        self.report_while_connecting(FAILED);
    }
}

/// The in-capsule data of a command send (see [`Queue::post_command`]).
pub(crate) enum InCapsule {
    /// A slice of the registered pool, through the pool MR's local key. The send asks for a
    /// completion only now and then: the pool stays registered until the QP is drained.
    Pool(bindings::ib_sge),
    /// The request's own pages, in up to `Conn::data_sges` ranges mapped for the device
    /// ([`Conn::map_pages`]) and named through the PD's local DMA key. The send always asks
    /// for a completion, which `cqe` receives; the pages must stay mapped, and `cqe` valid,
    /// until it has run (or the QP is drained).
    Pages(DataSges, *mut bindings::ib_cqe),
}

// --- Callbacks from the RDMA core ---------------------------------------------------------

/// # Safety
///
/// Called by the RDMA CM with the id created in `Queue::connect`, whose context is the queue.
unsafe extern "C" fn cm_handler(
    id: *mut bindings::rdma_cm_id,
    ev: *mut bindings::rdma_cm_event,
) -> i32 {
    // SAFETY: the handler's arguments, valid for the call.
    let ev = unsafe { CmEvent::from_raw(id, ev) };
    let (context, event, status) = (ev.context(), ev.event(), ev.status());
    if context.is_null() {
        // A parked id, detached from its queue: nothing to do. The device's removal releases
        // parked ids before the CM reports it to them.
        if event == bindings::rdma_cm_event_type_RDMA_CM_EVENT_DEVICE_REMOVAL {
            log_err!(
                core::ptr::null(),
                "a parked CM id is still on a device being removed"
            );
        }
        return 0;
    }
    // SAFETY: a non-null context is the queue that created the id, alive while the id is
    // attached to it.
    let queue = unsafe { &*(context as *const Queue) };
    let nvme = queue.nvme();
    dbg_event!(
        Cm,
        nvme,
        "queue {}: {} ({}) status {}",
        queue.qid,
        rdma::cm_event_msg(event),
        event,
        status
    );
    match event {
        bindings::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_RESOLVED
        | bindings::rdma_cm_event_type_RDMA_CM_EVENT_ROUTE_RESOLVED
        | bindings::rdma_cm_event_type_RDMA_CM_EVENT_ESTABLISHED => queue.cm_signal(event, 0),
        bindings::rdma_cm_event_type_RDMA_CM_EVENT_REJECTED => {
            if let Some(rej) = ev.rejected() {
                let cm_msg = rej.cm_msg;
                match rej.data.and_then(CmReject::decode) {
                    Some(r) => log_err!(
                        nvme,
                        "queue {}: connect rejected: status {} ({}) nvme status {} ({})",
                        queue.qid,
                        status,
                        cm_msg,
                        r.sts,
                        r.msg()
                    ),
                    None => log_err!(
                        nvme,
                        "queue {}: connect rejected: status {} ({})",
                        queue.qid,
                        status,
                        cm_msg
                    ),
                }
            }
            queue.cm_signal(event, errno::ECONNRESET().to_errno());
        }
        bindings::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_ERROR
        | bindings::rdma_cm_event_type_RDMA_CM_EVENT_ROUTE_ERROR
        | bindings::rdma_cm_event_type_RDMA_CM_EVENT_CONNECT_ERROR
        | bindings::rdma_cm_event_type_RDMA_CM_EVENT_UNREACHABLE => {
            let err = if status < 0 {
                status
            } else {
                errno::ECONNRESET().to_errno()
            };
            queue.cm_signal(event, err);
        }
        bindings::rdma_cm_event_type_RDMA_CM_EVENT_DISCONNECTED
        | bindings::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_CHANGE
        | bindings::rdma_cm_event_type_RDMA_CM_EVENT_TIMEWAIT_EXIT => {
            queue.cm_lost(event);
            queue.cm_signal(event, errno::ECONNRESET().to_errno());
        }
        bindings::rdma_cm_event_type_RDMA_CM_EVENT_DEVICE_REMOVAL => {
            // The ib_client remove callback, which runs before the CM's, released everything
            // on the device of the controllers it found; an id still here belongs to one it
            // did not (being created, say). The CM waits until the id is destroyed: the
            // controller stops using the device, and its teardown destroys the id instead of
            // parking it.
            if let Some(dev) = ev.device() {
                queue.ctrl().block_device(dev);
            }
            queue.cm_lost(event);
            queue.cm_signal(event, ENODEV.to_errno());
        }
        _ => {
            log_err!(
                nvme,
                "queue {}: unexpected RDMA CM event {} ({})",
                queue.qid,
                rdma::cm_event_msg(event),
                event
            );
            queue.ctrl().error_recovery(format_args!(
                "queue {}: unexpected CM event {}",
                queue.qid, event
            ));
        }
    }
    0
}

/// Asynchronous QP events: fatal ones mean the connection is gone.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn qp_event(event: *mut bindings::ib_event, context: *mut c_void) {
    // SAFETY: the QP's context is its queue, alive while the QP exists.
    let (queue, ev) = unsafe { (&*(context as *const Queue), (*event).event) };
    dbg_event!(
        Queue,
        queue.nvme(),
        "queue {}: QP event {} ({})",
        queue.qid,
        rdma::event_msg(ev),
        ev
    );
    match ev {
        bindings::ib_event_type_IB_EVENT_QP_FATAL
        | bindings::ib_event_type_IB_EVENT_QP_REQ_ERR
        | bindings::ib_event_type_IB_EVENT_QP_ACCESS_ERR => {
            log_err!(
                queue.nvme(),
                "queue {}: QP event {}",
                queue.qid,
                rdma::event_msg(ev)
            );
            queue.ctrl().error_recovery(format_args!(
                "queue {}: {}",
                queue.qid,
                rdma::event_msg(ev)
            ));
            queue.report_while_connecting(FAILED);
        }
        _ => {}
    }
}

/// Completion of a receive (a response capsule).
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn recv_done(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
    // SAFETY: the RDMA core passes a valid completion whose `wr_cqe` is a `RecvCqe` of a live
    // queue (posted in `post_recv`).
    let (wc, rc) = unsafe {
        let wc = &*wc;
        (wc, &*(wc.__bindgen_anon_1.wr_cqe as *const RecvCqe))
    };
    // SAFETY: set in `Queue::new`, the queue outlives its QP.
    let queue = unsafe { &*rc.queue };
    if wc.status != bindings::ib_wc_status_IB_WC_SUCCESS {
        queue.wr_error(wc, "RECV");
        return;
    }
    // SAFETY: a completion of this queue's CQ: the connection is installed (see `conn`).
    let Some(conn) = (unsafe { queue.conn() }) else {
        return;
    };
    if (wc.byte_len as usize) < CQE_SIZE {
        log_err!(
            queue.nvme(),
            "queue {}: truncated response of {} bytes",
            queue.qid,
            wc.byte_len
        );
        queue
            .ctrl()
            .error_recovery(format_args!("truncated response on queue {}", queue.qid));
        return;
    }
    let offset = rc.index as usize * CQE_SIZE;
    conn.rsp_map.sync_for_cpu(offset, CQE_SIZE);
    let mut raw = [0u8; CQE_SIZE];
    // SAFETY: the ring entry is ours until the receive is reposted below.
    unsafe {
        core::ptr::copy_nonoverlapping(
            queue.rsps.entry(rc.index as usize, CQE_SIZE),
            raw.as_mut_ptr(),
            CQE_SIZE,
        )
    };
    let cqe = crate::proto::capsule::Cqe::decode(&raw);
    let invalidated = wc.wc_flags & bindings::ib_wc_flags_IB_WC_WITH_INVALIDATE as i32 != 0;
    if queue.qid == 0 && cqe.command_id & 0xfff >= AEN_COMMAND_ID {
        queue
            .ctrl()
            .nvme()
            .complete_async_event(u16::from_le_bytes([raw[14], raw[15]]), cqe.result);
    } else {
        crate::mq::process_response(queue, conn, &raw, invalidated);
    }
    conn.rsp_map.sync_for_device(offset, CQE_SIZE);
    let _ = queue.post_recv(conn, rc.index);
}

/// Completion of a command send: a signaled one, or one that failed.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn send_done(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
    // SAFETY: valid completion of a send posted by `post_command`, whose QP context is the
    // queue.
    let (wc, queue) = unsafe { (&*wc, &*((*(*wc).qp).qp_context as *const Queue)) };
    if wc.status != bindings::ib_wc_status_IB_WC_SUCCESS {
        queue.wr_error(wc, "SEND");
    }
}

/// Completion of the asynchronous event request send.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn aen_send_done(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
    // SAFETY: valid completion of the AEN send posted by `submit_async_event`; `qp_context` is
    // the queue.
    let (wc, queue) = unsafe { (&*wc, &*((*(*wc).qp).qp_context as *const Queue)) };
    if wc.status != bindings::ib_wc_status_IB_WC_SUCCESS {
        queue.wr_error(wc, "ASYNC");
    }
}

/// Completion of the pool registration (REG_MR) work request.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn reg_wr_done(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
    // SAFETY: valid completion of the REG_MR posted by `register_pool`, whose `wr_cqe` is the
    // queue's `reg_cqe` and whose QP context is the queue.
    let (wc, queue) = unsafe { (&*wc, &*((*(*wc).qp).qp_context as *const Queue)) };
    // SAFETY: `reg_cqe` is a `WaitCqe` inside the queue.
    unsafe {
        (*queue.reg_cqe.get())
            .status
            .store(wc.status as i32, Ordering::Release)
    };
    queue.reg_done.complete();
}

/// The largest power of two not above `n` (at least 1).
fn prev_power_of_two(n: u32) -> u32 {
    1 << (u32::BITS - 1 - n.max(1).leading_zeros())
}
