// SPDX-License-Identifier: GPL-2.0

//! The RDMA CM and verbs objects the transport uses, each owned by a Rust type whose `Drop`
//! releases it, and the callbacks of the RDMA core, each dispatched to a trait its owner
//! implements. 6.12's kernel crate has no RDMA abstractions.
//!
//! C headers: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h),
//! [`include/rdma/rdma_cm.h`](srctree/include/rdma/rdma_cm.h).

pub(crate) mod client;
pub(crate) mod cm;
pub(crate) mod cq;
pub(crate) mod device;
pub(crate) mod dma;
pub(crate) mod event;
pub(crate) mod mr;
pub(crate) mod qp;

pub(crate) use client::{Client, ClientRegistration};
pub(crate) use cm::{CmEvent, CmEventKind, CmHandler, CmId, CmQp, ConnParam, ParkedId};
pub(crate) use cq::Cq;
pub(crate) use device::{Device, DeviceId, DeviceRef};
pub(crate) use dma::{ChunkMaps, PageRange, MAX_PAGE_RANGES};
pub(crate) use event::{EventWatch, PortHandler};
pub(crate) use mr::{Access, MemoryRegion, Pd};
pub(crate) use qp::{MappedPages, Qp, QpCaps, QpEvent, QpHandler, SendData, Wc};
