// SPDX-License-Identifier: GPL-2.0

//! RDMA CM private data of the NVMe over Fabrics RDMA transport binding.
//!
//! The host puts a [`CmRequest`] in the private data of its connect
//! request. The target answers with a [`CmReply`] in the accept, or a
//! [`CmReject`] in the reject. All fields are little-endian.

/// Record format 1.0, the only one defined.
pub const NVME_RDMA_CM_FMT_1_0: u16 = 0;

/// Size of the connect request private data.
pub const CM_REQ_SIZE: usize = 32;

/// Reject status: invalid private data length.
pub const NVME_RDMA_CM_INVALID_LEN: u16 = 0x01;
/// Reject status: invalid record format.
pub const NVME_RDMA_CM_INVALID_RECFMT: u16 = 0x02;
/// Reject status: invalid queue ID.
pub const NVME_RDMA_CM_INVALID_QID: u16 = 0x03;
/// Reject status: invalid host SQ size.
pub const NVME_RDMA_CM_INVALID_HSQSIZE: u16 = 0x04;
/// Reject status: invalid host RQ size.
pub const NVME_RDMA_CM_INVALID_HRQSIZE: u16 = 0x05;
/// Reject status: no resources.
pub const NVME_RDMA_CM_NO_RSC: u16 = 0x06;
/// Reject status: invalid IRD.
pub const NVME_RDMA_CM_INVALID_IRD: u16 = 0x07;
/// Reject status: invalid ORD.
pub const NVME_RDMA_CM_INVALID_ORD: u16 = 0x08;
/// Reject status: invalid controller ID.
pub const NVME_RDMA_CM_INVALID_CNTLID: u16 = 0x09;

/// Private data of the host's connect request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmRequest {
    /// Record format, [`NVME_RDMA_CM_FMT_1_0`].
    pub recfmt: u16,
    /// Queue ID: 0 for the admin queue.
    pub qid: u16,
    /// Host receive queue size (number of entries).
    pub hrqsize: u16,
    /// Host send queue size, 0's based (the controller's SQSIZE).
    pub hsqsize: u16,
    /// Controller ID, or 0xffff when not known yet.
    pub cntlid: u16,
}

impl CmRequest {
    /// Builds the request for queue `qid` of `queue_size` entries:
    /// `hrqsize = queue_size`, `hsqsize = queue_size - 1`. `None` if
    /// `queue_size` is 0. The admin queue uses a queue size of 32.
    pub fn new(qid: u16, queue_size: u16, cntlid: u16) -> Option<Self> {
        Some(Self {
            recfmt: NVME_RDMA_CM_FMT_1_0,
            qid,
            hrqsize: queue_size,
            hsqsize: queue_size.checked_sub(1)?,
            cntlid,
        })
    }

    /// Encodes the request; the reserved bytes are zero.
    pub fn encode(&self) -> [u8; CM_REQ_SIZE] {
        let mut out = [0u8; CM_REQ_SIZE];
        let fields = [
            self.recfmt,
            self.qid,
            self.hrqsize,
            self.hsqsize,
            self.cntlid,
        ];
        for (dst, field) in out.chunks_exact_mut(2).zip(fields) {
            dst.copy_from_slice(&field.to_le_bytes());
        }
        out
    }
}

/// Reads the two little-endian 16-bit fields that start every reply and
/// reject, or `None` if `data` is shorter than 4 bytes.
fn two_fields(data: &[u8]) -> Option<(u16, u16)> {
    match data {
        [a0, a1, b0, b1, ..] => Some((
            u16::from_le_bytes([*a0, *a1]),
            u16::from_le_bytes([*b0, *b1]),
        )),
        _ => None,
    }
}

/// Private data of the target's accept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmReply {
    /// Record format.
    pub recfmt: u16,
    /// Controller receive queue size.
    pub crqsize: u16,
}

/// What is wrong with a target's accept (see [`CmReply::check`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadAccept {
    /// Fewer than the 4 bytes of a reply, this many.
    Short(usize),
    /// A record format other than [`NVME_RDMA_CM_FMT_1_0`].
    RecFmt(u16),
    /// A controller receive queue of no entry: no command could ever be received.
    NoQueue,
}

