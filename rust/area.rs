// SPDX-License-Identifier: GPL-2.0

//! The controller's registered area: memory that processes map (`/dev/rsrdma/<controller>`)
//! and do direct I/O from, which then goes out without a copy.
//!
//! The area is allocated (zeroed) once, like the pool, and kept across reconnects, so a
//! process's mapping stays valid; the controllers of one subsystem share it (each path of a
//! multipath namespace can then send data from it where it is). Each controller registers it
//! with every new connection as a memory region of its own (a new RKEY each time) and
//! deregisters it, its RKEY invalidated, whenever the connection goes away. A request whose pages all lie in the area, in one run,
//! gets a keyed SGL at their place in it (see `request::map_command`); any other request takes
//! the pool. The memory outlives the controller while a process has it mapped.

use crate::pool::{map_chunks, MemReg};
use crate::wrap::log::{log_err, log_info, Prefix};
use crate::wrap::map_dev::MapDevice;
use crate::wrap::mem::ChunkSet;
use crate::wrap::rdma::Pd;
use kernel::prelude::*;
use kernel::sync::Arc;

/// The largest area a controller may have, in MiB.
pub(crate) const MAX_AREA_MIB: u64 = 1024;

/// Preferred chunk size (the page allocator's largest block on x86); halved down to
/// [`MIN_CHUNK`] when it has no chunks that large.
const PREFERRED_CHUNK: u64 = 4 << 20;
const MIN_CHUNK: u64 = 64 << 10;

/// The registered area of a subsystem's controllers.
pub(crate) struct Area {
    mem: Arc<ChunkSet>,
}

impl Area {
    /// Allocates an area of `mib` MiB, zeroed; `EINVAL` beyond [`MAX_AREA_MIB`].
    pub(crate) fn new(mib: u64) -> Result<Self> {
        if mib > MAX_AREA_MIB {
            log_err!(
                Prefix::NONE,
                "area_mib={}: a controller's registered area is at most {} MiB",
                mib,
                MAX_AREA_MIB
            );
            return Err(EINVAL);
        }
        let size = mib << 20;
        let mut chunk = PREFERRED_CHUNK.min(size);
        loop {
            match ChunkSet::new(size.div_ceil(chunk) as usize, chunk, -1) {
                Ok(mem) => {
                    return Ok(Self {
                        mem: Arc::new(mem, GFP_KERNEL)?,
                    })
                }
                Err(e) if e == ENOMEM && chunk > MIN_CHUNK => {
                    log_info!(
                        Prefix::NONE,
                        "area: no {} chunks of {} KiB free, trying chunks of {} KiB",
                        size.div_ceil(chunk),
                        chunk >> 10,
                        chunk >> 11
                    );
                    chunk /= 2;
                }
                Err(e) => {
                    log_err!(
                        Prefix::NONE,
                        "area: {} MiB in chunks of {} KiB: {:?}",
                        mib,
                        chunk >> 10,
                        e
                    );
                    return Err(e);
                }
            }
        }
    }

    /// The area's memory.
    pub(crate) fn mem(&self) -> &ChunkSet {
        &self.mem
    }

    /// The size of the area's chunks in bytes.
    pub(crate) fn chunk_size(&self) -> u64 {
        self.mem.chunk_size()
    }

    /// The area's size in bytes.
    pub(crate) fn size(&self) -> u64 {
        self.mem.len()
    }

    /// Maps the area for DMA on the device of `pd` and prepares a memory region over it, to be
    /// registered on the connection. `EINVAL` if the device cannot take it in one region (its
    /// chunks need more of the region's entries than the device has, say).
    pub(crate) fn map(&self, pd: &Arc<Pd>) -> Result<MemReg> {
        map_chunks(&self.mem, self.mem.len(), pd, "area")
    }

    /// Creates the character device processes map the area through, `/dev/rsrdma/<name>`.
    pub(crate) fn publish(&self, name: &str) -> Result<Pin<KBox<MapDevice>>> {
        MapDevice::new("rsrdma", name, self.mem.clone())
    }
}
