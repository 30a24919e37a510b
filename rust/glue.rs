// SPDX-License-Identifier: GPL-2.0

//! Safe access to the C glue: log lines, dynamic debug classes and module parameters.

use crate::bindings;
use core::fmt;

/// Severity of a log line.
#[derive(Clone, Copy)]
pub(crate) enum Level {
    Err,
    Warn,
    Info,
}

/// Dynamic debug classes. Each is one `pr_debug` call site in the glue, so it can be enabled
/// on its own: `echo 'module nvme_rsrdma func rsrdma_dbg_cm +p' > .../dynamic_debug/control`.
#[derive(Clone, Copy)]
pub(crate) enum DebugClass {
    /// RDMA CM events of each queue.
    Cm,
    /// Queue set-up and teardown.
    Queue,
    /// Buffer pool registration, RKEYs, invalidation.
    Pool,
    /// Per-command SGL publication and completion.
    Io,
    /// Error recovery and reconnect decisions.
    Recovery,
}

/// A line of log text formatted on the stack (log calls happen in atomic context too), cut
/// at [`LineBuf::CAP`] bytes.
struct LineBuf {
    buf: [u8; LineBuf::CAP + 1],
    len: usize,
}

impl LineBuf {
    const CAP: usize = 255;

    fn format(args: fmt::Arguments<'_>) -> Self {
        let mut line = Self {
            buf: [0; Self::CAP + 1],
            len: 0,
        };
        // Formatting into a buffer that truncates cannot fail.
        let _ = fmt::write(&mut line, args);
        line.buf[line.len] = 0;
        line
    }

    fn as_char_ptr(&self) -> *const u8 {
        self.buf.as_ptr()
    }
}

impl fmt::Write for LineBuf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // Interior NULs would cut the line short; replace them.
        for &b in s.as_bytes() {
            if self.len == Self::CAP {
                break;
            }
            self.buf[self.len] = if b == 0 { b'?' } else { b };
            self.len += 1;
        }
        Ok(())
    }
}

/// Prints a log line, prefixed with the controller's device name when there is one.
pub(crate) fn log(ctrl: *const bindings::nvme_ctrl, level: Level, args: fmt::Arguments<'_>) {
    let level = match level {
        Level::Err => bindings::rsrdma_log_level_RSRDMA_LOG_ERR,
        Level::Warn => bindings::rsrdma_log_level_RSRDMA_LOG_WARN,
        Level::Info => bindings::rsrdma_log_level_RSRDMA_LOG_INFO,
    };
    let line = LineBuf::format(args);
    // SAFETY: `line` is NUL terminated and outlives the call; `ctrl` is null or a controller
    // the caller keeps alive.
    unsafe { bindings::rsrdma_log(ctrl, level, line.as_char_ptr()) };
}

/// Emits a debug line through the dynamic debug call site of `class`. The line is formatted
/// only when that call site is enabled.
pub(crate) fn debug(ctrl: *const bindings::nvme_ctrl, class: DebugClass, args: fmt::Arguments<'_>) {
    let site = match class {
        DebugClass::Cm => bindings::rsrdma_dbg_cm,
        DebugClass::Queue => bindings::rsrdma_dbg_queue,
        DebugClass::Pool => bindings::rsrdma_dbg_pool,
        DebugClass::Io => bindings::rsrdma_dbg_io,
        DebugClass::Recovery => bindings::rsrdma_dbg_recovery,
    };
    // SAFETY: a null message only asks whether the call site is enabled.
    if unsafe { site(ctrl, core::ptr::null()) } {
        let line = LineBuf::format(args);
        // SAFETY: as in `log`.
        unsafe { site(ctrl, line.as_char_ptr()) };
    }
}

/// `log_info!(ctrl, "...", args)`: an info line for a controller (`core::ptr::null()` for
/// module-wide events).
macro_rules! log_info {
    ($ctrl:expr, $($arg:tt)*) => {
        $crate::glue::log($ctrl, $crate::glue::Level::Info, format_args!($($arg)*))
    };
}

/// Like `log_info!`, at warning level.
#[allow(unused_macros)]
macro_rules! log_warn {
    ($ctrl:expr, $($arg:tt)*) => {
        $crate::glue::log($ctrl, $crate::glue::Level::Warn, format_args!($($arg)*))
    };
}

/// Like `log_info!`, at error level.
macro_rules! log_err {
    ($ctrl:expr, $($arg:tt)*) => {
        $crate::glue::log($ctrl, $crate::glue::Level::Err, format_args!($($arg)*))
    };
}

/// `dbg_event!(Cm, ctrl, "...", args)`: a dynamic debug line of one class.
#[allow(unused_macros)]
macro_rules! dbg_event {
    ($class:ident, $ctrl:expr, $($arg:tt)*) => {
        $crate::glue::debug($ctrl, $crate::glue::DebugClass::$class, format_args!($($arg)*))
    };
}

#[allow(unused_imports)]
pub(crate) use {dbg_event, log_err, log_info, log_warn};

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
