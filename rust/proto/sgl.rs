// SPDX-License-Identifier: GPL-2.0

//! NVMe SGL descriptors as used by the NVMe/RDMA transport.
//!
//! A descriptor is 16 little-endian bytes. Byte 15 is the descriptor
//! identifier: the high nibble is the descriptor type, the low nibble the
//! subtype.
//!
//! - Keyed SGL data block (type 0x4): the target moves the data with RDMA
//!   READ/WRITE using the remote key. Bytes 0..8 address, 8..11 24-bit
//!   length, 11..15 key. Subtype 0x0 is a plain address; 0xF also asks the
//!   target to invalidate the key remotely (SEND with invalidate) when it
//!   sends the response capsule.
//! - SGL data block (type 0x0) with the offset subtype (0x1): the data is in
//!   the command capsule itself. Bytes 0..8 offset into the in-capsule data
//!   area, 8..12 32-bit length, 12..15 reserved.

/// Size of one SGL descriptor in bytes.
pub const SGL_DESC_SIZE: usize = 16;

/// Largest length a keyed SGL data block descriptor can carry (24 bits).
pub const MAX_KEYED_LEN: u32 = 0xff_ffff;

/// Descriptor type: SGL data block (unkeyed).
pub const SGL_FMT_DATA_DESC: u8 = 0x0;
/// Descriptor type: keyed SGL data block.
pub const KEY_SGL_FMT_DATA_DESC: u8 = 0x4;

/// Subtype: the address field is a memory address.
pub const SGL_FMT_ADDRESS: u8 = 0x0;
/// Subtype: the address field is an offset (in-capsule data).
pub const SGL_FMT_OFFSET: u8 = 0x1;
/// Subtype (keyed only): address, and invalidate the key remotely.
pub const SGL_FMT_INVALIDATE: u8 = 0xf;

/// Builds the identifier byte (byte 15) from a type and a subtype.
const fn desc_id(ty: u8, subtype: u8) -> u8 {
    (ty << 4) | (subtype & 0xf)
}

const KEYED_ADDRESS: u8 = desc_id(KEY_SGL_FMT_DATA_DESC, SGL_FMT_ADDRESS);
const KEYED_INVALIDATE: u8 = desc_id(KEY_SGL_FMT_DATA_DESC, SGL_FMT_INVALIDATE);
const INLINE_OFFSET: u8 = desc_id(SGL_FMT_DATA_DESC, SGL_FMT_OFFSET);

/// A keyed SGL data block descriptor: host memory the target accesses with
/// RDMA.
///
/// A descriptor with every field zero is the "no data" descriptor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyedSgl {
    /// Address (IOVA) of the buffer in the memory region.
    pub addr: u64,
    /// Length in bytes; at most [`MAX_KEYED_LEN`].
    pub len: u32,
    /// Remote key of the memory region.
    pub key: u32,
    /// Ask the target to invalidate `key` when it sends the response.
    pub invalidate: bool,
}

impl KeyedSgl {
    /// Encodes the descriptor, or `None` if `len` does not fit in 24 bits.
    pub fn encode(&self) -> Option<[u8; SGL_DESC_SIZE]> {
        if self.len > MAX_KEYED_LEN {
            return None;
        }
        let [a0, a1, a2, a3, a4, a5, a6, a7] = self.addr.to_le_bytes();
        let [l0, l1, l2, _] = self.len.to_le_bytes();
        let [k0, k1, k2, k3] = self.key.to_le_bytes();
        let id = if self.invalidate {
            KEYED_INVALIDATE
        } else {
            KEYED_ADDRESS
        };
        Some([
            a0, a1, a2, a3, a4, a5, a6, a7, l0, l1, l2, k0, k1, k2, k3, id,
        ])
    }

    #[cfg(test)]
    /// Decodes a keyed data block descriptor (address or invalidate
    /// subtype); `None` for any other descriptor type.
    pub fn decode(desc: &[u8; SGL_DESC_SIZE]) -> Option<Self> {
        let [a0, a1, a2, a3, a4, a5, a6, a7, l0, l1, l2, k0, k1, k2, k3, id] = *desc;
        let invalidate = match id {
            KEYED_ADDRESS => false,
            KEYED_INVALIDATE => true,
            _ => return None,
        };
        Some(Self {
            addr: u64::from_le_bytes([a0, a1, a2, a3, a4, a5, a6, a7]),
            len: u32::from_le_bytes([l0, l1, l2, 0]),
            key: u32::from_le_bytes([k0, k1, k2, k3]),
            invalidate,
        })
    }
}

/// An SGL data block descriptor with the offset subtype: data carried in
/// the command capsule right after the SQE.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InlineSgl {
    /// Offset of the data in the in-capsule data area (the controller's
    /// ICDOFF, normally 0).
    pub offset: u64,
    /// Length of the in-capsule data in bytes.
    pub len: u32,
}

