// SPDX-License-Identifier: GPL-2.0

//! The controller: creation from connect options, set-up and teardown of its queues and of its
//! registered pool, error recovery and reconnection, and the `nvme_ctrl_ops` of the core.
//!
//! The sequence follows the C transport (drivers/nvme/host/rdma.c) where the core expects it;
//! what differs: one registered pool per controller instead of per-I/O memory registration,
//! every wait bounded, the first reconnect attempt immediate, and RDMA device removal turned
//! into a reconnect instead of a deletion.

use crate::bindings;
use crate::errno;
use crate::glue::{dbg_event, log_err, log_info, log_warn};
use crate::mq::{Request, ADMIN_MQ_OPS, IO_MQ_OPS};
use crate::nvme::{status_result, Ctrl, Failure, Options, State};
use crate::pool::{Pool, PoolConfig, PoolReg, MAX_IO_BYTES};
use crate::proto::addr::Endpoint;
use crate::proto::pool::BUDDY_MAX_AREA;
use crate::proto::reconnect::{Decision, Outcome, Policy, Reconnect};
use crate::proto::spread::Spread;
use crate::queue::{Queue, ADMIN_DEPTH};
use crate::rdma::{Device, Pd};
use crate::request::{SetKind, TagSet, Tags};
use crate::stats::{CtrlStats, DebugDir};
use crate::sync::{new_irq_lock, Completion, ConnCell, IrqLock, RcuReadGuard};
use crate::work::{DelayedWork, Work, Wq};
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use kernel::c_str;
use kernel::error::to_result;
use kernel::prelude::*;
use kernel::sync::Mutex;
use kernel::time::Ktime;
use kernel::types::Opaque;

/// Largest queue size the transport uses (as NVME_RDMA_MAX_QUEUE_SIZE).
const MAX_QUEUE_SIZE: u32 = 256;
/// How often device removal says that it still waits for a deletion to release the device.
const RELEASE_WAIT_MS: u32 = 10_000;
/// How long to wait for I/O to drain when the number of queues changes on reconnect.
const FREEZE_TIMEOUT_MS: u32 = 30_000;
const HCTX_MAX_TYPES: usize = bindings::hctx_type_HCTX_MAX_TYPES as usize;

/// The controller's resources on its current RDMA device. Field order is drop order: the pool
/// MR is deregistered (its RKEY invalidated) before the protection domain goes.
struct CtrlConn {
    reg: Option<PoolReg>,
    pd: Pd,
}

/// Reconnect bookkeeping, used only from the controller's work items.
struct Recovery {
    policy: Policy,
    current: Option<Reconnect>,
    lost_at: Option<Ktime>,
    last_rkey: u32,
}

/// An NVMe over RDMA controller.
#[pin_data]
pub(crate) struct RdmaCtrl {
    #[pin]
    nctrl: Opaque<bindings::nvme_ctrl>,
    /// The tag sets of the admin queue and of the I/O queues. A response looks its request up
    /// in them, and the abort work walks them (see `TagSet`).
    #[pin]
    admin_tag_set: TagSet<Request>,
    #[pin]
    tag_set: TagSet<Request>,
    #[pin]
    err_work: Work,
    #[pin]
    reconnect_work: DelayedWork,
    /// Arms `reconnect_work`; `true` once deletion stopped the controller, after which nothing
    /// arms it again.
    #[pin]
    reconnect_gate: IrqLock<bool>,
    /// Aborts the commands in flight on queues whose connection ended or failed while
    /// connecting (see `Queue::report_while_connecting`).
    #[pin]
    abort_work: Work,
    /// Queue 0 is the admin queue. Dropped before `conn` and `pool`.
    queues: KVec<Pin<KBox<Queue>>>,
    conn: ConnCell<CtrlConn>,
    #[pin]
    pool: Pool,
    addr: bindings::__kernel_sockaddr_storage,
    src_addr: Option<bindings::__kernel_sockaddr_storage>,
    io_queues: [AtomicU32; HCTX_MAX_TYPES],
    /// Turn of the next spread command (see `mq::spread`).
    spread_next: AtomicU32,
    use_inline: AtomicBool,
    inline_size: AtomicU32,
    slot_size: u32,
    blocked_dev: AtomicPtr<bindings::ib_device>,
    /// The device and port of `conn`, set when it is installed and cleared once it is
    /// released: device and port events cannot read the cell while set-up or teardown
    /// replaces it.
    conn_dev: AtomicPtr<bindings::ib_device>,
    conn_port: AtomicU32,
    /// Signalled when `release_conn` has released everything of a connection on its device.
    #[pin]
    released: Completion,
    /// In the transport's controller list (creation completed).
    pub(crate) listed: AtomicBool,
    #[pin]
    recovery: Mutex<Recovery>,
    pub(crate) reconnects: AtomicU64,
    #[pin]
    stats: CtrlStats,
    /// RKEY of the pool's current registration, 0 when not registered.
    rkey: AtomicU32,
    #[pin]
    debugfs: Mutex<Option<DebugDir>>,
}

// SAFETY: the embedded core structures are designed for concurrent use under the core's own
// locking; our own state is atomic, locked, or in `ConnCell`s with the documented discipline.
unsafe impl Send for RdmaCtrl {}
// SAFETY: as above.
unsafe impl Sync for RdmaCtrl {}

/// Parses an address option into a socket address.
fn parse_addr(
    addr: &CStr,
    port: Option<&CStr>,
) -> Result<(bindings::__kernel_sockaddr_storage, Endpoint)> {
    let mut ss = bindings::__kernel_sockaddr_storage::default();
    // SAFETY: valid NUL-terminated strings (or null port) and an output buffer of the right
    // type.
    to_result(unsafe {
        bindings::rsrdma_parse_addr(
            addr.as_char_ptr(),
            port.map_or(core::ptr::null(), |p| p.as_char_ptr()),
            &mut ss,
        )
    })?;
    // SAFETY: the storage is plain bytes, all of them initialized (zeroed by `default`, then
    // filled in by the parser), viewed for its own size while borrowed.
    let bytes = unsafe {
        core::slice::from_raw_parts(
            core::ptr::from_ref(&ss).cast::<u8>(),
            core::mem::size_of_val(&ss),
        )
    };
    // The parser only gives IPv4 and IPv6 addresses.
    let shown = Endpoint::from_sockaddr(bytes).ok_or(EINVAL)?;
    Ok((ss, shown))
}

