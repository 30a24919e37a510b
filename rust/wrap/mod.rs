// SPDX-License-Identifier: GPL-2.0

//! The wrapper tier: safe abstractions over the C APIs the transport uses, in the manner of
//! the kernel crate's `rust/kernel/` (6.12's has none of these).
//!
//! Every `unsafe` block of the module, every raw binding and every C callback is in here. Each
//! type that owns a C object releases it on drop; each callback is turned into a call of a
//! trait the driver implements ([`nvme::ControllerOps`], [`rdma::CmHandler`],
//! [`rdma::QpHandler`], ...). The driver modules above use these types and are compiled with
//! `unsafe_code` forbidden (see the crate root).

#[path = "../bindings.rs"]
mod bindings;
pub(crate) mod debugfs;
pub(crate) mod errno;
pub(crate) mod log;
pub(crate) mod map_dev;
pub(crate) mod mem;
pub(crate) mod net;
pub(crate) mod nvme;
pub(crate) mod params;
pub(crate) mod peer_mem;
pub(crate) mod rdma;
pub(crate) mod sync;
pub(crate) mod vec;
pub(crate) mod work;
