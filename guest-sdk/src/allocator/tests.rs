use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use super::{Memory, PAGE, SizeClassAllocator};

/// A linear memory of at most `limit` pages, at a page-aligned native address.
struct Arena {
    base: *mut u8,
    pages: Cell<usize>,
    limit: usize,
    grows: Cell<usize>,
}

impl Arena {
    fn layout(limit: usize) -> Layout {
        Layout::from_size_align(limit * PAGE, PAGE).unwrap()
    }

    fn new(limit: usize) -> Self {
        // SAFETY: a non-zero size.
        let base = unsafe { std::alloc::alloc(Self::layout(limit)) };
        assert!(!base.is_null());
        Self { base, pages: Cell::new(0), limit, grows: Cell::new(0) }
    }

    /// The bytes grown so far.
    fn grown(&self) -> usize {
        self.pages.get() * PAGE
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.base, Self::layout(self.limit)) }
    }
}

impl Memory for Arena {
    fn grow(&self, pages: usize) -> Option<usize> {
        let old = self.pages.get();
        if old + pages > self.limit {
            return None;
        }
        self.pages.set(old + pages);
        self.grows.set(self.grows.get() + 1);
        Some(self.base as usize + old * PAGE)
    }
}

fn layout(size: usize, align: usize) -> Layout {
    Layout::from_size_align(size, align).unwrap()
}

#[test]
fn a_freed_block_is_handed_back_for_its_class_only() {
    let a = SizeClassAllocator::new(Arena::new(16));
    // SAFETY: each block is freed once, with the layout it was allocated with.
    unsafe {
        let costs = layout(8 * 1024, 8);
        let first = a.alloc(costs);
        a.dealloc(first, costs);
        assert_ne!(a.alloc(layout(8 * 1024 + 1, 8)), first, "a larger class: a fresh block");
        assert_eq!(a.alloc(layout(5000, 4)), first, "the same class (8 KiB): the freed block");
        assert_eq!(a.memory.grows.get(), 1, "one page grown held all three");
    }
}

#[test]
fn a_steady_workload_stops_growing_the_memory_after_its_first_call() {
    let a = SizeClassAllocator::new(Arena::new(64));
    let call = |n: usize| {
        // What a `score` call allocates: three column lists copied in, the costs out.
        let layouts = [layout(n * 4, 4), layout(n * 4, 4), layout(n * 8, 8), layout(n * 8, 8)];
        // SAFETY: each block is freed once, with the layout it was allocated with.
        unsafe {
            let blocks: Vec<*mut u8> = layouts.iter().map(|&l| a.alloc(l)).collect();
            assert!(blocks.iter().all(|b| !b.is_null()));
            for (&b, &l) in blocks.iter().zip(&layouts).rev() {
                a.dealloc(b, l);
            }
        }
    };
    // 1,024 candidates: small blocks; 10,000: large ones (80 KB columns).
    call(1024);
    call(10_000);
    let after_first = a.memory.grown();
    for _ in 0..100 {
        call(1024);
        call(1000);
        call(10_000);
    }
    assert_eq!(a.memory.grown(), after_first, "every later call reused the first call's blocks");
}

#[test]
fn a_vec_growing_within_its_class_stays_put_and_one_moving_keeps_its_bytes() {
    let a = SizeClassAllocator::new(Arena::new(16));
    // SAFETY: each block is live when read, and freed once with its current layout.
    unsafe {
        let p = a.alloc(layout(20, 4));
        std::ptr::write_bytes(p, 0x5A, 20);
        assert_eq!(a.realloc(p, layout(20, 4), 32), p, "20 and 32 bytes: one class");
        let q = a.realloc(p, layout(32, 4), 33);
        assert_ne!(q, p, "33 bytes: the next class");
        assert!(std::slice::from_raw_parts(q, 20).iter().all(|&b| b == 0x5A));
        assert_eq!(a.alloc(layout(24, 4)), p, "the block moved from is free again");
        a.dealloc(q, layout(33, 4));
    }
}

