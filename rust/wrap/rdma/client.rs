// SPDX-License-Identifier: GPL-2.0

//! An RDMA client (`ib_register_client`): told when RDMA devices come and go.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).

use super::super::bindings;
use super::device::Device;
use core::marker::PhantomData;
use core::ptr::addr_of_mut;
use kernel::error::to_result;
use kernel::init::pin_init_from_closure;
use kernel::prelude::*;
use kernel::str::CStr;
use kernel::types::Opaque;

/// What an RDMA client does when devices come and go. Both run in process context; the RDMA
/// core calls `add` for every device present when the client registers, and `remove` for every
/// device left when it unregisters.
pub(crate) trait Client: 'static {
    /// `dev` was registered.
    fn add(dev: &Device);
    /// `dev` is going away: everything on it is released before this returns (its
    /// unregistration then waits for the device references left).
    fn remove(dev: &Device);
}

/// A registered RDMA client; unregistered on drop (which calls `remove` for every device).
///
/// # Invariants
///
/// `client` is registered with [`add::<T>`] and [`remove::<T>`] from initialization until
/// `drop`.
#[pin_data(PinnedDrop)]
pub(crate) struct ClientRegistration<T: Client> {
    #[pin]
    client: Opaque<bindings::ib_client>,
    _client: PhantomData<T>,
}

// SAFETY: the RDMA core owns the client's list linkage; `Self` exposes nothing through shared
// references.
unsafe impl<T: Client> Send for ClientRegistration<T> {}
// SAFETY: as above.
unsafe impl<T: Client> Sync for ClientRegistration<T> {}

impl<T: Client> ClientRegistration<T> {
    /// Registers client `name`; the RDMA core calls `add` for every existing device right away.
    pub(crate) fn new(name: &'static CStr) -> impl PinInit<Self, Error> {
        let init = move |slot: *mut Self| {
            // SAFETY: `slot` is valid for writes and pinned (pin-init contract).
            let client = unsafe { Opaque::raw_get(addr_of_mut!((*slot).client)) };
            let value = bindings::ib_client {
                name: name.as_char_ptr(),
                add: Some(add::<T>),
                remove: Some(remove::<T>),
                ..Default::default()
            };
            // SAFETY: `client` points to pinned memory valid for writes; it is written before
            // the RDMA core sees it and stays in place until `drop` unregisters it. The other
            // field is a zero-sized marker.
            unsafe {
                client.write(value);
                to_result(bindings::ib_register_client(client))
            }
        };
        // SAFETY: on success the client is initialized and registered (type invariant); on
        // failure nothing was registered and the slot needs no cleanup.
        unsafe { pin_init_from_closure(init) }
    }
}

#[pinned_drop]
impl<T: Client> PinnedDrop for ClientRegistration<T> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: registered since initialization (type invariant); unregistering waits for
        // running callbacks.
        unsafe { bindings::ib_unregister_client(self.client.get()) };
    }
}

/// `ib_client::add`.
///
/// # Safety
///
/// Called by the RDMA core with a registered device.
unsafe extern "C" fn add<T: Client>(dev: *mut bindings::ib_device) -> i32 {
    // SAFETY: the device stays registered until the client's `remove` for it has returned.
    if let Some(dev) = unsafe { Device::from_raw(dev) } {
        T::add(dev);
    }
    0
}

/// `ib_client::remove`.
///
/// # Safety
///
/// Called by the RDMA core with a device being removed, still registered during the call.
unsafe extern "C" fn remove<T: Client>(
    dev: *mut bindings::ib_device,
    _data: *mut kernel::ffi::c_void,
) {
    // SAFETY: per the contract.
    if let Some(dev) = unsafe { Device::from_raw(dev) } {
        T::remove(dev);
    }
}