impl RdmaCtrl {
    /// The transport's controller of a core controller handed to one of our callbacks.
    ///
    /// # Safety
    ///
    /// `nctrl` must be the `nvme_ctrl` embedded in a live `RdmaCtrl`.
    pub(crate) unsafe fn from_nvme<'a>(nctrl: *mut bindings::nvme_ctrl) -> &'a RdmaCtrl {
        // SAFETY: per the contract, `nctrl` is the `nctrl` field of a live `RdmaCtrl`.
        unsafe { &*kernel::container_of!(nctrl, RdmaCtrl, nctrl) }
    }

    pub(crate) fn nvme(&self) -> Ctrl {
        // SAFETY: initialized by `nvme_init_ctrl` in `create` before any use, alive with `self`.
        unsafe { Ctrl::from_raw(self.nctrl.get()) }
    }

    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    pub(crate) fn stats(&self) -> &CtrlStats {
        &self.stats
    }

    /// RKEY of the pool's current registration, 0 when not registered.
    pub(crate) fn rkey(&self) -> u32 {
        self.rkey.load(Ordering::Relaxed)
    }

    pub(crate) fn queue(&self, qid: u16) -> &Queue {
        &self.queues[qid as usize]
    }

    pub(crate) fn try_queue(&self, qid: u16) -> Option<&Queue> {
        self.queues.get(qid as usize).map(|q| &**q)
    }

    pub(crate) fn addr(&self) -> &bindings::__kernel_sockaddr_storage {
        &self.addr
    }

    pub(crate) fn src_addr(&self) -> Option<&bindings::__kernel_sockaddr_storage> {
        self.src_addr.as_ref()
    }

    pub(crate) fn io_tag_set(&self) -> &TagSet<Request> {
        &self.tag_set
    }

    /// The tag set of queue `qid`'s requests.
    pub(crate) fn tag_set_of(&self, qid: u16) -> &TagSet<Request> {
        if qid == 0 {
            &self.admin_tag_set
        } else {
            &self.tag_set
        }
    }

    /// The blk-mq tags of queue `qid`, if its tag set is ready (see `TagSet::ready`) and has
    /// that hardware queue (it may have fewer than the queues connected while a reconnect
    /// changes their number). Valid, and so are the requests in them, until `rcu` is dropped.
    pub(crate) fn tags<'a>(&'a self, qid: u16, rcu: &'a RcuReadGuard) -> Option<Tags<'a, Request>> {
        let set = self.tag_set_of(qid).ready(rcu)?;
        set.tags(u32::from(qid.saturating_sub(1)))
    }

    /// Sets the number of the I/O tag set's hardware queues (frozen by the caller).
    ///
    /// `blk_mq_update_nr_hw_queues` reallocates the array of tags and frees the tags and
    /// requests of the hardware queues it drops. Their readers, a response received meanwhile
    /// (completion context) and the abort work's walk (`Queue::lost_while_connecting`), find
    /// the tag set not ready and do not look, and a reader that began before is waited for
    /// (`TagSet::update_nr_hw_queues`). With every I/O request frozen, no command is in flight on the I/O
    /// queues: any such response is a stray one, and the walk has nothing to abort. Only the
    /// reconnect work calls this, so two changes never overlap.
    fn update_hw_queues(&self, count: u32) {
        self.tag_set.update_nr_hw_queues(count);
    }

    /// Removes the admin or the I/O tag set, after waiting for its readers (see `TagSet`).
    fn remove_tag_set(&self, io: bool) {
        if io {
            self.tag_set.remove();
        } else {
            self.admin_tag_set.remove();
        }
    }

    pub(crate) fn io_queues(&self) -> [u32; HCTX_MAX_TYPES] {
        core::array::from_fn(|i| self.io_queues[i].load(Ordering::Relaxed))
    }

    /// Whether `qid` is a poll queue (after the default and read queues).
    pub(crate) fn is_poll_queue(&self, qid: u16) -> bool {
        let q = self.io_queues();
        qid as u32
            > q[bindings::hctx_type_HCTX_TYPE_DEFAULT as usize]
                + q[bindings::hctx_type_HCTX_TYPE_READ as usize]
    }

    /// The numbering of commands sent on another I/O queue than their own, if the default and
    /// read queues are more than one and their identifiers fit (see `proto::spread`).
    pub(crate) fn spread(&self) -> Option<Spread> {
        let q = self.io_queues();
        let n = q[bindings::hctx_type_HCTX_TYPE_DEFAULT as usize]
            + q[bindings::hctx_type_HCTX_TYPE_READ as usize];
        let stride = self.try_queue(1)?.ring_depth();
        Spread::new(
            u16::try_from(stride).ok()?,
            u16::try_from(n.min(self.queues.len() as u32 - 1)).ok()?,
        )
    }

    /// The next I/O queue in turn for a spread command.
    pub(crate) fn next_spread_queue(&self, sp: Spread) -> Option<&Queue> {
        let n = self.spread_next.fetch_add(1, Ordering::Relaxed) % u32::from(sp.queues);
        self.try_queue(n as u16 + 1)
    }

    /// Whether a write of `len` bytes on queue `qid` goes in the command capsule.
    pub(crate) fn inline_fits(&self, qid: u16, len: u32) -> bool {
        qid != 0
            && self.use_inline.load(Ordering::Relaxed)
            && len <= self.inline_size.load(Ordering::Relaxed)
    }

    /// The pool registration of the current connection.
    ///
    /// # Safety
    ///
    /// As for [`ConnCell::get`]: called on the I/O path of a connected queue, or by the
    /// controller's set-up/teardown work.
    pub(crate) unsafe fn reg(&self) -> Option<&PoolReg> {
        // SAFETY: per the contract.
        unsafe { self.conn.get() }.and_then(|c| c.reg.as_ref())
    }

    /// The device the controller is connected through, if any.
    pub(crate) fn device(&self) -> Option<Device> {
        // SAFETY: `conn_dev` names the device of the installed connection until it has been
        // released, and the removal of that device waits for the release (`device_removed`).
        unsafe { Device::from_raw(self.conn_dev.load(Ordering::Acquire)) }
    }