#[test]
fn a_large_block_takes_its_pages_not_the_next_power_of_two() {
    // 64 MiB of memory: a 40 MB buffer fits, as it would with no allocator at all.
    let a = SizeClassAllocator::new(Arena::new(1024));
    // SAFETY: the block is freed once, with the layout it was allocated with.
    unsafe {
        let huge = layout(40_000_000, 1);
        let p = a.alloc(huge);
        assert!(!p.is_null(), "40 MB in 64 MiB");
        assert_eq!(a.memory.grown(), 40_000_000usize.div_ceil(PAGE) * PAGE);
        a.dealloc(p, huge);
        assert_eq!(a.alloc(huge), p, "given back to the heap's end, and carved again there");
    }
}

#[test]
fn a_freed_large_block_is_split_for_smaller_ones_and_the_last_one_grows_in_place() {
    let a = SizeClassAllocator::new(Arena::new(64));
    // SAFETY: each block is live when used, and freed once with its current layout.
    unsafe {
        let ten = layout(10 * PAGE, 8);
        let p = a.alloc(ten);
        let small = a.alloc(layout(64, 8)); // so that `p` is not at the heap's end
        a.dealloc(p, ten);
        let grown = a.memory.grown();
        let four = a.alloc(layout(4 * PAGE - 100, 8));
        let six = a.alloc(layout(6 * PAGE, 8));
        assert_eq!((four, six), (p, p.add(4 * PAGE)), "the freed ten pages, split four and six");
        assert_eq!(a.memory.grown(), grown, "nothing grown for them");

        // The last block carved grows and shrinks where it is.
        let last = a.alloc(layout(2 * PAGE, 8));
        std::ptr::write_bytes(last, 7, 2 * PAGE);
        assert_eq!(a.realloc(last, layout(2 * PAGE, 8), 20 * PAGE), last);
        assert_eq!(*last.add(2 * PAGE - 1), 7);
        assert_eq!(a.realloc(last, layout(20 * PAGE, 8), 3 * PAGE), last);
        // Not the last one: it moves, with its bytes.
        let moved = a.realloc(four, layout(4 * PAGE - 100, 8), 8 * PAGE);
        assert_ne!(moved, four);
        for (ptr, l) in
            [(moved, layout(8 * PAGE, 8)), (six, layout(6 * PAGE, 8)), (last, layout(3 * PAGE, 8))]
        {
            a.dealloc(ptr, l);
        }
        a.dealloc(small, layout(64, 8));
    }
}

#[test]
fn the_last_block_that_cannot_grow_in_place_moves_into_a_free_one() {
    let a = SizeClassAllocator::new(Arena::new(16));
    // SAFETY: each block is live when used, and freed once with its current layout.
    unsafe {
        let ten = layout(10 * PAGE, 8);
        let free = a.alloc(ten);
        let small = a.alloc(layout(64, 8));
        let last = a.alloc(layout(4 * PAGE, 8));
        a.dealloc(free, ten);
        std::ptr::write_bytes(last, 3, 4 * PAGE);
        // Growing in place would need 20 pages of a 16-page memory.
        let moved = a.realloc(last, layout(4 * PAGE, 8), 9 * PAGE);
        assert_eq!(moved, free, "into the freed ten pages");
        assert!(std::slice::from_raw_parts(moved, 4 * PAGE).iter().all(|&b| b == 3));
        assert_eq!(a.alloc(layout(4 * PAGE, 8)), last, "its old place given back to the heap's end");
        assert!(a.alloc(layout(PAGE + 1, 8)).is_null(), "16 pages in use or carved: no more");
        a.dealloc(small, layout(64, 8));
    }
}

/// One page at the very top of the address space (as a full 32-bit memory's last page is on
/// wasm32), and nothing more. No block is written: only addresses are handed out.
struct TopPage;

impl Memory for TopPage {
    fn grow(&self, pages: usize) -> Option<usize> {
        (pages == 1).then_some(usize::MAX - PAGE + 1)
    }
}

