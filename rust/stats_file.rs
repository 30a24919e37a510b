// SPDX-License-Identifier: GPL-2.0

//! The debugfs view of a controller's statistics:
//! `/sys/kernel/debug/nvme_rsrdma/<controller>/stats`, a snapshot of its state, device, pool
//! and per-queue counters.

use crate::ctrl::{Ctrl, RdmaCtrl};
use crate::pool::Dir;
use crate::wrap::debugfs::{SeqFile, Show};
use crate::wrap::nvme::CtrlRef;
use crate::wrap::sync::RcuReadGuard;
use core::sync::atomic::Ordering;

/// Whether a registration holds an RKEY, and which: `registered, rkey 0x..` or
/// `not registered, no rkey`.
struct Registered(Option<u32>);

impl core::fmt::Display for Registered {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            None => f.write_str("not registered, no rkey"),
            Some(k) => write!(f, "registered, rkey {k:#x}"),
        }
    }
}

/// A controller's file holds a reference to it (dropped with the file, at deletion).
impl Show for CtrlRef<RdmaCtrl> {
    fn show(&self, out: &mut SeqFile<'_>) {
        show(out, self);
    }
}

fn show(s: &mut SeqFile<'_>, ctrl: &Ctrl) {
    let n = ctrl.core();
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
    let rkeys = ctrl.pool_rkeys();
    s.line(format_args!(
        "pool: {} KiB in two halves, chunks of {} KiB, {}",
        pool.total_size() >> 10,
        pool.chunk_size() >> 10,
        if rkeys.is_some() {
            "registered"
        } else {
            "not registered"
        }
    ));
    // The keys of the current connection only: none while no connection holds them.
    match rkeys {
        Some(k) => s.line(format_args!(
            "rkey: {:#x} for {}, {:#x} for {}",
            k[0],
            Dir::ToTarget.as_str(),
            k[1],
            Dir::FromTarget.as_str()
        )),
        None => s.line(format_args!("rkey: none")),
    }
    let (slots, slots_high) = pool.slot_usage();
    s.line(format_args!(
        "pool slots in use: {} (high-water {})",
        slots, slots_high
    ));
    let (out, out_high) = pool.io_large_usage(Dir::ToTarget);
    let (inb, in_high) = pool.io_large_usage(Dir::FromTarget);
    s.line(format_args!(
        "pool large area: {} KiB in use for writes, {} KiB for reads (high-water {} KiB, {} KiB), {} waits for room",
        out >> 10,
        inb >> 10,
        out_high >> 10,
        in_high >> 10,
        pool.large_failures()
    ));
    match ctrl.area() {
        Some(area) => {
            let rkey = ctrl.area_rkey();
            ctrl.with_area_dev(|dev| {
                let path = dev.and_then(|d| d.path().to_str().ok());
                s.line(format_args!(
                    "area: {} KiB, {}, registrations {}, device /dev/{} (mapped {} times), chunks of {} KiB",
                    area.size() >> 10,
                    Registered(rkey),
                    ctrl.area_registrations(),
                    path.unwrap_or("(none)"),
                    dev.map_or(0, |d| d.mappings()),
                    area.chunk_size() >> 10
                ))
            });
        }
        None => s.line(format_args!("area: none")),
    }
    // The I/O queues' (the admin queue's data is the kernel's own: it is always copied).
    let rcu = RcuReadGuard::new();
    match ctrl.peer_regs(&rcu) {
        Some(regs) => {
            for r in regs.iter() {
                s.line(format_args!(
                    "device memory: {}, {} KiB at {:#x}, reached by {}, rkey {:#x}, registrations {}",
                    r.mem().name(),
                    r.mem().len() >> 10,
                    r.mem().phys(),
                    r.reach().as_str(),
                    r.region().rkey(),
                    ctrl.peer_registrations(),
                ));
            }
        }
        None => s.line(format_args!("device memory: none registered")),
    }
    drop(rcu);
    let (mut area_bytes, mut page_bytes, mut copied, mut peer) = (0u64, 0u64, 0u64, 0u64);
    for qid in 1..n.queue_count() as u16 {
        let Some(q) = ctrl.try_queue(qid) else { break };
        let st = q.stats();
        area_bytes += st.area_bytes.load(Ordering::Relaxed);
        page_bytes += st.page_bytes.load(Ordering::Relaxed);
        copied += st.copied_bytes.load(Ordering::Relaxed);
        peer += st.peer_bytes.load(Ordering::Relaxed);
    }
    s.line(format_args!(
        "data bytes (I/O queues): {} from the area without a copy, {} in capsules from their pages without a copy, {} copied through the pool, {} from device memory without a copy",
        area_bytes, page_bytes, copied, peer
    ));
    s.line(format_args!(
        "reconnects: {}, last took {} ms",
        ctrl.reconnects(),
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
