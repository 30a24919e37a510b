// SPDX-License-Identifier: GPL-2.0

//! Registration with the NVMe fabrics core (`nvmf_transport_ops`) and the RDMA core
//! (`ib_client`). Both objects must stay at a fixed address while registered, so they are
//! pinned and unregister themselves on drop.

use crate::bindings;
use crate::glue::log_info;
use core::ptr::addr_of_mut;
use kernel::error::to_result;
use kernel::init::pin_init_from_closure;
use kernel::c_str;
use kernel::prelude::*;
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
unsafe extern "C" fn create_ctrl(
    _dev: *mut bindings::device,
    _opts: *mut bindings::nvmf_ctrl_options,
) -> *mut bindings::nvme_ctrl {
    crate::glue::log_err!(core::ptr::null(), "create_ctrl: not implemented yet");
    Error::from_errno(-(kernel::bindings::EOPNOTSUPP as i32)).to_ptr()
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

fn device_name(dev: *mut bindings::ib_device) -> &'static CStr {
    // SAFETY: the RDMA core passes a registered device whose name outlives the callback.
    unsafe { CStr::from_char_ptr(bindings::rsrdma_ibdev_name(dev)) }
}

unsafe extern "C" fn device_add(dev: *mut bindings::ib_device) -> i32 {
    log_info!(core::ptr::null(), "RDMA device {} added", device_name(dev));
    0
}

unsafe extern "C" fn device_remove(dev: *mut bindings::ib_device, _client_data: *mut kernel::ffi::c_void) {
    log_info!(core::ptr::null(), "RDMA device {} removed", device_name(dev));
}