    /// Whether the controller is connected through port `port` of `dev` (a connection being
    /// replaced meanwhile at worst makes the answer stale).
    pub(crate) fn uses_port(&self, dev: Device, port: u32) -> bool {
        self.device() == Some(dev) && self.conn_port.load(Ordering::Relaxed) == port
    }

    pub(crate) fn device_blocked(&self, dev: Device) -> bool {
        self.blocked_dev.load(Ordering::Acquire) == dev.as_ptr()
    }

    /// Keeps the controller off `dev`, which is being removed.
    pub(crate) fn block_device(&self, dev: Device) {
        self.blocked_dev.store(dev.as_ptr(), Ordering::Release);
    }

    /// Lifts the block of a device that was removed, if `dev` (just added) has its address.
    pub(crate) fn unblock_device(&self, dev: Device) {
        let _ = self.blocked_dev.compare_exchange(
            dev.as_ptr(),
            core::ptr::null_mut(),
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }

    /// The protection domain for queue `qid` on `dev`: the admin queue creates it, the I/O
    /// queues must resolve to the same device. Called from the set-up work only.
    pub(crate) fn pd_for(&self, qid: u16, dev: Device, port: u32) -> Result<&Pd> {
        if self.device_blocked(dev) {
            log_info!(
                self.nvme().as_ptr(),
                "RDMA device {} is being removed, not using it",
                dev.name()
            );
            return Err(ENODEV);
        }
        // SAFETY: set-up work context (see `ConnCell`).
        if let Some(c) = unsafe { self.conn.get() } {
            let cur = self.device().ok_or(errno::ENOTCONN())?;
            if cur != dev {
                log_err!(
                    self.nvme().as_ptr(),
                    "queue {} resolved to {}, not {}: all queues must use one RDMA device",
                    qid,
                    dev.name(),
                    cur.name()
                );
                return Err(EINVAL);
            }
            return Ok(&c.pd);
        }
        if qid != 0 {
            return Err(errno::ENOTCONN());
        }
        if !dev.has_mem_mgt_extensions() {
            log_err!(
                self.nvme().as_ptr(),
                "RDMA device {} has no memory registration work requests",
                dev.name()
            );
            return Err(errno::EOPNOTSUPP());
        }
        let pd = Pd::new(dev)?;
        self.stats
            .device
            .lock()
            .set(format_args!("{} port {}", dev.name(), port));
        // SAFETY: set-up work, no connection installed: nothing else uses the cell.
        unsafe { self.conn.replace(Some(CtrlConn { reg: None, pd })) };
        self.conn_port.store(port, Ordering::Relaxed);
        self.released.reinit();
        self.conn_dev.store(dev.as_ptr(), Ordering::Release);
        // SAFETY: as above.
        Ok(&unsafe { self.conn.get() }.ok_or(ENOMEM)?.pd)
    }

    // --- Creation ---------------------------------------------------------------------------

    /// Creates and connects a controller for `opts` (`create_ctrl` of the transport).
    pub(crate) fn create(
        dev: *mut bindings::device,
        opts: Options,
        ops: *const bindings::nvme_ctrl_ops,
        debugfs_root: *mut bindings::dentry,
    ) -> Result<&'static RdmaCtrl> {
        crate::options::validate(opts)?;
        opts.default_trsvcid(c_str!("4420"))?;
        let cpus = kernel_num_online_cpus();
        opts.default_write_queues(crate::proto::spread::write_queues(
            opts.nr_io_queues().min(cpus),
            crate::glue::min_io_queues(),
        ));
        crate::options::fit_queues(opts, cpus)?;
        let traddr = opts.traddr().ok_or(EINVAL)?;
        let (addr, endpoint) = parse_addr(traddr, opts.trsvcid()).inspect_err(|_| {
            log_err!(
                core::ptr::null(),
                "traddr: malformed address {}:{}",
                traddr,
                opts.trsvcid().unwrap_or(c_str!(""))
            );
        })?;
        if endpoint.port() == 0 {
            log_err!(
                core::ptr::null(),
                "trsvcid: port 0 is not a valid NVMe/RDMA port"
            );
            return Err(EINVAL);
        }
        let src_addr = match opts.host_traddr() {
            Some(h) => Some(parse_addr(h, None).map(|(ss, _)| ss).inspect_err(|_| {
                log_err!(
                    core::ptr::null(),
                    "host_traddr: malformed source address {}",
                    h
                );
            })?),
            None => None,
        };
        if !opts.duplicate_connect() && crate::registration::existing_controller(opts) {
            log_err!(
                core::ptr::null(),
                "already connected to {} at {} (use duplicate_connect to force)",
                opts.subsysnqn().unwrap_or(c_str!("")),
                endpoint
            );
            return Err(errno::EALREADY());
        }
        let policy = Self::policy_of(opts).map_err(|m| {
            log_err!(core::ptr::null(), "reconnect_delay/ctrl_loss_tmo: {}", m);
            EINVAL
        })?;

        let io_depth = (opts.queue_size() as u32).min(MAX_QUEUE_SIZE);
        let nr_io = opts.total_io_queues(cpus);
        let slot_size = crate::glue::slot_bytes();
        // The buddy allocator of the large area spans at most `BUDDY_MAX_AREA`.
        let io_large = crate::glue::io_pool_bytes().clamp(u64::from(MAX_IO_BYTES), BUDDY_MAX_AREA);
        let cfg = PoolConfig {
            nr_io_queues: nr_io as u16,
            io_depth,
            slot_size,
            io_large,
            numa_node: -1,
        };
        let pool = Pool::new(&cfg)?;

        let ctrl = KBox::try_pin_init(
            try_pin_init!(&this in RdmaCtrl {
                // SAFETY: zeroed, as the core expects before `nvme_init_ctrl` (the C transports
                // kzalloc it), plus the fields a transport sets first.
                nctrl <- Opaque::ffi_init(|n: *mut bindings::nvme_ctrl| unsafe {
                    n.write_bytes(0, 1);
                    (*n).opts = opts.as_ptr();
                    (*n).queue_count = nr_io + 1;
                    (*n).sqsize = (io_depth - 1) as u16;
                    (*n).kato = opts.kato();
                }),
                admin_tag_set <- TagSet::new(SetKind::Admin),
                // Default and read maps, and the poll map if there are poll queues.
                tag_set <- TagSet::new(SetKind::Io {
                    nr_maps: if opts.nr_poll_queues() > 0 { HCTX_MAX_TYPES as u32 } else { 2 },
                }),
                // SAFETY: the work functions reach only the controller, which cancels or
                // flushes its items before it is freed (`stop_ctrl`, `delete_ctrl`).
                err_work <- unsafe { Work::new(error_recovery_work,
                    bindings::rsrdma_work_class_RSRDMA_WORK_ERROR_RECOVERY) },
                // SAFETY: as above.
                reconnect_work <- unsafe { DelayedWork::new(reconnect_work,
                    bindings::rsrdma_work_class_RSRDMA_WORK_RECONNECT) },
                reconnect_gate <- new_irq_lock!(false, "rsrdma_ctrl::reconnect_gate"),
                // SAFETY: as above.
                abort_work <- unsafe { Work::new(abort_work,
                    bindings::rsrdma_work_class_RSRDMA_WORK_ABORT) },
                queues: {
                    let mut v = KVec::with_capacity(nr_io as usize + 1, GFP_KERNEL)?;
                    for qid in 0..=nr_io as u16 {
                        let depth = if qid == 0 { ADMIN_DEPTH } else { io_depth };
                        v.push(KBox::pin_init(Queue::new(this.as_ptr(), qid, depth)?, GFP_KERNEL)?, GFP_KERNEL)?;
                    }
                    v
                },
                conn: ConnCell::new(),
                pool <- pool,
                addr,
                src_addr,
                io_queues: Default::default(),
                spread_next: AtomicU32::new(0),
                use_inline: AtomicBool::new(false),
                inline_size: AtomicU32::new(0),
                slot_size,
                blocked_dev: AtomicPtr::new(core::ptr::null_mut()),
                conn_dev: AtomicPtr::new(core::ptr::null_mut()),
                conn_port: AtomicU32::new(0),
                released <- Completion::new(),
                listed: AtomicBool::new(false),
                recovery <- kernel::new_mutex!(Recovery { policy, current: None, lost_at: None, last_rkey: 0 }),
                reconnects: AtomicU64::new(0),
                stats <- CtrlStats::new(),
                rkey: AtomicU32::new(0),
                debugfs <- kernel::new_mutex!(None),
            }? Error),
            GFP_KERNEL,
        )?;

        // SAFETY: before `nvme_init_ctrl`, as the core expects from transports. `reset_work`
        // reaches only the controller; the core's deletion flushes the item before freeing it.
        unsafe { ctrl.nvme().init_reset_work(reset_work) };
        // SAFETY: `nctrl` is zeroed apart from the fields set above; `ops` is static.
        to_result(unsafe { bindings::nvme_init_ctrl(ctrl.nctrl.get(), dev, ops, 0) })?;
        // From here the core owns the memory: it frees it through `free_ctrl` on the last put.
        // SAFETY: the box is not moved or freed until `free_ctrl`.
        let ctrl: &'static RdmaCtrl = unsafe { &*KBox::into_raw(Pin::into_inner_unchecked(ctrl)) };
        let n = ctrl.nvme();
        // SAFETY: initialized controller.
        if let Err(e) = to_result(unsafe { bindings::nvme_add_ctrl(n.as_ptr()) }) {
            n.put();
            return Err(e);
        }
        // At once, as the C driver does: the controller's sysfs files exist now, and a reset
        // asked for through them is refused once it is CONNECTING, not while it is NEW.
        if !n.change_state(State::Connecting) {
            log_warn!(n.as_ptr(), "could not move a new controller to CONNECTING");
        }
        // Before the controller can go LIVE, after which it may be deleted at any time.
        // SAFETY: the directory is removed in `delete_ctrl` (or below), before the controller
        // is freed.
        *ctrl.debugfs.lock() = Some(unsafe { DebugDir::new(debugfs_root, n.name(), ctrl) });
        if let Err(f) = ctrl.setup(true) {
            drop(ctrl.debugfs.lock().take());
            n.uninit();
            n.put();
            return Err(f.errno);
        }
        log_info!(
            n.as_ptr(),
            "new ctrl: NQN \"{}\", addr {}, hostnqn: {}, {} I/O queues of depth {}, pool {} KiB",
            n.subsysnqn(),
            endpoint,
            opts.hostnqn().unwrap_or(c_str!("")),
            n.queue_count() - 1,
            u32::from(n.sqsize()) + 1,
            ctrl.pool.total_size() >> 10
        );
        Ok(ctrl)
    }

