//! A class's live trials, as this replica sees them: its shadow's comparison with the
//! live policy, its canary's faults, the selections it captures, and the queue shadow
//! runs wait on. In memory, per replica: the settings travel through the registry, the
//! counts do not.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use sha2::{Digest, Sha256};
use switchyard::selection::compare::{Compared, Tally, quantile};
use switchyard::selection::wire::api::{Disagreement, Latency, ShadowReport};
use switchyard::selection::wire::{CandidateCost, RequestJson, WorkerJson};
use switchyard::selection::{WorkerInputs, WorkerTable};

use crate::store::{Canary, Shadow};

/// Regrets and latencies a shadow's report keeps (the most recent) for its quantiles.
const KEEP: usize = 4_096;
/// Disagreements a shadow's report lists, the most recent.
const DISAGREEMENTS: usize = 16;
/// Candidates of each side a disagreement lists.
const TOP: usize = 3;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Every class's trials on this replica, made on a class's first selection that has one.
#[derive(Default)]
pub(crate) struct Trials {
    classes: Mutex<HashMap<(String, String), Arc<ClassTrials>>>,
    /// Each tenant's captured bytes, across its classes.
    captured: Mutex<HashMap<String, Arc<AtomicUsize>>>,
}

impl Trials {
    /// `class` of `tenant`'s trials, made if new.
    pub(crate) fn of(&self, tenant: &str, class: &str) -> Arc<ClassTrials> {
        let mut classes = lock(&self.classes);
        if let Some(t) = classes.get(&(tenant.to_string(), class.to_string())) {
            return Arc::clone(t);
        }
        let bytes = Arc::clone(lock(&self.captured).entry(tenant.to_string()).or_default());
        let trials = Arc::new(ClassTrials {
            tenant: tenant.to_string(),
            class: class.to_string(),
            sampled: AtomicU64::new(0),
            shadow: Mutex::default(),
            canary: Mutex::default(),
            capture: Mutex::new(Capture {
                keep: 0,
                lines: VecDeque::new(),
                bytes: 0,
                tenant_bytes: bytes,
                started: None,
            }),
        });
        classes.insert((tenant.to_string(), class.to_string()), Arc::clone(&trials));
        trials
    }

    /// `class` of `tenant`'s trials, if it has any on this replica.
    pub(crate) fn get(&self, tenant: &str, class: &str) -> Option<Arc<ClassTrials>> {
        lock(&self.classes).get(&(tenant.to_string(), class.to_string())).cloned()
    }

    /// Registers each class's shadow and canary counters for one scrape.
    pub(crate) fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        let mut classes: Vec<Arc<ClassTrials>> = lock(&self.classes).values().cloned().collect();
        classes.sort_by(|a, b| (&a.tenant, &a.class).cmp(&(&b.tenant, &b.class)));
        let shadow = Family::<OutcomeLabels, Counter>::default();
        let canary = Family::<OutcomeLabels, Counter>::default();
        let rollbacks = Family::<ClassLabels, Counter>::default();
        for t in &classes {
            let label = |outcome: &str| OutcomeLabels {
                tenant: t.tenant.clone(),
                class: t.class.clone(),
                outcome: outcome.to_string(),
            };
            let s = lock(&t.shadow);
            if s.of.is_some() {
                let summary = s.tally.summary();
                shadow.get_or_create(&label("agree")).inc_by(summary.agreed);
                shadow.get_or_create(&label("disagree")).inc_by(summary.compared - summary.agreed);
                shadow.get_or_create(&label("fault")).inc_by(s.faults.values().sum());
                shadow.get_or_create(&label("dropped")).inc_by(s.dropped.values().sum());
            }
            drop(s);
            let c = lock(&t.canary);
            if c.since.is_some() {
                canary.get_or_create(&label("ok")).inc_by(c.selections - c.faults);
                canary.get_or_create(&label("fault")).inc_by(c.faults);
            }
            if c.rollbacks > 0 {
                rollbacks
                    .get_or_create(&ClassLabels { tenant: t.tenant.clone(), class: t.class.clone() })
                    .inc_by(c.rollbacks);
            }
        }
        registry.register(
            "switchyard_shadow_selections",
            "Selections sampled for a class's shadow on this replica, by outcome: agree, disagree (with the live pick), fault (the shadow's), dropped (not run: its queue was full)",
            shadow,
        );
        registry.register(
            "switchyard_canary_selections",
            "Selections a class's canary decided on this replica, by outcome: ok, fault (answered by the stable version instead)",
            canary,
        );
        registry.register(
            "switchyard_canary_rollbacks",
            "Canaries this replica rolled back by themselves (fault rate or breaker)",
            rollbacks,
        );
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    tenant: String,
    class: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    tenant: String,
    class: String,
}

