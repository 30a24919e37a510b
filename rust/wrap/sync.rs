// SPDX-License-Identifier: GPL-2.0

//! Synchronization pieces 6.12's kernel crate lacks: an interrupt-safe spinlock, RCU read-side
//! sections and a slot whose value readers use under RCU, a completion with a timed wait, a
//! cell that hands a value to exactly one of several contexts, and a module-wide published
//! value.
//!
//! C headers: [`include/linux/spinlock.h`], [`include/linux/rcupdate.h`],
//! [`include/linux/completion.h`].
//!
//! [`include/linux/spinlock.h`]: srctree/include/linux/spinlock.h
//! [`include/linux/rcupdate.h`]: srctree/include/linux/rcupdate.h
//! [`include/linux/completion.h`]: srctree/include/linux/completion.h

use super::bindings;
use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::mem::MaybeUninit;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicPtr, AtomicU8, Ordering};
use kernel::init::PinInit;
use kernel::prelude::*;
use kernel::str::CStr;
use kernel::sync::lock::{mutex::MutexBackend, Guard};
use kernel::sync::{Arc, LockClassKey, Mutex};
use kernel::types::{ForeignOwnable, Opaque};

/// A spinlock taken with interrupts disabled, for state shared between process context and
/// completion (softirq or hardirq) context.
///
/// # Invariants
///
/// `lock` is an initialized `spinlock_t`; `data` is only accessed while it is held.
#[pin_data]
pub(crate) struct IrqLock<T> {
    #[pin]
    lock: Opaque<bindings::spinlock_t>,
    data: UnsafeCell<T>,
}

// SAFETY: the lock serializes all access to `data` (type invariant), which may move between
// threads with it.
unsafe impl<T: Send> Send for IrqLock<T> {}
// SAFETY: as above: a shared `IrqLock` gives access to `data` only under the lock.
unsafe impl<T: Send> Sync for IrqLock<T> {}

/// Creates an [`IrqLock`] holding `$data`, in a lockdep class of its own (one per place this
/// is written) named `$name`.
macro_rules! new_irq_lock {
    ($data:expr, $name:literal $(,)?) => {
        $crate::wrap::sync::IrqLock::new($data, kernel::c_str!($name), kernel::static_lock_class!())
    };
}
pub(crate) use new_irq_lock;

impl<T> IrqLock<T> {
    /// Use [`new_irq_lock!`], which gives each place its own class.
    pub(crate) fn new(
        data: T,
        name: &'static CStr,
        key: &'static LockClassKey,
    ) -> impl PinInit<Self> {
        // `LockClassKey` is a transparent wrapper of the C key (`kernel::sync`), whose pointer
        // accessor is private to the kernel crate.
        let key = key as *const LockClassKey as *mut bindings::lock_class_key;
        pin_init!(Self {
            // SAFETY: initializes the spinlock in place; the name and the (static) key outlive
            // it, as lockdep requires.
            lock <- Opaque::ffi_init(move |p| unsafe {
                bindings::rsrdma_spin_lock_init(p, name.as_char_ptr(), key)
            }),
            data: UnsafeCell::new(data),
        })
    }

    /// Takes the lock, with interrupts disabled until the guard drops.
    pub(crate) fn lock(&self) -> IrqGuard<'_, T> {
        // SAFETY: the lock is initialized (type invariant).
        let flags = unsafe { bindings::rsrdma_spin_lock_irqsave(self.lock.get()) };
        // INVARIANT: the lock is held, with these saved flags.
        IrqGuard {
            lock: self,
            flags,
            _not_send: PhantomData,
        }
    }
}

/// Holds an [`IrqLock`]; released on drop, on the CPU that took it (interrupts stay off in
/// between), so it is neither `Send` nor `Sync`.
///
/// # Invariants
///
/// `lock` is held, taken with `flags` saved.
pub(crate) struct IrqGuard<'a, T> {
    lock: &'a IrqLock<T>,
    flags: kernel::ffi::c_ulong,
    _not_send: PhantomData<*mut ()>,
}