    /// The reconnect policy of the options as they are now (sysfs changes them). The
    /// core keeps ctrl_loss_tmo as max_reconnects attempts of reconnect_delay.
    fn policy_of(opts: Options) -> Result<Policy, &'static str> {
        let delay = opts.reconnect_delay() as i32;
        let ctrl_loss_tmo = match opts.max_reconnects() {
            -1 => -1,
            n => n.saturating_mul(delay),
        };
        Policy::from_opts(delay, ctrl_loss_tmo)
    }

    // --- Set-up and teardown ------------------------------------------------------------------

    /// Connects the controller: admin queue, pool registration, controller enable and identify,
    /// I/O queues, LIVE. On failure everything set up here is released again.
    fn setup(&self, new: bool) -> Result<(), Failure> {
        // Connections lost while their port was down left CM ids behind; the port may be
        // back, and their DREQs tell the target to drop the old association now.
        crate::registration::release_parked_active();
        let res = self.configure_admin(new).and_then(|()| {
            self.setup_after_admin(new).inspect_err(|_| {
                self.nvme().stop_keep_alive();
                self.teardown_admin(new);
            })
        });
        if res.is_err() {
            // The attempt's queues are stopped: a failure they reported is handled or moot.
            // Cancelled, not flushed: this may run on the abort work's own workqueue (a
            // reconnect), where waiting for a queued item could stall its rescuer.
            self.abort_work.cancel_sync();
        }
        res
    }

    fn setup_after_admin(&self, new: bool) -> Result<(), Failure> {
        let mut n = self.nvme();
        let nptr = n.as_ptr();
        if n.icdoff() != 0 {
            log_err!(nptr, "icdoff is not supported");
            return Err(errno::EOPNOTSUPP().into());
        }
        if n.sgls() & (1 << 2) == 0 {
            log_err!(
                nptr,
                "the controller does not support keyed SGLs, which NVMe/RDMA requires"
            );
            return Err(errno::EOPNOTSUPP().into());
        }
        let opts = n.opts();
        if opts.queue_size() > usize::from(n.sqsize()) + 1 {
            log_warn!(
                nptr,
                "queue_size {} > ctrl sqsize {}, clamping down",
                opts.queue_size(),
                u32::from(n.sqsize()) + 1
            );
        }
        if u32::from(n.sqsize()) + 1 > MAX_QUEUE_SIZE {
            log_warn!(
                nptr,
                "ctrl sqsize {} > max queue size {}, clamping down",
                u32::from(n.sqsize()) + 1,
                MAX_QUEUE_SIZE
            );
            n.set_sqsize((MAX_QUEUE_SIZE - 1) as u16);
        }
        if n.maxcmd() != 0 && n.sqsize() + 1 > n.maxcmd() {
            log_warn!(
                nptr,
                "sqsize {} > ctrl maxcmd {}, clamping down",
                u32::from(n.sqsize()) + 1,
                n.maxcmd()
            );
            n.set_sqsize(n.maxcmd() - 1);
        }
        let inline = n.sgls() & (1 << 20) != 0;
        let inline_size = n
            .ioccsz_bytes()
            .saturating_sub(crate::proto::capsule::SQE_SIZE as u32)
            .min(self.slot_size);
        self.use_inline
            .store(inline && inline_size > 0, Ordering::Relaxed);
        self.inline_size.store(inline_size, Ordering::Relaxed);

        if n.queue_count() > 1 {
            self.configure_io(new)?;
        }
        if !n.change_state(State::Live) {
            // Only allowed if deletion started meanwhile (not for a new controller).
            log_info!(
                nptr,
                "controller state changed during set-up ({:?}), not going live",
                n.state()
            );
            if n.queue_count() > 1 {
                self.teardown_io(new);
            }
            return Err(EINVAL.into());
        }
        n.start();
        Ok(())
    }

    fn configure_admin(&self, new: bool) -> Result<(), Failure> {
        let mut n = self.nvme();
        let admin = self.queue(0);
        if let Err(e) = admin.connect(ADMIN_DEPTH) {
            self.release_conn();
            return Err(e.into());
        }
        let res = (|| -> Result<(), Failure> {
            self.register_pool()?;
            if let Some(dev) = self.device() {
                n.set_numa_node(dev.numa_node());
            }
            if new {
                // SAFETY: the admin ops initialize each request's PDU, a `Request`.
                status_result(unsafe { self.admin_tag_set.alloc(n, &ADMIN_MQ_OPS) })?;
            }
            Ok(())
        })();
        if let Err(e) = res {
            admin.stop();
            admin.free(false);
            self.release_conn();
            return Err(e);
        }

        let res = (|| -> Result<(), Failure> {
            self.start_queue(0)?;
            let enabled = n.enable();
            if let Err(e) = enabled {
                admin.stop();
                n.cancel_admin_tagset();
                return Err(e);
            }
            // The transport's own limits; the core clamps them to the controller's MDTS.
            n.set_limits(
                MAX_IO_BYTES >> 9,
                MAX_IO_BYTES / kernel::page::PAGE_SIZE as u32 + 1,
            );
            n.unquiesce_admin();
            if let Err(e) = n.init_finish() {
                n.quiesce_admin();
                n.sync_admin_queue();
                admin.stop();
                n.cancel_admin_tagset();
                return Err(e);
            }
            Ok(())
        })();
        if let Err(e) = res {
            if new {
                self.remove_tag_set(false);
            }
            admin.free(false);
            self.release_conn();
            return Err(e);
        }
        Ok(())
    }

    /// Maps and registers the pool on the admin queue's connection.
    fn register_pool(&self) -> Result {
        // SAFETY: set-up work context (see `ConnCell`).
        let c = unsafe { self.conn.get() }.ok_or(errno::ENOTCONN())?;
        let reg = self
            .pool
            .map(self.device().ok_or(errno::ENOTCONN())?, &c.pd)?;
        // Installed before its registration request is posted: should the request not
        // complete, the set-up's failure path drains the admin QP before `release_conn` drops
        // the region and its mapping.
        // SAFETY: set-up work; the connection is ours alone until the queues go live.
        let mut c = unsafe { self.conn.replace(None) }.ok_or(errno::ENOTCONN())?;
        c.reg = Some(reg);
        // SAFETY: as above.
        let c = unsafe { self.conn.replace(Some(c)) };
        debug_assert!(c.is_none());
        // SAFETY: as above.
        let reg = unsafe { self.conn.get() }
            .and_then(|c| c.reg.as_ref())
            .ok_or(errno::ENOTCONN())?;
        self.queue(0).register_pool(reg)?;
        let rkey = reg.mr().rkey();
        let (iova, len) = (reg.mr().iova(), reg.mr().length());
        let mut rec = self.recovery.lock();
        if rec.last_rkey != 0 && rec.last_rkey != rkey {
            log_info!(
                self.nvme().as_ptr(),
                "pool re-registered: rkey {:#x} -> {:#x}",
                rec.last_rkey,
                rkey
            );
        }
        rec.last_rkey = rkey;
        drop(rec);
        self.rkey.store(rkey, Ordering::Relaxed);
        dbg_event!(
            Pool,
            self.nvme().as_ptr(),
            "registered {} KiB at iova {:#x} length {} with rkey {:#x}",
            self.pool.total_size() >> 10,
            iova,
            len,
            rkey
        );
        Ok(())
    }

    /// Deregisters the pool (invalidating its RKEY) and releases the protection domain.
    fn release_conn(&self) {
        // SAFETY: teardown work: every queue was stopped and freed before.
        let Some(c) = (unsafe { self.conn.replace(None) }) else {
            return;
        };
        if let Some(reg) = &c.reg {
            dbg_event!(
                Pool,
                self.nvme().as_ptr(),
                "invalidating rkey {:#x} (MR deregistered)",
                reg.mr().rkey()
            );
        }
        drop(c);
        self.conn_dev
            .store(core::ptr::null_mut(), Ordering::Release);
        self.released.complete();
    }

    /// Sends the Fabrics Connect of queue `qid` and marks it live.
    fn start_queue(&self, qid: u16) -> Result<(), Failure> {
        let queue = self.queue(qid);
        queue.set_started();
        let res = self.nvme().connect_queue(qid);
        match res {
            Ok(()) => queue.set_live(),
            Err(f) => {
                queue.stop();
                log_info!(
                    self.nvme().as_ptr(),
                    "failed to connect queue: {} ({:?}{})",
                    qid,
                    f.errno,
                    if f.dnr { ", do not retry" } else { "" }
                );
            }
        }
        res
    }

    fn start_io_queues(&self, first: u16, last: u16) -> Result<(), Failure> {
        for qid in first..last {
            if let Err(e) = self.start_queue(qid) {
                for q in (first..qid).rev() {
                    self.queue(q).stop();
                }
                return Err(e);
            }
        }
        Ok(())
    }

    fn free_io_queues(&self) {
        for q in self.queues.iter().skip(1) {
            q.free(false);
        }
    }

    fn stop_io_queues(&self) {
        for q in self.queues.iter().skip(1) {
            q.stop();
        }
    }

    fn configure_io(&self, new: bool) -> Result<(), Failure> {
        let mut n = self.nvme();
        let nptr = n.as_ptr();
        let opts = n.opts();
        let wanted = opts.total_io_queues(kernel_num_online_cpus());
        let granted = n.negotiate_queue_count(wanted)?;
        if granted == 0 {
            log_err!(nptr, "unable to set any I/O queues");
            return Err(ENOMEM.into());
        }
        let count = granted.min(self.queues.len() as u32 - 1);
        n.set_queue_count(count + 1);
        log_info!(nptr, "creating {} I/O queues.", count);
        let mut io_queues = [0u32; HCTX_MAX_TYPES];
        // SAFETY: valid options and an array of HCTX_MAX_TYPES entries.
        unsafe { bindings::nvmf_set_io_queues(opts.as_ptr(), count, io_queues.as_mut_ptr()) };
        for (slot, v) in self.io_queues.iter().zip(io_queues) {
            slot.store(v, Ordering::Relaxed);
        }

        let depth = u32::from(n.sqsize()) + 1;
        for qid in 1..=count as u16 {
            if let Err(e) = self.queue(qid).connect(depth) {
                self.free_io_queues();
                return Err(e.into());
            }
        }

        if new {
            // SAFETY: the I/O ops initialize each request's PDU, a `Request`.
            if let Err(e) = status_result(unsafe { self.tag_set.alloc(n, &IO_MQ_OPS) }) {
                self.free_io_queues();
                return Err(e);
            }
        }

        // Start only the queues the tag set has hardware queues for: on reconnect their
        // number may have changed.
        let hw_queues = self.tag_set.nr_hw_queues().unwrap_or(0);
        let nr_queues = (hw_queues + 1).min(n.queue_count()) as u16;
        let res = (|| -> Result<(), Failure> {
            self.start_io_queues(1, nr_queues)?;
            if !new {
                n.start_freeze();
                n.unquiesce_io();
                if !n.wait_freeze_timeout(FREEZE_TIMEOUT_MS) {
                    // Likely stuck: fail this attempt to be safe.
                    n.unfreeze();
                    return Err(ENODEV.into());
                }
                self.update_hw_queues(n.queue_count() - 1);
                n.unfreeze();
            }
            // If the number of queues grew, start the new ones now.
            let hw_queues = self.tag_set.nr_hw_queues().unwrap_or(0);
            self.start_io_queues(nr_queues, (hw_queues + 1).min(n.queue_count()) as u16)
        })();
        if let Err(e) = res {
            n.quiesce_io();
            n.sync_io_queues();
            self.stop_io_queues();
            n.cancel_tagset();
            if new {
                self.remove_tag_set(true);
            }
            self.free_io_queues();
            return Err(e);
        }
        Ok(())
    }

    fn teardown_admin(&self, remove: bool) {
        let n = self.nvme();
        n.quiesce_admin();
        n.sync_admin_queue();
        self.queue(0).stop();
        n.cancel_admin_tagset();
        if remove {
            n.unquiesce_admin();
            self.remove_tag_set(false);
        }
        // The async event request uses the admin queue.
        n.async_event_work().cancel_sync();
        self.queue(0).free(false);
        self.release_conn();
    }

    fn teardown_io(&self, remove: bool) {
        let n = self.nvme();
        if n.queue_count() <= 1 {
            return;
        }
        n.quiesce_io();
        n.sync_io_queues();
        self.stop_io_queues();
        n.cancel_tagset();
        if remove {
            n.unquiesce_io();
            self.remove_tag_set(true);
        }
        self.free_io_queues();
    }

    fn shutdown(&self, shutdown: bool) {
        let n = self.nvme();
        self.teardown_io(shutdown);
        n.quiesce_admin();
        // Only a connected admin queue can carry the shutdown property write.
        if self.queue(0).is_live() {
            n.disable(shutdown);
        }
        self.teardown_admin(shutdown);
    }

    // --- Error recovery and reconnect -----------------------------------------------------

    /// Starts error recovery (once: later calls while resetting are no-ops).
    pub(crate) fn error_recovery(&self, reason: fmt::Arguments<'_>) {
        let n = self.nvme();
        self.stats.error(reason);
        if !n.change_state(State::Resetting) {
            return;
        }
        log_warn!(n.as_ptr(), "starting error recovery: {}", reason);
        self.err_work.queue(Wq::Reset);
    }

    /// Queues the abort work (see `Queue::report_while_connecting`); any context.
    pub(crate) fn queue_abort(&self) {
        self.abort_work.queue(Wq::Nvme);
    }

    fn recover(&self) {
        let n = self.nvme();
        let start = Ktime::ktime_get();
        n.stop_keep_alive();
        n.async_event_work().flush();
        self.teardown_io(false);
        n.unquiesce_io();
        self.teardown_admin(false);
        n.unquiesce_admin();
        n.auth_stop();
        dbg_event!(
            Recovery,
            n.as_ptr(),
            "torn down in {} ms, in-flight I/O requeued",
            kernel::time::ktime_ms_delta(Ktime::ktime_get(), start)
        );

        if !n.change_state(State::Connecting) {
            // Deletion started meanwhile.
            return;
        }
        {
            let mut rec = self.recovery.lock();
            rec.current = Some(Reconnect::start(rec.policy, now_ms()));
            rec.lost_at = Some(start);
        }
        self.reconnect_or_remove(Outcome::First);
    }

    /// Schedules the next reconnect attempt, or deletes the controller when the policy gives up.
    fn reconnect_or_remove(&self, outcome: Outcome) {
        self.follow_policy(|r, now| r.next(now, outcome));
    }

    /// Schedules again the attempt decided last, which never ran (see `device_removed`).
    fn rearm_reconnect(&self) {
        self.follow_policy(Reconnect::again);
    }

    fn follow_policy(&self, decide: impl FnOnce(&mut Reconnect, u64) -> Decision) {
        let n = self.nvme();
        if n.state() != State::Connecting {
            return;
        }
        let decision = {
            let mut rec = self.recovery.lock();
            // The options as they are now: sysfs may have changed them since the connect. Its
            // store takes any `reconnect_delay`, 0 included, which the policy refuses: the last
            // good policy stays.
            let policy = Self::policy_of(n.opts()).unwrap_or_else(|m| {
                log_warn!(n.as_ptr(), "reconnect_delay/ctrl_loss_tmo ignored: {}", m);
                rec.policy
            });
            rec.policy = policy;
            let now = now_ms();
            let current = rec
                .current
                .get_or_insert_with(|| Reconnect::start(policy, now));
            current.set_policy(policy);
            decide(current, now)
        };
        match decision {
            Decision::AttemptNow => self.schedule_reconnect(0),
            Decision::AttemptIn(ms) => {
                log_info!(n.as_ptr(), "Reconnecting in {} ms...", ms);
                self.schedule_reconnect(ms.min(u64::from(u32::MAX)) as u32);
            }
            Decision::GiveUp(reason) => {
                log_warn!(
                    n.as_ptr(),
                    "giving up reconnecting: {}; removing controller",
                    reason.msg()
                );
                n.delete();
            }
        }
    }

    fn schedule_reconnect(&self, delay_ms: u32) {
        let stopped = self.reconnect_gate.lock();
        if !*stopped {
            self.reconnect_work.queue(Wq::Nvme, delay_ms);
        }
    }

    /// Brings a reconnect attempt that is waiting out its delay forward to now (its port or a
    /// device came back). Nothing else: a controller that is connecting in the reset work, or
    /// in an attempt already running, has no attempt waiting, and a second set-up must not run
    /// beside it.
    pub(crate) fn kick_reconnect(&self) {
        // In the policy too: the next attempt counts from this one, and a device removal
        // that cancels the kicked work before it runs queues it again for now (see
        // `device_removed`). An attempt already running was due before now: unchanged.
        if let Some(r) = self.recovery.lock().current.as_mut() {
            r.bring_forward(now_ms());
        }
        let stopped = self.reconnect_gate.lock();
        if !*stopped && self.reconnect_work.cancel() {
            self.reconnect_work.queue(Wq::Nvme, 0);
        }
    }

    fn reconnect(&self) {
        let mut n = self.nvme();
        // A kick (port or device back) may have queued this work again behind an attempt that
        // already succeeded, or deletion may have started.
        if n.state() != State::Connecting {
            return;
        }
        let attempt = self
            .recovery
            .lock()
            .current
            .as_ref()
            .map_or(0, |r| r.attempts());
        n.set_nr_reconnects(attempt as i32);
        match self.setup(false) {
            Ok(()) => {
                let mut rec = self.recovery.lock();
                let since = rec
                    .lost_at
                    .take()
                    .map_or(0, |t| kernel::time::ktime_ms_delta(Ktime::ktime_get(), t));
                rec.current = None;
                drop(rec);
                self.reconnects.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .last_reconnect_ms
                    .store(since.max(0) as u64, Ordering::Relaxed);
                n.set_nr_reconnects(0);
                log_info!(
                    n.as_ptr(),
                    "Successfully reconnected ({} attempts, {} ms after the connection was lost)",
                    attempt,
                    since
                );
            }
            Err(f) => {
                log_info!(
                    n.as_ptr(),
                    "Failed reconnect attempt {} ({:?}{})",
                    attempt,
                    f.errno,
                    if f.dnr { ", do not retry" } else { "" }
                );
                self.reconnect_or_remove(Outcome::Failed { dnr: f.dnr });
            }
        }
    }

    /// Releases everything the controller holds on RDMA device `dev`, which is going away, and
    /// keeps it reconnecting (through another device, or this one when it returns).
    pub(crate) fn device_removed(&self, dev: Device) {
        let n = self.nvme();
        self.block_device(dev);
        for _ in 0..8 {
            n.reset_work().flush();
            self.err_work.flush();
            self.reconnect_work.cancel_sync();
            match n.state() {
                State::Live if self.device() == Some(dev) => {
                    self.error_recovery(format_args!("RDMA device {} removed", dev.name()));
                }
                State::Live | State::New | State::Dead => return,
                State::Resetting => {}
                State::Connecting => {
                    // The cancel either took the next attempt off the queue before it ran,
                    // or waited for a running one, which could not queue its successor
                    // meanwhile. Either way the attempt decided last has not run: it is
                    // queued again for its time, and it will not use `dev`.
                    self.rearm_reconnect();
                    return;
                }
                State::Deleting | State::DeletingNoIo => {
                    n.delete_work().flush();
                    // `nvme disconnect` deletes in its own context, not in the delete work.
                    while self.device() == Some(dev) && !self.released.wait_ms(RELEASE_WAIT_MS) {
                        log_warn!(
                            n.as_ptr(),
                            "RDMA device {} removal: waiting for the controller's deletion to release it",
                            dev.name()
                        );
                    }
                    return;
                }
            }
        }
        log_err!(
            n.as_ptr(),
            "RDMA device {} removal: controller still busy",
            dev.name()
        );
    }
}

