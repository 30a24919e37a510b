// SPDX-License-Identifier: GPL-2.0

//! The NVMe core's controller (`struct nvme_ctrl`) as a transport sees it: its state, the
//! fields a transport reads and sets, and the core functions that need nothing but a live
//! controller. Functions that need the admin or I/O queues to exist are on the handles of
//! [`Controller`](super::Controller) that prove it.
//!
//! C headers: [`drivers/nvme/host/nvme.h`](srctree/drivers/nvme/host/nvme.h),
//! [`drivers/nvme/host/fabrics.h`](srctree/drivers/nvme/host/fabrics.h).

use super::super::bindings;
use super::super::log::Prefix;
use super::super::work::CoreWork;
use super::Options;
use kernel::prelude::*;
use kernel::str::CStr;
use kernel::types::Opaque;

/// The admin tag set's depth: command identifiers from here on the admin queue are the
/// asynchronous event request's (`NVME_AQ_BLK_MQ_DEPTH`).
pub(crate) const AQ_BLK_MQ_DEPTH: u16 = bindings::NVME_AQ_BLK_MQ_DEPTH as u16;

/// NVMe status bit "Do Not Retry".
const NVME_STATUS_DNR: i32 = 0x4000;

/// Why an operation failed: an errno, or an NVMe status, which may forbid retrying.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Failure {
    pub(crate) errno: Error,
    pub(crate) dnr: bool,
    /// The NVMe status the command failed with (with its DNR and More bits), 0 for none.
    pub(crate) status: u16,
    /// The failed command was a Fabrics Connect (set by the caller that sent one).
    pub(crate) connect: bool,
}

