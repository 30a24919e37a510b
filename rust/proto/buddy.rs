// SPDX-License-Identifier: GPL-2.0

//! The buddy allocator of the pool's large areas (see [`super::pool`]): blocks of a power of
//! two granules, naturally aligned, handed out and merged back in a fixed-size bitmap over
//! every order, with a short reservation that keeps the largest transfer waiting from being
//! starved by smaller ones.

/// Granule of the buddy allocator: the smallest block, in bytes.
pub const BUDDY_GRANULE: u64 = 4096;
/// Largest number of granules in one buddy area.
pub const BUDDY_MAX_LEAVES: usize = 4096;
/// Order of the largest block (`BUDDY_GRANULE << BUDDY_MAX_ORDER` bytes).
pub const BUDDY_MAX_ORDER: u32 = BUDDY_MAX_LEAVES.trailing_zeros();
/// Largest buddy area (16 MiB).
pub const BUDDY_MAX_AREA: u64 = BUDDY_GRANULE << BUDDY_MAX_ORDER;

/// A byte range of the pool (offsets from its start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    /// Offset from the start of the pool.
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
}

/// Number of bits of all orders: `BUDDY_MAX_LEAVES >> order` for each order.
const NODES: usize = 2 * BUDDY_MAX_LEAVES - 1;
const WORDS: usize = NODES.div_ceil(64);

/// Returns the bit of block `index` of `order`. The blocks of each order
/// are numbered from 0 and stored after those of the smaller orders.
fn node(order: u32, index: usize) -> usize {
    2 * BUDDY_MAX_LEAVES - ((2 * BUDDY_MAX_LEAVES) >> order) + index
}

/// A fixed-size bitmap over every block of every order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Bitmap([u64; WORDS]);

impl Bitmap {
    fn get(&self, bit: usize) -> bool {
        self.0
            .get(bit / 64)
            .is_some_and(|w| w & (1 << (bit % 64)) != 0)
    }

    fn set(&mut self, bit: usize) {
        if let Some(w) = self.0.get_mut(bit / 64) {
            *w |= 1 << (bit % 64);
        }
    }

    fn clear(&mut self, bit: usize) {
        if let Some(w) = self.0.get_mut(bit / 64) {
            *w &= !(1 << (bit % 64));
        }
    }

    /// Returns the first set bit in `start..end`.
    fn find(&self, start: usize, end: usize) -> Option<usize> {
        let mut bit = start;
        while bit < end {
            let word = self.0.get(bit / 64)? >> (bit % 64);
            if word != 0 {
                let found = bit + word.trailing_zeros() as usize;
                return (found < end).then_some(found);
            }
            bit = (bit / 64 + 1) * 64;
        }
        None
    }
}

/// Returns the order of the block that holds `len` bytes, or `None` if
/// `len` is 0 or larger than [`BUDDY_MAX_AREA`].
fn order_for(len: u32) -> Option<u32> {
    if len == 0 {
        return None;
    }
    let granules = u64::from(len).div_ceil(BUDDY_GRANULE);
    let order = granules.next_power_of_two().trailing_zeros();
    (order <= BUDDY_MAX_ORDER).then_some(order)
}

/// Buddy allocator of a large area.
///
/// Blocks are power-of-two multiples of [`BUDDY_GRANULE`], naturally aligned
/// within the area. The area may be any multiple of the granule up to
/// [`BUDDY_MAX_AREA`]: if it is not a power of two it starts as several
/// top-level blocks, largest first (12 MiB = 8 MiB + 4 MiB), which never
/// merge with each other.
///
/// State is two bitmaps with one bit per possible block of every order:
/// free blocks and allocated blocks. Allocation scans the free bitmap of
/// each order from the requested one up, at most `2 * leaves / 64` words in
/// all; free and merge are O(orders). The allocated bitmap lets [`free`]
/// refuse double frees and slices it did not hand out. The structure is
/// about 2 KiB and needs no heap.
///
/// A transfer that finds no block large enough reserves its block size for
/// [`RESERVATION_MS`], renewed by each of its retries: until a block that
/// large is allocated, a smaller transfer is refused any block whose taking
/// would leave none that large free. Without it, a large transfer waiting
/// for a whole aligned block could wait as long as smaller ones kept
/// refilling each hole that opens in it.
///
/// [`free`]: Buddy::free
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buddy {
    free: Bitmap,
    allocated: Bitmap,
    area_offset: u64,
    nr_leaves: usize,
    in_use: u64,
    high_water: u64,
    reserved: Option<Reservation>,
}