impl core::fmt::Display for BadAccept {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            BadAccept::Short(n) => write!(f, "{n} bytes of private data, not a reply"),
            BadAccept::RecFmt(r) => write!(f, "record format {r}, not {NVME_RDMA_CM_FMT_1_0}"),
            BadAccept::NoQueue => write!(f, "a receive queue of 0"),
        }
    }
}

impl CmReply {
    /// Decodes accept private data; `None` if shorter than 4 bytes. Bytes
    /// past the first 4 are reserved and ignored.
    pub fn decode(data: &[u8]) -> Option<Self> {
        let (recfmt, crqsize) = two_fields(data)?;
        Some(Self { recfmt, crqsize })
    }

    /// Checks the accept of a connect request: a reply of record format 1.0 with a controller
    /// receive queue of at least one entry. `data` is what the accept carried (an InfiniBand
    /// or RoCE accept pads it with zeroes to its fixed size). A receive queue shallower than
    /// the host's send queue is not an error: targets size it to what they can take (SPDK
    /// answers the smaller of its own depth and the host's, older SPDK one less), and the
    /// host keeps that many commands in flight at most (see [`CmReply::credits`]).
    pub fn check(data: &[u8]) -> Result<Self, BadAccept> {
        let reply = Self::decode(data).ok_or(BadAccept::Short(data.len()))?;
        if reply.recfmt != NVME_RDMA_CM_FMT_1_0 {
            Err(BadAccept::RecFmt(reply.recfmt))
        } else if reply.crqsize == 0 {
            Err(BadAccept::NoQueue)
        } else {
            Ok(reply)
        }
    }

    /// How many commands of the connect request `req` may be in flight at once: the host's
    /// send queue (HSQSIZE + 1), or the controller's receive queue if that is shallower (a
    /// command past it would find no receive posted and wait out receiver-not-ready retries).
    pub fn credits(&self, req: &CmRequest) -> u32 {
        (u32::from(req.hsqsize) + 1).min(u32::from(self.crqsize))
    }
}

/// Private data of the target's reject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmReject {
    /// Record format.
    pub recfmt: u16,
    /// Reject status, one of the `NVME_RDMA_CM_*` values.
    pub sts: u16,
}

impl CmReject {
    /// Decodes reject private data; `None` if shorter than 4 bytes.
    pub fn decode(data: &[u8]) -> Option<Self> {
        let (recfmt, sts) = two_fields(data)?;
        Some(Self { recfmt, sts })
    }

    /// Describes the reject status, see [`reject_msg`].
    pub fn msg(&self) -> &'static str {
        reject_msg(self.sts)
    }
}

