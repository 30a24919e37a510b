// SPDX-License-Identifier: GPL-2.0

//! Error codes the transport returns that 6.12's `kernel::error::code` does not declare.

use kernel::bindings as kb;
use kernel::error::Error;

macro_rules! errnos {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {
        $(
            $(#[$m])*
            #[allow(non_snake_case)]
            pub(crate) fn $name() -> Error {
                Error::from_errno(-(kb::$name as i32))
            }
        )*
    };
}

errnos! {
    /// Transport endpoint is not connected.
    ENOTCONN,
    /// Operation not supported.
    EOPNOTSUPP,
    /// Operation already in progress (duplicate connect).
    EALREADY,
    /// Connection timed out.
    ETIMEDOUT,
    /// Connection refused.
    ECONNREFUSED,
    /// Connection reset by peer.
    ECONNRESET,
    /// Protocol error (a malformed accept).
    EPROTO,
    /// Network is down.
    ENETDOWN,
    /// Required key not available (authentication without a key).
    ENOKEY,
    /// Key was rejected by service (authentication failed).
    EKEYREJECTED,
    /// Remote I/O error (peer memory the RDMA device does not reach, the block layer's
    /// convention).
    EREMOTEIO,
}
