// SPDX-License-Identifier: GPL-2.0

//! A character device (a misc device) whose file maps a [`ChunkSet`] into processes: the
//! registered area of a controller, `/dev/rsrdma/<controller>`.
//!
//! A process maps it shared, at a page-aligned offset, within its size, never executable. The
//! pages are inserted into the mapping at `mmap` (`vm_insert_page`), so they are ordinary pages
//! of the page allocator there: `get_user_pages` pins them for direct I/O, and a request's
//! bvecs then name them (see [`ChunkSet::locate`]). Every open file holds the set, and every
//! mapping its file, so the memory outlives the device (and its controller) until the last
//! unmap; the file operations' owner is the module, which stays loaded meanwhile.
//!
//! C headers: [`include/linux/miscdevice.h`](srctree/include/linux/miscdevice.h),
//! [`include/linux/mm.h`](srctree/include/linux/mm.h); the open, mmap and release entry
//! points are in `rust/glue.c`, which calls the functions of [`MapShared`] below.

use super::bindings;
use super::log::{log_warn, Prefix};
use super::mem::ChunkSet;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use kernel::ffi::c_int;
use kernel::prelude::*;
use kernel::str::{CStr, CString};
use kernel::sync::Arc;
use kernel::types::Opaque;

/// What every open file of a device holds: the memory it maps.
///
/// # Invariants
///
/// `file` comes first (`repr(C)`), with the functions below: the C glue passes a pointer to it
/// back to them, which is a pointer to the `MapShared` of an [`Arc`] a file holds.
#[repr(C)]
struct MapShared {
    file: bindings::rsrdma_map_file,
    mem: Arc<ChunkSet>,
    /// Successful `mmap` calls.
    maps: AtomicU64,
}

// SAFETY: the C part is two function pointers, set once; the rest is `Send`.
unsafe impl Send for MapShared {}
// SAFETY: as above; the rest is `Sync`.
unsafe impl Sync for MapShared {}

