// SPDX-License-Identifier: GPL-2.0

//! What the command line asks for: the misbehaviour (`Mode`) and the rest of the
//! configuration.

use crate::nvme::CQE_SIZE;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Polite,
    Reject { sts: u16, io: bool },
    ConnectHang { io: bool },
    ConnectDrop { io: bool },
    ConnectInv { io: bool },
    ConnectError { dnr: bool, io: bool },
    ConnectRefused { subsys: bool, io: bool },
    BadAccept { lie: AcceptLie, io: bool },
    BadCid,
    DupCqe,
    ShortRecv(u32),
    StrayCqe,
    SendInv { pool: bool },
    NoComplete,
    LateCqe,
    CloseMid,
    LateKeepAlive(Option<u64>),
    StaleRkey,
    Scope { read_dest: bool },
    Residue,
    IoError,
    NoIoQueues,
    LongRsp(u32),
    QpError,
    AenFlood(u32),
}

/// How `bad-accept` malforms the accept's private data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcceptLie {
    /// Record format 1.
    RecFmt,
    /// A controller receive queue of half the host's send queue.
    Crqsize,
    /// Two bytes (an InfiniBand or RoCE accept pads them with zeroes).
    Short,
}

impl AcceptLie {
    fn name(self) -> &'static str {
        match self {
            AcceptLie::RecFmt => "recfmt",
            AcceptLie::Crqsize => "crqsize",
            AcceptLie::Short => "short",
        }
    }
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        let (s, io) = match s.strip_suffix("@io") {
            Some(base) => (base, true),
            None => (s, false),
        };
        let (name, arg) = match s.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (s, None),
        };
        let m = match (name, arg) {
            ("polite", None) => Mode::Polite,
            ("reject", Some(n)) => Mode::Reject {
                sts: n.parse().ok()?,
                io,
            },
            ("connect-hang", None) => Mode::ConnectHang { io },
            ("connect-drop", None) => Mode::ConnectDrop { io },
            ("connect-inv", None) => Mode::ConnectInv { io },
            ("connect-error", None) => Mode::ConnectError { dnr: false, io },
            ("connect-error-dnr", None) => Mode::ConnectError { dnr: true, io },
            ("connect-host-denied", None) => Mode::ConnectRefused { subsys: false, io },
            ("connect-no-subsys", None) => Mode::ConnectRefused { subsys: true, io },
            ("bad-accept", Some(lie)) => Mode::BadAccept {
                lie: match lie {
                    "recfmt" => AcceptLie::RecFmt,
                    "crqsize" => AcceptLie::Crqsize,
                    "short" => AcceptLie::Short,
                    _ => return None,
                },
                io,
            },
            ("bad-cid", None) => Mode::BadCid,
            ("dup-cqe", None) => Mode::DupCqe,
            ("short-recv", None) => Mode::ShortRecv(8),
            ("short-recv", Some(n)) => Mode::ShortRecv(n.parse().ok().filter(|&n| n < 16)?),
            ("stray-cqe", None) => Mode::StrayCqe,
            ("send-inv", None) => Mode::SendInv { pool: false },
            ("send-inv", Some("pool")) => Mode::SendInv { pool: true },
            ("no-complete", None) => Mode::NoComplete,
            ("late-cqe", None) => Mode::LateCqe,
            ("close-mid-transfer", None) => Mode::CloseMid,
            ("late-keepalive", None) => Mode::LateKeepAlive(None),
            ("late-keepalive", Some(ms)) => Mode::LateKeepAlive(Some(ms.parse().ok()?)),
            ("stale-rkey", None) => Mode::StaleRkey,
            ("scope", Some("read-dest")) => Mode::Scope { read_dest: true },
            ("scope", Some("write-src")) => Mode::Scope { read_dest: false },
            ("residue", None) => Mode::Residue,
            ("io-error", None) => Mode::IoError,
            ("no-io-queues", None) => Mode::NoIoQueues,
            ("long-rsp", None) => Mode::LongRsp(64),
            ("long-rsp", Some(n)) => {
                Mode::LongRsp(n.parse().ok().filter(|&n| n > CQE_SIZE as u32 && n <= 64)?)
            }
            ("qp-error", None) => Mode::QpError,
            ("aen-flood", None) => Mode::AenFlood(16),
            ("aen-flood", Some(n)) => {
                Mode::AenFlood(n.parse().ok().filter(|&n| (1..=64).contains(&n))?)
            }
            _ => return None,
        };
        if io && !m.is_connect_mode() {
            return None;
        }
        Some(m)
    }

    pub(super) fn is_connect_mode(&self) -> bool {
        matches!(
            self,
            Mode::Reject { .. }
                | Mode::ConnectHang { .. }
                | Mode::ConnectDrop { .. }
                | Mode::ConnectInv { .. }
                | Mode::ConnectError { .. }
                | Mode::ConnectRefused { .. }
                | Mode::BadAccept { .. }
        )
    }

    /// The name as given on the command line (and used on the "hostile" lines).
    pub(super) fn name(&self) -> String {
        let at = |io: bool| if io { "@io" } else { "" };
        match *self {
            Mode::Polite => "polite".into(),
            Mode::Reject { sts, io } => format!("reject:{sts}{}", at(io)),
            Mode::ConnectHang { io } => format!("connect-hang{}", at(io)),
            Mode::ConnectDrop { io } => format!("connect-drop{}", at(io)),
            Mode::ConnectInv { io } => format!("connect-inv{}", at(io)),
            Mode::ConnectError { dnr: false, io } => format!("connect-error{}", at(io)),
            Mode::ConnectError { dnr: true, io } => format!("connect-error-dnr{}", at(io)),
            Mode::ConnectRefused { subsys: false, io } => format!("connect-host-denied{}", at(io)),
            Mode::ConnectRefused { subsys: true, io } => format!("connect-no-subsys{}", at(io)),
            Mode::BadAccept { lie, io } => format!("bad-accept:{}{}", lie.name(), at(io)),
            Mode::BadCid => "bad-cid".into(),
            Mode::DupCqe => "dup-cqe".into(),
            Mode::ShortRecv(_) => "short-recv".into(),
            Mode::StrayCqe => "stray-cqe".into(),
            Mode::SendInv { pool: false } => "send-inv".into(),
            Mode::SendInv { pool: true } => "send-inv:pool".into(),
            Mode::NoComplete => "no-complete".into(),
            Mode::LateCqe => "late-cqe".into(),
            Mode::CloseMid => "close-mid-transfer".into(),
            Mode::LateKeepAlive(_) => "late-keepalive".into(),
            Mode::StaleRkey => "stale-rkey".into(),
            Mode::Scope { read_dest: true } => "scope:read-dest".into(),
            Mode::Scope { read_dest: false } => "scope:write-src".into(),
            Mode::Residue => "residue".into(),
            Mode::IoError => "io-error".into(),
            Mode::NoIoQueues => "no-io-queues".into(),
            Mode::LongRsp(n) => format!("long-rsp:{n}"),
            Mode::QpError => "qp-error".into(),
            Mode::AenFlood(n) => format!("aen-flood:{n}"),
        }
    }
}

pub struct Config {
    pub addr: String,
    pub port: u16,
    pub nqn: String,
    pub size: u64,
    pub mdts: u8,
    pub inline: u32,
    pub queue_size: u32,
    pub max_io_queues: u16,
    pub mode: Mode,
    pub after_reconnect: bool,
    pub persist: bool,
    pub arm_on_signal: bool,
    pub mid_min: u32,
    pub verbose: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            addr: "10.0.2.15".into(),
            port: 4421,
            nqn: "nqn.2026-11.io.rsrdma:hostile".into(),
            size: 64 << 20,
            mdts: 11, // 8 MiB
            inline: 8192,
            queue_size: 128,
            max_io_queues: 8,
            mode: Mode::Polite,
            after_reconnect: false,
            persist: false,
            arm_on_signal: false,
            mid_min: 1 << 20,
            verbose: false,
        }
    }
}
