// SPDX-License-Identifier: GPL-2.0

//! Registration with the NVMe fabrics core (`nvmf_transport_ops`) and the RDMA core
//! (`ib_client`). Both objects must stay at a fixed address while registered, so they are
//! pinned and unregister themselves on drop.

use crate::bindings;
use crate::ctrl::{self, RdmaCtrl};
use crate::glue::{log_err, log_info};
use crate::nvme::Options;
use crate::rdma::Device;
use core::ptr::addr_of_mut;
use core::sync::atomic::{AtomicPtr, Ordering};
use kernel::c_str;
use kernel::error::to_result;
use kernel::init::pin_init_from_closure;
use kernel::prelude::*;
use kernel::sync::Mutex;
use kernel::types::Opaque;

/// Connect options the transport accepts beyond the core's common ones, as the C rdma
/// transport does.
const ALLOWED_OPTS: u32 = bindings::NVMF_OPT_TRSVCID
    | bindings::NVMF_OPT_RECONNECT_DELAY
    | bindings::NVMF_OPT_HOST_TRADDR
    | bindings::NVMF_OPT_CTRL_LOSS_TMO
    | bindings::NVMF_OPT_NR_WRITE_QUEUES
    | bindings::NVMF_OPT_NR_POLL_QUEUES
    | bindings::NVMF_OPT_TOS;

/// The transport as registered with the fabrics core.
#[pin_data(PinnedDrop)]
pub(crate) struct TransportRegistration {
    #[pin]
    ops: Opaque<bindings::nvmf_transport_ops>,
}

impl TransportRegistration {
    /// Registers the transport under `name`.
    pub(crate) fn new(
        name: &'static CStr,
        module: &'static ThisModule,
    ) -> impl PinInit<Self, Error> {
        let init = move |slot: *mut Self| {
            // SAFETY: `slot` is valid for writes and pinned (pin-init contract); `ops` is its
            // only field.
            let ops = unsafe { Opaque::raw_get(addr_of_mut!((*slot).ops)) };
            let value = bindings::nvmf_transport_ops {
                module: module.as_ptr().cast(),
                name: name.as_char_ptr(),
                required_opts: bindings::NVMF_OPT_TRADDR as i32,
                allowed_opts: ALLOWED_OPTS as i32,
                create_ctrl: Some(create_ctrl),
                ..Default::default()
            };
            // SAFETY: `ops` points to pinned memory valid for writes; it is written before the
            // fabrics core sees it and stays in place until `drop` unregisters it.
            unsafe {
                ops.write(value);
                to_result(bindings::nvmf_register_transport(ops))
            }
        };
        // SAFETY: on success the only field is initialized and registered; on failure nothing
        // was registered and the slot needs no cleanup.
        unsafe { pin_init_from_closure(init) }
    }
}

// SAFETY: after registration the fabrics core only reads the ops under its own lock, and `Self`
// has no other state; the raw pointers inside point to `'static` data (name, module).
unsafe impl Send for TransportRegistration {}
// SAFETY: `&Self` gives no access to the ops at all.
unsafe impl Sync for TransportRegistration {}

#[pinned_drop]
impl PinnedDrop for TransportRegistration {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: registered in `new`, which is the only way to build `Self`.
        unsafe { bindings::nvmf_unregister_transport(self.ops.get()) };
    }
}

/// `create_ctrl` of the transport: called by the fabrics core for `nvme connect`.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn create_ctrl(
    dev: *mut bindings::device,
    opts: *mut bindings::nvmf_ctrl_options,
) -> *mut bindings::nvme_ctrl {
    let Some(reg) = registry() else {
        return ENODEV.to_ptr();
    };
    // SAFETY: the core passes options it owns until `create_ctrl` returns (and, on success,
    // until the controller frees them).
    let opts = unsafe { Options::from_raw(opts) };
    match RdmaCtrl::create(dev, opts, reg.ctrl_ops.get()) {
        Ok(ctrl) => {
            reg.list(ctrl);
            ctrl.nvme().as_ptr()
        }
        Err(e) => e.to_ptr(),
    }
}

/// A controller in the transport's list.
#[derive(Clone, Copy)]
struct CtrlRef(*const RdmaCtrl);

// SAFETY: controllers are shared between contexts by design; the pointer is only dereferenced
// under the registry lock or with a reference taken under it.
unsafe impl Send for CtrlRef {}

/// The transport's list of controllers and the controller operations handed to the core.
#[pin_data]
pub(crate) struct Registry {
    #[pin]
    ctrls: Mutex<KVec<CtrlRef>>,
    #[pin]
    ctrl_ops: Opaque<bindings::nvme_ctrl_ops>,
}

// SAFETY: the list is behind a mutex; the ops are immutable after initialization.
unsafe impl Send for Registry {}
// SAFETY: as above.
unsafe impl Sync for Registry {}

static REGISTRY: AtomicPtr<Registry> = AtomicPtr::new(core::ptr::null_mut());

fn registry() -> Option<&'static Registry> {
    // SAFETY: set while the module's `Registry` box is alive (published before the transport is
    // registered, cleared after it is unregistered and every controller is gone).
    unsafe { REGISTRY.load(Ordering::Acquire).as_ref() }
}

