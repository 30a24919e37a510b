// SPDX-License-Identifier: GPL-2.0

//! Thin bindings: librdmacm and libibverbs functions taking opaque pointers, and the C shim
//! (src/shim.c) for the inline verbs calls and flat copies of events and completions.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void, CStr};

#[repr(C)]
pub struct rdma_event_channel {
    _p: [u8; 0],
}
#[repr(C)]
pub struct rdma_cm_id {
    _p: [u8; 0],
}
#[repr(C)]
pub struct ibv_context {
    _p: [u8; 0],
}
#[repr(C)]
pub struct ibv_pd {
    _p: [u8; 0],
}
#[repr(C)]
pub struct ibv_mr {
    _p: [u8; 0],
}
#[repr(C)]
pub struct ibv_cq {
    _p: [u8; 0],
}
#[repr(C)]
pub struct ibv_qp {
    _p: [u8; 0],
}
#[repr(C)]
pub struct ibv_comp_channel {
    _p: [u8; 0],
}

/// `struct shim_event`: a CM event, copied and acknowledged.
#[repr(C)]
pub struct ShimEvent {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: i32,
    pub status: i32,
    pub private_data: [u8; 256],
    pub private_data_len: u32,
    pub responder_resources: u32,
    pub initiator_depth: u32,
}

impl Default for ShimEvent {
    fn default() -> Self {
        Self {
            id: std::ptr::null_mut(),
            listen_id: std::ptr::null_mut(),
            event: 0,
            status: 0,
            private_data: [0; 256],
            private_data_len: 0,
            responder_resources: 0,
            initiator_depth: 0,
        }
    }
}

/// `struct shim_wc`: a work completion.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ShimWc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub byte_len: u32,
    pub wc_flags: u32,
    pub invalidated_rkey: u32,
    pub qp_num: u32,
    pub vendor_err: u32,
    pub pad: u32,
}

#[repr(C)]
pub struct PollFd {
    pub fd: c_int,
    pub events: i16,
    pub revents: i16,
}
pub const POLLIN: i16 = 1;

// enum rdma_cm_event_type
pub const CM_ADDR_RESOLVED: i32 = 0;
pub const CM_ROUTE_RESOLVED: i32 = 2;
pub const CM_CONNECT_REQUEST: i32 = 4;
pub const CM_CONNECT_ERROR: i32 = 6;
pub const CM_UNREACHABLE: i32 = 7;
pub const CM_REJECTED: i32 = 8;
pub const CM_ESTABLISHED: i32 = 9;
pub const CM_DISCONNECTED: i32 = 10;
pub const CM_DEVICE_REMOVAL: i32 = 11;
pub const CM_TIMEWAIT_EXIT: i32 = 15;

// enum ibv_wc_status
pub const WC_SUCCESS: u32 = 0;
pub const WC_REM_ACCESS_ERR: u32 = 10;
pub const WC_FLUSH_ERR: u32 = 5;

// shim_post_send operations and flags
pub const OP_SEND: c_int = 0;
pub const OP_SEND_INV: c_int = 1;
pub const OP_WRITE: c_int = 2;
pub const OP_READ: c_int = 3;
pub const F_SIGNALED: c_int = 1;
pub const F_INLINE: c_int = 2;

pub const SIGINT: c_int = 2;
pub const SIGUSR1: c_int = 10;
pub const SIGTERM: c_int = 15;

#[link(name = "rdmacm")]
extern "C" {
    pub fn rdma_create_event_channel() -> *mut rdma_event_channel;
    pub fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int;
    pub fn rdma_destroy_qp(id: *mut rdma_cm_id);
    pub fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int;
}

#[link(name = "ibverbs")]
extern "C" {
    pub fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd;
    pub fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int;
    pub fn ibv_create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel;
    pub fn ibv_create_cq(
        ctx: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
    ) -> *mut ibv_cq;
    pub fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int;
}

