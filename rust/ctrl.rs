// SPDX-License-Identifier: GPL-2.0

//! The controller: creation from connect options, set-up and teardown of its queues and of its
//! registered pool, error recovery and reconnection, and what the NVMe core and blk-mq call on
//! it.
//!
//! The sequence follows the C transport (drivers/nvme/host/rdma.c) where the core expects it;
//! what differs: one registered pool per controller instead of per-I/O memory registration,
//! every wait bounded, the first reconnect attempt immediate, and RDMA device removal turned
//! into a reconnect instead of a deletion.

use crate::area::Area;
use crate::clock::now_ms;
use crate::devices;
use crate::peer::PeerRegs;
use crate::pool::{self, MemReg, Pool, PoolConfig, PoolReg, MAX_IO_BYTES};
use crate::proto::addr::Endpoint;
use crate::proto::buddy::BUDDY_MAX_AREA;
use crate::proto::reconnect::{config_in_flux, Decision, Outcome, Policy, Reconnect};
use crate::proto::spread::Spread;
use crate::queue::{Queue, ADMIN_DEPTH};
use crate::request::{self, Request};
use crate::stats::CtrlStats;
use crate::wrap::debugfs::{Dir, ShowDir};
use crate::wrap::errno;
use crate::wrap::log::{dbg_event, log_err, log_info, log_warn, Prefix};
use crate::wrap::map_dev::MapDevice;
use crate::wrap::net::SockAddr;
use crate::wrap::nvme::{
    Controller, ControllerOps, CreateArgs, CtrlRef, Dispatched, Failure, NewCtrl, Options, OwnedRq,
    SetKind, State, TagSet, Tags, TimedOutRq, TimeoutAction, WorkId, HCTX_MAX_TYPES,
    HCTX_TYPE_DEFAULT, HCTX_TYPE_READ,
};
use crate::wrap::params;
use crate::wrap::peer_mem::Provider;
use crate::wrap::rdma::{Access, Device, DeviceId, Pd};
use crate::wrap::sync::{
    new_irq_lock, new_rcu_slot, Completion, IrqLock, Rcu, RcuReadGuard, RcuSlot, Retired,
};
use crate::wrap::work::Wq;
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use kernel::c_str;
use kernel::prelude::*;
use kernel::str::CStr;
use kernel::sync::{Arc, Mutex};
use kernel::time::Ktime;

/// Largest queue size the transport uses (as NVME_RDMA_MAX_QUEUE_SIZE).
const MAX_QUEUE_SIZE: u32 = 256;
/// How often device removal says that it still waits for a deletion to release the device.
const RELEASE_WAIT_MS: u32 = 10_000;
/// How long to wait for I/O to drain when the number of queues changes on reconnect.
const FREEZE_TIMEOUT_MS: u32 = 30_000;

/// The transport's controller, as the NVMe core's callbacks see it.
pub(crate) type Ctrl = Controller<RdmaCtrl>;

/// The work items of a controller.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum CtrlWork {
    /// Tears the connection down after an error and starts reconnecting (`nvme_reset_wq`).
    ErrorRecovery,
    /// One reconnect attempt, after its delay (`nvme_wq`).
    Reconnect,
    /// Aborts the commands in flight on queues whose connection ended or failed while
    /// connecting (see `Queue::report_while_connecting`).
    Abort,
}

impl WorkId for CtrlWork {
    const ALL: &'static [Self] = &[Self::ErrorRecovery, Self::Reconnect, Self::Abort];

    fn index(self) -> usize {
        self as usize
    }

    fn name(self) -> &'static CStr {
        match self {
            Self::ErrorRecovery => c_str!("(work_completion)rsrdma_error_recovery"),
            Self::Reconnect => c_str!("(work_completion)rsrdma_reconnect"),
            Self::Abort => c_str!("(work_completion)rsrdma_abort"),
        }
    }
}

/// The controller's protection domain on its current RDMA device.
struct CtrlConn {
    pd: Arc<Pd>,
}

/// Reconnect bookkeeping, used only from the controller's work items.
struct Recovery {
    policy: Policy,
    current: Option<Reconnect>,
    lost_at: Option<Ktime>,
    /// The pool's RKEYs of the last connection (by `pool::Dir`), for the log.
    last_rkeys: [u32; 2],
    /// The pool was registered on an earlier connection: the half a target reads holds what
    /// that association was sent.
    pool_exposed: bool,
}

/// An NVMe over RDMA controller: the transport's data of a [`Ctrl`].
#[pin_data]
pub(crate) struct RdmaCtrl {
    /// Arms the reconnect work; `true` once deletion stopped the controller, after which nothing
    /// arms it again.
    #[pin]
    reconnect_gate: IrqLock<bool>,
    /// Queue 0 is the admin queue. Dropped before `conn`, `reg` and `pool`.
    queues: KVec<Pin<KBox<Queue>>>,
    /// The registrations of the pool's halves on the current connection; dropped before
    /// `conn`.
    #[pin]
    reg: RcuSlot<PoolReg>,
    #[pin]
    conn: RcuSlot<CtrlConn>,
    #[pin]
    pool: Pool,
    /// The registered area processes map, if the controller has one (see `area`), shared with
    /// the subsystem's other controllers.
    area: Option<Arc<Area>>,
    /// The area's registrations with this controller's connections so far.
    area_registrations: AtomicU64,
    /// The area's registration on the current connection; dropped before `conn`.
    #[pin]
    area_reg: RcuSlot<MemReg>,
    /// The character device the area is mapped through, from set-up to deletion.
    #[pin]
    area_dev: Mutex<Option<Pin<KBox<MapDevice>>>>,
    /// The registrations of peer memory (see `peer`) on the current connection; dropped
    /// before `conn`.
    #[pin]
    peer_regs: RcuSlot<PeerRegs>,
    /// Connections of this controller that registered peer memory so far.
    peer_registrations: AtomicU64,
    addr: SockAddr,
    src_addr: Option<SockAddr>,
    io_queues: [AtomicU32; HCTX_MAX_TYPES],
    /// Turn of the next spread command (see `request::spread`).
    spread_next: AtomicU32,
    use_inline: AtomicBool,
    inline_size: AtomicU32,
    slot_size: u32,
    /// The device being removed that the controller stays off (`DeviceId::to_bits`).
    blocked_dev: AtomicUsize,
    /// The device and port of `conn`, set when it is installed and cleared once it is
    /// released: device and port events read them without the connection's lock.
    conn_dev: AtomicUsize,
    conn_port: AtomicU32,
    /// Signalled when `release_all` has released everything of a connection on its device.
    #[pin]
    released: Completion,
    #[pin]
    recovery: Mutex<Recovery>,
    reconnects: AtomicU64,
    #[pin]
    stats: CtrlStats,
    /// The controller's debugfs directory, which holds a reference to it until deletion.
    #[pin]
    debugfs: Mutex<Option<ShowDir<CtrlRef<RdmaCtrl>>>>,
}

