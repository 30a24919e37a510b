// SPDX-License-Identifier: GPL-2.0

//! Registration with the NVMe fabrics core (`nvmf_transport_ops`) and the RDMA core
//! (`ib_client`). Both objects must stay at a fixed address while registered, so they are
//! pinned and unregister themselves on drop.

use crate::bindings;
use crate::ctrl::{self, RdmaCtrl};
use crate::glue::dbg_event;
use crate::glue::{log_err, log_info};
use crate::nvme::Options;
use crate::rdma::{CmId, Device, EventWatch};
use crate::stats::DebugDir;
use crate::work::Wq;
use core::ptr::{addr_of_mut, NonNull};
use core::sync::atomic::{AtomicPtr, Ordering};
use kernel::c_str;
use kernel::error::to_result;
use kernel::init::pin_init_from_closure;
use kernel::prelude::*;
use kernel::sync::{CondVar, Mutex};
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

// SAFETY: after registration the fabrics core only reads the ops: it finds them under its own
// lock and reads them on after taking a reference to the module (`try_module_get`), which keeps
// the registration (dropped at module unload) alive meanwhile. `Self` has no other state; the
// raw pointers inside point to `'static` data (name, module).
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
    // Room in the list first, so that a created controller is always listed: the fabrics core
    // creates controllers one at a time (under its `nvmf_dev_mutex`), so nothing takes this
    // room before `list` does.
    if reg.ctrls.lock().reserve(1, GFP_KERNEL).is_err() {
        log_err!(core::ptr::null(), "out of memory listing a new controller");
        return ENOMEM.to_ptr();
    }
    match RdmaCtrl::create(dev, opts, reg.ctrl_ops.get(), reg.debugfs.as_ptr()) {
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

/// A reference to a listed controller, taken under the registry lock (`get_all`); dropping it
/// puts the reference, which may free the controller.
struct CtrlHold(NonNull<RdmaCtrl>);

impl core::ops::Deref for CtrlHold {
    type Target = RdmaCtrl;

    fn deref(&self) -> &RdmaCtrl {
        // SAFETY: the reference this holds keeps the controller alive.
        unsafe { self.0.as_ref() }
    }
}

impl Drop for CtrlHold {
    fn drop(&mut self) {
        // Not under the registry lock: the last put frees the controller, which takes it.
        self.nvme().put();
    }
}

/// Removes element `i` of `v` and returns it, moving the last element into its place.
fn swap_remove<T>(v: &mut KVec<T>, i: usize) -> T {
    let last = v.len() - 1;
    v.swap(i, last);
    // SAFETY: the last element is read out as the length drops below it, so it is owned
    // exactly once, by the caller.
    unsafe {
        v.set_len(last);
        core::ptr::read(v.as_ptr().add(last))
    }
}

/// The transport's list of controllers, the controller operations handed to the core, the
/// RDMA devices it watches for port events, and the CM ids parked while their port is down.
#[pin_data]
pub(crate) struct Registry {
    #[pin]
    ctrls: Mutex<KVec<CtrlRef>>,
    #[pin]
    ctrl_ops: Opaque<bindings::nvme_ctrl_ops>,
    /// Devices registered and not being removed (see `park`). Taken inside `parked`.
    #[pin]
    watches: Mutex<KVec<(Device, Pin<KBox<EventWatch>>)>>,
    #[pin]
    parked: Mutex<KVec<CmId>>,
    /// Listed controllers not yet freed: they run module code until their `free_ctrl` returns.
    #[pin]
    alive: Mutex<usize>,
    /// Signalled when `alive` drops.
    #[pin]
    freed: CondVar,
    /// `/sys/kernel/debug/nvme_rsrdma`, removed last.
    debugfs: DebugDir,
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
            watches <- kernel::new_mutex!(KVec::new()),
            parked <- kernel::new_mutex!(KVec::new()),
            alive <- kernel::new_mutex!(0),
            freed <- kernel::new_condvar!(),
            debugfs: DebugDir::root(),
        }? Error)
    }

    /// Makes the registry reachable from the callbacks.
    pub(crate) fn publish(self: Pin<&Self>) {
        REGISTRY.store(&*self as *const Self as *mut Self, Ordering::Release);
    }

    fn list(&self, ctrl: &RdmaCtrl) {
        let mut ctrls = self.ctrls.lock();
        // Within the room `create_ctrl` reserved.
        if ctrls.push(CtrlRef(ctrl), GFP_KERNEL).is_ok() {
            ctrl.listed.store(true, Ordering::Release);
            *self.alive.lock() += 1;
        } else {
            log_err!(
                ctrl.nvme().as_ptr(),
                "controller not listed (out of memory)"
            );
        }
    }

    /// Takes a reference to every listed controller (skipping those being freed); none when
    /// the room for the list cannot be allocated (logged).
    fn get_all(&self) -> KVec<CtrlHold> {
        self.try_get_all().unwrap_or_default()
    }

    /// As `get_all`, but `None` when the room for the list cannot be allocated.
    fn try_get_all(&self) -> Option<KVec<CtrlHold>> {
        let ctrls = self.ctrls.lock();
        // Room first: a reference taken and then dropped under the lock could be the last
        // one, and freeing the controller takes the lock (`unlist`).
        let Ok(mut out) = KVec::with_capacity(ctrls.len(), GFP_KERNEL) else {
            log_err!(
                core::ptr::null(),
                "out of memory listing {} controllers",
                ctrls.len()
            );
            return None;
        };
        for c in ctrls.iter() {
            // SAFETY: listed controllers are alive until `unlist`, which needs the lock.
            let ctrl = unsafe { &*c.0 };
            if ctrl.nvme().tryget() {
                // Within the capacity reserved above: `push` does not allocate, nor fail
                // (which would drop the reference under the lock).
                let _ = out.push(CtrlHold(NonNull::from(ctrl)), GFP_KERNEL);
            }
        }
        Some(out)
    }

    /// Deletes every controller and waits for the deletions (module unload).
    ///
    /// Returns once every controller is freed: one may outlive its deletion while something
    /// still holds a reference (an open `/dev/nvme-fabrics` that created it, a deletion through
    /// sysfs still running in the writer's context), and its `free_ctrl` is module code.
    pub(crate) fn delete_all(&self) {
        let mut logged = false;
        loop {
            // The references go as each deletion is queued: a controller is freed only once
            // they are all dropped.
            let listed = match self.try_get_all() {
                Some(ctrls) => {
                    for ctrl in ctrls {
                        ctrl.nvme().delete();
                    }
                    true
                }
                None => false,
            };
            Wq::Delete.flush();
            let mut alive = self.alive.lock();
            if *alive == 0 {
                return;
            }
            if !logged {
                log_info!(
                    core::ptr::null(),
                    "waiting for {} controller(s) still referenced",
                    *alive
                );
                logged = true;
            }
            if listed {
                // Then list them again, for a controller listed meanwhile.
                self.freed.wait(&mut alive);
            } else {
                // Nothing was deleted, so nothing may be freed to wake us: retry the listing
                // in a while.
                drop(alive);
                // SAFETY: process context (module unload).
                unsafe { bindings::msleep(100) };
            }
        }
    }

    pub(crate) fn unpublish(&self) {
        REGISTRY.store(core::ptr::null_mut(), Ordering::Release);
    }

    /// Destroys the parked CM ids `release` selects (each sends its DREQ now). Done under the
    /// lock: the handlers of parked ids return at once (their context is detached), so
    /// `rdma_destroy_id` waiting for them cannot wait for this lock.
    fn release_parked(&self, release: impl Fn(&CmId) -> bool) {
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
            dbg_event!(Cm, core::ptr::null(), "released {} parked CM ids", released);
        }
    }

    /// Releases every parked CM id (module unload).
    pub(crate) fn release_all_parked(&self) {
        self.release_parked(|_| true);
    }
}

