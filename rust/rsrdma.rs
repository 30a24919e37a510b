// SPDX-License-Identifier: GPL-2.0

//! nvme_rsrdma: an NVMe over RDMA host transport written in Rust.
//!
//! The transport registers with the NVMe fabrics core as `rsrdma` (or as `rdma` with
//! `dropin=1`) and with the RDMA core as an `ib_client`.

use kernel::c_str;
use kernel::prelude::*;

mod bindings;
mod glue;
mod registration;

use glue::log_info;
use registration::{ClientRegistration, TransportRegistration};

module! {
    type: RsRdma,
    name: "nvme_rsrdma",
    author: "nvme-rsrdma developers",
    description: "NVMe over RDMA host transport in Rust (registered buffer pool, keyed SGLs)",
    license: "GPL",
    alias: ["nvme-rsrdma"],
}

struct RsRdma {
    // Dropped in declaration order: the transport goes first so no new controller can be
    // created once the RDMA client is being removed.
    _transport: Pin<KBox<TransportRegistration>>,
    _client: Pin<KBox<ClientRegistration>>,
}

impl kernel::Module for RsRdma {
    fn init(module: &'static ThisModule) -> Result<Self> {
        let name = if glue::dropin() { c_str!("rdma") } else { c_str!("rsrdma") };
        log_info!(core::ptr::null(), "loading, transport \"{}\"", name);
        let client = KBox::pin_init(ClientRegistration::new(), GFP_KERNEL)?;
        let transport = KBox::pin_init(TransportRegistration::new(name, module), GFP_KERNEL)?;
        log_info!(core::ptr::null(), "fabrics transport \"{}\" registered", name);
        Ok(RsRdma { _transport: transport, _client: client })
    }
}

impl Drop for RsRdma {
    fn drop(&mut self) {
        log_info!(core::ptr::null(), "unloading");
    }
}
