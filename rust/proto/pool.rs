// SPDX-License-Identifier: GPL-2.0

//! Layout and slice allocator of the per-controller registered buffer pool.
//!
//! # Design
//!
//! Each controller owns one pool of DMA memory, registered once as a single
//! RDMA memory region, so the data of any command is described by one keyed
//! SGL with the pool's key and no per-I/O memory registration is needed.
//! The pool is one contiguous address range (the MR's IOVA space) made of
//! equal power-of-two chunks. On the CPU side every chunk is a separate
//! allocation, so a copy to or from a slice is split at chunk boundaries
//! with [`chunk_spans`].
//!
//! The range holds, in order:
//!
//! - The slot areas of all queues, packed: queue 0 (admin) first, then the
//!   I/O queues. A slot area is `depth` slots of `slot_size` bytes; slot `i`
//!   belongs to tag `i`: a command whose data fits in `slot_size` bytes uses
//!   its tag's slot, with no allocation and no lock ([`Region::slot`]).
//! - Padding up to a chunk boundary, then the admin queue's large area.
//! - Padding up to a chunk boundary, then the large area shared by all I/O
//!   queues.
//!
//! Large areas serve data larger than a slot through a [`Buddy`] allocator
//! (see [`super::buddy`]),
//! which the kernel side wraps in a spinlock. The I/O large area is shared
//! rather than per queue so that the pool does not grow with the number of
//! I/O queues by more than their slots: with the defaults a controller with
//! `n` I/O queues of depth 128 costs `n` MiB of slots plus 16 MiB.
//!
//! ```text
//! | admin slots | q1 slots | ... | qn slots | pad | admin large | pad | I/O large | pad |
//! ^0                                          ^chunk            ^chunk            ^chunk
//! ```
//!
//! Slot sizes are powers of two and every slot area starts at a multiple of
//! its slot size, so a slot no larger than a chunk never crosses a chunk
//! boundary. Buddy blocks are naturally aligned within the chunk-aligned
//! large areas, so blocks no larger than a chunk never cross one either;
//! larger blocks span several whole chunks, which the MR maps contiguously.
//! Queue depth is not fixed per connection: regions are sized for the
//! largest depth the controller may use.
//!
//! All offsets are from the start of the pool (IOVA = MR base + offset).

#[cfg(doc)]
use super::buddy::Buddy;
pub use super::buddy::Slice;
use super::buddy::{BUDDY_GRANULE, BUDDY_MAX_AREA};

/// Smallest chunk size.
pub const MIN_CHUNK_SIZE: u64 = 4096;
/// Largest pool size (1 GiB).
pub const MAX_POOL_SIZE: u64 = 1 << 30;
/// Largest number of queues, admin queue included.
pub const MAX_QUEUES: u16 = 129;
/// Largest queue depth.
pub const MAX_DEPTH: u32 = 4096;
/// Smallest slot size.
pub const MIN_SLOT_SIZE: u32 = 512;

/// Sizes of the region of one queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueParams {
    /// Number of slots: the queue depth (1..=[`MAX_DEPTH`]).
    pub depth: u32,
    /// Size of each slot: a power of two, at least [`MIN_SLOT_SIZE`], and no
    /// larger than `large_size` unless that is 0.
    pub slot_size: u32,
    /// Size of the large area: a multiple of [`BUDDY_GRANULE`], at most
    /// [`BUDDY_MAX_AREA`]; 0 for none.
    pub large_size: u64,
}

/// Parameters of a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolParams {
    /// Chunk size: a power of two, at least [`MIN_CHUNK_SIZE`].
    pub chunk_size: u64,
    /// Number of queues, admin queue included (1..=[`MAX_QUEUES`]).
    pub nr_queues: u16,
    /// Slots and large area of the admin queue.
    pub admin: QueueParams,
    /// Slots of each I/O queue, and the size of the large area they share;
    /// validated even if there is no I/O queue.
    pub io: QueueParams,
}

/// Why pool parameters were refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutError {
    /// Bad chunk size.
    ChunkSize,
    /// Bad number of queues.
    NrQueues,
    /// Bad queue depth.
    Depth,
    /// Bad slot size.
    SlotSize,
    /// Bad large area size.
    LargeSize,
    /// The pool would be larger than [`MAX_POOL_SIZE`].
    TooLarge,
}

