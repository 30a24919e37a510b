// SPDX-License-Identifier: GPL-2.0

//! Queue pairs, with what their work requests refer to.
//!
//! A [`Qp`] owns, besides the QP, everything a posted work request may reach until it
//! completes: its CQ, a ring of send buffers (capsules sent by reference), a ring of receive
//! buffers, the completion entries (`ib_cqe`) of its work requests, and what a send holds until
//! its completion (mapped pages, a memory region being registered). The QP is destroyed
//! before any of those go (by its owner, [`CmQp`](super::cm::CmQp), which has the CM id
//! `rdma_destroy_qp` needs), so no work request outlives what it refers to, and posting is
//! safe.
//!
//! Completions and asynchronous events go to the owner's [`QpHandler`], with the QP: a receive
//! by its buffer's index, a send by the completion id it was posted with. Completion ids are
//! of two kinds: plain ones, which any number of sends may share, and holding ones, each used
//! by one send at a time that holds something until it completes (the pages of in-capsule
//! data, a memory region being registered); what it held is released before the handler
//! runs.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).

use super::super::bindings;
use super::super::sync::TakeCell;
use super::cq::Cq;
use super::dma::{DmaBuf, DmaDir, PageMaps, PageRange, MAX_PAGE_RANGES};
use super::mr::{Access, MemoryRegion, Pd};
use core::marker::PhantomData;
use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use kernel::error::to_result;
use kernel::ffi::c_void;
use kernel::prelude::*;
use kernel::str::CStr;
use kernel::sync::Arc;

/// What a QP's owner does with its completions and asynchronous events. The callbacks run in
/// completion (softirq) context, or in the context of whoever polls a direct CQ (blk-mq's
/// poll, a drain); they must not sleep.
pub(crate) trait QpHandler: Send + Sync + Sized + 'static {
    /// Receive buffer `index` completed: filled, or flushed (see [`Wc::ok`]).
    fn recv_done(qp: &Qp<Self>, index: u32, wc: &Wc<'_>);
    /// A send posted with completion id `id` completed: a signaled one, or one that failed.
    /// What a holding id's send held (see [`SendData::Pages`], [`Qp::post_reg_mr`]) is
    /// released already.
    fn send_done(qp: &Qp<Self>, id: u32, wc: &Wc<'_>);
    /// An asynchronous event of the QP.
    fn event(qp: &Qp<Self>, event: QpEvent);
}

/// The sizes of a QP and of what it owns.
pub(crate) struct QpCaps {
    /// Send work requests outstanding at once.
    pub(crate) send_wr: u32,
    /// Receive buffers (and receive work requests), of `recv_size` bytes each.
    pub(crate) recv_bufs: u32,
    pub(crate) recv_size: usize,
    /// Send buffers (capsules sent by reference), of `send_size` bytes each.
    pub(crate) send_bufs: u32,
    pub(crate) send_size: usize,
    /// Plain completion ids of sends, `0..send_ids` (see [`Qp::post_send`]).
    pub(crate) send_ids: u32,
    /// Holding completion ids, numbered after the plain ones.
    pub(crate) held_ids: u32,
    /// Gather elements of data a send may carry after its capsule: at most
    /// [`MAX_PAGE_RANGES`], and fewer if the device has fewer (see [`Qp::data_sges`]).
    pub(crate) data_sges: usize,
    /// Bytes of inline data wanted; the device may give less, or none (see
    /// [`Qp::inline_capacity`]).
    pub(crate) inline: u32,
}

/// What a send holds until it completes; dropping it releases that.
enum Held {
    /// The pages its data was sent from ([`SendData::Pages`]).
    Pages { _maps: PageMaps },
    /// The memory region it registered ([`Qp::post_reg_mr`]).
    Region { _region: Arc<MemoryRegion> },
}

/// The data a send carries after its capsule.
pub(crate) enum SendData<'a> {
    None,
    /// `len` bytes at `offset` in a memory region, by its local key: the device checks them
    /// against the region's registration.
    Region {
        region: &'a MemoryRegion,
        offset: u64,
        len: u32,
    },
    /// A request's pages mapped by this QP ([`Qp::map_pages`]), which the QP holds mapped
    /// until the send completes; such a send always asks for a completion, on a holding id.
    Pages(MappedPages<'a>),
}

/// Ranges of a request's pages mapped for a QP's device ([`Qp::map_pages`]), to be sent with
/// [`SendData::Pages`]; unmapped on drop. The request's pages stay until the send completes:
/// the request's send share keeps it from ending.
pub(crate) struct MappedPages<'q> {
    maps: PageMaps,
    _qp: PhantomData<&'q ()>,
}

