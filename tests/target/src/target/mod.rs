// SPDX-License-Identifier: GPL-2.0

//! The target: one RDMA CM listener, one protection domain and completion channel, one
//! memory-backed namespace; queues (one RDMA connection each) grouped into controllers by the
//! Fabrics Connect. Single-threaded: one poll() loop over the CM event channel and the
//! completion channel, with timers for delayed answers.
//!
//! Data moves straight between the namespace memory (registered for local access) and the
//! host's keyed SGL: RDMA WRITE for reads, RDMA READ for writes. Admin data (Identify,
//! Connect data) goes through per-queue staging slots.
//!
//! The misbehaviour (`Mode`) is applied once; everything else is polite.

use crate::dev::{Dev, Region};
use crate::ffi::*;
use crate::nvme::*;
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::time::{Duration, Instant};

/// One line on stdout (the test reads it; Rust's stdout is line-buffered).
macro_rules! say {
    ($($t:tt)*) => { println!($($t)*) };
}

mod admin;
mod cm;
mod command;
mod completion;
mod config;
mod fabrics;
mod io;

pub use config::{AcceptLie, Config, Mode};

/// Admin queue depth the host may ask for (NVME_AQ_DEPTH).
const ADMIN_DEPTH: u32 = 32;
/// Staging slots: admin data (Identify, logs, Connect data).
const STAGE_SLOT: usize = 16 << 10;
/// Zero-filled source for log pages.
const ZEROS: usize = 64 << 10;
/// Largest inline send (the response capsule).
const MAX_INLINE: u32 = 64;

// Work request kinds (the top byte of wr_id; then the command id, then an index).
const K_RECV: u64 = 1;
const K_RSP: u64 = 2;
const K_READ: u64 = 3;
const K_WRITE: u64 = 4;
const K_MID: u64 = 6;
const K_PROBE: u64 = 7;
/// residue: buffers recorded at most, and bytes read back of each.
const RESIDUE_SLICES: usize = 8;
const RESIDUE_BYTES: u32 = 64 << 10;

fn wr_id(kind: u64, cid: u16, aux: u32) -> u64 {
    (kind << 56) | (u64::from(cid) << 32) | u64::from(aux)
}

/// What a command waits for after its RDMA READ.
#[derive(Clone, Copy, Debug)]
enum Cont {
    None,
    Connect { slot: u32 },
    Write { off: usize, len: usize },
}

/// A misbehaviour attached to one command's response.
#[derive(Clone, Copy, Debug)]
enum RspHostility {
    Dup,
    Short(u32),
    Long(u32),
    SendInv(u32),
}

struct Cmd {
    sqe: Sqe,
    inline: Vec<u8>,
    stage: Option<u32>,
    cont: Cont,
    hostile: Option<RspHostility>,
    /// Close the association once this command's response is sent.
    kick: bool,
    /// Left unanswered on purpose.
    held: bool,
}

#[derive(Default)]
struct SendInfo {
    stage: Option<u32>,
    kick: bool,
}

struct Queue {
    token: u64,
    id: *mut rdma_cm_id,
    qp: *mut ibv_qp,
    cq: *mut ibv_cq,
    qid: u16,
    depth: u32,
    peer: String,
    recv: Region,
    recv_slot: usize,
    stage: Region,
    stage_free: Vec<u32>,
    cmds: HashMap<u16, Cmd>,
    sends: HashMap<u32, SendInfo>,
    send_seq: u32,
    cntlid: Option<u16>,
    /// The CM reported ESTABLISHED: the kernel CM has the host's RTU.
    established: bool,
    closing: bool,
    sq_head: u16,
    commands: u64,
    /// The receive queue its accept told the host (CRQSIZE): the depth, or less for
    /// `bad-accept:crqsize`, whose queue counts how the host keeps within it.
    crq: u32,
    /// The most commands outstanding at once, and how many arrived past `crq`.
    peak: usize,
    past_crq: u64,
}

impl Queue {
    fn close(&mut self, why: &str) {
        if !self.closing {
            self.closing = true;
            say!("conn: qid {} closing: {why}", self.qid);
            if self.established {
                self.disconnect();
            }
            // Otherwise the host's first command came before its RTU was processed: the CM
            // sends no DREQ before then (and rdma_disconnect still returns 0), so the host
            // would never learn. The disconnect waits for ESTABLISHED.
        }
    }

    fn disconnect(&self) {
        // SAFETY: a connected (or connecting) id of ours.
        unsafe { rdma_disconnect(self.id) };
    }
}

