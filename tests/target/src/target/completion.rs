// SPDX-License-Identifier: GPL-2.0

//! Completions: the completion channel, each work completion, and received capsules.

use super::*;

impl Target {
    pub(super) fn cq_events(&mut self) {
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

    pub(super) fn completion(&mut self, q: &mut Queue, wc: &ShimWc) {
        let kind = wc.wr_id >> 56;
        let cid = (wc.wr_id >> 32) as u16;
        let aux = wc.wr_id as u32;
        if kind == K_PROBE {
            return self.probe_done(q, cid, wc.status);
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

    pub(super) fn received(&mut self, q: &mut Queue, slot: u32, len: usize) {
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
}
