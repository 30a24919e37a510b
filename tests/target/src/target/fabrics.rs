// SPDX-License-Identifier: GPL-2.0

//! Fabrics commands: Connect (with its data) and Property Get/Set.

use super::*;

impl Target {
    pub(super) fn fabrics(&mut self, q: &mut Queue, cid: u16) {
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

    pub(super) fn connect_mode_active(&self) -> bool {
        let h = &self.hostile;
        !h.done && h.mode.is_connect_mode() && (!h.after_reconnect || h.kicked)
    }

    pub(super) fn connect_data(&mut self, q: &mut Queue, cid: u16, data: &[u8]) {
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
                Mode::ConnectRefused { subsys, io } if io == (qid != 0) => {
                    self.hostile.done = !self.cfg.persist;
                    // As nvmet answers while its configuration changes: the host not (yet)
                    // allowed, or the subsystem not (yet) there (invalid parameter: the
                    // subsystem NQN of the Connect data, at offset 256).
                    let (sc, result, what) = if subsys {
                        (
                            SC_CONNECT_INVALID_PARAM,
                            (1 << 16) | 256,
                            "subsystem not found",
                        )
                    } else {
                        (SC_CONNECT_INVALID_HOST, 0, "host not allowed")
                    };
                    let sc = sc | SC_DNR;
                    say!(
                        "hostile {}: failed the Connect of qid {qid} with status {sc:#x} ({what}, do not retry)",
                        self.hostile.mode.name()
                    );
                    return self.respond(q, cid, sc, result);
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

    pub(super) fn property(&mut self, q: &mut Queue, cid: u16) {
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
}