/// A work completion, valid for the handler's call.
pub(crate) struct Wc<'a>(&'a bindings::ib_wc);

impl Wc<'_> {
    /// Whether the work request succeeded (a flushed one did not).
    pub(crate) fn ok(&self) -> bool {
        self.0.status == bindings::ib_wc_status_IB_WC_SUCCESS
    }

    pub(crate) fn status(&self) -> u32 {
        self.0.status
    }

    /// The status's name.
    pub(crate) fn status_msg(&self) -> &'static CStr {
        // SAFETY: returns a static string for any value.
        unsafe { CStr::from_char_ptr(bindings::ib_wc_status_msg(self.0.status)) }
    }

    /// The bytes a receive got.
    pub(crate) fn byte_len(&self) -> u32 {
        self.0.byte_len
    }

    /// Whether the peer's send asked to invalidate a key of ours (SEND_WITH_INV).
    pub(crate) fn with_invalidate(&self) -> bool {
        self.0.wc_flags & bindings::ib_wc_flags_IB_WC_WITH_INVALIDATE as i32 != 0
    }
}

/// An asynchronous event of a QP.
#[derive(Clone, Copy)]
pub(crate) struct QpEvent(bindings::ib_event_type);

impl QpEvent {
    /// Whether the event means the QP cannot carry work any more (`IB_EVENT_QP_FATAL`,
    /// `IB_EVENT_QP_REQ_ERR`, `IB_EVENT_QP_ACCESS_ERR`).
    pub(crate) fn is_fatal(self) -> bool {
        matches!(
            self.0,
            bindings::ib_event_type_IB_EVENT_QP_FATAL
                | bindings::ib_event_type_IB_EVENT_QP_REQ_ERR
                | bindings::ib_event_type_IB_EVENT_QP_ACCESS_ERR
        )
    }

    pub(crate) fn code(self) -> u32 {
        self.0
    }

    /// The event's name.
    pub(crate) fn msg(self) -> &'static CStr {
        // SAFETY: returns a static string for any value.
        unsafe { CStr::from_char_ptr(bindings::ib_event_msg(self.0)) }
    }
}

/// A QP and what its work requests refer to (see the module documentation).
///
/// # Invariants
///
/// `qp` is the QP of a CM id, created with this object (boxed, at a fixed address) as its
/// context and `cq` as its send and receive CQ; it is destroyed before this object is dropped
/// (by [`CmQp`](super::cm::CmQp)). `recv_cqes` and `send_cqes` have the sizes `caps` gave (the
/// plain ids, then the holding ones); each entry's `done` is this type's trampoline of its
/// kind. `held[i]` holds what the send in flight with holding id `send_ids + i` keeps.
/// `drained` is set only when no work request posted is left without its completion.
pub(crate) struct Qp<Q: QpHandler> {
    qp: AtomicPtr<bindings::ib_qp>,
    drained: AtomicBool,
    // Dropped before the PD, whose device the page mappings in it need.
    held: KVec<TakeCell<Held>>,
    send_ids: u32,
    cq: Cq,
    pd: Arc<Pd>,
    lkey: u32,
    send_bufs: DmaBuf,
    send_size: usize,
    recv_bufs: DmaBuf,
    recv_size: usize,
    recv_cqes: KVec<bindings::ib_cqe>,
    send_cqes: KVec<bindings::ib_cqe>,
    inline_capacity: u32,
    data_sges: usize,
    handler: Q,
}

// SAFETY: posting work requests is thread safe in the verbs API; the rest is atomics, owned
// buffers copied in and out, take-cells and the handler, which is `Send + Sync`.
unsafe impl<Q: QpHandler> Send for Qp<Q> {}
// SAFETY: as above.
unsafe impl<Q: QpHandler> Sync for Qp<Q> {}

