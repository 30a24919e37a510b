// SPDX-License-Identifier: GPL-2.0

//! The RDMA client: devices coming and going, and their ports' events. A device that appears
//! (or a port that comes back) lets controllers waiting to reconnect try at once; a device that
//! goes away is released by every controller on it, which keep reconnecting through another
//! device or this one when it returns; a port that goes down starts error recovery at once.

use crate::devices;
use crate::registry::Registry;
use crate::wrap::log::{log_err, log_info, Prefix};
use crate::wrap::nvme::State;
use crate::wrap::rdma::{Client, ClientRegistration, Device, DeviceId, EventWatch, PortHandler};
use crate::wrap::sync::Global;
use crate::wrap::vec::swap_remove;
use kernel::c_str;
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex};

/// The transport's RDMA client.
pub(crate) struct RdmaClient;

/// The client as registered with the RDMA core.
pub(crate) type Registration = ClientRegistration<RdmaClient>;

/// Registers the client; the RDMA core calls `add` for every existing device right away.
pub(crate) fn register() -> impl PinInit<Registration, Error> {
    Registration::new(c_str!("nvme_rsrdma"))
}

/// What port events of a watched device do.
pub(crate) struct PortEvents;

/// The port event watches of the devices present.
#[pin_data]
pub(crate) struct Watches {
    #[pin]
    list: Mutex<KVec<(DeviceId, Pin<KBox<EventWatch<PortEvents>>>)>>,
}

static WATCHES: Global<Watches> = Global::new();

impl Watches {
    /// Creates the module's watch list and publishes it.
    pub(crate) fn publish() -> Result {
        WATCHES.publish(Arc::pin_init(
            pin_init!(Watches {
                list <- kernel::new_mutex!(KVec::new(), "rsrdma_watches::list"),
            }),
            GFP_KERNEL,
        )?)
    }

    /// Withdraws the module's watch list (module unload, after the client is unregistered).
    pub(crate) fn withdraw() {
        drop(WATCHES.withdraw());
    }
}

impl Client for RdmaClient {
    fn add(dev: &Device) {
        log_info!(Prefix::NONE, "RDMA device {} added", dev.name());
        let watch = EventWatch::new(dev, PortEvents).and_then(|w| KBox::pin_init(w, GFP_KERNEL));
        match (watch, WATCHES.get()) {
            (Ok(w), Some(watches)) => {
                if watches.list.lock().push((dev.id(), w), GFP_KERNEL).is_err() {
                    log_err!(Prefix::NONE, "{}: cannot watch port events", dev.name());
                }
            }
            (Err(_), _) => log_err!(Prefix::NONE, "{}: cannot watch port events", dev.name()),
            (Ok(_), None) => {}
        }
        if devices::watch(dev).is_err() {
            log_err!(Prefix::NONE, "{}: cannot park CM ids on it", dev.name());
        }
        let Some(reg) = Registry::get() else { return };
        // A controller waiting for its device tries again now rather than at its next attempt.
        for ctrl in reg.all() {
            // A device at the address of one that was removed is a new one.
            ctrl.unblock_device(dev);
            ctrl.kick_reconnect();
        }
    }

    fn remove(dev: &Device) {
        // The watch goes first: from here ids on the device are destroyed instead of parked,
        // and the parked ones are released below.
        if let Some(watches) = WATCHES.get() {
            let mut list = watches.list.lock();
            if let Some(i) = list.iter().position(|(d, _)| *d == dev.id()) {
                // The watch unregisters on drop, outside the lock.
                let w = swap_remove(&mut list, i);
                drop(list);
                drop(w);
            }
        }
        let mut users = 0;
        if let Some(reg) = Registry::get() {
            for ctrl in reg.all() {
                // A controller that is recovering or connecting may have released its device
                // already and be about to pick one.
                let state = ctrl.core().state();
                if ctrl.device() == Some(dev.id())
                    || matches!(state, State::Connecting | State::Resetting)
                {
                    users += 1;
                    ctrl.device_removed(dev);
                }
            }
        }
        devices::unwatch(dev);
        log_info!(
            Prefix::NONE,
            "RDMA device {} removed ({} controllers released it)",
            dev.name(),
            users
        );
    }
}

impl PortHandler for PortEvents {
    fn port_changed(&self, dev: &Device, port: u32, active: bool) {
        let Some(reg) = Registry::get() else { return };
        if active {
            log_info!(Prefix::NONE, "{} port {} active", dev.name(), port);
            devices::release_parked_active();
            for ctrl in reg.all() {
                ctrl.kick_reconnect();
            }
        } else {
            log_info!(Prefix::NONE, "{} port {} down", dev.name(), port);
            // Idle connections would notice only at the next keep-alive: recover now, so that
            // fast_io_fail_tmo and ctrl_loss_tmo count from the loss.
            for ctrl in reg.all() {
                if ctrl.uses_port(dev, port) {
                    ctrl.error_recovery(format_args!("{} port {} down", dev.name(), port));
                }
            }
        }
    }
}
