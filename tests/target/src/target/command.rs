// SPDX-License-Identifier: GPL-2.0

//! Commands: dispatch, responses, and data moved to and from the host's keyed SGLs.

use super::*;

impl Target {
    pub(super) fn command(&mut self, q: &mut Queue, sqe: Sqe, inline: Vec<u8>) {
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
        q.peak = q.peak.max(q.cmds.len());
        if q.cmds.len() > q.crq as usize {
            if q.past_crq == 0 {
                say!(
                    "hostile {}: qid {}: {} commands outstanding, past the {} of its accept",
                    self.hostile.mode.name(),
                    q.qid,
                    q.cmds.len(),
                    q.crq
                );
            }
            q.past_crq += 1;
        }
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

    pub(super) fn respond(&mut self, q: &mut Queue, cid: u16, status: u16, result: u64) {
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
            Some(RspHostility::Long(n)) => {
                let mut long = [0u8; MAX_INLINE as usize];
                long[..CQE_SIZE].copy_from_slice(&c);
                post_send_rsp(q, cid, &long[..n as usize], None, info);
                say!(
                    "hostile long-rsp: sent {n} bytes, {CQE_SIZE} of them a completion, as the response of cid {cid:#x} on qid {}",
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
    pub(super) fn fetch(
        &mut self,
        q: &mut Queue,
        cid: u16,
        len: usize,
        dest: Option<usize>,
        cont: Cont,
    ) {
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
                let id = wr_id(K_READ, cid, 0);
                let r = post_rdma(
                    q,
                    id,
                    OP_READ,
                    F_SIGNALED,
                    (ptr, lkey),
                    len as u32,
                    (addr, key),
                );
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

    pub(super) fn read_done(&mut self, q: &mut Queue, cid: u16) {
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
    pub(super) fn push(
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
        let id = wr_id(K_WRITE, cid, 0);
        let r = post_rdma(q, id, OP_WRITE, 0, (ptr, lkey), len as u32, (addr, key));
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
    pub(super) fn send_data(&mut self, q: &mut Queue, cid: u16, data: &[u8], result: u64) {
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
}