extern "C" {
    pub fn poll(fds: *mut PollFd, nfds: u64, timeout: c_int) -> c_int;

    pub fn shim_set_nonblock(fd: c_int) -> c_int;
    pub fn shim_ec_fd(ec: *mut rdma_event_channel) -> c_int;
    pub fn shim_comp_fd(ch: *mut ibv_comp_channel) -> c_int;
    pub fn shim_listen(
        ec: *mut rdma_event_channel,
        addr: *const c_char,
        port: u16,
        backlog: c_int,
        out: *mut *mut rdma_cm_id,
    ) -> c_int;
    pub fn shim_create_id(ec: *mut rdma_event_channel, out: *mut *mut rdma_cm_id) -> c_int;
    pub fn shim_resolve_addr(
        id: *mut rdma_cm_id,
        addr: *const c_char,
        port: u16,
        timeout_ms: c_int,
    ) -> c_int;
    pub fn shim_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int;
    pub fn shim_connect(id: *mut rdma_cm_id, responder_resources: u8, initiator_depth: u8)
        -> c_int;
    pub fn shim_get_event(ec: *mut rdma_event_channel, out: *mut ShimEvent) -> c_int;
    pub fn shim_id_verbs(id: *mut rdma_cm_id) -> *mut ibv_context;
    pub fn shim_id_qp(id: *mut rdma_cm_id) -> *mut ibv_qp;
    pub fn shim_id_peer(id: *mut rdma_cm_id, buf: *mut c_char, len: c_int) -> c_int;
    pub fn shim_query_device(
        ctx: *mut ibv_context,
        max_qp_rd_atom: *mut u32,
        max_qp_init_rd_atom: *mut u32,
        max_qp_wr: *mut u32,
        max_cqe: *mut u32,
    ) -> c_int;
    pub fn shim_create_qp(
        id: *mut rdma_cm_id,
        pd: *mut ibv_pd,
        cq: *mut ibv_cq,
        max_send_wr: u32,
        max_recv_wr: u32,
        max_inline: u32,
    ) -> c_int;
    pub fn shim_accept(
        id: *mut rdma_cm_id,
        private_data: *const c_void,
        len: u8,
        responder_resources: u8,
        initiator_depth: u8,
    ) -> c_int;
    pub fn shim_reject(id: *mut rdma_cm_id, private_data: *const c_void, len: u8) -> c_int;
    pub fn shim_reg_mr(
        pd: *mut ibv_pd,
        addr: *mut c_void,
        len: usize,
        remote: c_int,
    ) -> *mut ibv_mr;
    pub fn shim_mr_lkey(mr: *mut ibv_mr) -> u32;
    pub fn shim_mr_rkey(mr: *mut ibv_mr) -> u32;
    pub fn shim_req_notify(cq: *mut ibv_cq) -> c_int;
    pub fn shim_qp_error(qp: *mut ibv_qp) -> c_int;
    pub fn shim_get_cq_event(
        ch: *mut ibv_comp_channel,
        cq: *mut *mut ibv_cq,
        ctx: *mut *mut c_void,
    ) -> c_int;
    pub fn shim_poll_cq(cq: *mut ibv_cq, n: c_int, out: *mut ShimWc) -> c_int;
    pub fn shim_post_recv(
        qp: *mut ibv_qp,
        wr_id: u64,
        addr: *mut c_void,
        len: u32,
        lkey: u32,
    ) -> c_int;
    #[allow(clippy::too_many_arguments)]
    pub fn shim_post_send(
        qp: *mut ibv_qp,
        wr_id: u64,
        op: c_int,
        flags: c_int,
        addr: *mut c_void,
        len: u32,
        lkey: u32,
        remote_addr: u64,
        rkey: u32,
        invalidate_rkey: u32,
    ) -> c_int;
    pub fn shim_catch_signal(sig: c_int) -> c_int;
    pub fn shim_take_signal(sig: c_int) -> c_int;
    fn shim_wc_status_str(status: u32) -> *const c_char;
    fn shim_event_str(event: c_int) -> *const c_char;
}

/// The verbs name of a work completion status.
pub fn wc_status_str(status: u32) -> String {
    // SAFETY: returns a static string for any value.
    unsafe { CStr::from_ptr(shim_wc_status_str(status)) }
        .to_string_lossy()
        .into_owned()
}

/// The librdmacm name of a CM event type.
pub fn event_str(event: i32) -> String {
    // SAFETY: returns a static string for any value.
    unsafe { CStr::from_ptr(shim_event_str(event)) }
        .to_string_lossy()
        .into_owned()
}

/// The text of a negative errno returned by the shim.
pub fn errno_str(neg: c_int) -> String {
    std::io::Error::from_raw_os_error(-neg).to_string()
}