impl Registry {
    pub(crate) fn new(
        name: &'static CStr,
        module: &'static ThisModule,
    ) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            ctrls <- kernel::new_mutex!(KVec::new()),
            ctrl_ops: Opaque::new(ctrl::ctrl_ops(name, module.as_ptr().cast())),
        }? Error)
    }

    /// Makes the registry reachable from the callbacks.
    pub(crate) fn publish(self: Pin<&Self>) {
        REGISTRY.store(&*self as *const Self as *mut Self, Ordering::Release);
    }

    fn list(&self, ctrl: &RdmaCtrl) {
        let mut ctrls = self.ctrls.lock();
        if ctrls.push(CtrlRef(ctrl), GFP_KERNEL).is_ok() {
            ctrl.listed.store(true, Ordering::Release);
        }
    }

    /// Takes a reference to every listed controller (skipping those being freed).
    fn get_all(&self) -> KVec<CtrlRef> {
        let ctrls = self.ctrls.lock();
        let mut out = KVec::new();
        for c in ctrls.iter() {
            // SAFETY: listed controllers are alive until `unlist`, which needs the lock.
            let ctrl = unsafe { &*c.0 };
            if ctrl.nvme().tryget() && out.push(*c, GFP_KERNEL).is_err() {
                ctrl.nvme().put();
            }
        }
        out
    }

    /// Deletes every controller and waits for the deletions (module unload).
    pub(crate) fn delete_all(&self) {
        for c in self.get_all() {
            // SAFETY: referenced by `get_all`.
            let ctrl = unsafe { &*c.0 };
            ctrl.nvme().delete();
            ctrl.nvme().put();
        }
        // SAFETY: the core's delete workqueue.
        unsafe { bindings::rsrdma_flush_workqueue(bindings::nvme_delete_wq) };
        let left = self.ctrls.lock().len();
        if left != 0 {
            log_err!(
                core::ptr::null(),
                "{} controllers still referenced at unload",
                left
            );
        }
    }

    pub(crate) fn unpublish(&self) {
        REGISTRY.store(core::ptr::null_mut(), Ordering::Release);
    }
}

/// Removes a controller that is being freed from the list.
pub(crate) fn unlist(ctrl: &RdmaCtrl) {
    if let Some(reg) = registry() {
        let mut ctrls = reg.ctrls.lock();
        if let Some(i) = ctrls.iter().position(|c| core::ptr::eq(c.0, ctrl)) {
            let last = ctrls.len() - 1;
            ctrls.swap(i, last);
            // SAFETY: shrinking by one; `CtrlRef` is `Copy`, nothing to drop.
            unsafe { ctrls.set_len(last) };
        }
    }
}

/// Whether a controller with the same association (host NQN and ID, addresses, subsystem)
/// exists, for `duplicate_connect`.
pub(crate) fn existing_controller(opts: Options) -> bool {
    let Some(reg) = registry() else { return false };
    let ctrls = reg.ctrls.lock();
    ctrls.iter().any(|c| {
        // SAFETY: listed controllers are alive while the lock is held; `opts` is valid.
        unsafe { bindings::nvmf_ip_options_match((*c.0).nvme().as_ptr(), opts.as_ptr()) }
    })
}

/// The RDMA client: told when RDMA devices come and go.
#[pin_data(PinnedDrop)]
pub(crate) struct ClientRegistration {
    #[pin]
    client: Opaque<bindings::ib_client>,
}

impl ClientRegistration {
    /// Registers the client. The RDMA core calls `add` for every existing device right away.
    pub(crate) fn new() -> impl PinInit<Self, Error> {
        let init = move |slot: *mut Self| {
            // SAFETY: as in `TransportRegistration::new`.
            let client = unsafe { Opaque::raw_get(addr_of_mut!((*slot).client)) };
            let value = bindings::ib_client {
                name: c_str!("nvme_rsrdma").as_char_ptr(),
                add: Some(device_add),
                remove: Some(device_remove),
                ..Default::default()
            };
            // SAFETY: as in `TransportRegistration::new`.
            unsafe {
                client.write(value);
                to_result(bindings::ib_register_client(client))
            }
        };
        // SAFETY: as in `TransportRegistration::new`.
        unsafe { pin_init_from_closure(init) }
    }
}

// SAFETY: as for `TransportRegistration`: the RDMA core owns the client's list linkage, and
// `Self` exposes nothing through shared references.
unsafe impl Send for ClientRegistration {}
// SAFETY: as above.
unsafe impl Sync for ClientRegistration {}

#[pinned_drop]
impl PinnedDrop for ClientRegistration {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: registered in `new`, which is the only way to build `Self`.
        unsafe { bindings::ib_unregister_client(self.client.get()) };
    }
}

/// `ib_client::add`: an RDMA device appeared.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn device_add(dev: *mut bindings::ib_device) -> i32 {
    let Some(dev) = Device::from_raw(dev) else {
        return 0;
    };
    log_info!(core::ptr::null(), "RDMA device {} added", dev.name());
    // A controller waiting for its device tries again now rather than at its next attempt.
    if let Some(reg) = registry() {
        for c in reg.get_all() {
            // SAFETY: referenced by `get_all`.
            let ctrl = unsafe { &*c.0 };
            ctrl.block_device(None);
            ctrl.kick_reconnect();
            ctrl.nvme().put();
        }
    }
    0
}

/// `ib_client::remove`: an RDMA device is going away.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn device_remove(
    dev: *mut bindings::ib_device,
    _client_data: *mut kernel::ffi::c_void,
) {
    let Some(dev) = Device::from_raw(dev) else {
        return;
    };
    let mut users = 0;
    if let Some(reg) = registry() {
        for c in reg.get_all() {
            // SAFETY: referenced by `get_all`.
            let ctrl = unsafe { &*c.0 };
            if ctrl.device() == Some(dev) || ctrl.nvme().state() == crate::nvme::State::Connecting {
                users += 1;
                ctrl.device_removed(dev);
            }
            ctrl.nvme().put();
        }
    }
    log_info!(
        core::ptr::null(),
        "RDMA device {} removed ({} controllers released it)",
        dev.name(),
        users
    );
}
