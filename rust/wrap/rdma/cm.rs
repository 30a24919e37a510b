// SPDX-License-Identifier: GPL-2.0

//! RDMA CM identifiers of RC connections.
//!
//! - [`CmId`]: an id whose events go to its owner's [`CmHandler`], which the id owns: the
//!   handler lives until the id is destroyed (`rdma_destroy_id` waits for a running handler).
//! - [`CmQp`]: an id with its QP ([`Qp`]); the QP is destroyed first.
//! - [`ParkedId`]: an id detached from its handler, kept only to be destroyed later (its
//!   destruction sends a DREQ, which a port that is down must not).
//!
//! C header: [`include/rdma/rdma_cm.h`](srctree/include/rdma/rdma_cm.h).

use super::super::bindings;
use super::super::log::{log_err, Prefix};
use super::super::net::SockAddr;
use super::cq::Cq;
use super::device::Device;
use super::mr::{created, Pd};
use super::qp::{Qp, QpCaps, QpHandler};
use core::mem::ManuallyDrop;
use core::ptr::NonNull;
use kernel::error::to_result;
use kernel::ffi::c_void;
use kernel::prelude::*;
use kernel::str::CStr;
use kernel::sync::Arc;

/// What a CM id's owner does with its events. The handler runs in the CM's work context, one
/// event of an id at a time, under the id's handler lock: it must not connect, detach or drop
/// its own id (which take that lock), nor wait for one of those.
pub(crate) trait CmHandler: Send + Sync + Sized + 'static {
    fn event(&self, event: &CmEvent<'_>);
}

/// The kinds of CM event the transport tells apart.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum CmEventKind {
    AddrResolved,
    AddrError,
    RouteResolved,
    RouteError,
    ConnectError,
    Unreachable,
    Rejected,
    Established,
    Disconnected,
    DeviceRemoval,
    AddrChange,
    TimewaitExit,
    Other(u32),
}

impl CmEventKind {
    fn from_raw(raw: bindings::rdma_cm_event_type) -> Self {
        match raw {
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_RESOLVED => Self::AddrResolved,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_ERROR => Self::AddrError,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ROUTE_RESOLVED => Self::RouteResolved,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ROUTE_ERROR => Self::RouteError,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_CONNECT_ERROR => Self::ConnectError,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_UNREACHABLE => Self::Unreachable,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_REJECTED => Self::Rejected,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ESTABLISHED => Self::Established,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_DISCONNECTED => Self::Disconnected,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_DEVICE_REMOVAL => Self::DeviceRemoval,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_CHANGE => Self::AddrChange,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_TIMEWAIT_EXIT => Self::TimewaitExit,
            other => Self::Other(other),
        }
    }

    /// The event's number in `enum rdma_cm_event_type`.
    pub(crate) fn code(self) -> u32 {
        match self {
            Self::AddrResolved => bindings::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_RESOLVED,
            Self::AddrError => bindings::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_ERROR,
            Self::RouteResolved => bindings::rdma_cm_event_type_RDMA_CM_EVENT_ROUTE_RESOLVED,
            Self::RouteError => bindings::rdma_cm_event_type_RDMA_CM_EVENT_ROUTE_ERROR,
            Self::ConnectError => bindings::rdma_cm_event_type_RDMA_CM_EVENT_CONNECT_ERROR,
            Self::Unreachable => bindings::rdma_cm_event_type_RDMA_CM_EVENT_UNREACHABLE,
            Self::Rejected => bindings::rdma_cm_event_type_RDMA_CM_EVENT_REJECTED,
            Self::Established => bindings::rdma_cm_event_type_RDMA_CM_EVENT_ESTABLISHED,
            Self::Disconnected => bindings::rdma_cm_event_type_RDMA_CM_EVENT_DISCONNECTED,
            Self::DeviceRemoval => bindings::rdma_cm_event_type_RDMA_CM_EVENT_DEVICE_REMOVAL,
            Self::AddrChange => bindings::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_CHANGE,
            Self::TimewaitExit => bindings::rdma_cm_event_type_RDMA_CM_EVENT_TIMEWAIT_EXIT,
            Self::Other(code) => code,
        }
    }

