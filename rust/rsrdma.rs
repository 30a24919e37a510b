// SPDX-License-Identifier: GPL-2.0

//! nvme_rsrdma: an NVMe over RDMA host transport written in Rust.
//!
//! The transport registers with the NVMe fabrics core as `rsrdma` (or as `rdma` with
//! `dropin=1`) and with the RDMA core as an `ib_client`.

#![recursion_limit = "256"]

use kernel::c_str;
use kernel::prelude::*;

mod bindings;
mod ctrl;
mod errno;
mod glue;
mod mq;
mod nvme;
mod options;
mod pool;
#[path = "proto/mod.rs"]
#[allow(dead_code, unreachable_pub)]
mod proto;
mod queue;
mod rdma;
mod registration;
mod request;
mod stats;
mod sync;
mod work;

use glue::log_info;
use registration::{ClientRegistration, Registry, TransportRegistration};

module! {
    type: RsRdma,
    name: "nvme_rsrdma",
    author: "nvme-rsrdma developers",
    description: "NVMe over RDMA host transport in Rust (registered buffer pool, keyed SGLs)",
    license: "GPL",
    alias: ["nvme-rsrdma"],
}

struct RsRdma {
    transport: Option<Pin<KBox<TransportRegistration>>>,
    client: Option<Pin<KBox<ClientRegistration>>>,
    registry: Pin<KBox<Registry>>,
}

impl kernel::Module for RsRdma {
    fn init(module: &'static ThisModule) -> Result<Self> {
        let name = if glue::dropin() {
            c_str!("rdma")
        } else {
            c_str!("rsrdma")
        };
        if glue::dropin() && glue::module_present(c_str!("nvme_rdma")) {
            // The fabrics core would pick whichever registered "rdma" first: refuse to shadow
            // the C transport silently.
            glue::log_err!(
                core::ptr::null(),
                "dropin=1: the C nvme_rdma transport is loaded and owns \"rdma\"; unload it first"
            );
            return Err(EBUSY);
        }
        log_info!(core::ptr::null(), "loading, transport \"{}\"", name);
        let registry = KBox::pin_init(Registry::new(name, module), GFP_KERNEL)?;
        registry.as_ref().publish();
        let client = KBox::pin_init(ClientRegistration::new(), GFP_KERNEL)
            .inspect_err(|_| registry.unpublish())?;
        let transport = match KBox::pin_init(TransportRegistration::new(name, module), GFP_KERNEL) {
            Ok(t) => t,
            Err(e) => {
                // The client first: its device removal needs the registry to unregister the
                // port event handlers.
                drop(client);
                registry.unpublish();
                return Err(e);
            }
        };
        log_info!(
            core::ptr::null(),
            "fabrics transport \"{}\" registered",
            name
        );
        Ok(RsRdma {
            transport: Some(transport),
            client: Some(client),
            registry,
        })
    }
}

impl Drop for RsRdma {
    fn drop(&mut self) {
        log_info!(core::ptr::null(), "unloading");
        // No new controllers, then delete the existing ones, then stop hearing about devices.
        drop(self.transport.take());
        self.registry.delete_all();
        drop(self.client.take());
        self.registry.release_all_parked();
        self.registry.unpublish();
        log_info!(core::ptr::null(), "unloaded");
    }
}