/// How long a reservation of [`Buddy`] outlives the last failed allocation
/// that made or renewed it: a waiting transfer is retried every few
/// milliseconds, and one that is no longer retried (cancelled, failed over)
/// must not hold the area back.
pub const RESERVATION_MS: u64 = 100;

/// The block order a waiting transfer needs, and until when it is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Reservation {
    order: u32,
    until_ms: u64,
}

impl Buddy {
    /// Creates the allocator of the area `area_offset..area_offset +
    /// area_size`, all free. `None` if `area_size` is not a multiple of
    /// [`BUDDY_GRANULE`], is larger than [`BUDDY_MAX_AREA`], or the area end
    /// overflows. An empty area is valid and allocates nothing.
    pub fn new(area_offset: u64, area_size: u64) -> Option<Buddy> {
        if area_size % BUDDY_GRANULE != 0 || area_size > BUDDY_MAX_AREA {
            return None;
        }
        area_offset.checked_add(area_size)?;
        let nr_leaves = usize::try_from(area_size / BUDDY_GRANULE).ok()?;
        let mut buddy = Buddy {
            free: Bitmap([0; WORDS]),
            allocated: Bitmap([0; WORDS]),
            area_offset,
            nr_leaves,
            in_use: 0,
            high_water: 0,
            reserved: None,
        };
        // Top-level blocks, largest first: each starts at a multiple of its
        // size since all blocks before it are larger powers of two.
        let mut leaf = 0;
        for order in (0..=BUDDY_MAX_ORDER).rev() {
            let size = 1 << order;
            if nr_leaves & size != 0 {
                buddy.free.set(node(order, leaf >> order));
                leaf += size;
            }
        }
        Some(buddy)
    }

    #[cfg(test)]
    /// Size of the block that [`Buddy::alloc`] uses for `len` bytes: `len`
    /// rounded up to a power-of-two number of granules. `None` if `len` is
    /// 0 or no block can be that large. After everything is freed, an area
    /// of at least this size always satisfies an allocation of `len`.
    pub fn block_size(len: u32) -> Option<u64> {
        order_for(len).map(|order| BUDDY_GRANULE << order)
    }

    /// Returns the index of the first free block of `order`.
    fn first_free(&self, order: u32) -> Option<usize> {
        let base = node(order, 0);
        let found = self.free.find(base, base + (self.nr_leaves >> order))?;
        Some(found - base)
    }

    /// Allocates a block for `len` bytes at time `now_ms` (milliseconds, of
    /// any monotonic clock) and returns its start with length `len`, or
    /// `None` if `len` is 0, no free block is large enough, or the block
    /// would break the last one a waiting larger transfer can use (see
    /// [`Buddy`]).
    pub fn alloc(&mut self, len: u32, now_ms: u64) -> Option<Slice> {
        let order = order_for(len)?;
        let reserved = match self.reserved {
            Some(r) if now_ms < r.until_ms => Some(r.order),
            _ => None,
        };
        let Some((cur, index)) =
            (order..=BUDDY_MAX_ORDER).find_map(|o| Some((o, self.first_free(o)?)))
        else {
            self.reserve(order, now_ms);
            return None;
        };
        let slice = self.take(order, cur, index, len);
        match reserved {
            Some(r) if order < r => {
                if !(r..=BUDDY_MAX_ORDER).any(|o| self.first_free(o).is_some()) {
                    // Undone exactly: the block merges back as it was split.
                    self.free(slice);
                    return None;
                }
            }
            _ => self.reserved = None,
        }
        self.high_water = self.high_water.max(self.in_use);
        Some(slice)
    }