#[test]
fn at_the_top_of_the_address_space_nothing_wraps_around_to_address_zero() {
    let a = SizeClassAllocator::new(TopPage);
    // SAFETY: nothing is written or freed; the blocks are only compared.
    unsafe {
        // Fill the page but its last 32 bytes: 32 KiB, 16 KiB, …, 32 bytes.
        for class in (5..16).rev() {
            assert!(!a.alloc(layout(1 << class, 8)).is_null(), "2^{class} bytes fit");
        }
        // Rounding the heap's end up to 4 KiB would wrap to 0, and the block after it
        // would be handed out at a low address nobody owns.
        assert!(a.alloc(layout(16, 4096)).is_null(), "no room for a 4 KiB-aligned block");
        let last = a.alloc(layout(16, 8));
        assert_eq!(last as usize, usize::MAX - 31, "16 bytes more, still at the top");
        // The very last 16 bytes end at 2^64, which no address can say: not handed out.
        assert!(a.alloc(layout(16, 8)).is_null(), "and then nothing");
    }
}

#[test]
fn a_memory_that_cannot_grow_gives_null_and_smaller_blocks_still_come() {
    let a = SizeClassAllocator::new(Arena::new(4));
    // SAFETY: each block is live when written, and freed once with its layout.
    unsafe {
        assert!(a.alloc(layout(5 * PAGE, 8)).is_null(), "over the limit");
        assert!(a.alloc(layout(8, 2 * PAGE)).is_null(), "an alignment over a page");
        let p = a.alloc(layout(2 * PAGE, 8));
        assert!(!p.is_null(), "what fits still comes after a refusal");
        std::ptr::write_bytes(p, 1, 2 * PAGE);
        a.dealloc(p, layout(2 * PAGE, 8));
    }
}

/// Random allocations, reallocations and frees against a model: every block aligned as
/// asked, none overlapping a live one (each keeps its own fill to the end), contents kept
/// across moves.
#[test]
fn random_blocks_are_aligned_disjoint_and_keep_their_bytes() {
    let a = SizeClassAllocator::new(Arena::new(4096));
    let mut rng = ChaCha8Rng::seed_from_u64(16);
    let mut live: Vec<(*mut u8, Layout, u8)> = Vec::new();
    let check = |&(p, l, fill): &(*mut u8, Layout, u8)| {
        // SAFETY: a live block of `l.size()` bytes, filled when allocated.
        let bytes = unsafe { std::slice::from_raw_parts(p, l.size()) };
        assert!(bytes.iter().all(|&b| b == fill), "block {p:?} ({l:?}) was overwritten");
    };
    for step in 0..20_000u32 {
        let roll = rng.next_u32() % 10;
        if roll < 5 || live.is_empty() {
            let size = match rng.next_u32() % 4 {
                0 => 1 + rng.next_u32() as usize % 16,
                1 => 1 + rng.next_u32() as usize % 512,
                2 => 1 + rng.next_u32() as usize % 8192,
                _ => 1 + rng.next_u32() as usize % 200_000,
            };
            let align = [1, 2, 4, 8, 16, 64, 4096][rng.next_u32() as usize % 7];
            let l = layout(size, align);
            // SAFETY: a non-zero size.
            let p = unsafe { a.alloc(l) };
            assert!(!p.is_null(), "step {step}: {l:?}");
            assert!((p as usize).is_multiple_of(align), "step {step}: {p:?} for {l:?}");
            let fill = step as u8;
            // SAFETY: a fresh block of at least `size` bytes.
            unsafe { std::ptr::write_bytes(p, fill, size) };
            live.push((p, l, fill));
        } else {
            let i = rng.next_u32() as usize % live.len();
            check(&live[i]);
            let (p, l, fill) = live.swap_remove(i);
            if roll < 8 {
                // SAFETY: `p` is live with `l`, given up once here.
                unsafe { a.dealloc(p, l) };
            } else {
                let new_size = 1 + rng.next_u32() as usize % (2 * l.size() + 64);
                // SAFETY: `p` is live with `l`; a non-zero new size.
                let q = unsafe { a.realloc(p, l, new_size) };
                assert!(!q.is_null());
                assert!((q as usize).is_multiple_of(l.align()));
                let kept = layout(l.size().min(new_size), l.align());
                check(&(q, kept, fill));
                // SAFETY: a live block of `new_size` bytes.
                unsafe { std::ptr::write_bytes(q, fill, new_size) };
                live.push((q, layout(new_size, l.align()), fill));
            }
        }
    }
    live.iter().for_each(check);
    for (p, l, _) in live {
        // SAFETY: each live block freed once with its layout.
        unsafe { a.dealloc(p, l) };
    }
}