/// Describes an `NVME_RDMA_CM_*` reject status.
pub fn reject_msg(sts: u16) -> &'static str {
    match sts {
        NVME_RDMA_CM_INVALID_LEN => "invalid private data length",
        NVME_RDMA_CM_INVALID_RECFMT => "invalid record format",
        NVME_RDMA_CM_INVALID_QID => "invalid queue ID",
        NVME_RDMA_CM_INVALID_HSQSIZE => "invalid host SQ size",
        NVME_RDMA_CM_INVALID_HRQSIZE => "invalid host RQ size",
        NVME_RDMA_CM_NO_RSC => "resource not found",
        NVME_RDMA_CM_INVALID_IRD => "invalid IRD",
        NVME_RDMA_CM_INVALID_ORD => "invalid ORD",
        NVME_RDMA_CM_INVALID_CNTLID => "invalid controller ID",
        _ => "unrecognized reason",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_admin_and_io() {
        let admin = CmRequest::new(0, 32, 0xffff).unwrap();
        assert_eq!(admin.hrqsize, 32);
        assert_eq!(admin.hsqsize, 31);
        let mut want = [0u8; CM_REQ_SIZE];
        want[4] = 32;
        want[6] = 31;
        want[8] = 0xff;
        want[9] = 0xff;
        assert_eq!(admin.encode(), want);

        let io = CmRequest::new(0x0102, 0x0400, 0x0a0b).unwrap();
        let mut want = [0u8; CM_REQ_SIZE];
        want[..10].copy_from_slice(&[0, 0, 0x02, 0x01, 0x00, 0x04, 0xff, 0x03, 0x0b, 0x0a]);
        assert_eq!(io.encode(), want);

        assert_eq!(CmRequest::new(1, 0, 0), None);
        let one = CmRequest::new(1, 1, 0).unwrap();
        assert_eq!((one.hrqsize, one.hsqsize), (1, 0));
        let max = CmRequest::new(1, u16::MAX, 0).unwrap();
        assert_eq!((max.hrqsize, max.hsqsize), (u16::MAX, u16::MAX - 1));
    }

    #[test]
    fn reply_decode() {
        assert_eq!(CmReply::decode(&[]), None);
        assert_eq!(CmReply::decode(&[0, 0, 0x80]), None);
        let r = CmReply::decode(&[0, 0, 0x80, 0x00]).unwrap();
        assert_eq!(
            r,
            CmReply {
                recfmt: 0,
                crqsize: 128
            }
        );
        let long = [0x01, 0x00, 0x00, 0x04, 0xaa, 0xbb, 0xcc, 0xdd];
        let r = CmReply::decode(&long).unwrap();
        assert_eq!(
            r,
            CmReply {
                recfmt: 1,
                crqsize: 1024
            }
        );
    }

    #[test]
    fn reply_check() {
        let req = CmRequest::new(1, 128, 1).unwrap();
        // nvmet's accept: record format 0, a receive queue of HSQSIZE + 1.
        let ok = CmReply::check(&[0, 0, 128, 0]).unwrap();
        assert_eq!((ok.crqsize, ok.credits(&req)), (128, 128));
        // Larger is fine, and so are the zeroes an InfiniBand REP pads the reply with.
        let mut rep = [0u8; 196];
        rep[2..4].copy_from_slice(&1024u16.to_le_bytes());
        let big = CmReply::check(&rep).unwrap();
        assert_eq!((big.crqsize, big.credits(&req)), (1024, 128));
        // Shallower: SPDK's own depth, or older SPDK's HSQSIZE; the host sends fewer.
        assert_eq!(CmReply::check(&[0, 0, 127, 0]).unwrap().credits(&req), 127);
        assert_eq!(CmReply::check(&[0, 0, 1, 0]).unwrap().credits(&req), 1);
        assert_eq!(CmReply::check(&[]), Err(BadAccept::Short(0)));
        assert_eq!(CmReply::check(&[0, 0]), Err(BadAccept::Short(2)));
        assert_eq!(CmReply::check(&[1, 0, 128, 0]), Err(BadAccept::RecFmt(1)));
        // A short reply padded with zeroes: a receive queue of 0.
        assert_eq!(CmReply::check(&[0u8; 196]), Err(BadAccept::NoQueue));
        let max = CmRequest::new(1, u16::MAX, 1).unwrap();
        let all = CmReply::check(&[0, 0, 0xff, 0xff]).unwrap();
        assert_eq!(all.credits(&max), u32::from(u16::MAX));
        assert_eq!(BadAccept::NoQueue.to_string(), "a receive queue of 0");
        assert_eq!(BadAccept::RecFmt(3).to_string(), "record format 3, not 0");
        assert_eq!(
            BadAccept::Short(2).to_string(),
            "2 bytes of private data, not a reply"
        );
    }

    #[test]
    fn reject_decode_and_messages() {
        assert_eq!(CmReject::decode(&[0x00, 0x00, 0x03]), None);
        let r = CmReject::decode(&[0x00, 0x00, 0x03, 0x00]).unwrap();
        assert_eq!(
            r,
            CmReject {
                recfmt: 0,
                sts: NVME_RDMA_CM_INVALID_QID
            }
        );
        assert_eq!(r.msg(), "invalid queue ID");
        let all = [
            (1, "invalid private data length"),
            (2, "invalid record format"),
            (3, "invalid queue ID"),
            (4, "invalid host SQ size"),
            (5, "invalid host RQ size"),
            (6, "resource not found"),
            (7, "invalid IRD"),
            (8, "invalid ORD"),
            (9, "invalid controller ID"),
        ];
        for (sts, msg) in all {
            assert_eq!(reject_msg(sts), msg);
        }
        for sts in [0, 10, 0x0100, 0x0300, u16::MAX] {
            assert_eq!(reject_msg(sts), "unrecognized reason");
        }
    }
}