impl<Q: QpHandler> Qp<Q> {
    /// Creates the RC QP of CM id `id` on `pd`, with CQ `cq`. If the device refuses the inline
    /// data asked for, the QP is created without.
    ///
    /// # Safety
    ///
    /// `id` is a CM id the caller owns, whose address is resolved to `pd`'s device, and which
    /// destroys the QP (`rdma_destroy_qp`) before it drops the returned object.
    pub(in crate::wrap) unsafe fn create(
        id: *mut bindings::rdma_cm_id,
        pd: &Arc<Pd>,
        cq: Cq,
        caps: &QpCaps,
        handler: Q,
    ) -> Result<KBox<Self>> {
        let dev = pd.device();
        let send_bufs = DmaBuf::new(
            dev,
            caps.send_bufs as usize * caps.send_size,
            DmaDir::ToDevice,
        )?;
        let recv_bufs = DmaBuf::new(
            dev,
            caps.recv_bufs as usize * caps.recv_size,
            DmaDir::FromDevice,
        )?;
        let cqes =
            |n: u32, done: unsafe extern "C" fn(*mut bindings::ib_cq, *mut bindings::ib_wc)| {
                let mut v = KVec::with_capacity(n as usize, GFP_KERNEL)?;
                for _ in 0..n {
                    v.push(bindings::ib_cqe { done: Some(done) }, GFP_KERNEL)?;
                }
                Ok::<_, Error>(v)
            };
        let mut held = KVec::with_capacity(caps.held_ids as usize, GFP_KERNEL)?;
        for _ in 0..caps.held_ids {
            held.push(TakeCell::new(), GFP_KERNEL)?;
        }
        let data_sges = (dev.max_send_sge().saturating_sub(1) as usize)
            .min(caps.data_sges)
            .clamp(1, MAX_PAGE_RANGES);
        let mut this = KBox::new(
            Self {
                qp: AtomicPtr::new(core::ptr::null_mut()),
                drained: AtomicBool::new(true),
                held,
                send_ids: caps.send_ids,
                cq,
                pd: pd.clone(),
                lkey: pd.local_dma_lkey(),
                send_bufs,
                send_size: caps.send_size,
                recv_bufs,
                recv_size: caps.recv_size,
                recv_cqes: cqes(caps.recv_bufs, recv_done::<Q>)?,
                send_cqes: cqes(caps.send_ids + caps.held_ids, send_done::<Q>)?,
                inline_capacity: 0,
                data_sges,
                handler,
            },
            GFP_KERNEL,
        )?;
        let mut attr = bindings::ib_qp_init_attr {
            event_handler: Some(qp_event::<Q>),
            qp_context: &*this as *const Self as *mut c_void,
            send_cq: this.cq.as_ptr(),
            recv_cq: this.cq.as_ptr(),
            sq_sig_type: bindings::ib_sig_type_IB_SIGNAL_REQ_WR,
            qp_type: bindings::ib_qp_type_IB_QPT_RC,
            ..Default::default()
        };
        attr.cap.max_send_wr = caps.send_wr;
        attr.cap.max_recv_wr = caps.recv_bufs + 1;
        attr.cap.max_send_sge = 1 + data_sges as u32;
        attr.cap.max_recv_sge = 1;
        attr.cap.max_inline_data = caps.inline;
        // SAFETY: `id` per the contract; `attr` names this object, boxed at a fixed address
        // and dropped only after the QP is destroyed (contract), and its CQ, which it owns.
        let mut ret = unsafe { bindings::rdma_create_qp(id, pd.as_ptr(), &mut attr) };
        if (ret == EINVAL.to_errno() || ret == ENOMEM.to_errno()) && caps.inline > 0 {
            // A device without (this much) inline data: capsules go by reference.
            attr.cap.max_inline_data = 0;
            // SAFETY: as above; the failed call left no QP behind.
            ret = unsafe { bindings::rdma_create_qp(id, pd.as_ptr(), &mut attr) };
        }
        to_result(ret)?;
        // The provider reports the inline room it actually gave the QP.
        this.inline_capacity = attr.cap.max_inline_data;
        // SAFETY: `rdma_create_qp` succeeded and set the id's `qp`.
        let qp = unsafe { (*id).qp };
        // INVARIANT: the QP just created on `id`, with this object as its context.
        this.qp.store(qp, Ordering::Release);
        Ok(this)
    }

    fn qp_ptr(&self) -> *mut bindings::ib_qp {
        self.qp.load(Ordering::Acquire)
    }