/// Milliseconds of the monotonic clock.
pub(crate) fn now_ms() -> u64 {
    Ktime::ktime_get().to_ms().max(0) as u64
}

fn kernel_num_online_cpus() -> u32 {
    // SAFETY: reads the online CPU count.
    unsafe { bindings::rsrdma_num_online_cpus() }
}

// --- Work items ---------------------------------------------------------------------------

/// Work function of `err_work`.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn error_recovery_work(work: *mut bindings::work_struct) {
    // SAFETY: `work` is the `err_work` of a live controller (work items are flushed before the
    // controller is freed, see `stop_ctrl`).
    let ctrl = unsafe { &*kernel::container_of!(work, RdmaCtrl, err_work) };
    ctrl.recover();
}

/// Work function of `abort_work`.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn abort_work(work: *mut bindings::work_struct) {
    // SAFETY: `work` is the `abort_work` of a live controller (cancelled after a failed set-up
    // and in `delete_ctrl`, before the controller is freed).
    let ctrl = unsafe { &*kernel::container_of!(work, RdmaCtrl, abort_work) };
    for queue in ctrl.queues.iter() {
        queue.abort_if_lost();
    }
}

/// Work function of `reconnect_work`.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn reconnect_work(work: *mut bindings::work_struct) {
    // SAFETY: `work` is the `work` member of the `reconnect_work` of a live controller, at
    // the item's address (see `DelayedWork`).
    let ctrl = unsafe { &*kernel::container_of!(work, RdmaCtrl, reconnect_work) };
    ctrl.reconnect();
}

