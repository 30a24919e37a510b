// SPDX-License-Identifier: GPL-2.0

//! debugfs directories and read-only text files (seq_file) whose content a Rust type writes.
//!
//! debugfs is optional: a directory or file that cannot be created is an error pointer, which
//! debugfs takes as a parent and ignores on removal, so failures are not errors here.
//!
//! C headers: [`include/linux/debugfs.h`](srctree/include/linux/debugfs.h),
//! [`include/linux/seq_file.h`](srctree/include/linux/seq_file.h).

use super::bindings;
use core::fmt;
use core::marker::PhantomData;
use kernel::prelude::*;
use kernel::str::CStr;
use kernel::sync::Arc;

/// A debugfs directory, removed (with what it holds, waiting for readers) on drop.
///
/// # Invariants
///
/// `dentry` is what `debugfs_create_dir` returned (a directory or an error pointer), owned
/// here; `parent`, the directory it is in, outlives it.
pub(crate) struct Dir {
    dentry: *mut bindings::dentry,
    _parent: Option<Arc<Dir>>,
}

// SAFETY: a dentry handle, only created and removed, from any thread.
unsafe impl Send for Dir {}
// SAFETY: `&Dir` gives no access to the dentry but to create entries in it.
unsafe impl Sync for Dir {}

impl Dir {
    /// Creates directory `name` in `parent` (none: the debugfs root).
    pub(crate) fn new(name: &CStr, parent: Option<&Arc<Dir>>) -> Result<Arc<Self>> {
        let parent_dentry = parent.map_or(core::ptr::null_mut(), |p| p.dentry);
        // SAFETY: a NUL-terminated name; the parent is a directory of ours (alive: held below)
        // or null; debugfs accepts error pointers as parents.
        let dentry = unsafe { bindings::rsrdma_debugfs_dir(name.as_char_ptr(), parent_dentry) };
        // INVARIANT: created above in `parent`, which the directory holds.
        Ok(Arc::new(
            Self {
                dentry,
                _parent: parent.cloned(),
            },
            GFP_KERNEL,
        )?)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        // SAFETY: owned (type invariant); an error pointer is ignored. The removal waits for
        // readers of the files in it.
        unsafe { bindings::rsrdma_debugfs_remove(self.dentry) };
    }
}

/// Where a [`Show`] writes its file's content.
pub(crate) struct SeqFile<'a> {
    m: *mut bindings::seq_file,
    _file: PhantomData<&'a ()>,
}

impl SeqFile<'_> {
    /// Writes one line (cut at 240 bytes).
    pub(crate) fn line(&mut self, args: fmt::Arguments<'_>) {
        let mut line = Line {
            buf: [0; Line::CAP + 2],
            len: 0,
        };
        // Formatting into a buffer that truncates cannot fail.
        let _ = fmt::write(&mut line, args);
        line.buf[line.len] = b'\n';
        // SAFETY: a seq_file being shown (valid for `'a`); the buffer is NUL terminated (zeroed
        // past the newline).
        unsafe { bindings::rsrdma_seq_puts(self.m, line.buf.as_ptr()) };
    }
}

/// A line being formatted, cut at [`Line::CAP`] bytes, only whole UTF-8 sequences.
struct Line {
    buf: [u8; Line::CAP + 2],
    len: usize,
}

impl Line {
    const CAP: usize = 240;
}

impl fmt::Write for Line {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for c in s.chars() {
            let mut tmp = [0u8; 4];
            let enc = c.encode_utf8(&mut tmp).as_bytes();
            if self.len + enc.len() > Self::CAP {
                break;
            }
            self.buf[self.len..self.len + enc.len()].copy_from_slice(enc);
            self.len += enc.len();
        }
        Ok(())
    }
}

/// The content of a read-only debugfs file, written when the file is read.
pub(crate) trait Show: Send + Sync + 'static {
    fn show(&self, out: &mut SeqFile<'_>);
}

/// What the file's private data points to: the glue's header, then the data.
#[repr(C)]
struct ShowFile<D> {
    header: bindings::rsrdma_show_file,
    data: D,
}

/// A directory holding one read-only file whose content `D` writes; both removed on drop
/// (waiting for readers) before `D` is dropped.
///
/// # Invariants
///
/// `_dir` holds the file, created with `_file`'s header as its private data; `_file` outlives
/// the file, whose removal (with `_dir`) comes first.
pub(crate) struct ShowDir<D: Show> {
    // Field order is drop order; both are kept only to be dropped.
    _dir: Arc<Dir>,
    _file: KBox<ShowFile<D>>,
}

impl<D: Show> ShowDir<D> {
    /// Creates directory `name` in `parent` with file `file_name`, whose content `data`
    /// writes.
    pub(crate) fn new(name: &CStr, parent: &Arc<Dir>, file_name: &CStr, data: D) -> Result<Self> {
        let dir = Dir::new(name, Some(parent))?;
        let file = KBox::new(
            ShowFile {
                header: bindings::rsrdma_show_file {
                    show: Some(show::<D>),
                },
                data,
            },
            GFP_KERNEL,
        )?;
        let header = &file.header as *const _ as *mut bindings::rsrdma_show_file;
        // SAFETY: a NUL-terminated name in a directory of ours (or an error pointer); the
        // private data is the boxed header, which outlives the file (removed with `dir`,
        // dropped first).
        unsafe { bindings::rsrdma_debugfs_show_file(file_name.as_char_ptr(), dir.dentry, header) };
        // INVARIANT: the file is in `dir`, with `file` as its data.
        Ok(Self {
            _dir: dir,
            _file: file,
        })
    }
}

/// The show function of every [`ShowDir<D>`]'s file.
///
/// # Safety
///
/// Called by the glue's seq_file with the header of a live `ShowFile<D>`; the file's removal
/// (before the `ShowFile` is freed) waits for running readers.
unsafe extern "C" fn show<D: Show>(
    m: *mut bindings::seq_file,
    file: *mut bindings::rsrdma_show_file,
) -> i32 {
    // SAFETY: per the contract; the header is the first field of a `repr(C)` `ShowFile<D>`.
    let file = unsafe { &*(file as *const ShowFile<D>) };
    file.data.show(&mut SeqFile {
        m,
        _file: PhantomData,
    });
    0
}
