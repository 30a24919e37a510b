// SPDX-License-Identifier: GPL-2.0

//! NVMe and NVMe/RDMA wire formats the target needs: command fields, SGL descriptors,
//! completions, CM private data, the Identify data structures. Little-endian throughout;
//! offsets as in the NVMe base and fabrics specifications (and include/linux/nvme.h).

pub const SQE_SIZE: usize = 64;
pub const CQE_SIZE: usize = 16;
pub const LBA_SHIFT: u32 = 9;

// Admin opcodes
pub const ADM_GET_LOG_PAGE: u8 = 0x02;
pub const ADM_IDENTIFY: u8 = 0x06;
pub const ADM_ABORT: u8 = 0x08;
pub const ADM_SET_FEATURES: u8 = 0x09;
pub const ADM_GET_FEATURES: u8 = 0x0a;
pub const ADM_ASYNC_EVENT: u8 = 0x0c;
pub const ADM_KEEP_ALIVE: u8 = 0x18;
pub const FABRICS: u8 = 0x7f;

// Fabrics command types
pub const FCT_PROP_SET: u8 = 0x00;
pub const FCT_CONNECT: u8 = 0x01;
pub const FCT_PROP_GET: u8 = 0x04;

// I/O opcodes
pub const IO_FLUSH: u8 = 0x00;
pub const IO_WRITE: u8 = 0x01;
pub const IO_READ: u8 = 0x02;
pub const IO_WRITE_ZEROES: u8 = 0x08;

// Status codes (the status field without the phase bit, as Linux's NVME_SC_*)
pub const SC_SUCCESS: u16 = 0x0;
pub const SC_INVALID_OPCODE: u16 = 0x1;
pub const SC_INVALID_FIELD: u16 = 0x2;
pub const SC_DATA_XFER_ERROR: u16 = 0x4;
pub const SC_INTERNAL: u16 = 0x6;
pub const SC_INVALID_NS: u16 = 0xb;
pub const SC_CMD_SEQ_ERROR: u16 = 0xc;
pub const SC_SGL_INVALID_DATA: u16 = 0xf;
pub const SC_SGL_INVALID_TYPE: u16 = 0x11;
pub const SC_SGL_INVALID_OFFSET: u16 = 0x16;
pub const SC_LBA_RANGE: u16 = 0x80;
/// Media errors (status code type 2): write fault, unrecovered read error.
pub const SC_WRITE_FAULT: u16 = 0x280;
pub const SC_READ_ERROR: u16 = 0x281;
pub const SC_CONNECT_FORMAT: u16 = 0x180;
pub const SC_CONNECT_CTRL_BUSY: u16 = 0x181;
pub const SC_CONNECT_INVALID_PARAM: u16 = 0x182;
pub const SC_CONNECT_INVALID_HOST: u16 = 0x184;
pub const SC_DNR: u16 = 0x4000;
/// Asynchronous event result: a notice (type 2), namespace attribute changed (info 0), whose
/// log page is the Changed Namespace List (0x04).
pub const AEN_NS_CHANGED: u64 = 0x0004_0002;

// Properties
pub const PROP_CAP: u32 = 0x00;
pub const PROP_VS: u32 = 0x08;
pub const PROP_CC: u32 = 0x14;
pub const PROP_CSTS: u32 = 0x1c;
pub const VS_1_3: u32 = 0x0001_0300;
pub const CC_EN: u32 = 1;
pub const CC_SHN_MASK: u32 = 3 << 14;
pub const CSTS_RDY: u32 = 1;
pub const CSTS_SHST_CMPLT: u32 = 2 << 2;

/// Size of the Fabrics Connect data.
pub const CONNECT_DATA_SIZE: usize = 1024;

pub fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

pub fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

pub fn le64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

fn put16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