impl From<Error> for Failure {
    fn from(errno: Error) -> Self {
        Self {
            errno,
            dnr: false,
            status: 0,
            connect: false,
        }
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
                dnr: errno == super::super::errno::EKEYREJECTED()
                    || errno == super::super::errno::ENOKEY(),
                status: 0,
                connect: false,
            })
        }
        r => Err(Failure {
            errno: EIO,
            dnr: r & NVME_STATUS_DNR != 0,
            status: r as u16,
            connect: false,
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

/// Reads one field of a [`CoreCtrl`] in place, as `READ_ONCE` does. No reference to the whole
/// structure is made: the core writes its other fields (state, locks, work items)
/// concurrently.
macro_rules! ctrl_field {
    ($ctrl:expr, $field:ident) => {{
        let ctrl: &CoreCtrl = &$ctrl;
        // SAFETY: initialized and alive (`CoreCtrl` invariant); only this field is read, in one
        // volatile load. Some change in a reconnect (`queue_count`, `sqsize`, `icdoff`) while
        // the statistics file reads them, say: a reader sees the old or the new value.
        unsafe { core::ptr::addr_of!((*ctrl.as_ptr()).$field).read_volatile() }
    }};
}

/// Writes one field of a [`CoreCtrl`] in place, as `WRITE_ONCE` does.
macro_rules! set_ctrl_field {
    ($ctrl:expr, $field:ident, $value:expr) => {{
        let ctrl: &CoreCtrl = &$ctrl;
        let value = $value;
        // SAFETY: initialized and alive (`CoreCtrl` invariant); only this plain field is
        // written, in one volatile store; the core reads it when the transport asks it to.
        unsafe { core::ptr::addr_of_mut!((*ctrl.as_ptr()).$field).write_volatile(value) }
    }};
}

/// The NVMe core's controller embedded in a transport's controller.
///
/// # Invariants
///
/// A `&CoreCtrl` refers to a controller initialized by `nvme_init_ctrl` that stays allocated
/// for the reference's lifetime (see [`Controller`](super::Controller), which is the only place
/// one is created).
#[repr(transparent)]
pub(crate) struct CoreCtrl(Opaque<bindings::nvme_ctrl>);

// SAFETY: the core's controller is used from many contexts; every method here is a core
// function that does its own locking or a one-field access (see `ctrl_field!`).
unsafe impl Send for CoreCtrl {}
// SAFETY: as above.
unsafe impl Sync for CoreCtrl {}

impl<'a> From<&'a CoreCtrl> for Prefix<'a> {
    fn from(ctrl: &'a CoreCtrl) -> Self {
        // SAFETY: alive for `'a` (type invariant).
        unsafe { Prefix::from_raw(ctrl.as_ptr()) }
    }
}

impl CoreCtrl {
    /// The controller at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` is a controller initialized by `nvme_init_ctrl`, allocated for `'a`.
    pub(in crate::wrap) unsafe fn from_raw<'a>(ptr: *mut bindings::nvme_ctrl) -> &'a Self {
        // SAFETY: a transparent wrapper; per the contract.
        unsafe { &*ptr.cast::<Self>() }
    }

    pub(in crate::wrap) fn as_ptr(&self) -> *mut bindings::nvme_ctrl {
        self.0.get()
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

    /// The connect options, which live as long as the controller.
    pub(crate) fn opts(&self) -> Options<'_> {
        let opts = ctrl_field!(self, opts);
        // SAFETY: the options of a controller outlive it (freed in its `free_ctrl`, or by the
        // fabrics core after a failed creation, when the controller is gone too).
        unsafe { Options::from_raw(opts) }
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

    /// Sets the submission queue size (0's based) the transport uses, as every fabrics
    /// transport does during set-up.
    pub(crate) fn set_sqsize(&self, sqsize: u16) {
        set_ctrl_field!(self, sqsize, sqsize)
    }

    pub(crate) fn queue_count(&self) -> u32 {
        ctrl_field!(self, queue_count)
    }

    /// Sets the number of queues, the admin queue included; the transport owns this count.
    pub(crate) fn set_queue_count(&self, count: u32) {
        set_ctrl_field!(self, queue_count, count)
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

    /// Sets the transfer limits the core applies to the block queues when it identifies the
    /// controller.
    pub(crate) fn set_limits(&self, max_hw_sectors: u32, max_segments: u32) {
        set_ctrl_field!(self, max_hw_sectors, max_hw_sectors);
        set_ctrl_field!(self, max_segments, max_segments);
        set_ctrl_field!(self, max_integrity_segments, 0);
    }

    /// Sets the NUMA node the core allocates for the controller on (a hint).
    pub(crate) fn set_numa_node(&self, node: i32) {
        set_ctrl_field!(self, numa_node, node)
    }

    /// Sets the reconnect attempt count the core shows (informational).
    pub(crate) fn set_nr_reconnects(&self, n: i32) {
        set_ctrl_field!(self, nr_reconnects, n)
    }

    /// The core's work item that sends the asynchronous event request.
    pub(crate) fn async_event_work(&self) -> &CoreWork {
        // SAFETY: alive, and `nvme_init_ctrl` initialized the item.
        unsafe { CoreWork::from_raw(core::ptr::addr_of_mut!((*self.as_ptr()).async_event_work)) }
    }

    /// The core's work item that deletes the controller.
    pub(crate) fn delete_work(&self) -> &CoreWork {
        // SAFETY: as above.
        unsafe { CoreWork::from_raw(core::ptr::addr_of_mut!((*self.as_ptr()).delete_work)) }
    }

    /// The reset work, which the controller wrapper binds to the transport's reset.
    pub(crate) fn reset_work(&self) -> &CoreWork {
        // SAFETY: alive; initialized before `nvme_init_ctrl`, as transports must.
        unsafe { CoreWork::from_raw(core::ptr::addr_of_mut!((*self.as_ptr()).reset_work)) }
    }

    /// Starts deleting the controller (asynchronously, on `nvme_delete_wq`); nothing if it is
    /// being deleted already.
    pub(crate) fn delete(&self) {
        // SAFETY: alive; -EBUSY (already deleting) needs no handling.
        unsafe { bindings::nvme_delete_ctrl(self.as_ptr()) };
    }

    /// Hands an asynchronous event's completion to the core.
    pub(crate) fn complete_async_event(&self, status: u16, result: u64) {
        let mut res = bindings::nvme_completion_nvme_result { u64_: result };
        // SAFETY: alive; the result is copied by the core.
        unsafe { bindings::nvme_complete_async_event(self.as_ptr(), status, &mut res) };
    }
}

/// Wraps the core functions that take only a live controller and have no precondition on its
/// queues.
macro_rules! core_calls {
    ($($(#[$m:meta])* $name:ident => $f:ident;)*) => {
        impl CoreCtrl {
            $(
                $(#[$m])*
                pub(crate) fn $name(&self) {
                    // SAFETY: alive (type invariant); the core function does its own locking
                    // and needs neither the admin nor the I/O queues.
                    unsafe { bindings::$f(self.as_ptr()) };
                }
            )*
        }
    };
}

core_calls! {
    /// Stops the keep-alive work (`nvme_stop_keep_alive`).
    stop_keep_alive => nvme_stop_keep_alive;
    /// Stops what the core runs for a live controller (`nvme_stop_ctrl`).
    stop => nvme_stop_ctrl;
    /// Stops in-band authentication (`nvme_auth_stop`).
    auth_stop => rsrdma_nvme_auth_stop;
}
