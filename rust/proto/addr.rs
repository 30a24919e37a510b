// SPDX-License-Identifier: GPL-2.0

//! Transport addresses as the log shows them.
//!
//! The connect options carry the target's address as the user typed it;
//! the log shows the address it was parsed into, in the kernel's `%pISpc`
//! form: `10.0.2.15:4420`, `[fd00::15]:4420`, and for a scoped (link-local)
//! IPv6 address the interface index after the port, `[fe80::15]:4420%2`, as
//! `%pISpcs` writes it. An IPv6 address with its port and no brackets
//! (`fd00::15:4420`) would read as another address.

use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr};

/// `AF_INET` on Linux.
pub const AF_INET: u16 = 2;
/// `AF_INET6` on Linux.
pub const AF_INET6: u16 = 10;

/// An IP address and port, decoded from a socket address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `struct sockaddr_in`.
    V4 {
        /// The address.
        ip: Ipv4Addr,
        /// The port.
        port: u16,
    },
    /// `struct sockaddr_in6`.
    V6 {
        /// The address.
        ip: Ipv6Addr,
        /// The port.
        port: u16,
        /// The interface index of a scoped address, 0 for none.
        scope: u32,
    },
}

impl Endpoint {
    /// The port.
    pub fn port(&self) -> u16 {
        match *self {
            Self::V4 { port, .. } | Self::V6 { port, .. } => port,
        }
    }

    /// Decodes the bytes of a `struct sockaddr_in` or `struct sockaddr_in6`
    /// (the family in host byte order, the port in network byte order).
    /// `None` for another family or too few bytes.
    pub fn from_sockaddr(sa: &[u8]) -> Option<Self> {
        let family = u16::from_ne_bytes(sa.get(0..2)?.try_into().ok()?);
        let port = u16::from_be_bytes(sa.get(2..4)?.try_into().ok()?);
        match family {
            AF_INET => {
                let ip: [u8; 4] = sa.get(4..8)?.try_into().ok()?;
                Some(Self::V4 {
                    ip: ip.into(),
                    port,
                })
            }
            AF_INET6 => {
                // sin6_flowinfo (4 bytes) comes before the address.
                let ip: [u8; 16] = sa.get(8..24)?.try_into().ok()?;
                let scope = u32::from_ne_bytes(sa.get(24..28)?.try_into().ok()?);
                Some(Self::V6 {
                    ip: ip.into(),
                    port,
                    scope,
                })
            }
            _ => None,
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::V4 { ip, port } => write!(f, "{ip}:{port}"),
            Self::V6 { ip, port, scope: 0 } => write!(f, "[{ip}]:{port}"),
            Self::V6 { ip, port, scope } => write!(f, "[{ip}]:{port}%{scope}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sockaddr_in(ip: [u8; 4], port: u16) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&AF_INET.to_ne_bytes());
        b.extend_from_slice(&port.to_be_bytes());
        b.extend_from_slice(&ip);
        b.extend_from_slice(&[0; 8]);
        b
    }

    fn sockaddr_in6(ip: [u8; 16], port: u16, scope: u32) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&AF_INET6.to_ne_bytes());
        b.extend_from_slice(&port.to_be_bytes());
        b.extend_from_slice(&0x1234_5678u32.to_be_bytes());
        b.extend_from_slice(&ip);
        b.extend_from_slice(&scope.to_ne_bytes());
        b
    }

    fn shown(sa: &[u8]) -> String {
        Endpoint::from_sockaddr(sa).unwrap().to_string()
    }

    #[test]
    fn ipv4() {
        assert_eq!(shown(&sockaddr_in([10, 0, 2, 15], 4420)), "10.0.2.15:4420");
        assert_eq!(shown(&sockaddr_in([0; 4], 0)), "0.0.0.0:0");
    }

    #[test]
    fn ipv6_in_brackets_compressed() {
        let fd00_15: Ipv6Addr = "fd00::15".parse().unwrap();
        assert_eq!(
            shown(&sockaddr_in6(fd00_15.octets(), 4420, 0)),
            "[fd00::15]:4420"
        );
        let full: Ipv6Addr = "2001:db8:0:1:0:0:0:1".parse().unwrap();
        assert_eq!(
            shown(&sockaddr_in6(full.octets(), 65535, 0)),
            "[2001:db8:0:1::1]:65535"
        );
        let mapped: Ipv6Addr = "::ffff:10.0.2.15".parse().unwrap();
        assert_eq!(
            shown(&sockaddr_in6(mapped.octets(), 4420, 0)),
            "[::ffff:10.0.2.15]:4420"
        );
    }

    #[test]
    fn scope_after_the_port() {
        let ll: Ipv6Addr = "fe80::5054:ff:fe12:3456".parse().unwrap();
        assert_eq!(
            shown(&sockaddr_in6(ll.octets(), 4421, 2)),
            "[fe80::5054:ff:fe12:3456]:4421%2"
        );
    }

    #[test]
    fn other_families_and_short_buffers() {
        let mut unix = sockaddr_in([1, 2, 3, 4], 1);
        unix[0..2].copy_from_slice(&1u16.to_ne_bytes());
        assert_eq!(Endpoint::from_sockaddr(&unix), None);
        assert_eq!(Endpoint::from_sockaddr(&[]), None);
        assert_eq!(
            Endpoint::from_sockaddr(&sockaddr_in([1, 2, 3, 4], 1)[..7]),
            None
        );
        let v6 = sockaddr_in6([0; 16], 1, 0);
        assert_eq!(Endpoint::from_sockaddr(&v6[..27]), None);
        assert!(Endpoint::from_sockaddr(&v6).is_some());
    }
}