fn put_str(b: &mut [u8], off: usize, len: usize, s: &str, pad: u8) {
    let field = &mut b[off..off + len];
    field.fill(pad);
    let n = s.len().min(len);
    field[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// A NUL-terminated (or full-width) string field.
pub fn cstr_field(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Fields every command has.
#[derive(Clone, Copy, Debug)]
pub struct Sqe {
    pub raw: [u8; SQE_SIZE],
}

impl Sqe {
    pub fn opcode(&self) -> u8 {
        self.raw[0]
    }
    pub fn cid(&self) -> u16 {
        le16(&self.raw, 2)
    }
    pub fn nsid(&self) -> u32 {
        le32(&self.raw, 4)
    }
    pub fn fctype(&self) -> u8 {
        self.raw[4]
    }
    pub fn cdw(&self, n: usize) -> u32 {
        le32(&self.raw, n * 4)
    }
    pub fn sgl(&self) -> Sgl {
        Sgl::decode(&self.raw[24..40])
    }
}

/// The data pointer of a command (one SGL descriptor).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sgl {
    /// Keyed SGL data block: host memory for RDMA READ/WRITE. `invalidate` asks for SEND
    /// with invalidate of `key` with the response.
    Keyed {
        addr: u64,
        len: u32,
        key: u32,
        invalidate: bool,
    },
    /// Data block with an offset into the in-capsule data.
    Inline { offset: u64, len: u32 },
    /// Any other descriptor identifier.
    Other(u8),
}

impl Sgl {
    pub fn decode(d: &[u8]) -> Sgl {
        let id = d[15];
        match id {
            0x40 | 0x4f => Sgl::Keyed {
                addr: le64(d, 0),
                len: u32::from_le_bytes([d[8], d[9], d[10], 0]),
                key: le32(d, 11),
                invalidate: id == 0x4f,
            },
            0x01 => Sgl::Inline {
                offset: le64(d, 0),
                len: le32(d, 8),
            },
            _ => Sgl::Other(id),
        }
    }
}

/// A response capsule.
pub fn cqe(result: u64, sq_head: u16, sq_id: u16, cid: u16, status: u16) -> [u8; CQE_SIZE] {
    let mut c = [0u8; CQE_SIZE];
    put64(&mut c, 0, result);
    put16(&mut c, 8, sq_head);
    put16(&mut c, 10, sq_id);
    put16(&mut c, 12, cid);
    // The status field is bits 15:1, the phase tag (unused on fabrics) bit 0.
    put16(&mut c, 14, status << 1);
    c
}

/// Names of the NVMe/RDMA CM reject statuses, as the transport binding defines them.
pub fn reject_name(sts: u16) -> &'static str {
    match sts {
        1 => "invalid private data length",
        2 => "invalid record format",
        3 => "invalid queue ID",
        4 => "invalid host SQ size",
        5 => "invalid host RQ size",
        6 => "no resources",
        7 => "invalid IRD",
        8 => "invalid ORD",
        9 => "invalid controller ID",
        _ => "unknown",
    }
}

/// The host's CM connect private data.
#[derive(Clone, Copy, Debug)]
pub struct CmRequest {
    pub recfmt: u16,
    pub qid: u16,
    pub hrqsize: u16,
    pub hsqsize: u16,
    pub cntlid: u16,
}

impl CmRequest {
    pub fn decode(b: &[u8]) -> Option<CmRequest> {
        (b.len() >= 32).then(|| CmRequest {
            recfmt: le16(b, 0),
            qid: le16(b, 2),
            hrqsize: le16(b, 4),
            hsqsize: le16(b, 6),
            cntlid: le16(b, 8),
        })
    }
}

/// The accept private data: record format 0, controller receive queue size.
pub fn cm_reply(crqsize: u16) -> [u8; 8] {
    let mut b = [0u8; 8];
    put16(&mut b, 2, crqsize);
    b
}

/// The reject private data: record format 0, status.
pub fn cm_reject(sts: u16) -> [u8; 4] {
    let mut b = [0u8; 4];
    put16(&mut b, 2, sts);
    b
}

/// What Identify Controller reports.
pub struct CtrlInfo<'a> {
    pub cntlid: u16,
    pub subnqn: &'a str,
    pub serial: &'a str,
    pub mdts: u8,
    pub maxcmd: u16,
    pub ioccsz_bytes: u32,
}

pub const IDENTIFY_SIZE: usize = 4096;

/// Identify Controller (CNS 1).
pub fn identify_ctrl(i: &CtrlInfo<'_>) -> Vec<u8> {
    let mut b = vec![0u8; IDENTIFY_SIZE];
    put16(&mut b, 0, 0); // vid: none, so that no quirk of the core matches
    put16(&mut b, 2, 0); // ssvid
    put_str(&mut b, 4, 20, i.serial, b' '); // sn
    put_str(&mut b, 24, 40, "rsrdma-target (tests)", b' '); // mn
    put_str(&mut b, 64, 8, "0.1", b' '); // fr
    b[72] = 6; // rab
    b[76] = 0; // cmic: single controller, no multipath head
    b[77] = i.mdts;
    put16(&mut b, 78, i.cntlid);
    put32(&mut b, 80, VS_1_3); // ver
    put32(&mut b, 92, 1 << 8); // oaes: namespace attribute notices (the host then sends an AER)
    b[111] = 1; // cntrltype: I/O controller
    b[258] = 3; // acl
    b[259] = 3; // aerl
    b[260] = 0x3; // frmw
    put16(&mut b, 320, 10); // kas: 100 ms units
    b[512] = 0x66; // sqes
    b[513] = 0x44; // cqes
    put16(&mut b, 514, i.maxcmd);
    put32(&mut b, 516, 1); // nn
    b[525] = 1; // vwc: volatile write cache, so the host sends Flush
                // sgls: SGLs supported (bit 0), keyed data block (bit 2), offset / in-capsule (bit 20)
    put32(&mut b, 536, (1 << 0) | (1 << 2) | (1 << 20));
    put_str(&mut b, 768, 256, i.subnqn, 0);
    put32(&mut b, 1792, i.ioccsz_bytes / 16); // ioccsz
    put32(&mut b, 1796, (CQE_SIZE / 16) as u32); // iorcsz
    put16(&mut b, 1800, 0); // icdoff
    b[1802] = 0; // fcatt: dynamic controller model
    b[1803] = 1; // msdbd
                 // Power state 0: 25 W, as the spec's example.
    put16(&mut b, 2048, 2500);
    b
}

