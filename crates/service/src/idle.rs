//! The idle instances of every version together, against `max_idle_instances`: idle
//! instances hold slots of the engine's pool (and their memory), so they are bounded in
//! total, leaving the pool's other slots to selections in flight. When every slot is
//! taken, a version checking an instance in takes the slot of the instance that has been
//! idle longest, whichever version it is of: the idle instances are the recently used
//! ones, so a busy tenant keeps its instances warm however many versions selected once
//! before it.
//!
//! Counted slots alone do not bound memory: an idle instance keeps whatever its guest
//! touched (tens of KiB for the default policy, up to `max_memory_bytes` for a guest that
//! fills its memory), though nothing of its last request (`GuardedSelector::release` at
//! check-in: a request's rows, up to `max_slots` of them, would otherwise stay with it).
//! So the idle instances are also shed, longest idle first, while the process's resident
//! memory is over `idle_rss_limit_mb`, and none is kept until it is
//! back under (read at most every [`RSS_CHECK_EVERY`]): however much memory guests touch,
//! idle instances do not hold the process above that limit for more than a few
//! check-ins. (Those shed are the longest idle, not the largest: a guest that fills its
//! memory makes other versions' idle instances go too, back to fresh instances.)

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// What keeps idle instances: a version, which drops the one whose slot another needs.
pub(crate) trait IdleOwner: Send + Sync {
    /// Drops the idle instance whose slot is `stamp`, if it is still kept.
    fn drop_idle(&self, stamp: u64);
}

/// Every idle slot, held and by whom.
#[derive(Debug)]
pub struct IdleSlots {
    held: AtomicUsize,
    max: usize,
    /// Each idle instance kept, by the order it was checked in (oldest first) → its
    /// version. Exactly the slots held: a slot removes its own entry when it is dropped.
    kept: Mutex<BTreeMap<u64, Weak<dyn IdleOwner>>>,
    next: AtomicU64,
    /// Resident bytes above which idle instances are shed; 0: no such bound.
    rss_limit: u64,
    /// When resident memory was last checked, ms after `started` ([`NEVER`] before the
    /// first check-in, which always checks).
    rss_checked_ms: AtomicU64,
    /// Whether it was over the limit when last checked.
    over: AtomicBool,
    started: Instant,
}

/// How often a check-in looks at the process's resident memory (a read of
/// `/proc/self/status`, a few µs).
pub(crate) const RSS_CHECK_EVERY: Duration = Duration::from_millis(200);
/// [`IdleSlots::rss_checked_ms`] before any check.
const NEVER: u64 = u64::MAX;
/// Idle instances shed at a time before resident memory is read again.
const SHED_BATCH: usize = 64;

/// Tries of [`IdleSlots::take`] to free a slot before it gives up (each may find an
/// entry whose instance was checked out meanwhile).
const TRIES: usize = 4;

impl IdleSlots {
    /// At most `max` idle instances, shed while resident memory is over `rss_limit`
    /// bytes (0: no memory bound).
    pub(crate) fn new(max: usize, rss_limit: u64) -> Arc<Self> {
        Arc::new(Self {
            held: AtomicUsize::new(0),
            max,
            kept: Mutex::default(),
            next: AtomicU64::new(0),
            rss_limit,
            rss_checked_ms: AtomicU64::new(NEVER),
            over: AtomicBool::new(false),
            started: Instant::now(),
        })
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Weak<dyn IdleOwner>>> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a slot for one more idle instance of `owner`: a free one, or else the slot
    /// of the instance idle longest (which `owner` drops). The slot is given back when
    /// the answer is dropped, with the idle instance it is kept beside. The caller holds
    /// none of the versions' idle locks (the one freeing a slot may be its own).
    pub(crate) fn take(self: &Arc<Self>, owner: &Weak<dyn IdleOwner>) -> Option<IdleSlot> {
        if self.over_memory() {
            self.shed();
            return None;
        }
        for _ in 0..TRIES {
            let free = self
                .held
                .try_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.max).then_some(n + 1));
            if free.is_ok() {
                let stamp = self.next.fetch_add(1, Ordering::Relaxed);
                self.kept().insert(stamp, owner.clone());
                return Some(IdleSlot { slots: Arc::clone(self), stamp });
            }
            let oldest = self.kept().pop_first();
            let (stamp, version) = oldest?;
            if let Some(version) = version.upgrade() {
                version.drop_idle(stamp);
            }
        }
        None
    }

    /// Whether resident memory is over the limit, as last read: it is read again at
    /// most every [`RSS_CHECK_EVERY`] (by whichever check-in or eviction pass comes
    /// first).
    pub(crate) fn over_memory(&self) -> bool {
        if self.rss_limit == 0 {
            return false;
        }
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let last = self.rss_checked_ms.load(Ordering::Relaxed);
        let due = last == NEVER || now.saturating_sub(last) >= RSS_CHECK_EVERY.as_millis() as u64;
        if due && self.rss_checked_ms.compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed).is_ok()
        {
            let over = resident_bytes().is_some_and(|rss| rss > self.rss_limit);
            self.over.store(over, Ordering::Release);
        }
        self.over.load(Ordering::Acquire)
    }

    /// Drops up to [`SHED_BATCH`] idle instances, longest idle first, and reads resident
    /// memory again. One batch per check-in: the check-in's own selection pays for at
    /// most that many memory resets, and the next check-ins shed more while it is over.
    fn shed(&self) {
        for _ in 0..SHED_BATCH {
            let Some((stamp, version)) = self.kept().pop_first() else { break };
            if let Some(version) = version.upgrade() {
                version.drop_idle(stamp);
            }
        }
        if resident_bytes().is_none_or(|rss| rss <= self.rss_limit) {
            self.over.store(false, Ordering::Release);
        }
    }

    /// Idle instances kept now, across every version.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }
}

/// The process's resident memory, bytes (`None` where `/proc` does not say).
pub(crate) fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// One of the `max_idle_instances` slots, owned by the idle instance it is kept with:
/// however that instance leaves its pool (checked out, taken for another version's,
/// its version retired or dropped whole), the slot comes back with it.
#[derive(Debug)]
pub(crate) struct IdleSlot {
    slots: Arc<IdleSlots>,
    /// When it was taken: its place among the idle instances, oldest first.
    stamp: u64,
}

impl IdleSlot {
    /// Its place among the idle instances.
    pub(crate) fn stamp(&self) -> u64 {
        self.stamp
    }
}

impl Drop for IdleSlot {
    fn drop(&mut self) {
        self.slots.kept().remove(&self.stamp);
        self.slots.held.fetch_sub(1, Ordering::AcqRel);
    }
}
