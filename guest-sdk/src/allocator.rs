//! The guest's global allocator: small blocks in power-of-two size classes, each with its
//! own free list; large ones in whole pages. Carved from memory the instance grows with
//! `memory.grow`. No dlmalloc.
//!
//! Why: every `score` call allocates the same few blocks (the host's copies of the column
//! lists, through `cabi_realloc`, and the returned costs) and frees them when the call
//! ends. Those sizes repeat call after call, so a freed block goes onto its class's list
//! and the next request of that class pops it: a few instructions, and the heap of a steady
//! workload stops growing after its first call. And size: this is a fraction of dlmalloc's
//! code, every byte of which Cranelift compiles at each upload. Its small blocks are the C
//! SDK's allocator (`guest-sdk/c/switchyard_alloc.c`) without the header: Rust passes the
//! layout back on `dealloc`, so the class is computed, not stored. (The ecosystem's wasm
//! allocator, `talc`, measured in its place: the same code size and compile, but a slower
//! fresh instance's round and more resident per idle instance; docs/benchmarks-history.md,
//! "the SDK's own allocator".)
//!
//! Bounds: a small block (up to a 64 KiB page) is rounded up to a power of two and is
//! never split or merged, so a policy holds at most twice its peak use of each class. A
//! large one is rounded up to whole pages (a 40 MB buffer takes 40 MB, not 64 MiB); a
//! freed one is split for smaller requests, given back to the heap's end when it lies
//! there, and the block carved last grows and shrinks in place (a buffer doubling needs
//! no second copy). Memory is never returned to the host, and stays within the
//! instance's limit (`max_memory_bytes`): growth past it traps (the host's setting) or,
//! without that setting, `alloc` returns null and the guest aborts.
//!
//! A policy with its own `#[global_allocator]` turns this off with
//! `default-features = false` on the SDK.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::ptr::null_mut;

/// A WebAssembly page: the unit `memory.grow` counts in.
pub const PAGE: usize = 65536;
/// Small blocks of class `k` hold `2^k` bytes; the smallest holds 16 (two words of any
/// WIT list element, and a vector's alignment for the lists the host copies in).
const MIN_CLASS: u32 = 4;
/// The largest small class holds a page; anything bigger is a large block of whole pages.
const MAX_SMALL_CLASS: u32 = 16;
/// Every block starts on this boundary (see `MIN_CLASS`).
const MIN_ALIGN: usize = 1 << MIN_CLASS;

/// Where fresh memory comes from: the instance's linear memory on wasm32, an arena in the
/// native tests.
pub trait Memory {
    /// Grows the memory by `pages` pages; the address where the new pages start, or
    /// `None` if the memory cannot grow.
    fn grow(&self, pages: usize) -> Option<usize>;
}

/// Linear memory 0 of the instance.
#[cfg(target_arch = "wasm32")]
pub struct LinearMemory;

#[cfg(target_arch = "wasm32")]
impl Memory for LinearMemory {
    fn grow(&self, pages: usize) -> Option<usize> {
        match core::arch::wasm32::memory_grow(0, pages) {
            usize::MAX => None,
            old_pages => Some(old_pages * PAGE),
        }
    }
}

/// The allocator. Single-threaded: see its `Sync` impl.
pub struct SizeClassAllocator<M> {
    memory: M,
    heap: UnsafeCell<Heap>,
}

struct Heap {
    /// Free small blocks of each class, linked through their first word.
    small: [*mut u8; MAX_SMALL_CLASS as usize + 1],
    /// Free large blocks, each starting with its [`FreeLarge`].
    large: *mut FreeLarge,
    /// The memory between the last block carved and the end of what was grown.
    next: usize,
    end: usize,
}

/// The head of a free large block.
struct FreeLarge {
    next: *mut FreeLarge,
    pages: usize,
}

/// What serves a layout: a small block of a power-of-two class, or a large block of
/// whole pages (page-aligned, so a 40 MB buffer takes 40 MB, not 64 MiB).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Block {
    Small(usize),
    Large(usize),
}

impl Block {
    /// `None` for an alignment over a page (no allocation of ours asks for one).
    fn of(layout: Layout) -> Option<Self> {
        if layout.align() > PAGE {
            return None;
        }
        let bytes = layout.size().max(layout.align()).max(MIN_ALIGN);
        Some(if bytes <= 1 << MAX_SMALL_CLASS {
            Self::Small(bytes.next_power_of_two().trailing_zeros() as usize)
        } else {
            Self::Large(bytes.div_ceil(PAGE))
        })
    }
}