impl<T> Deref for IrqGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the lock is held (type invariant), so no other reference to the data exists.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> DerefMut for IrqGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference through the guard.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T> Drop for IrqGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: taken in `IrqLock::lock` with these flags (type invariant), on this CPU.
        unsafe { bindings::rsrdma_spin_unlock_irqrestore(self.lock.lock.get(), self.flags) };
    }
}

/// Proof that the holder runs inside an RCU read-side critical section for as long as a
/// reference to it lives: what an RCU-protected value may be read with (see [`RcuSlot::get`]).
/// Nothing may sleep while one is held (the kernel's atomic-sleep check reports it): with
/// non-preemptible RCU a sleep ends the section, and a value read in it could be freed.
///
/// # Invariants
///
/// A `&'a Rcu` exists only while an RCU read-side critical section is held for all of `'a`:
/// values are created only by [`RcuReadGuard`] (which holds one) and by the callbacks of the
/// wrapper tier that the kernel runs inside one (see [`Rcu::assume`]).
pub(crate) struct Rcu {
    _not_send: PhantomData<*mut ()>,
}

impl Rcu {
    /// The proof for a callback the kernel runs in an RCU read-side critical section.
    ///
    /// # Safety
    ///
    /// The caller is inside such a section, which lasts at least as long as the value is used,
    /// and keeps the value on its stack.
    pub(in crate::wrap) unsafe fn assume() -> Self {
        Self {
            _not_send: PhantomData,
        }
    }
}

/// An RCU read-side critical section, ended when the guard is dropped. It must end on the CPU
/// (task) that began it, so the guard is neither `Send` nor `Sync`; nothing in it may sleep.
pub(crate) struct RcuReadGuard(Rcu);

impl RcuReadGuard {
    pub(crate) fn new() -> Self {
        // SAFETY: no precondition; the section is ended by `drop`.
        unsafe { bindings::rsrdma_rcu_read_lock() };
        // INVARIANT: the section begun above lasts until the guard, which holds the `Rcu`,
        // drops.
        Self(Rcu {
            _not_send: PhantomData,
        })
    }
}

impl Deref for RcuReadGuard {
    type Target = Rcu;

    fn deref(&self) -> &Rcu {
        &self.0
    }
}

impl Drop for RcuReadGuard {
    fn drop(&mut self) {
        // SAFETY: begun in `new`, by this task (the guard cannot move to another).
        unsafe { bindings::rsrdma_rcu_read_unlock() };
    }
}

/// Waits for RCU readers: every read-side critical section either ends before this returns or
/// sees every store the caller made before the call. Sleeps.
pub(crate) fn synchronize_rcu() {
    // SAFETY: no precondition beyond process context, which sleeping callers are in.
    unsafe { bindings::synchronize_rcu() };
}

/// A slot for one value that readers use without a lock, inside RCU read-side critical
/// sections, while one writer at a time installs, uses and takes it out: the resources of a
/// connection, which the I/O path uses and the controller's set-up and teardown replace.
///
/// A value taken out is [`Retired`]: it is dropped (or handed back) only after an RCU grace
/// period, when no reader can hold it any more.
///
/// # Invariants
///
/// `ptr` is null or comes from `KBox::into_raw` of a value owned by the slot. It changes only
/// while `writer` is held; a value taken out is freed only after a grace period that follows
/// the change.
#[pin_data(PinnedDrop)]
pub(crate) struct RcuSlot<T> {
    ptr: AtomicPtr<T>,
    #[pin]
    writer: Mutex<()>,
}

// SAFETY: the slot owns its value (type invariant), which may move between threads with it.
unsafe impl<T: Send> Send for RcuSlot<T> {}
// SAFETY: readers on any thread get `&T` (hence `T: Sync`); the writer, on any thread, takes
// the value out (hence `T: Send`).
unsafe impl<T: Send + Sync> Sync for RcuSlot<T> {}