impl LayoutError {
    /// Describes the error, for the log.
    pub fn msg(&self) -> &'static str {
        match self {
            LayoutError::ChunkSize => "chunk size must be a power of two of at least 4 KiB",
            LayoutError::NrQueues => "number of queues must be 1..=129",
            LayoutError::Depth => "queue depth must be 1..=4096",
            LayoutError::SlotSize => {
                "slot size must be a power of two of at least 512 bytes, and no larger than the large area"
            }
            LayoutError::LargeSize => "large area size must be a multiple of 4 KiB, at most 16 MiB",
            LayoutError::TooLarge => "buffer pool larger than 1 GiB",
        }
    }
}

/// Rounds `v` up to a multiple of `align`, a power of two.
fn align_up(v: u64, align: u64) -> Option<u64> {
    let mask = align.checked_sub(1)?;
    Some(v.checked_add(mask)? & !mask)
}

/// Checks one kind of queue and returns the bytes of one slot area.
fn check_queue(p: &QueueParams) -> Result<u64, LayoutError> {
    if p.depth == 0 || p.depth > MAX_DEPTH {
        return Err(LayoutError::Depth);
    }
    if p.large_size % BUDDY_GRANULE != 0 || p.large_size > BUDDY_MAX_AREA {
        return Err(LayoutError::LargeSize);
    }
    if !p.slot_size.is_power_of_two()
        || p.slot_size < MIN_SLOT_SIZE
        || (p.large_size != 0 && u64::from(p.slot_size) > p.large_size)
    {
        return Err(LayoutError::SlotSize);
    }
    u64::from(p.depth)
        .checked_mul(u64::from(p.slot_size))
        .ok_or(LayoutError::TooLarge)
}

/// The validated layout of a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolLayout {
    chunk_size: u64,
    nr_queues: u16,
    admin: QueueParams,
    io: QueueParams,
    /// Offset of the first I/O slot area.
    io_slots_offset: u64,
    /// Bytes of one I/O slot area.
    io_slots_size: u64,
    admin_large_offset: u64,
    io_large_offset: u64,
    total_size: u64,
    nr_chunks: usize,
}

impl PoolLayout {
    /// Validates `params` and lays the pool out.
    pub fn new(params: PoolParams) -> Result<Self, LayoutError> {
        let chunk_size = params.chunk_size;
        if !chunk_size.is_power_of_two() || !(MIN_CHUNK_SIZE..=MAX_POOL_SIZE).contains(&chunk_size)
        {
            return Err(LayoutError::ChunkSize);
        }
        if params.nr_queues == 0 || params.nr_queues > MAX_QUEUES {
            return Err(LayoutError::NrQueues);
        }
        let admin_slots = check_queue(&params.admin)?;
        let io_slots_size = check_queue(&params.io)?;
        let too_large = |v: Option<u64>| v.ok_or(LayoutError::TooLarge);
        let io_slots_offset = too_large(align_up(admin_slots, u64::from(params.io.slot_size)))?;
        let slots_end = too_large(
            io_slots_size
                .checked_mul(u64::from(params.nr_queues - 1))
                .and_then(|all| all.checked_add(io_slots_offset)),
        )?;
        let admin_large_offset = too_large(align_up(slots_end, chunk_size))?;
        let io_large_offset = too_large(
            admin_large_offset
                .checked_add(params.admin.large_size)
                .and_then(|end| align_up(end, chunk_size)),
        )?;
        let io_large = if params.nr_queues > 1 {
            params.io.large_size
        } else {
            0
        };
        let total_size = too_large(
            io_large_offset
                .checked_add(io_large)
                .and_then(|end| align_up(end, chunk_size)),
        )?;
        if total_size > MAX_POOL_SIZE {
            return Err(LayoutError::TooLarge);
        }
        let nr_chunks =
            usize::try_from(total_size / chunk_size).map_err(|_| LayoutError::TooLarge)?;
        Ok(Self {
            chunk_size,
            nr_queues: params.nr_queues,
            admin: params.admin,
            io: params.io,
            io_slots_offset,
            io_slots_size,
            admin_large_offset,
            io_large_offset,
            total_size,
            nr_chunks,
        })
    }

