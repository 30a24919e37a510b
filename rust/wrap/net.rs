// SPDX-License-Identifier: GPL-2.0

//! Socket addresses of the transport's connections, parsed by the kernel's
//! `inet_pton_with_scope` (IPv4, IPv6 with its `%interface` scope).
//!
//! C header: [`include/linux/inet.h`](srctree/include/linux/inet.h).

use super::bindings;
use kernel::error::to_result;
use kernel::prelude::*;
use kernel::str::CStr;

/// An IPv4 or IPv6 socket address (`struct sockaddr_storage`).
#[derive(Clone, Copy)]
pub(crate) struct SockAddr(bindings::__kernel_sockaddr_storage);

// SAFETY: plain bytes (bindgen gives the storage's alignment member a pointer type, which is
// never used as one).
unsafe impl Send for SockAddr {}
// SAFETY: as above.
unsafe impl Sync for SockAddr {}

impl SockAddr {
    /// Parses `addr` with `port` (none: port 0) in the initial network namespace.
    pub(crate) fn parse(addr: &CStr, port: Option<&CStr>) -> Result<Self> {
        let mut ss = bindings::__kernel_sockaddr_storage::default();
        // SAFETY: valid NUL-terminated strings (or a null port) and an output buffer of the
        // right type.
        to_result(unsafe {
            bindings::rsrdma_parse_addr(
                addr.as_char_ptr(),
                port.map_or(core::ptr::null(), |p| p.as_char_ptr()),
                &mut ss,
            )
        })?;
        Ok(Self(ss))
    }

    /// The address as the bytes of a `struct sockaddr_storage`.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        // SAFETY: the storage is plain bytes, all of them initialized (zeroed by `default`,
        // then filled in by the parser), viewed for its own size while borrowed.
        unsafe {
            core::slice::from_raw_parts(
                core::ptr::from_ref(&self.0).cast::<u8>(),
                core::mem::size_of_val(&self.0),
            )
        }
    }

    pub(in crate::wrap) fn as_sockaddr(&self) -> *mut bindings::sockaddr {
        core::ptr::from_ref(&self.0).cast_mut().cast()
    }
}