/// Creates an empty [`RcuSlot`] whose writer lock is in a lockdep class of its own named
/// `$name`.
macro_rules! new_rcu_slot {
    ($name:literal $(,)?) => {
        $crate::wrap::sync::RcuSlot::new(kernel::c_str!($name), kernel::static_lock_class!())
    };
}
pub(crate) use new_rcu_slot;

impl<T: Send + Sync> RcuSlot<T> {
    /// Use [`new_rcu_slot!`].
    pub(crate) fn new(name: &'static CStr, key: &'static LockClassKey) -> impl PinInit<Self> {
        pin_init!(Self {
            ptr: AtomicPtr::new(core::ptr::null_mut()),
            writer <- Mutex::new((), name, key),
        })
    }

    /// The value, if there is one; valid until the RCU read-side section ends.
    pub(crate) fn get<'a>(&'a self, _rcu: &'a Rcu) -> Option<&'a T> {
        // Acquire: pairs with the Release that installed the value.
        let p = self.ptr.load(Ordering::Acquire);
        // SAFETY: a non-null pointer is a value of the slot (type invariant); it is freed only
        // after a grace period that begins after it was taken out, and this section began
        // before: it outlives `'a`.
        unsafe { p.as_ref() }
    }

    /// Takes the writer's lock: installs, uses (sleeping) and takes out the value. Sleeps.
    pub(crate) fn write(&self) -> SlotWriter<'_, T> {
        SlotWriter {
            slot: self,
            _guard: self.writer.lock(),
        }
    }
}

#[pinned_drop]
impl<T> PinnedDrop for RcuSlot<T> {
    fn drop(self: Pin<&mut Self>) {
        let p = self.ptr.load(Ordering::Relaxed);
        if !p.is_null() {
            // SAFETY: owned by the slot (type invariant); no reader can hold it, as readers
            // borrow the slot, which is being dropped.
            drop(unsafe { KBox::from_raw(p) });
        }
    }
}

/// The writer of an [`RcuSlot`]: nothing else changes the slot while it lives.
pub(crate) struct SlotWriter<'a, T> {
    slot: &'a RcuSlot<T>,
    _guard: Guard<'a, (), MutexBackend>,
}

impl<T: Send + Sync> SlotWriter<'_, T> {
    /// The value, for as long as this writer is borrowed (and may sleep).
    pub(crate) fn get(&self) -> Option<&T> {
        let p = self.slot.ptr.load(Ordering::Relaxed);
        // SAFETY: a value of the slot (type invariant), which only this writer could take out,
        // and cannot while `&self` is borrowed.
        unsafe { p.as_ref() }
    }

    /// Installs `value`; gives it back if the slot has one.
    pub(crate) fn install(&mut self, value: KBox<T>) -> core::result::Result<(), KBox<T>> {
        if !self.slot.ptr.load(Ordering::Relaxed).is_null() {
            return Err(value);
        }
        // INVARIANT: a value the slot now owns, changed under the writer lock. Release: readers
        // that see the pointer see the value's initialization.
        self.slot
            .ptr
            .store(KBox::into_raw(value), Ordering::Release);
        Ok(())
    }

    /// Takes the value out, if there is one; readers may still use it until a grace period
    /// passes (see [`Retired`]).
    pub(crate) fn take(&mut self) -> Option<Retired<T>> {
        let p = self.slot.ptr.swap(core::ptr::null_mut(), Ordering::Relaxed);
        // SAFETY: a value the slot owned (type invariant), no longer reachable through it.
        // INVARIANT: `Retired` frees it only after a grace period.
        (!p.is_null()).then(|| Retired::new(unsafe { KBox::from_raw(p) }))
    }
}

/// A value taken out of an [`RcuSlot`], which RCU readers may still be using: it is handed back
/// ([`Retired::wait`]) or dropped only after a grace period that began after it was taken
/// out. Values retired together wait for one grace period: a wait for the last one taken out
/// covers the others. Waiting and dropping sleep: process context only.
///
/// # Invariants
///
/// `cookie` is the RCU state when the value was taken out (`get_state_synchronize_rcu`).
#[must_use = "dropping waits for an RCU grace period"]
pub(crate) struct Retired<T> {
    value: Option<KBox<T>>,
    cookie: kernel::ffi::c_ulong,
}