impl InlineSgl {
    /// Encodes the descriptor; the reserved bytes are zero.
    pub fn encode(&self) -> [u8; SGL_DESC_SIZE] {
        let [o0, o1, o2, o3, o4, o5, o6, o7] = self.offset.to_le_bytes();
        let [l0, l1, l2, l3] = self.len.to_le_bytes();
        let id = INLINE_OFFSET;
        [o0, o1, o2, o3, o4, o5, o6, o7, l0, l1, l2, l3, 0, 0, 0, id]
    }

    #[cfg(test)]
    /// Decodes a data block descriptor with the offset subtype; `None` for
    /// any other descriptor type. Reserved bytes are ignored.
    pub fn decode(desc: &[u8; SGL_DESC_SIZE]) -> Option<Self> {
        let [o0, o1, o2, o3, o4, o5, o6, o7, l0, l1, l2, l3, _, _, _, id] = *desc;
        if id != INLINE_OFFSET {
            return None;
        }
        Some(Self {
            offset: u64::from_le_bytes([o0, o1, o2, o3, o4, o5, o6, o7]),
            len: u32::from_le_bytes([l0, l1, l2, l3]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_byte_image() {
        let d = KeyedSgl {
            addr: 0x0123_4567_89ab_cdef,
            len: 0x0012_3456,
            key: 0xdead_beef,
            invalidate: false,
        };
        let want = [
            0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, // addr
            0x56, 0x34, 0x12, // len
            0xef, 0xbe, 0xad, 0xde, // key
            0x40, // keyed data block, address
        ];
        assert_eq!(d.encode(), Some(want));
        assert_eq!(KeyedSgl::decode(&want), Some(d));

        let inv = KeyedSgl {
            invalidate: true,
            ..d
        };
        let mut want_inv = want;
        want_inv[15] = 0x4f;
        assert_eq!(inv.encode(), Some(want_inv));
        assert_eq!(KeyedSgl::decode(&want_inv), Some(inv));
    }

    #[test]
    fn keyed_null_descriptor() {
        let mut want = [0u8; 16];
        want[15] = 0x40;
        assert_eq!(KeyedSgl::default().encode(), Some(want));
    }

    #[test]
    fn keyed_len_boundaries() {
        for len in [0, 1, 0xff, 0x100, 0xffff, 0x1_0000, 0xff_fffe, 0xff_ffff] {
            let d = KeyedSgl {
                addr: u64::MAX,
                len,
                key: u32::MAX,
                invalidate: true,
            };
            let bytes = d.encode().unwrap();
            assert_eq!(&bytes[8..11], &len.to_le_bytes()[..3]);
            assert_eq!(KeyedSgl::decode(&bytes), Some(d));
        }
        let max = KeyedSgl {
            len: MAX_KEYED_LEN,
            ..KeyedSgl::default()
        };
        assert_eq!(&max.encode().unwrap()[8..11], &[0xff, 0xff, 0xff]);
        for len in [0x100_0000, 0x100_0001, u32::MAX] {
            let d = KeyedSgl {
                len,
                ..KeyedSgl::default()
            };
            assert_eq!(d.encode(), None);
        }
    }

    #[test]
    fn keyed_decode_refuses_other_types() {
        let mut bytes = KeyedSgl::default().encode().unwrap();
        for id in 0..=u8::MAX {
            bytes[15] = id;
            assert_eq!(KeyedSgl::decode(&bytes).is_some(), id == 0x40 || id == 0x4f);
        }
    }

    #[test]
    fn inline_byte_image() {
        let d = InlineSgl {
            offset: 0x10,
            len: 0x0001_2000,
        };
        let want = [
            0x10, 0, 0, 0, 0, 0, 0, 0, // offset
            0x00, 0x20, 0x01, 0x00, // len
            0, 0, 0,    // reserved
            0x01, // data block, offset
        ];
        assert_eq!(d.encode(), want);
        assert_eq!(InlineSgl::decode(&want), Some(d));
    }

    #[test]
    fn inline_round_trip_and_type_check() {
        for (offset, len) in [(0, 0), (0, 4096), (u64::MAX, u32::MAX), (1 << 40, 1)] {
            let d = InlineSgl { offset, len };
            assert_eq!(InlineSgl::decode(&d.encode()), Some(d));
        }
        let mut bytes = InlineSgl::default().encode();
        for id in 0..=u8::MAX {
            bytes[15] = id;
            assert_eq!(InlineSgl::decode(&bytes).is_some(), id == 0x01);
        }
        // Reserved bytes are ignored on decode.
        let mut bytes = InlineSgl { offset: 0, len: 7 }.encode();
        bytes[12] = 0xaa;
        assert_eq!(
            InlineSgl::decode(&bytes),
            Some(InlineSgl { offset: 0, len: 7 })
        );
        // A keyed descriptor is not an inline one and vice versa.
        let keyed = KeyedSgl::default().encode().unwrap();
        assert_eq!(InlineSgl::decode(&keyed), None);
        assert_eq!(KeyedSgl::decode(&InlineSgl::default().encode()), None);
    }
}