/// Keeps the CM id of a connection lost while its port is down: destroying it would send a
/// DREQ through a port that cannot send (see `rdma::Device::port_active`). Its QP is already
/// gone; the id is destroyed when the port comes back, its device goes, or the module unloads.
///
/// An id on a device that is being removed is destroyed instead: the device's removal waits
/// for it, and releases the parked ids only once, from our client's `remove` (which runs
/// before the RDMA CM's and first stops watching the device). The check and the push are
/// under the parked lock, which that release takes after the watch is gone, so an id is
/// either released there or never parked. This covers a controller still being created,
/// which device removal does not reach through the controller list.
pub(crate) fn park(id: CmId) {
    id.detach();
    let Some(reg) = registry() else {
        drop(id);
        return;
    };
    let mut parked = reg.parked.lock();
    let watched = id
        .device()
        .is_some_and(|dev| reg.watches.lock().iter().any(|(d, _)| *d == dev));
    if !watched {
        drop(parked);
        drop(id);
        dbg_event!(
            Cm,
            core::ptr::null(),
            "port down, device going: CM id destroyed, not parked"
        );
        return;
    }
    dbg_event!(
        Cm,
        core::ptr::null(),
        "port down: CM id parked, DREQ deferred"
    );
    // On allocation failure `push` drops the id: its DREQ goes out now.
    let _ = parked.push(id, GFP_KERNEL);
}

/// Releases the parked CM ids whose port is up again.
pub(crate) fn release_parked_active() {
    if let Some(reg) = registry() {
        reg.release_parked(|id| id.port_active());
    }
}

/// Removes a controller that is being freed from the list.
pub(crate) fn unlist(ctrl: &RdmaCtrl) {
    if let Some(reg) = registry() {
        let mut ctrls = reg.ctrls.lock();
        if let Some(i) = ctrls.iter().position(|c| core::ptr::eq(c.0, ctrl)) {
            swap_remove(&mut ctrls, i);
        }
    }
}