impl<T> Retired<T> {
    fn new(value: KBox<T>) -> Self {
        // SAFETY: no precondition.
        let cookie = unsafe { bindings::rsrdma_rcu_get_state() };
        // INVARIANT: the state after the value was taken out.
        Self {
            value: Some(value),
            cookie,
        }
    }

    /// Waits for the readers (unless a grace period passed since the value was taken out)
    /// and hands the value back. Sleeps.
    pub(crate) fn wait(mut self) -> KBox<T> {
        // SAFETY: a cookie from `get_state_synchronize_rcu` (type invariant); process context.
        unsafe { bindings::rsrdma_cond_synchronize_rcu(self.cookie) };
        // `Some` until here: `drop` is the only other taker.
        self.value.take().expect("a retired value is taken once")
    }
}

impl<T> Drop for Retired<T> {
    fn drop(&mut self) {
        if let Some(value) = self.value.take() {
            // SAFETY: as in `wait`.
            unsafe { bindings::rsrdma_cond_synchronize_rcu(self.cookie) };
            drop(value);
        }
    }
}

/// A `struct completion` with a timed wait.
#[pin_data]
pub(crate) struct Completion {
    #[pin]
    inner: Opaque<bindings::completion>,
}

// SAFETY: completions are designed to be signalled and waited on from any context.
unsafe impl Send for Completion {}
// SAFETY: as above.
unsafe impl Sync for Completion {}

impl Completion {
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            // SAFETY: `init_completion` initializes in place.
            inner <- Opaque::ffi_init(|p| unsafe { bindings::rsrdma_init_completion(p) }),
        })
    }

    /// Forgets a past `complete`, before starting an operation that will signal again.
    pub(crate) fn reinit(&self) {
        // SAFETY: initialized in `new`.
        unsafe { bindings::rsrdma_reinit_completion(self.inner.get()) };
    }

    pub(crate) fn complete(&self) {
        // SAFETY: initialized in `new`.
        unsafe { bindings::complete(self.inner.get()) };
    }

    /// Waits at most `timeout_ms`; false if it timed out. Sleeps.
    pub(crate) fn wait_ms(&self, timeout_ms: u32) -> bool {
        // SAFETY: initialized in `new`; sleeping callers are in process context.
        unsafe { bindings::rsrdma_wait_for_completion_ms(self.inner.get(), timeout_ms) > 0 }
    }
}

/// A slot for one value that any of several contexts may fill or take, each operation at most
/// once at a time: whoever takes a value owns it, so of two contexts racing to release a
/// resource exactly one does.
///
/// # Invariants
///
/// `value` is initialized exactly when `state` is `TAKE_FULL`; a context that moved `state`
/// away from `TAKE_EMPTY` or `TAKE_FULL` (to `TAKE_BUSY`) is the only one to touch `value`
/// until it stores the next state.
pub(crate) struct TakeCell<T> {
    state: AtomicU8,
    value: UnsafeCell<MaybeUninit<T>>,
}

const TAKE_EMPTY: u8 = 0;
const TAKE_BUSY: u8 = 1;
const TAKE_FULL: u8 = 2;

// SAFETY: `state` hands the value to one context at a time (type invariant), which may move it
// to another thread.
unsafe impl<T: Send> Send for TakeCell<T> {}
// SAFETY: as above; a shared cell only moves values in and out, never shares them.
unsafe impl<T: Send> Sync for TakeCell<T> {}