/// Work function of the core's `reset_work` of our controllers.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn reset_work(work: *mut bindings::work_struct) {
    // SAFETY: `work` is the core's `reset_work` of the `nvme_ctrl` embedded in a live
    // controller.
    let ctrl = unsafe {
        RdmaCtrl::from_nvme(kernel::container_of!(work, bindings::nvme_ctrl, reset_work).cast_mut())
    };
    let n = ctrl.nvme();
    n.stop();
    ctrl.shutdown(false);
    if !n.change_state(State::Connecting) {
        log_warn!(
            n.as_ptr(),
            "reset: could not move to CONNECTING ({:?})",
            n.state()
        );
        return;
    }
    if let Err(f) = ctrl.setup(false) {
        log_info!(
            n.as_ptr(),
            "reset: reconnect failed ({:?}{})",
            f.errno,
            if f.dnr { ", do not retry" } else { "" }
        );
        {
            let mut rec = ctrl.recovery.lock();
            let policy = rec.policy;
            rec.current = Some(Reconnect::start(policy, now_ms()));
            rec.lost_at = Some(Ktime::ktime_get());
        }
        // As after a loss, the first attempt is made at once; unless this one, the reset's
        // own, failed for good.
        ctrl.reconnect_or_remove(if f.dnr {
            Outcome::Failed { dnr: true }
        } else {
            Outcome::First
        });
    }
}