    /// The kind of event number `code` (as [`CmEventKind::code`] gives it).
    pub(crate) fn from_code(code: u32) -> Self {
        Self::from_raw(code)
    }

    /// The event's name (`rdma_event_msg`).
    pub(crate) fn msg(self) -> &'static CStr {
        // SAFETY: returns a static string for any value.
        unsafe { CStr::from_char_ptr(bindings::rdma_event_msg(self.code())) }
    }
}

/// An event the RDMA CM passes to a CM id's handler, with the id; valid for the call.
///
/// # Invariants
///
/// `id` and `ev` are the arguments of a running CM event handler, valid for `'a`.
pub(crate) struct CmEvent<'a> {
    /// Not a reference: the CM and the id's owner write other fields of the id meanwhile
    /// (its QP, its route).
    id: NonNull<bindings::rdma_cm_id>,
    ev: &'a bindings::rdma_cm_event,
}

/// What a rejection carries (see [`CmEvent::rejected`]).
pub(crate) struct Rejection<'a> {
    /// The CM's reason for the status (`rdma_reject_msg`).
    pub(crate) cm_msg: &'static CStr,
    /// The private data the peer's consumer put in it (`rdma_consumer_reject_data`).
    pub(crate) data: Option<&'a [u8]>,
}

impl<'a> CmEvent<'a> {
    /// # Safety
    ///
    /// `id` and `ev` are the arguments of a running CM event handler, and `'a` ends with the
    /// call.
    unsafe fn from_raw(id: *mut bindings::rdma_cm_id, ev: *mut bindings::rdma_cm_event) -> Self {
        // INVARIANT: per the contract.
        Self {
            // SAFETY: per the contract, the id is not null.
            id: unsafe { NonNull::new_unchecked(id) },
            // SAFETY: per the contract; the CM does not change the event during the call.
            ev: unsafe { &*ev },
        }
    }

    /// The context the id was created with; null once detached (see [`CmId::detach`]).
    fn context(&self) -> *mut c_void {
        // SAFETY: a valid id (type invariant); `context` changes only under the handler lock,
        // which the CM holds while the handler runs.
        unsafe { core::ptr::addr_of!((*self.id.as_ptr()).context).read() }
    }

    pub(crate) fn kind(&self) -> CmEventKind {
        CmEventKind::from_raw(self.ev.event)
    }

    pub(crate) fn status(&self) -> i32 {
        self.ev.status
    }

    /// The reason and private data of a `REJECTED` event; `None` for any other event.
    pub(crate) fn rejected(&self) -> Option<Rejection<'a>> {
        if self.kind() != CmEventKind::Rejected {
            return None;
        }
        let (id, ev) = (self.id.as_ptr(), self.ev as *const _ as *mut _);
        let mut len = 0u8;
        // SAFETY: a rejection comes from the peer, on an id bound to a device (the calls read
        // it); both calls only read the id and the event, and return a static string and
        // `len` bytes of private data that live as long as the event.
        let (cm_msg, data) = unsafe {
            (
                CStr::from_char_ptr(bindings::rdma_reject_msg(id, self.status())),
                bindings::rdma_consumer_reject_data(id, ev, &mut len),
            )
        };
        Some(Rejection {
            cm_msg,
            // SAFETY: as above.
            data: (!data.is_null())
                .then(|| unsafe { core::slice::from_raw_parts(data.cast::<u8>(), len.into()) }),
        })
    }

    /// The private data of the peer's accept, with an `ESTABLISHED` event of a connection
    /// this side requested; `None` for any other event.
    pub(crate) fn accepted(&self) -> Option<&'a [u8]> {
        if self.kind() != CmEventKind::Established {
            return None;
        }
        // SAFETY: the CM fills `param.conn` for a connection's `ESTABLISHED` (the union's
        // `ud` member is for UD ids, which this module does not create).
        let conn = unsafe { &self.ev.param.conn };
        if conn.private_data.is_null() {
            return Some(&[]);
        }
        // SAFETY: the CM passes `private_data_len` bytes of private data that live as long as
        // the event.
        Some(unsafe {
            core::slice::from_raw_parts(
                conn.private_data.cast::<u8>(),
                conn.private_data_len.into(),
            )
        })
    }

    /// The device the id is bound to, if it is.
    pub(crate) fn device(&self) -> Option<&'a Device> {
        // SAFETY: a valid id; `device` is set once the id is bound and does not change while
        // the handler runs, and the device's removal waits for this handler.
        unsafe { Device::from_raw(core::ptr::addr_of!((*self.id.as_ptr()).device).read()) }
    }
}

