// SPDX-License-Identifier: GPL-2.0

//! The monotonic clock in the units the transport's policies count in.

use kernel::time::Ktime;

/// Milliseconds of the monotonic clock.
pub(crate) fn now_ms() -> u64 {
    Ktime::ktime_get().to_ms().max(0) as u64
}