/// Counts a listed controller as freed: the last thing its `free_ctrl` does.
pub(crate) fn released() {
    if let Some(reg) = registry() {
        let mut alive = reg.alive.lock();
        *alive -= 1;
        reg.freed.notify_all();
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
    // SAFETY: the RDMA core passes a registered device; it stays registered until our client's
    // `remove` for it has returned, which drops the handles the transport keeps of it.
    let Some(dev) = (unsafe { Device::from_raw(dev) }) else {
        return 0;
    };
    log_info!(core::ptr::null(), "RDMA device {} added", dev.name());
    let Some(reg) = registry() else { return 0 };
    match KBox::pin_init(EventWatch::new(dev, port_event), GFP_KERNEL) {
        Ok(w) => {
            if reg.watches.lock().push((dev, w), GFP_KERNEL).is_err() {
                log_err!(
                    core::ptr::null(),
                    "{}: cannot watch port events",
                    dev.name()
                );
            }
        }
        Err(_) => log_err!(
            core::ptr::null(),
            "{}: cannot watch port events",
            dev.name()
        ),
    }
    // A controller waiting for its device tries again now rather than at its next attempt.
    for ctrl in reg.get_all() {
        // A device at the address of one that was removed is a new one.
        ctrl.unblock_device(dev);
        ctrl.kick_reconnect();
    }
    0
}

/// `ib_client::remove`: an RDMA device is going away. Everything on it is released before
/// this returns.
///
/// # Safety
///
/// Called by the kernel with the arguments its API documents for this callback.
unsafe extern "C" fn device_remove(
    dev: *mut bindings::ib_device,
    _client_data: *mut kernel::ffi::c_void,
) {
    // SAFETY: the RDMA core passes a registered device; it stays registered until our client's
    // `remove` for it has returned, which drops the handles the transport keeps of it.
    let Some(dev) = (unsafe { Device::from_raw(dev) }) else {
        return;
    };
    let mut users = 0;
    if let Some(reg) = registry() {
        // The watch goes first: from here `park` destroys ids on the device instead of
        // parking them, and the parked ones are released below.
        {
            let mut watches = reg.watches.lock();
            if let Some(i) = watches.iter().position(|(d, _)| *d == dev) {
                // The watch unregisters on drop, outside the lock.
                let w = swap_remove(&mut watches, i);
                drop(watches);
                drop(w);
            }
        }
        for ctrl in reg.get_all() {
            // A controller that is recovering or connecting may have released its device
            // already and be about to pick one.
            let state = ctrl.nvme().state();
            if ctrl.device() == Some(dev)
                || matches!(
                    state,
                    crate::nvme::State::Connecting | crate::nvme::State::Resetting
                )
            {
                users += 1;
                ctrl.device_removed(dev);
            }
        }
        reg.release_parked(|id| id.device() == Some(dev));
    }
    log_info!(
        core::ptr::null(),
        "RDMA device {} removed ({} controllers released it)",
        dev.name(),
        users
    );
}

/// Port events of a watched device: when a port comes back, the CM ids parked for it are
/// released and controllers waiting to reconnect try at once.
///
/// # Safety
///
/// Called by the RDMA core, in process context, with a valid event.
unsafe extern "C" fn port_event(h: *mut bindings::ib_event_handler, ev: *mut bindings::ib_event) {
    // SAFETY: valid for the call.
    let (event, dev, port) = unsafe { ((*ev).event, (*ev).device, (*ev).element.port_num) };
    // SAFETY: the RDMA core passes a registered device; it stays registered until our client's
    // `remove` for it has returned, which drops the handles the transport keeps of it.
    let Some(dev) = (unsafe { Device::from_raw(dev) }) else {
        return;
    };
    let active = match event {
        bindings::ib_event_type_IB_EVENT_PORT_ACTIVE => true,
        bindings::ib_event_type_IB_EVENT_PORT_ERR => false,
        _ => return,
    };
    // SAFETY: `h` is the handler of the `EventWatch` this function was registered with.
    if !unsafe { EventWatch::port_changed(h, port, active) } {
        return;
    }
    match event {
        bindings::ib_event_type_IB_EVENT_PORT_ACTIVE => {
            log_info!(core::ptr::null(), "{} port {} active", dev.name(), port);
            let Some(reg) = registry() else { return };
            reg.release_parked(|id| id.port_active());
            for ctrl in reg.get_all() {
                ctrl.kick_reconnect();
            }
        }
        bindings::ib_event_type_IB_EVENT_PORT_ERR => {
            log_info!(core::ptr::null(), "{} port {} down", dev.name(), port);
            // Idle connections would notice only at the next keep-alive: recover now, so that
            // fast_io_fail_tmo and ctrl_loss_tmo count from the loss.
            let Some(reg) = registry() else { return };
            for ctrl in reg.get_all() {
                if ctrl.uses_port(dev, port) {
                    ctrl.error_recovery(format_args!("{} port {} down", dev.name(), port));
                }
            }
        }
        _ => {}
    }
}
