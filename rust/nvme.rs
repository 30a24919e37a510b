// SPDX-License-Identifier: GPL-2.0

//! Access to the NVMe core's controller (`struct nvme_ctrl`) and connect options.
//!
//! The transport embeds the core's controller in its own (`ctrl::RdmaCtrl`); a [`Ctrl`] is a
//! handle to it that is only created while that controller is alive, which makes its methods
//! safe to call. State transitions, quiescing, freezing and keep-alive all stay in the core.

use crate::bindings;
use crate::work::{Work, WorkFn};
use core::ptr::NonNull;
use kernel::error::to_result;
use kernel::prelude::*;
use kernel::str::CStr;

/// NVMe status bit "Do Not Retry".
const NVME_STATUS_DNR: i32 = 0x4000;

/// Why an operation failed: an errno, or an NVMe status, which may forbid retrying.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Failure {
    pub(crate) errno: Error,
    pub(crate) dnr: bool,
}

impl From<Error> for Failure {
    fn from(errno: Error) -> Self {
        Self { errno, dnr: false }
    }
}

/// Turns the return value of a core function that may return an NVMe status into a result.
/// Failed authentication is final too, as a DNR status is (the core's
/// `nvmf_should_reconnect`): another attempt with the same key would fail the same way.
pub(crate) fn status_result(ret: i32) -> Result<(), Failure> {
    match ret {
        0 => Ok(()),
        r if r < 0 => {
            let errno = Error::from_errno(r);
            Err(Failure {
                errno,
                dnr: errno == crate::errno::EKEYREJECTED() || errno == crate::errno::ENOKEY(),
            })
        }
        r => Err(Failure {
            errno: EIO,
            dnr: r & NVME_STATUS_DNR != 0,
        }),
    }
}

/// Controller states of the NVMe core.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum State {
    New,
    Live,
    Resetting,
    Connecting,
    Deleting,
    DeletingNoIo,
    Dead,
}

impl State {
    fn raw(self) -> bindings::nvme_ctrl_state {
        match self {
            State::New => bindings::nvme_ctrl_state_NVME_CTRL_NEW,
            State::Live => bindings::nvme_ctrl_state_NVME_CTRL_LIVE,
            State::Resetting => bindings::nvme_ctrl_state_NVME_CTRL_RESETTING,
            State::Connecting => bindings::nvme_ctrl_state_NVME_CTRL_CONNECTING,
            State::Deleting => bindings::nvme_ctrl_state_NVME_CTRL_DELETING,
            State::DeletingNoIo => bindings::nvme_ctrl_state_NVME_CTRL_DELETING_NOIO,
            State::Dead => bindings::nvme_ctrl_state_NVME_CTRL_DEAD,
        }
    }

    fn from_raw(raw: i32) -> Self {
        match raw as bindings::nvme_ctrl_state {
            bindings::nvme_ctrl_state_NVME_CTRL_NEW => State::New,
            bindings::nvme_ctrl_state_NVME_CTRL_LIVE => State::Live,
            bindings::nvme_ctrl_state_NVME_CTRL_RESETTING => State::Resetting,
            bindings::nvme_ctrl_state_NVME_CTRL_CONNECTING => State::Connecting,
            bindings::nvme_ctrl_state_NVME_CTRL_DELETING => State::Deleting,
            bindings::nvme_ctrl_state_NVME_CTRL_DELETING_NOIO => State::DeletingNoIo,
            _ => State::Dead,
        }
    }
}

/// Reads one field of a [`Ctrl`]'s `nvme_ctrl` in place, as `READ_ONCE` does. No reference to
/// the whole structure is made: the core writes its other fields (state, locks, work items)
/// concurrently.
macro_rules! ctrl_field {
    ($ctrl:expr, $field:ident) => {{
        let ctrl: &Ctrl = &$ctrl;
        // SAFETY: alive (`Ctrl` invariant); only this field is read, in one volatile load. Some
        // change in a reconnect (`queue_count`, `sqsize`, `icdoff`) while the statistics file
        // reads them, say: a reader sees the old or the new value and can use either.
        unsafe { core::ptr::addr_of!((*ctrl.0.as_ptr()).$field).read_volatile() }
    }};
}

/// A live controller of the NVMe core (see the module docs for the invariant).
#[derive(Clone, Copy)]
pub(crate) struct Ctrl(NonNull<bindings::nvme_ctrl>);