    /// The owner's handler data.
    pub(crate) fn handler(&self) -> &Q {
        &self.handler
    }

    pub(crate) fn cq(&self) -> &Cq {
        &self.cq
    }

    pub(crate) fn qp_num(&self) -> u32 {
        // SAFETY: the QP exists while `self` does (type invariant).
        unsafe { (*self.qp_ptr()).qp_num }
    }

    /// The inline data a send may carry, in bytes.
    pub(crate) fn inline_capacity(&self) -> u32 {
        self.inline_capacity
    }

    /// How many data gather elements a send may have after its capsule.
    pub(crate) fn data_sges(&self) -> usize {
        self.data_sges
    }

    /// The cell of holding id `id`, if it is one.
    fn held_cell(&self, id: u32) -> Option<&TakeCell<Held>> {
        self.held.get(id.checked_sub(self.send_ids)? as usize)
    }

    /// Marks the QP as having work requests that may not have completed.
    fn posting(&self) {
        self.drained.store(false, Ordering::Release);
    }

    /// Posts a SEND of `capsule` with `data`, whose completion (if signaled, or failed) goes
    /// to the handler with completion id `id`: a plain id, or for [`SendData::Pages`] a holding
    /// id, free (`EBUSY` otherwise; `EINVAL` for the wrong kind). The capsule goes as inline
    /// data when there is no data and the QP has room (the provider copies it at post time);
    /// else it is copied into send buffer `buf` and sent from there (`EINVAL` if `buf` is
    /// `None`). A send of [`SendData::Pages`] is always signaled. `ENOMEM` when the send queue
    /// is full or the pages cannot be mapped.
    pub(crate) fn post_send(
        &self,
        capsule: &[u8],
        buf: Option<u32>,
        data: SendData<'_>,
        id: u32,
        signaled: bool,
    ) -> Result {
        let cqe = self.send_cqes.get(id as usize).ok_or(EINVAL)?;
        let mut sge = [bindings::ib_sge::default(); 1 + MAX_PAGE_RANGES];
        let mut n_data = 0;
        let mut signaled = signaled;
        let mut held = None;
        match data {
            SendData::None | SendData::Region { .. } if id >= self.send_ids => {
                return Err(EINVAL);
            }
            SendData::None => {}
            SendData::Region {
                region,
                offset,
                len,
            } => {
                let end = offset.checked_add(u64::from(len)).ok_or(EINVAL)?;
                if end > region.length() {
                    return Err(EINVAL);
                }
                sge[1] = bindings::ib_sge {
                    addr: region.iova() + offset,
                    length: len,
                    lkey: region.lkey(),
                };
                n_data = 1;
            }
            SendData::Pages(mapped) => {
                let cell = self.held_cell(id).ok_or(EINVAL)?;
                let maps = mapped.maps;
                // Mapped for this QP's device, in at most as many ranges as a send has SGEs
                // (see `map_pages`).
                if !maps.is_for(self.pd.device()) || maps.ranges().len() > self.data_sges {
                    return Err(EINVAL);
                }
                if cell.is_full() {
                    return Err(EBUSY);
                }
                for (to, &(addr, len)) in sge[1..].iter_mut().zip(maps.ranges()) {
                    *to = bindings::ib_sge {
                        addr,
                        length: len,
                        lkey: self.lkey,
                    };
                }
                n_data = maps.ranges().len();
                signaled = true;
                held = Some((cell, Held::Pages { _maps: maps }));
            }
        }
        let mut send_flags = if signaled {
            bindings::ib_send_flags_IB_SEND_SIGNALED
        } else {
            0
        };
        sge[0] = if n_data == 0 && capsule.len() <= self.inline_capacity as usize {
            // Inline SGEs carry CPU addresses; the provider copies the bytes at post time.
            send_flags |= bindings::ib_send_flags_IB_SEND_INLINE;
            bindings::ib_sge {
                addr: capsule.as_ptr() as u64,
                length: capsule.len() as u32,
                lkey: 0,
            }
        } else {
            let buf = buf.ok_or(EINVAL)? as usize;
            if capsule.len() > self.send_size {
                return Err(EINVAL);
            }
            let offset = buf.checked_mul(self.send_size).ok_or(EINVAL)?;
            self.send_bufs.write(offset, capsule)?;
            bindings::ib_sge {
                addr: self
                    .send_bufs
                    .dma_addr(offset, capsule.len())
                    .ok_or(EINVAL)?,
                length: capsule.len() as u32,
                lkey: self.lkey,
            }
        };
        let cell = match held {
            Some((cell, h)) => {
                cell.put(h).map_err(|_| EBUSY)?;
                Some(cell)
            }
            None => None,
        };
        let mut wr = bindings::ib_send_wr {
            sg_list: sge.as_mut_ptr(),
            num_sge: 1 + n_data as i32,
            opcode: bindings::ib_wr_opcode_IB_WR_SEND,
            send_flags,
            ..Default::default()
        };
        wr.__bindgen_anon_1.wr_cqe = cqe as *const _ as *mut _;
        self.posting();
        // What the SGEs name outlives the send: the capsule (copied at post time when inline),
        // its send buffer (the QP's own), memory of a region (checked by the device against its
        // key), or pages the QP holds mapped until the completion; so does the completion entry.
        // SAFETY: the QP exists (type invariant); the SGEs as said; the provider copies the
        // work request before returning.
        let ret = to_result(unsafe { bindings::rsrdma_post_send(self.qp_ptr(), &wr) });
        if let (Err(_), Some(cell)) = (&ret, cell) {
            // Not posted: what it held is released now.
            drop(cell.take());
        }
        ret
    }

