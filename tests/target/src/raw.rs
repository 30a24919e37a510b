// SPDX-License-Identifier: GPL-2.0

//! `--raw-bw`: the bandwidth the RDMA device itself moves, for the benchmark's ceiling.
//!
//! perftest measures RDMA READ in event mode but RDMA WRITE only by busy-polling, and on a
//! small guest the polling process takes a vCPU that soft-RoCE then lacks. An NVMe read moves
//! its data by the target's RDMA WRITE, an NVMe write by its RDMA READ, so each needs its own
//! event-mode ceiling. This mode connects `qps` queue pairs to itself over the CM (a passive
//! side that only accepts, and an active side that works), keeps `depth` messages of
//! `msg_bytes` in flight on each, and sleeps on the completion channel between completions,
//! as the kernel transports do. One process, one protection domain: the passive side's buffer
//! is the target of every RDMA WRITE and the source of every RDMA READ.

use crate::dev::Region;
use crate::ffi::*;
use std::ffi::{c_void, CString};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawOp {
    Write,
    Read,
}

impl RawOp {
    pub fn name(self) -> &'static str {
        match self {
            RawOp::Write => "rdma-write",
            RawOp::Read => "rdma-read",
        }
    }
}

pub struct RawConfig {
    pub addr: String,
    pub port: u16,
    pub op: RawOp,
    pub qps: u32,
    pub msg_bytes: usize,
    pub depth: u32,
    pub seconds: u64,
}

/// The result of one run.
pub struct RawResult {
    pub mib_s: f64,
    pub messages: u64,
    pub seconds: f64,
}

const TIMEOUT_MS: i32 = 5000;

/// The next CM event (the channel is blocking). A connect request of the passive side is
/// answered here, whatever the caller waits for.
fn next_event(
    ec: *mut rdma_event_channel,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    rd: u8,
    passive: &mut Vec<*mut rdma_cm_id>,
) -> Result<ShimEvent, String> {
    loop {
        let mut ev = ShimEvent::default();
        // SAFETY: valid channel and output.
        let r = unsafe { shim_get_event(ec, &mut ev) };
        if r < 0 {
            return Err(format!("rdma_get_cm_event: {}", errno_str(r)));
        }
        if ev.event != CM_CONNECT_REQUEST {
            return Ok(ev);
        }
        // SAFETY: a new connect request id; the QP goes on our PD and CQ. The passive side
        // posts nothing: RDMA READ and WRITE need no work on the responder.
        let r = unsafe { shim_create_qp(ev.id, pd, cq, 1, 1, 0) };
        if r < 0 {
            return Err(format!("passive QP: {}", errno_str(r)));
        }
        // SAFETY: as above; no private data.
        let r = unsafe { shim_accept(ev.id, std::ptr::null(), 0, rd, rd) };
        if r < 0 {
            return Err(format!("rdma_accept: {}", errno_str(r)));
        }
        passive.push(ev.id);
    }
}

/// Waits for event `want` on `id`; any other event of `id` is an error.
fn expect(
    ec: *mut rdma_event_channel,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    rd: u8,
    passive: &mut Vec<*mut rdma_cm_id>,
    id: *mut rdma_cm_id,
    want: i32,
) -> Result<(), String> {
    loop {
        let ev = next_event(ec, pd, cq, rd, passive)?;
        if ev.id != id {
            // The passive side's ESTABLISHED.
            continue;
        }
        if ev.event == want && ev.status == 0 {
            return Ok(());
        }
        return Err(format!(
            "waiting for {}: got {} (status {})",
            event_str(want),
            event_str(ev.event),
            ev.status
        ));
    }
}

pub fn run(cfg: &RawConfig) -> Result<RawResult, String> {
    let (ec, listen, dev) = crate::dev::listen(&cfg.addr, cfg.port, 16)?;
    let addr = CString::new(cfg.addr.clone()).map_err(|_| "bad address")?;
    let rd = dev
        .max_rd_atom
        .min(dev.max_init_rd_atom)
        .min(cfg.depth)
        .min(255) as u8;
    let depth = cfg.depth.min(dev.max_qp_wr.saturating_sub(1)).max(1);
    let (pd, comp) = (dev.pd, dev.comp);
    let cqe = (cfg.qps * depth + 16).min(dev.max_cqe) as i32;
    // SAFETY: valid context and channel.
    let cq = unsafe { ibv_create_cq(dev.ctx, cqe, std::ptr::null_mut(), comp, 0) };
    if cq.is_null() {
        return Err("ibv_create_cq failed".into());
    }
    // One buffer on each side, shared by every message: the figure is what the fabric moves,
    // not what the memory holds.
    let local = Region::new(pd, cfg.msg_bytes, false)?;
    let remote = Region::new(pd, cfg.msg_bytes, true)?;

    let mut passive = Vec::new();
    let mut active = Vec::new();
    let res = (|| -> Result<RawResult, String> {
        for _ in 0..cfg.qps {
            let mut id = std::ptr::null_mut();
            // SAFETY: valid channel and output.
            let r = unsafe { shim_create_id(ec, &mut id) };
            if r < 0 {
                return Err(format!("rdma_create_id: {}", errno_str(r)));
            }
            active.push(id);
            // SAFETY: a new id; the address is NUL terminated.
            let r = unsafe { shim_resolve_addr(id, addr.as_ptr(), cfg.port, TIMEOUT_MS) };
            if r < 0 {
                return Err(format!("rdma_resolve_addr: {}", errno_str(r)));
            }
            expect(ec, pd, cq, rd, &mut passive, id, CM_ADDR_RESOLVED)?;
            // SAFETY: an id with a resolved address.
            let r = unsafe { shim_resolve_route(id, TIMEOUT_MS) };
            if r < 0 {
                return Err(format!("rdma_resolve_route: {}", errno_str(r)));
            }
            expect(ec, pd, cq, rd, &mut passive, id, CM_ROUTE_RESOLVED)?;
            // SAFETY: a routed id; our PD and CQ.
            let r = unsafe { shim_create_qp(id, pd, cq, depth + 1, 1, 0) };
            if r < 0 {
                return Err(format!("active QP: {}", errno_str(r)));
            }
            // SAFETY: as above.
            let r = unsafe { shim_connect(id, rd, rd) };
            if r < 0 {
                return Err(format!("rdma_connect: {}", errno_str(r)));
            }
            expect(ec, pd, cq, rd, &mut passive, id, CM_ESTABLISHED)?;
        }
        transfer(cfg, comp, cq, &active, depth, &local, &remote)
    })();
    for &id in active.iter().chain(passive.iter()) {
        // SAFETY: our ids; every work request completed or the QP is being torn down.
        unsafe {
            rdma_disconnect(id);
            rdma_destroy_qp(id);
            rdma_destroy_id(id);
        }
    }
    drop((local, remote));
    // SAFETY: no QP uses the CQ any more.
    unsafe { ibv_destroy_cq(cq) };
    // SAFETY: the listening id, with no connections left.
    unsafe { rdma_destroy_id(listen) };
    res
}

