// SPDX-License-Identifier: GPL-2.0

//! Statistics of controllers and queues, and their debugfs view:
//! `/sys/kernel/debug/nvme_rsrdma/<controller>/stats`.
//!
//! Counters are per queue (so the I/O path only touches its own queue's cache lines) and
//! relaxed atomics: the view is a snapshot, not a transaction.

use crate::bindings;
use crate::ctrl::RdmaCtrl;
use crate::sync::{new_irq_lock, IrqLock};
use core::fmt::{self, Write};
use core::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use kernel::ffi::{c_int, c_void};
use kernel::prelude::*;

/// A short text kept in a fixed buffer (cut at `N` bytes).
pub(crate) struct Text<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> Text<N> {
    pub(crate) const fn new() -> Self {
        Self {
            buf: [0; N],
            len: 0,
        }
    }

    pub(crate) fn set(&mut self, args: fmt::Arguments<'_>) {
        self.len = 0;
        let _ = self.write_fmt(args);
    }

    pub(crate) fn as_str(&self) -> &str {
        // Only whole UTF-8 sequences are stored (see `write_str`).
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl<const N: usize> Write for Text<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for c in s.chars() {
            let mut tmp = [0u8; 4];
            let enc = c.encode_utf8(&mut tmp).as_bytes();
            if self.len + enc.len() > N {
                break;
            }
            self.buf[self.len..self.len + enc.len()].copy_from_slice(enc);
            self.len += enc.len();
        }
        Ok(())
    }
}

/// Counters of one queue.
#[derive(Default)]
pub(crate) struct QueueStats {
    pub(crate) reads: AtomicU64,
    pub(crate) writes: AtomicU64,
    pub(crate) others: AtomicU64,
    pub(crate) read_bytes: AtomicU64,
    pub(crate) write_bytes: AtomicU64,
    pub(crate) inflight: AtomicI64,
    pub(crate) errors: AtomicU64,
    /// Commands of this queue sent on another queue (see `mq::spread`).
    pub(crate) spread: AtomicU64,
}