    /// Size of each chunk.
    pub fn chunk_size(&self) -> u64 {
        self.chunk_size
    }

    #[cfg(test)]
    /// Number of queues, admin queue included.
    pub fn nr_queues(&self) -> u16 {
        self.nr_queues
    }

    /// Size of the whole pool, a multiple of the chunk size.
    pub fn total_size(&self) -> u64 {
        self.total_size
    }

    /// Number of chunks in the pool.
    pub fn nr_chunks(&self) -> usize {
        self.nr_chunks
    }

    /// Returns the region of queue `qid` (0 for the admin queue), or `None`
    /// if there is no such queue. All I/O queues name the same large area.
    pub fn region(&self, qid: u16) -> Option<Region> {
        if qid >= self.nr_queues {
            return None;
        }
        match qid.checked_sub(1) {
            None => Some(Region {
                slots_offset: 0,
                depth: self.admin.depth,
                slot_size: self.admin.slot_size,
                large_offset: self.admin_large_offset,
                large_size: self.admin.large_size,
            }),
            Some(io_index) => Some(Region {
                slots_offset: self
                    .io_slots_size
                    .checked_mul(u64::from(io_index))?
                    .checked_add(self.io_slots_offset)?,
                depth: self.io.depth,
                slot_size: self.io.slot_size,
                large_offset: self.io_large_offset,
                large_size: self.io.large_size,
            }),
        }
    }
}

/// The part of the pool one queue uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// Offset of slot 0.
    pub slots_offset: u64,
    /// Number of slots.
    pub depth: u32,
    /// Size of each slot.
    pub slot_size: u32,
    /// Offset of the large area (chunk aligned); shared by the I/O queues.
    pub large_offset: u64,
    /// Size of the large area, 0 if none.
    pub large_size: u64,
}

impl Region {
    /// Returns the whole slot of `tag`, or `None` if `tag` is not below the
    /// depth.
    pub fn slot(&self, tag: u32) -> Option<Slice> {
        if tag >= self.depth {
            return None;
        }
        let offset = u64::from(tag)
            .checked_mul(u64::from(self.slot_size))?
            .checked_add(self.slots_offset)?;
        Some(Slice {
            offset,
            len: self.slot_size,
        })
    }
}

/// Where the `len` bytes at physical address `pos` lie in a set of chunks of `chunk_size`
/// bytes laid one after the other (chunk `i` at offset `i * chunk_size`): their offset in the
/// set, if they all lie in it, in one run of the set's offsets (they may cross from one chunk
/// into the next when the two are physically adjacent too). `by_first` holds each chunk's
/// first page frame (pages of `1 << page_shift` bytes) and index, sorted by frame.
pub fn locate(
    by_first: &[(u64, usize)],
    page_shift: u32,
    chunk_size: u64,
    mut pos: u64,
    len: u64,
) -> Option<u64> {
    let mut left = len;
    let mut start = None;
    let mut next = 0;
    while left > 0 {
        // The chunk whose first frame is the last at or below `pos`'s.
        let i = by_first.partition_point(|&(p, _)| p << page_shift <= pos);
        let &(first, chunk) = by_first.get(i.checked_sub(1)?)?;
        let in_chunk = pos - (first << page_shift);
        if in_chunk >= chunk_size {
            return None;
        }
        let at = (chunk as u64).checked_mul(chunk_size)? + in_chunk;
        if *start.get_or_insert(at) != at && at != next {
            return None;
        }
        let n = left.min(chunk_size - in_chunk);
        next = at + n;
        pos = pos.checked_add(n)?;
        left -= n;
    }
    start
}

/// Splits the slice `offset..offset + len` of a pool made of chunks of
/// `chunk_size` bytes into `(chunk index, offset in chunk, length)` spans,
/// in order. Yields nothing if `chunk_size` is 0 or the slice end overflows.
pub fn chunk_spans(
    offset: u64,
    len: u32,
    chunk_size: u64,
) -> impl Iterator<Item = (usize, usize, usize)> {
    let valid = chunk_size != 0 && offset.checked_add(u64::from(len)).is_some();
    ChunkSpans {
        offset,
        remaining: if valid { u64::from(len) } else { 0 },
        chunk_size,
    }
}