/// The parameters of a connect request.
pub(crate) struct ConnParam<'a> {
    /// The consumer's private data (the NVMe/RDMA CM request).
    pub(crate) private_data: &'a [u8],
    pub(crate) responder_resources: u8,
    pub(crate) retry_count: u8,
    pub(crate) rnr_retry_count: u8,
}

/// An RDMA CM identifier of an RC connection in the initial network namespace, whose events go
/// to `C`.
///
/// # Invariants
///
/// `id` is owned, created with `handler`'s box as its context and [`cm_handler::<C>`] as its
/// handler, and has no QP. `handler` outlives the id (it is dropped after `rdma_destroy_id`).
pub(crate) struct CmId<C: CmHandler> {
    id: NonNull<bindings::rdma_cm_id>,
    handler: KBox<C>,
}

// SAFETY: the RDMA CM serializes operations on an id internally; the handle can be used and
// dropped from any thread (not from its own event handler, which has no handle).
unsafe impl<C: CmHandler> Send for CmId<C> {}
// SAFETY: as above.
unsafe impl<C: CmHandler> Sync for CmId<C> {}

impl<C: CmHandler> CmId<C> {
    /// Creates an id whose events go to `handler`.
    pub(crate) fn new(handler: C) -> Result<Self> {
        let handler = KBox::new(handler, GFP_KERNEL)?;
        let context = &*handler as *const C as *mut c_void;
        // SAFETY: the glue calls rdma_create_id for a kernel RC id in init_net; the context is
        // the boxed handler, which the returned id owns and drops after destroying the id.
        let id = created(unsafe { bindings::rsrdma_create_id(Some(cm_handler::<C>), context) })?;
        // INVARIANT: as created above.
        Ok(Self { id, handler })
    }

    fn as_ptr(&self) -> *mut bindings::rdma_cm_id {
        self.id.as_ptr()
    }

    /// Starts address resolution; the result arrives as a CM event.
    pub(crate) fn resolve_addr(
        &self,
        src: Option<&SockAddr>,
        dst: &SockAddr,
        timeout_ms: u32,
    ) -> Result {
        let src = src.map_or(core::ptr::null_mut(), SockAddr::as_sockaddr);
        // SAFETY: the id is owned (type invariant); the addresses are valid sockaddrs that
        // rdma_resolve_addr copies before returning.
        to_result(unsafe {
            bindings::rdma_resolve_addr(self.as_ptr(), src, dst.as_sockaddr(), timeout_ms as usize)
        })
    }

    /// Starts route resolution; the result arrives as a CM event.
    pub(crate) fn resolve_route(&self, timeout_ms: u32) -> Result {
        // SAFETY: the id is owned; the CM refuses (an error) an id whose address is not
        // resolved.
        to_result(unsafe { bindings::rdma_resolve_route(self.as_ptr(), timeout_ms as usize) })
    }

    /// Sets the IP type of service of the connection.
    pub(crate) fn set_tos(&self, tos: u8) {
        // SAFETY: the id is owned.
        unsafe { bindings::rdma_set_service_type(self.as_ptr(), tos.into()) };
    }

    /// The device the id is bound to, once its address is resolved.
    pub(crate) fn device(&self) -> Option<&Device> {
        id_device(self.id)
    }

    /// The device port the id is bound to, once its address is resolved.
    pub(crate) fn port_num(&self) -> u32 {
        // SAFETY: the id is owned.
        unsafe { (*self.as_ptr()).port_num }
    }

    /// Whether the id's port is up (see [`Device::port_active`]).
    pub(crate) fn port_active(&self) -> bool {
        self.device()
            .is_some_and(|d| d.port_active(self.port_num()))
    }

