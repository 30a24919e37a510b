// SPDX-License-Identifier: GPL-2.0

//! Registration of a transport with the NVMe fabrics core (`nvmf_register_transport`).
//!
//! C header: [`drivers/nvme/host/fabrics.h`](srctree/drivers/nvme/host/fabrics.h).

use super::super::bindings;
use super::ctrl::{ControllerOps, CreateArgs, NewCtrl};
use super::options::OptionsMut;
use core::marker::PhantomData;
use core::ptr::addr_of_mut;
use kernel::error::to_result;
use kernel::init::pin_init_from_closure;
use kernel::prelude::*;
use kernel::str::CStr;
use kernel::types::Opaque;

/// Connect options (`NVMF_OPT_*`), as masks.
#[derive(Clone, Copy)]
pub(crate) struct OptMask(u32);

impl OptMask {
    pub(crate) const TRADDR: Self = Self(bindings::NVMF_OPT_TRADDR);
    pub(crate) const TRSVCID: Self = Self(bindings::NVMF_OPT_TRSVCID);
    pub(crate) const RECONNECT_DELAY: Self = Self(bindings::NVMF_OPT_RECONNECT_DELAY);
    pub(crate) const HOST_TRADDR: Self = Self(bindings::NVMF_OPT_HOST_TRADDR);
    pub(crate) const CTRL_LOSS_TMO: Self = Self(bindings::NVMF_OPT_CTRL_LOSS_TMO);
    pub(crate) const NR_WRITE_QUEUES: Self = Self(bindings::NVMF_OPT_NR_WRITE_QUEUES);
    pub(crate) const NR_POLL_QUEUES: Self = Self(bindings::NVMF_OPT_NR_POLL_QUEUES);
    pub(crate) const TOS: Self = Self(bindings::NVMF_OPT_TOS);

    pub(crate) const fn or(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
}

/// A fabrics transport: creates controllers for `nvme connect`.
pub(crate) trait Transport: ControllerOps {
    /// Creates and connects a controller for `args` (`nvmf_transport_ops::create_ctrl`).
    fn create_ctrl(args: CreateArgs<'_>) -> Result<NewCtrl<Self>>;
}

/// A transport registered with the fabrics core; unregistered on drop.
///
/// # Invariants
///
/// `ops` is registered, with [`create_ctrl::<T>`] and this module as its owner, from
/// initialization until `drop`.
#[pin_data(PinnedDrop)]
pub(crate) struct TransportRegistration<T: Transport> {
    #[pin]
    ops: Opaque<bindings::nvmf_transport_ops>,
    _transport: PhantomData<T>,
}

// SAFETY: after registration the fabrics core only reads the ops: it finds them under its own
// lock and reads them on after taking a reference to the module (`try_module_get`), whose
// unload drops the registration. `Self` has no other state; the raw pointers inside point to
// `'static` data (name, module).
unsafe impl<T: Transport> Send for TransportRegistration<T> {}
// SAFETY: `&Self` gives no access to the ops at all.
unsafe impl<T: Transport> Sync for TransportRegistration<T> {}

impl<T: Transport> TransportRegistration<T> {
    /// Registers transport `name` of this module, which requires the options of `required`
    /// and allows those of `allowed` beyond the core's common ones.
    pub(crate) fn new(
        name: &'static CStr,
        required: OptMask,
        allowed: OptMask,
    ) -> impl PinInit<Self, Error> {
        let init = move |slot: *mut Self| {
            // SAFETY: `slot` is valid for writes and pinned (pin-init contract).
            let ops = unsafe { Opaque::raw_get(addr_of_mut!((*slot).ops)) };
            let value = bindings::nvmf_transport_ops {
                module: crate::THIS_MODULE.as_ptr().cast(),
                name: name.as_char_ptr(),
                required_opts: required.0 as i32,
                allowed_opts: allowed.0 as i32,
                create_ctrl: Some(create_ctrl::<T>),
                ..Default::default()
            };
            // SAFETY: `ops` points to pinned memory valid for writes; it is written before the
            // fabrics core sees it and stays in place until `drop` unregisters it. The other
            // field is a zero-sized marker.
            unsafe {
                ops.write(value);
                to_result(bindings::nvmf_register_transport(ops))
            }
        };
        // SAFETY: on success the ops are initialized and registered (type invariant); on
        // failure nothing was registered and the slot needs no cleanup.
        unsafe { pin_init_from_closure(init) }
    }
}

#[pinned_drop]
impl<T: Transport> PinnedDrop for TransportRegistration<T> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: registered since initialization (type invariant).
        unsafe { bindings::nvmf_unregister_transport(self.ops.get()) };
    }
}

/// `nvmf_transport_ops::create_ctrl`: called by the fabrics core for `nvme connect`.
///
/// # Safety
///
/// Called by the fabrics core with its device and the options it parsed, which it owns until
/// this returns (and, on success, the controller until it frees them).
unsafe extern "C" fn create_ctrl<T: Transport>(
    dev: *mut bindings::device,
    opts: *mut bindings::nvmf_ctrl_options,
) -> *mut bindings::nvme_ctrl {
    let args = CreateArgs {
        dev,
        // SAFETY: per the contract; `create_ctrl` owns them for the call.
        opts: unsafe { OptionsMut::from_raw(opts) },
    };
    match T::create_ctrl(args) {
        Ok(ctrl) => ctrl.into_core(),
        Err(e) => e.to_ptr(),
    }
}
