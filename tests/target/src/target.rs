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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Polite,
    Reject { sts: u16, io: bool },
    ConnectHang { io: bool },
    ConnectDrop { io: bool },
    ConnectInv { io: bool },
    ConnectError { dnr: bool, io: bool },
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
            _ => return None,
        };
        if io && !m.is_connect_mode() {
            return None;
        }
        Some(m)
    }

    fn is_connect_mode(&self) -> bool {
        matches!(
            self,
            Mode::Reject { .. }
                | Mode::ConnectHang { .. }
                | Mode::ConnectDrop { .. }
                | Mode::ConnectInv { .. }
                | Mode::ConnectError { .. }
        )
    }

    /// The name as given on the command line (and used on the "hostile" lines).
    fn name(&self) -> String {
        let at = |io: bool| if io { "@io" } else { "" };
        match *self {
            Mode::Polite => "polite".into(),
            Mode::Reject { sts, io } => format!("reject:{sts}{}", at(io)),
            Mode::ConnectHang { io } => format!("connect-hang{}", at(io)),
            Mode::ConnectDrop { io } => format!("connect-drop{}", at(io)),
            Mode::ConnectInv { io } => format!("connect-inv{}", at(io)),
            Mode::ConnectError { dnr: false, io } => format!("connect-error{}", at(io)),
            Mode::ConnectError { dnr: true, io } => format!("connect-error-dnr{}", at(io)),
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
            arm_on_signal: false,
            mid_min: 1 << 20,
            verbose: false,
        }
    }
}

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
const K_STALE: u64 = 5;
const K_MID: u64 = 6;

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

