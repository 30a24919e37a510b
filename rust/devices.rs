// SPDX-License-Identifier: GPL-2.0

//! The RDMA devices the transport watches, and the CM ids parked on them.
//!
//! A connection lost while its port is down keeps its CM id: destroying it would send a DREQ
//! through a port that cannot send (see `Device::port_active`). The id is parked here, detached
//! from its queue, and destroyed when its port comes back, its device goes, or the module
//! unloads.

use crate::wrap::log::{dbg_event, Prefix};
use crate::wrap::rdma::{Device, DeviceId, ParkedId};
use crate::wrap::sync::Global;
use crate::wrap::vec::swap_remove;
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex};

/// The watched devices and the parked ids.
#[pin_data]
pub(crate) struct Devices {
    /// Devices registered and not being removed (see [`park`]). Taken inside `parked`.
    #[pin]
    watched: Mutex<KVec<DeviceId>>,
    #[pin]
    parked: Mutex<KVec<ParkedId>>,
}

static DEVICES: Global<Devices> = Global::new();

impl Devices {
    /// Creates the module's set and publishes it.
    pub(crate) fn publish() -> Result {
        let devices = Arc::pin_init(
            pin_init!(Devices {
                watched <- kernel::new_mutex!(KVec::new(), "rsrdma_devices::watched"),
                parked <- kernel::new_mutex!(KVec::new(), "rsrdma_devices::parked"),
            }),
            GFP_KERNEL,
        )?;
        DEVICES.publish(devices)
    }

    /// Withdraws the module's set, releasing the ids still parked (module unload).
    pub(crate) fn withdraw() {
        if let Some(devices) = DEVICES.withdraw() {
            devices.release(|_| true);
        }
    }

    /// Destroys the parked ids `release` selects (each sends its DREQ now). Done under the
    /// lock: the handlers of parked ids return at once (they are detached), so the
    /// destruction, which waits for a running handler, cannot wait for this lock.
    fn release(&self, release: impl Fn(&ParkedId) -> bool) {
        let mut parked = self.parked.lock();
        let mut released = 0;
        let mut i = 0;
        while i < parked.len() {
            if release(&parked[i]) {
                drop(swap_remove(&mut parked, i));
                released += 1;
            } else {
                i += 1;
            }
        }
        if released != 0 {
            dbg_event!(Cm, Prefix::NONE, "released {} parked CM ids", released);
        }
    }
}

/// Watches `dev`: ids on it may be parked from now on.
pub(crate) fn watch(dev: &Device) -> Result {
    let Some(devices) = DEVICES.get() else {
        return Ok(());
    };
    let mut watched = devices.watched.lock();
    Ok(watched.push(dev.id(), GFP_KERNEL)?)
}

/// Stops watching `dev`, which is going away, and releases the ids parked on it. From here
/// [`park`] destroys ids on the device instead of parking them: the device's removal waits
/// for them, and releases the parked ones only once, from the RDMA client's `remove` (which
/// runs before the RDMA CM's).
pub(crate) fn unwatch(dev: &Device) {
    let Some(devices) = DEVICES.get() else {
        return;
    };
    {
        let mut watched = devices.watched.lock();
        if let Some(i) = watched.iter().position(|d| *d == dev.id()) {
            swap_remove(&mut watched, i);
        }
    }
    devices.release(|id| id.device() == Some(dev));
}

/// Keeps the CM id of a connection lost while its port is down (see the module
/// documentation); its QP is already gone.
///
/// An id on a device that is not watched (being removed) is destroyed instead. The check and
/// the push are under the parked lock, which [`unwatch`] takes after the device is no longer
/// watched, so an id is either released there or never parked. This covers a controller still
/// being created, which device removal does not reach through the controller list.
pub(crate) fn park(id: ParkedId) {
    let Some(devices) = DEVICES.get() else {
        drop(id);
        return;
    };
    let mut parked = devices.parked.lock();
    let watched = id
        .device()
        .is_some_and(|dev| devices.watched.lock().iter().any(|d| *d == dev.id()));
    if !watched {
        drop(parked);
        drop(id);
        dbg_event!(
            Cm,
            Prefix::NONE,
            "port down, device going: CM id destroyed, not parked"
        );
        return;
    }
    dbg_event!(Cm, Prefix::NONE, "port down: CM id parked, DREQ deferred");
    // On allocation failure `push` drops the id: its DREQ goes out now.
    let _ = parked.push(id, GFP_KERNEL);
}

/// Releases the parked ids whose port is up again.
pub(crate) fn release_parked_active() {
    if let Some(devices) = DEVICES.get() {
        devices.release(ParkedId::port_active);
    }
}