// SAFETY: the core's controller is used from many contexts; every method here is either a core
// function that does its own locking or a read of a field the core documents as stable.
unsafe impl Send for Ctrl {}
// SAFETY: as above.
unsafe impl Sync for Ctrl {}

impl Ctrl {
    /// # Safety
    ///
    /// `ctrl` must point to a controller initialized by `nvme_init_ctrl` that stays alive for
    /// as long as the handle is used.
    pub(crate) unsafe fn from_raw(ctrl: *mut bindings::nvme_ctrl) -> Self {
        // SAFETY: non-null per the contract.
        Self(unsafe { NonNull::new_unchecked(ctrl) })
    }

    pub(crate) fn as_ptr(self) -> *mut bindings::nvme_ctrl {
        self.0.as_ptr()
    }

    fn raw_mut(&mut self) -> *mut bindings::nvme_ctrl {
        self.0.as_ptr()
    }

    pub(crate) fn state(&self) -> State {
        // SAFETY: alive (type invariant).
        State::from_raw(unsafe { bindings::rsrdma_nvme_ctrl_state(self.as_ptr()) })
    }

    /// Asks the core to move to `state`; false if that transition is not allowed now.
    pub(crate) fn change_state(&self, state: State) -> bool {
        // SAFETY: alive; the core serializes state changes.
        unsafe { bindings::nvme_change_ctrl_state(self.as_ptr(), state.raw()) }
    }

    pub(crate) fn opts(&self) -> Options {
        Options(ctrl_field!(self, opts))
    }

    /// The controller's device name, e.g. `nvme0`.
    pub(crate) fn name(&self) -> &CStr {
        // SAFETY: alive; the device name lives as long as the controller.
        unsafe { CStr::from_char_ptr(bindings::rsrdma_nvme_ctrl_name(self.as_ptr())) }
    }

    pub(crate) fn subsysnqn(&self) -> &CStr {
        // SAFETY: alive; the NQN lives in the options or the subsystem.
        unsafe { CStr::from_char_ptr(bindings::rsrdma_nvmf_ctrl_subsysnqn(self.as_ptr())) }
    }

    pub(crate) fn sqsize(&self) -> u16 {
        ctrl_field!(self, sqsize)
    }

    pub(crate) fn set_sqsize(&mut self, sqsize: u16) {
        // SAFETY: alive; sqsize is ours to set during setup, as in every fabrics transport.
        unsafe { (*self.raw_mut()).sqsize = sqsize };
    }

    pub(crate) fn queue_count(&self) -> u32 {
        ctrl_field!(self, queue_count)
    }

    pub(crate) fn set_queue_count(&mut self, count: u32) {
        // SAFETY: alive; the transport owns queue_count.
        unsafe { (*self.raw_mut()).queue_count = count };
    }

    pub(crate) fn cntlid(&self) -> u16 {
        ctrl_field!(self, cntlid)
    }

    pub(crate) fn icdoff(&self) -> u16 {
        ctrl_field!(self, icdoff)
    }

    pub(crate) fn sgls(&self) -> u32 {
        ctrl_field!(self, sgls)
    }

    pub(crate) fn maxcmd(&self) -> u16 {
        ctrl_field!(self, maxcmd)
    }

    /// In-capsule size the controller accepts (IOCCSZ, in bytes).
    pub(crate) fn ioccsz_bytes(&self) -> u32 {
        ctrl_field!(self, ioccsz).saturating_mul(16)
    }

    /// Sets the transfer limits the core applies to the block queues.
    pub(crate) fn set_limits(&mut self, max_hw_sectors: u32, max_segments: u32) {
        // SAFETY: alive; read by the core in nvme_init_ctrl_finish, which we call afterwards.
        unsafe {
            (*self.raw_mut()).max_hw_sectors = max_hw_sectors;
            (*self.raw_mut()).max_segments = max_segments;
            (*self.raw_mut()).max_integrity_segments = 0;
        }
    }

    pub(crate) fn set_numa_node(&mut self, node: i32) {
        // SAFETY: alive; a hint the core reads when allocating.
        unsafe { (*self.raw_mut()).numa_node = node };
    }

    pub(crate) fn set_nr_reconnects(&mut self, n: i32) {
        // SAFETY: alive; informational for the core.
        unsafe { (*self.raw_mut()).nr_reconnects = n };
    }

