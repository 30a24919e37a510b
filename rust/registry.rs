// SPDX-License-Identifier: GPL-2.0

//! The transport's controllers: their list, which the fabrics transport fills and the RDMA
//! client and module unload walk, and the module's debugfs directory they show in.

use crate::ctrl::RdmaCtrl;
use crate::wrap::debugfs::Dir;
use crate::wrap::log::{log_err, log_info, Prefix};
use crate::wrap::nvme::{CtrlList, CtrlRef};
use crate::wrap::sync::{msleep, Global};
use crate::wrap::work::Wq;
use kernel::c_str;
use kernel::prelude::*;
use kernel::sync::Arc;

/// The module's controllers and debugfs directory.
pub(crate) struct Registry {
    ctrls: Arc<CtrlList<RdmaCtrl>>,
    /// `/sys/kernel/debug/nvme_rsrdma`, removed when the last controller's directory is.
    debugfs: Arc<Dir>,
}

static REGISTRY: Global<Registry> = Global::new();

impl Registry {
    /// Creates the module's registry and publishes it.
    pub(crate) fn publish() -> Result {
        let registry = Registry {
            ctrls: Arc::pin_init(CtrlList::new(), GFP_KERNEL)?,
            debugfs: Dir::new(c_str!("nvme_rsrdma"), None)?,
        };
        REGISTRY.publish(Arc::new(registry, GFP_KERNEL)?)
    }

    /// The module's registry, while it is published.
    pub(crate) fn get() -> Option<Arc<Registry>> {
        REGISTRY.get()
    }

    /// Withdraws the module's registry (module unload, after every controller was freed).
    pub(crate) fn withdraw() {
        drop(REGISTRY.withdraw());
    }

    pub(crate) fn ctrls(&self) -> &Arc<CtrlList<RdmaCtrl>> {
        &self.ctrls
    }

    pub(crate) fn debugfs(&self) -> &Arc<Dir> {
        &self.debugfs
    }

    /// A reference to every listed controller (skipping those being freed); none when the
    /// room for the list cannot be allocated (logged).
    pub(crate) fn all(&self) -> KVec<CtrlRef<RdmaCtrl>> {
        self.ctrls.get_all().unwrap_or_else(|| {
            log_err!(Prefix::NONE, "out of memory listing the controllers");
            KVec::new()
        })
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
            let listed = match self.ctrls.get_all() {
                Some(ctrls) => {
                    for ctrl in ctrls {
                        ctrl.core().delete();
                    }
                    true
                }
                None => false,
            };
            Wq::Delete.flush();
            let alive = self.ctrls.alive();
            if alive == 0 {
                return;
            }
            if !logged {
                log_info!(
                    Prefix::NONE,
                    "waiting for {} controller(s) still referenced",
                    alive
                );
                logged = true;
            }
            if listed {
                // Then list them again, for a controller listed meanwhile.
                self.ctrls.wait_freed();
            } else {
                // Nothing was deleted, so nothing may be freed to wake us: retry the listing
                // in a while.
                msleep(100);
            }
        }
    }
}
