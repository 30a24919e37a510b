// SPDX-License-Identifier: GPL-2.0

//! Log lines and dynamic debug classes, through the C glue's call sites (6.12's `pr_debug!`
//! is compiled out, and dynamic debug needs a C call site per class).
//!
//! C header: `rust/glue.h`, the module's C glue (`rsrdma_log`, `rsrdma_dbg_*`).

use super::bindings;
use core::fmt;
use core::marker::PhantomData;

/// Severity of a log line.
#[derive(Clone, Copy)]
pub(crate) enum Level {
    Err,
    Warn,
    Info,
    /// An error line of the I/O path, which a process can make the transport print at will:
    /// rate limited.
    ErrRatelimited,
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

/// Whose line it is: a controller's (prefixed with its device name) or the module's.
///
/// # Invariants
///
/// `ctrl` is null or a controller that is alive for `'a`.
#[derive(Clone, Copy)]
pub(crate) struct Prefix<'a> {
    ctrl: *const bindings::nvme_ctrl,
    _ctrl: PhantomData<&'a ()>,
}

impl Prefix<'_> {
    /// A module-wide line, without a controller.
    pub(crate) const NONE: Prefix<'static> = Prefix {
        ctrl: core::ptr::null(),
        _ctrl: PhantomData,
    };

    /// The line of the controller at `ctrl`.
    ///
    /// # Safety
    ///
    /// `ctrl` is alive for `'a`.
    pub(in crate::wrap) unsafe fn from_raw<'a>(ctrl: *const bindings::nvme_ctrl) -> Prefix<'a> {
        // INVARIANT: per the contract.
        Prefix {
            ctrl,
            _ctrl: PhantomData,
        }
    }
}

impl<'a, P: Into<Prefix<'a>>> From<Option<P>> for Prefix<'a> {
    fn from(p: Option<P>) -> Self {
        p.map_or(Prefix::NONE, Into::into)
    }
}

/// Prints a log line, prefixed with the controller's device name when there is one.
pub(crate) fn log(prefix: Prefix<'_>, level: Level, args: fmt::Arguments<'_>) {
    let ctrl = prefix.ctrl;
    let level = match level {
        Level::Err => bindings::rsrdma_log_level_RSRDMA_LOG_ERR,
        Level::Warn => bindings::rsrdma_log_level_RSRDMA_LOG_WARN,
        Level::Info => bindings::rsrdma_log_level_RSRDMA_LOG_INFO,
        Level::ErrRatelimited => bindings::rsrdma_log_level_RSRDMA_LOG_ERR_RATELIMITED,
    };
    let line = LineBuf::format(args);
    // SAFETY: `line` is NUL terminated and outlives the call; `ctrl` is null or a controller
    // alive for the call (`Prefix` invariant).
    unsafe { bindings::rsrdma_log(ctrl, level, line.as_char_ptr()) };
}

/// Emits a debug line through the dynamic debug call site of `class`. The line is formatted
/// only when that call site is enabled.
pub(crate) fn debug(prefix: Prefix<'_>, class: DebugClass, args: fmt::Arguments<'_>) {
    let ctrl = prefix.ctrl;
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

/// `log_info!(ctrl, "...", args)`: an info line for a controller (anything that converts into a
/// [`Prefix`]: a controller, `Option` of one, or [`Prefix::NONE`] for module-wide events).
macro_rules! log_info {
    ($ctrl:expr, $($arg:tt)*) => {
        $crate::wrap::log::log($crate::wrap::log::Prefix::from($ctrl), $crate::wrap::log::Level::Info, format_args!($($arg)*))
    };
}

/// Like `log_info!`, at warning level.
#[allow(unused_macros)]
macro_rules! log_warn {
    ($ctrl:expr, $($arg:tt)*) => {
        $crate::wrap::log::log($crate::wrap::log::Prefix::from($ctrl), $crate::wrap::log::Level::Warn, format_args!($($arg)*))
    };
}

/// Like `log_info!`, at error level.
macro_rules! log_err {
    ($ctrl:expr, $($arg:tt)*) => {
        $crate::wrap::log::log($crate::wrap::log::Prefix::from($ctrl), $crate::wrap::log::Level::Err, format_args!($($arg)*))
    };
}

/// Like `log_err!`, rate limited (see [`Level::ErrRatelimited`]).
macro_rules! log_err_ratelimited {
    ($ctrl:expr, $($arg:tt)*) => {
        $crate::wrap::log::log($crate::wrap::log::Prefix::from($ctrl), $crate::wrap::log::Level::ErrRatelimited, format_args!($($arg)*))
    };
}

/// `dbg_event!(Cm, ctrl, "...", args)`: a dynamic debug line of one class.
#[allow(unused_macros)]
macro_rules! dbg_event {
    ($class:ident, $ctrl:expr, $($arg:tt)*) => {
        $crate::wrap::log::debug($crate::wrap::log::Prefix::from($ctrl), $crate::wrap::log::DebugClass::$class, format_args!($($arg)*))
    };
}

#[allow(unused_imports)]
pub(crate) use {dbg_event, log_err, log_err_ratelimited, log_info, log_warn};
