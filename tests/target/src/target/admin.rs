// SPDX-License-Identifier: GPL-2.0

//! Admin commands: Identify, Get Log Page, Set/Get Features, Keep Alive and the rest.

use super::*;

impl Target {
    pub(super) fn admin(&mut self, q: &mut Queue, cid: u16) {
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
                    0x07 if self.hostile.mode == Mode::NoIoQueues && !self.hostile.done => {
                        self.hostile.done = true;
                        say!("hostile no-io-queues: cntlid {c}: Set Features (Number of Queues) answered with 'invalid field' and DNR, no I/O queue granted");
                        self.respond(q, cid, SC_INVALID_FIELD | SC_DNR, 0)
                    }
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
}
