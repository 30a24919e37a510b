// SPDX-License-Identifier: GPL-2.0

//! nvme_rsrdma: an NVMe over RDMA host transport written in Rust.
//!
//! The transport registers with the NVMe fabrics core as `rsrdma` (or as `rdma` with
//! `dropin=1`) and with the RDMA core as a client.
//!
//! Two tiers, as `drivers/block/rnull.rs` sits on `rust/kernel/block/mq/`: the wrapper tier
//! ([`wrap`]) holds every binding, C callback and `unsafe` block, behind safe types; the driver
//! modules below it are safe Rust, which the compiler keeps that way (`unsafe_code` is
//! forbidden in each). Pure logic is in `proto`, shared with the host unit tests.

#![recursion_limit = "256"]

use kernel::c_str;
use kernel::prelude::*;

// The pure logic is a public library on the host (`tests/host`), hence its `pub` items.
#[path = "proto/mod.rs"]
#[allow(unreachable_pub)]
mod proto;
mod wrap;

#[forbid(unsafe_code)]
mod area;
#[forbid(unsafe_code)]
mod client;
#[forbid(unsafe_code)]
mod clock;
#[forbid(unsafe_code)]
mod ctrl;
#[forbid(unsafe_code)]
mod devices;
#[forbid(unsafe_code)]
mod options;
#[forbid(unsafe_code)]
mod peer;
#[forbid(unsafe_code)]
mod pool;
#[forbid(unsafe_code)]
mod queue;
#[forbid(unsafe_code)]
mod registry;
#[forbid(unsafe_code)]
mod request;
#[forbid(unsafe_code)]
mod stats;
#[forbid(unsafe_code)]
mod stats_file;
#[forbid(unsafe_code)]
mod transport;

use crate::client::Watches;
use crate::devices::Devices;
use crate::peer::Providers;
use crate::registry::Registry;
use crate::wrap::log::{log_err, log_info, Prefix};
use crate::wrap::params;

module! {
    type: RsRdma,
    name: "nvme_rsrdma",
    author: "nvme-rsrdma developers",
    description: "NVMe over RDMA host transport in Rust (registered buffer pool, keyed SGLs)",
    license: "GPL",
    alias: ["nvme-rsrdma"],
}

struct RsRdma {
    transport: Option<Pin<KBox<transport::Registration>>>,
    client: Option<Pin<KBox<client::Registration>>>,
}

/// Withdraws what module init published, last first.
fn withdraw_all() {
    Devices::withdraw();
    Watches::withdraw();
    Providers::withdraw();
    Registry::withdraw();
}

impl kernel::Module for RsRdma {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let name = transport::name();
        if params::dropin() && params::module_present(c_str!("nvme_rdma")) {
            // The fabrics core would pick whichever registered "rdma" first: refuse to shadow
            // the C transport silently.
            log_err!(
                Prefix::NONE,
                "dropin=1: the C nvme_rdma transport is loaded and owns \"rdma\"; unload it first"
            );
            return Err(EBUSY);
        }
        log_info!(Prefix::NONE, "loading, transport \"{}\"", name);
        let published = Registry::publish()
            .and_then(|()| Providers::publish())
            .and_then(|()| Watches::publish())
            .and_then(|()| Devices::publish());
        if let Err(e) = published {
            withdraw_all();
            return Err(e);
        }
        let client =
            KBox::pin_init(client::register(), GFP_KERNEL).inspect_err(|_| withdraw_all())?;
        let transport = match KBox::pin_init(transport::register(), GFP_KERNEL) {
            Ok(t) => t,
            Err(e) => {
                // The client first: its device removal needs the registry and the devices.
                drop(client);
                withdraw_all();
                return Err(e);
            }
        };
        log_info!(Prefix::NONE, "fabrics transport \"{}\" registered", name);
        Ok(RsRdma {
            transport: Some(transport),
            client: Some(client),
        })
    }
}

impl Drop for RsRdma {
    fn drop(&mut self) {
        log_info!(Prefix::NONE, "unloading");
        // No new controllers, then delete the existing ones, then stop hearing about devices.
        drop(self.transport.take());
        if let Some(reg) = Registry::get() {
            reg.delete_all();
        }
        drop(self.client.take());
        withdraw_all();
        log_info!(Prefix::NONE, "unloaded");
    }
}