    /// Maps `ranges` of an owned request's pages for this QP's device, to send them with
    /// [`SendData::Pages`]: `EINVAL` for more ranges than a send has data SGEs for
    /// ([`Qp::data_sges`]).
    pub(crate) fn map_pages<'q>(&'q self, ranges: &[PageRange<'_>]) -> Result<MappedPages<'q>> {
        if ranges.len() > self.data_sges {
            return Err(EINVAL);
        }
        // The PD's device outlives the mappings: the returned value borrows this QP, and once
        // posted the QP keeps them in `held`, dropped before the PD. The request's pages stay
        // while it is owned (`PageRange`) and, once sent, until the send completes.
        // SAFETY: as said above.
        let maps = unsafe { PageMaps::map(self.pd.device(), ranges) }?;
        Ok(MappedPages {
            maps,
            _qp: PhantomData,
        })
    }

    /// Posts receive buffer `index`, handing it (back) to the device.
    pub(crate) fn post_recv(&self, index: u32) -> Result {
        let cqe = self.recv_cqes.get(index as usize).ok_or(EINVAL)?;
        let offset = index as usize * self.recv_size;
        let addr = self
            .recv_bufs
            .dma_addr(offset, self.recv_size)
            .ok_or(EINVAL)?;
        self.recv_bufs.give_back(offset, self.recv_size);
        let mut sge = bindings::ib_sge {
            addr,
            length: self.recv_size as u32,
            lkey: self.lkey,
        };
        let mut wr = bindings::ib_recv_wr {
            sg_list: &mut sge,
            num_sge: 1,
            ..Default::default()
        };
        wr.__bindgen_anon_1.wr_cqe = cqe as *const _ as *mut _;
        self.posting();
        // SAFETY: the QP exists (type invariant); the buffer and the completion entry are the
        // QP's own, which it outlives; the provider copies the work request.
        to_result(unsafe { bindings::rsrdma_post_recv(self.qp_ptr(), &wr) })
    }

    /// Copies what receive buffer `index` got into `out` (up to its size); `EINVAL` for a
    /// buffer the QP does not have.
    pub(crate) fn read_recv(&self, index: u32, out: &mut [u8]) -> Result {
        if out.len() > self.recv_size || index as usize >= self.recv_cqes.len() {
            return Err(EINVAL);
        }
        self.recv_bufs.read(index as usize * self.recv_size, out)
    }

    /// Posts the registration (REG_MR) of `region` with `access` for the remote side, signaled,
    /// its completion going to holding id `id` (`EINVAL` for a plain one, `EBUSY` if it is in
    /// use); the QP holds the region until then.
    pub(crate) fn post_reg_mr(&self, region: Arc<MemoryRegion>, access: Access, id: u32) -> Result {
        let cqe = self.send_cqes.get(id as usize).ok_or(EINVAL)?;
        let cell = self.held_cell(id).ok_or(EINVAL)?;
        let mut wr = bindings::ib_reg_wr {
            mr: region.as_ptr(),
            key: region.rkey(),
            access: access.raw(),
            ..Default::default()
        };
        wr.wr.opcode = bindings::ib_wr_opcode_IB_WR_REG_MR;
        wr.wr.send_flags = bindings::ib_send_flags_IB_SEND_SIGNALED;
        wr.wr.__bindgen_anon_1.wr_cqe = cqe as *const _ as *mut _;
        cell.put(Held::Region { _region: region })
            .map_err(|_| EBUSY)?;
        self.posting();
        // SAFETY: the QP exists; the region is held by the QP until the work request
        // completes, the completion entry is the QP's own; the provider copies the request.
        let ret = to_result(unsafe { bindings::rsrdma_post_send(self.qp_ptr(), &wr.wr) });
        if ret.is_err() {
            drop(cell.take());
        }
        ret
    }

    /// Moves the QP to the error state and waits until every posted work request completed
    /// (their handlers run, flushed); nothing if none was posted since the last drain. Sleeps.
    pub(crate) fn drain(&self) {
        if self.drained.load(Ordering::Acquire) {
            return;
        }
        // SAFETY: a live QP whose CQ is alive (type invariant).
        unsafe { bindings::ib_drain_qp(self.qp_ptr()) };
        // INVARIANT: every work request posted before has completed; a post from here on
        // clears the flag first.
        self.drained.store(true, Ordering::Release);
    }
}

/// The QP of a completion: its context.
///
/// # Safety
///
/// `wc` is a completion of a work request posted on a [`Qp<Q>`], passed to a handler.
unsafe fn qp_of<'a, Q: QpHandler>(wc: &'a bindings::ib_wc) -> &'a Qp<Q> {
    // SAFETY: per the contract, the QP's context is the `Qp<Q>`, alive while the QP exists,
    // which it does while its completions are handled.
    unsafe { &*((*wc.qp).qp_context as *const Qp<Q>) }
}

