// SPDX-License-Identifier: GPL-2.0

//! I/O commands: reads and writes on the namespace memory, and the misbehaviours that
//! answer them.

use super::*;

impl Target {
    pub(super) fn io(&mut self, q: &mut Queue, cid: u16) {
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

    pub(super) fn io_data(&mut self, q: &mut Queue, cid: u16, op: u8, off: usize, len: usize) {
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
    pub(super) fn hostile_io(
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
                    self.todo.push(Action::DisconnectCtrl(
                        c,
                        "late-cqe: forcing a reconnect".into(),
                    ));
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
                let id = wr_id(K_MID, cid, 0);
                let mut r = post_rdma(
                    q,
                    id,
                    op_rdma,
                    F_SIGNALED,
                    (ptr0, lkey),
                    chunk as u32,
                    (addr, key),
                );
                if r == 0 && two > chunk {
                    let (id, rest) = (wr_id(K_WRITE, cid, 1), (two - chunk) as u32);
                    r = post_rdma(
                        q,
                        id,
                        op_rdma,
                        0,
                        (ptr1, lkey),
                        rest,
                        (addr + chunk as u64, key),
                    );
                }
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
                let prev = h
                    .stale
                    .as_ref()
                    .map(|s| (s.addr, s.key, s.len, s.cntlid, s.write));
                match prev {
                    None => {
                        h.stale = Some(Stale {
                            addr,
                            key,
                            len: l,
                            cntlid: c,
                            write: op == IO_WRITE,
                        });
                        h.kicked = true;
                        cmd.kick = true;
                        say!(
                            "hostile stale-rkey: recorded rkey {key:#x} addr {addr:#x} len {l} of the {what} on cntlid {c}; closing the association after it"
                        );
                        false
                    }
                    Some((sa, sk, sl, sc, sw)) if sc != c => {
                        h.done = true;
                        cmd.held = true;
                        let n = sl.min(4096);
                        // The access the recorded command's key was registered for.
                        let (rdma, verb, local) = if sw {
                            (OP_READ, "READ", (self.scratch.at(0), self.scratch.lkey))
                        } else {
                            (OP_WRITE, "WRITE", (self.zeros.at(0), self.zeros.lkey))
                        };
                        say!(
                            "hostile stale-rkey: RDMA {verb} of {n} bytes at addr {sa:#x} with the previous association's rkey {sk:#x} (cntlid {sc}); this {what} on cntlid {c} carries rkey {key:#x}"
                        );
                        if sk == key {
                            say!("stale-rkey result: inconclusive (the host registered the same rkey again)");
                        }
                        h.probe = Some(Probe::new(q.token, cid, 1, Vec::new()));
                        let id = wr_id(K_PROBE, cid, 0);
                        let r = post_rdma(q, id, rdma, F_SIGNALED, local, n, (sa, sk));
                        if r < 0 {
                            say!("stale-rkey result: post failed ({})", errno_str(r));
                        }
                        true
                    }
                    Some(_) => false,
                }
            }
            Mode::Scope { read_dest } => {
                let Some((addr, l, key)) = keyed else {
                    return false;
                };
                // read-dest: the buffer of a host read is the target's to write, never to read;
                // write-src: the buffer of a host write is the target's to read, never to write.
                if op != if read_dest { IO_READ } else { IO_WRITE } {
                    return false;
                }
                h.done = true;
                cmd.held = true;
                let n = l.min(4096);
                let (rdma, may) = if read_dest {
                    (OP_READ, "write")
                } else {
                    (OP_WRITE, "read")
                };
                say!(
                    "hostile {name}: RDMA {} of {n} bytes at addr {addr:#x} with rkey {key:#x}: the buffer of the {what}, which the target may only {may}",
                    if read_dest { "READ" } else { "WRITE" }
                );
                h.probe = Some(Probe::new(q.token, cid, 1, Vec::new()));
                let (ptr, lkey) = (self.scratch.at(0), self.scratch.lkey);
                let r = post_rdma(
                    q,
                    wr_id(K_PROBE, cid, 0),
                    rdma,
                    F_SIGNALED,
                    (ptr, lkey),
                    n,
                    (addr, key),
                );
                if r < 0 {
                    say!("scope result: post failed ({})", errno_str(r));
                }
                true
            }
            Mode::IoError => {
                h.done = true;
                let sc = if op == IO_READ {
                    SC_READ_ERROR
                } else {
                    SC_WRITE_FAULT
                } | SC_DNR;
                say!("hostile io-error: answered the {what} with status {sc:#x} (DNR)");
                self.respond(q, cid, sc, 0);
                true
            }
            Mode::LongRsp(n) => {
                h.done = true;
                cmd.hostile = Some(RspHostility::Long(n));
                false
            }
            Mode::QpError => {
                h.done = true;
                cmd.held = true;
                say!(
                    "hostile qp-error: holding the {what}, moving the QP of qid {} to the error state",
                    q.qid
                );
                // SAFETY: the queue's QP.
                let r = unsafe { shim_qp_error(q.qp) };
                if r < 0 {
                    say!("hostile qp-error: modify_qp failed: {}", errno_str(r));
                }
                true
            }
            Mode::AenFlood(n) => {
                let cntlid = q.cntlid;
                let Some(a) = self
                    .queues
                    .values_mut()
                    .find(|a| a.qid == 0 && a.cntlid == cntlid)
                else {
                    say!("hostile aen-flood: no admin queue for the {what}");
                    return false;
                };
                let aer = a
                    .cmds
                    .iter()
                    .find(|(_, c)| c.held && c.sqe.opcode() == ADM_ASYNC_EVENT)
                    .map(|(cid, _)| *cid);
                let Some(aer) = aer else {
                    say!("hostile aen-flood: no Asynchronous Event Request outstanding at the {what}");
                    return false;
                };
                h.done = true;
                a.cmds.remove(&aer);
                for _ in 0..n {
                    let c = cqe(AEN_NS_CHANGED, a.sq_head, 0, aer, SC_SUCCESS);
                    post_send_rsp(a, aer, &c, None, SendInfo::default());
                }
                say!(
                    "hostile aen-flood: completed the Asynchronous Event Request (cid {aer:#x}) {n} times, each a 'namespace attribute changed' notice, at the {what}"
                );
                false
            }
            Mode::Residue => {
                let Some((addr, l, key)) = keyed else {
                    return false;
                };
                if op != IO_WRITE {
                    return false;
                }
                let c = q.cntlid.unwrap();
                let recorded_on = h.residue.first().map(|r| r.cntlid);
                if recorded_on.is_none_or(|rc| rc == c) {
                    // The latest write's data is what the buffer holds: an earlier record
                    // overlapping it is stale.
                    let end = addr + u64::from(l);
                    h.residue
                        .retain(|r| r.addr + u64::from(r.len) <= addr || r.addr >= end);
                    if h.residue.len() < RESIDUE_SLICES {
                        h.residue.push(Recorded {
                            addr,
                            len: l.min(RESIDUE_BYTES),
                            off,
                            cntlid: c,
                        });
                    }
                    if recorded_on.is_none() {
                        say!("hostile residue: recording the buffers of host writes on cntlid {c}");
                    }
                    return false;
                }
                // The host's next association: read the recorded buffers through this
                // command's key, all but the one this command uses.
                h.done = true;
                cmd.held = true;
                let end = addr + u64::from(l);
                let reads: Vec<Recorded> = std::mem::take(&mut h.residue)
                    .into_iter()
                    .filter(|r| r.addr + u64::from(r.len) <= addr || r.addr >= end)
                    .collect();
                let bytes: u64 = reads.iter().map(|r| u64::from(r.len)).sum();
                say!(
                    "hostile residue: RDMA READ of {} buffer(s), {bytes} bytes, that host writes used on the previous association, with rkey {key:#x} of the {what} on cntlid {c}",
                    reads.len()
                );
                if reads.is_empty() {
                    say!("residue result: inconclusive (no buffer left to read)");
                    cmd.held = false;
                    return false;
                }
                let base = self.scratch.lkey;
                let mut reads = reads;
                let mut posted = 0;
                for (i, r) in reads.iter().enumerate() {
                    let ptr = self.scratch.at(i * RESIDUE_BYTES as usize);
                    let id = wr_id(K_PROBE, cid, i as u32);
                    let rc = post_rdma(
                        q,
                        id,
                        OP_READ,
                        F_SIGNALED,
                        (ptr, base),
                        r.len,
                        (r.addr, key),
                    );
                    if rc < 0 {
                        say!("residue result: post failed ({})", errno_str(rc));
                        break;
                    }
                    posted += 1;
                }
                // Only what was read is compared.
                reads.truncate(posted);
                self.hostile.probe = Some(Probe::new(q.token, cid, posted, reads));
                true
            }
            _ => false,
        }
    }

