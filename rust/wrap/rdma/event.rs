// SPDX-License-Identifier: GPL-2.0

//! Port events of an RDMA device (`ib_register_event_handler`), reported as changes.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).

use super::super::bindings;
use super::device::{Device, DeviceRef};
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::types::Opaque;

/// What the owner of an [`EventWatch`] does when a port of the device changes state. Runs in
/// process context (the RDMA core's event work).
pub(crate) trait PortHandler: Send + Sync + 'static {
    fn port_changed(&self, dev: &Device, port: u32, active: bool);
}

/// Port events of one RDMA device delivered to a handler, from creation until drop, each
/// state change once: soft-RoCE reports a port coming up twice.
///
/// # Invariants
///
/// `handler` is registered with the RDMA core for `dev` (held) with [`event_handler::<H>`],
/// from initialization until `drop` unregisters it.
#[pin_data(PinnedDrop)]
pub(crate) struct EventWatch<H: PortHandler> {
    #[pin]
    handler: Opaque<bindings::ib_event_handler>,
    /// The ports last reported down, one bit per port number below 64. Starts from the ports'
    /// state when the watch begins, so that a device added with a port down reports that port
    /// coming up.
    ports_down: AtomicU64,
    dev: DeviceRef,
    data: H,
}

// SAFETY: the RDMA core owns the list linkage; the rest is an atomic, a device reference and
// `H`, which are `Send` and `Sync`.
unsafe impl<H: PortHandler> Send for EventWatch<H> {}
// SAFETY: as above.
unsafe impl<H: PortHandler> Sync for EventWatch<H> {}

impl<H: PortHandler> EventWatch<H> {
    /// Watches the ports of `dev` for `data`; `ENODEV` if the device is going away.
    pub(crate) fn new(dev: &Device, data: H) -> Result<impl PinInit<Self, Error>> {
        let dev = dev.get().ok_or(ENODEV)?;
        let ptr = dev.as_ptr();
        Ok(try_pin_init!(Self {
            // Set before the handler is registered: an event may be delivered at once. An event
            // the driver raised before this query brings the state read here, and is taken as
            // a repeat; only a port changing between the query and the registration goes
            // unseen, until its next change.
            ports_down: AtomicU64::new(dev.ports_down()),
            dev,
            data,
            // SAFETY: the handler is initialized in place, then registered (last, once the
            // other fields are set); it stays pinned until `drop` unregisters it, and the
            // device is held until then.
            handler <- Opaque::ffi_init(move |h: *mut bindings::ib_event_handler| unsafe {
                h.write(bindings::ib_event_handler {
                    device: ptr,
                    handler: Some(event_handler::<H>),
                    ..Default::default()
                });
                bindings::ib_register_event_handler(h);
            }),
        }? Error))
    }

    /// Records the state of port `port`; false if it is the state already known. Ports from
    /// 64 up are not tracked: every event of theirs counts.
    fn port_changed(&self, port: u32, active: bool) -> bool {
        let Some(bit) = 1u64.checked_shl(port) else {
            return true;
        };
        if active {
            self.ports_down.fetch_and(!bit, Ordering::AcqRel) & bit != 0
        } else {
            self.ports_down.fetch_or(bit, Ordering::AcqRel) & bit == 0
        }
    }
}

#[pinned_drop]
impl<H: PortHandler> PinnedDrop for EventWatch<H> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: registered since initialization (type invariant); unregistering waits for
        // running handlers.
        unsafe { bindings::ib_unregister_event_handler(self.handler.get()) };
    }
}

/// The event handler of every [`EventWatch<H>`].
///
/// # Safety
///
/// Called by the RDMA core, in process context, with the handler of a live `EventWatch<H>`
/// and a valid event.
unsafe extern "C" fn event_handler<H: PortHandler>(
    h: *mut bindings::ib_event_handler,
    ev: *mut bindings::ib_event,
) {
    // SAFETY: per the contract, `h` is the `handler` field of an `EventWatch<H>`, alive until
    // its unregistration, which waits for this call.
    let watch = unsafe { &*kernel::container_of!(h, EventWatch<H>, handler) };
    // SAFETY: valid for the call.
    let (event, port) = unsafe { ((*ev).event, (*ev).element.port_num) };
    let active = match event {
        bindings::ib_event_type_IB_EVENT_PORT_ACTIVE => true,
        bindings::ib_event_type_IB_EVENT_PORT_ERR => false,
        _ => return,
    };
    if watch.port_changed(port, active) {
        watch.data.port_changed(&watch.dev, port, active);
    }
}
