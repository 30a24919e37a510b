// SPDX-License-Identifier: GPL-2.0

//! Checks of connect options beyond what the fabrics core parses.
//!
//! The core already refuses malformed values, options the transport does not allow (all
//! TCP-only ones), and out-of-range queue sizes. What is left are limits of this transport;
//! each refusal is one log line naming the option.

use crate::glue::log_err;
use crate::nvme::Options;
use crate::proto::pool::MAX_QUEUES;
use kernel::prelude::*;

/// Validates `opts` for this transport.
pub(crate) fn validate(opts: Options) -> Result {
    let nr_io = opts.total_io_queues();
    if nr_io > u32::from(MAX_QUEUES) - 1 {
        log_err!(core::ptr::null(), "nr_io_queues + nr_write_queues + nr_poll_queues = {} exceeds the {} I/O queues the transport supports",
            nr_io, MAX_QUEUES - 1);
        return Err(EINVAL);
    }
    if opts.traddr().is_none() {
        log_err!(core::ptr::null(), "traddr is required");
        return Err(EINVAL);
    }
    if let Some(port) = opts.trsvcid() {
        if port.as_bytes().iter().all(|&c| c == b'0') {
            log_err!(
                core::ptr::null(),
                "trsvcid: port 0 is not a valid NVMe/RDMA port"
            );
            return Err(EINVAL);
        }
    }
    if opts.reconnect_delay() == 0 {
        log_err!(
            core::ptr::null(),
            "reconnect_delay must be at least 1 second"
        );
        return Err(EINVAL);
    }
    Ok(())
}
