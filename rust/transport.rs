// SPDX-License-Identifier: GPL-2.0

//! The fabrics transport: `nvme connect -t rsrdma` (or `-t rdma` with `dropin=1`) creates a
//! controller here.

use crate::ctrl::RdmaCtrl;
use crate::registry::Registry;
use crate::wrap::log::{log_err, Prefix};
use crate::wrap::nvme::{CreateArgs, NewCtrl, OptMask, Transport, TransportRegistration};
use crate::wrap::params;
use kernel::c_str;
use kernel::prelude::*;
use kernel::str::CStr;

/// Connect options the transport accepts beyond the core's common ones, as the C rdma
/// transport does.
const ALLOWED_OPTS: OptMask = OptMask::TRSVCID
    .or(OptMask::RECONNECT_DELAY)
    .or(OptMask::HOST_TRADDR)
    .or(OptMask::CTRL_LOSS_TMO)
    .or(OptMask::NR_WRITE_QUEUES)
    .or(OptMask::NR_POLL_QUEUES)
    .or(OptMask::TOS);

/// The transport as registered with the fabrics core.
pub(crate) type Registration = TransportRegistration<RdmaCtrl>;

/// The transport's name: "rsrdma", or "rdma" in drop-in mode.
pub(crate) fn name() -> &'static CStr {
    if params::dropin() {
        c_str!("rdma")
    } else {
        c_str!("rsrdma")
    }
}

/// Registers the transport.
pub(crate) fn register() -> impl PinInit<Registration, Error> {
    Registration::new(name(), OptMask::TRADDR, ALLOWED_OPTS)
}

impl Transport for RdmaCtrl {
    fn create_ctrl(args: CreateArgs<'_>) -> Result<NewCtrl<Self>> {
        let reg = Registry::get().ok_or(ENODEV)?;
        // Room in the list first, so that a created controller is always listed: the fabrics
        // core creates controllers one at a time (under its `nvmf_dev_mutex`), so nothing takes
        // this room before the controller is added.
        reg.ctrls().reserve().inspect_err(|_| {
            log_err!(Prefix::NONE, "out of memory listing a new controller");
        })?;
        let ctrl = RdmaCtrl::create(
            &args,
            name(),
            reg.debugfs(),
            |opts| reg.ctrls().any(|c| opts.same_association(c.core())),
            |opts| {
                let nqn = opts.subsysnqn()?;
                reg.all()
                    .iter()
                    .filter(|c| c.core().subsysnqn().as_bytes() == nqn.as_bytes())
                    .find_map(|c| c.area().cloned())
            },
        )?;
        if reg.ctrls().add(&ctrl).is_err() {
            log_err!(ctrl.core(), "controller not listed");
        }
        Ok(ctrl)
    }
}
