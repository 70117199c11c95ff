//! The guest's global allocator: the system allocator (dlmalloc on wasm32) with a small
//! cache of recently freed blocks.
//!
//! Why: every `score` call allocates the same few blocks: the host's copies of the three
//! column lists (through `cabi_realloc`) and the returned costs, and frees them all when
//! the call ends. Those sizes repeat call after call, so handing the last freed block of
//! exactly that layout back costs a few compares instead of a dlmalloc search and split.
//!
//! Bounds: at most [`SLOTS`] blocks are cached, each at most [`MAX_CACHED`] bytes, so the
//! cache holds no more than 8 MiB that the policy is not using (counted against the
//! instance's memory limit like any allocation). Small blocks are cached too: the
//! one-candidate call, whose blocks are all small, went from 5,700 to 5,050 instructions
//! (callgrind, `benches/profile.rs one`).
//!
//! A policy with its own `#[global_allocator]` turns this off with
//! `default-features = false` on the SDK.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;

/// Cached blocks: one per distinct layout in a call is plenty (3 lists + costs + keep).
/// A miss scans them all, so more would slow every allocation.
const SLOTS: usize = 8;
/// Largest block cached, bytes: 1 MiB holds a 32,768-row u64 column.
const MAX_CACHED: usize = 1 << 20;

pub struct RecyclingAllocator<A = System> {
    inner: A,
    cache: UnsafeCell<Cache>,
}

struct Cache {
    /// Freed blocks kept for reuse (null: empty slot).
    slots: [(*mut u8, Layout); SLOTS],
    /// The slot to evict next when all are full: round robin, so the cache follows the
    /// layouts the policy uses now rather than keeping stale ones.
    next: usize,
}

// SAFETY: guests are built without the threads proposal, so the global allocator is
// only ever used by the instance's single thread (the native unit tests use their own
// instance from one thread).
unsafe impl<A: Sync> Sync for RecyclingAllocator<A> {}

impl RecyclingAllocator<System> {
    pub const fn new() -> Self {
        Self::with_inner(System)
    }
}

impl<A> RecyclingAllocator<A> {
    pub const fn with_inner(inner: A) -> Self {
        const EMPTY: (*mut u8, Layout) = (std::ptr::null_mut(), Layout::new::<u8>());
        Self { inner, cache: UnsafeCell::new(Cache { slots: [EMPTY; SLOTS], next: 0 }) }
    }

    fn cacheable(layout: Layout) -> bool {
        layout.size() <= MAX_CACHED
    }
}

impl Default for RecyclingAllocator<System> {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: a block is handed out either fresh from `inner` or from the cache, where it
// sits only after `dealloc` with the same layout; each is owned by one caller at a
// time, and everything else forwards to `inner` with the caller's own arguments.
unsafe impl<A: GlobalAlloc> GlobalAlloc for RecyclingAllocator<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if Self::cacheable(layout) {
            // SAFETY: single-threaded (see `Sync`), and no reference to the cache
            // outlives this function, so this is the only live borrow.
            let cache = unsafe { &mut *self.cache.get() };
            if let Some(slot) = cache.slots.iter_mut().find(|(p, l)| !p.is_null() && *l == layout) {
                return std::mem::replace(&mut slot.0, std::ptr::null_mut());
            }
        }
        // SAFETY: forwarded with the caller's layout (non-zero size, per GlobalAlloc).
        unsafe { self.inner.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if Self::cacheable(layout) {
            // SAFETY: as in `alloc`.
            let cache = unsafe { &mut *self.cache.get() };
            // The block stays allocated in dlmalloc's view; the next `alloc` of exactly
            // this layout gets it back. With every slot full, the oldest goes back to
            // dlmalloc.
            let slot = match cache.slots.iter().position(|(p, _)| p.is_null()) {
                Some(free) => free,
                None => {
                    let victim = cache.next;
                    cache.next = (victim + 1) % SLOTS;
                    let (old, old_layout) = cache.slots[victim];
                    // SAFETY: a cached block is live in dlmalloc and owned by the cache.
                    unsafe { self.inner.dealloc(old, old_layout) };
                    victim
                }
            };
            cache.slots[slot] = (ptr, layout);
            return;
        }
        // SAFETY: `ptr` came from this allocator with `layout`; cached blocks are only
        // ever handed out again by `alloc`, never freed twice.
        unsafe { self.inner.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // dlmalloc grows in place when it can; a cached block could not.
        // SAFETY: forwarded with the caller's arguments; `ptr` is live (cached blocks are
        // never handed to callers until `alloc` returns them).
        unsafe { self.inner.realloc(ptr, layout, new_size) }
    }
}

#[cfg(test)]
mod tests {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    use super::{MAX_CACHED, RecyclingAllocator, SLOTS};

    /// The system allocator, counting what reaches it.
    #[derive(Default)]
    struct Counting {
        allocs: Cell<usize>,
        frees: Cell<usize>,
    }

    // SAFETY: every method forwards to `System` with the caller's own arguments, so
    // `System`'s guarantees are this allocator's; the counters are test bookkeeping.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            self.allocs.set(self.allocs.get() + 1);
            // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract for `layout`.
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            self.frees.set(self.frees.get() + 1);
            // SAFETY: `ptr` came from `System.alloc(layout)` above, as the caller guarantees.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    #[test]
    fn a_freed_block_is_handed_back_for_the_same_layout_only() {
        let a = RecyclingAllocator::with_inner(Counting::default());
        let costs = Layout::array::<f64>(1024).unwrap();
        // SAFETY: each block is freed once, with the layout it was allocated with.
        unsafe {
            let first = a.alloc(costs);
            a.dealloc(first, costs);
            // While `first` is cached: the same size with another alignment misses it.
            let other = a.alloc(Layout::array::<u32>(2048).unwrap());
            assert_ne!(other, first, "same size, other alignment: not the cached block");
            assert_eq!(a.alloc(costs), first, "same layout: the cached block");
            assert_eq!(a.inner.allocs.get(), 2, "the reuse never reached the system allocator");
            a.dealloc(first, costs);
            a.dealloc(other, Layout::array::<u32>(2048).unwrap());
        }
    }

    #[test]
    fn the_cache_is_bounded_in_blocks_and_in_size() {
        let a = RecyclingAllocator::with_inner(Counting::default());
        // SAFETY: each block is freed once, with the layout it was allocated with.
        unsafe {
            // One more distinct layout than there are slots: the oldest goes back.
            let layouts: Vec<Layout> =
                (1..=SLOTS + 1).map(|i| Layout::from_size_align(i * 64, 8).unwrap()).collect();
            let blocks: Vec<*mut u8> = layouts.iter().map(|&l| a.alloc(l)).collect();
            for (&p, &l) in blocks.iter().zip(&layouts) {
                a.dealloc(p, l);
            }
            assert_eq!(a.inner.frees.get(), 1, "exactly one block evicted");
            // A block over the size cap is never cached.
            let huge = Layout::from_size_align(MAX_CACHED + 1, 8).unwrap();
            a.dealloc(a.alloc(huge), huge);
            assert_eq!(a.inner.frees.get(), 2);
            // Everything cached is still live and reusable: hand each back once.
            for &l in &layouts[1..] {
                let p = a.alloc(l);
                std::ptr::write_bytes(p, 0xAB, l.size());
                a.dealloc(p, l);
            }
            assert_eq!(a.inner.allocs.get(), SLOTS + 2, "the survivors were reused");
        }
    }
}