impl MapShared {
    /// Maps `len` bytes of the set from byte `offset` into `vma`.
    fn map(&self, vma: *mut bindings::vm_area_struct) -> Result {
        let (mut start, mut pgoff, mut len, mut shared, mut exec) = (0, 0u64, 0u64, false, false);
        // SAFETY: the VMA `mmap` was called with, alive for the call; it only reads it.
        unsafe {
            bindings::rsrdma_vma_info(
                vma,
                &mut start,
                &mut pgoff,
                &mut len,
                &mut shared,
                &mut exec,
            )
        };
        let size = self.mem.len();
        // Past the end if it does not even fit in 64 bits.
        let offset = pgoff.saturating_mul(kernel::page::PAGE_SIZE as u64);
        if !shared {
            log_warn!(Prefix::NONE, "area: mmap refused: only MAP_SHARED mappings");
            return Err(EINVAL);
        }
        if exec {
            log_warn!(Prefix::NONE, "area: mmap refused: PROT_EXEC");
            return Err(EPERM);
        }
        if offset.checked_add(len).map_or(true, |end| end > size) {
            log_warn!(
                Prefix::NONE,
                "area: mmap refused: {} bytes at offset {} exceed its {} bytes",
                len,
                offset,
                size
            );
            return Err(EINVAL);
        }
        // Within the set, so within what `spans` takes.
        let len = u32::try_from(len).map_err(|_| EINVAL)?;
        // SAFETY: as above; `mmap` holds the mm's lock for writing, as changing flags needs.
        unsafe { bindings::rsrdma_vma_prepare(vma) };
        let mut uaddr = start;
        for (chunk, off, n) in self.mem.spans(offset, len)? {
            let va = self.mem.ptr(chunk, off).ok_or(EINVAL)?;
            // The VMA is being set up by `mmap` (its lock held); the set outlives the mapping,
            // which holds the file, which holds the set.
            // SAFETY: `n` bytes from `va` are whole pages of one chunk of the set (page
            // multiples: `vm_pgoff` counts pages, VMAs are page-aligned); see above.
            let ret = unsafe { bindings::rsrdma_vma_insert(vma, uaddr, va.cast(), n as _) };
            if ret != 0 {
                return Err(Error::from_errno(ret));
            }
            uaddr += n;
        }
        self.maps.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// `rsrdma_map_file::put`: a file is released.
///
/// # Safety
///
/// `f` is what [`get`] returned for the file, once.
unsafe extern "C" fn put(f: *mut bindings::rsrdma_map_file) {
    // SAFETY: from `Arc::into_raw` in `get` (per the contract), given back once; `file` is the
    // first field of `MapShared` (type invariant).
    drop(unsafe { Arc::from_raw(f as *const MapShared) });
}

/// `rsrdma_map_file::mmap`.
///
/// # Safety
///
/// `f` is what [`get`] returned for a file not released yet; `vma` the VMA that file's
/// `mmap` sets up, with the mm's lock held for writing.
unsafe extern "C" fn mmap(
    f: *mut bindings::rsrdma_map_file,
    vma: *mut bindings::vm_area_struct,
) -> c_int {
    // SAFETY: the file's reference keeps the `MapShared` alive (per the contract).
    let shared = unsafe { &*(f as *const MapShared) };
    match shared.map(vma) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// `rsrdma_map_dev::get`: a file of the device is opened.
///
/// # Safety
///
/// `dev` is the `dev` field of a registered [`MapDevice`]: `misc_open` holds `misc_mtx`, which
/// its deregistration (before it is dropped) takes too, so no open runs once that returned.
unsafe extern "C" fn get(dev: *mut bindings::rsrdma_map_dev) -> *mut bindings::rsrdma_map_file {
    // SAFETY: per the contract (`Opaque` is transparent over the C struct).
    let this = unsafe {
        &*kernel::container_of!(
            dev.cast::<Opaque<bindings::rsrdma_map_dev>>(),
            MapDevice,
            dev
        )
    };
    Arc::into_raw(this.shared.clone()) as *mut bindings::rsrdma_map_file
}

/// A registered character device whose files map a chunk set; deregistered on drop (open
/// files and mappings keep the memory).
///
/// # Invariants
///
/// `dev` is registered with `misc_register` from [`MapDevice::new`] until drop if `registered`
/// is set; `name` and `nodename`, which it points to, live as long.
#[pin_data(PinnedDrop)]
pub(crate) struct MapDevice {
    #[pin]
    dev: Opaque<bindings::rsrdma_map_dev>,
    shared: Arc<MapShared>,
    name: CString,
    nodename: CString,
    registered: AtomicBool,
}

// SAFETY: the C part is only touched by the misc core (under its mutex) and by drop.
unsafe impl Send for MapDevice {}
// SAFETY: `&MapDevice` gives only atomic and `Arc` access.
unsafe impl Sync for MapDevice {}

impl MapDevice {
    /// Registers `/dev/<dir>/<name>` (device name `<dir>-<name>`), whose files map `mem`.
    pub(crate) fn new(dir: &str, name: &str, mem: Arc<ChunkSet>) -> Result<Pin<KBox<Self>>> {
        let shared = Arc::new(
            // INVARIANT: `file` first, with this module's functions.
            MapShared {
                file: bindings::rsrdma_map_file {
                    put: Some(put),
                    mmap: Some(mmap),
                },
                mem,
                maps: AtomicU64::new(0),
            },
            GFP_KERNEL,
        )?;
        let name_c = CString::try_from_fmt(format_args!("{dir}-{name}"))?;
        let nodename = CString::try_from_fmt(format_args!("{dir}/{name}"))?;
        let this = KBox::pin_init(
            pin_init!(Self {
                dev <- Opaque::ffi_init(|p: *mut bindings::rsrdma_map_dev| {
                    // SAFETY: `p` is valid for writes (being initialized); all-zero is a valid
                    // `miscdevice`; `get` is set before registration.
                    unsafe {
                        p.write(core::mem::zeroed());
                        (*p).get = Some(get);
                    }
                }),
                shared,
                name: name_c,
                nodename,
                registered: AtomicBool::new(false),
            }),
            GFP_KERNEL,
        )?;
        // SAFETY: `dev` is pinned, initialized and not registered; the names live as long as
        // the registration (type invariant), which drop ends.
        let ret = unsafe {
            bindings::rsrdma_map_dev_register(
                this.dev.get(),
                this.name.as_char_ptr(),
                this.nodename.as_char_ptr(),
            )
        };
        if ret != 0 {
            // Dropped unregistered.
            return Err(Error::from_errno(ret));
        }
        // INVARIANT: registered above.
        this.registered.store(true, Ordering::Release);
        Ok(this)
    }

    /// The number of successful mappings of the device's files.
    pub(crate) fn mappings(&self) -> u64 {
        self.shared.maps.load(Ordering::Relaxed)
    }

    /// The device's path below `/dev`.
    pub(crate) fn path(&self) -> &CStr {
        &self.nodename
    }
}

#[pinned_drop]
impl PinnedDrop for MapDevice {
    fn drop(self: Pin<&mut Self>) {
        if self.registered.load(Ordering::Acquire) {
            // SAFETY: registered (type invariant); once this returns no open of it runs or
            // starts.
            unsafe { bindings::rsrdma_map_dev_deregister(self.dev.get()) };
        }
    }
}
