//! The idle instances of every version together, against `max_idle_instances`: idle
//! instances hold slots of the engine's pool (and their memory), so they are bounded in
//! total, leaving the pool's other slots to selections in flight. When every slot is
//! taken, a version checking an instance in takes the slot of the instance that has been
//! idle longest, whichever version it is of: the idle instances are the recently used
//! ones, so a busy tenant keeps its instances warm however many versions selected once
//! before it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

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
}

/// Tries of [`IdleSlots::take`] to free a slot before it gives up (each may find an
/// entry whose instance was checked out meanwhile).
const TRIES: usize = 4;

impl IdleSlots {
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Arc::new(Self { held: AtomicUsize::new(0), max, kept: Mutex::default(), next: AtomicU64::new(0) })
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Weak<dyn IdleOwner>>> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a slot for one more idle instance of `owner`: a free one, or else the slot
    /// of the instance idle longest (which `owner` drops). The slot is given back when
    /// the answer is dropped, with the idle instance it is kept beside. The caller holds
    /// none of the versions' idle locks (the one freeing a slot may be its own).
    pub(crate) fn take(self: &Arc<Self>, owner: &Weak<dyn IdleOwner>) -> Option<IdleSlot> {
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

    /// Idle instances kept now, across every version.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }
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
