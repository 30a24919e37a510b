// SPDX-License-Identifier: GPL-2.0

//! Command identifiers of commands sent on another I/O queue than their own.
//!
//! A large transfer may go out on any I/O queue of the controller, so that one submitter's
//! stream uses several QPs (soft-RoCE, like an adapter, works on each QP in order). The
//! NVMe core numbers a command `genctr << 12 | tag`, where the tag is unique only among
//! the requests of its own hardware queue; on another queue it could equal one of that
//! queue's tags. A command sent elsewhere therefore carries
//! `genctr << 12 | (owner * stride + tag)`, with `owner` its own I/O queue (1-based) and
//! `stride` the tag space of an I/O queue: at least `stride`, so never one of the receiving
//! queue's own tags, and unique because `(owner, tag)` is. A response's identifier tells
//! both apart; commands on their own queue keep the core's identifier unchanged.
//!
//! It also decides how many queues a controller has to spread over (see [`write_queues`]).

/// Bits of the command identifier that carry the tag (the rest is the core's generation).
const TAG_BITS: u32 = 12;
const TAG_MASK: u16 = (1 << TAG_BITS) - 1;

/// The command identifier numbering of a controller's I/O queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spread {
    /// Tag space of an I/O queue (its ring depth).
    pub stride: u16,
    /// Number of I/O queues commands may be spread over (queues `1..=queues`).
    pub queues: u16,
}

/// Whose command a response answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// A command of the queue the response arrived on, with the core's identifier.
    Own(u16),
    /// A command of I/O queue `qid`, with the identifier the core gave it.
    Other {
        /// The command's own queue.
        qid: u16,
        /// The core's identifier of the command (`genctr << 12 | tag`).
        command_id: u16,
    },
}

impl Spread {
    /// The numbering, if every identifier fits in the 12 tag bits (and there is more than one
    /// queue to spread over).
    pub fn new(stride: u16, queues: u16) -> Option<Self> {
        let top = (u32::from(queues) + 1) * u32::from(stride);
        (queues >= 2 && stride > 0 && top <= 1 << TAG_BITS).then_some(Self { stride, queues })
    }

    /// The identifier of command `command_id` (the core's) of I/O queue `owner` when it is sent
    /// on another queue; `None` if `owner` or the tag is out of range.
    pub fn encode(&self, owner: u16, command_id: u16) -> Option<u16> {
        let tag = command_id & TAG_MASK;
        if owner == 0 || owner > self.queues || tag >= self.stride {
            return None;
        }
        let low = owner.checked_mul(self.stride)?.checked_add(tag)?;
        Some((command_id & !TAG_MASK) | low)
    }

    /// Whose command the response with identifier `command_id`, received on I/O queue
    /// `arrived`, answers; `None` for an identifier no command can have.
    pub fn decode(&self, arrived: u16, command_id: u16) -> Option<Owner> {
        let low = command_id & TAG_MASK;
        if low < self.stride {
            return Some(Owner::Own(command_id));
        }
        // Checked: `stride` is never 0 (see `new`), and no panic path on wire data.
        let qid = low.checked_div(self.stride)?;
        if qid > self.queues || qid == arrived {
            return None;
        }
        Some(Owner::Other {
            qid,
            command_id: (command_id & !TAG_MASK) | low.checked_rem(self.stride)?,
        })
    }
}

/// The dedicated write queues to give a controller with `io_queues` I/O queues (at most one per
/// CPU) whose connect options set none, so that it has at least `min` queues to spread large
/// transfers over. An RC QP has a bounded amount in flight (soft-RoCE: 128 unacknowledged
/// packets; adapters: their outstanding RDMA READs), so one stream over few QPs stays below what
/// the fabric moves. blk-mq maps each CPU to one queue per map, so more queues than CPUs can only
/// come as another map: the write queues of `nvmf_set_io_queues`, at most one per I/O queue.
pub fn write_queues(io_queues: u32, min: u32) -> u32 {
    if io_queues == 0 || io_queues >= min {
        0
    } else {
        (min - io_queues).min(io_queues)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_queues_only_below_the_minimum() {
        assert_eq!(write_queues(2, 4), 2);
        assert_eq!(write_queues(1, 4), 1);
        assert_eq!(write_queues(3, 4), 1);
        assert_eq!(write_queues(2, 8), 2);
        assert_eq!(write_queues(4, 4), 0);
        assert_eq!(write_queues(64, 4), 0);
        assert_eq!(write_queues(2, 0), 0);
        assert_eq!(write_queues(0, 4), 0);
    }

    #[test]
    fn fits_in_the_tag_bits() {
        assert!(Spread::new(128, 2).is_some());
        assert!(Spread::new(1024, 3).is_some());
        assert!(Spread::new(1024, 4).is_none());
        assert!(Spread::new(128, 1).is_none());
        assert!(Spread::new(0, 4).is_none());
        assert!(Spread::new(128, 31).is_some());
        assert!(Spread::new(128, 32).is_none());
    }

    #[test]
    fn round_trip_and_no_collision() {
        let s = Spread::new(128, 4).unwrap();
        for owner in 1..=4u16 {
            for genctr in [0u16, 1, 15] {
                for tag in [0u16, 1, 127] {
                    let cid = genctr << 12 | tag;
                    let wire = s.encode(owner, cid).unwrap();
                    // Never one of the receiving queue's own tags.
                    assert!(wire & TAG_MASK >= 128);
                    for arrived in (1..=4u16).filter(|&q| q != owner) {
                        assert_eq!(
                            s.decode(arrived, wire),
                            Some(Owner::Other {
                                qid: owner,
                                command_id: cid
                            })
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn own_identifiers_pass_through() {
        let s = Spread::new(128, 2).unwrap();
        assert_eq!(s.decode(1, 0x507f), Some(Owner::Own(0x507f)));
        assert_eq!(s.decode(2, 0), Some(Owner::Own(0)));
    }

    #[test]
    fn impossible_identifiers() {
        let s = Spread::new(128, 2).unwrap();
        // Owner 3 does not exist.
        assert_eq!(s.decode(1, 3 * 128), None);
        // A queue's own commands never come back with its spread identifier.
        assert_eq!(s.decode(1, 128 + 5), None);
        assert_eq!(s.decode(2, 0xfff), None);
        assert_eq!(s.encode(0, 1), None);
        assert_eq!(s.encode(3, 1), None);
        assert_eq!(s.encode(1, 128), None);
    }
}