impl<T> TakeCell<T> {
    pub(crate) const fn new() -> Self {
        Self {
            state: AtomicU8::new(TAKE_EMPTY),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// Stores `value`; gives it back if the slot is not empty.
    pub(crate) fn put(&self, value: T) -> core::result::Result<(), T> {
        if self
            .state
            .compare_exchange(TAKE_EMPTY, TAKE_BUSY, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(value);
        }
        // SAFETY: the exchange made this context the only one to touch the value until it
        // publishes it below (type invariant).
        unsafe { (*self.value.get()).write(value) };
        // INVARIANT: initialized just above.
        self.state.store(TAKE_FULL, Ordering::Release);
        Ok(())
    }

    /// Whether the slot holds a value now (another context may take it meanwhile).
    pub(crate) fn is_full(&self) -> bool {
        self.state.load(Ordering::Acquire) != TAKE_EMPTY
    }

    /// Takes the value out, if there is one.
    pub(crate) fn take(&self) -> Option<T> {
        // Most takes find the slot empty: no atomic exchange then.
        if self.state.load(Ordering::Relaxed) != TAKE_FULL {
            return None;
        }
        self.state
            .compare_exchange(TAKE_FULL, TAKE_BUSY, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        // SAFETY: the slot was full (written before the Release store that published it, which
        // the Acquire exchange saw) and the exchange made this context its only reader.
        let value = unsafe { (*self.value.get()).assume_init_read() };
        // INVARIANT: the value was moved out above.
        self.state.store(TAKE_EMPTY, Ordering::Release);
        Some(value)
    }
}

impl<T> Drop for TakeCell<T> {
    fn drop(&mut self) {
        drop(self.take());
    }
}

/// A value published for the whole module, for C callbacks that get no context of their own
/// (the RDMA core's client `add`, say): readers get a counted reference.
///
/// # Invariants
///
/// `ptr` is null or comes from [`ForeignOwnable::into_foreign`] of an `Arc<T>` the global
/// owns; it is released ([`ForeignOwnable::from_foreign`]) only after a grace period that
/// follows its removal.
pub(crate) struct Global<T> {
    ptr: AtomicPtr<T>,
}

// SAFETY: the global holds an `Arc<T>`, which may be shared and dropped on any thread.
unsafe impl<T: Send + Sync> Sync for Global<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Send for Global<T> {}

impl<T: Send + Sync + 'static> Global<T> {
    pub(crate) const fn new() -> Self {
        Self {
            ptr: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    /// Publishes `value`; `EBUSY` if a value is published already.
    pub(crate) fn publish(&self, value: Arc<T>) -> Result {
        let p = value.into_foreign() as *mut T;
        match self.ptr.compare_exchange(
            core::ptr::null_mut(),
            p,
            Ordering::Release,
            Ordering::Relaxed,
        ) {
            // INVARIANT: the global owns the reference from here.
            Ok(_) => Ok(()),
            Err(_) => {
                // SAFETY: from `into_foreign` above, never published.
                drop(unsafe { <Arc<T> as ForeignOwnable>::from_foreign(p.cast()) });
                Err(EBUSY)
            }
        }
    }

    /// A reference to the published value, if there is one.
    pub(crate) fn get(&self) -> Option<Arc<T>> {
        let _rcu = RcuReadGuard::new();
        // Acquire: pairs with the publishing Release.
        let p = self.ptr.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: a reference the global owns (type invariant), released only after a grace
        // period, which cannot end within this read-side section.
        let borrowed = unsafe { <Arc<T> as ForeignOwnable>::borrow(p.cast()) };
        Some(borrowed.into())
    }

    /// Withdraws the published value and gives its reference back, once no reader of the
    /// global can be taking a reference from it. Sleeps.
    pub(crate) fn withdraw(&self) -> Option<Arc<T>> {
        let p = self.ptr.swap(core::ptr::null_mut(), Ordering::AcqRel);
        if p.is_null() {
            return None;
        }
        synchronize_rcu();
        // SAFETY: the reference the global owned (type invariant), unreachable through it now,
        // and every reader that could borrow it has ended.
        Some(unsafe { <Arc<T> as ForeignOwnable>::from_foreign(p.cast()) })
    }
}

/// Sleeps for at least `ms` milliseconds. Sleeps: process context only.
pub(crate) fn msleep(ms: u32) {
    // SAFETY: no precondition beyond process context, which sleeping callers are in.
    unsafe { bindings::msleep(ms) };
}