    pub(crate) fn admin_q(&self) -> *mut bindings::request_queue {
        ctrl_field!(self, admin_q)
    }

    pub(crate) fn async_event_work(&self) -> &Work {
        // SAFETY: alive, and `nvme_init_ctrl` initialized the item.
        unsafe { Work::from_raw(core::ptr::addr_of_mut!((*self.0.as_ptr()).async_event_work)) }
    }

    pub(crate) fn delete_work(&self) -> &Work {
        // SAFETY: as above.
        unsafe { Work::from_raw(core::ptr::addr_of_mut!((*self.0.as_ptr()).delete_work)) }
    }

    /// The reset work, which the transport initializes ([`Ctrl::init_reset_work`]).
    pub(crate) fn reset_work(&self) -> &Work {
        // SAFETY: alive; initialized before `nvme_init_ctrl`, as transports must.
        unsafe { Work::from_raw(core::ptr::addr_of_mut!((*self.0.as_ptr()).reset_work)) }
    }

    /// Binds the reset work to the transport's `func`.
    ///
    /// # Safety
    ///
    /// Before `nvme_init_ctrl`; as for [`Work::new`] otherwise.
    pub(crate) unsafe fn init_reset_work(&self, func: WorkFn) {
        // SAFETY: alive, and nothing uses the item before `nvme_init_ctrl`; `func` per the
        // contract.
        unsafe {
            Work::init_raw(
                core::ptr::addr_of_mut!((*self.0.as_ptr()).reset_work),
                func,
                bindings::rsrdma_work_class_RSRDMA_WORK_RESET,
            )
        };
    }
}