struct ChunkSpans {
    offset: u64,
    remaining: u64,
    chunk_size: u64,
}

impl Iterator for ChunkSpans {
    type Item = (usize, usize, usize);

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        let index = self.offset.checked_div(self.chunk_size)?;
        let within = self.offset.checked_rem(self.chunk_size)?;
        let len = self.remaining.min(self.chunk_size - within);
        let span = (
            usize::try_from(index).ok()?,
            usize::try_from(within).ok()?,
            usize::try_from(len).ok()?,
        );
        self.remaining -= len;
        self.offset = self.offset.checked_add(len)?;
        Some(span)
    }
}

/// The smallest page a pool mapping or MR page can be.
pub const MIN_MAP_PAGE: u64 = 4096;

/// Size of each DMA mapping of a pool made of `chunk_size` chunks (a power of
/// two) on a device that maps at most `max_mapping` bytes at once: the whole
/// chunk, or else the largest power of two within the limit, which divides the
/// chunk (a bounce-buffered device, such as one behind a forced swiotlb, maps
/// 256 KiB at most). `None` if the device cannot map even a 4 KiB page.
pub fn map_size(chunk_size: u64, max_mapping: u64) -> Option<u64> {
    if !chunk_size.is_power_of_two() || chunk_size < MIN_MAP_PAGE || max_mapping < MIN_MAP_PAGE {
        return None;
    }
    if max_mapping >= chunk_size {
        return Some(chunk_size);
    }
    Some(1 << (63 - max_mapping.leading_zeros()))
}

