// SPDX-License-Identifier: GPL-2.0

//! Pure logic of the NVMe/RDMA host transport.
//!
//! Everything here uses `core` only: no allocation, no `unsafe`, no
//! floating point, and no panics on any input (wire data is decoded into
//! `Option`/`Result`). The same files are built into the kernel module and,
//! unchanged, into the host crate under `tests/host`, which runs the unit
//! tests with `cargo test`.
//!
//! - [`addr`]: transport addresses as the log shows them.
//! - [`sgl`]: NVMe SGL descriptors (keyed and in-capsule).
//! - [`capsule`]: command (SQE) and completion (CQE) capsule helpers.
//! - [`cm`]: RDMA CM private data of the NVMe/RDMA transport binding.
//! - [`pool`]: layout of the registered buffer pool and its slots.
//! - [`buddy`]: the buddy allocator of the pool's large areas.
//! - [`reconnect`]: the reconnect policy.
//! - [`spread`]: command identifiers of commands sent on another queue than their own.

pub mod addr;
pub mod buddy;
pub mod capsule;
pub mod cm;
pub mod pool;
pub mod reconnect;
pub mod sgl;
pub mod spread;