/// Keeps `depth` messages in flight on each active QP for a second of warm-up and then
/// `cfg.seconds`, sleeping on the completion channel; the rate is what completes in that window
/// over its length.
fn transfer(
    cfg: &RawConfig,
    comp: *mut ibv_comp_channel,
    cq: *mut ibv_cq,
    qps: &[*mut rdma_cm_id],
    depth: u32,
    local: &Region,
    remote: &Region,
) -> Result<RawResult, String> {
    let (op, lkey, rkey) = (
        match cfg.op {
            RawOp::Write => OP_WRITE,
            RawOp::Read => OP_READ,
        },
        local.lkey,
        // SAFETY: as above.
        unsafe { shim_mr_rkey(remote.mr) },
    );
    let post = |i: usize| -> Result<(), String> {
        // SAFETY: a connected QP; both buffers are registered and outlive the QPs.
        let r = unsafe {
            shim_post_send(
                shim_id_qp(qps[i]),
                i as u64,
                op,
                F_SIGNALED,
                local.buf.as_ptr() as *mut c_void,
                cfg.msg_bytes as u32,
                lkey,
                remote.buf.as_ptr() as u64,
                rkey,
                0,
            )
        };
        if r < 0 {
            return Err(format!("ibv_post_send: {}", errno_str(r)));
        }
        Ok(())
    };
    // SAFETY: our CQ.
    unsafe { shim_req_notify(cq) };
    let mut in_flight = 0u64;
    for i in 0..qps.len() {
        for _ in 0..depth {
            post(i)?;
            in_flight += 1;
        }
    }
    let start = Instant::now();
    let warm = start + Duration::from_secs(1);
    let end = warm + Duration::from_secs(cfg.seconds);
    let mut counted = 0u64;
    // SAFETY: our channel.
    let fd = unsafe { shim_comp_fd(comp) };
    let mut wcs = [ShimWc::default(); 16];
    while in_flight > 0 {
        if Instant::now() > end + Duration::from_secs(30) {
            return Err(format!("{in_flight} messages did not complete"));
        }
        let mut pfd = PollFd {
            fd,
            events: POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd entry.
        unsafe { poll(&mut pfd, 1, 1000) };
        if pfd.revents & POLLIN == 0 {
            continue;
        }
        let (mut c, mut ctx) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: valid channel and outputs.
        if unsafe { shim_get_cq_event(comp, &mut c, &mut ctx) } < 0 {
            continue;
        }
        // SAFETY: our CQ.
        unsafe { shim_req_notify(cq) };
        loop {
            // SAFETY: valid CQ and a 16-entry output array.
            let n = unsafe { shim_poll_cq(cq, 16, wcs.as_mut_ptr()) };
            if n <= 0 {
                break;
            }
            let now = Instant::now();
            for wc in &wcs[..n as usize] {
                in_flight -= 1;
                if wc.status != WC_SUCCESS {
                    return Err(format!(
                        "{} failed: {} (status {})",
                        cfg.op.name(),
                        wc_status_str(wc.status),
                        wc.status
                    ));
                }
                if now > warm && now <= end {
                    counted += 1;
                }
                if now <= end {
                    post(wc.wr_id as usize)?;
                    in_flight += 1;
                }
            }
        }
    }
    let seconds = end.saturating_duration_since(warm).as_secs_f64();
    if counted == 0 || seconds <= 0.0 {
        return Err("nothing completed in the measuring window".into());
    }
    Ok(RawResult {
        mib_s: (counted as f64 * cfg.msg_bytes as f64) / seconds / (1u64 << 20) as f64,
        messages: counted,
        seconds,
    })
}