struct Ctrl {
    hostnqn: String,
    cc: u32,
    csts: u32,
    kato_ms: u32,
    nr_io: u16,
    admin: u64,
    io: Vec<u64>,
}

/// A buffer of a host write: its keyed address and length, and where its data went.
struct Recorded {
    addr: u64,
    len: u32,
    off: usize,
    cntlid: u16,
}

/// RDMA operations of a stale-rkey, scope or residue probe, posted for command `cid` of queue
/// `token`.
struct Probe {
    token: u64,
    cid: u16,
    pending: usize,
    failed: Option<u32>,
    /// residue: the records read (index into the scratch region: i * RESIDUE_BYTES).
    reads: Vec<Recorded>,
}

impl Probe {
    /// `pending` operations posted for command `cid` of queue `token` (`reads`: residue's).
    fn new(token: u64, cid: u16, pending: usize, reads: Vec<Recorded>) -> Self {
        Probe {
            token,
            cid,
            pending,
            failed: None,
            reads,
        }
    }
}

struct Stale {
    addr: u64,
    key: u32,
    len: u32,
    cntlid: u16,
    /// The recorded command was a host write: its key granted the target RDMA READ (else
    /// RDMA WRITE), which the stale attempt uses.
    write: bool,
}

/// The misbehaviour's state.
struct Hostile {
    mode: Mode,
    after_reconnect: bool,
    armed: bool,
    /// --after-reconnect and stale-rkey: the association was closed to force a reconnect.
    kicked: bool,
    done: bool,
    stale: Option<Stale>,
    /// stale-rkey, scope and residue: the RDMA operations in flight for the held command.
    probe: Option<Probe>,
    /// residue: the host's write buffers on the recorded association.
    residue: Vec<Recorded>,
    /// late-cqe: the qid and command_id of the command held on the closed association.
    late: Option<(u16, u16)>,
}

enum Action {
    DisconnectCtrl(u16, String),
}

enum Timer {
    LateAnswer {
        token: u64,
        cid: u16,
        since: Instant,
    },
}

struct Target {
    cfg: Config,
    dev: Dev,
    ns: Region,
    zeros: Region,
    /// Where probes read host memory to.
    scratch: Region,
    nguid: [u8; 16],
    serial: String,
    queues: HashMap<u64, Queue>,
    ids: HashMap<usize, u64>,
    ctrls: HashMap<u16, Ctrl>,
    next_token: u64,
    next_cntlid: u16,
    hostile: Hostile,
    todo: Vec<Action>,
    timers: Vec<(Instant, Timer)>,
    seen_tags: HashSet<(u16, u16)>,
}