struct Stale {
    addr: u64,
    key: u32,
    len: u32,
    cntlid: u16,
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
    stale_cmd: Option<(u64, u16)>,
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
    let serial = format!("rsrdma-{:08x}", std::process::id());
    let mut t = Target {
        dev,
        ns,
        zeros,
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
            stale_cmd: None,
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

    // --- CM events ----------------------------------------------------------------------

    fn cm_events(&mut self, ec: *mut rdma_event_channel) -> Result<(), String> {
        loop {
            let mut ev = ShimEvent::default();
            // SAFETY: valid channel and output.
            let r = unsafe { shim_get_event(ec, &mut ev) };
            if r == -11 {
                return Ok(());
            }
            if r < 0 {
                return Err(format!("rdma_get_cm_event: {}", errno_str(r)));
            }
            let token = self.ids.get(&(ev.id as usize)).copied();
            if self.verbose() {
                eprintln!(
                    "cm: {} status {} (queue {:?})",
                    event_str(ev.event),
                    ev.status,
                    token.and_then(|t| self.queues.get(&t)).map(|q| q.qid)
                );
            }
            match ev.event {
                CM_CONNECT_REQUEST => self.connect_request(&ev),
                CM_ESTABLISHED => {
                    if let Some(q) = token.and_then(|t| self.queues.get_mut(&t)) {
                        say!("conn: qid {} established with {}", q.qid, q.peer);
                        q.established = true;
                        if q.closing {
                            say!(
                                "conn: qid {} closed before it was established: disconnecting now",
                                q.qid
                            );
                            q.disconnect();
                        }
                    }
                }
                CM_DISCONNECTED => {
                    if let Some(t) = token {
                        if let Some(q) = self.queues.get_mut(&t) {
                            say!(
                                "conn: qid {} disconnected{} after {} commands",
                                q.qid,
                                if q.closing {
                                    " (closed by the target)"
                                } else {
                                    " (by the host)"
                                },
                                q.commands
                            );
                            if !q.closing {
                                q.closing = true;
                                // Completes the disconnect handshake.
                                q.disconnect();
                            }
                        }
                        self.teardown(t);
                    }
                }
                CM_CONNECT_ERROR | CM_UNREACHABLE | CM_REJECTED => {
                    if let Some(t) = token {
                        let qid = self.queues.get(&t).map(|q| q.qid).unwrap_or(0);
                        say!(
                            "conn: qid {qid} {} (status {})",
                            event_str(ev.event),
                            ev.status
                        );
                        self.teardown(t);
                    }
                }
                CM_DEVICE_REMOVAL => return Err("RDMA device removed".into()),
                CM_TIMEWAIT_EXIT => {}
                _ => {}
            }
        }
    }

    fn reject(&self, id: *mut rdma_cm_id, sts: u16) {
        let data = cm_reject(sts);
        // SAFETY: a connect request id; the private data is copied by the call.
        unsafe {
            shim_reject(id, data.as_ptr().cast(), data.len() as u8);
            rdma_destroy_id(id);
        }
    }

    fn connect_request(&mut self, ev: &ShimEvent) {
        let id = ev.id;
        let pdata = &ev.private_data[..ev.private_data_len as usize];
        let mut peer = [0i8; 64];
        // SAFETY: a valid id and buffer.
        let peer = if unsafe { shim_id_peer(id, peer.as_mut_ptr(), 64) } == 0 {
            // SAFETY: NUL-terminated by inet_ntop.
            unsafe { std::ffi::CStr::from_ptr(peer.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        } else {
            "?".into()
        };
        let Some(req) = CmRequest::decode(pdata) else {
            say!(
                "conn: qid ? connect request from {peer} with {} bytes of private data",
                pdata.len()
            );
            say!("conn: qid ? rejected, status 1 ({})", reject_name(1));
            return self.reject(id, 1);
        };
        say!(
            "conn: qid {} connect request from {peer} (hrqsize {}, hsqsize {}, cntlid {:#x})",
            req.qid,
            req.hrqsize,
            req.hsqsize,
            req.cntlid
        );
        let io = req.qid != 0;
        let depth = u32::from(req.hsqsize) + 1;
        let polite_reject = if req.recfmt != 0 {
            Some(2)
        } else if req.qid > self.cfg.max_io_queues {
            Some(3)
        } else if depth > if io { self.cfg.queue_size } else { ADMIN_DEPTH } {
            Some(4)
        } else if req.hrqsize == 0 {
            Some(5)
        } else {
            None
        };
        if let Some(sts) = polite_reject {
            say!(
                "conn: qid {} rejected, status {sts} ({})",
                req.qid,
                reject_name(sts)
            );
            return self.reject(id, sts);
        }
        if let Mode::Reject { sts, io: on_io } = self.hostile.mode {
            if self.connect_mode_active() && on_io == io {
                self.hostile.done = true;
                say!(
                    "hostile {}: rejected the CM connect of qid {} from {peer} with NVMe/RDMA status {sts} ({})",
                    self.hostile.mode.name(),
                    req.qid,
                    reject_name(sts)
                );
                return self.reject(id, sts);
            }
        }
        match self.new_queue(id, &req, peer.clone()) {
            Ok(token) => {
                let reply = cm_reply(depth as u16);
                let init = ev.initiator_depth.min(self.dev.max_init_rd_atom).min(255) as u8;
                let resp = ev.responder_resources.min(self.dev.max_rd_atom).min(255) as u8;
                // SAFETY: the id of the new queue, with its QP.
                let r = unsafe {
                    shim_accept(id, reply.as_ptr().cast(), reply.len() as u8, resp, init)
                };
                if r < 0 {
                    say!(
                        "conn: qid {}: rdma_accept failed: {}",
                        req.qid,
                        errno_str(r)
                    );
                    self.teardown(token);
                    return;
                }
                say!("conn: qid {} accepted (rd_atom {init})", req.qid);
                if init == 0 {
                    say!(
                        "conn: qid {}: the host offers no RDMA READ resources",
                        req.qid
                    );
                }
            }
            Err(e) => {
                say!("conn: qid {} from {peer}: {e}: rejected (6)", req.qid);
                self.reject(id, 6);
            }
        }
    }

    fn new_queue(
        &mut self,
        id: *mut rdma_cm_id,
        req: &CmRequest,
        peer: String,
    ) -> Result<u64, String> {
        let token = self.next_token;
        self.next_token += 1;
        let depth = u32::from(req.hsqsize) + 1;
        let nrecv = depth + 4;
        let send_wr = 4 * depth + 16;
        let cqe = (send_wr + nrecv + 16) as i32;
        // SAFETY: valid context and channel; the token is an opaque context value.
        let cq =
            unsafe { ibv_create_cq(self.dev.ctx, cqe, token as *mut c_void, self.dev.comp, 0) };
        if cq.is_null() {
            return Err(format!(
                "ibv_create_cq: {}",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: valid id, PD and CQ.
        let r = unsafe { shim_create_qp(id, self.dev.pd, cq, send_wr, nrecv, MAX_INLINE) };
        if r < 0 {
            // SAFETY: the CQ has no QP.
            unsafe { ibv_destroy_cq(cq) };
            return Err(format!("rdma_create_qp: {}", errno_str(r)));
        }
        // SAFETY: the id now has a QP.
        let qp = unsafe { shim_id_qp(id) };
        let recv_slot = SQE_SIZE + self.cfg.inline as usize;
        let nstage = if req.qid == 0 { depth + 4 } else { 4 };
        let regions = Region::new(self.dev.pd, recv_slot * nrecv as usize, false).and_then(|r| {
            Ok((
                r,
                Region::new(self.dev.pd, STAGE_SLOT * nstage as usize, false)?,
            ))
        });
        let (recv, stage) = match regions {
            Ok(r) => r,
            Err(e) => {
                // SAFETY: ours, unused.
                unsafe {
                    rdma_destroy_qp(id);
                    ibv_destroy_cq(cq);
                }
                return Err(e);
            }
        };
        let mut q = Queue {
            token,
            id,
            qp,
            cq,
            qid: req.qid,
            depth,
            peer,
            recv,
            recv_slot,
            stage,
            stage_free: (0..nstage).rev().collect(),
            cmds: HashMap::new(),
            sends: HashMap::new(),
            send_seq: 0,
            cntlid: None,
            established: false,
            closing: false,
            sq_head: 0,
            commands: 0,
        };
        for slot in 0..nrecv {
            post_recv(&mut q, slot);
        }
        // SAFETY: a valid CQ.
        unsafe { shim_req_notify(cq) };
        self.ids.insert(id as usize, token);
        self.queues.insert(token, q);
        Ok(token)
    }

    /// Releases a queue and everything on it; if it was a controller's admin queue, the
    /// controller goes too and its I/O queues are closed.
    fn teardown(&mut self, token: u64) {
        let Some(q) = self.queues.remove(&token) else {
            return;
        };
        self.ids.remove(&(q.id as usize));
        if let Some(c) = q.cntlid {
            let admin_of = self.ctrls.get(&c).is_some_and(|ctrl| ctrl.admin == token);
            if admin_of {
                if let Some(ctrl) = self.ctrls.remove(&c) {
                    say!("ctrl: cntlid {c} gone (admin queue disconnected)");
                    for t in ctrl.io {
                        if let Some(ioq) = self.queues.get_mut(&t) {
                            ioq.close("its controller's admin queue is gone");
                        }
                    }
                }
            } else if let Some(ctrl) = self.ctrls.get_mut(&c) {
                ctrl.io.retain(|&t| t != token);
            }
        }
        if self.hostile.stale_cmd.is_some_and(|(t, _)| t == token) {
            self.hostile.stale_cmd = None;
        }
        let Queue {
            id,
            cq,
            recv,
            stage,
            ..
        } = q;
        // SAFETY: the QP goes first, then its CQ; the regions are unused once the QP is gone;
        // the id's events were all acknowledged.
        unsafe {
            rdma_destroy_qp(id);
            ibv_destroy_cq(cq);
        }
        drop((recv, stage));
        // SAFETY: as above.
        unsafe { rdma_destroy_id(id) };
    }

    fn disconnect_ctrl(&mut self, cntlid: u16, why: &str) {
        let Some(ctrl) = self.ctrls.get(&cntlid) else {
            return;
        };
        let tokens: Vec<u64> = std::iter::once(ctrl.admin)
            .chain(ctrl.io.iter().copied())
            .collect();
        for t in tokens {
            if let Some(q) = self.queues.get_mut(&t) {
                q.close(why);
            }
        }
    }

    fn run_todo(&mut self) {
        for a in std::mem::take(&mut self.todo) {
            match a {
                Action::DisconnectCtrl(c, why) => self.disconnect_ctrl(c, &why),
            }
        }
    }

    fn run_timers(&mut self) {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.timers)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        self.timers = later;
        for (_, timer) in due {
            match timer {
                Timer::LateAnswer { token, cid, since } => {
                    let ms = since.elapsed().as_millis();
                    let mut q = self.queues.remove(&token);
                    match q.as_mut().filter(|q| !q.closing && q.cmds.contains_key(&cid)) {
                        Some(q) => {
                            say!("hostile late-keepalive: answered keep-alive cid {cid:#x} after {ms} ms");
                            if let Some(c) = q.cmds.get_mut(&cid) {
                                c.held = false;
                            }
                            self.respond(q, cid, SC_SUCCESS, 0);
                        }
                        None => say!(
                            "hostile late-keepalive: the association went away before the late answer ({ms} ms)"
                        ),
                    }
                    if let Some(q) = q {
                        self.queues.insert(token, q);
                    }
                }
            }
        }
    }

    // --- Completions ----------------------------------------------------------------------

    fn cq_events(&mut self) {
        loop {
            let mut cq = std::ptr::null_mut();
            let mut ctx = std::ptr::null_mut();
            // SAFETY: valid channel and outputs.
            let r = unsafe { shim_get_cq_event(self.dev.comp, &mut cq, &mut ctx) };
            if r < 0 {
                return;
            }
            let token = ctx as u64;
            let Some(mut q) = self.queues.remove(&token) else {
                continue;
            };
            // SAFETY: the queue's CQ.
            unsafe { shim_req_notify(q.cq) };
            let mut wcs = [ShimWc::default(); 16];
            loop {
                // SAFETY: valid CQ and a 16-entry output array.
                let n = unsafe { shim_poll_cq(q.cq, 16, wcs.as_mut_ptr()) };
                if n <= 0 {
                    break;
                }
                for wc in &wcs[..n as usize] {
                    self.completion(&mut q, wc);
                }
            }
            self.queues.insert(token, q);
        }
    }

    fn completion(&mut self, q: &mut Queue, wc: &ShimWc) {
        let kind = wc.wr_id >> 56;
        let cid = (wc.wr_id >> 32) as u16;
        let aux = wc.wr_id as u32;
        if kind == K_STALE {
            return self.stale_done(q, cid, wc.status);
        }
        if wc.status != WC_SUCCESS {
            if q.closing || wc.status == WC_FLUSH_ERR {
                return;
            }
            // connect-inv's response is meant to fail at the host. Should it fail here too (an
            // adapter's NAK, or retries running out), the connection stays, so that the host has
            // to notice on its own.
            if kind == K_RSP && matches!(self.hostile.mode, Mode::ConnectInv { .. }) {
                q.sends.remove(&aux);
                say!(
                    "conn: qid {} SEND (cid {cid:#x}) failed as intended: {}; keeping the connection",
                    q.qid,
                    wc_status_str(wc.status)
                );
                return;
            }
            let op = match kind {
                K_RECV => "RECV",
                K_RSP => "SEND",
                K_READ | K_MID => "RDMA READ/WRITE",
                K_WRITE => "RDMA WRITE",
                _ => "work request",
            };
            say!(
                "conn: qid {} {op} (cid {cid:#x}) failed: {} (status {}, vendor error {:#x})",
                q.qid,
                wc_status_str(wc.status),
                wc.status,
                wc.vendor_err
            );
            q.close("work request failed");
            return;
        }
        match kind {
            K_RECV => self.received(q, aux, wc.byte_len as usize),
            K_RSP => {
                if let Some(info) = q.sends.remove(&aux) {
                    if let Some(s) = info.stage {
                        q.stage_free.push(s);
                    }
                    if info.kick {
                        if let Some(c) = q.cntlid {
                            self.todo
                                .push(Action::DisconnectCtrl(c, "forcing a reconnect".into()));
                        }
                    }
                }
            }
            K_READ => self.read_done(q, cid),
            K_MID => {
                if let Some(c) = q.cntlid {
                    say!(
                        "hostile close-mid-transfer: first part of cid {cid:#x} on qid {} done, closing the association of cntlid {c}",
                        q.qid
                    );
                    self.todo.push(Action::DisconnectCtrl(
                        c,
                        "in the middle of a transfer".into(),
                    ));
                }
            }
            _ => {}
        }
    }

    fn received(&mut self, q: &mut Queue, slot: u32, len: usize) {
        let off = slot as usize * q.recv_slot;
        let data = &q.recv.buf[off..off + len.min(q.recv_slot)];
        if len < SQE_SIZE {
            say!(
                "conn: qid {}: command capsule of only {len} bytes, ignored",
                q.qid
            );
            post_recv(q, slot);
            return;
        }
        let mut raw = [0u8; SQE_SIZE];
        raw.copy_from_slice(&data[..SQE_SIZE]);
        let inline = data[SQE_SIZE..].to_vec();
        post_recv(q, slot);
        self.command(q, Sqe { raw }, inline);
    }

    // --- Commands -------------------------------------------------------------------------

    fn command(&mut self, q: &mut Queue, sqe: Sqe, inline: Vec<u8>) {
        let cid = sqe.cid();
        q.commands += 1;
        q.sq_head = ((u32::from(q.sq_head) + 1) % q.depth) as u16;
        if q.qid != 0 {
            self.seen_tags.insert((q.qid, cid & 0xfff));
        }
        if let Some(old) = q.cmds.get(&cid) {
            say!(
                "conn: qid {}: command id {cid:#x} reused while in flight (opcode {:#x}{})",
                q.qid,
                old.sqe.opcode(),
                if old.held { ", held" } else { "" }
            );
            if let Some(s) = old.stage {
                q.stage_free.push(s);
            }
        }
        q.cmds.insert(
            cid,
            Cmd {
                sqe,
                inline,
                stage: None,
                cont: Cont::None,
                hostile: None,
                kick: false,
                held: false,
            },
        );
        if sqe.opcode() == FABRICS {
            self.fabrics(q, cid);
        } else if q.cntlid.is_none() {
            say!(
                "conn: qid {}: opcode {:#x} before Connect",
                q.qid,
                sqe.opcode()
            );
            self.respond(q, cid, SC_CMD_SEQ_ERROR | SC_DNR, 0);
        } else if q.qid == 0 {
            self.admin(q, cid);
        } else {
            self.io(q, cid);
        }
    }

    fn respond(&mut self, q: &mut Queue, cid: u16, status: u16, result: u64) {
        let Some(cmd) = q.cmds.remove(&cid) else {
            return;
        };
        let c = cqe(result, q.sq_head, q.qid, cid, status);
        if self.verbose() {
            eprintln!(
                "q{} cid {cid:#06x} done status {status:#x} result {result:#x}",
                q.qid
            );
        }
        let info = SendInfo {
            stage: cmd.stage,
            kick: cmd.kick,
        };
        let polite_inv = match cmd.sqe.sgl() {
            Sgl::Keyed {
                key,
                invalidate: true,
                ..
            } => Some(key),
            _ => None,
        };
        match cmd.hostile {
            None => post_send_rsp(q, cid, &c, polite_inv, info),
            Some(RspHostility::Dup) => {
                post_send_rsp(q, cid, &c, polite_inv, info);
                post_send_rsp(q, cid, &c, polite_inv, SendInfo::default());
                say!(
                    "hostile dup-cqe: sent the completion of cid {cid:#x} on qid {} twice",
                    q.qid
                );
            }
            Some(RspHostility::Short(n)) => {
                post_send_rsp(q, cid, &c[..n as usize], None, info);
                say!(
                    "hostile short-recv: sent only {n} of {CQE_SIZE} bytes as the response of cid {cid:#x} on qid {}",
                    q.qid
                );
            }
            Some(RspHostility::SendInv(key)) => {
                post_send_rsp(q, cid, &c, Some(key), info);
                say!(
                    "hostile {}: answered cid {cid:#x} on qid {} with SEND_WITH_INV of rkey {key:#x}",
                    self.hostile.mode.name(),
                    q.qid
                );
            }
        }
    }

    /// Starts moving `len` bytes from the host's keyed SGL into the namespace at `off` or a
    /// staging slot; `cont` says what follows. In-capsule data is copied at once and the
    /// continuation runs now.
    fn fetch(&mut self, q: &mut Queue, cid: u16, len: usize, dest: Option<usize>, cont: Cont) {
        let cmd = &q.cmds[&cid];
        match cmd.sqe.sgl() {
            Sgl::Inline { offset, len: l } => {
                let end = offset as usize + len;
                if (l as usize) < len || end > cmd.inline.len() {
                    say!(
                        "conn: qid {}: cid {cid:#x}: in-capsule data ({} bytes at offset {offset}, {} received) does not hold {len} bytes",
                        q.qid,
                        l,
                        cmd.inline.len()
                    );
                    return self.respond(q, cid, SC_SGL_INVALID_OFFSET | SC_DNR, 0);
                }
                let data = cmd.inline[offset as usize..end].to_vec();
                match cont {
                    Cont::Connect { .. } => self.connect_data(q, cid, &data),
                    Cont::Write { off, len } => {
                        self.ns.buf[off..off + len].copy_from_slice(&data);
                        self.respond(q, cid, SC_SUCCESS, 0);
                    }
                    Cont::None => {}
                }
            }
            Sgl::Keyed {
                addr, len: l, key, ..
            } => {
                if (l as usize) < len {
                    say!(
                        "conn: qid {}: cid {cid:#x}: keyed SGL of {l} bytes for {len} bytes",
                        q.qid
                    );
                    return self.respond(q, cid, SC_SGL_INVALID_DATA | SC_DNR, 0);
                }
                let (ptr, lkey) = match (dest, cont) {
                    (Some(off), _) => (self.ns.at(off), self.ns.lkey),
                    (None, Cont::Connect { slot }) => {
                        (q.stage.at(slot as usize * STAGE_SLOT), q.stage.lkey)
                    }
                    _ => return self.respond(q, cid, SC_INTERNAL, 0),
                };
                q.cmds.get_mut(&cid).unwrap().cont = cont;
                // SAFETY: the QP is ours; the local buffer is registered and stays alive
                // until the QP is destroyed.
                let r = unsafe {
                    shim_post_send(
                        q.qp,
                        wr_id(K_READ, cid, 0),
                        OP_READ,
                        F_SIGNALED,
                        ptr,
                        len as u32,
                        lkey,
                        addr,
                        key,
                        0,
                    )
                };
                if r < 0 {
                    say!(
                        "conn: qid {}: posting an RDMA READ failed: {}",
                        q.qid,
                        errno_str(r)
                    );
                    q.close("post failed");
                }
            }
            Sgl::Other(id) => {
                say!(
                    "conn: qid {}: cid {cid:#x}: unsupported SGL descriptor {id:#04x}",
                    q.qid
                );
                self.respond(q, cid, SC_SGL_INVALID_TYPE | SC_DNR, 0)
            }
        }
    }

    fn read_done(&mut self, q: &mut Queue, cid: u16) {
        let Some(cmd) = q.cmds.get(&cid) else { return };
        match cmd.cont {
            Cont::Connect { slot } => {
                let off = slot as usize * STAGE_SLOT;
                let data = q.stage.buf[off..off + CONNECT_DATA_SIZE].to_vec();
                self.connect_data(q, cid, &data);
            }
            Cont::Write { .. } => self.respond(q, cid, SC_SUCCESS, 0),
            Cont::None => {}
        }
    }

    /// RDMA WRITE of `len` bytes to the command's keyed SGL from `src` (lkey, address). The
    /// caller responds afterwards: the send queue keeps the order.
    fn push(
        &mut self,
        q: &mut Queue,
        cid: u16,
        ptr: *mut c_void,
        lkey: u32,
        len: usize,
    ) -> Result<(), u16> {
        let Sgl::Keyed {
            addr, len: l, key, ..
        } = q.cmds[&cid].sqe.sgl()
        else {
            return Err(SC_SGL_INVALID_TYPE | SC_DNR);
        };
        let len = len.min(l as usize);
        if len == 0 {
            return Ok(());
        }
        // SAFETY: our QP; the source is registered memory that outlives the QP.
        let r = unsafe {
            shim_post_send(
                q.qp,
                wr_id(K_WRITE, cid, 0),
                OP_WRITE,
                0,
                ptr,
                len as u32,
                lkey,
                addr,
                key,
                0,
            )
        };
        if r < 0 {
            say!(
                "conn: qid {}: posting an RDMA WRITE failed: {}",
                q.qid,
                errno_str(r)
            );
            return Err(SC_DATA_XFER_ERROR);
        }
        Ok(())
    }

    /// Sends `data` (at most a staging slot) to the command's keyed SGL and responds.
    fn send_data(&mut self, q: &mut Queue, cid: u16, data: &[u8], result: u64) {
        let Some(slot) = q.stage_free.pop() else {
            say!("conn: qid {}: out of staging slots", q.qid);
            return self.respond(q, cid, SC_INTERNAL, 0);
        };
        q.cmds.get_mut(&cid).unwrap().stage = Some(slot);
        let off = slot as usize * STAGE_SLOT;
        let n = data.len().min(STAGE_SLOT);
        q.stage.buf[off..off + n].copy_from_slice(&data[..n]);
        let (ptr, lkey) = (q.stage.at(off), q.stage.lkey);
        match self.push(q, cid, ptr, lkey, n) {
            Ok(()) => self.respond(q, cid, SC_SUCCESS, result),
            Err(sc) => self.respond(q, cid, sc, 0),
        }
    }

    // --- Fabrics ----------------------------------------------------------------------------

    fn fabrics(&mut self, q: &mut Queue, cid: u16) {
        let sqe = q.cmds[&cid].sqe;
        match sqe.fctype() {
            FCT_CONNECT => {
                if q.cntlid.is_some() {
                    say!("conn: qid {}: second Connect", q.qid);
                    return self.respond(q, cid, SC_CMD_SEQ_ERROR | SC_DNR, 0);
                }
                if self.verbose() {
                    eprintln!("q{} cid {cid:#06x} connect sgl {:?}", q.qid, sqe.sgl());
                }
                if matches!(sqe.sgl(), Sgl::Keyed { .. }) {
                    let Some(slot) = q.stage_free.pop() else {
                        return self.respond(q, cid, SC_INTERNAL, 0);
                    };
                    q.cmds.get_mut(&cid).unwrap().stage = Some(slot);
                    self.fetch(q, cid, CONNECT_DATA_SIZE, None, Cont::Connect { slot });
                } else {
                    self.fetch(q, cid, CONNECT_DATA_SIZE, None, Cont::Connect { slot: 0 });
                }
            }
            FCT_PROP_GET | FCT_PROP_SET if q.qid == 0 && q.cntlid.is_some() => {
                self.property(q, cid)
            }
            FCT_PROP_GET | FCT_PROP_SET => self.respond(q, cid, SC_CMD_SEQ_ERROR | SC_DNR, 0),
            t => {
                if self.verbose() {
                    eprintln!("q{} cid {cid:#06x} fabrics type {t:#x}: unsupported", q.qid);
                }
                self.respond(q, cid, SC_INVALID_OPCODE | SC_DNR, 0)
            }
        }
    }

    fn connect_mode_active(&self) -> bool {
        let h = &self.hostile;
        !h.done && h.mode.is_connect_mode() && (!h.after_reconnect || h.kicked)
    }

    fn connect_data(&mut self, q: &mut Queue, cid: u16, data: &[u8]) {
        let sqe = q.cmds[&cid].sqe;
        let (recfmt, qid, sqsize, kato) = (
            le16(&sqe.raw, 40),
            le16(&sqe.raw, 42),
            le16(&sqe.raw, 44),
            le32(&sqe.raw, 48),
        );
        let cntlid = le16(data, 16);
        let subnqn = cstr_field(&data[256..512]);
        let hostnqn = cstr_field(&data[512..768]);
        say!(
            "conn: qid {} Connect (sqsize {sqsize}, kato {kato} ms, cntlid {cntlid:#x}) from host {hostnqn} for {subnqn}",
            q.qid
        );
        let param_error = |field: u32| u64::from(field);
        if recfmt != 0 {
            return self.respond(q, cid, SC_CONNECT_FORMAT | SC_DNR, 0);
        }
        if qid != q.qid || u32::from(sqsize) + 1 > q.depth {
            let off = if qid != q.qid { 42 } else { 44 };
            return self.respond(q, cid, SC_CONNECT_INVALID_PARAM | SC_DNR, param_error(off));
        }
        if subnqn != self.cfg.nqn {
            return self.respond(
                q,
                cid,
                SC_CONNECT_INVALID_PARAM | SC_DNR,
                param_error((1 << 16) | 256),
            );
        }
        if self.connect_mode_active() {
            match self.hostile.mode {
                Mode::ConnectHang { io } | Mode::ConnectDrop { io } if io == (qid != 0) => {
                    self.hostile.done = true;
                    q.cmds.get_mut(&cid).unwrap().held = true;
                    let name = self.hostile.mode.name();
                    if let Mode::ConnectDrop { .. } = self.hostile.mode {
                        say!("hostile {name}: closing the connection of qid {qid} without answering its Connect (cid {cid:#x})");
                        q.close("dropped before the Connect response");
                    } else {
                        say!("hostile {name}: never answering the Connect of qid {qid} (cid {cid:#x})");
                    }
                    return;
                }
                Mode::ConnectInv { io } if io == (qid != 0) => {
                    self.hostile.done = true;
                    // An MR index the host never had: its receive fails (invalid request).
                    q.cmds.get_mut(&cid).unwrap().hostile =
                        Some(RspHostility::SendInv(0xffff_ff5b));
                    return self.respond(q, cid, SC_CONNECT_CTRL_BUSY, 0);
                }
                Mode::ConnectError { dnr, io } if io == (qid != 0) => {
                    self.hostile.done = true;
                    let sc = SC_CONNECT_CTRL_BUSY | if dnr { SC_DNR } else { 0 };
                    say!(
                        "hostile {}: failed the Connect of qid {qid} with status {sc:#x} (controller busy{})",
                        self.hostile.mode.name(),
                        if dnr { ", do not retry" } else { "" }
                    );
                    return self.respond(q, cid, sc, 0);
                }
                _ => {}
            }
        }
        if qid == 0 {
            let c = self.next_cntlid;
            self.next_cntlid = if c >= 0xffef { 1 } else { c + 1 };
            self.ctrls.insert(
                c,
                Ctrl {
                    hostnqn,
                    cc: 0,
                    csts: 0,
                    kato_ms: kato,
                    nr_io: 0,
                    admin: q.token,
                    io: Vec::new(),
                },
            );
            q.cntlid = Some(c);
            say!("ctrl: cntlid {c} created (kato {kato} ms)");
            say!("conn: qid 0 connected to cntlid {c}");
            return self.respond(q, cid, SC_SUCCESS, u64::from(c));
        }
        let Some(ctrl) = self.ctrls.get_mut(&cntlid) else {
            say!("conn: qid {qid}: Connect for unknown cntlid {cntlid}");
            return self.respond(
                q,
                cid,
                SC_CONNECT_INVALID_PARAM | SC_DNR,
                param_error((1 << 16) | 16),
            );
        };
        if ctrl.hostnqn != hostnqn {
            return self.respond(
                q,
                cid,
                SC_CONNECT_INVALID_PARAM | SC_DNR,
                param_error((1 << 16) | 512),
            );
        }
        if qid > ctrl.nr_io {
            say!(
                "conn: qid {qid}: more I/O queues than the {} granted",
                ctrl.nr_io
            );
            return self.respond(q, cid, SC_CONNECT_INVALID_PARAM | SC_DNR, param_error(42));
        }
        ctrl.io.push(q.token);
        q.cntlid = Some(cntlid);
        say!(
            "conn: qid {qid} connected to cntlid {cntlid} ({} of {} I/O queues)",
            ctrl.io.len(),
            ctrl.nr_io
        );
        self.respond(q, cid, SC_SUCCESS, 0);
        if let Some((late_qid, late_cid)) = self.hostile.late.filter(|&(l, _)| l == qid) {
            self.hostile.late = None;
            say!("hostile late-cqe: sent the completion of command_id {late_cid:#x} of the closed association on the new qid {late_qid}, right after its Connect");
            let c = cqe(0, q.sq_head, q.qid, late_cid, SC_SUCCESS);
            post_send_rsp(q, late_cid, &c, None, SendInfo::default());
        }
    }

    fn property(&mut self, q: &mut Queue, cid: u16) {
        let sqe = q.cmds[&cid].sqe;
        let (size8, off, value) = (sqe.raw[40] & 1 != 0, le32(&sqe.raw, 44), le64(&sqe.raw, 48));
        let c = q.cntlid.unwrap();
        let cap = u64::from(self.cfg.queue_size - 1) | (1 << 16) | (10 << 24) | (1 << 37);
        let Some(ctrl) = self.ctrls.get_mut(&c) else {
            return self.respond(q, cid, SC_INTERNAL, 0);
        };
        if sqe.fctype() == FCT_PROP_GET {
            let v = match off {
                PROP_CAP => cap,
                PROP_VS => u64::from(VS_1_3),
                PROP_CC => u64::from(ctrl.cc),
                PROP_CSTS => u64::from(ctrl.csts),
                _ => return self.respond(q, cid, SC_INVALID_FIELD | SC_DNR, 0),
            };
            if self.verbose() {
                eprintln!(
                    "q0 cid {cid:#06x} property get {off:#x} ({}) = {v:#x}",
                    if size8 { 8 } else { 4 }
                );
            }
            return self.respond(q, cid, SC_SUCCESS, v);
        }
        if off != PROP_CC {
            return self.respond(q, cid, SC_INVALID_FIELD | SC_DNR, 0);
        }
        let (old, new) = (ctrl.cc, value as u32);
        ctrl.cc = new;
        if new & CC_EN != 0 && old & CC_EN == 0 {
            ctrl.csts = CSTS_RDY;
            say!("ctrl: cntlid {c} enabled (CC {new:#x})");
        } else if new & CC_EN == 0 && old & CC_EN != 0 {
            ctrl.csts &= !CSTS_RDY;
            say!("ctrl: cntlid {c} disabled");
        }
        if new & CC_SHN_MASK != 0 {
            ctrl.csts = (ctrl.csts & !(3 << 2)) | CSTS_SHST_CMPLT;
            say!("ctrl: cntlid {c} shut down");
        }
        self.respond(q, cid, SC_SUCCESS, 0)
    }

    // --- Admin ------------------------------------------------------------------------------

    fn admin(&mut self, q: &mut Queue, cid: u16) {
        let sqe = q.cmds[&cid].sqe;
        let op = sqe.opcode();
        let c = q.cntlid.unwrap();
        if self.verbose() {
            eprintln!(
                "q0 cid {cid:#06x} {} nsid {} cdw10 {:#x} cdw11 {:#x}",
                admin_name(op),
                sqe.nsid(),
                sqe.cdw(10),
                sqe.cdw(11)
            );
        }
        match op {
            ADM_IDENTIFY => {
                let cns = sqe.cdw(10) & 0xff;
                let nsid = sqe.nsid();
                let data = match cns {
                    1 => identify_ctrl(&CtrlInfo {
                        cntlid: c,
                        subnqn: &self.cfg.nqn,
                        serial: &self.serial,
                        mdts: self.cfg.mdts,
                        maxcmd: self.cfg.queue_size as u16,
                        ioccsz_bytes: SQE_SIZE as u32 + self.cfg.inline,
                    }),
                    0 if nsid == 1 => identify_ns(self.cfg.size >> LBA_SHIFT, &self.nguid),
                    0 if nsid == 0 => return self.respond(q, cid, SC_INVALID_NS | SC_DNR, 0),
                    0 => vec![0; IDENTIFY_SIZE],
                    2 => active_ns_list(nsid),
                    3 if nsid == 1 => ns_desc_list(&self.nguid),
                    3 => return self.respond(q, cid, SC_INVALID_NS | SC_DNR, 0),
                    _ => return self.respond(q, cid, SC_INVALID_FIELD | SC_DNR, 0),
                };
                self.send_data(q, cid, &data, 0);
            }
            ADM_GET_LOG_PAGE => {
                let numd = ((sqe.cdw(11) & 0xffff) << 16 | (sqe.cdw(10) >> 16)) as usize + 1;
                let len = numd * 4;
                if len > ZEROS {
                    return self.respond(q, cid, SC_INVALID_FIELD | SC_DNR, 0);
                }
                let (ptr, lkey) = (self.zeros.at(0), self.zeros.lkey);
                match self.push(q, cid, ptr, lkey, len) {
                    Ok(()) => self.respond(q, cid, SC_SUCCESS, 0),
                    Err(sc) => self.respond(q, cid, sc, 0),
                }
            }
            ADM_SET_FEATURES => {
                let fid = sqe.cdw(10) & 0xff;
                match fid {
                    0x07 => {
                        let want = (sqe.cdw(11) & 0xffff).min(sqe.cdw(11) >> 16) + 1;
                        let n = want.min(u32::from(self.cfg.max_io_queues)) as u16;
                        if let Some(ctrl) = self.ctrls.get_mut(&c) {
                            ctrl.nr_io = n;
                        }
                        say!("ctrl: cntlid {c}: {want} I/O queues asked, {n} granted");
                        let r = u64::from(n - 1) | (u64::from(n - 1) << 16);
                        self.respond(q, cid, SC_SUCCESS, r)
                    }
                    0x0b | 0x0f => self.respond(q, cid, SC_SUCCESS, 0),
                    _ => self.respond(q, cid, SC_INVALID_FIELD | SC_DNR, 0),
                }
            }
            ADM_GET_FEATURES => {
                let fid = sqe.cdw(10) & 0xff;
                let r = match (fid, self.ctrls.get(&c)) {
                    (0x07, Some(ctrl)) if ctrl.nr_io > 0 => {
                        u64::from(ctrl.nr_io - 1) | (u64::from(ctrl.nr_io - 1) << 16)
                    }
                    (0x0f, Some(ctrl)) => u64::from(ctrl.kato_ms),
                    _ => 0,
                };
                self.respond(q, cid, SC_SUCCESS, r)
            }
            ADM_ASYNC_EVENT => {
                // Held until the association goes: there is never an event to report.
                q.cmds.get_mut(&cid).unwrap().held = true;
            }
            ADM_KEEP_ALIVE => {
                let has_io = self.ctrls.get(&c).is_some_and(|ctrl| !ctrl.io.is_empty());
                if let Mode::LateKeepAlive(ms) = self.hostile.mode {
                    if self.hostile.armed && !self.hostile.done && has_io {
                        self.hostile.done = true;
                        let kato = self.ctrls.get(&c).map_or(0, |ctrl| ctrl.kato_ms);
                        let delay = ms.unwrap_or(if kato > 0 {
                            u64::from(kato) + 3000
                        } else {
                            8000
                        });
                        q.cmds.get_mut(&cid).unwrap().held = true;
                        let now = Instant::now();
                        self.timers.push((
                            now + Duration::from_millis(delay),
                            Timer::LateAnswer {
                                token: q.token,
                                cid,
                                since: now,
                            },
                        ));
                        say!(
                            "hostile late-keepalive: holding the answer to keep-alive cid {cid:#x} of cntlid {c} for {delay} ms (kato {kato} ms)"
                        );
                        return;
                    }
                }
                self.respond(q, cid, SC_SUCCESS, 0)
            }
            ADM_ABORT => self.respond(q, cid, SC_SUCCESS, 1),
            _ => self.respond(q, cid, SC_INVALID_OPCODE | SC_DNR, 0),
        }
    }

    // --- I/O --------------------------------------------------------------------------------

    fn io(&mut self, q: &mut Queue, cid: u16) {
        let sqe = q.cmds[&cid].sqe;
        let op = sqe.opcode();
        let nsid = sqe.nsid();
        if op == IO_FLUSH {
            if self.verbose() {
                eprintln!("q{} cid {cid:#06x} flush", q.qid);
            }
            return self.respond(q, cid, SC_SUCCESS, 0);
        }
        if nsid != 1 {
            return self.respond(q, cid, SC_INVALID_NS | SC_DNR, 0);
        }
        if !matches!(op, IO_READ | IO_WRITE | IO_WRITE_ZEROES) {
            return self.respond(q, cid, SC_INVALID_OPCODE | SC_DNR, 0);
        }
        let slba = le64(&sqe.raw, 40);
        let nlb = u64::from(le16(&sqe.raw, 48)) + 1;
        let blocks = self.cfg.size >> LBA_SHIFT;
        let sgl = sqe.sgl();
        let len = (nlb << LBA_SHIFT) as usize;
        if self.verbose() {
            let how = match sgl {
                Sgl::Keyed {
                    addr,
                    len,
                    key,
                    invalidate,
                } => {
                    format!(
                        "keyed addr {addr:#x} len {len} key {key:#x}{}",
                        if invalidate { " inv" } else { "" }
                    )
                }
                Sgl::Inline { offset, len } => format!("in-capsule offset {offset} len {len}"),
                Sgl::Other(id) => format!("sgl {id:#04x}"),
            };
            eprintln!(
                "q{} cid {cid:#06x} {} slba {slba} nlb {nlb} len {len} {how}",
                q.qid,
                io_name(op)
            );
        }
        if slba.checked_add(nlb).is_none_or(|end| end > blocks) {
            return self.respond(q, cid, SC_LBA_RANGE | SC_DNR, 0);
        }
        let off = (slba << LBA_SHIFT) as usize;
        if op == IO_WRITE_ZEROES {
            self.ns.buf[off..off + len].fill(0);
            return self.respond(q, cid, SC_SUCCESS, 0);
        }
        if self.cfg.mdts != 0 && len > (4096usize << self.cfg.mdts) {
            return self.respond(q, cid, SC_INVALID_FIELD | SC_DNR, 0);
        }
        if self.hostile_io(q, cid, op, sgl, off, len) {
            return;
        }
        self.io_data(q, cid, op, off, len);
    }

    fn io_data(&mut self, q: &mut Queue, cid: u16, op: u8, off: usize, len: usize) {
        if op == IO_READ {
            let (ptr, lkey) = (self.ns.at(off), self.ns.lkey);
            match self.push(q, cid, ptr, lkey, len) {
                Ok(()) => self.respond(q, cid, SC_SUCCESS, 0),
                Err(sc) => self.respond(q, cid, sc, 0),
            }
        } else {
            self.fetch(q, cid, len, Some(off), Cont::Write { off, len });
        }
    }

    /// Applies an I/O misbehaviour to this command if one is due; true if it took the command
    /// over (the caller does nothing more with it).
    fn hostile_io(
        &mut self,
        q: &mut Queue,
        cid: u16,
        op: u8,
        sgl: Sgl,
        off: usize,
        len: usize,
    ) -> bool {
        let h = &mut self.hostile;
        if !h.armed || h.done {
            return false;
        }
        let keyed = match sgl {
            Sgl::Keyed { addr, len, key, .. } => Some((addr, len, key)),
            _ => None,
        };
        let what = format!(
            "{} of {len} bytes (qid {}, cid {cid:#x})",
            io_name(op),
            q.qid
        );
        let name = h.mode.name();
        let cmd = q.cmds.get_mut(&cid).unwrap();
        match h.mode {
            Mode::Polite | Mode::LateKeepAlive(_) => false,
            _ if h.mode.is_connect_mode() => {
                if h.after_reconnect && !h.kicked {
                    h.kicked = true;
                    cmd.kick = true;
                    say!("hostile {name}: closing the association after the {what} to force a reconnect");
                }
                false
            }
            Mode::BadCid => {
                h.done = true;
                cmd.held = true;
                let bad = cid ^ 0xf000;
                say!("hostile bad-cid: answered the {what} with command_id {bad:#x} instead");
                let c = cqe(0, q.sq_head, q.qid, bad, SC_SUCCESS);
                post_send_rsp(q, bad, &c, None, SendInfo::default());
                true
            }
            Mode::DupCqe => {
                h.done = true;
                cmd.hostile = Some(RspHostility::Dup);
                false
            }
            Mode::ShortRecv(n) => {
                h.done = true;
                cmd.hostile = Some(RspHostility::Short(n));
                cmd.held = true;
                false
            }
            Mode::StrayCqe => {
                h.done = true;
                let depth = q.depth as u16;
                let tag = (0..depth)
                    .rev()
                    .find(|t| !self.seen_tags.contains(&(q.qid, *t)))
                    .unwrap_or(depth - 1);
                say!(
                    "hostile stray-cqe: sent a completion for command_id {tag:#x} on qid {}, never sent by the host, before answering the {what}",
                    q.qid
                );
                let c = cqe(0, q.sq_head, q.qid, tag, SC_SUCCESS);
                post_send_rsp(q, tag, &c, None, SendInfo::default());
                false
            }
            Mode::SendInv { pool } => {
                let Some((_, _, key)) = keyed else {
                    return false;
                };
                h.done = true;
                // A wrong key: same MR index, another key byte (never registered by the host).
                let k = if pool {
                    key
                } else {
                    (key & !0xff) | ((key.wrapping_add(0x5b)) & 0xff)
                };
                cmd.hostile = Some(RspHostility::SendInv(k));
                say!(
                    "hostile {name}: will answer the {what} with SEND_WITH_INV of rkey {k:#x} (the command's rkey is {key:#x})"
                );
                false
            }
            Mode::NoComplete => {
                h.done = true;
                cmd.held = true;
                say!("hostile no-complete: never completing the {what}");
                true
            }
            Mode::LateCqe => {
                h.done = true;
                cmd.held = true;
                h.late = Some((q.qid, cid));
                say!("hostile late-cqe: holding the {what}, closing the association; its completion goes on the next association's qid {} once that queue is connected", q.qid);
                if let Some(c) = q.cntlid {
                    self.todo
                        .push(Action::DisconnectCtrl(c, "late-cqe: forcing a reconnect".into()));
                }
                true
            }
            Mode::CloseMid => {
                let Some((addr, l, key)) = keyed else {
                    return false;
                };
                if len < self.cfg.mid_min as usize || (l as usize) < len {
                    return false;
                }
                h.done = true;
                cmd.held = true;
                let chunk = (len / 4).max(4096).min(len);
                let two = (2 * chunk).min(len);
                say!(
                    "hostile close-mid-transfer: moving {two} bytes of the {what}, closing the association once the first {chunk} are done"
                );
                let (op_rdma, ptr0, ptr1, lkey) = (
                    if op == IO_READ { OP_WRITE } else { OP_READ },
                    self.ns.at(off),
                    self.ns.at(off + chunk),
                    self.ns.lkey,
                );
                // SAFETY: our QP, registered namespace memory.
                let r = unsafe {
                    let r = shim_post_send(
                        q.qp,
                        wr_id(K_MID, cid, 0),
                        op_rdma,
                        F_SIGNALED,
                        ptr0,
                        chunk as u32,
                        lkey,
                        addr,
                        key,
                        0,
                    );
                    if r == 0 && two > chunk {
                        shim_post_send(
                            q.qp,
                            wr_id(K_WRITE, cid, 1),
                            op_rdma,
                            0,
                            ptr1,
                            (two - chunk) as u32,
                            lkey,
                            addr + chunk as u64,
                            key,
                            0,
                        )
                    } else {
                        r
                    }
                };
                if r < 0 {
                    say!("conn: qid {}: posting failed: {}", q.qid, errno_str(r));
                }
                true
            }
            Mode::StaleRkey => {
                let Some((addr, l, key)) = keyed else {
                    return false;
                };
                let c = q.cntlid.unwrap();
                let prev = h.stale.as_ref().map(|s| (s.addr, s.key, s.len, s.cntlid));
                match prev {
                    None => {
                        h.stale = Some(Stale {
                            addr,
                            key,
                            len: l,
                            cntlid: c,
                        });
                        h.kicked = true;
                        cmd.kick = true;
                        say!(
                            "hostile stale-rkey: recorded rkey {key:#x} addr {addr:#x} len {l} of the {what} on cntlid {c}; closing the association after it"
                        );
                        false
                    }
                    Some((sa, sk, sl, sc)) if sc != c => {
                        h.done = true;
                        cmd.held = true;
                        let n = sl.min(4096);
                        say!(
                            "hostile stale-rkey: RDMA WRITE of {n} bytes to addr {sa:#x} with the previous association's rkey {sk:#x} (cntlid {sc}); this {what} on cntlid {c} carries rkey {key:#x}"
                        );
                        if sk == key {
                            say!("stale-rkey result: inconclusive (the host registered the same rkey again)");
                        }
                        h.stale_cmd = Some((q.token, cid));
                        let (ptr, lkey) = (self.zeros.at(0), self.zeros.lkey);
                        // SAFETY: our QP, registered memory.
                        let r = unsafe {
                            shim_post_send(
                                q.qp,
                                wr_id(K_STALE, cid, 0),
                                OP_WRITE,
                                F_SIGNALED,
                                ptr,
                                n,
                                lkey,
                                sa,
                                sk,
                                0,
                            )
                        };
                        if r < 0 {
                            say!("stale-rkey result: post failed ({})", errno_str(r));
                        }
                        true
                    }
                    Some(_) => false,
                }
            }
            _ => false,
        }
    }

    fn stale_done(&mut self, q: &mut Queue, cid: u16, status: u32) {
        match status {
            WC_SUCCESS => {
                say!("stale-rkey result: success (the old rkey still grants access to host memory)")
            }
            WC_REM_ACCESS_ERR => say!(
                "stale-rkey result: remote-access-error ({}): the old rkey no longer grants access",
                wc_status_str(status)
            ),
            s => say!("stale-rkey result: {} (status {s})", wc_status_str(s)),
        }
        self.hostile.stale_cmd = None;
        if status == WC_SUCCESS {
            // Serve the held command after all.
            let sqe = q.cmds.get(&cid).map(|c| c.sqe);
            if let Some(sqe) = sqe {
                q.cmds.get_mut(&cid).unwrap().held = false;
                let off = (le64(&sqe.raw, 40) << LBA_SHIFT) as usize;
                let len = ((u64::from(le16(&sqe.raw, 48)) + 1) << LBA_SHIFT) as usize;
                self.io_data(q, cid, sqe.opcode(), off, len);
            }
        } else if let Some(c) = q.cntlid {
            // The QP is in error: close the association, the host reconnects.
            self.todo.push(Action::DisconnectCtrl(
                c,
                "the stale-rkey WRITE failed".into(),
            ));
        } else {
            q.close("the stale-rkey WRITE failed");
        }
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

/// Sends a response capsule (or any bytes) inline, optionally with invalidate.
fn post_send_rsp(q: &mut Queue, cid: u16, bytes: &[u8], invalidate: Option<u32>, info: SendInfo) {
    let seq = q.send_seq;
    q.send_seq = q.send_seq.wrapping_add(1);
    q.sends.insert(seq, info);
    let (op, key) = match invalidate {
        Some(k) => (OP_SEND_INV, k),
        None => (OP_SEND, 0),
    };
    let mut buf = [0u8; CQE_SIZE];
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