/// Parses an address option into a socket address and the endpoint it shows as.
fn parse_addr(addr: &CStr, port: Option<&CStr>) -> Result<(SockAddr, Endpoint)> {
    let sa = SockAddr::parse(addr, port)?;
    // The parser only gives IPv4 and IPv6 addresses.
    let shown = Endpoint::from_sockaddr(sa.as_bytes()).ok_or(EINVAL)?;
    Ok((sa, shown))
}

impl RdmaCtrl {
    /// Creates and connects a controller for `args` (the transport's `create_ctrl`), named
    /// after transport `name`, with its debugfs directory in `debugfs_root`. `is_duplicate`
    /// says whether a controller with the options' association exists; `subsystem_area` gives
    /// the registered area of another controller of the options' subsystem, if any.
    pub(crate) fn create(
        args: &CreateArgs<'_>,
        name: &'static CStr,
        debugfs_root: &Arc<Dir>,
        is_duplicate: impl Fn(Options<'_>) -> bool,
        subsystem_area: impl Fn(Options<'_>) -> Option<Arc<Area>>,
    ) -> Result<NewCtrl<RdmaCtrl>> {
        let opts = args.opts();
        crate::options::validate(**opts)?;
        opts.default_trsvcid(c_str!("4420"))?;
        let cpus = params::num_online_cpus();
        opts.default_write_queues(crate::proto::spread::write_queues(
            opts.nr_io_queues().min(cpus),
            params::min_io_queues(),
        ));
        crate::options::fit_queues(opts, cpus)?;
        let traddr = opts.traddr().ok_or(EINVAL)?;
        let (addr, endpoint) = parse_addr(traddr, opts.trsvcid()).inspect_err(|_| {
            log_err!(
                Prefix::NONE,
                "traddr: malformed address {}:{}",
                traddr,
                opts.trsvcid().unwrap_or(c_str!(""))
            );
        })?;
        if endpoint.port() == 0 {
            log_err!(
                Prefix::NONE,
                "trsvcid: port 0 is not a valid NVMe/RDMA port"
            );
            return Err(EINVAL);
        }
        let src_addr = match opts.host_traddr() {
            Some(h) => Some(parse_addr(h, None).map(|(sa, _)| sa).inspect_err(|_| {
                log_err!(Prefix::NONE, "host_traddr: malformed source address {}", h);
            })?),
            None => None,
        };
        if !opts.duplicate_connect() && is_duplicate(**opts) {
            log_err!(
                Prefix::NONE,
                "already connected to {} at {} (use duplicate_connect to force)",
                opts.subsysnqn().unwrap_or(c_str!("")),
                endpoint
            );
            return Err(errno::EALREADY());
        }
        let policy = Self::policy_of(**opts).map_err(|m| {
            log_err!(Prefix::NONE, "reconnect_delay/ctrl_loss_tmo: {}", m);
            EINVAL
        })?;

        let io_depth = (opts.queue_size() as u32).min(MAX_QUEUE_SIZE);
        let nr_io = opts.total_io_queues(cpus);
        let slot_size = params::slot_bytes();
        // The buddy allocator of the large area spans at most `BUDDY_MAX_AREA`.
        let io_large = params::io_pool_bytes().clamp(u64::from(MAX_IO_BYTES), BUDDY_MAX_AREA);
        let cfg = PoolConfig {
            nr_io_queues: nr_io as u16,
            io_depth,
            slot_size,
            io_large,
            numa_node: -1,
        };
        let pool = Pool::new(&cfg)?;
        // Not for a controller without I/O queues (discovery).
        let area = match params::area_mib() {
            0 => None,
            _ if nr_io == 0 => None,
            mib => match subsystem_area(**opts) {
                Some(area) => Some(area),
                None => Some(Arc::new(Area::new(mib)?, GFP_KERNEL)?),
            },
        };
        let mut queues = KVec::with_capacity(nr_io as usize + 1, GFP_KERNEL)?;
        for qid in 0..=nr_io as u16 {
            let depth = if qid == 0 { ADMIN_DEPTH } else { io_depth };
            queues.push(
                KBox::pin_init(Queue::new(qid, depth), GFP_KERNEL)?,
                GFP_KERNEL,
            )?;
        }
        let data = try_pin_init!(RdmaCtrl {
            reconnect_gate <- new_irq_lock!(false, "rsrdma_ctrl::reconnect_gate"),
            queues,
            reg <- new_rcu_slot!("rsrdma_ctrl::reg"),
            conn <- new_rcu_slot!("rsrdma_ctrl::conn"),
            pool <- pool,
            area,
            area_registrations: AtomicU64::new(0),
            area_reg <- new_rcu_slot!("rsrdma_ctrl::area_reg"),
            area_dev <- kernel::new_mutex!(None),
            peer_regs <- new_rcu_slot!("rsrdma_ctrl::peer_regs"),
            peer_registrations: AtomicU64::new(0),
            addr,
            src_addr,
            io_queues: Default::default(),
            spread_next: AtomicU32::new(0),
            use_inline: AtomicBool::new(false),
            inline_size: AtomicU32::new(0),
            slot_size,
            blocked_dev: AtomicUsize::new(DeviceId::NONE.to_bits()),
            conn_dev: AtomicUsize::new(DeviceId::NONE.to_bits()),
            conn_port: AtomicU32::new(0),
            released <- Completion::new(),
            recovery <- kernel::new_mutex!(Recovery { policy, current: None, lost_at: None, last_rkeys: [0; 2], pool_exposed: false }),
            reconnects: AtomicU64::new(0),
            stats <- CtrlStats::new(),
            debugfs <- kernel::new_mutex!(None),
        }? Error);
        let ctrl = Controller::create(args, name, nr_io + 1, (io_depth - 1) as u16, data)?;
        let n = ctrl.core();
        // At once, as the C driver does: the controller's sysfs files exist now, and a reset
        // asked for through them is refused once it is CONNECTING, not while it is NEW.
        if !n.change_state(State::Connecting) {
            log_warn!(n, "could not move a new controller to CONNECTING");
        }
        // Before the controller can go LIVE, after which it may be deleted at any time.
        if let Some(r) = CtrlRef::get(&ctrl) {
            match ShowDir::new(n.name(), debugfs_root, c_str!("stats"), r) {
                Ok(dir) => *ctrl.debugfs.lock() = Some(dir),
                Err(e) => log_warn!(n, "no debugfs statistics ({:?})", e),
            }
        }
        if let Err(f) = ctrl.setup(true) {
            drop(ctrl.debugfs.lock().take());
            // Dropping the creation reference abandons the controller.
            drop(ctrl);
            return Err(f.errno);
        }
        log_info!(
            n,
            "new ctrl: NQN \"{}\", addr {}, hostnqn: {}, {} I/O queues of depth {}, pool {} KiB",
            n.subsysnqn(),
            endpoint,
            opts.hostnqn().unwrap_or(c_str!("")),
            n.queue_count() - 1,
            u32::from(n.sqsize()) + 1,
            ctrl.pool.total_size() >> 10
        );
        ctrl.publish_area();
        Ok(ctrl)
    }

    /// The reconnect policy of the options as they are now (sysfs changes them). The
    /// core keeps ctrl_loss_tmo as max_reconnects attempts of reconnect_delay.
    fn policy_of(opts: Options<'_>) -> Result<Policy, &'static str> {
        let delay = opts.reconnect_delay() as i32;
        let ctrl_loss_tmo = match opts.max_reconnects() {
            -1 => -1,
            n => n.saturating_mul(delay),
        };
        Policy::from_opts(delay, ctrl_loss_tmo)
    }

    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    pub(crate) fn area(&self) -> Option<&Arc<Area>> {
        self.area.as_ref()
    }

    /// The area's registrations with this controller's connections so far.
    pub(crate) fn area_registrations(&self) -> u64 {
        self.area_registrations.load(Ordering::Relaxed)
    }

    /// The area's registration on the current connection.
    pub(crate) fn area_reg<'a>(&'a self, rcu: &'a Rcu) -> Option<&'a MemReg> {
        self.area_reg.get(rcu)
    }

    /// The registrations of peer memory on the current connection.
    pub(crate) fn peer_regs<'a>(&'a self, rcu: &'a Rcu) -> Option<&'a PeerRegs> {
        self.peer_regs.get(rcu)
    }

    /// Connections of this controller that registered peer memory so far.
    pub(crate) fn peer_registrations(&self) -> u64 {
        self.peer_registrations.load(Ordering::Relaxed)
    }

    /// RKEY of the area's current registration, if registered on a connection.
    pub(crate) fn area_rkey(&self) -> Option<u32> {
        let rcu = RcuReadGuard::new();
        self.area_reg(&rcu).map(|r| r.region().rkey())
    }

    /// Calls `f` with the area's device, once it exists (until deletion).
    pub(crate) fn with_area_dev(&self, f: impl FnOnce(Option<&MapDevice>)) {
        let dev = self.area_dev.lock();
        f(dev.as_deref());
    }

    pub(crate) fn stats(&self) -> &CtrlStats {
        &self.stats
    }

    /// The number of successful reconnects.
    pub(crate) fn reconnects(&self) -> u64 {
        self.reconnects.load(Ordering::Relaxed)
    }

    /// The RKEYs of the pool's halves (by `pool::Dir`), if registered on a connection.
    pub(crate) fn pool_rkeys(&self) -> Option<[u32; 2]> {
        let rcu = RcuReadGuard::new();
        let reg = self.reg(&rcu)?;
        Some(reg.rkeys())
    }

    pub(crate) fn queue(&self, qid: u16) -> &Queue {
        &self.queues[qid as usize]
    }

    pub(crate) fn try_queue(&self, qid: u16) -> Option<&Queue> {
        self.queues.get(qid as usize).map(|q| &**q)
    }

    pub(crate) fn addr(&self) -> &SockAddr {
        &self.addr
    }

    pub(crate) fn src_addr(&self) -> Option<&SockAddr> {
        self.src_addr.as_ref()
    }

    /// The I/O queues of each kind (default, read, poll).
    pub(crate) fn io_queue_counts(&self) -> [u32; HCTX_MAX_TYPES] {
        core::array::from_fn(|i| self.io_queues[i].load(Ordering::Relaxed))
    }

    /// Whether `qid` is a poll queue (after the default and read queues).
    pub(crate) fn is_poll_queue(&self, qid: u16) -> bool {
        let q = self.io_queue_counts();
        qid as u32 > q[HCTX_TYPE_DEFAULT] + q[HCTX_TYPE_READ]
    }

    /// The numbering of commands sent on another I/O queue than their own, if the default and
    /// read queues are more than one and their identifiers fit (see `proto::spread`).
    pub(crate) fn spread(&self) -> Option<Spread> {
        let q = self.io_queue_counts();
        let n = q[HCTX_TYPE_DEFAULT] + q[HCTX_TYPE_READ];
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

    /// The pool's registrations on the current connection.
    pub(crate) fn reg<'a>(&'a self, rcu: &'a Rcu) -> Option<&'a PoolReg> {
        self.reg.get(rcu)
    }

    /// The device the controller is connected through, if any.
    pub(crate) fn device(&self) -> Option<DeviceId> {
        let id = DeviceId::from_bits(self.conn_dev.load(Ordering::Acquire));
        (id != DeviceId::NONE).then_some(id)
    }

    /// Whether the controller is connected through port `port` of `dev` (a connection being
    /// replaced meanwhile at worst makes the answer stale).
    pub(crate) fn uses_port(&self, dev: &Device, port: u32) -> bool {
        self.device() == Some(dev.id()) && self.conn_port.load(Ordering::Relaxed) == port
    }

    pub(crate) fn device_blocked(&self, dev: DeviceId) -> bool {
        self.blocked_dev.load(Ordering::Acquire) == dev.to_bits()
    }

    /// Keeps the controller off `dev`, which is being removed.
    pub(crate) fn block_device(&self, dev: DeviceId) {
        self.blocked_dev.store(dev.to_bits(), Ordering::Release);
    }

    /// Lifts the block of a device that was removed, if `dev` (just added) has its identity.
    pub(crate) fn unblock_device(&self, dev: &Device) {
        let _ = self.blocked_dev.compare_exchange(
            dev.id().to_bits(),
            DeviceId::NONE.to_bits(),
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }
}

impl Ctrl {
    /// `p`'s driver is about to release its peer memory: if this controller has it registered,
    /// the connection is reset, which lets it go (the next one leaves it out).
    pub(crate) fn peer_provider_leaving(&self, p: Provider) {
        let rcu = RcuReadGuard::new();
        let found = self
            .peer_regs(&rcu)
            .and_then(|regs| regs.iter().find(|r| r.mem().provider() == p))
            .map(|r| (r.mem().phys(), r.mem().len()));
        drop(rcu);
        if let Some((phys, len)) = found {
            self.error_recovery(format_args!(
                "device memory at {:#x} ({} MiB): provider going away",
                phys,
                len >> 20
            ));
        }
    }

    /// Creates the character device of the area, if the controller has one.
    fn publish_area(&self) {
        let Some(area) = &self.area else { return };
        let n = self.core();
        let name = n.name().to_str().unwrap_or("nvme");
        match area.publish(name) {
            Ok(dev) => {
                log_info!(
                    n,
                    "registered area: {} MiB, mapped through /dev/{}",
                    area.size() >> 20,
                    dev.path().to_str().unwrap_or("?")
                );
                *self.area_dev.lock() = Some(dev);
            }
            Err(e) => log_warn!(n, "registered area: no device ({:?})", e),
        }
    }

    /// The tag set of queue `qid`'s requests.
    pub(crate) fn tag_set_of(&self, qid: u16) -> &TagSet<Request> {
        if qid == 0 {
            self.admin_tag_set()
        } else {
            self.io_tag_set()
        }
    }

    /// The blk-mq tags of queue `qid`, if its tag set is ready (see `TagSet::ready`) and has
    /// that hardware queue (it may have fewer than the queues connected while a reconnect
    /// changes their number). Valid, and so are the requests in them, until `rcu` ends.
    pub(crate) fn tags<'a>(&'a self, qid: u16, rcu: &'a Rcu) -> Option<Tags<'a, Request>> {
        let set = self.tag_set_of(qid).ready(rcu)?;
        set.tags(u32::from(qid.saturating_sub(1)))
    }

    /// The protection domain for queue `qid` on `dev`: the admin queue creates it, the I/O
    /// queues must resolve to the same device. Called from the set-up work only.
    pub(crate) fn pd_for(&self, qid: u16, dev: &Device, port: u32) -> Result<Arc<Pd>> {
        let n = self.core();
        if self.device_blocked(dev.id()) {
            log_info!(
                n,
                "RDMA device {} is being removed, not using it",
                dev.name()
            );
            return Err(ENODEV);
        }
        let mut w = self.conn.write();
        if let Some(c) = w.get() {
            let cur = c.pd.device();
            if cur != dev {
                log_err!(
                    n,
                    "queue {} resolved to {}, not {}: all queues must use one RDMA device",
                    qid,
                    dev.name(),
                    cur.name()
                );
                return Err(EINVAL);
            }
            return Ok(c.pd.clone());
        }
        if qid != 0 {
            return Err(errno::ENOTCONN());
        }
        if !dev.has_mem_mgt_extensions() {
            log_err!(
                n,
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
        w.install(KBox::new(CtrlConn { pd: pd.clone() }, GFP_KERNEL)?)
            .map_err(|_| EBUSY)?;
        self.conn_port.store(port, Ordering::Relaxed);
        self.released.reinit();
        self.conn_dev.store(dev.id().to_bits(), Ordering::Release);
        Ok(pd)
    }

    // --- Set-up and teardown ------------------------------------------------------------------

    /// Connects the controller: admin queue, pool registration, controller enable and identify,
    /// I/O queues, LIVE. On failure everything set up here is released again.
    fn setup(&self, new: bool) -> Result<(), Failure> {
        // Connections lost while their port was down left CM ids behind; the port may be
        // back, and their DREQs tell the target to drop the old association now.
        devices::release_parked_active();
        let res = self.configure_admin(new).and_then(|()| {
            self.setup_after_admin(new).inspect_err(|_| {
                self.core().stop_keep_alive();
                self.teardown_admin(new);
            })
        });
        if res.is_err() {
            // The attempt's queues are stopped: a failure they reported is handled or moot.
            // Cancelled, not flushed: this may run on the abort work's own workqueue (a
            // reconnect), where waiting for a queued item could stall its rescuer.
            self.cancel_work_sync(CtrlWork::Abort);
        }
        res
    }

    fn setup_after_admin(&self, new: bool) -> Result<(), Failure> {
        let n = self.core();
        if n.icdoff() != 0 {
            log_err!(n, "icdoff is not supported");
            return Err(errno::EOPNOTSUPP().into());
        }
        if n.sgls() & (1 << 2) == 0 {
            log_err!(
                n,
                "the controller does not support keyed SGLs, which NVMe/RDMA requires"
            );
            return Err(errno::EOPNOTSUPP().into());
        }
        let opts = n.opts();
        if opts.queue_size() > usize::from(n.sqsize()) + 1 {
            log_warn!(
                n,
                "queue_size {} > ctrl sqsize {}, clamping down",
                opts.queue_size(),
                u32::from(n.sqsize()) + 1
            );
        }
        if u32::from(n.sqsize()) + 1 > MAX_QUEUE_SIZE {
            log_warn!(
                n,
                "ctrl sqsize {} > max queue size {}, clamping down",
                u32::from(n.sqsize()) + 1,
                MAX_QUEUE_SIZE
            );
            n.set_sqsize((MAX_QUEUE_SIZE - 1) as u16);
        }
        if n.maxcmd() != 0 && n.sqsize() + 1 > n.maxcmd() {
            log_warn!(
                n,
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
                n,
                "controller state changed during set-up ({:?}), not going live",
                n.state()
            );
            if n.queue_count() > 1 {
                self.teardown_io(new);
            }
            return Err(EINVAL.into());
        }
        if let Some(aq) = self.admin_queue() {
            aq.start_ctrl();
        }
        // A provider's driver that began unbinding after this set-up checked (in
        // `register_peer_mem`) found the controller still connecting, which cannot be reset:
        // now that it is live, reset it, or the unbind waits for its registration for good.
        // Under the writer's lock, not an RCU read-side section: the list of providers going
        // away has a mutex.
        let leaving = self
            .peer_regs
            .write()
            .get()
            .is_some_and(|r| r.any_leaving());
        if leaving {
            self.error_recovery(format_args!("device memory: a provider is going away"));
        }
        Ok(())
    }

    fn configure_admin(&self, new: bool) -> Result<(), Failure> {
        let n = self.core();
        let admin = self.queue(0);
        if let Err(e) = admin.connect(self, ADMIN_DEPTH) {
            self.release_all();
            return Err(e.into());
        }
        let aq = (|| {
            self.register_pool()?;
            if let Some(dev) = self.conn.write().get().map(|c| c.pd.device().numa_node()) {
                n.set_numa_node(dev);
            }
            if new {
                self.alloc_admin_queue()
            } else {
                self.admin_queue().ok_or(Failure::from(ENODEV))
            }
        })();
        let aq = match aq {
            Ok(aq) => aq,
            Err(e) => {
                admin.stop();
                admin.retire();
                self.release_all();
                return Err(e);
            }
        };

        let res = (|| -> Result<(), Failure> {
            self.start_queue(0, |_| aq.connect())?;
            if let Err(e) = aq.enable() {
                admin.stop();
                aq.cancel_requests();
                return Err(e);
            }
            // The transport's own limits; the core clamps them to the controller's MDTS.
            n.set_limits(
                MAX_IO_BYTES >> 9,
                MAX_IO_BYTES / kernel::page::PAGE_SIZE as u32 + 1,
            );
            aq.unquiesce();
            if let Err(e) = aq.init_finish() {
                aq.quiesce();
                aq.sync();
                admin.stop();
                aq.cancel_requests();
                return Err(e);
            }
            Ok(())
        })();
        if let Err(e) = res {
            if new {
                aq.remove();
            } else {
                drop(aq);
            }
            admin.retire();
            self.release_all();
            return Err(e);
        }
        Ok(())
    }

    /// Maps and registers the pool's halves on the admin queue's connection, each with only
    /// the access its direction needs. The half a target reads is cleared first if an earlier
    /// connection had it registered: the new key must not reach what the last association
    /// was sent.
    fn register_pool(&self) -> Result {
        let pd = self
            .conn
            .write()
            .get()
            .map(|c| c.pd.clone())
            .ok_or(errno::ENOTCONN())?;
        let (last, exposed) = {
            let rec = self.recovery.lock();
            (rec.last_rkeys, rec.pool_exposed)
        };
        // Under the slot's writer lock, with no earlier connection's registration installed:
        // no request holds a slice (teardown ended them all before releasing it), nothing but
        // this uses the pool's memory.
        let mut w = self.reg.write();
        if w.get().is_some() {
            return Err(EBUSY);
        }
        if exposed {
            let start = Ktime::ktime_get();
            self.pool.clear(pool::Dir::ToTarget);
            let us = (Ktime::ktime_get() - start).to_ns() / 1000;
            log_info!(
                self.core(),
                "pool: cleared the {} KiB half for {} before registering it again ({} us)",
                self.pool.half_size() >> 10,
                pool::Dir::ToTarget.as_str(),
                us
            );
        }
        let reg = self.pool.map(&pd)?;
        // Installed before the registration requests are posted, so that the I/O path finds
        // them once the queues go live; each request holds its region until it completes.
        w.install(KBox::new(reg, GFP_KERNEL)?).map_err(|_| EBUSY)?;
        self.recovery.lock().pool_exposed = true;
        let reg = w.get().ok_or(errno::ENOTCONN())?;
        for dir in pool::Dir::ALL {
            let region = reg.half(dir).region();
            self.queue(0)
                .register_region(self, region, dir.access(), "pool")?;
            let (rkey, iova, len) = (region.rkey(), region.iova(), region.length());
            let was = last[dir.index()];
            if was != 0 && was != rkey {
                log_info!(
                    self.core(),
                    "pool re-registered: {}: rkey {:#x} -> {:#x}",
                    dir.as_str(),
                    was,
                    rkey
                );
            }
            dbg_event!(
                Pool,
                self.core(),
                "registered {} KiB for {} at iova {:#x} length {} with rkey {:#x}",
                self.pool.half_size() >> 10,
                dir.as_str(),
                iova,
                len,
                rkey
            );
        }
        let rkeys = reg.rkeys();
        drop(w);
        self.recovery.lock().last_rkeys = rkeys;
        self.register_area(&pd)?;
        self.register_peer_mem(&pd)
    }

    /// Maps and registers the peer memory the connection's device reaches on the admin
    /// queue's connection. A provider that cannot be taken is left out, said in the log: I/O
    /// from its memory fails.
    fn register_peer_mem(&self, pd: &Arc<Pd>) -> Result {
        let (regs, skipped) = PeerRegs::map(pd)?;
        for s in skipped.iter() {
            log_warn!(
                self.core(),
                "device memory of {} ({} MiB): not registered with {} ({:?}); I/O from it fails with EREMOTEIO",
                s.mem.name(),
                s.mem.len() >> 20,
                pd.device().name(),
                s.err
            );
        }
        if regs.is_empty() {
            return Ok(());
        }
        let mut w = self.peer_regs.write();
        w.install(KBox::new(regs, GFP_KERNEL)?).map_err(|_| EBUSY)?;
        let regs = w.get().ok_or(errno::ENOTCONN())?;
        if regs.any_leaving() {
            // Its driver began releasing it while this connection was set up.
            log_info!(
                self.core(),
                "device memory: a provider is going away; setting up again without it"
            );
            return Err(EAGAIN);
        }
        // Counted per connection, as the area's: every provider's memory is registered anew with
        // each.
        let count = self.peer_registrations.fetch_add(1, Ordering::Relaxed) + 1;
        for r in regs.iter() {
            self.queue(0)
                .register_region(self, r.region(), Access::BOTH_WAYS, "device memory")?;
            log_info!(
                self.core(),
                "device memory of {}: {} MiB registered at iova {:#x} with rkey {:#x} (reached by {}, registration {})",
                r.mem().name(),
                r.mem().len() >> 20,
                r.region().iova(),
                r.region().rkey(),
                r.reach().as_str(),
                count
            );
        }
        Ok(())
    }

    /// Maps and registers the area, if any, on the admin queue's connection. A device that
    /// cannot take the area in one memory region (`EINVAL`) is connected without it: I/O from
    /// the area then goes through the pool, copied, as from any other memory. Other errors
    /// (out of memory) fail the connection, to be tried again.
    fn register_area(&self, pd: &Arc<Pd>) -> Result {
        let Some(area) = &self.area else {
            return Ok(());
        };
        let reg = match area.map(pd) {
            Ok(reg) => reg,
            Err(e) if e == EINVAL => {
                log_warn!(
                    self.core(),
                    "area: {} MiB in chunks of {} KiB not registered with {}: I/O from it goes through the pool, copied",
                    area.size() >> 20,
                    area.chunk_size() >> 10,
                    pd.device().name()
                );
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let mut w = self.area_reg.write();
        w.install(KBox::new(reg, GFP_KERNEL)?).map_err(|_| EBUSY)?;
        let reg = w.get().ok_or(errno::ENOTCONN())?;
        self.queue(0)
            .register_region(self, reg.region(), Access::BOTH_WAYS, "area")?;
        let count = self.area_registrations.fetch_add(1, Ordering::Relaxed) + 1;
        let region = reg.region();
        log_info!(
            self.core(),
            "area: {} MiB registered at iova {:#x} with rkey {:#x} (registration {})",
            area.size() >> 20,
            region.iova(),
            region.rkey(),
            count
        );
        Ok(())
    }

    /// Releases what teardown took out: the connections of the queues (retired before), the
    /// pool's registration (its RKEY invalidated) and the protection domain, after one RCU
    /// grace period for all of them.
    fn release_all(&self) {
        let reg = {
            let mut w = self.reg.write();
            if let Some(reg) = w.get() {
                for dir in pool::Dir::ALL {
                    dbg_event!(
                        Pool,
                        self.core(),
                        "invalidating rkey {:#x} (MR deregistered) of the half for {}",
                        reg.half(dir).region().rkey(),
                        dir.as_str()
                    );
                }
            }
            w.take()
        };
        let area_reg = {
            let mut w = self.area_reg.write();
            if let Some(reg) = w.get() {
                log_info!(
                    self.core(),
                    "area: invalidating rkey {:#x} (MR deregistered)",
                    reg.region().rkey()
                );
            }
            w.take()
        };
        let peer_regs = {
            let mut w = self.peer_regs.write();
            if let Some(regs) = w.get() {
                for r in regs.iter() {
                    log_info!(
                        self.core(),
                        "device memory of {}: invalidating rkey {:#x} (MR deregistered)",
                        r.mem().name(),
                        r.region().rkey()
                    );
                }
            }
            w.take()
        };
        let conn = self.conn.write().take();
        // The last taken out first: its grace period covers everything taken out before.
        let conn = conn.map(Retired::wait);
        let reg = reg.map(Retired::wait);
        let area_reg = area_reg.map(Retired::wait);
        let peer_regs = peer_regs.map(Retired::wait);
        for q in self.queues.iter() {
            q.release(self, false);
        }
        drop(reg);
        drop(area_reg);
        drop(peer_regs);
        let Some(conn) = conn else {
            return;
        };
        drop(conn);
        self.conn_dev
            .store(DeviceId::NONE.to_bits(), Ordering::Release);
        self.released.complete();
    }

    /// Sends the Fabrics Connect of queue `qid` with `connect` and marks it live.
    fn start_queue(
        &self,
        qid: u16,
        connect: impl FnOnce(u16) -> Result<(), Failure>,
    ) -> Result<(), Failure> {
        let queue = self.queue(qid);
        queue.set_started();
        let res = connect(qid).map_err(|f| Failure { connect: true, ..f });
        match res {
            Ok(()) => queue.set_live(),
            Err(f) => {
                queue.stop();
                log_info!(
                    self.core(),
                    "failed to connect queue: {} ({:?}{})",
                    qid,
                    f.errno,
                    if f.dnr { ", do not retry" } else { "" }
                );
            }
        }
        res
    }

    fn start_io_queues(
        &self,
        io: &crate::wrap::nvme::IoQueues<'_, RdmaCtrl>,
        first: u16,
        last: u16,
    ) -> Result<(), Failure> {
        for qid in first..last {
            if let Err(e) = self.start_queue(qid, |q| io.connect(q)) {
                for q in (first..qid).rev() {
                    self.queue(q).stop();
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Takes the connections of the I/O queues out, to be released with the admin queue's
    /// (see [`Ctrl::release_all`]).
    fn retire_io_queues(&self) {
        for q in self.queues.iter().skip(1) {
            q.retire();
        }
    }

    /// Releases the connections of the I/O queues: all taken out first, so that they wait for
    /// their readers together.
    fn free_io_queues(&self) {
        for q in self.queues.iter().skip(1) {
            q.retire();
        }
        for q in self.queues.iter().skip(1) {
            q.release(self, false);
        }
    }

    fn stop_io_queues(&self) {
        for q in self.queues.iter().skip(1) {
            q.stop();
        }
    }

    fn configure_io(&self, new: bool) -> Result<(), Failure> {
        let n = self.core();
        let opts = n.opts();
        let wanted = opts.total_io_queues(params::num_online_cpus());
        let granted = self
            .admin_queue()
            .ok_or(Failure::from(ENODEV))?
            .set_queue_count(wanted)?;
        if granted == 0 {
            log_err!(n, "unable to set any I/O queues");
            return Err(ENOMEM.into());
        }
        let count = granted.min(self.queues.len() as u32 - 1);
        n.set_queue_count(count + 1);
        log_info!(n, "creating {} I/O queues.", count);
        let split = opts.io_queue_split(count);
        for (slot, v) in self.io_queues.iter().zip(split) {
            slot.store(v, Ordering::Relaxed);
        }

        let depth = u32::from(n.sqsize()) + 1;
        for qid in 1..=count as u16 {
            if let Err(e) = self.queue(qid).connect(self, depth) {
                self.free_io_queues();
                return Err(e.into());
            }
        }

        let io = if new {
            // Default and read maps, and the poll map if there are poll queues.
            let nr_maps = if opts.nr_poll_queues() > 0 {
                HCTX_MAX_TYPES as u32
            } else {
                2
            };
            self.alloc_io_queues(nr_maps)
        } else {
            self.io_queues().ok_or(Failure::from(ENODEV))
        };
        let io = match io {
            Ok(io) => io,
            Err(e) => {
                self.free_io_queues();
                return Err(e);
            }
        };

        // Start only the queues the tag set has hardware queues for: on reconnect their
        // number may have changed.
        let hw_queues = self.io_tag_set().nr_hw_queues().unwrap_or(0);
        let nr_queues = (hw_queues + 1).min(n.queue_count()) as u16;
        let res = (|| -> Result<(), Failure> {
            self.start_io_queues(&io, 1, nr_queues)?;
            if !new {
                io.start_freeze();
                io.unquiesce();
                if !io.wait_freeze_timeout(FREEZE_TIMEOUT_MS) {
                    // Likely stuck: fail this attempt to be safe.
                    io.unfreeze();
                    return Err(ENODEV.into());
                }
                // `blk_mq_update_nr_hw_queues` reallocates the array of tags and frees the
                // tags and requests of the hardware queues it drops. Their readers, a response
                // received meanwhile and the abort work's walk, find the tag set not ready and
                // do not look, and a reader that began before is waited for. With every I/O
                // request frozen, no command is in flight on the I/O queues: any such response
                // is a stray one, and the walk has nothing to abort.
                io.update_nr_hw_queues(n.queue_count() - 1);
                io.unfreeze();
            }
            // If the number of queues grew, start the new ones now.
            let hw_queues = self.io_tag_set().nr_hw_queues().unwrap_or(0);
            self.start_io_queues(&io, nr_queues, (hw_queues + 1).min(n.queue_count()) as u16)
        })();
        if let Err(e) = res {
            io.quiesce();
            io.sync();
            self.stop_io_queues();
            io.cancel_requests();
            if new {
                io.remove();
            } else {
                drop(io);
            }
            self.free_io_queues();
            return Err(e);
        }
        Ok(())
    }

    fn teardown_admin(&self, remove: bool) {
        let n = self.core();
        if let Some(aq) = self.admin_queue() {
            aq.quiesce();
            aq.sync();
            self.queue(0).stop();
            aq.cancel_requests();
            if remove {
                aq.unquiesce();
                aq.remove();
            }
        } else {
            self.queue(0).stop();
        }
        // The async event request uses the admin queue.
        n.async_event_work().cancel_sync();
        self.queue(0).retire();
        // With the I/O queues' connections, if `teardown_io` took them out.
        self.release_all();
    }

    /// Stops the I/O queues and takes their connections out, to be released with the admin
    /// queue's (`teardown_admin`, which follows).
    fn teardown_io(&self, remove: bool) {
        if self.core().queue_count() <= 1 {
            return;
        }
        if let Some(io) = self.io_queues() {
            io.quiesce();
            io.sync();
            self.stop_io_queues();
            io.cancel_requests();
            if remove {
                io.unquiesce();
                io.remove();
            }
        } else {
            self.stop_io_queues();
        }
        self.retire_io_queues();
    }

    fn shutdown(&self, shutdown: bool) {
        self.teardown_io(shutdown);
        if let Some(aq) = self.admin_queue() {
            aq.quiesce();
            // Only a connected admin queue can carry the shutdown property write.
            if self.queue(0).is_live() {
                aq.disable(shutdown);
            }
        }
        self.teardown_admin(shutdown);
    }

    // --- Error recovery and reconnect -----------------------------------------------------

    /// Starts error recovery (once: later calls while resetting are no-ops).
    pub(crate) fn error_recovery(&self, reason: fmt::Arguments<'_>) {
        let n = self.core();
        self.stats.error(reason);
        if !n.change_state(State::Resetting) {
            return;
        }
        log_warn!(n, "starting error recovery: {}", reason);
        self.queue_work(CtrlWork::ErrorRecovery, Wq::Reset);
    }

    /// Queues the abort work (see `Queue::report_while_connecting`); any context.
    pub(crate) fn queue_abort(&self) {
        self.queue_work(CtrlWork::Abort, Wq::Nvme);
    }

    fn recover(&self) {
        let n = self.core();
        let start = Ktime::ktime_get();
        n.stop_keep_alive();
        n.async_event_work().flush();
        self.teardown_io(false);
        if let Some(io) = self.io_queues() {
            io.unquiesce();
        }
        self.teardown_admin(false);
        if let Some(aq) = self.admin_queue() {
            aq.unquiesce();
        }
        n.auth_stop();
        dbg_event!(
            Recovery,
            n,
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
        let n = self.core();
        if n.state() != State::Connecting {
            return;
        }
        let decision = {
            let mut rec = self.recovery.lock();
            // The options as they are now: sysfs may have changed them since the connect. Its
            // store takes any `reconnect_delay`, 0 included, which the policy refuses: the last
            // good policy stays.
            let policy = RdmaCtrl::policy_of(n.opts()).unwrap_or_else(|m| {
                log_warn!(n, "reconnect_delay/ctrl_loss_tmo ignored: {}", m);
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
                log_info!(n, "Reconnecting in {} ms...", ms);
                self.schedule_reconnect(ms.min(u64::from(u32::MAX)) as u32);
            }
            Decision::GiveUp(reason) => {
                log_warn!(
                    n,
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
            self.queue_delayed_work(CtrlWork::Reconnect, Wq::Nvme, delay_ms);
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
        if !*stopped && self.cancel_work(CtrlWork::Reconnect) {
            self.queue_work(CtrlWork::Reconnect, Wq::Nvme);
        }
    }

    fn reconnect(&self) {
        let n = self.core();
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
                    n,
                    "Successfully reconnected ({} attempts, {} ms after the connection was lost)",
                    attempt,
                    since
                );
            }
            Err(f) => {
                let outcome = self.retry_outcome(&f);
                log_info!(
                    n,
                    "Failed reconnect attempt {} ({:?}{})",
                    attempt,
                    f.errno,
                    if outcome == (Outcome::Failed { dnr: true }) {
                        ", do not retry"
                    } else {
                        ""
                    }
                );
                self.reconnect_or_remove(outcome);
            }
        }
    }

    /// How a failed attempt to connect a controller that was live again counts for its
    /// reconnect: as its status says, except that a Connect refused with DNR for a reason that
    /// means the target's configuration is changing (the host or the subsystem not there yet)
    /// is retried, said in the log, until `ctrl_loss_tmo` ends the reconnect as for a target
    /// that does not answer. A first connect still ends on it (see
    /// `proto::reconnect::config_in_flux`).
    fn retry_outcome(&self, f: &Failure) -> Outcome {
        if f.dnr && f.connect {
            if let Some(why) = config_in_flux(f.status) {
                log_info!(
                    self.core(),
                    "connect refused: {} (status {:#x}), the target's configuration may be changing: retrying until ctrl_loss_tmo",
                    why,
                    f.status
                );
                return Outcome::Failed { dnr: false };
            }
        }
        Outcome::Failed { dnr: f.dnr }
    }

    /// The reset work: tears the connection down and sets it up again.
    fn reset(&self) {
        let n = self.core();
        n.stop();
        self.shutdown(false);
        if !n.change_state(State::Connecting) {
            log_warn!(n, "reset: could not move to CONNECTING ({:?})", n.state());
            return;
        }
        if let Err(f) = self.setup(false) {
            log_info!(
                n,
                "reset: reconnect failed ({:?}{})",
                f.errno,
                if f.dnr { ", do not retry" } else { "" }
            );
            {
                let mut rec = self.recovery.lock();
                let policy = rec.policy;
                rec.current = Some(Reconnect::start(policy, now_ms()));
                rec.lost_at = Some(Ktime::ktime_get());
            }
            // As after a loss, the first attempt is made at once; unless this one, the reset's
            // own, failed for good.
            self.reconnect_or_remove(match self.retry_outcome(&f) {
                Outcome::Failed { dnr: true } => Outcome::Failed { dnr: true },
                _ => Outcome::First,
            });
        }
    }

    /// Releases everything the controller holds on RDMA device `dev`, which is going away, and
    /// keeps it reconnecting (through another device, or this one when it returns).
    pub(crate) fn device_removed(&self, dev: &Device) {
        let n = self.core();
        self.block_device(dev.id());
        for _ in 0..8 {
            n.reset_work().flush();
            self.flush_work(CtrlWork::ErrorRecovery);
            self.cancel_work_sync(CtrlWork::Reconnect);
            match n.state() {
                State::Live if self.device() == Some(dev.id()) => {
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
                    let mut aborted = false;
                    while self.device() == Some(dev.id()) && !self.released.wait_ms(RELEASE_WAIT_MS)
                    {
                        log_warn!(
                            n,
                            "RDMA device {} removal: waiting for the controller's deletion to release it",
                            dev.name()
                        );
                        // Still not done: it may be waiting for responses that will not come
                        // (see `Queue::lost_to_removal`).
                        if !aborted {
                            for q in self.queues.iter() {
                                q.lost_to_removal(self);
                            }
                            aborted = true;
                        }
                    }
                    return;
                }
            }
        }
        log_err!(
            n,
            "RDMA device {} removal: controller still busy",
            dev.name()
        );
    }
}

impl ControllerOps for RdmaCtrl {
    type Pdu = Request;
    type Queue = Queue;
    type Work = CtrlWork;

    fn submit_async_event(ctrl: &Ctrl) {
        ctrl.queue(0).submit_async_event(ctrl);
    }

    fn delete_ctrl(ctrl: &Ctrl) {
        // Waits for readers of the stats file.
        drop(ctrl.debugfs.lock().take());
        // No new opens of the area; open files and mappings keep its memory.
        drop(ctrl.area_dev.lock().take());
        ctrl.shutdown(true);
        // Here rather than in `stop_ctrl`: only once every queue was stopped and freed can no
        // completion or CM event queue the abort work again (they need an established
        // connection).
        ctrl.cancel_work_sync(CtrlWork::Abort);
    }

    fn supports_pci_p2pdma(ctrl: &Ctrl) -> bool {
        // The namespaces are added once connected; their pages are then sent from the
        // registrations of `peer`, on this device and the ones of later connections (those
        // that cannot take peer memory fail such I/O with EREMOTEIO).
        let rcu = RcuReadGuard::new();
        ctrl.conn
            .get(&rcu)
            .is_some_and(|c| c.pd.device().takes_peer_mem())
    }

    fn stop_ctrl(ctrl: &Ctrl) {
        // The core stops the controller for deletion, and the reset work for a reset (after
        // which it may reconnect). Once deleting, neither the error recovery flushed below nor
        // a device or port event arms the reconnect work after it was cancelled.
        if matches!(ctrl.core().state(), State::Deleting | State::DeletingNoIo) {
            *ctrl.reconnect_gate.lock() = true;
        }
        ctrl.flush_work(CtrlWork::ErrorRecovery);
        ctrl.cancel_work_sync(CtrlWork::Reconnect);
    }

    fn reset_work(ctrl: &Ctrl) {
        ctrl.reset();
    }

    fn run_work(ctrl: &Ctrl, work: CtrlWork) {
        match work {
            CtrlWork::ErrorRecovery => ctrl.recover(),
            CtrlWork::Reconnect => ctrl.reconnect(),
            CtrlWork::Abort => {
                for queue in ctrl.queues.iter() {
                    queue.abort_if_lost(ctrl);
                }
            }
        }
    }

    fn init_pdu(ctrl: &Ctrl, set: SetKind, hctx_idx: u32) -> Result<Request> {
        let qid = match set {
            SetKind::Admin => 0,
            SetKind::Io => hctx_idx as u16 + 1,
        };
        ctrl.try_queue(qid).ok_or(EINVAL)?;
        Ok(Request::new(qid))
    }

    fn hctx_queue(ctrl: &Ctrl, set: SetKind, hctx_idx: u32) -> Option<&Queue> {
        match set {
            SetKind::Admin => ctrl.try_queue(0),
            SetKind::Io => ctrl.try_queue(hctx_idx as u16 + 1),
        }
    }

    fn queue_rq<'a>(
        ctrl: &Ctrl,
        queue: &Queue,
        rq: OwnedRq<'a, Request>,
        rcu: &Rcu,
    ) -> Dispatched<'a> {
        request::queue_rq(ctrl, queue, rq, rcu)
    }

    fn complete(ctrl: &Ctrl, rq: OwnedRq<'_, Request>) {
        request::complete(ctrl, rq);
    }

    fn timeout(ctrl: &Ctrl, rq: TimedOutRq<'_, Request>) -> TimeoutAction {
        request::timeout(ctrl, rq)
    }

    fn poll(_ctrl: &Ctrl, queue: &Queue) -> i32 {
        queue.poll()
    }

    fn map_queues(ctrl: &Ctrl) -> [u32; HCTX_MAX_TYPES] {
        ctrl.io_queue_counts()
    }
}