/// One class's trials.
pub(crate) struct ClassTrials {
    tenant: String,
    class: String,
    /// Selections seen while a shadow was set: which are sampled.
    sampled: AtomicU64,
    shadow: Mutex<ShadowTally>,
    canary: Mutex<CanaryTally>,
    capture: Mutex<Capture>,
}

impl ClassTrials {
    /// Whether this selection is one of the shadow's share: every selection while the
    /// count of sampled ones is behind `rate` of those seen (so 10 % is every tenth,
    /// evenly, not at random).
    pub(crate) fn sample(&self, rate: f64) -> bool {
        let n = self.sampled.fetch_add(1, Ordering::Relaxed);
        ((n + 1) as f64 * rate).floor() > (n as f64 * rate).floor()
    }

    /// Starts a shadow run of `shadow`: counted as sampled, the tally reset if the shadow
    /// is not the one it counted.
    pub(crate) fn shadow_sampled(&self, shadow: &Shadow) {
        let mut s = lock(&self.shadow);
        if s.of.as_ref() != Some(shadow) {
            s.reset_unless(shadow);
        }
        s.sampled += 1;
    }

    /// A sampled selection not shadowed, and why.
    pub(crate) fn shadow_dropped(&self, why: &'static str) {
        *lock(&self.shadow).dropped.entry(why).or_default() += 1;
    }

    /// A shadow run that faulted (of this kind).
    pub(crate) fn shadow_fault(&self, shadow: &Shadow, kind: String) {
        let mut s = lock(&self.shadow);
        if s.of.as_ref() == Some(shadow) {
            *s.faults.entry(kind).or_default() += 1;
        }
    }

    /// A shadow run compared with the live one.
    pub(crate) fn shadow_ran(&self, shadow: &Shadow, run: ShadowRun) {
        // Built before the lock: the live selections take it too.
        let disagreement = (!run.compared.agree).then(|| Disagreement {
            seed: run.seed,
            live: run.live_pick,
            shadow: run.shadow_pick,
            regret: run.compared.regret,
            live_top: cheapest(run.live_costs),
            shadow_top: cheapest(run.shadow_costs),
        });
        let mut s = lock(&self.shadow);
        if s.of.as_ref() != Some(shadow) {
            return;
        }
        s.tally.add(run.compared);
        push(&mut s.live_us, run.live.as_secs_f64() * 1e6, KEEP);
        push(&mut s.shadow_us, run.took.as_secs_f64() * 1e6, KEEP);
        if let Some(disagreement) = disagreement {
            push(&mut s.disagreements, disagreement, DISAGREEMENTS);
        }
    }