// SAFETY: guests are built without the threads proposal, so the global allocator is
// only ever used by the instance's single thread (the native unit tests use their own
// allocator from one thread).
unsafe impl<M: Sync> Sync for SizeClassAllocator<M> {}

impl<M> SizeClassAllocator<M> {
    /// An allocator that has carved nothing yet.
    pub const fn new(memory: M) -> Self {
        let heap =
            Heap { small: [null_mut(); MAX_SMALL_CLASS as usize + 1], large: null_mut(), next: 0, end: 0 };
        Self { memory, heap: UnsafeCell::new(heap) }
    }
}

impl<M: Memory> SizeClassAllocator<M> {
    /// A fresh block of `bytes` aligned to `align` from the end of the heap, growing the
    /// memory when needed; null if it cannot grow.
    #[inline(never)]
    fn carve(&self, heap: &mut Heap, bytes: usize, align: usize) -> *mut u8 {
        loop {
            // Checked: at the top of a full 32-bit memory, rounding up would wrap to 0.
            let Some(start) = heap.next.checked_next_multiple_of(align) else { return null_mut() };
            let Some(end) = start.checked_add(bytes) else { return null_mut() };
            if end <= heap.end {
                heap.next = end;
                return start as *mut u8;
            }
            // Contiguous or not, round again: the block is carved from the new pages.
            if self.grow_to(heap, end).is_none() {
                return null_mut();
            }
        }
    }

    /// Grows the memory so that the heap reaches `end`: `Some(true)` if the new pages
    /// extend the heap; `Some(false)` if they lie elsewhere (the first grow, or a policy's
    /// own `memory.grow`), and the heap goes on from them; `None` if the memory cannot
    /// grow. `end` is past the heap's end.
    fn grow_to(&self, heap: &mut Heap, end: usize) -> Option<bool> {
        let pages = (end - heap.end).div_ceil(PAGE);
        let grown = self.memory.grow(pages)?;
        // Saturating: a 32-bit memory grown to its full 4 GiB ends at 2^32.
        let grown_end = grown.saturating_add(pages * PAGE);
        let extends = grown == heap.end;
        if !extends {
            heap.next = grown;
        }
        heap.end = grown_end;
        Some(extends)
    }
}

impl Heap {
    /// Whether the `pages` pages at `block` end where the heap's carved part does. A
    /// difference, not a sum: every block lies below `next`, and a sum could wrap at the
    /// top of a full 32-bit memory.
    fn ends_at_next(&self, block: usize, pages: usize) -> bool {
        self.next - block == pages * PAGE
    }

    /// The smallest free large block of at least `pages` pages, unlinked, with what it has
    /// beyond `pages` linked back as a block of its own; null if none is big enough.
    ///
    /// # Safety
    /// Every block on the large list is free, starts with its `FreeLarge`, and spans its
    /// `pages` pages.
    // Out of line, as are `free_large`, `carve` and `dealloc`: LTO inlines `dealloc` into
    // every `drop` of a Vec or String. The default policy's code: 71,274 bytes with all four
    // inlined, 65,062 with `dealloc` alone inlined, 62,372 with none (69,323 with dlmalloc).
    #[inline(never)]
    unsafe fn take_large(&mut self, pages: usize) -> *mut u8 {
        let mut best: *mut *mut FreeLarge = null_mut();
        let mut link: *mut *mut FreeLarge = &raw mut self.large;
        // SAFETY: every node is a free block's head (the precondition), and `link` and
        // `best` point at the list's head or at a node's `next`.
        unsafe {
            while !(*link).is_null() {
                let node = *link;
                if (*node).pages >= pages && (best.is_null() || (*node).pages < (**best).pages) {
                    best = link;
                }
                link = &raw mut (*node).next;
            }
            if best.is_null() {
                return null_mut();
            }
            let node = *best;
            *best = (*node).next;
            let spare = (*node).pages - pages;
            if spare > 0 {
                self.free_large(node.cast::<u8>().add(pages * PAGE), spare);
            }
            node.cast()
        }
    }

