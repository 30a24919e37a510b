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
                        let id = wr_id(K_STALE, cid, 0);
                        let r = post_rdma(q, id, OP_WRITE, F_SIGNALED, (ptr, lkey), n, (sa, sk));
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

    pub(super) fn stale_done(&mut self, q: &mut Queue, cid: u16, status: u32) {
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
