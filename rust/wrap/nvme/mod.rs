// SPDX-License-Identifier: GPL-2.0

//! The NVMe host core and fabrics core as a transport uses them: its controller with the
//! core's callbacks, the requests of its tag sets, its connect options, and its registration.
//! 6.12's kernel crate has no NVMe abstractions, and the host headers are private to
//! `drivers/nvme/host`.
//!
//! C headers: [`drivers/nvme/host/nvme.h`](srctree/drivers/nvme/host/nvme.h),
//! [`drivers/nvme/host/fabrics.h`](srctree/drivers/nvme/host/fabrics.h).

mod core_ctrl;
mod ctrl;
mod fabrics;
mod options;
mod request;
mod tag_set;

pub(crate) use core_ctrl::{status_result, CoreCtrl, Failure, State, AQ_BLK_MQ_DEPTH};
pub(crate) use ctrl::{
    Controller, ControllerOps, CreateArgs, CtrlList, CtrlRef, IoQueues, NewCtrl, TimeoutAction,
    WorkId,
};
pub(crate) use fabrics::{OptMask, Transport, TransportRegistration};
pub(crate) use options::{Options, OptionsMut, HCTX_MAX_TYPES, HCTX_TYPE_DEFAULT, HCTX_TYPE_READ};
pub(crate) use request::{Dispatched, OwnedRq, Rq, Share, Submitting, TimedOutRq};
pub(crate) use tag_set::{SetKind, TagSet, Tags};
