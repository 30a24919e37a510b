// SPDX-License-Identifier: GPL-2.0

//! Synchronization pieces 6.12's kernel crate lacks: an interrupt-safe spinlock, a cell for
//! the resources of the current connection, a completion with a timed wait, and RCU read-side
//! critical sections.

use crate::bindings;
use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicU8, Ordering};
use kernel::init::PinInit;
use kernel::prelude::*;
use kernel::str::CStr;
use kernel::sync::LockClassKey;
use kernel::types::Opaque;

/// A spinlock taken with interrupts disabled, for state shared between process context and
/// completion (softirq or hardirq) context.
#[pin_data]
pub(crate) struct IrqLock<T> {
    #[pin]
    lock: Opaque<bindings::spinlock_t>,
    data: UnsafeCell<T>,
}

// SAFETY: the lock serializes all access to `data`.
unsafe impl<T: Send> Send for IrqLock<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for IrqLock<T> {}

/// Creates an [`IrqLock`] holding `$data`, in a lockdep class of its own (one per place this
/// is written) named `$name`.
macro_rules! new_irq_lock {
    ($data:expr, $name:literal $(,)?) => {
        $crate::sync::IrqLock::new($data, kernel::c_str!($name), kernel::static_lock_class!())
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

    pub(crate) fn lock(&self) -> IrqGuard<'_, T> {
        // SAFETY: the lock was initialized by `new`.
        let flags = unsafe { bindings::rsrdma_spin_lock_irqsave(self.lock.get()) };
        IrqGuard {
            lock: self,
            flags,
            _not_send: core::marker::PhantomData,
        }
    }
}

/// Holds an [`IrqLock`]; released on drop, on the CPU that took it (interrupts stay off in
/// between), so it is neither `Send` nor `Sync`.
pub(crate) struct IrqGuard<'a, T> {
    lock: &'a IrqLock<T>,
    flags: kernel::ffi::c_ulong,
    _not_send: core::marker::PhantomData<*mut ()>,
}

impl<T> Deref for IrqGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the lock is held.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> DerefMut for IrqGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the lock is held.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T> Drop for IrqGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: taken in `IrqLock::lock` with these flags.
        unsafe { bindings::rsrdma_spin_unlock_irqrestore(self.lock.lock.get(), self.flags) };
    }
}

/// The resources of a queue's (or controller's) current connection.
///
/// The I/O path reads them without a lock. They are installed and removed only by the
/// controller's set-up and teardown work, which first makes sure nothing can use them: the
/// block layer queues are quiesced and the QPs drained, so neither `queue_rq` nor a completion
/// can run for that connection.
pub(crate) struct ConnCell<T> {
    inner: UnsafeCell<Option<T>>,
}

// SAFETY: shared access only hands out `&T` (T is Sync); replacement is exclusive by the
// contract of `replace`.
unsafe impl<T: Send + Sync> Sync for ConnCell<T> {}
// SAFETY: owning the cell owns the `T`.
unsafe impl<T: Send> Send for ConnCell<T> {}

impl<T> ConnCell<T> {
    pub(crate) const fn new() -> Self {
        Self {
            inner: UnsafeCell::new(None),
        }
    }

    /// The current connection, if any.
    ///
    /// # Safety
    ///
    /// No `replace` may run while the returned reference is used: the caller runs on the I/O
    /// path of a connection that is installed (see the type docs), or is the set-up/teardown
    /// work itself.
    pub(crate) unsafe fn get(&self) -> Option<&T> {
        // SAFETY: no concurrent writer per the contract.
        unsafe { (*self.inner.get()).as_ref() }
    }

    /// Installs or removes the connection, returning the previous one.
    ///
    /// # Safety
    ///
    /// Only the controller's set-up/teardown work may call this, when nothing can be using the
    /// current value (queues quiesced, QPs drained) and no reference from `get` is alive.
    pub(crate) unsafe fn replace(&self, value: Option<T>) -> Option<T> {
        // SAFETY: exclusive per the contract.
        unsafe { core::mem::replace(&mut *self.inner.get(), value) }
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

    /// Waits at most `timeout_ms`; false if it timed out.
    pub(crate) fn wait_ms(&self, timeout_ms: u32) -> bool {
        // SAFETY: initialized in `new`; sleeping is allowed in the callers (work items).
        unsafe { bindings::rsrdma_wait_for_completion_ms(self.inner.get(), timeout_ms) > 0 }
    }
}

/// An RCU read-side critical section, ended when the guard is dropped. It must end on the CPU
/// (task) that began it, so the guard is neither `Send` nor `Sync`; nothing in it may sleep.
pub(crate) struct RcuReadGuard {
    _not_send: core::marker::PhantomData<*mut ()>,
}

impl RcuReadGuard {
    pub(crate) fn new() -> Self {
        // SAFETY: no precondition; the section is ended by `drop`.
        unsafe { bindings::rsrdma_rcu_read_lock() };
        Self {
            _not_send: core::marker::PhantomData,
        }
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

/// A slot for one value that any of several contexts may fill or take, each operation at most
/// once at a time: whoever takes a value owns it, so of two contexts racing to release a
/// resource exactly one does (a request's mapped pages, released by its send completion or by
/// its completion, whichever comes first).
pub(crate) struct TakeCell<T> {
    state: AtomicU8,
    value: UnsafeCell<MaybeUninit<T>>,
}

const TAKE_EMPTY: u8 = 0;
const TAKE_BUSY: u8 = 1;
const TAKE_FULL: u8 = 2;

// SAFETY: `state` hands the value to one context at a time (see `put` and `take`), which may
// move it to another thread.
unsafe impl<T: Send> Send for TakeCell<T> {}
// SAFETY: as above.
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
        // publishes it below.
        unsafe { (*self.value.get()).write(value) };
        self.state.store(TAKE_FULL, Ordering::Release);
        Ok(())
    }

    /// Takes the value out, if there is one.
    pub(crate) fn take(&self) -> Option<T> {
        // Most takes find the slot empty (every request's end looks): no atomic exchange then.
        if self.state.load(Ordering::Relaxed) != TAKE_FULL {
            return None;
        }
        self.state
            .compare_exchange(TAKE_FULL, TAKE_BUSY, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        // SAFETY: the slot was full (written before the Release store that published it, which
        // the Acquire exchange saw) and the exchange made this context its only reader.
        let value = unsafe { (*self.value.get()).assume_init_read() };
        self.state.store(TAKE_EMPTY, Ordering::Release);
        Some(value)
    }
}

impl<T> Drop for TakeCell<T> {
    fn drop(&mut self) {
        drop(self.take());
    }
}
