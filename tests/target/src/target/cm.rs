// SPDX-License-Identifier: GPL-2.0

//! CM events: connection requests, established and broken connections, queue set-up and
//! teardown, and the target's own timers and deferred actions.

use super::*;

impl Target {
    pub(super) fn cm_events(&mut self, ec: *mut rdma_event_channel) -> Result<(), String> {
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

    pub(super) fn reject(&self, id: *mut rdma_cm_id, sts: u16) {
        let data = cm_reject(sts);
        // SAFETY: a connect request id; the private data is copied by the call.
        unsafe {
            shim_reject(id, data.as_ptr().cast(), data.len() as u8);
            rdma_destroy_id(id);
        }
    }

    pub(super) fn connect_request(&mut self, ev: &ShimEvent) {
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
                let mut reply = cm_reply(depth as u16).to_vec();
                if let Mode::BadAccept { lie, io: on_io } = self.hostile.mode {
                    if self.connect_mode_active() && on_io == io {
                        self.hostile.done = true;
                        match lie {
                            AcceptLie::RecFmt => reply[0] = 1,
                            AcceptLie::Crqsize => {
                                let crq = (depth / 2).max(1);
                                if let Some(q) = self.queues.get_mut(&token) {
                                    q.crq = crq;
                                }
                                reply = cm_reply(crq as u16).to_vec();
                            }
                            AcceptLie::Short => reply.truncate(2),
                        }
                        say!(
                            "hostile {}: accepted the CM connect of qid {} from {peer} with private data {:02x?}",
                            self.hostile.mode.name(),
                            req.qid,
                            reply
                        );
                    }
                }
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

    pub(super) fn new_queue(
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
            crq: depth,
            peak: 0,
            past_crq: 0,
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
    pub(super) fn teardown(&mut self, token: u64) {
        let Some(q) = self.queues.remove(&token) else {
            return;
        };
        self.ids.remove(&(q.id as usize));
        if q.crq < q.depth {
            say!(
                "hostile {}: qid {} closed: at most {} commands outstanding of the {} of its accept, {} past it, {} received",
                self.hostile.mode.name(),
                q.qid,
                q.peak,
                q.crq,
                q.past_crq,
                q.commands
            );
        }
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
        if self
            .hostile
            .probe
            .as_ref()
            .is_some_and(|p| p.token == token)
        {
            say!(
                "hostile {}: the queue closed before the probe completed",
                self.hostile.mode.name()
            );
            self.hostile.probe = None;
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

    pub(super) fn disconnect_ctrl(&mut self, cntlid: u16, why: &str) {
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

    pub(super) fn run_todo(&mut self) {
        for a in std::mem::take(&mut self.todo) {
            match a {
                Action::DisconnectCtrl(c, why) => self.disconnect_ctrl(c, &why),
            }
        }
    }

    pub(super) fn run_timers(&mut self) {
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
}