/// The index of completion entry `cqe` in `cqes`.
fn index_of(cqes: &[bindings::ib_cqe], cqe: *mut bindings::ib_cqe) -> u32 {
    ((cqe as usize - cqes.as_ptr() as usize) / core::mem::size_of::<bindings::ib_cqe>()) as u32
}

/// Completion of a receive.
///
/// # Safety
///
/// Called by the RDMA core with a completion whose `wr_cqe` is a receive entry of a `Qp<Q>`.
unsafe extern "C" fn recv_done<Q: QpHandler>(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
    // SAFETY: a valid completion for the call.
    let wc = unsafe { &*wc };
    // SAFETY: per the contract.
    let qp = unsafe { qp_of::<Q>(wc) };
    // SAFETY: a receive completion names its entry in `wr_cqe`.
    let index = index_of(&qp.recv_cqes, unsafe { wc.__bindgen_anon_1.wr_cqe });
    Q::recv_done(qp, index, &Wc(wc));
}

/// Completion of a send (or a registration).
///
/// # Safety
///
/// Called by the RDMA core with a completion whose `wr_cqe` is a send entry of a `Qp<Q>`.
unsafe extern "C" fn send_done<Q: QpHandler>(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
    // SAFETY: a valid completion for the call.
    let wc = unsafe { &*wc };
    // SAFETY: per the contract.
    let qp = unsafe { qp_of::<Q>(wc) };
    // SAFETY: a send completion names its entry in `wr_cqe`.
    let id = index_of(&qp.send_cqes, unsafe { wc.__bindgen_anon_1.wr_cqe });
    // Released before the handler runs: the device is done with it.
    drop(qp.held_cell(id).and_then(TakeCell::take));
    Q::send_done(qp, id, &Wc(wc));
}

/// Asynchronous events of a QP.
///
/// # Safety
///
/// Called by the RDMA core with a valid event and the QP's context, a `Qp<Q>`.
unsafe extern "C" fn qp_event<Q: QpHandler>(event: *mut bindings::ib_event, context: *mut c_void) {
    // SAFETY: per the contract; the context is alive while the QP exists.
    let (qp, ev) = unsafe { (&*(context as *const Qp<Q>), (*event).event) };
    Q::event(qp, QpEvent(ev));
}
