// SPDX-License-Identifier: GPL-2.0

//! The RDMA device behind a listening address, opened the same way by the target and by
//! `--raw-bw`: the CM event channel, the listening id, and on the id's device a protection
//! domain, a completion channel and the limits queues are sized by.

use crate::ffi::*;
use std::ffi::{c_void, CString};

pub struct Dev {
    pub ctx: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub comp: *mut ibv_comp_channel,
    pub max_rd_atom: u32,
    pub max_init_rd_atom: u32,
    pub max_qp_wr: u32,
    pub max_cqe: u32,
}

/// A listening id on `addr:port` (with a connect backlog of `backlog`), its event channel
/// and its device.
pub fn listen(
    addr: &str,
    port: u16,
    backlog: i32,
) -> Result<(*mut rdma_event_channel, *mut rdma_cm_id, Dev), String> {
    // SAFETY: plain librdmacm call.
    let ec = unsafe { rdma_create_event_channel() };
    if ec.is_null() {
        return Err(format!(
            "cannot open the RDMA CM ({}); is rdma_ucm loaded?",
            std::io::Error::last_os_error()
        ));
    }
    let caddr = CString::new(addr).map_err(|_| "bad address")?;
    let mut listen = std::ptr::null_mut();
    // SAFETY: valid channel, NUL-terminated address, output pointer.
    let r = unsafe { shim_listen(ec, caddr.as_ptr(), port, backlog, &mut listen) };
    if r < 0 {
        return Err(format!("cannot listen on {addr}:{port}: {}", errno_str(r)));
    }
    // SAFETY: a bound id.
    let ctx = unsafe { shim_id_verbs(listen) };
    if ctx.is_null() {
        return Err(format!("{addr} is not the address of an RDMA device"));
    }
    let (mut rd, mut init_rd, mut qp_wr, mut cqe) = (0, 0, 0, 0);
    // SAFETY: valid context and output pointers.
    let r = unsafe { shim_query_device(ctx, &mut rd, &mut init_rd, &mut qp_wr, &mut cqe) };
    if r < 0 {
        return Err(format!("ibv_query_device: {}", errno_str(r)));
    }
    // SAFETY: valid context.
    let pd = unsafe { ibv_alloc_pd(ctx) };
    // SAFETY: valid context.
    let comp = unsafe { ibv_create_comp_channel(ctx) };
    if pd.is_null() || comp.is_null() {
        return Err("cannot allocate a PD or a completion channel".into());
    }
    Ok((
        ec,
        listen,
        Dev {
            ctx,
            pd,
            comp,
            max_rd_atom: rd,
            max_init_rd_atom: init_rd,
            max_qp_wr: qp_wr,
            max_cqe: cqe,
        },
    ))
}

/// Registered memory, for local access only or (`remote`) for the peer's RDMA READ and WRITE
/// too.
pub struct Region {
    pub buf: Vec<u8>,
    pub mr: *mut ibv_mr,
    pub lkey: u32,
}

impl Region {
    pub fn new(pd: *mut ibv_pd, len: usize, remote: bool) -> Result<Region, String> {
        let mut buf = vec![0u8; len.max(64)];
        // SAFETY: the buffer outlives the MR (deregistered in drop, before the Vec is freed)
        // and is never reallocated.
        let mr = unsafe { shim_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), remote.into()) };
        if mr.is_null() {
            return Err(format!(
                "ibv_reg_mr of {len} bytes failed: {}",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: a valid MR.
        let lkey = unsafe { shim_mr_lkey(mr) };
        Ok(Region { buf, mr, lkey })
    }

    pub fn at(&mut self, off: usize) -> *mut c_void {
        self.buf[off..].as_mut_ptr().cast()
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: registered in `new`, not used by any work request any more (their QP is
        // destroyed before the queue's regions are dropped).
        unsafe { ibv_dereg_mr(self.mr) };
    }
}