    /// Creates the RC QP of this id on `pd`, with `cq` as its CQ and `handler` for its
    /// completions and events. The id and its QP then travel together as a [`CmQp`]; on
    /// failure the id comes back without a QP.
    pub(crate) fn create_qp<Q: QpHandler>(
        self,
        pd: &Arc<Pd>,
        cq: Cq,
        caps: &QpCaps,
        handler: Q,
    ) -> core::result::Result<CmQp<C, Q>, (Self, Error)> {
        if self.device() != Some(pd.device()) {
            return Err((self, EINVAL));
        }
        // SAFETY: an owned id without a QP (type invariant), bound to the PD's device (checked
        // above); the `CmQp` destroys the QP before it drops the `Qp`.
        match unsafe { Qp::create(self.as_ptr(), pd, cq, caps, handler) } {
            // INVARIANT (`CmQp`): the QP of `id` is `qp`.
            Ok(qp) => Ok(CmQp {
                qp: ManuallyDrop::new(qp),
                id: ManuallyDrop::new(self),
            }),
            Err(e) => Err((self, e)),
        }
    }

    /// Detaches the id from its handler: later events find a null context and are ignored, and
    /// the handler is dropped. The id is kept only to be destroyed.
    pub(crate) fn detach(self) -> ParkedId {
        let this = ManuallyDrop::new(self);
        // SAFETY: owned id; the handler lock orders this write with running handlers, so none
        // uses the old context once it is released.
        unsafe {
            bindings::rdma_lock_handler(this.as_ptr());
            (*this.as_ptr()).context = core::ptr::null_mut();
            bindings::rdma_unlock_handler(this.as_ptr());
        }
        // SAFETY: `this` is not dropped (`ManuallyDrop`) nor used after its handler is read out;
        // no event reaches the handler any more (above).
        drop(unsafe { core::ptr::read(&this.handler) });
        // INVARIANT (`ParkedId`): the owned id, detached above.
        ParkedId(this.id)
    }
}

impl<C: CmHandler> Drop for CmId<C> {
    fn drop(&mut self) {
        // SAFETY: owned id without a QP (type invariant). rdma_destroy_id waits for a running
        // event handler (a handler dropping its own id deadlocks, see `CmHandler`, but frees
        // nothing early). The handler box is dropped after this.
        unsafe { bindings::rdma_destroy_id(self.as_ptr()) };
    }
}

/// The device of a CM id.
fn id_device<'a>(id: NonNull<bindings::rdma_cm_id>) -> Option<&'a Device> {
    // SAFETY: an owned id (callers' invariants); `device` is set by address resolution, and the
    // device stays registered while an id is bound to it (its removal waits for the id's
    // destruction, and the id outlives `'a`, a borrow of its owner).
    unsafe { Device::from_raw((*id.as_ptr()).device) }
}

/// The CM event handler of every [`CmId<C>`].
///
/// # Safety
///
/// Called by the RDMA CM with an id created by [`CmId::new`] and one of its events.
unsafe extern "C" fn cm_handler<C: CmHandler>(
    id: *mut bindings::rdma_cm_id,
    ev: *mut bindings::rdma_cm_event,
) -> i32 {
    // SAFETY: the handler's arguments, valid for the call.
    let ev = unsafe { CmEvent::from_raw(id, ev) };
    let context = ev.context();
    if context.is_null() {
        // A parked id, detached from its handler: nothing to do. The device's removal
        // releases parked ids before the CM reports it to them.
        if ev.kind() == CmEventKind::DeviceRemoval {
            log_err!(
                Prefix::NONE,
                "a parked CM id is still on a device being removed"
            );
        }
        return 0;
    }
    // SAFETY: a non-null context is the id's boxed handler (`CmId` invariant), alive until
    // the id is destroyed or detached, neither of which can happen during this call.
    C::event(unsafe { &*(context as *const C) }, &ev);
    0
}

