// SPDX-License-Identifier: GPL-2.0

//! What 6.12's `KVec` lacks.

use kernel::prelude::*;

/// Removes element `i` of `v` and returns it, moving the last element into its place; `None`
/// if there is no element `i`.
pub(crate) fn swap_remove<T>(v: &mut KVec<T>, i: usize) -> Option<T> {
    if i >= v.len() {
        return None;
    }
    let last = v.len() - 1;
    v.as_mut_slice().swap(i, last);
    // SAFETY: the last element is read out as the length drops below it, so it is owned
    // exactly once, by the caller.
    unsafe {
        v.set_len(last);
        Some(core::ptr::read(v.as_ptr().add(last)))
    }
}
