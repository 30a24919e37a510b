// SPDX-License-Identifier: GPL-2.0

//! The connect options of a controller (`struct nvmf_ctrl_options`), parsed by the fabrics
//! core.
//!
//! C header: [`drivers/nvme/host/fabrics.h`](srctree/drivers/nvme/host/fabrics.h).

use super::super::bindings;
use super::CoreCtrl;
use core::marker::PhantomData;
use kernel::error::to_result;
use kernel::prelude::*;
use kernel::str::CStr;

/// The number of kinds of hardware queue (default, read, poll).
pub(crate) const HCTX_MAX_TYPES: usize = bindings::hctx_type_HCTX_MAX_TYPES as usize;
/// Index of the default queues in a split of I/O queues by kind.
pub(crate) const HCTX_TYPE_DEFAULT: usize = bindings::hctx_type_HCTX_TYPE_DEFAULT as usize;
/// Index of the read queues.
pub(crate) const HCTX_TYPE_READ: usize = bindings::hctx_type_HCTX_TYPE_READ as usize;

/// Reads one field of the options behind an [`Options`].
macro_rules! opts_field {
    ($opts:expr, $field:ident) => {{
        let opts: &Options<'_> = &$opts;
        // The core's sysfs attributes (`reconnect_delay`, `ctrl_loss_tmo`, `fast_io_fail_tmo`,
        // the DH-HMAC-CHAP keys) write some fields of the options at any time.
        // SAFETY: valid (`Options` invariant); only this field is read, in one volatile load,
        // never through a reference to the whole structure.
        unsafe { core::ptr::addr_of!((*opts.ptr).$field).read_volatile() }
    }};
}

/// The connect options of a controller: the fabrics core's while it creates the controller,
/// then the controller's (freed with it).
///
/// # Invariants
///
/// `ptr` is valid options for `'a`. Their strings are set when they are parsed; the core's
/// sysfs attributes write some other fields at any time (`reconnect_delay`, `ctrl_loss_tmo`,
/// `fast_io_fail_tmo`), so fields are read one at a time (`opts_field!`).
#[derive(Clone, Copy)]
pub(crate) struct Options<'a> {
    ptr: *mut bindings::nvmf_ctrl_options,
    _opts: PhantomData<&'a ()>,
}

impl<'a> Options<'a> {
    /// # Safety
    ///
    /// `ptr` is valid options for `'a`.
    pub(in crate::wrap) unsafe fn from_raw(ptr: *mut bindings::nvmf_ctrl_options) -> Self {
        // INVARIANT: per the contract.
        Self {
            ptr,
            _opts: PhantomData,
        }
    }

    pub(in crate::wrap) fn as_ptr(self) -> *mut bindings::nvmf_ctrl_options {
        self.ptr
    }

    fn str_opt(&self, p: *mut kernel::ffi::c_char) -> Option<&'a CStr> {
        if p.is_null() {
            None
        } else {
            // SAFETY: option strings are NUL terminated, set at parse time, and live with the
            // options (type invariant).
            Some(unsafe { CStr::from_char_ptr(p) })
        }
    }

    pub(crate) fn traddr(&self) -> Option<&'a CStr> {
        self.str_opt(opts_field!(self, traddr))
    }

    pub(crate) fn trsvcid(&self) -> Option<&'a CStr> {
        self.str_opt(opts_field!(self, trsvcid))
    }

    pub(crate) fn subsysnqn(&self) -> Option<&'a CStr> {
        self.str_opt(opts_field!(self, subsysnqn))
    }

    pub(crate) fn host_traddr(&self) -> Option<&'a CStr> {
        self.str_opt(opts_field!(self, host_traddr))
    }

    pub(crate) fn hostnqn(&self) -> Option<&'a CStr> {
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

    /// How `count` granted I/O queues are split into default, read and poll queues, by the
    /// counts asked for (`nvmf_set_io_queues`).
    pub(crate) fn io_queue_split(&self, count: u32) -> [u32; HCTX_MAX_TYPES] {
        let mut io_queues = [0u32; HCTX_MAX_TYPES];
        // SAFETY: valid options (type invariant) and an array of HCTX_MAX_TYPES entries.
        unsafe { bindings::nvmf_set_io_queues(self.ptr, count, io_queues.as_mut_ptr()) };
        io_queues
    }

    /// Whether `ctrl` has the association these options ask for (host NQN and ID, addresses,
    /// subsystem): `nvmf_ip_options_match`, for `duplicate_connect`.
    pub(crate) fn same_association(&self, ctrl: &CoreCtrl) -> bool {
        // SAFETY: a live controller and valid options (invariants of both).
        unsafe { bindings::nvmf_ip_options_match(ctrl.as_ptr(), self.ptr) }
    }
}

/// The connect options while the transport's `create_ctrl` owns them, before any controller
/// uses them: the transport may still fill in defaults.
///
/// # Invariants
///
/// No one else reads or writes the options while this lives.
pub(crate) struct OptionsMut<'a>(Options<'a>);

impl<'a> core::ops::Deref for OptionsMut<'a> {
    type Target = Options<'a>;

    fn deref(&self) -> &Options<'a> {
        &self.0
    }
}

impl<'a> OptionsMut<'a> {
    /// # Safety
    ///
    /// `ptr` is valid options for `'a`, owned by the caller: `create_ctrl`'s.
    pub(in crate::wrap) unsafe fn from_raw(ptr: *mut bindings::nvmf_ctrl_options) -> Self {
        // SAFETY: per the contract. INVARIANT: owned by the caller, `create_ctrl`.
        Self(unsafe { Options::from_raw(ptr) })
    }

    /// Gives the controller `n` dedicated write queues, as `nr_write_queues=n` would, unless the
    /// user set that option.
    pub(crate) fn default_write_queues(&self, n: u32) {
        if opts_field!(self, mask) & bindings::NVMF_OPT_NR_WRITE_QUEUES == 0 {
            // SAFETY: valid options, which the transport's `create_ctrl` owns (type invariant).
            unsafe { (*self.0.ptr).nr_write_queues = n };
        }
    }

    /// Limits the write and poll queue counts to `cpus`, as the core limits `nr_io_queues`
    /// when it parses it: `nvmf_set_io_queues` hands the granted queues out by the counts
    /// asked for, and a write queue count above the CPUs would take the poll queues' share and
    /// leave hardware queues no CPU maps to (whose Connect then fails with `EXDEV`).
    pub(crate) fn limit_queue_counts(&self, cpus: u32) {
        // SAFETY: valid options, which the transport's `create_ctrl` owns (type invariant).
        unsafe {
            (*self.0.ptr).nr_write_queues = (*self.0.ptr).nr_write_queues.min(cpus);
            (*self.0.ptr).nr_poll_queues = (*self.0.ptr).nr_poll_queues.min(cpus);
        }
    }

    /// Lowers the default I/O queue count to `n`.
    pub(crate) fn limit_io_queues(&self, n: u32) {
        // SAFETY: valid options, which the transport's `create_ctrl` owns (type invariant).
        unsafe { (*self.0.ptr).nr_io_queues = (*self.0.ptr).nr_io_queues.min(n) };
    }

    /// Sets trsvcid to the NVMe/RDMA port when the user gave none.
    pub(crate) fn default_trsvcid(&self, port: &CStr) -> Result {
        // SAFETY: valid options; the glue allocates the string with kmalloc, as the core frees
        // it with the options.
        to_result(unsafe { bindings::rsrdma_opts_default_trsvcid(self.0.ptr, port.as_char_ptr()) })
    }
}