    /// The shadow's report, `live` filled by the caller, `shadow` the class's: the tally
    /// of that shadow (none yet, if it has not run since it was set), or with none set, of
    /// the last one.
    pub(crate) fn shadow_report(&self, report: &mut ShadowReport) {
        let s = lock(&self.shadow);
        let counted = |set: &Shadow, of: &Shadow| set.policy == of.policy && set.version == of.version;
        match (&report.shadow, &s.of) {
            (Some(set), Some(of)) if !counted(set, of) => return,
            (None, of) => report.shadow = of.clone(),
            _ => {}
        }
        report.sampled = s.sampled;
        report.dropped = s.dropped.iter().map(|(k, n)| (k.to_string(), *n)).collect();
        report.faults = s.faults.clone();
        report.comparison = s.tally.summary();
        report.latency = [("live", &s.live_us), ("shadow", &s.shadow_us)]
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.to_string(), latency(v)))
            .collect();
        report.disagreements = s.disagreements.iter().cloned().collect();
    }

    /// Whether a request with this key goes to `canary`: the key's bucket of 10,000, a
    /// hash of the class and key, is below the weight's. So a key stays on one version
    /// while the weight does not change, and one on the canary stays there as it grows.
    pub(crate) fn to_canary(&self, canary: &Canary, key: CanaryKey<'_>) -> bool {
        if lock(&self.canary).rolled_back.as_ref() == Some(&canary.since) {
            return false;
        }
        let mut hash = Sha256::new();
        hash.update(self.class.as_bytes());
        match key {
            CanaryKey::Session(s) => {
                hash.update(b"\0session\0");
                hash.update(s.as_bytes());
            }
            CanaryKey::Seed(seed) => {
                hash.update(b"\0seed\0");
                hash.update(seed.to_le_bytes());
            }
        }
        let digest = hash.finalize();
        let bucket = u64::from_le_bytes(digest[..8].try_into().expect("8 bytes")) % 10_000;
        (bucket as f64) < canary.weight * 100.0
    }

    /// A selection the canary decided, or faulted on; `breaker_open`, whether its
    /// version's breaker is open now. The reason to roll it back, the first time it must
    /// be (from then on no request goes to it here).
    pub(crate) fn canary_ran(&self, canary: &Canary, faulted: bool, breaker_open: bool) -> Option<String> {
        let mut c = lock(&self.canary);
        if c.since != Some(canary.since) {
            *c = CanaryTally { since: Some(canary.since), rollbacks: c.rollbacks, ..CanaryTally::default() };
        }
        if c.rolled_back.is_some() {
            return None;
        }
        c.selections += 1;
        c.faults += u64::from(faulted);
        push(&mut c.recent, faulted, canary.window as usize);
        let in_window = c.recent.iter().filter(|f| **f).count();
        let rate = in_window as f64 / c.recent.len() as f64;
        let reason = if breaker_open {
            Some("its breaker opened".to_string())
        } else if c.selections >= u64::from(canary.min_selections) && rate > canary.max_fault_rate {
            Some(format!(
                "{in_window} faults in its last {} selections: a fault rate of {rate:.3} is over max_fault_rate {}",
                c.recent.len(),
                canary.max_fault_rate
            ))
        } else {
            None
        };
        if reason.is_some() {
            c.rolled_back = Some(canary.since);
            c.rollbacks += 1;
        }
        reason
    }

    /// This replica's count of `canary`'s selections and faults; with none running, of
    /// the last one.
    pub(crate) fn canary_counts(&self, canary: Option<&Canary>) -> (u64, u64) {
        let c = lock(&self.canary);
        match canary {
            Some(canary) if c.since != Some(canary.since) => (0, 0),
            _ => (c.selections, c.faults),
        }
    }

    /// Keeps one selection, `line` (a captured trace's line), of a class capturing `keep`:
    /// the oldest go while the class holds more, or the tenant's classes more than
    /// `max_bytes` together.
    pub(crate) fn capture(&self, keep: usize, max_bytes: usize, line: impl FnOnce(u64) -> Vec<u8>) {
        let mut c = lock(&self.capture);
        if c.keep != keep {
            c.keep = keep;
        }
        let started = *c.started.get_or_insert_with(Instant::now);
        let ms = started.elapsed().as_millis() as u64;
        let line = line(ms).into_boxed_slice();
        c.bytes += line.len();
        c.tenant_bytes.fetch_add(line.len(), Ordering::Relaxed);
        c.lines.push_back(line);
        while c.lines.len() > c.keep
            || (c.tenant_bytes.load(Ordering::Relaxed) > max_bytes && !c.lines.is_empty())
        {
            c.drop_oldest();
        }
    }

    /// The captured selections, oldest first, a JSON line each.
    pub(crate) fn captured(&self) -> Vec<u8> {
        let c = lock(&self.capture);
        let mut out = Vec::with_capacity(c.bytes + c.lines.len());
        for line in &c.lines {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
        out
    }

    /// Forgets the captured selections (the class stopped capturing).
    pub(crate) fn clear_capture(&self) {
        let mut c = lock(&self.capture);
        while !c.lines.is_empty() {
            c.drop_oldest();
        }
        c.started = None;
    }
}

/// What keeps a request on one version while a canary runs.
#[derive(Clone, Copy)]
pub(crate) enum CanaryKey<'a> {
    /// The request's `session`.
    Session(&'a str),
    /// Else its `seed`.
    Seed(u64),
}