impl QueueStats {
    /// Counts a command sent with `len` bytes of data in direction `write`.
    pub(crate) fn sent(&self, len: u32, write: bool) {
        let (n, bytes) = match (len, write) {
            (0, _) => (&self.others, None),
            (_, true) => (&self.writes, Some(&self.write_bytes)),
            (_, false) => (&self.reads, Some(&self.read_bytes)),
        };
        n.fetch_add(1, Ordering::Relaxed);
        if let Some(b) = bytes {
            b.fetch_add(u64::from(len), Ordering::Relaxed);
        }
        self.inflight.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts the completion of a command counted by `sent`.
    pub(crate) fn completed(&self, ok: bool) {
        self.inflight.fetch_sub(1, Ordering::Relaxed);
        if !ok {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Controller-wide facts that the debugfs view shows and nothing else reads.
#[pin_data]
pub(crate) struct CtrlStats {
    #[pin]
    pub(crate) last_error: IrqLock<(Text<160>, i64)>,
    #[pin]
    pub(crate) device: IrqLock<Text<48>>,
    pub(crate) last_reconnect_ms: AtomicU64,
}

impl CtrlStats {
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            last_error <- new_irq_lock!((Text::new(), 0), "rsrdma_stats::last_error"),
            device <- new_irq_lock!(Text::new(), "rsrdma_stats::device"),
            last_reconnect_ms: AtomicU64::new(0),
        })
    }

    /// Remembers the reason of the latest error recovery (callable from any context).
    pub(crate) fn error(&self, reason: fmt::Arguments<'_>) {
        let mut e = self.last_error.lock();
        e.0.set(reason);
        e.1 = kernel::time::Ktime::ktime_get().to_ms();
    }
}

/// Writes lines to a seq_file.
struct Seq(*mut bindings::seq_file);

impl Seq {
    fn line(&self, args: fmt::Arguments<'_>) {
        let mut t = Text::<240>::new();
        t.set(args);
        let mut buf = [0u8; 242];
        let s = t.as_str().as_bytes();
        buf[..s.len()].copy_from_slice(s);
        buf[s.len()] = b'\n';
        // SAFETY: a seq_file being shown; `buf` is NUL terminated (zeroed past the newline).
        unsafe { bindings::rsrdma_seq_puts(self.0, buf.as_ptr()) };
    }
}

/// The `show` of the controller's stats file.
///
/// # Safety
///
/// Called by the glue's seq_file with the controller the file was created for; debugfs removal
/// (before the controller is freed) waits for running readers.
#[no_mangle]
pub(crate) unsafe extern "C" fn rsrdma_ctrl_show(
    m: *mut bindings::seq_file,
    ctrl: *mut c_void,
) -> c_int {
    // SAFETY: per the function's contract.
    let ctrl = unsafe { &*(ctrl as *const RdmaCtrl) };
    show(&Seq(m), ctrl);
    0
}

fn show(s: &Seq, ctrl: &RdmaCtrl) {
    let n = ctrl.nvme();
    let now = kernel::time::Ktime::ktime_get().to_ms();
    s.line(format_args!("state: {:?}", n.state()));
    s.line(format_args!(
        "device: {}",
        ctrl.stats().device.lock().as_str()
    ));
    s.line(format_args!(
        "queues: {} I/O + admin, depth {}",
        n.queue_count().saturating_sub(1),
        u32::from(n.sqsize()) + 1
    ));
    let pool = ctrl.pool();
    let rkey = ctrl.rkey();
    s.line(format_args!(
        "pool: {} KiB, {}",
        pool.total_size() >> 10,
        if rkey != 0 {
            "registered"
        } else {
            "not registered"
        }
    ));
    s.line(format_args!("rkey: {:#x}", rkey));
    let (slots, slots_high) = pool.slot_usage();
    s.line(format_args!(
        "pool slots in use: {} (high-water {})",
        slots, slots_high
    ));
    let (large, large_high) = pool.io_large_usage();
    s.line(format_args!(
        "pool large area: {} KiB in use (high-water {} KiB), {} waits for room",
        large >> 10,
        large_high >> 10,
        pool.large_failures()
    ));
    s.line(format_args!(
        "reconnects: {}, last took {} ms",
        ctrl.reconnects.load(Ordering::Relaxed),
        ctrl.stats().last_reconnect_ms.load(Ordering::Relaxed)
    ));
    {
        let e = ctrl.stats().last_error.lock();
        if e.0.as_str().is_empty() {
            s.line(format_args!("last error: none"));
        } else {
            s.line(format_args!(
                "last error: {} ({} s ago)",
                e.0.as_str(),
                (now - e.1) / 1000
            ));
        }
    }
    s.line(format_args!(
        "{:<5} {:<5} {:>10} {:>10} {:>10} {:>14} {:>14} {:>8} {:>8} {:>8}",
        "queue",
        "live",
        "reads",
        "writes",
        "other",
        "read bytes",
        "write bytes",
        "inflight",
        "errors",
        "spread"
    ));
    for qid in 0..n.queue_count() as u16 {
        let Some(q) = ctrl.try_queue(qid) else { break };
        let st = q.stats();
        s.line(format_args!(
            "{:<5} {:<5} {:>10} {:>10} {:>10} {:>14} {:>14} {:>8} {:>8} {:>8}",
            qid,
            if q.is_live() { "yes" } else { "no" },
            st.reads.load(Ordering::Relaxed),
            st.writes.load(Ordering::Relaxed),
            st.others.load(Ordering::Relaxed),
            st.read_bytes.load(Ordering::Relaxed),
            st.write_bytes.load(Ordering::Relaxed),
            st.inflight.load(Ordering::Relaxed),
            st.errors.load(Ordering::Relaxed),
            st.spread.load(Ordering::Relaxed),
        ));
    }
}

/// The debugfs directory of one controller; removed (waiting for readers) on drop.
pub(crate) struct DebugDir(*mut bindings::dentry);

// SAFETY: a dentry handle, only created and removed.
unsafe impl Send for DebugDir {}
// SAFETY: as above.
unsafe impl Sync for DebugDir {}

impl DebugDir {
    /// Creates `parent/name/stats` for `ctrl`. Failures are not errors: debugfs is optional.
    ///
    /// # Safety
    ///
    /// `ctrl` must stay valid until the returned directory is dropped.
    pub(crate) unsafe fn new(parent: *mut bindings::dentry, name: &CStr, ctrl: &RdmaCtrl) -> Self {
        // SAFETY: debugfs calls accept error pointers as parents and return error pointers.
        unsafe {
            let dir = bindings::rsrdma_debugfs_dir(name.as_char_ptr(), parent);
            bindings::rsrdma_debugfs_stats(dir, ctrl as *const RdmaCtrl as *mut c_void);
            Self(dir)
        }
    }

    /// The module's root directory.
    pub(crate) fn root() -> Self {
        // SAFETY: creates (or gets an error pointer for) a top-level directory.
        Self(unsafe {
            bindings::rsrdma_debugfs_dir(
                kernel::c_str!("nvme_rsrdma").as_char_ptr(),
                core::ptr::null_mut(),
            )
        })
    }

    pub(crate) fn as_ptr(&self) -> *mut bindings::dentry {
        self.0
    }
}

impl Drop for DebugDir {
    fn drop(&mut self) {
        // SAFETY: created by debugfs (or an error pointer, which debugfs_remove ignores).
        unsafe { bindings::rsrdma_debugfs_remove(self.0) };
    }
}