    /// Makes or renews the reservation of a transfer of `order` that found
    /// no block; the largest such transfer is served first.
    fn reserve(&mut self, order: u32, now_ms: u64) {
        // Only for a block the area can hold at all (its largest top-level
        // block); a larger one would hold everything else back for nothing.
        if self.nr_leaves >> order == 0 {
            return;
        }
        let until_ms = now_ms.saturating_add(RESERVATION_MS);
        self.reserved = match self.reserved {
            Some(r) if now_ms < r.until_ms && r.order > order => Some(r),
            _ => Some(Reservation { order, until_ms }),
        };
    }

    /// Allocates free block `index` of order `cur` for `len` bytes, split
    /// down to `order`.
    fn take(&mut self, order: u32, mut cur: u32, mut index: usize, len: u32) -> Slice {
        self.free.clear(node(cur, index));
        // Split down to the requested order, freeing the upper halves.
        while cur > order {
            cur -= 1;
            index *= 2;
            self.free.set(node(cur, index + 1));
        }
        self.allocated.set(node(order, index));
        self.in_use = self.in_use.saturating_add(BUDDY_GRANULE << order);
        let leaf = (index as u64) << order;
        Slice {
            offset: self.area_offset + leaf * BUDDY_GRANULE,
            len,
        }
    }

    /// Frees a slice returned by [`Buddy::alloc`] (the same offset, and a
    /// length that needs the same block size) and merges it with its free
    /// buddies. Returns `false`, changing nothing, for a slice this
    /// allocator did not hand out or has already freed.
    pub fn free(&mut self, slice: Slice) -> bool {
        let Some(order) = order_for(slice.len) else {
            return false;
        };
        let Some(rel) = slice.offset.checked_sub(self.area_offset) else {
            return false;
        };
        if rel % BUDDY_GRANULE != 0 {
            return false;
        }
        let Ok(leaf) = usize::try_from(rel / BUDDY_GRANULE) else {
            return false;
        };
        if leaf >= self.nr_leaves || leaf % (1 << order) != 0 {
            return false;
        }
        let mut index = leaf >> order;
        if !self.allocated.get(node(order, index)) {
            return false;
        }
        self.allocated.clear(node(order, index));
        self.in_use = self.in_use.saturating_sub(BUDDY_GRANULE << order);
        // A buddy is only ever free if it lies wholly in the area, so
        // merging never leaves the area nor joins two top-level blocks.
        let mut cur = order;
        while cur < BUDDY_MAX_ORDER && self.free.get(node(cur, index ^ 1)) {
            self.free.clear(node(cur, index ^ 1));
            index /= 2;
            cur += 1;
        }
        self.free.set(node(cur, index));
        true
    }

    /// Bytes allocated now, counting whole blocks.
    pub fn in_use_bytes(&self) -> u64 {
        self.in_use
    }

    /// Highest value [`Buddy::in_use_bytes`] has reached.
    pub fn high_water_bytes(&self) -> u64 {
        self.high_water
    }