/// One shadow run, for its tally.
pub(crate) struct ShadowRun {
    pub(crate) seed: u64,
    pub(crate) compared: Compared,
    pub(crate) live_pick: CandidateCost,
    pub(crate) shadow_pick: CandidateCost,
    pub(crate) live_costs: Vec<CandidateCost>,
    pub(crate) shadow_costs: Vec<CandidateCost>,
    /// The live selection's time, and the shadow's call's.
    pub(crate) live: Duration,
    pub(crate) took: Duration,
}

struct ShadowTally {
    /// The shadow counted: another resets the tally.
    of: Option<Shadow>,
    sampled: u64,
    dropped: BTreeMap<&'static str, u64>,
    faults: BTreeMap<String, u64>,
    tally: Tally,
    live_us: VecDeque<f64>,
    shadow_us: VecDeque<f64>,
    disagreements: VecDeque<Disagreement>,
}

impl Default for ShadowTally {
    fn default() -> Self {
        Self {
            of: None,
            sampled: 0,
            dropped: BTreeMap::new(),
            faults: BTreeMap::new(),
            tally: Tally::new(KEEP),
            live_us: VecDeque::new(),
            shadow_us: VecDeque::new(),
            disagreements: VecDeque::new(),
        }
    }
}

impl ShadowTally {
    /// Resets the tally unless it counts `shadow` (its policy and version: a new rate
    /// goes on counting).
    fn reset_unless(&mut self, shadow: &Shadow) {
        let same = self.of.as_ref().is_some_and(|s| s.policy == shadow.policy && s.version == shadow.version);
        if !same {
            *self = ShadowTally { of: Some(shadow.clone()), ..ShadowTally::default() };
        } else {
            self.of = Some(shadow.clone());
        }
    }
}

#[derive(Default)]
struct CanaryTally {
    /// The canary counted (its `since`): another resets the counts.
    since: Option<u64>,
    selections: u64,
    faults: u64,
    /// Whether each of the last `window` canary selections faulted.
    recent: VecDeque<bool>,
    /// The canary this replica rolled back (no request goes to it any more).
    rolled_back: Option<u64>,
    /// Canaries rolled back here, for the counter.
    rollbacks: u64,
}

struct Capture {
    keep: usize,
    lines: VecDeque<Box<[u8]>>,
    bytes: usize,
    /// The tenant's captured bytes, across its classes.
    tenant_bytes: Arc<AtomicUsize>,
    /// When the first line was captured: timestamps count from it.
    started: Option<Instant>,
}

impl Capture {
    fn drop_oldest(&mut self) {
        if let Some(line) = self.lines.pop_front() {
            self.bytes -= line.len();
            self.tenant_bytes.fetch_sub(line.len(), Ordering::Relaxed);
        }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.tenant_bytes.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

fn push<T>(ring: &mut VecDeque<T>, value: T, keep: usize) {
    if keep == 0 {
        return;
    }
    while ring.len() >= keep {
        ring.pop_front();
    }
    ring.push_back(value);
}

/// The `TOP` cheapest of `costs`, cheapest first (selected in linear time, then sorted).
fn cheapest(mut costs: Vec<CandidateCost>) -> Vec<CandidateCost> {
    let order = |a: &CandidateCost, b: &CandidateCost| a.cost.total_cmp(&b.cost);
    if costs.len() > TOP {
        costs.select_nth_unstable_by(TOP, order);
        costs.truncate(TOP);
    }
    costs.sort_by(order);
    costs
}

fn latency(us: &VecDeque<f64>) -> Latency {
    let mut sorted: Vec<f64> = us.iter().copied().collect();
    sorted.sort_unstable_by(f64::total_cmp);
    Latency { p50_us: quantile(&sorted, 0.5), p99_us: quantile(&sorted, 0.99) }
}

/// A captured trace's line: a Mooncake trace row (so `switchyard replay` runs it), the
/// whole request (workers and inputs as the policy saw them, so `replay --against` runs
/// both policies on exactly it), and the answer.
pub(crate) fn captured_line(
    ms: u64,
    mut facts: RequestJson,
    table: &WorkerTable,
    inputs: &WorkerInputs,
    answer: serde_json::Value,
) -> Vec<u8> {
    facts.workers = table.workers().iter().map(WorkerJson::from_worker).collect();
    facts.inputs = inputs.clone();
    let hash_ids = facts.prefix_hashes.clone().unwrap_or_default();
    let line = serde_json::json!({
        "timestamp": ms,
        "input_length": facts.prompt_tokens,
        "output_length": facts.expected_output_tokens.unwrap_or(0),
        "hash_ids": hash_ids,
        "request": facts,
        "answer": answer,
    });
    serde_json::to_vec(&line).expect("a captured line serializes")
}

/// The queue shadow runs wait on, and the threads that run them at the lowest CPU
/// priority: a shadow never takes a core from a live selection, and when the cores are
/// busy its samples queue, then drop (counted), instead.
pub(crate) struct ShadowQueue {
    jobs: SyncSender<Job>,
    /// The threads' end, kept here too: the queue stays open whatever becomes of them.
    _queued: Arc<Mutex<Receiver<Job>>>,
    /// Each tenant's runs waiting or running.
    per_tenant: Arc<Mutex<HashMap<String, usize>>>,
    max_per_tenant: usize,
}

type Job = Box<dyn FnOnce() + Send>;

impl ShadowQueue {
    /// A queue of `capacity` runs, `max_per_tenant` of one tenant's, and `threads` to run
    /// them, each within `cpu_percent` of a core.
    pub(crate) fn start(capacity: usize, max_per_tenant: usize, threads: usize, cpu_percent: usize) -> Self {
        let share = (cpu_percent.clamp(1, 100)) as f64 / 100.0;
        let (jobs, queued) = std::sync::mpsc::sync_channel::<Job>(capacity);
        let queued = Arc::new(Mutex::new(queued));
        for n in 0..threads {
            let queued = Arc::clone(&queued);
            let spawned = std::thread::Builder::new().name(format!("shadow-{n}")).spawn(move || {
                lowest_priority();
                run_jobs(&queued, share);
            });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "starting a shadow thread");
            }
        }
        Self { jobs, _queued: queued, per_tenant: Arc::default(), max_per_tenant }
    }

