// SPDX-License-Identifier: GPL-2.0

//! Statistics of controllers and queues (shown by `stats_file`).
//!
//! Counters are per queue (so the I/O path only touches its own queue's cache lines) and
//! relaxed atomics: a reader gets a snapshot, not a transaction.

use crate::wrap::sync::{new_irq_lock, IrqLock};
use core::fmt::{self, Write};
use core::sync::atomic::{AtomicI64, AtomicU64, Ordering};
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
    /// Commands of this queue sent on another queue (see `request::spread`).
    pub(crate) spread: AtomicU64,
    /// Data bytes moved from and to the registered area, without a copy.
    pub(crate) area_bytes: AtomicU64,
    /// Data bytes sent in the capsule from the request's own pages, without a copy.
    pub(crate) page_bytes: AtomicU64,
    /// Data bytes copied between requests' pages and the pool.
    pub(crate) copied_bytes: AtomicU64,
    /// Data bytes moved from and to peer (device) memory, without a copy.
    pub(crate) peer_bytes: AtomicU64,
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

    /// Counts `len` data bytes moved from or to the registered area.
    pub(crate) fn moved_area(&self, len: u32) {
        self.area_bytes.fetch_add(u64::from(len), Ordering::Relaxed);
    }

    /// Counts `len` data bytes moved from or to peer memory.
    pub(crate) fn moved_peer(&self, len: u32) {
        self.peer_bytes.fetch_add(u64::from(len), Ordering::Relaxed);
    }

    /// Counts `len` data bytes sent in the capsule from the request's pages.
    pub(crate) fn moved_pages(&self, len: u32) {
        self.page_bytes.fetch_add(u64::from(len), Ordering::Relaxed);
    }

    /// Counts `len` data bytes copied to or from the pool.
    pub(crate) fn copied(&self, len: u32) {
        self.copied_bytes
            .fetch_add(u64::from(len), Ordering::Relaxed);
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