/// The page size of an MR over mappings of `map_size` bytes at the DMA
/// addresses `addrs`: the largest power of two in `page_size_cap` that divides
/// the mapping size and every address, or 4 KiB, which every device takes.
/// `None` if not even 4 KiB divides them.
pub fn mr_page_size(
    map_size: u64,
    page_size_cap: u64,
    addrs: impl Iterator<Item = u64>,
) -> Option<u64> {
    let bits = addrs.fold(map_size, |acc, a| acc | a);
    if bits == 0 {
        return None;
    }
    let mut page = 1u64 << bits.trailing_zeros();
    if page < MIN_MAP_PAGE {
        return None;
    }
    while page > MIN_MAP_PAGE && page_size_cap & page == 0 {
        page /= 2;
    }
    Some(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;

    fn realistic() -> PoolParams {
        PoolParams {
            chunk_size: 4 * MIB,
            nr_queues: 3,
            admin: QueueParams {
                depth: 32,
                slot_size: 16 * 1024,
                large_size: 4 * MIB,
            },
            io: QueueParams {
                depth: 128,
                slot_size: 16 * 1024,
                large_size: 8 * MIB,
            },
        }
    }

    #[test]
    fn realistic_layout() {
        let l = PoolLayout::new(realistic()).unwrap();
        // Slots: 512 KiB admin + 2 x 2 MiB I/O = 4.5 MiB, padded to 8 MiB;
        // admin large 4 MiB at 8 MiB; shared I/O large 8 MiB at 12 MiB.
        assert_eq!(l.total_size(), 20 * MIB);
        assert_eq!(l.nr_chunks(), 5);
        assert_eq!(l.chunk_size(), 4 * MIB);
        assert_eq!(l.nr_queues(), 3);
        let want = [
            (0, 32, 8 * MIB, 4 * MIB),
            (512 * KIB, 128, 12 * MIB, 8 * MIB),
            (512 * KIB + 2 * MIB, 128, 12 * MIB, 8 * MIB),
        ];
        for (qid, (slots_offset, depth, large_offset, large_size)) in (0..).zip(want) {
            let r = l.region(qid).unwrap();
            assert_eq!(
                r,
                Region {
                    slots_offset,
                    depth,
                    slot_size: 16 * 1024,
                    large_offset,
                    large_size,
                }
            );
            assert_eq!(r.large_offset % l.chunk_size(), 0);
        }
        assert_eq!(l.region(3), None);
        assert_eq!(l.region(u16::MAX), None);

        let r = l.region(1).unwrap();
        assert_eq!(
            r.slot(0),
            Some(Slice {
                offset: 512 * KIB,
                len: 16 * 1024
            })
        );
        assert_eq!(r.slot(127).unwrap().offset, 512 * KIB + 127 * 16 * KIB);
        assert_eq!(r.slot(128), None);
        assert_eq!(r.slot(u32::MAX), None);
        let last = l.region(2).unwrap();
        assert_eq!(last.large_offset + last.large_size, l.total_size());
    }

    #[test]
    fn layout_small_and_without_large_areas() {
        let q = QueueParams {
            depth: 8,
            slot_size: 512,
            large_size: 0,
        };
        let l = PoolLayout::new(PoolParams {
            chunk_size: 4096,
            nr_queues: 2,
            admin: q,
            io: q,
        })
        .unwrap();
        assert_eq!(l.total_size(), 8192);
        let r = l.region(1).unwrap();
        assert_eq!(
            (r.slots_offset, r.large_offset, r.large_size),
            (4096, 8192, 0)
        );

        // I/O slots larger than the admin slot area start slot aligned.
        let l = PoolLayout::new(PoolParams {
            chunk_size: 64 * KIB,
            nr_queues: 3,
            admin: QueueParams {
                depth: 1,
                slot_size: 4096,
                large_size: 12 * KIB,
            },
            io: QueueParams {
                depth: 2,
                slot_size: 128 * 1024,
                large_size: 0,
            },
        })
        .unwrap();
        let r1 = l.region(1).unwrap();
        let r2 = l.region(2).unwrap();
        assert_eq!(r1.slots_offset, 128 * KIB);
        assert_eq!(r2.slots_offset, 384 * KIB);
        // Slots end at 640 KiB (chunk aligned), admin large 12 KiB padded.
        assert_eq!(l.region(0).unwrap().large_offset, 640 * KIB);
        assert_eq!(l.total_size(), 704 * KIB);
        assert_eq!(l.nr_chunks(), 11);

        // No I/O queue: no I/O large area.
        let mut p = realistic();
        p.nr_queues = 1;
        assert_eq!(PoolLayout::new(p).unwrap().total_size(), 8 * MIB);
    }

    #[test]
    fn layout_errors() {
        let ok = realistic();
        let with = |f: &dyn Fn(&mut PoolParams)| {
            let mut p = ok;
            f(&mut p);
            PoolLayout::new(p).err()
        };
        use LayoutError::*;
        for chunk in [0, 1, 2048, 4095, 4097, 3 * MIB, MAX_POOL_SIZE * 2, u64::MAX] {
            assert_eq!(with(&|p| p.chunk_size = chunk), Some(ChunkSize), "{chunk}");
        }
        assert_eq!(with(&|p| p.nr_queues = 0), Some(NrQueues));
        assert_eq!(with(&|p| p.nr_queues = 130), Some(NrQueues));
        assert_eq!(with(&|p| p.admin.depth = 0), Some(Depth));
        assert_eq!(with(&|p| p.io.depth = 4097), Some(Depth));
        assert_eq!(with(&|p| p.io.slot_size = 256), Some(SlotSize));
        assert_eq!(with(&|p| p.io.slot_size = 3000), Some(SlotSize));
        assert_eq!(with(&|p| p.io.slot_size = 0), Some(SlotSize));
        assert_eq!(with(&|p| p.admin.slot_size = 8 << 20), Some(SlotSize));
        assert_eq!(with(&|p| p.io.large_size = 4097), Some(LargeSize));
        assert_eq!(with(&|p| p.io.large_size = 32 * MIB), Some(LargeSize));
        assert_eq!(with(&|p| p.io.large_size = u64::MAX), Some(LargeSize));
        // 128 I/O queues of 4096 x 16 KiB slots: 8 GiB.
        assert_eq!(
            with(&|p| {
                p.nr_queues = 129;
                p.io.depth = 4096;
            }),
            Some(TooLarge)
        );
        assert_eq!(
            with(&|p| {
                p.io.slot_size = 1 << 31;
                p.io.large_size = 0;
                p.io.depth = 4096;
            }),
            Some(TooLarge)
        );
        // Edges that are fine.
        assert_eq!(with(&|p| p.nr_queues = 1), None);
        assert_eq!(with(&|p| p.nr_queues = 129), None);
        assert_eq!(with(&|p| p.io.large_size = 0), None);
        assert_eq!(with(&|p| p.io.large_size = 20 * KIB), None);
        assert_eq!(with(&|p| p.io.large_size = 12 * KIB), Some(SlotSize));
        assert_eq!(
            with(&|p| {
                p.io.slot_size = 8 << 20;
                p.io.depth = 1;
                p.io.large_size = 0;
            }),
            None
        );
        assert_eq!(with(&|p| p.chunk_size = 4096), None);
        assert_eq!(with(&|p| p.chunk_size = MAX_POOL_SIZE), Some(TooLarge));
        for e in [ChunkSize, NrQueues, Depth, SlotSize, LargeSize, TooLarge] {
            assert!(!e.msg().is_empty());
        }
    }

    #[test]
    fn slots_do_not_cross_chunks_or_overlap() {
        for chunk_size in [64 * KIB, MIB, 4 * MIB] {
            let mut p = realistic();
            p.chunk_size = chunk_size;
            p.nr_queues = 5;
            let l = PoolLayout::new(p).unwrap();
            let mut end = 0;
            for qid in 0..l.nr_queues() {
                let r = l.region(qid).unwrap();
                for tag in 0..r.depth {
                    let s = r.slot(tag).unwrap();
                    assert_eq!(chunk_spans(s.offset, s.len, l.chunk_size()).count(), 1);
                    assert!(s.offset >= end, "slots overlap");
                    end = s.offset + u64::from(s.len);
                }
            }
            let admin = l.region(0).unwrap();
            let io = l.region(1).unwrap();
            assert!(end <= admin.large_offset);
            assert!(admin.large_offset + admin.large_size <= io.large_offset);
            assert!(io.large_offset + io.large_size <= l.total_size());
        }
    }

    #[test]
    fn locate_in_chunks() {
        // Chunks of 4 pages (16 KiB): chunk 0 at frame 100, chunk 1 at frame 8 and chunk 2
        // at frame 104 (physically right after chunk 0), sorted by frame.
        let by_first = [(8, 1), (100, 0), (104, 2)];
        let (shift, cs) = (12, 16 << 10);
        let at = |pfn: u64, off: u64| (pfn << shift) + off;
        assert_eq!(locate(&by_first, shift, cs, at(100, 0), 4096), Some(0));
        assert_eq!(
            locate(&by_first, shift, cs, at(9, 512), 100),
            Some(cs + 4096 + 512)
        );
        // The last byte of a chunk, and one past it into a frame of no chunk.
        assert_eq!(
            locate(&by_first, shift, cs, at(11, 4095), 1),
            Some(2 * cs - 1)
        );
        assert_eq!(locate(&by_first, shift, cs, at(11, 4095), 2), None);
        // Before the first chunk, after the last, between two.
        assert_eq!(locate(&by_first, shift, cs, at(7, 0), 1), None);
        assert_eq!(locate(&by_first, shift, cs, at(108, 0), 1), None);
        assert_eq!(locate(&by_first, shift, cs, at(50, 0), 1), None);
        // Chunk 0 runs into chunk 2 physically, but chunk 1 lies between them in the set.
        assert_eq!(locate(&by_first, shift, cs, at(103, 0), 8192), None);
        // Nothing to locate.
        assert_eq!(locate(&by_first, shift, cs, at(100, 0), 0), None);
        assert_eq!(locate(&[], shift, cs, at(100, 0), 1), None);
    }

    #[test]
    fn locate_across_adjacent_chunks() {
        // Chunks 0 and 1 physically adjacent and adjacent in the set too.
        let by_first = [(100, 0), (104, 1)];
        let (shift, cs) = (12, 16 << 10);
        assert_eq!(
            locate(&by_first, shift, cs, (102 << shift) + 100, 16 << 10),
            Some(8192 + 100)
        );
        assert_eq!(locate(&by_first, shift, cs, 100 << shift, 2 * cs), Some(0));
        assert_eq!(locate(&by_first, shift, cs, 100 << shift, 2 * cs + 1), None);
    }

    #[test]
    fn chunk_spans_split() {
        let spans: Vec<_> = chunk_spans(4096 - 100, 8192 + 200, 4096).collect();
        assert_eq!(
            spans,
            [(0, 3996, 100), (1, 0, 4096), (2, 0, 4096), (3, 0, 100)]
        );
        let spans: Vec<_> = chunk_spans(8192, 4096, 4096).collect();
        assert_eq!(spans, [(2, 0, 4096)]);
        let spans: Vec<_> = chunk_spans(5 * MIB, 1, 4 * MIB).collect();
        assert_eq!(spans, [(1, MIB as usize, 1)]);
        assert_eq!(chunk_spans(0, 0, 4096).count(), 0);
        assert_eq!(chunk_spans(0, 100, 0).count(), 0);
        assert_eq!(chunk_spans(u64::MAX, 2, 4096).count(), 0);
        let spans: Vec<_> = chunk_spans(u64::MAX - 1, 1, 1 << 63).collect();
        assert_eq!(spans, [(1, (1 << 63) - 2, 1)]);
        // Lengths always add up, spans are contiguous.
        for (offset, len) in [(0, u32::MAX), (123, 1 << 20), (4095, 2)] {
            let mut next = offset;
            let mut total = 0;
            for (index, within, n) in chunk_spans(offset, len, 4096) {
                assert_eq!(index as u64 * 4096 + within as u64, next);
                assert!(within + n <= 4096 && n > 0);
                next += n as u64;
                total += n as u64;
            }
            assert_eq!(total, u64::from(len));
        }
    }

    #[test]
    fn map_size_limits() {
        // No limit (or one above the chunk): one mapping per chunk.
        assert_eq!(map_size(MIB, u64::MAX), Some(MIB));
        assert_eq!(map_size(MIB, MIB), Some(MIB));
        assert_eq!(map_size(64 * KIB, 3 * MIB), Some(64 * KIB));
        // swiotlb's 256 KiB, and limits that are not powers of two.
        assert_eq!(map_size(MIB, 256 * KIB), Some(256 * KIB));
        assert_eq!(map_size(MIB, 300 * KIB), Some(256 * KIB));
        assert_eq!(map_size(MIB, 4097), Some(4096));
        // Nothing maps a page, or a chunk that is not a power of two.
        assert_eq!(map_size(MIB, 4095), None);
        assert_eq!(map_size(MIB, 0), None);
        assert_eq!(map_size(3 * MIB, u64::MAX), None);
        assert_eq!(map_size(2048, u64::MAX), None);
    }

    #[test]
    fn mr_page_size_alignment() {
        let all = u64::MAX;
        // Chunks at addresses aligned to their size: the chunk is one page.
        let aligned = [0, MIB, 7 * MIB];
        assert_eq!(mr_page_size(MIB, all, aligned.into_iter()), Some(MIB));
        // The device's page sizes: 4 KiB and 2 MiB only.
        let cap = 4096 | (2 * MIB);
        assert_eq!(mr_page_size(MIB, cap, aligned.into_iter()), Some(4096));
        assert_eq!(
            mr_page_size(4 * MIB, cap, [0, 4 * MIB].into_iter()),
            Some(2 * MIB)
        );
        // Bounce buffers are only page aligned: pages of 4 KiB, whatever the size.
        let bounced = [0x1234_5000, 0x1240_0000];
        assert_eq!(
            mr_page_size(256 * KIB, all, bounced.into_iter()),
            Some(4096)
        );
        assert_eq!(
            mr_page_size(256 * KIB, all, [0x1000_0000, 0x1004_2000].into_iter()),
            Some(8192)
        );
        // Not even page aligned, or nothing at all to go by.
        assert_eq!(mr_page_size(MIB, all, [0x800].into_iter()), None);
        assert_eq!(mr_page_size(0, all, [0].into_iter()), None);
        // 4 KiB is taken even if the device does not list it.
        assert_eq!(mr_page_size(MIB, 2 * MIB, aligned.into_iter()), Some(4096));
    }
}