    /// A place for one of `tenant`'s shadow runs, unless it has its share of the queue
    /// waiting or running (`Err("tenant-full")`). Given back when the run ends, or when
    /// the place is dropped unused.
    pub(crate) fn reserve(&self, tenant: &str) -> Result<Release, &'static str> {
        let mut counts = lock(&self.per_tenant);
        let n = counts.entry(tenant.to_string()).or_default();
        if *n >= self.max_per_tenant {
            return Err("tenant-full");
        }
        *n += 1;
        Ok(Release { per_tenant: Arc::clone(&self.per_tenant), tenant: tenant.to_string() })
    }

    /// Queues `job` in its reserved place, unless the queue is full (`Err("queue-full")`).
    /// Never blocks.
    pub(crate) fn push(
        &self,
        release: Release,
        job: impl FnOnce() + Send + 'static,
    ) -> Result<(), &'static str> {
        let job: Job = Box::new(move || {
            let _release = release;
            job();
        });
        match self.jobs.try_send(job) {
            Ok(()) => Ok(()),
            // The job is dropped here, and with it its share.
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => Err("queue-full"),
        }
    }
}

/// Puts this thread at the lowest CPU priority: Linux's `SCHED_IDLE` (it runs only on a
/// core nothing else wants, and any other thread waking preempts it at once), else nice 19.
fn lowest_priority() {
    use thread_priority::unix::{
        NormalThreadSchedulePolicy, ThreadSchedulePolicy, set_thread_priority_and_policy, thread_native_id,
    };
    let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
    if let Err(e) =
        set_thread_priority_and_policy(thread_native_id(), thread_priority::ThreadPriority::Min, idle)
    {
        tracing::debug!(error = ?e, "SCHED_IDLE refused: nice 19 instead");
        let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19);
    }
}

/// Runs queued jobs until the queue closes, resting after each so that the thread's CPU
/// time stays within `share` of the time passed.
fn run_jobs(queued: &Mutex<Receiver<Job>>, share: f64) {
    loop {
        let job = match lock(queued).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        let before = crate::share::thread_cpu();
        // A panic in one run (a bug of ours) must not end the thread.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
        let used = crate::share::thread_cpu().saturating_sub(before);
        std::thread::sleep(used.mul_f64((1.0 - share) / share));
    }
}

/// A tenant's place in the shadow queue, given back when its run ends (or is dropped).
pub(crate) struct Release {
    per_tenant: Arc<Mutex<HashMap<String, usize>>>,
    tenant: String,
}