// --- nvme_ctrl_ops ----------------------------------------------------------------------------

/// `nvme_ctrl_ops::free_ctrl`: the last reference to the controller is gone.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn free_ctrl(nctrl: *mut bindings::nvme_ctrl) {
    // SAFETY: the core frees one of our controllers; nothing uses it afterwards.
    let ctrl = unsafe { RdmaCtrl::from_nvme(nctrl) };
    let listed = ctrl.listed.load(Ordering::Acquire);
    if listed {
        crate::registration::unlist(ctrl);
        // SAFETY: after a successful creation the options are ours to free, as in C.
        unsafe { bindings::nvmf_free_options((*nctrl).opts) };
    }
    // SAFETY: allocated with `KBox::into_raw` in `create`; no connection is left (teardown
    // released it) and no work item is pending (`stop_ctrl`).
    drop(unsafe { KBox::from_raw(ctrl as *const RdmaCtrl as *mut RdmaCtrl) });
    if listed {
        // Module unload may go on once this returns.
        crate::registration::released();
    }
}

/// `nvme_ctrl_ops::submit_async_event`.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn submit_async_event(nctrl: *mut bindings::nvme_ctrl) {
    // SAFETY: a live controller of ours.
    unsafe { RdmaCtrl::from_nvme(nctrl) }
        .queue(0)
        .submit_async_event();
}

