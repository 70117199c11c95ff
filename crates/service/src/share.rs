//! Each tenant's share of the selection slots, and whether its guests have run fast
//! enough for its selections to run on a connection's thread (`select::Prepared::inline`).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The most CPU time a tenant's guest selection may take and still leave the tenant
/// trusted to run on a connection's thread: a slower one (or a fault) sends the tenant's
/// selections to the blocking threads for [`INLINE_DEMOTION`]. Well above a legitimate
/// policy's call at `max_slots` candidates, well below what a guest spending its whole
/// fuel takes (BENCHMARKS.md, "Hostile guests"). The thread's CPU clock, not the wall's:
/// a call preempted on a busy host is not slower for it.
const INLINE_MAX: Duration = Duration::from_millis(1);
/// How long a tenant whose guest was slow, or faulted, runs off the connections' threads.
const INLINE_DEMOTION: Duration = Duration::from_secs(10);
/// Guest selections a tenant must have run in a row, each within [`INLINE_MAX`] and
/// without a fault, before its selections run on a connection's thread.
const INLINE_TRUST: u32 = 64;

/// A tenant's selections in flight, and whether its guests have been fast enough to run
/// on a connection's thread (see `Prepared::inline`).
#[derive(Debug, Default)]
pub(crate) struct TenantShare {
    pub(crate) in_flight: AtomicUsize,
    /// Guest selections in a row within [`INLINE_MAX`], up to [`INLINE_TRUST`].
    fast: AtomicU32,
    /// Until when (ms since the share was made) the tenant is off the connections'
    /// threads after a slow or faulted guest selection.
    demoted_until_ms: AtomicU64,
    since: OnceLock<Instant>,
}

impl TenantShare {
    fn now_ms(&self) -> u64 {
        self.since.get_or_init(Instant::now).elapsed().as_millis() as u64
    }

    pub(crate) fn trusted(&self) -> bool {
        self.fast.load(Ordering::Relaxed) >= INLINE_TRUST
            && self.now_ms() >= self.demoted_until_ms.load(Ordering::Relaxed)
    }

    /// After a guest selection of the tenant's that took `took` of CPU time.
    pub(crate) fn ran_guest(&self, took: Duration, faulted: bool) {
        if faulted || took > INLINE_MAX {
            self.fast.store(0, Ordering::Relaxed);
            let until = self.now_ms() + INLINE_DEMOTION.as_millis() as u64;
            self.demoted_until_ms.fetch_max(until, Ordering::Relaxed);
        } else {
            let _ = self
                .fast
                .try_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < INLINE_TRUST).then_some(n + 1));
        }
    }
}

/// The CPU time this thread has used.
pub(crate) fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_runs_on_the_connections_thread_only_after_fast_guests_and_not_after_a_slow_one() {
        let share = TenantShare::default();
        let fast = Duration::from_micros(5);
        for _ in 1..INLINE_TRUST {
            share.ran_guest(fast, false);
            assert!(!share.trusted(), "not before {INLINE_TRUST} fast selections");
        }
        share.ran_guest(fast, false);
        assert!(share.trusted());
        // One slow call: off the connections' threads, and fast ones within the window
        // do not bring it back.
        share.ran_guest(INLINE_MAX + Duration::from_micros(1), false);
        for _ in 0..2 * INLINE_TRUST {
            share.ran_guest(fast, false);
        }
        assert!(!share.trusted(), "demoted for {INLINE_DEMOTION:?}");
        // A fault demotes likewise.
        let share = TenantShare::default();
        for _ in 0..INLINE_TRUST {
            share.ran_guest(fast, false);
        }
        share.ran_guest(fast, true);
        assert!(!share.trusted());
    }

    #[test]
    fn the_guests_time_is_the_threads_cpu_not_the_walls() {
        let before = thread_cpu();
        std::thread::sleep(Duration::from_millis(20));
        assert!(thread_cpu() - before < Duration::from_millis(5), "sleeping uses no CPU");
        // Spinning does: the clock moves while the thread runs (however often a busy host
        // preempts it; the wall-clock bound only keeps a broken clock from hanging).
        let before = thread_cpu();
        let start = Instant::now();
        while thread_cpu() - before < Duration::from_millis(5) {
            assert!(start.elapsed() < Duration::from_secs(30), "the thread's clock does not move");
        }
    }
}
