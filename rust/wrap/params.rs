// SPDX-License-Identifier: GPL-2.0

//! The module's parameters (defined in the C glue: 6.12's `module!` has none) and the facts
//! about the running kernel the transport reads.
//!
//! C header: `rust/glue.h`, the module's C glue.

use super::bindings;

/// Whether the module was loaded with `dropin=1` (register as "rdma").
pub(crate) fn dropin() -> bool {
    // SAFETY: a module parameter, read-only (0444) after load.
    unsafe { bindings::rsrdma_dropin }
}

/// Whether kernel module `name` is loaded (or built in).
pub(crate) fn module_present(name: &kernel::str::CStr) -> bool {
    // SAFETY: a NUL-terminated name; the glue only looks the path up.
    unsafe { bindings::rsrdma_module_present(name.as_char_ptr()) }
}

/// The per-tag slot size in bytes: `slot_kib` rounded up to a power of two, 512 bytes to 1 MiB.
pub(crate) fn slot_bytes() -> u32 {
    // SAFETY: a module parameter, read-only (0444) after load.
    let kib = unsafe { bindings::rsrdma_slot_kib }.min(1024);
    (kib * 1024).next_power_of_two().clamp(512, 1 << 20)
}

/// The size in bytes of a controller's I/O large area (`io_pool_mib`).
pub(crate) fn io_pool_bytes() -> u64 {
    // SAFETY: a module parameter, read-only (0444) after load.
    u64::from(unsafe { bindings::rsrdma_io_pool_mib }) << 20
}

/// The size in MiB of the registered area of a controller created now (`area_mib`).
pub(crate) fn area_mib() -> u64 {
    // SAFETY: a module parameter, writable through sysfs: read once, as a plain word.
    u64::from(unsafe { core::ptr::read_volatile(core::ptr::addr_of!(bindings::rsrdma_area_mib)) })
}

/// The number of I/O queues below which a controller gets dedicated write queues
/// (`min_io_queues`).
pub(crate) fn min_io_queues() -> u32 {
    // SAFETY: a module parameter, writable through sysfs: read once, as a plain word.
    unsafe { core::ptr::read_volatile(core::ptr::addr_of!(bindings::rsrdma_min_io_queues)) }
}

/// The smallest transfer in bytes sent on other I/O queues than its own (`spread_kib`);
/// `u32::MAX` when off.
pub(crate) fn spread_bytes() -> u32 {
    // SAFETY: a module parameter, writable through sysfs: read once, as a plain word.
    let kib = unsafe { core::ptr::read_volatile(core::ptr::addr_of!(bindings::rsrdma_spread_kib)) };
    match kib {
        0 => u32::MAX,
        k => k.saturating_mul(1024),
    }
}

/// The number of online CPUs.
pub(crate) fn num_online_cpus() -> u32 {
    // SAFETY: reads the online CPU count; no precondition.
    unsafe { bindings::rsrdma_num_online_cpus() }
}
