// SPDX-License-Identifier: GPL-2.0

//! Helpers over NVMe command (SQE, 64 bytes) and completion (CQE, 16 bytes)
//! capsules, little-endian on the wire.
//!
//! SQE layout used here: byte 0 opcode, byte 1 flags (bits 7:6 PSDT),
//! bytes 2..4 command identifier, 4..8 namespace ID (for fabrics commands
//! byte 4 is the fabrics command type), 24..40 the data pointer, which holds
//! SGL descriptor 1 on fabrics.
//!
//! CQE layout: bytes 0..8 command specific result, 8..10 SQ head pointer,
//! 10..12 SQ identifier, 12..14 command identifier, 14..16 status, whose
//! bit 0 is the phase tag (unused on fabrics).

use super::sgl::SGL_DESC_SIZE;

/// Size of a submission queue entry in bytes.
pub const SQE_SIZE: usize = 64;
/// Size of a completion queue entry in bytes.
pub const CQE_SIZE: usize = 16;

/// Mask of the PSDT field in the SQE flags byte.
pub const NVME_CMD_PSDT_MASK: u8 = 0xc0;
/// PSDT = 01b: SGLs are used for the data transfer, metadata is a buffer.
pub const NVME_CMD_SGL_METABUF: u8 = 1 << 6;

/// Opcode of every fabrics command, on admin and I/O queues alike.
pub const NVME_FABRICS_COMMAND: u8 = 0x7f;

/// Opcode of the Asynchronous Event Request admin command.
pub const NVME_ADMIN_ASYNC_EVENT: u8 = 0x0c;

/// Offset of the data pointer (SGL descriptor 1) in the SQE.
const DPTR_OFFSET: usize = 24;

/// Returns the opcode of a command.
pub fn opcode(sqe: &[u8; SQE_SIZE]) -> u8 {
    sqe[0]
}

/// Returns the command identifier of a command.
pub fn command_id(sqe: &[u8; SQE_SIZE]) -> u16 {
    u16::from_le_bytes([sqe[2], sqe[3]])
}

/// Returns the fabrics command type, or `None` if `sqe` is not a fabrics
/// command.
pub fn fctype(sqe: &[u8; SQE_SIZE]) -> Option<u8> {
    (sqe[0] == NVME_FABRICS_COMMAND).then_some(sqe[4])
}

/// Stores `desc` as SGL descriptor 1 and sets PSDT to "SGL, metadata
/// buffer", replacing whatever PSDT value was there.
pub fn set_sgl(sqe: &mut [u8; SQE_SIZE], desc: &[u8; SGL_DESC_SIZE]) {
    for (dst, src) in sqe.iter_mut().skip(DPTR_OFFSET).zip(desc) {
        *dst = *src;
    }
    sqe[1] = (sqe[1] & !NVME_CMD_PSDT_MASK) | NVME_CMD_SGL_METABUF;
}

/// Returns a name for `opcode` for tracing; `admin` selects the admin or
/// the I/O command set.
pub fn opcode_name(admin: bool, opcode: u8) -> &'static str {
    match (admin, opcode) {
        (_, NVME_FABRICS_COMMAND) => "fabrics",
        (true, 0x02) => "get log page",
        (true, 0x06) => "identify",
        (true, 0x08) => "abort",
        (true, 0x09) => "set features",
        (true, 0x0a) => "get features",
        (true, 0x0c) => "async event",
        (true, 0x18) => "keep alive",
        (false, 0x00) => "flush",
        (false, 0x01) => "write",
        (false, 0x02) => "read",
        (false, 0x08) => "write zeroes",
        (false, 0x09) => "dsm",
        _ => "unknown",
    }
}

/// Returns a name for a fabrics command type for tracing.
pub fn fabrics_type_name(fctype: u8) -> &'static str {
    match fctype {
        0x00 => "property set",
        0x01 => "connect",
        0x04 => "property get",
        0x05 => "auth send",
        0x06 => "auth receive",
        0x08 => "disconnect",
        _ => "unknown",
    }
}

/// Returns a name for the command in `sqe` for tracing: the fabrics command
/// type for fabrics commands, the opcode name otherwise.
pub fn command_name(admin: bool, sqe: &[u8; SQE_SIZE]) -> &'static str {
    match fctype(sqe) {
        Some(t) => fabrics_type_name(t),
        None => opcode_name(admin, opcode(sqe)),
    }
}

/// A decoded completion queue entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    /// Command specific result (dwords 0 and 1).
    pub result: u64,
    /// SQ head pointer.
    pub sq_head: u16,
    /// SQ identifier.
    pub sq_id: u16,
    /// Identifier of the completed command.
    pub command_id: u16,
    /// Status field without the phase tag: bits 7:0 status code, 10:8
    /// status code type, 12:11 command retry delay, 13 more, 14 do not
    /// retry.
    pub status: u16,
}

impl Cqe {
    /// Decodes a completion queue entry. Every byte pattern is valid.
    pub fn decode(cqe: &[u8; CQE_SIZE]) -> Self {
        let [r0, r1, r2, r3, r4, r5, r6, r7, h0, h1, q0, q1, c0, c1, s0, s1] = *cqe;
        Self {
            result: u64::from_le_bytes([r0, r1, r2, r3, r4, r5, r6, r7]),
            sq_head: u16::from_le_bytes([h0, h1]),
            sq_id: u16::from_le_bytes([q0, q1]),
            command_id: u16::from_le_bytes([c0, c1]),
            status: u16::from_le_bytes([s0, s1]) >> 1,
        }
    }

    #[cfg(test)]
    /// Status code.
    pub fn sc(&self) -> u8 {
        (self.status & 0xff) as u8
    }

