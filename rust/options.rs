// SPDX-License-Identifier: GPL-2.0

//! Checks of connect options beyond what the fabrics core parses.
//!
//! The core already refuses malformed values, options the transport does not allow (all
//! TCP-only ones), and out-of-range queue sizes. What is left are limits of this transport;
//! each refusal is one log line naming the option.

use crate::proto::pool::MAX_QUEUES;
use crate::wrap::log::{log_err, log_info, Prefix};
use crate::wrap::nvme::{Options, OptionsMut};
use kernel::prelude::*;

/// Validates `opts` for this transport.
pub(crate) fn validate(opts: Options<'_>) -> Result {
    if opts.traddr().is_none() {
        log_err!(Prefix::NONE, "traddr is required");
        return Err(EINVAL);
    }
    if opts.reconnect_delay() == 0 {
        log_err!(Prefix::NONE, "reconnect_delay must be at least 1 second");
        return Err(EINVAL);
    }
    Ok(())
}

/// Limits each kind of I/O queue asked for to `cpus` (the core does it for `nr_io_queues` only),
/// then fits their total into the transport's `MAX_QUEUES - 1`: the default I/O queue count (one
/// per online CPU) is lowered to fit; counts the user gave that do not fit are refused.
pub(crate) fn fit_queues(opts: &OptionsMut<'_>, cpus: u32) -> Result {
    opts.limit_queue_counts(cpus);
    let max = u32::from(MAX_QUEUES) - 1;
    let total = opts.total_io_queues(cpus);
    if total <= max {
        return Ok(());
    }
    let others = total - opts.nr_io_queues().min(cpus);
    if !opts.nr_io_queues_given() && others < max {
        opts.limit_io_queues(max - others);
        log_info!(
            Prefix::NONE,
            "{} online CPUs: using {} I/O queues, the transport supports {} in all",
            cpus,
            max - others,
            max
        );
        return Ok(());
    }
    log_err!(Prefix::NONE, "nr_io_queues + nr_write_queues + nr_poll_queues = {} exceeds the {} I/O queues the transport supports",
        total, max);
    Err(EINVAL)
}
