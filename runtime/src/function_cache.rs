//! Cranelift's compiled functions, kept in memory and shared by every compile of an engine
//! (wasmtime's incremental compilation cache).
//!
//! Policies built with the same SDK share most of their functions: the allocator, the
//! parameter reader, `core::fmt`, the export glue. Cranelift keys each function by a
//! SHA-256 of its IR and the compiler's settings, so a function compiled for one upload is
//! not compiled again for the next that contains it, whoever uploads it.
//!
//! What it costs and what it bounds:
//! - Memory: at most `capacity` bytes of keys and compiled functions (plus a fixed
//!   overhead counted per entry), whatever is uploaded. Past it the entries not used since
//!   the last sweep go first (second chance), so the functions every upload shares stay.
//! - The values are Cranelift's own output in this process's memory, never bytes from a
//!   tenant or from disk.
//! - A tenant's uploads can push other tenants' functions out. Their next compile is then
//!   as slow as without the cache, never slower.
//! - The time an upload's compile takes (its answer's `compile_ms`) shows whether its
//!   functions were compiled before, by anyone. So a tenant can learn that some other
//!   upload contained a function identical to one it compiles. `function_cache_bytes = 0`
//!   turns the cache off for operators who count that as a leak.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// Bytes counted for an entry beyond its key and value: the map's and the queue's share.
const ENTRY_OVERHEAD: usize = 96;

/// An in-memory [`wasmtime::CacheStore`] of at most `capacity` bytes.
#[derive(Debug)]
pub struct FunctionCache {
    capacity: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<Box<[u8]>, Entry>,
    /// Keys in the order they are swept: oldest first.
    order: VecDeque<Box<[u8]>>,
    bytes: usize,
    hits: u64,
    misses: u64,
}

#[derive(Debug)]
struct Entry {
    value: Box<[u8]>,
    /// Read since the sweep last passed it: it gets a second chance.
    used: bool,
}

/// What a [`FunctionCache`] holds and how often it answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FunctionCacheStats {
    /// Functions found compiled.
    pub hits: u64,
    /// Functions compiled (not found).
    pub misses: u64,
    /// Functions held.
    pub entries: usize,
    /// Bytes held, counted as the capacity counts them.
    pub bytes: usize,
}

impl FunctionCache {
    /// An empty cache that holds at most `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        Self { capacity, state: Mutex::default() }
    }

    /// Counts and sizes, now.
    pub fn stats(&self) -> FunctionCacheStats {
        let state = self.state();
        FunctionCacheStats {
            hits: state.hits,
            misses: state.misses,
            entries: state.entries.len(),
            bytes: state.bytes,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state stays consistent at every step a panic could interrupt.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn size(key: &[u8], value: &[u8]) -> usize {
    key.len().saturating_add(value.len()).saturating_add(ENTRY_OVERHEAD)
}

impl wasmtime::CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let state = &mut *self.state();
        let Some(entry) = state.entries.get_mut(key) else {
            state.misses += 1;
            return None;
        };
        entry.used = true;
        state.hits += 1;
        // Copied out: the lock is not held while Cranelift reads it.
        Some(Cow::Owned(entry.value.to_vec()))
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let needed = size(key, &value);
        if needed > self.capacity {
            return false;
        }
        let mut state = self.state();
        if state.entries.contains_key(key) {
            // Two compiles of one function at once: the first kept wins.
            return true;
        }
        while state.bytes.saturating_add(needed) > self.capacity {
            let Some(oldest) = state.order.pop_front() else { break };
            let keep = state.entries.get_mut(&oldest).is_some_and(|e| std::mem::take(&mut e.used));
            if keep {
                state.order.push_back(oldest);
            } else if let Some(gone) = state.entries.remove(&oldest) {
                state.bytes = state.bytes.saturating_sub(size(&oldest, &gone.value));
            }
        }
        let key: Box<[u8]> = key.into();
        state.order.push_back(key.clone());
        state.entries.insert(key, Entry { value: value.into_boxed_slice(), used: false });
        state.bytes = state.bytes.saturating_add(needed);
        true
    }
}

#[cfg(test)]
mod tests;