/// The namespace's globally unique identifier, derived from the target's serial.
pub fn nguid(serial: &str) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[..4].copy_from_slice(b"rsrd");
    for (i, c) in serial.bytes().enumerate() {
        g[4 + i % 12] ^= c;
    }
    g
}

/// Identify Namespace (CNS 0) for a namespace of `blocks` 512-byte blocks.
pub fn identify_ns(blocks: u64, nguid: &[u8; 16]) -> Vec<u8> {
    let mut b = vec![0u8; IDENTIFY_SIZE];
    put64(&mut b, 0, blocks); // nsze
    put64(&mut b, 8, blocks); // ncap
    put64(&mut b, 16, blocks); // nuse
    b[25] = 0; // nlbaf: one format
    b[26] = 0; // flbas: format 0
    b[104..120].copy_from_slice(nguid);
    b[130] = LBA_SHIFT as u8; // lbaf[0].ds
    b
}

/// Active Namespace ID list (CNS 2) after `start`.
pub fn active_ns_list(start: u32) -> Vec<u8> {
    let mut b = vec![0u8; IDENTIFY_SIZE];
    if start < 1 {
        put32(&mut b, 0, 1);
    }
    b
}

/// Namespace Identification Descriptor list (CNS 3): NGUID and command set (NVM).
pub fn ns_desc_list(nguid: &[u8; 16]) -> Vec<u8> {
    let mut b = vec![0u8; IDENTIFY_SIZE];
    b[0] = 2; // NIDT NGUID
    b[1] = 16;
    b[4..20].copy_from_slice(nguid);
    b[20] = 4; // NIDT CSI
    b[21] = 1;
    b[24] = 0; // NVM
    b
}

/// Command names for the log.
pub fn admin_name(op: u8) -> &'static str {
    match op {
        ADM_GET_LOG_PAGE => "get-log-page",
        ADM_IDENTIFY => "identify",
        ADM_ABORT => "abort",
        ADM_SET_FEATURES => "set-features",
        ADM_GET_FEATURES => "get-features",
        ADM_ASYNC_EVENT => "async-event",
        ADM_KEEP_ALIVE => "keep-alive",
        FABRICS => "fabrics",
        _ => "admin",
    }
}

pub fn io_name(op: u8) -> &'static str {
    match op {
        IO_FLUSH => "flush",
        IO_WRITE => "write",
        IO_READ => "read",
        IO_WRITE_ZEROES => "write-zeroes",
        _ => "io",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sgl_decode() {
        let mut d = [0u8; 16];
        d[0..8].copy_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
        d[8..11].copy_from_slice(&[0x00, 0x00, 0x40]); // 4 MiB
        d[11..15].copy_from_slice(&0xabcd_ef01u32.to_le_bytes());
        d[15] = 0x40;
        assert_eq!(
            Sgl::decode(&d),
            Sgl::Keyed {
                addr: 0x1122_3344_5566_7788,
                len: 4 << 20,
                key: 0xabcd_ef01,
                invalidate: false
            }
        );
        let mut d = [0u8; 16];
        d[8..12].copy_from_slice(&4096u32.to_le_bytes());
        d[15] = 0x01;
        assert_eq!(
            Sgl::decode(&d),
            Sgl::Inline {
                offset: 0,
                len: 4096
            }
        );
    }

    #[test]
    fn cqe_layout() {
        let c = cqe(0x55, 3, 1, 0x1234, SC_CONNECT_CTRL_BUSY | SC_DNR);
        assert_eq!(le64(&c, 0), 0x55);
        assert_eq!(le16(&c, 12), 0x1234);
        assert_eq!(le16(&c, 14) >> 1, 0x4181);
    }

    #[test]
    fn identify_offsets() {
        let id = identify_ctrl(&CtrlInfo {
            cntlid: 7,
            subnqn: "nqn.x",
            serial: "s",
            mdts: 11,
            maxcmd: 128,
            ioccsz_bytes: 64 + 8192,
        });
        assert_eq!(id[77], 11);
        assert_eq!(le16(&id, 78), 7);
        assert_eq!(le16(&id, 320), 10);
        assert_eq!(&id[768..773], b"nqn.x");
        assert_eq!(le32(&id, 1792), 516);
        assert_eq!(le32(&id, 536) & 0x0010_0004, 0x0010_0004);
    }
}