    /// A work request of a stale-rkey, scope or residue probe completed (`status`). Once all have, says
    /// what they found; then serves the held command if the host's memory let the target do
    /// what it tried, or closes the association (its QP is in error) so that the host
    /// reconnects and sends the command again.
    pub(super) fn probe_done(&mut self, q: &mut Queue, cid: u16, status: u32) {
        let Some(p) = self.hostile.probe.as_mut() else {
            return;
        };
        if p.token != q.token || p.cid != cid {
            return;
        }
        p.pending = p.pending.saturating_sub(1);
        if status != WC_SUCCESS && p.failed.is_none() {
            p.failed = Some(status);
        }
        if p.pending > 0 {
            return;
        }
        let p = self.hostile.probe.take().unwrap();
        let mode = self.hostile.mode;
        let tag = match mode {
            Mode::Residue => "residue",
            Mode::StaleRkey => "stale-rkey",
            _ => "scope",
        };
        match p.failed {
            Some(WC_REM_ACCESS_ERR) => say!(
                "{tag} result: remote-access-error ({}): the rkey does not grant it",
                wc_status_str(WC_REM_ACCESS_ERR)
            ),
            Some(s) => say!("{tag} result: {} (status {s})", wc_status_str(s)),
            None if mode == Mode::Residue => {
                let (mut bytes, mut same, mut nonzero) = (0usize, 0usize, 0usize);
                for (i, r) in p.reads.iter().enumerate() {
                    let n = r.len as usize;
                    let at = i * RESIDUE_BYTES as usize;
                    let got = &self.scratch.buf[at..at + n];
                    bytes += n;
                    nonzero += got.iter().filter(|&&b| b != 0).count();
                    if got == &self.ns.buf[r.off..r.off + n] {
                        same += 1;
                    }
                }
                let verdict = if same == 0 { "clean" } else { "found" };
                say!(
                    "residue result: {verdict}: {bytes} bytes read in {} buffer(s), {same} holding the previous association's data, {nonzero} nonzero bytes",
                    p.reads.len()
                );
            }
            None => say!("{tag} result: success (the rkey let the target do it)"),
        }
        if p.failed.is_none() {
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
            self.todo
                .push(Action::DisconnectCtrl(c, format!("the {tag} probe failed")));
        } else {
            q.close("the probe failed");
        }
    }
}