    #[cfg(test)]
    /// Status code type.
    pub fn sct(&self) -> u8 {
        ((self.status >> 8) & 0x7) as u8
    }

    #[cfg(test)]
    /// Do not retry: the command would fail again if retried.
    pub fn dnr(&self) -> bool {
        self.status & (1 << 14) != 0
    }

    #[cfg(test)]
    /// True if the command succeeded (status code type and status code are
    /// both zero; the retry delay, more and DNR bits are ignored).
    pub fn is_ok(&self) -> bool {
        self.status & 0x7ff == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_sgl_writes_dptr_and_psdt() {
        let mut sqe = [0xa5u8; SQE_SIZE];
        let desc: [u8; 16] = core::array::from_fn(|i| i as u8 + 1);
        set_sgl(&mut sqe, &desc);
        assert_eq!(&sqe[24..40], &desc);
        assert!(sqe[..1].iter().all(|&b| b == 0xa5));
        assert!(sqe[2..24].iter().all(|&b| b == 0xa5));
        assert!(sqe[40..].iter().all(|&b| b == 0xa5));
        // 0xa5 = 10_100101: PSDT 10 replaced by 01, other flag bits kept.
        assert_eq!(sqe[1], 0x65);

        let mut sqe = [0u8; SQE_SIZE];
        set_sgl(&mut sqe, &desc);
        assert_eq!(sqe[1], NVME_CMD_SGL_METABUF);
        sqe[1] = 0xff;
        set_sgl(&mut sqe, &desc);
        assert_eq!(sqe[1], 0x7f);
    }

    #[test]
    fn sqe_fields() {
        let mut sqe = [0u8; SQE_SIZE];
        sqe[0] = 0x02;
        sqe[2] = 0x34;
        sqe[3] = 0x12;
        sqe[4] = 0x01;
        assert_eq!(opcode(&sqe), 0x02);
        assert_eq!(command_id(&sqe), 0x1234);
        assert_eq!(fctype(&sqe), None);
        assert_eq!(command_name(false, &sqe), "read");
        assert_eq!(command_name(true, &sqe), "get log page");
        sqe[0] = NVME_FABRICS_COMMAND;
        assert_eq!(fctype(&sqe), Some(0x01));
        assert_eq!(command_name(false, &sqe), "connect");
        assert_eq!(command_name(true, &sqe), "connect");
    }

    #[test]
    fn names() {
        let admin = [
            (0x02, "get log page"),
            (0x06, "identify"),
            (0x08, "abort"),
            (0x09, "set features"),
            (0x0a, "get features"),
            (0x0c, "async event"),
            (0x18, "keep alive"),
            (0x7f, "fabrics"),
        ];
        let io = [
            (0x00, "flush"),
            (0x01, "write"),
            (0x02, "read"),
            (0x08, "write zeroes"),
            (0x09, "dsm"),
            (0x7f, "fabrics"),
        ];
        for op in 0..=u8::MAX {
            let want = admin.iter().find(|e| e.0 == op).map_or("unknown", |e| e.1);
            assert_eq!(opcode_name(true, op), want, "admin {op:#x}");
            let want = io.iter().find(|e| e.0 == op).map_or("unknown", |e| e.1);
            assert_eq!(opcode_name(false, op), want, "io {op:#x}");
        }
        let fabrics = [
            (0x00, "property set"),
            (0x01, "connect"),
            (0x04, "property get"),
            (0x05, "auth send"),
            (0x06, "auth receive"),
            (0x08, "disconnect"),
        ];
        for t in 0..=u8::MAX {
            let want = fabrics.iter().find(|e| e.0 == t).map_or("unknown", |e| e.1);
            assert_eq!(fabrics_type_name(t), want, "fctype {t:#x}");
        }
    }

    #[test]
    fn cqe_decode() {
        let raw = [
            0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // result
            0x1f, 0x00, // sq_head 31
            0x02, 0x00, // sq_id 2
            0xcd, 0xab, // command_id
            0x01, 0x00, // status: only the phase bit
        ];
        let c = Cqe::decode(&raw);
        assert_eq!(c.result, 0x0807_0605_0403_0201);
        assert_eq!(c.sq_head, 31);
        assert_eq!(c.sq_id, 2);
        assert_eq!(c.command_id, 0xabcd);
        assert_eq!(c.status, 0);
        assert!(c.is_ok());
        assert!(!c.dnr());
    }

    fn with_status(raw_status: u16) -> Cqe {
        let mut raw = [0u8; CQE_SIZE];
        raw[14..].copy_from_slice(&raw_status.to_le_bytes());
        Cqe::decode(&raw)
    }

    #[test]
    fn cqe_status_bits() {
        // Invalid field (SCT 0, SC 0x02) with DNR, as NVME_SC_INVALID_FIELD
        // | NVME_STATUS_DNR (0x4002) shifted left by one on the wire.
        let c = with_status(0x8004);
        assert_eq!(c.status, 0x4002);
        assert_eq!(c.sc(), 0x02);
        assert_eq!(c.sct(), 0);
        assert!(c.dnr());
        assert!(!c.is_ok());

        // Path error (SCT 3), SC 0x70, no DNR, phase bit set.
        let c = with_status((0x0370 << 1) | 1);
        assert_eq!(c.sc(), 0x70);
        assert_eq!(c.sct(), 3);
        assert!(!c.dnr());
        assert!(!c.is_ok());

        // Only retry delay and more bits: still success.
        let c = with_status(((3 << 11) | (1 << 13)) << 1);
        assert!(c.is_ok());
        assert!(!c.dnr());

        let c = with_status(u16::MAX);
        assert_eq!(c.status, 0x7fff);
        assert_eq!(c.sc(), 0xff);
        assert_eq!(c.sct(), 7);
        assert!(c.dnr());
        assert!(!c.is_ok());
    }
}
