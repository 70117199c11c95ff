//! The approximate prefix trees: per worker, the block hashes it was given, with LRU
//! eviction. Ordered or fixed-hash containers only, so guest and native builds agree.

use std::collections::hash_map::Entry as MapEntry;
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasherDefault;

use switchyard_guest_sdk::hash::mix64;
use switchyard_guest_sdk::{Candidates, WorkerRank};

/// "No entry" in the LRU lists.
const NIL: u32 = u32::MAX;

/// One block held by one worker, a link in that worker's LRU list.
#[derive(Debug, Clone)]
struct Entry {
    hash: u64,
    worker: u32,
    /// The commit that last used it.
    tick: u64,
    /// Towards the most recently used end.
    newer: u32,
    /// Towards the least recently used end.
    older: u32,
    /// The next holder of the same block (another worker), or `NIL`.
    next_holder: u32,
}

/// One worker's tree: its LRU list and size.
#[derive(Debug, Clone)]
struct WorkerTree {
    rank: WorkerRank,
    newest: u32,
    oldest: u32,
    size: u64,
}

/// A fixed-key hasher (a `HashMap` with std's random keys would still be deterministic
/// here, as nothing iterates one, but SipHash costs more than the whole lookup).
#[derive(Default)]
struct MixHasher(u64);

impl std::hash::Hasher for MixHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = mix64(self.0 ^ u64::from(b));
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = mix64(self.0 ^ x);
    }
}

type Map<K, V> = HashMap<K, V, BuildHasherDefault<MixHasher>>;

/// The per-worker trees. Each (block, worker) is one entry, linked twice: into its
/// worker's doubly linked LRU list (a touch and an eviction are O(1)) and into the chain
/// of the block's holders (a few workers at most). No allocation per block but the entry.
#[derive(Debug, Default, Clone)]
pub(crate) struct Trees {
    /// Commits so far: the clock of `Entry::tick`.
    pub(crate) tick: u64,
    workers: Vec<WorkerTree>,
    worker_index: BTreeMap<WorkerRank, u32>,
    entries: Vec<Entry>,
    free: Vec<u32>,
    /// Block hash → its most recently added holder's entry (the head of the chain).
    holders: Map<u64, u32>,
}

impl Trees {
    pub(crate) fn size(&self, worker: WorkerRank) -> u64 {
        self.worker_index.get(&worker).map_or(0, |&w| self.workers[w as usize].size)
    }

    fn worker(&mut self, rank: WorkerRank) -> u32 {
        if let Some(&w) = self.worker_index.get(&rank) {
            return w;
        }
        let w = self.workers.len() as u32;
        self.workers.push(WorkerTree { rank, newest: NIL, oldest: NIL, size: 0 });
        self.worker_index.insert(rank, w);
        w
    }

    fn unlink(&mut self, e: u32) {
        let Entry { worker, newer, older, .. } = self.entries[e as usize];
        let tree = &mut self.workers[worker as usize];
        if newer == NIL {
            tree.newest = older
        } else {
            self.entries[newer as usize].older = older
        }
        let tree = &mut self.workers[worker as usize];
        if older == NIL { tree.oldest = newer } else { self.entries[older as usize].newer = newer }
    }

    fn push_newest(&mut self, e: u32) {
        let worker = self.entries[e as usize].worker as usize;
        let head = self.workers[worker].newest;
        self.entries[e as usize].newer = NIL;
        self.entries[e as usize].older = head;
        if head == NIL {
            self.workers[worker].oldest = e;
        } else {
            self.entries[head as usize].newer = e;
        }
        self.workers[worker].newest = e;
    }

    /// Inserts the prompt under `rank`, then evicts its least recently used blocks
    /// beyond `limit`. Blocks go in deepest first, so within one commit the deepest is
    /// the oldest: a prefix outlives its extensions.
    pub(crate) fn insert(&mut self, hashes: &[u64], rank: WorkerRank, limit: u64) {
        self.tick += 1;
        let tick = self.tick;
        let w = self.worker(rank);
        // One hash lookup per block: the entry API, and room reserved up front.
        self.holders.reserve(hashes.len());
        for &hash in hashes.iter().rev() {
            let slot = self.holders.entry(hash).or_insert(NIL);
            let mut e = *slot;
            while e != NIL && self.entries[e as usize].worker != w {
                e = self.entries[e as usize].next_holder;
            }
            if e != NIL {
                self.entries[e as usize].tick = tick;
                self.unlink(e);
            } else {
                let entry = Entry { hash, worker: w, tick, newer: NIL, older: NIL, next_holder: *slot };
                e = match self.free.pop() {
                    Some(free) => {
                        self.entries[free as usize] = entry;
                        free
                    }
                    None => {
                        self.entries.push(entry);
                        (self.entries.len() - 1) as u32
                    }
                };
                *slot = e;
                self.workers[w as usize].size += 1;
            }
            self.push_newest(e);
        }
        while self.workers[w as usize].size > limit {
            let e = self.workers[w as usize].oldest;
            self.unlink(e);
            self.unchain(e);
            self.free.push(e);
            self.workers[w as usize].size -= 1;
        }
    }

    /// Removes entry `e` from its block's chain of holders.
    fn unchain(&mut self, e: u32) {
        let Entry { hash, next_holder, .. } = self.entries[e as usize];
        let MapEntry::Occupied(mut head) = self.holders.entry(hash) else { return };
        if *head.get() == e {
            if next_holder == NIL {
                head.remove();
            } else {
                head.insert(next_holder);
            }
            return;
        }
        let mut p = *head.get();
        while p != NIL {
            let next = self.entries[p as usize].next_holder;
            if next == e {
                self.entries[p as usize].next_holder = next_holder;
                return;
            }
            p = next;
        }
    }

    /// (blocks matched, owner row) of the longest prefix a candidate holds; the owner is
    /// the holder of the deepest matched block that used it last.
    pub(crate) fn longest_match(
        &self,
        hashes: &[u64],
        candidates: &Candidates<'_>,
    ) -> (usize, Option<usize>) {
        let mut best = (0, None);
        for (i, hash) in hashes.iter().enumerate() {
            let mut owner: Option<(u64, usize)> = None;
            let mut e = self.holders.get(hash).copied().unwrap_or(NIL);
            while e != NIL {
                let entry = &self.entries[e as usize];
                e = entry.next_holder;
                let Some(row) = row_of(candidates, self.workers[entry.worker as usize].rank) else {
                    continue;
                };
                // The newest use wins; on a tie (never within one worker) the later holder.
                if owner.is_none_or(|(newest, _)| entry.tick > newest) {
                    owner = Some((entry.tick, row));
                }
            }
            match owner {
                Some((_, row)) => best = (i + 1, Some(row)),
                None => break,
            }
        }
        best
    }
}

/// The row of `worker` among the candidates (rows ascend by worker id, then rank).
fn row_of(candidates: &Candidates<'_>, worker: WorkerRank) -> Option<usize> {
    let (ids, ranks) = (candidates.worker_ids(), candidates.dp_ranks());
    let (mut lo, mut hi) = (0, ids.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match (ids[mid], ranks[mid]).cmp(&(worker.worker_id, worker.dp_rank)) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Some(mid),
        }
    }
    None
}