/// `nvme_ctrl_ops::delete_ctrl`: tear down for deletion.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn delete_ctrl(nctrl: *mut bindings::nvme_ctrl) {
    // SAFETY: a live controller of ours, being deleted by the core.
    let ctrl = unsafe { RdmaCtrl::from_nvme(nctrl) };
    // Waits for readers of the stats file.
    drop(ctrl.debugfs.lock().take());
    ctrl.shutdown(true);
    // Here rather than in `stop_ctrl`: only once every queue was stopped and freed can no
    // completion or CM event queue the abort work again (they need an established connection).
    ctrl.abort_work.cancel_sync();
}

/// `nvme_ctrl_ops::stop_ctrl`: no transport work may run afterwards.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn stop_ctrl(nctrl: *mut bindings::nvme_ctrl) {
    // SAFETY: a live controller of ours.
    let ctrl = unsafe { RdmaCtrl::from_nvme(nctrl) };
    // The core stops the controller for deletion, and the reset work for a reset (after which
    // it may reconnect). Once deleting, neither the error recovery flushed below nor a device
    // or port event arms the reconnect work after it was cancelled.
    if matches!(ctrl.nvme().state(), State::Deleting | State::DeletingNoIo) {
        *ctrl.reconnect_gate.lock() = true;
    }
    ctrl.err_work.flush();
    ctrl.reconnect_work.cancel_sync();
}

/// The controller operations, named after the transport.
pub(crate) fn ctrl_ops(
    name: &'static CStr,
    module: *mut bindings::module,
) -> bindings::nvme_ctrl_ops {
    bindings::nvme_ctrl_ops {
        name: name.as_char_ptr(),
        module,
        flags: bindings::NVME_F_FABRICS,
        reg_read32: Some(bindings::nvmf_reg_read32),
        reg_read64: Some(bindings::nvmf_reg_read64),
        reg_write32: Some(bindings::nvmf_reg_write32),
        subsystem_reset: Some(bindings::nvmf_subsystem_reset),
        free_ctrl: Some(free_ctrl),
        submit_async_event: Some(submit_async_event),
        delete_ctrl: Some(delete_ctrl),
        stop_ctrl: Some(stop_ctrl),
        get_address: Some(bindings::nvmf_get_address),
        ..Default::default()
    }
}