    /// Gives back a large block of `pages` pages at `block`: to the unused end of the
    /// heap if it lies at that end (with any free block that then does), else to the list.
    ///
    /// # Safety
    /// `block` is a page-aligned block of `pages` pages that nothing uses any more, and
    /// the list's precondition holds (see [`Heap::take_large`]).
    #[inline(never)]
    unsafe fn free_large(&mut self, block: *mut u8, pages: usize) {
        if self.ends_at_next(block as usize, pages) {
            self.next = block as usize;
            // A free block that now ends at the heap's end goes back too.
            let mut link: *mut *mut FreeLarge = &raw mut self.large;
            // SAFETY: every node is a free block's head (the precondition).
            unsafe {
                while !(*link).is_null() {
                    let node = *link;
                    if self.ends_at_next(node as usize, (*node).pages) {
                        *link = (*node).next;
                        self.next = node as usize;
                        link = &raw mut self.large;
                    } else {
                        link = &raw mut (*node).next;
                    }
                }
            }
            return;
        }
        let node = block.cast::<FreeLarge>();
        // SAFETY: the block is free, page-aligned and at least a page: room for its head.
        unsafe { node.write(FreeLarge { next: self.large, pages }) };
        self.large = node;
    }
}

// SAFETY: a block is handed out either freshly carved (never handed out before) or taken
// from a free list, where it sits only after `dealloc`; each is owned by one caller at a
// time. A small block of class `k` holds `2^k` bytes, at least the size and alignment of
// every layout of that class (checked on pop for alignments over `MIN_ALIGN`, which
// carving guarantees only for the first owner). A large block holds exactly the pages
// `Block::of` computes for its layout: carved so, split so when taken from the list, and
// resized in place only to the pages of its new layout.
unsafe impl<M: Memory> GlobalAlloc for SizeClassAllocator<M> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: single-threaded (see `Sync`), and no reference to the heap outlives
        // this function, so this is the only live borrow.
        let heap = unsafe { &mut *self.heap.get() };
        match Block::of(layout) {
            None => null_mut(),
            Some(Block::Small(class)) => {
                let block = heap.small[class];
                if !block.is_null() && (block as usize).is_multiple_of(layout.align()) {
                    // SAFETY: a free block holds at least a word, the link written by `dealloc`.
                    heap.small[class] = unsafe { block.cast::<*mut u8>().read() };
                    return block;
                }
                self.carve(heap, 1 << class, layout.align().max(MIN_ALIGN))
            }
            Some(Block::Large(pages)) => {
                // SAFETY: the large list holds only free blocks' heads (`free_large`).
                let block = unsafe { heap.take_large(pages) };
                if !block.is_null() {
                    return block;
                }
                pages.checked_mul(PAGE).map_or(null_mut(), |bytes| self.carve(heap, bytes, PAGE))
            }
        }
    }

    // One copy, called (see `Heap::take_large`).
    #[inline(never)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as in `alloc`.
        let heap = unsafe { &mut *self.heap.get() };
        // `layout` is the one `ptr` was allocated with (GlobalAlloc's contract), so it
        // names the block `alloc` returned.
        match Block::of(layout) {
            None => {}
            Some(Block::Small(class)) => {
                // SAFETY: the caller gives up `ptr`, a block of `2^class` ≥ 16 bytes
                // aligned to at least 16: room for the link, the only thing written.
                unsafe { ptr.cast::<*mut u8>().write(heap.small[class]) };
                heap.small[class] = ptr;
            }
            // SAFETY: the caller gives up `ptr`, a large block of exactly `pages` pages.
            Some(Block::Large(pages)) => unsafe { heap.free_large(ptr, pages) },
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `new_size` with `layout`'s alignment is a valid layout (the caller's
        // guarantee under GlobalAlloc::realloc).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let (old, new) = (Block::of(layout), Block::of(new_layout));
        if old == new {
            // Same block: a Vec growing or shrinking within its class stays put.
            return ptr;
        }
        if let (Some(Block::Large(pages)), Some(Block::Large(new_pages))) = (old, new) {
            // SAFETY: as in `alloc`.
            let heap = unsafe { &mut *self.heap.get() };
            // The last block carved (a buffer growing while nothing else is carved) grows
            // or shrinks where it is: no copy, and no second block beside it.
            let end = (ptr as usize).checked_add(new_pages * PAGE);
            if let Some(end) = end.filter(|_| heap.ends_at_next(ptr as usize, pages)) {
                // Not contiguous, or no memory to grow: it moves (a free block may hold it).
                if end <= heap.end || self.grow_to(heap, end) == Some(true) {
                    heap.next = end;
                    return ptr;
                }
            }
        }
        // SAFETY: a valid, non-zero layout, as above.
        let moved = unsafe { self.alloc(new_layout) };
        if !moved.is_null() {
            // SAFETY: both blocks are live, distinct, and hold at least the bytes copied;
            // `ptr` is freed once, with the layout it was allocated with.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        moved
    }
}

#[cfg(test)]
mod tests;