pub fn run(cfg: Config) -> Result<(), String> {
    for sig in [SIGUSR1, SIGTERM, SIGINT] {
        // SAFETY: installs a handler that only sets a flag.
        unsafe { shim_catch_signal(sig) };
    }
    let (ec, _listen, dev) = crate::dev::listen(&cfg.addr, cfg.port, 128)?;
    let (pd, comp) = (dev.pd, dev.comp);
    // SAFETY: valid channels.
    let (cm_fd, comp_fd) = unsafe { (shim_ec_fd(ec), shim_comp_fd(comp)) };
    // SAFETY: file descriptors of ours.
    unsafe {
        shim_set_nonblock(cm_fd);
        shim_set_nonblock(comp_fd);
    }
    let ns = Region::new(pd, cfg.size as usize, false)?;
    let zeros = Region::new(pd, ZEROS, false)?;
    let scratch = Region::new(pd, RESIDUE_SLICES * RESIDUE_BYTES as usize, false)?;
    let serial = format!("rsrdma-{:08x}", std::process::id());
    let mut t = Target {
        dev,
        ns,
        zeros,
        scratch,
        nguid: nguid(&serial),
        serial,
        queues: HashMap::new(),
        ids: HashMap::new(),
        ctrls: HashMap::new(),
        next_token: 1,
        // Different from run to run, so that a controller of an earlier run that the host
        // still tears down never shares a controller ID with a new one.
        next_cntlid: 1 + (std::process::id() % 0xf000) as u16,
        hostile: Hostile {
            mode: cfg.mode,
            after_reconnect: cfg.after_reconnect,
            armed: !cfg.arm_on_signal,
            kicked: false,
            done: cfg.mode == Mode::Polite,
            stale: None,
            probe: None,
            residue: Vec::new(),
            late: None,
        },
        todo: Vec::new(),
        timers: Vec::new(),
        seen_tags: HashSet::new(),
        cfg,
    };
    say!(
        "target: listening on {}:{} nqn {} namespace {} MiB mdts {} inline {} mode {}{}{} (pid {})",
        t.cfg.addr,
        t.cfg.port,
        t.cfg.nqn,
        t.cfg.size >> 20,
        if t.cfg.mdts == 0 {
            "none".to_string()
        } else {
            format!("{} KiB", 4u32 << t.cfg.mdts)
        },
        t.cfg.inline,
        t.cfg.mode.name(),
        if t.cfg.after_reconnect {
            " after-reconnect"
        } else {
            ""
        },
        if t.cfg.arm_on_signal {
            " (armed by SIGUSR1)"
        } else {
            ""
        },
        std::process::id()
    );

    loop {
        // SAFETY: reads and clears a flag set by the signal handler.
        if unsafe { shim_take_signal(SIGTERM) != 0 || shim_take_signal(SIGINT) != 0 } {
            break;
        }
        // SAFETY: as above.
        if unsafe { shim_take_signal(SIGUSR1) } != 0 && !t.hostile.armed {
            t.hostile.armed = true;
            say!("hostile {}: armed", t.hostile.mode.name());
        }
        let timeout = t
            .timers
            .iter()
            .map(|(at, _)| at.saturating_duration_since(Instant::now()).as_millis() as i32 + 1)
            .min()
            .unwrap_or(1000)
            .min(1000);
        let mut fds = [
            PollFd {
                fd: cm_fd,
                events: POLLIN,
                revents: 0,
            },
            PollFd {
                fd: comp_fd,
                events: POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfd entries.
        unsafe { poll(fds.as_mut_ptr(), 2, timeout) };
        t.cm_events(ec)?;
        t.cq_events();
        t.run_timers();
        t.run_todo();
    }
    let cmds: u64 = t.queues.values().map(|q| q.commands).sum();
    say!(
        "target: exiting ({} queues connected, {} commands on them)",
        t.queues.len(),
        cmds
    );
    Ok(())
}

impl Target {
    fn verbose(&self) -> bool {
        self.cfg.verbose
    }
}

fn post_recv(q: &mut Queue, slot: u32) {
    let off = slot as usize * q.recv_slot;
    let (ptr, len, lkey) = (q.recv.at(off), q.recv_slot as u32, q.recv.lkey);
    // SAFETY: our QP; the receive buffer is registered and lives as long as the QP.
    let r = unsafe { shim_post_recv(q.qp, wr_id(K_RECV, 0, slot), ptr, len, lkey) };
    if r < 0 && !q.closing {
        say!(
            "conn: qid {}: posting a receive failed: {}",
            q.qid,
            errno_str(r)
        );
    }
}

/// One RDMA READ or WRITE (`op`) of `len` bytes between registered memory (`local`: an
/// address inside a [`Region`] and its lkey) and the peer's keyed SGL (`remote`: address and
/// rkey). Returns what the post returned.
fn post_rdma(
    q: &Queue,
    id: u64,
    op: std::ffi::c_int,
    flags: std::ffi::c_int,
    local: (*mut c_void, u32),
    len: u32,
    remote: (u64, u32),
) -> std::ffi::c_int {
    // SAFETY: our QP; every caller passes an address inside a Region, registered memory that
    // outlives the QP (a queue's QP is destroyed before the regions are dropped).
    unsafe {
        shim_post_send(
            q.qp, id, op, flags, local.0, len, local.1, remote.0, remote.1, 0,
        )
    }
}

/// Sends a response capsule (or any bytes) inline, optionally with invalidate.
fn post_send_rsp(q: &mut Queue, cid: u16, bytes: &[u8], invalidate: Option<u32>, info: SendInfo) {
    let seq = q.send_seq;
    q.send_seq = q.send_seq.wrapping_add(1);
    q.sends.insert(seq, info);
    let (op, key) = match invalidate {
        Some(k) => (OP_SEND_INV, k),
        None => (OP_SEND, 0),
    };
    // At most what the QP sends inline: a completion, or a longer lie (long-rsp).
    let mut buf = [0u8; MAX_INLINE as usize];
    buf[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: our QP; the data is sent inline (copied by the post).
    let r = unsafe {
        shim_post_send(
            q.qp,
            wr_id(K_RSP, cid, seq),
            op,
            F_SIGNALED | F_INLINE,
            buf.as_mut_ptr().cast(),
            bytes.len() as u32,
            0,
            0,
            0,
            key,
        )
    };
    if r < 0 {
        q.sends.remove(&seq);
        if !q.closing {
            say!(
                "conn: qid {}: posting a response failed: {}",
                q.qid,
                errno_str(r)
            );
        }
    }
}