impl Drop for Release {
    fn drop(&mut self) {
        let mut counts = lock(&self.per_tenant);
        if let Some(n) = counts.get_mut(&self.tenant) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canary(weight: f64) -> Canary {
        Canary {
            policy: "p".into(),
            version: Some("v".into()),
            weight,
            max_fault_rate: 0.25,
            min_selections: 4,
            window: 8,
            since: 1,
        }
    }

    #[test]
    fn sampling_takes_the_rate_evenly() {
        let t = Trials::default().of("a", "c");
        let taken = (0..1000).filter(|_| t.sample(0.1)).count();
        assert_eq!(taken, 100);
        let t = Trials::default().of("a", "c");
        assert_eq!((0..10).filter(|_| t.sample(1.0)).count(), 10);
        assert_eq!((0..10).filter(|_| t.sample(0.0)).count(), 0);
    }

    #[test]
    fn a_key_stays_on_its_version_and_a_growing_weight_keeps_the_canarys_keys() {
        let t = Trials::default().of("a", "c");
        let on = |w: f64, seed: u64| t.to_canary(&canary(w), CanaryKey::Seed(seed));
        let at_10: Vec<u64> = (0..10_000).filter(|s| on(10.0, *s)).collect();
        assert!((800..1200).contains(&at_10.len()), "about 10 %: {}", at_10.len());
        assert!(at_10.iter().all(|s| on(10.0, *s)), "the same answer every time");
        assert!(at_10.iter().all(|s| on(30.0, *s)), "still on the canary at a larger weight");
        assert_eq!((0..1000).filter(|s| on(0.0, *s)).count(), 0);
        assert_eq!((0..1000).filter(|s| on(100.0, *s)).count(), 1000);
        // A session keys apart from the seed.
        assert!(t.to_canary(&canary(100.0), CanaryKey::Session("s")));
    }

    #[test]
    fn a_canary_rolls_back_once_past_its_fault_rate_and_takes_no_more_requests() {
        let t = Trials::default().of("a", "c");
        let c = canary(100.0);
        // Under min_selections a fault alone does not judge it.
        assert_eq!(t.canary_ran(&c, true, false), None);
        assert_eq!(t.canary_ran(&c, false, false), None);
        assert_eq!(t.canary_ran(&c, false, false), None);
        let reason = t.canary_ran(&c, true, false).expect("2 of 4 is over 0.25");
        assert!(reason.contains("2 faults in its last 4 selections"), "{reason}");
        assert_eq!(t.canary_ran(&c, true, false), None, "rolled back once");
        assert!(!t.to_canary(&c, CanaryKey::Seed(1)));
        // A new canary starts afresh; an open breaker rolls it back at once.
        let next = Canary { since: 2, ..c };
        assert!(t.to_canary(&next, CanaryKey::Seed(1)));
        assert_eq!(t.canary_ran(&next, false, true).as_deref(), Some("its breaker opened"));
    }

    #[test]
    fn captures_keep_the_last_selections_within_the_tenants_bytes() {
        let trials = Trials::default();
        let (a, b) = (trials.of("t", "a"), trials.of("t", "b"));
        for n in 0..10u8 {
            a.capture(4, 100, |_| vec![b'0' + n; 10]);
        }
        assert_eq!(a.captured(), b"6666666666\n7777777777\n8888888888\n9999999999\n");
        // The tenant's bytes are shared: b's lines push it over and b drops its own.
        for _ in 0..10 {
            b.capture(100, 100, |_| vec![b'x'; 20]);
        }
        let total = a.captured().len() - 4 + b.captured().len()
            - b.captured().iter().filter(|c| **c == b'\n').count();
        assert!(total <= 100, "{total}");
        a.clear_capture();
        assert!(a.captured().is_empty());
    }

    #[test]
    fn a_tenant_has_its_share_of_the_shadow_queue() {
        let queue = ShadowQueue::start(8, 2, 0, 25);
        let push = |tenant: &str| queue.reserve(tenant).and_then(|place| queue.push(place, || ()));
        assert_eq!(push("a"), Ok(()));
        assert_eq!(push("a"), Ok(()));
        assert_eq!(push("a").unwrap_err(), "tenant-full");
        for n in 0..6 {
            assert_eq!(push(&format!("t{n}")), Ok(()));
        }
        assert_eq!(push("c"), Err("queue-full"));
        assert_eq!(lock(&queue.per_tenant).get("c"), None, "a dropped run gives its share back");
    }
}