/// A CM id and the RC queue pair created on it: the QP is destroyed first, then what it owns,
/// then the id.
///
/// # Invariants
///
/// `qp` is the QP of `id`, created by [`CmId::create_qp`]; both are dropped only in `drop` or
/// [`CmQp::into_id`], after the QP is destroyed.
pub(crate) struct CmQp<C: CmHandler, Q: QpHandler> {
    qp: ManuallyDrop<KBox<Qp<Q>>>,
    id: ManuallyDrop<CmId<C>>,
}

impl<C: CmHandler, Q: QpHandler> core::ops::Deref for CmQp<C, Q> {
    type Target = Qp<Q>;

    fn deref(&self) -> &Qp<Q> {
        &self.qp
    }
}

impl<C: CmHandler, Q: QpHandler> CmQp<C, Q> {
    /// The CM id.
    pub(crate) fn id(&self) -> &CmId<C> {
        &self.id
    }

    /// Sends the connect request; the outcome arrives as a CM event.
    pub(crate) fn connect(&self, param: &ConnParam<'_>) -> Result {
        let conn = bindings::rdma_conn_param {
            private_data: param.private_data.as_ptr().cast(),
            private_data_len: param.private_data.len().try_into().map_err(|_| EINVAL)?,
            responder_resources: param.responder_resources,
            flow_control: 1,
            retry_count: param.retry_count,
            rnr_retry_count: param.rnr_retry_count,
            qp_num: self.qp.qp_num(),
            ..Default::default()
        };
        // SAFETY: the id is owned and has a QP (type invariant); the CM copies `conn` and its
        // private data.
        to_result(unsafe { bindings::rdma_connect(self.id.as_ptr(), &conn as *const _ as *mut _) })
    }

    /// Starts a disconnect (DREQ); harmless if not connected.
    pub(crate) fn disconnect(&self) {
        // SAFETY: the id is owned.
        unsafe { bindings::rdma_disconnect(self.id.as_ptr()) };
    }

    /// Drains the QP (unless it is drained) and destroys it: no completion of it is left to
    /// refer to it once it is gone.
    fn destroy_qp(&self) {
        self.qp.drain();
        // SAFETY: owned id with a QP (type invariant); rdma_destroy_qp clears `qp` under the
        // id's lock, so the CM never touches the destroyed QP.
        unsafe { bindings::rdma_destroy_qp(self.id.as_ptr()) };
    }

    /// Destroys the QP and what it owns, and gives back the id, which can be kept without it.
    pub(crate) fn into_id(self) -> CmId<C> {
        let mut this = ManuallyDrop::new(self);
        this.destroy_qp();
        // SAFETY: the QP is destroyed (above); `this` is not dropped nor used after its fields
        // are taken out.
        unsafe {
            ManuallyDrop::drop(&mut this.qp);
            ManuallyDrop::take(&mut this.id)
        }
    }
}

impl<C: CmHandler, Q: QpHandler> Drop for CmQp<C, Q> {
    fn drop(&mut self) {
        self.destroy_qp();
        // SAFETY: the QP is destroyed (above); neither field is used after this.
        unsafe {
            ManuallyDrop::drop(&mut self.qp);
            ManuallyDrop::drop(&mut self.id);
        }
    }
}

/// A CM id detached from its handler (see [`CmId::detach`]), destroyed on drop: a connected
/// one sends a DREQ then.
///
/// # Invariants
///
/// An owned id without a QP, whose context is null.
pub(crate) struct ParkedId(NonNull<bindings::rdma_cm_id>);

// SAFETY: as for `CmId`.
unsafe impl Send for ParkedId {}
// SAFETY: as above.
unsafe impl Sync for ParkedId {}

impl ParkedId {
    /// The device the id is bound to, if any.
    pub(crate) fn device(&self) -> Option<&Device> {
        id_device(self.0)
    }

    /// Whether the id's port is up (see [`Device::port_active`]).
    pub(crate) fn port_active(&self) -> bool {
        // SAFETY: an owned id (type invariant).
        let port = unsafe { (*self.0.as_ptr()).port_num };
        self.device().is_some_and(|d| d.port_active(port))
    }
}

impl Drop for ParkedId {
    fn drop(&mut self) {
        // SAFETY: owned id without a QP (type invariant); its handler returns at once.
        unsafe { bindings::rdma_destroy_id(self.0.as_ptr()) };
    }
}