    #[cfg(test)]
    /// Size of the largest free block, 0 if none.
    pub fn largest_free(&self) -> u64 {
        (0..=BUDDY_MAX_ORDER)
            .rev()
            .find(|&order| self.first_free(order).is_some())
            .map_or(0, |order| BUDDY_GRANULE << order)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;

    #[test]
    fn buddy_new() {
        assert!(Buddy::new(0, 4095).is_none());
        assert!(Buddy::new(0, BUDDY_MAX_AREA + 4096).is_none());
        assert!(Buddy::new(u64::MAX - 4095, 4096).is_none());
        assert!(Buddy::new(u64::MAX - 4096, 4096).is_some());
        let mut empty = Buddy::new(0, 0).unwrap();
        assert_eq!(empty.largest_free(), 0);
        assert_eq!(empty.alloc_unreserved(1), None);
        assert!(!empty.free(Slice { offset: 0, len: 1 }));
        let b = Buddy::new(4 * MIB, 16 * MIB).unwrap();
        assert_eq!(b.largest_free(), 16 * MIB);
        assert_eq!(b.in_use_bytes(), 0);
        assert!(core::mem::size_of::<Buddy>() <= 2048 + 64);
    }

    #[test]
    fn buddy_block_size() {
        assert_eq!(Buddy::block_size(0), None);
        assert_eq!(Buddy::block_size(1), Some(4096));
        assert_eq!(Buddy::block_size(4096), Some(4096));
        assert_eq!(Buddy::block_size(4097), Some(8192));
        assert_eq!(Buddy::block_size(12 * 4096), Some(64 * KIB));
        assert_eq!(Buddy::block_size(16 << 20), Some(16 * MIB));
        assert_eq!(Buddy::block_size((16 << 20) + 1), None);
        assert_eq!(Buddy::block_size(u32::MAX), None);
    }

    #[test]
    fn buddy_fill_with_max_size() {
        let base = 12 * MIB;
        let mut b = Buddy::new(base, 16 * MIB).unwrap();
        let s = b.alloc_unreserved(16 << 20).unwrap();
        assert_eq!(
            s,
            Slice {
                offset: base,
                len: 16 << 20
            }
        );
        assert_eq!(b.alloc_unreserved(1), None);
        assert_eq!(b.largest_free(), 0);
        assert!(b.free(s));
        assert_eq!(b.largest_free(), 16 * MIB);

        // 1 MiB blocks: exactly 16, in address order.
        let all: Vec<_> = (0..16)
            .map(|_| b.alloc_unreserved(1 << 20).unwrap())
            .collect();
        for (i, s) in all.iter().enumerate() {
            assert_eq!(s.offset, base + i as u64 * MIB);
        }
        assert_eq!(b.alloc_unreserved(1 << 20), None);
        assert_eq!(b.alloc_unreserved(1), None);
        assert_eq!(b.in_use_bytes(), 16 * MIB);
        for s in all {
            assert!(b.free(s));
        }
        assert_eq!(b.in_use_bytes(), 0);
        assert_eq!(b.high_water_bytes(), 16 * MIB);
        assert_eq!(b.largest_free(), 16 * MIB);
    }

    #[test]
    fn buddy_mixed_sizes() {
        let mut b = Buddy::new(0, MIB).unwrap();
        let a = b.alloc_unreserved(4096).unwrap();
        let c = b.alloc_unreserved(5000).unwrap();
        let d = b.alloc_unreserved(1).unwrap();
        let e = b.alloc_unreserved(64 * 1024).unwrap();
        assert_eq!(
            a,
            Slice {
                offset: 0,
                len: 4096
            }
        );
        assert_eq!(
            c,
            Slice {
                offset: 8192,
                len: 5000
            }
        );
        assert_eq!(
            d,
            Slice {
                offset: 4096,
                len: 1
            }
        );
        assert_eq!(
            e,
            Slice {
                offset: 64 * KIB,
                len: 64 * 1024
            }
        );
        assert_eq!(b.in_use_bytes(), 4096 + 8192 + 4096 + 65536);
        assert_eq!(b.largest_free(), 512 * KIB);
        // Freeing with another length of the same block size is accepted.
        assert!(b.free(Slice {
            offset: 8192,
            len: 8192
        }));
        assert!(b.free(a));
        assert!(b.free(d));
        assert_eq!(b.alloc_unreserved(16384).unwrap().offset, 0);
    }

    #[test]
    fn buddy_refuses_bad_frees() {
        let base = 4 * MIB;
        let mut b = Buddy::new(base, 4 * MIB).unwrap();
        let s = b.alloc_unreserved(8192).unwrap();
        let t = b.alloc_unreserved(4096).unwrap();
        let before = b.clone();
        let bad = [
            Slice {
                offset: s.offset,
                len: 0,
            },
            Slice {
                offset: s.offset,
                len: 4096,
            },
            Slice {
                offset: s.offset,
                len: 16384,
            },
            Slice {
                offset: s.offset + 4096,
                len: 4096,
            },
            Slice {
                offset: s.offset + 1,
                len: 8192,
            },
            Slice {
                offset: base - 8192,
                len: 8192,
            },
            Slice {
                offset: base + 4 * MIB,
                len: 4096,
            },
            Slice {
                offset: base + 64 * KIB,
                len: 4096,
            },
            Slice {
                offset: u64::MAX,
                len: u32::MAX,
            },
            Slice {
                offset: 0,
                len: 4096,
            },
        ];
        for slice in bad {
            assert!(!b.free(slice), "{slice:?}");
            assert_eq!(b, before);
        }
        assert!(b.free(s));
        let after = b.clone();
        assert!(!b.free(s), "double free");
        assert_eq!(b, after);
        assert!(b.free(t));
        assert!(!b.free(t), "double free after merge");
        assert_eq!(b.largest_free(), 4 * MIB);
        assert_eq!(b.in_use_bytes(), 0);
    }

    #[test]
    fn buddy_non_power_of_two_area() {
        // 3 chunks of 4 MiB: top-level blocks of 8 and 4 MiB.
        let mut b = Buddy::new(0, 12 * MIB).unwrap();
        assert_eq!(b.largest_free(), 8 * MIB);
        assert_eq!(b.alloc_unreserved(12 << 20), None);
        let big = b.alloc_unreserved(8 << 20).unwrap();
        let small = b.alloc_unreserved(4 << 20).unwrap();
        assert_eq!((big.offset, small.offset), (0, 8 * MIB));
        assert_eq!(b.alloc_unreserved(1), None);
        assert!(b.free(big));
        assert!(b.free(small));
        assert_eq!(b.largest_free(), 8 * MIB);
        // The 4 MiB block never merges into a block outside the area.
        let blocks: Vec<_> = (0..3)
            .map(|_| b.alloc_unreserved(4 << 20).unwrap())
            .collect();
        assert_eq!(b.alloc_unreserved(1), None);
        for s in blocks.into_iter().rev() {
            assert!(b.free(s));
        }
        assert_eq!(b.largest_free(), 8 * MIB);
        assert_eq!(b.alloc_unreserved(8 << 20).unwrap().offset, 0);

        // Odd number of granules.
        let mut b = Buddy::new(0, 7 * 4096).unwrap();
        let all: Vec<_> = (0..7).map(|_| b.alloc_unreserved(4096).unwrap()).collect();
        assert_eq!(b.alloc_unreserved(4096), None);
        for s in all {
            assert!(b.free(s));
        }
        assert_eq!(b.largest_free(), 16384);
        assert_eq!(b.without_high_water(), Buddy::new(0, 7 * 4096).unwrap());
    }

    impl Buddy {
        /// A copy with the high water mark of a fresh allocator.
        fn without_high_water(&self) -> Self {
            Self {
                high_water: 0,
                reserved: None,
                ..self.clone()
            }
        }

        /// Allocates as if every earlier failure's reservation had lapsed:
        /// the allocator's placement alone.
        fn alloc_unreserved(&mut self, len: u32) -> Option<Slice> {
            self.alloc(len, u64::MAX)
        }
    }

    /// Deterministic xorshift64 generator.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        fn shuffle<T>(&mut self, v: &mut [T]) {
            for i in (1..v.len()).rev() {
                v.swap(i, self.below(i as u64 + 1) as usize);
            }
        }
    }

    #[test]
    fn buddy_merges_back_after_random_order_free() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let fresh = Buddy::new(MIB, 16 * MIB).unwrap();
        let mut b = fresh.clone();
        let mut all: Vec<_> = (0..4096)
            .map(|_| b.alloc_unreserved(4096).unwrap())
            .collect();
        assert_eq!(b.alloc_unreserved(1), None);
        for round in 0..3 {
            rng.shuffle(&mut all);
            for s in &all {
                assert!(b.free(*s));
            }
            assert_eq!(b.largest_free(), 16 * MIB, "round {round}");
            assert_eq!(b.without_high_water(), fresh);
            all = (0..4096)
                .map(|_| b.alloc_unreserved(4096).unwrap())
                .collect();
        }
    }

    /// Mixed random workload checked against a simple model; frees
    /// everything at the end. Returns the allocator.
    fn random_workload(rng: &mut Rng, area: u64, max_len: u32, ops: usize) -> Buddy {
        let base = 8 * MIB;
        let mut b = Buddy::new(base, area).unwrap();
        let mut live: Vec<(Slice, u64)> = Vec::new();
        let mut high = 0;
        for _ in 0..ops {
            if live.is_empty() || rng.below(100) < 55 {
                // Skew sizes towards small ones, like real I/O.
                let len = match rng.below(4) {
                    0 => 1 + rng.below(8192) as u32,
                    1 => 1 + rng.below(65536) as u32,
                    _ => 1 + rng.below(u64::from(max_len)) as u32,
                };
                let block = Buddy::block_size(len).unwrap();
                match b.alloc_unreserved(len) {
                    Some(s) => {
                        assert_eq!(s.len, len);
                        let rel = s.offset - base;
                        assert_eq!(rel % block, 0, "natural alignment");
                        assert!(rel + block <= area);
                        for (o, ob) in &live {
                            assert!(
                                s.offset + block <= o.offset || o.offset + ob <= s.offset,
                                "overlap {s:?} {o:?}"
                            );
                        }
                        live.push((s, block));
                    }
                    None => {
                        // Refused only if no free block is large enough.
                        assert!(b.largest_free() < block);
                    }
                }
            } else {
                let i = rng.below(live.len() as u64) as usize;
                let (s, _) = live.swap_remove(i);
                assert!(b.free(s));
                assert!(!b.free(s));
            }
            let in_use: u64 = live.iter().map(|l| l.1).sum();
            assert_eq!(b.in_use_bytes(), in_use);
            high = high.max(in_use);
            assert_eq!(b.high_water_bytes(), high);
            assert!(b.largest_free() + in_use <= area);
        }
        rng.shuffle(&mut live);
        for (s, _) in live {
            assert!(b.free(s));
        }
        assert_eq!(b.in_use_bytes(), 0);
        b
    }

    #[test]
    fn buddy_random_against_model() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for (area, max_len) in [
            (16 * MIB, 1 << 20),
            (16 * MIB, 16 << 20),
            (12 * MIB, 4 << 20),
            (MIB + 5 * 4096, 256 << 10),
            (4096, 4096),
        ] {
            let b = random_workload(&mut rng, area, max_len, 5000);
            let top = 1u64 << (63 - area.leading_zeros());
            assert_eq!(b.largest_free(), top);
            assert_eq!(b.without_high_water(), Buddy::new(8 * MIB, area).unwrap());
        }
    }

    #[test]
    fn max_io_fits_once_everything_is_freed() {
        let mut rng = Rng(42);
        for (area, max_io) in [
            (8 * MIB, 1u32 << 20),
            (8 * MIB, 8 << 20),
            (12 * MIB, 8 << 20),
            (3 * MIB, 2 << 20),
            (MIB + 4096, (1 << 20) - 4096),
            (16 * MIB, (12 << 20) + 1),
        ] {
            assert!(area >= Buddy::block_size(max_io).unwrap());
            for _ in 0..10 {
                let mut b = random_workload(&mut rng, area, max_io, 500);
                let s = b.alloc_unreserved(max_io).expect("max I/O must fit");
                assert!(b.free(s));
            }
        }
    }

    /// Fills a 16 MiB area with 256 KiB blocks.
    fn full_of_256k() -> (Buddy, Vec<Slice>) {
        let mut b = Buddy::new(0, 16 * MIB).unwrap();
        let all = (0..64).map(|_| b.alloc(256 << 10, 0).unwrap()).collect();
        (b, all)
    }

    /// One queue streams 256 KiB transfers, each completion's block taken
    /// again at once by its next transfer, while another waits for 4 MiB
    /// and retries every third completion. Returns the completion at which
    /// the waiter got its block, if it did within `steps`.
    fn stream_beside_a_waiter(reservations: bool, steps: u64) -> Option<u64> {
        let mut rng = Rng(7);
        let (mut b, mut live) = full_of_256k();
        let at = |now: u64| if reservations { now } else { u64::MAX };
        assert_eq!(b.alloc(4 << 20, at(0)), None);
        for now in 1..=steps {
            let i = rng.below(live.len() as u64) as usize;
            assert!(b.free(live.swap_remove(i)));
            if let Some(s) = b.alloc(256 << 10, at(now)) {
                live.push(s);
            }
            if now % 3 == 0 {
                if let Some(s) = b.alloc(4 << 20, at(now)) {
                    assert_eq!(s.offset % (4 << 20), 0);
                    return Some(now);
                }
            }
        }
        None
    }

    #[test]
    fn large_transfer_is_not_starved_by_smaller_ones() {
        // Without reservations each hole is refilled before the waiter looks.
        assert_eq!(stream_beside_a_waiter(false, 10_000), None);
        // With them the stream is held back until a 4 MiB block forms: at
        // most the 64 blocks drain, then one retry period.
        let got = stream_beside_a_waiter(true, 10_000).expect("waiter served");
        assert!(got <= 66, "served after {got} completions");
    }

    #[test]
    fn reservation_refuses_only_blocks_that_break_the_last_large_one() {
        let mut b = Buddy::new(0, 16 * MIB).unwrap();
        let q: Vec<_> = (0..4).map(|_| b.alloc(4 << 20, 0).unwrap()).collect();
        assert_eq!(b.alloc(8 << 20, 0), None);
        assert!(b.free(q[0]));
        assert!(b.free(q[1]));
        // The only 8 MiB block may not be split for 4 KiB.
        assert_eq!(b.alloc(4096, 1), None);
        assert!(b.free(q[2]));
        // Another block can be: 4 KiB comes from the free 4 MiB quarter.
        let small = b.alloc(4096, 2).unwrap();
        assert_eq!(small.offset, 8 << 20);
        // The waiter gets its block; the reservation ends with it.
        let big = b.alloc(8 << 20, 3).unwrap();
        assert_eq!(big.offset, 0);
        assert!(b.free(big));
        assert!(b.alloc(4096, 4).is_some());
    }

    #[test]
    fn reservation_lapses_without_retries() {
        let (mut b, live) = full_of_256k();
        assert_eq!(b.alloc(4 << 20, 1000), None);
        assert!(b.free(live[5]));
        assert_eq!(b.alloc(256 << 10, 1000 + RESERVATION_MS - 1), None);
        // The waiter went away: smaller transfers use the area again.
        assert!(b.alloc(256 << 10, 1000 + RESERVATION_MS).is_some());
    }

    #[test]
    fn the_largest_waiter_keeps_its_reservation() {
        let (mut b, live) = full_of_256k();
        assert_eq!(b.alloc(4 << 20, 0), None);
        // A 1 MiB waiter neither replaces nor renews it.
        assert_eq!(b.alloc(1 << 20, 50), None);
        for s in &live[..4] {
            assert!(b.free(*s));
        }
        // A free aligned 1 MiB block, but not a 4 MiB one.
        assert_eq!(b.alloc(1 << 20, 60), None);
        assert!(b.alloc(1 << 20, RESERVATION_MS).is_some());
        // A block the area cannot hold reserves nothing.
        let mut small = Buddy::new(0, 12 * MIB).unwrap();
        let all: Vec<_> = (0..3).map(|_| small.alloc(4 << 20, 0).unwrap()).collect();
        assert!(small.free(all[0]));
        assert_eq!(small.alloc(12 << 20, 1), None);
        assert!(small.alloc(4096, 2).is_some());
    }
}