/// Wraps the core functions that take only the controller.
macro_rules! core_calls {
    ($($(#[$m:meta])* $name:ident => $f:ident;)*) => {
        impl Ctrl {
            $(
                $(#[$m])*
                pub(crate) fn $name(&self) {
                    // SAFETY: alive (type invariant); the core function does its own locking.
                    unsafe { bindings::$f(self.as_ptr()) };
                }
            )*
        }
    };
}

core_calls! {
    quiesce_io => nvme_quiesce_io_queues;
    unquiesce_io => nvme_unquiesce_io_queues;
    quiesce_admin => nvme_quiesce_admin_queue;
    unquiesce_admin => nvme_unquiesce_admin_queue;
    sync_io_queues => nvme_sync_io_queues;
    cancel_tagset => nvme_cancel_tagset;
    cancel_admin_tagset => nvme_cancel_admin_tagset;
    start_freeze => nvme_start_freeze;
    unfreeze => nvme_unfreeze;
    stop_keep_alive => nvme_stop_keep_alive;
    start => nvme_start_ctrl;
    stop => nvme_stop_ctrl;
    uninit => nvme_uninit_ctrl;
    auth_stop => rsrdma_nvme_auth_stop;
    /// Drops a reference taken with [`Ctrl::tryget`] or the creation reference.
    put => rsrdma_nvme_put_ctrl;
}

impl Ctrl {
    /// Takes a reference unless the controller is already being freed.
    pub(crate) fn tryget(&self) -> bool {
        // SAFETY: the memory is alive (caller holds the registry lock, see `registration`).
        unsafe { bindings::rsrdma_nvme_tryget_ctrl(self.as_ptr()) }
    }

    /// Enables the controller. Its property accesses may fail with an NVMe status (a command
    /// aborted when the connection went, say), which is a failure like an errno.
    pub(crate) fn enable(&self) -> Result<(), Failure> {
        // SAFETY: alive.
        status_result(unsafe { bindings::nvme_enable_ctrl(self.as_ptr()) })
    }

    pub(crate) fn disable(&self, shutdown: bool) {
        // SAFETY: alive. A failure (queue already gone) needs no handling: we tear down anyway.
        unsafe { bindings::nvme_disable_ctrl(self.as_ptr(), shutdown) };
    }

    /// Identifies the controller; like [`Ctrl::enable`], it may fail with an NVMe status.
    pub(crate) fn init_finish(&self) -> Result<(), Failure> {
        // SAFETY: alive; the admin queue is connected and enabled.
        status_result(unsafe { bindings::nvme_init_ctrl_finish(self.as_ptr(), false) })
    }

    /// Sets Number of Queues; returns how many I/O queues the controller granted: 0 when it
    /// answered with an error status (the core's rule for degraded controllers; the caller,
    /// like the C driver, then fails the set-up). A host path error, the command lost with
    /// the connection, is a failure.
    pub(crate) fn negotiate_queue_count(&self, wanted: u32) -> Result<u32, Failure> {
        let mut count = wanted as i32;
        // SAFETY: alive; `count` is a valid in/out parameter.
        status_result(unsafe { bindings::nvme_set_queue_count(self.as_ptr(), &mut count) })?;
        Ok(count as u32)
    }

    /// Sends the Fabrics Connect command of the admin queue (`qid` 0) or an I/O queue.
    pub(crate) fn connect_queue(&self, qid: u16) -> Result<(), Failure> {
        // SAFETY: alive; the queue is RDMA-connected.
        status_result(unsafe {
            if qid == 0 {
                bindings::nvmf_connect_admin_queue(self.as_ptr())
            } else {
                bindings::nvmf_connect_io_queue(self.as_ptr(), qid)
            }
        })
    }

    /// Waits at most `timeout_ms` for the queues to freeze; false on timeout.
    pub(crate) fn wait_freeze_timeout(&self, timeout_ms: u32) -> bool {
        let jiffies = kernel::time::msecs_to_jiffies(timeout_ms);
        // SAFETY: alive.
        unsafe { bindings::nvme_wait_freeze_timeout(self.as_ptr(), jiffies as isize) > 0 }
    }

    pub(crate) fn sync_admin_queue(&self) {
        // SAFETY: alive; the admin queue exists once the admin tag set was allocated.
        unsafe { bindings::blk_sync_queue(self.admin_q()) };
    }

    /// Starts deleting the controller (asynchronously, on nvme_delete_wq).
    pub(crate) fn delete(&self) {
        // SAFETY: alive; -EBUSY (already deleting) needs no handling.
        unsafe { bindings::nvme_delete_ctrl(self.as_ptr()) };
    }

    pub(crate) fn complete_async_event(&self, status: u16, result: u64) {
        let mut res = bindings::nvme_completion_nvme_result { u64_: result };
        // SAFETY: alive; the result is copied by the core.
        unsafe { bindings::nvme_complete_async_event(self.as_ptr(), status, &mut res) };
    }
}

/// Reads one field of the options behind an [`Options`].
macro_rules! opts_field {
    ($opts:expr, $field:ident) => {{
        let opts: &Options = &$opts;
        // The core's sysfs attributes (`reconnect_delay`, `ctrl_loss_tmo`, `fast_io_fail_tmo`,
        // the DH-HMAC-CHAP keys) write some fields of the options at any time.
        // SAFETY: valid (`Options` invariant); only this field is read, in one volatile load,
        // never through a reference to the whole structure.
        unsafe { core::ptr::addr_of!((*opts.0).$field).read_volatile() }
    }};
}

/// The connect options of a controller, owned by the core (freed with the controller).
#[derive(Clone, Copy)]
pub(crate) struct Options(*mut bindings::nvmf_ctrl_options);

impl Options {
    /// # Safety
    ///
    /// `opts` must be valid for as long as the handle is used.
    pub(crate) unsafe fn from_raw(opts: *mut bindings::nvmf_ctrl_options) -> Self {
        Self(opts)
    }

    pub(crate) fn as_ptr(self) -> *mut bindings::nvmf_ctrl_options {
        self.0
    }

    fn str_opt(&self, p: *mut kernel::ffi::c_char) -> Option<&CStr> {
        if p.is_null() {
            None
        } else {
            // SAFETY: option strings are NUL terminated and live with the options.
            Some(unsafe { CStr::from_char_ptr(p) })
        }
    }

    pub(crate) fn traddr(&self) -> Option<&CStr> {
        self.str_opt(opts_field!(self, traddr))
    }

    pub(crate) fn trsvcid(&self) -> Option<&CStr> {
        self.str_opt(opts_field!(self, trsvcid))
    }

    pub(crate) fn subsysnqn(&self) -> Option<&CStr> {
        self.str_opt(opts_field!(self, subsysnqn))
    }

    pub(crate) fn host_traddr(&self) -> Option<&CStr> {
        self.str_opt(opts_field!(self, host_traddr))
    }

    pub(crate) fn hostnqn(&self) -> Option<&CStr> {
        let host = opts_field!(self, host);
        if host.is_null() {
            return None;
        }
        // SAFETY: the host entry is referenced by the options; its NQN is a NUL-terminated array.
        Some(unsafe { CStr::from_char_ptr((*host).nqn.as_ptr()) })
    }

    pub(crate) fn queue_size(&self) -> usize {
        opts_field!(self, queue_size)
    }

    pub(crate) fn nr_io_queues(&self) -> u32 {
        opts_field!(self, nr_io_queues)
    }

    pub(crate) fn nr_write_queues(&self) -> u32 {
        opts_field!(self, nr_write_queues)
    }

    pub(crate) fn nr_poll_queues(&self) -> u32 {
        opts_field!(self, nr_poll_queues)
    }

    /// Seconds between reconnect attempts; the `reconnect_delay` sysfs attribute changes it.
    pub(crate) fn reconnect_delay(&self) -> u32 {
        opts_field!(self, reconnect_delay)
    }

    /// Attempts before giving up, -1 for no limit; the `ctrl_loss_tmo` attribute changes it.
    pub(crate) fn max_reconnects(&self) -> i32 {
        opts_field!(self, max_reconnects)
    }

    pub(crate) fn kato(&self) -> u32 {
        opts_field!(self, kato)
    }

    pub(crate) fn tos(&self) -> i32 {
        opts_field!(self, tos)
    }

    pub(crate) fn duplicate_connect(&self) -> bool {
        opts_field!(self, duplicate_connect)
    }

    /// Gives the controller `n` dedicated write queues, as `nr_write_queues=n` would, unless the
    /// user set that option.
    pub(crate) fn default_write_queues(&self, n: u32) {
        if opts_field!(self, mask) & bindings::NVMF_OPT_NR_WRITE_QUEUES == 0 {
            // SAFETY: valid options (type invariant), not yet shared with the core's users: the
            // transport's create_ctrl owns them until the controller is created.
            unsafe { (*self.0).nr_write_queues = n };
        }
    }

    /// Total I/O queues asked for (default + write + poll), each kind limited to `cpus` as the
    /// core counts them (`nvmf_nr_io_queues`): the core bounds only `nr_io_queues` when it
    /// parses the options, the other two may be anything up to `INT_MAX`.
    pub(crate) fn total_io_queues(&self, cpus: u32) -> u32 {
        self.nr_io_queues()
            .min(cpus)
            .saturating_add(self.nr_write_queues().min(cpus))
            .saturating_add(self.nr_poll_queues().min(cpus))
    }

    /// Whether the user set `nr_io_queues` (otherwise the core defaulted it to the number of
    /// online CPUs).
    pub(crate) fn nr_io_queues_given(&self) -> bool {
        opts_field!(self, mask) & bindings::NVMF_OPT_NR_IO_QUEUES != 0
    }

    /// Limits the write and poll queue counts to `cpus`, as the core limits `nr_io_queues`
    /// when it parses it: `nvmf_set_io_queues` hands the granted queues out by the counts
    /// asked for, and a write queue count above the CPUs would take the poll queues' share and
    /// leave hardware queues no CPU maps to (whose Connect then fails with `EXDEV`).
    pub(crate) fn limit_queue_counts(&self, cpus: u32) {
        // SAFETY: valid options (type invariant), not yet shared with the core's users: the
        // transport's create_ctrl owns them until the controller is created.
        unsafe {
            (*self.0).nr_write_queues = (*self.0).nr_write_queues.min(cpus);
            (*self.0).nr_poll_queues = (*self.0).nr_poll_queues.min(cpus);
        }
    }

    /// Lowers the default I/O queue count to `n`.
    pub(crate) fn limit_io_queues(&self, n: u32) {
        // SAFETY: valid options (type invariant), not yet shared with the core's users: the
        // transport's create_ctrl owns them until the controller is created.
        unsafe { (*self.0).nr_io_queues = (*self.0).nr_io_queues.min(n) };
    }

    /// Sets trsvcid to the NVMe/RDMA port when the user gave none.
    pub(crate) fn default_trsvcid(&self, port: &CStr) -> Result {
        // SAFETY: valid options; the glue allocates the string with kmalloc, as the core frees
        // it with the options.
        to_result(unsafe { bindings::rsrdma_opts_default_trsvcid(self.0, port.as_char_ptr()) })
    }
}
