//! The service's metrics: `prometheus-client` counters, gauges and families, rendered in
//! the Prometheus text format.
//!
//! Lock-free on the selection path: every (tenant, policy) entry holds its own metric
//! handles (atomics shared with the families a scrape encodes); a mutex only to find or
//! create an entry, and the families' locks only when an entry is created and at a scrape.
//!
//! A scrape builds a fresh [`Registry`] (see [`Metrics::register`]): the handles here are
//! shared, so registering them is cheap, and the values only a scrape knows (the
//! service's [`State`]: each policy's quarantine state, the versions known, loaded and
//! unavailable, the components held) go into it as they are then, with nothing a reader
//! writes to shared state.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet, prometheus_text};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;
use switchyard::FaultKind;

/// The `Content-Type` of [`encode`]'s output: the Prometheus text format, version 0.0.4.
///
/// Not OpenMetrics, which prometheus-client also writes: the 0.0.4 text keeps the same
/// names on every line (OpenMetrics names a counter's `# TYPE` without `_total` and ends
/// the text with `# EOF`), which dashboards, scripts that grep it and the tests read;
/// Prometheus scrapes either.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// The policy's fault kinds, in the order counters are kept.
pub const FAULT_KINDS: [FaultKind; 8] = FaultKind::POLICY;

/// Upper bounds of the selection latency buckets, seconds (10 µs … 100 ms).
const LATENCY_BOUNDS: [f64; 10] = [1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 5e-3, 2.5e-2, 1e-1];
/// Upper bounds of the compile time buckets, seconds (10 ms … 10 s).
const COMPILE_BOUNDS: [f64; 8] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 10.0];
/// Loading a version: its component from the compiled cache (or compiled) and a configure.
const LOAD_BOUNDS: [f64; 9] = [1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 1e-2, 0.1, 1.0, 10.0];

/// A gauge of a count: never negative, and read back as the `u64` the callers count in.
type CountGauge = Gauge<u64, AtomicU64>;

/// The labels of a per-policy series, in the order they are written.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    tenant: String,
    policy: String,
}

/// The labels of a fault counter: the policy's, then the fault's kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FaultLabels {
    tenant: String,
    policy: String,
    kind: &'static str,
}

/// The label of a per-tenant series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabels {
    tenant: String,
}

/// A histogram with fixed buckets that is lock-free to observe: prometheus-client's own
/// `Histogram` takes a mutex on every `observe`, and the selection latency is observed
/// once per selection. Clones share the counts, as prometheus-client's metrics do, so a
/// family's entry and the handle a policy entry holds are one histogram.
#[derive(Clone, Debug)]
struct AtomicHistogram(Arc<HistogramCounts>);

#[derive(Debug)]
struct HistogramCounts {
    bounds: &'static [f64],
    /// Observations per bucket, not cumulative: `buckets[i]` counts those in
    /// `(bounds[i - 1], bounds[i]]`; those above the last bound are only in `count`.
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    /// Nanoseconds, exposed as seconds: an integer add is exact and one atomic
    /// instruction, where an `f64` sum would need a compare-and-swap loop.
    sum_ns: AtomicU64,
}

impl AtomicHistogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self(Arc::new(HistogramCounts {
            bounds,
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
        }))
    }

    /// A selection latency histogram.
    fn latency() -> Self {
        Self::new(&LATENCY_BOUNDS)
    }

    /// A compile time histogram; a plain `fn`, a [`PerTenant`]'s constructor.
    fn compile() -> Self {
        Self::new(&COMPILE_BOUNDS)
    }

    fn observe(&self, d: Duration) {
        let h = &self.0;
        let s = d.as_secs_f64();
        if let Some(i) = h.bounds.iter().position(|b| s <= *b) {
            h.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        h.count.fetch_add(1, Ordering::Relaxed);
        h.sum_ns.fetch_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}

impl TypedMetric for AtomicHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for AtomicHistogram {
    /// prometheus-client writes the cumulative `_bucket` lines (and `+Inf`), `_sum` and
    /// `_count` from the per-bucket counts.
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let h = &self.0;
        let buckets: Vec<(f64, u64)> =
            h.bounds.iter().zip(&h.buckets).map(|(b, n)| (*b, n.load(Ordering::Relaxed))).collect();
        let count = h.count.load(Ordering::Relaxed);
        let sum = h.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// A family's series as a scrape encodes them, in the order given: prometheus-client's
/// `Family` writes its series in its hash map's order, which changes from one scrape (and
/// one run) to the next; these are written sorted by their labels, so scrapes diff.
#[derive(Debug)]
struct Sorted<L, M>(Vec<(L, M)>);

impl<L, M: TypedMetric> TypedMetric for Sorted<L, M> {
    const TYPE: MetricType = M::TYPE;
}

impl<L, M> EncodeMetric for Sorted<L, M>
where
    L: EncodeLabelSet + std::fmt::Debug + Send + Sync,
    M: EncodeMetric + TypedMetric + std::fmt::Debug + Send + Sync,
{
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (labels, metric) in &self.0 {
            metric.encode(encoder.encode_family(labels)?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        M::TYPE
    }
}

/// A per-tenant series: one handle per tenant, created when the tenant first counts (only
/// tenants that exist do: a caller's made-up name never becomes a label).
struct PerTenant<M> {
    series: Mutex<BTreeMap<String, M>>,
    new: fn() -> M,
}

impl<M: Clone> PerTenant<M> {
    fn new(new: fn() -> M) -> Self {
        Self { series: Mutex::default(), new }
    }

    /// `tenant`'s handle.
    fn get(&self, tenant: &str) -> M {
        let mut series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        series.entry(tenant.to_string()).or_insert_with(self.new).clone()
    }

    /// Every tenant's series, sorted, for one scrape.
    fn sorted(&self) -> Sorted<TenantLabels, M> {
        let series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        Sorted(series.iter().map(|(t, m)| (TenantLabels { tenant: t.clone() }, m.clone())).collect())
    }
}

/// The counters of one tenant's policy (all its versions together): handles shared with
/// what a scrape encodes, taken once when the entry is created, so that counting a
/// selection is atomic adds and never a lookup.
pub struct PolicyMetrics {
    selections: Counter,
    fallbacks: Counter,
    latency: AtomicHistogram,
    /// One per kind, in the order of [`FAULT_KINDS`].
    faults: [Counter; FAULT_KINDS.len()],
    fuel: Counter,
    /// Selections the host had no instance for (`overloaded`): not the policy's faults.
    overloaded: Counter,
}

impl PolicyMetrics {
    /// One answered selection (by the policy or its fallback) and how long it took.
    pub fn selected(&self, latency: Duration, fell_back: bool) {
        self.selections.inc();
        if fell_back {
            self.fallbacks.inc();
        }
        self.latency.observe(latency);
    }

    /// A fault of the policy's guest. `kind` is one of [`FAULT_KINDS`]; the host's own
    /// (`overloaded`, `unavailable`) are not the policy's and are counted elsewhere.
    pub fn fault(&self, kind: FaultKind) {
        let i = FAULT_KINDS.iter().position(|k| *k == kind).expect("every kind is listed");
        self.faults[i].inc();
    }

    /// A selection the host had no instance for (the tenant's share or the engine's pool
    /// in use): counted apart from the policy's faults.
    pub fn overloaded(&self) {
        self.overloaded.inc();
    }

    /// Fuel a guest call consumed.
    pub fn fuel(&self, fuel: u64) {
        self.fuel.inc_by(fuel);
    }

    /// Faults so far, by kind (every kind, zeros included).
    pub fn faults(&self) -> BTreeMap<&'static str, u64> {
        FAULT_KINDS.iter().zip(&self.faults).map(|(k, n)| (k.as_str(), n.get())).collect()
    }

    /// Selections answered so far (the policy's own and its fallback's).
    pub fn selections(&self) -> u64 {
        self.selections.get()
    }
}

impl PolicyMetrics {
    /// Fresh counters: every fault kind's included, so each reads 0 until it happens.
    fn new() -> Self {
        Self {
            selections: Counter::default(),
            fallbacks: Counter::default(),
            latency: AtomicHistogram::latency(),
            faults: Default::default(),
            fuel: Counter::default(),
            overloaded: Counter::default(),
        }
    }
}

/// [`FAULT_KINDS`]' positions, in the order of their names: how a scrape lists them.
fn fault_kinds_by_name() -> [usize; FAULT_KINDS.len()] {
    let mut order: [usize; FAULT_KINDS.len()] = std::array::from_fn(|i| i);
    order.sort_by_key(|&i| FAULT_KINDS[i].as_str());
    order
}

/// What a scrape reports from the service's state, as it is at the scrape.
#[derive(Debug, Default)]
pub struct State {
    /// (tenant, policy) pairs with a routed version whose breaker is open or half-open.
    pub quarantined: BTreeSet<(String, String)>,
    /// tenant → its versions, known and loaded.
    pub versions: BTreeMap<String, TenantVersions>,
    /// Stored versions that did not load.
    pub unavailable: usize,
    /// Compiled components held.
    pub components: usize,
    /// Of those, the ones kept for evicted versions alone (at the last eviction pass).
    pub components_unused: usize,
    /// Guest instances alive now (idle or running), from the engine's pool.
    pub instances: u64,
    /// Cranelift's function cache (none when it is off).
    pub function_cache: Option<switchyard::FunctionCacheStats>,
    /// The compile workers (none when compiles run in-process).
    pub compile_workers: Option<switchyard::WorkerStats>,
}

/// How many versions one tenant has: in the manifest, and loaded in memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantVersions {
    /// Versions the manifest names (active, pinned by a class, or a rollback target).
    pub known: u64,
    /// Versions compiled and configured in memory.
    pub loaded: u64,
}

/// All the service's metrics.
pub struct Metrics {
    /// (tenant, policy) → its handles. The map, not the families, is what the selection
    /// path asks (through [`Metrics::policy`]) and what a scrape lists policies from.
    policies: Mutex<BTreeMap<(String, String), Arc<PolicyMetrics>>>,
    /// tenant → the compile times of components compiled for its uploads and versions.
    compile: PerTenant<AtomicHistogram>,
    /// Versions loaded (component and configure), each time: after start-up, on a first
    /// selection, after an eviction, adopted from the fleet.
    load: AtomicHistogram,
    /// Versions evicted: unused for `evict_after_secs`, their configuration and (when no
    /// other loaded version shares it) their component dropped.
    evicted: Counter,
    /// Selections that found no idle instance of their version.
    idle_misses: Counter,
    /// Components whose Winch code was replaced by Cranelift's (`compiler = "tiered"`).
    tier_ups: Counter,
    /// Components loaded from our artifact cache instead of compiled.
    from_cache: Counter,
    /// tenant → versions garbage-collected so far.
    collected: PerTenant<Counter>,
    /// tenant → selections whose class the tenant has not assigned (the default answered).
    unassigned_class: PerTenant<Counter>,
    /// Compiles whose upload was answered `compile-timeout` while Cranelift still runs
    /// (each holds a compile permit until it ends).
    compiles_abandoned: CountGauge,
    /// Uploads refused with `compile-busy`: no compile permit freed up in time.
    compile_busy: Counter,
    /// Stored registry records this build could not read, skipped.
    records_skipped: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            policies: Mutex::default(),
            compile: PerTenant::new(AtomicHistogram::compile),
            load: AtomicHistogram::new(&LOAD_BOUNDS),
            evicted: Counter::default(),
            idle_misses: Counter::default(),
            tier_ups: Counter::default(),
            from_cache: Counter::default(),
            collected: PerTenant::new(Counter::default),
            unassigned_class: PerTenant::new(Counter::default),
            compiles_abandoned: CountGauge::default(),
            compile_busy: Counter::default(),
            records_skipped: Counter::default(),
        }
    }
}

impl Metrics {
    /// The counters of `policy` of `tenant`, created on first use. Hold on to the answer:
    /// asking takes a mutex (and, the first time, the families' locks).
    pub fn policy(&self, tenant: &str, policy: &str) -> Arc<PolicyMetrics> {
        let mut map = self.policies.lock().unwrap_or_else(|p| p.into_inner());
        map.entry((tenant.to_string(), policy.to_string()))
            .or_insert_with(|| Arc::new(PolicyMetrics::new()))
            .clone()
    }

    /// A component became loadable for `tenant` (an upload's, or one of its versions'):
    /// loaded from the artifact cache, or compiled.
    pub fn loaded(&self, tenant: &str, component: &switchyard::PolicyComponent) {
        if component.from_cache() {
            self.from_cache.inc();
        } else {
            self.compiled(tenant, component.compile_time());
        }
    }

    /// A version loaded in `took`.
    pub fn version_loaded(&self, took: Duration) {
        self.load.observe(took);
    }

    /// A selection found no idle instance of its version, and makes a fresh one.
    pub fn idle_miss(&self) {
        self.idle_misses.inc();
    }

    /// A component's Winch code was replaced by Cranelift's.
    pub fn tiered_up(&self) {
        self.tier_ups.inc();
    }

    /// `n` versions were evicted.
    pub fn evicted(&self, n: u64) {
        self.evicted.inc_by(n);
    }

    /// A compile for `tenant` that took `took`.
    fn compiled(&self, tenant: &str, took: Duration) {
        self.compile.get(tenant).observe(took);
    }

    /// `n` versions of `tenant` were garbage-collected.
    pub fn collected(&self, tenant: &str, n: u64) {
        self.collected.get(tenant).inc_by(n);
    }

    /// A selection of `tenant` named a class it has not assigned.
    pub fn unassigned_class(&self, tenant: &str) {
        self.unassigned_class.get(tenant).inc();
    }

    /// A compile outlived its upload (answered `compile-timeout`); see [`Self::abandoned_compile_ended`].
    pub fn compile_abandoned(&self) {
        self.compiles_abandoned.inc();
    }

    /// An abandoned compile's Cranelift returned; its permit is free again.
    pub fn abandoned_compile_ended(&self) {
        self.compiles_abandoned.dec();
    }

    /// Abandoned compiles still running.
    pub fn compiles_abandoned(&self) -> u64 {
        self.compiles_abandoned.get()
    }

    /// An upload was refused `compile-busy`.
    pub fn compile_busy(&self) {
        self.compile_busy.inc();
    }

    /// A stored registry record this build cannot read was skipped (at start-up, or in a
    /// fleet's watch).
    pub fn record_skipped(&self) {
        self.records_skipped.inc();
    }

    /// Registers every metric in `registry`, for one scrape, with `state` as it is now
    /// (the breakers and versions live in the service's snapshot, not here). Registered
    /// in the order `/metrics` has always listed them.
    ///
    /// The names are the exposed ones less what the encoder adds: `_total` to a counter,
    /// and the help text's final period.
    pub fn register(&self, registry: &mut Registry, state: &State) {
        let State {
            quarantined,
            versions,
            unavailable: unavailable_versions,
            components,
            components_unused,
            instances,
            function_cache,
            compile_workers,
        } = state;
        // Every per-policy series from the one sorted map, so each family lists them in
        // the same order, scrape after scrape.
        let policies: Vec<(PolicyLabels, Arc<PolicyMetrics>)> = {
            let map = self.policies.lock().unwrap_or_else(|p| p.into_inner());
            map.iter()
                .map(|((tenant, policy), m)| {
                    (PolicyLabels { tenant: tenant.clone(), policy: policy.clone() }, Arc::clone(m))
                })
                .collect()
        };
        let each = |handle: fn(&PolicyMetrics) -> &Counter| {
            Sorted(policies.iter().map(|(l, m)| (l.clone(), handle(m).clone())).collect())
        };
        let faults = Sorted(
            policies
                .iter()
                .flat_map(|(l, m)| {
                    fault_kinds_by_name().map(|i| {
                        let labels = FaultLabels {
                            tenant: l.tenant.clone(),
                            policy: l.policy.clone(),
                            kind: FAULT_KINDS[i].as_str(),
                        };
                        (labels, m.faults[i].clone())
                    })
                })
                .collect(),
        );
        registry.register(
            "switchyard_selections",
            "Selections answered, by tenant and assigned policy",
            each(|m| &m.selections),
        );
        registry.register(
            "switchyard_fallbacks",
            "Selections the native default decided after a fault or quarantine (fail-open)",
            each(|m| &m.fallbacks),
        );
        registry.register(
            "switchyard_selection_seconds",
            "Selection latency inside the service",
            Sorted(policies.iter().map(|(l, m)| (l.clone(), m.latency.clone())).collect()),
        );
        registry.register(
            "switchyard_policy_faults",
            "Guest faults by kind; kind=\"quarantined\": selections that skipped a quarantined guest",
            faults,
        );
        registry.register(
            "switchyard_fuel_used",
            "Fuel consumed by guest calls (0 without a fuel budget)",
            each(|m| &m.fuel),
        );
        registry.register(
            "switchyard_policy_overloaded",
            "Selections the host had no guest instance for (the engine's pool was full); not policy faults",
            each(|m| &m.overloaded),
        );
        registry.register(
            "switchyard_unassigned_class_selections",
            "Selections naming a class the tenant has not assigned (a misspelling, say): the builtin default answered, by tenant",
            self.unassigned_class.sorted(),
        );
        let quarantine = Sorted(
            policies
                .iter()
                .map(|(l, _)| {
                    let on = quarantined.contains(&(l.tenant.clone(), l.policy.clone()));
                    (l.clone(), ConstGauge::new(i64::from(on)))
                })
                .collect(),
        );
        registry.register(
            "switchyard_policy_quarantined",
            "1 while a routed version of the policy is quarantined (breaker open or half-open)",
            quarantine,
        );
        registry.register(
            "switchyard_versions_unavailable",
            "Stored versions that did not load when tried: after start-up, on a first selection, or adopted from the fleet (listed with their reason)",
            ConstGauge::new(*unavailable_versions),
        );
        registry.register(
            "switchyard_compile_seconds",
            "Compile time of components, by the tenant whose upload or version needed them",
            self.compile.sorted(),
        );
        registry.register(
            "switchyard_version_load_seconds",
            "Time to load a version (its component from the compiled cache, or compiled, and a configure)",
            self.load.clone(),
        );
        registry.register(
            "switchyard_versions_evicted",
            "Versions evicted after evict_after_secs unused (loaded again on their next selection)",
            self.evicted.clone(),
        );
        registry.register(
            "switchyard_idle_misses",
            "Selections that found no idle instance of their version (instantiated and configured a fresh one)",
            self.idle_misses.clone(),
        );
        registry.register(
            "switchyard_tier_ups",
            "With compiler = \"tiered\": uploads whose Winch code was replaced by Cranelift's (compiled in the background)",
            self.tier_ups.clone(),
        );
        registry.register(
            "switchyard_instances_live",
            "Guest instances alive now, idle or running (slots of the engine's pool in use)",
            ConstGauge::new(*instances),
        );
        registry.register(
            "switchyard_components_from_cache",
            "Components loaded from the compiled-artifact cache instead of compiled",
            self.from_cache.clone(),
        );
        let per_tenant = |count: fn(&TenantVersions) -> u64| {
            Sorted(
                versions
                    .iter()
                    .map(|(tenant, v)| (TenantLabels { tenant: tenant.clone() }, ConstGauge::new(count(v))))
                    .collect(),
            )
        };
        let (known, loaded) = (per_tenant(|v| v.known), per_tenant(|v| v.loaded));
        registry.register(
            "switchyard_versions",
            "Policy versions in the manifest (active, pinned by a class, or a rollback target), by tenant",
            known,
        );
        registry.register(
            "switchyard_versions_loaded",
            "Policy versions loaded in memory (compiled and configured; a version loads when first selected, or in the background after start-up), by tenant",
            loaded,
        );
        registry.register(
            "switchyard_versions_collected",
            "Versions garbage-collected: neither active, pinned by a class, nor in the policy's kept history",
            self.collected.sorted(),
        );
        registry.register(
            "switchyard_components_loaded",
            "Compiled components held in memory (versions with the same bytes share one)",
            ConstGauge::new(*components),
        );
        registry.register(
            "switchyard_components_unused",
            "Compiled components held for evicted versions alone, at the last eviction pass (at most max_unused_components)",
            ConstGauge::new(*components_unused),
        );
        if let Some(cache) = function_cache {
            registry.register(
                "switchyard_function_cache_hits",
                "Functions an upload's compile found compiled before (by any upload) instead of compiling them",
                ConstCounter::new(cache.hits),
            );
            registry.register(
                "switchyard_function_cache_misses",
                "Functions compiled because no compile had made them before (or they had been pushed out)",
                ConstCounter::new(cache.misses),
            );
            registry.register(
                "switchyard_function_cache_bytes",
                "Bytes the cache of compiled functions holds (at most [limits] function_cache_bytes)",
                ConstGauge::new(cache.bytes as i64),
            );
        }
        if let Some(workers) = compile_workers {
            registry.register(
                "switchyard_compile_workers_started",
                "Compile worker processes started (one is kept between compiles; a new one replaces each killed or dead)",
                ConstCounter::new(workers.spawned),
            );
            registry.register(
                "switchyard_compile_workers_killed",
                "Compile workers killed at a compile's deadline (compile_timeout_ms): the compile stopped there",
                ConstCounter::new(workers.killed),
            );
            registry.register(
                "switchyard_compile_workers_died",
                "Compile workers that died on their own (their memory limit, compile_memory_bytes, or a signal)",
                ConstCounter::new(workers.died),
            );
        }
        registry.register(
            "switchyard_compiles_abandoned",
            "Compiles whose upload was answered compile-timeout and that still run (each holds a compile permit)",
            self.compiles_abandoned.clone(),
        );
        registry.register(
            "switchyard_compile_busy",
            "Uploads refused with compile-busy: no compile permit freed up within compile_timeout_ms",
            self.compile_busy.clone(),
        );
        registry.register(
            "switchyard_registry_records_skipped",
            "Stored registry records this build could not read (damaged, or a newer build's), skipped at start-up or in a fleet's watch and kept as they are",
            self.records_skipped.clone(),
        );
    }
}

/// `registry` as Prometheus text ([`CONTENT_TYPE`]).
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail, and every metric here is one the text format
    // encodes (classic histograms only).
    prometheus_text::encode(&mut out, registry).expect("a registry of classic metrics encodes into a String");
    out
}
#[cfg(test)]
mod tests {
    use super::*;

    /// The text a scrape of these metrics alone would read.
    fn render(metrics: &Metrics, state: &State) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry, state);
        encode(&registry)
    }

    #[test]
    fn prometheus_text_has_cumulative_buckets_every_fault_kind_and_the_quarantine_state() {
        let metrics = Metrics::default();
        let p = metrics.policy("acme", "mine");
        p.selected(Duration::from_micros(30), false);
        p.selected(Duration::from_millis(2), true);
        p.fault(FaultKind::Fuel);
        p.fuel(1234);
        metrics.compiled("acme", Duration::from_millis(300));
        metrics.policy("acme", "broken").fault(FaultKind::Quarantined);
        let quarantined = BTreeSet::from([("acme".to_string(), "broken".to_string())]);
        let text = render(&metrics, &State { quarantined, ..State::default() });
        let l = "tenant=\"acme\",policy=\"mine\"";
        for line in [
            format!("switchyard_selections_total{{{l}}} 2"),
            format!("switchyard_fallbacks_total{{{l}}} 1"),
            // prometheus-client writes bounds below 1e-4 as Go's client does ("5e-05").
            format!("switchyard_selection_seconds_bucket{{{l},le=\"5e-05\"}} 1"),
            format!("switchyard_selection_seconds_bucket{{{l},le=\"0.005\"}} 2"),
            format!("switchyard_selection_seconds_bucket{{{l},le=\"+Inf\"}} 2"),
            format!("switchyard_selection_seconds_count{{{l}}} 2"),
            format!("switchyard_selection_seconds_sum{{{l}}} 0.00203"),
            format!("switchyard_policy_faults_total{{{l},kind=\"fuel\"}} 1"),
            format!("switchyard_policy_faults_total{{{l},kind=\"quarantined\"}} 0"),
            format!("switchyard_fuel_used_total{{{l}}} 1234"),
            format!("switchyard_policy_quarantined{{{l}}} 0"),
            "switchyard_policy_quarantined{tenant=\"acme\",policy=\"broken\"} 1".to_string(),
            "switchyard_policy_faults_total{tenant=\"acme\",policy=\"broken\",kind=\"quarantined\"} 1"
                .to_string(),
            "switchyard_compile_seconds_bucket{tenant=\"acme\",le=\"0.25\"} 0".to_string(),
            "switchyard_compile_seconds_bucket{tenant=\"acme\",le=\"0.5\"} 1".to_string(),
            "switchyard_compile_seconds_count{tenant=\"acme\"} 1".to_string(),
            // The 0.0.4 text: a counter's HELP and TYPE name it with `_total`, and the
            // help's period is the registry's, not doubled.
            "# HELP switchyard_selections_total Selections answered, by tenant and assigned policy."
                .to_string(),
            "# TYPE switchyard_selections_total counter".to_string(),
            "switchyard_versions_unavailable 0".to_string(),
        ] {
            assert!(text.lines().any(|x| x == line), "missing `{line}` in\n{text}");
        }
    }

    #[test]
    fn state_gauges_and_counters_are_rendered_per_tenant() {
        let metrics = Metrics::default();
        let versions = BTreeMap::from([("acme".to_string(), TenantVersions { known: 3, loaded: 2 })]);
        let state = State { versions, components: 2, ..State::default() };
        metrics.collected("acme", 2);
        metrics.collected("acme", 1);
        metrics.compile_abandoned();
        metrics.compile_abandoned();
        metrics.abandoned_compile_ended();
        metrics.compile_busy();
        let text = render(&metrics, &state);
        for line in [
            "# TYPE switchyard_versions gauge",
            "switchyard_versions{tenant=\"acme\"} 3",
            "switchyard_versions_loaded{tenant=\"acme\"} 2",
            "# TYPE switchyard_versions_collected_total counter",
            "switchyard_versions_collected_total{tenant=\"acme\"} 3",
            "switchyard_components_loaded 2",
            "switchyard_compiles_abandoned 1",
            "switchyard_compile_busy_total 1",
        ] {
            assert!(text.lines().any(|x| x == line), "missing `{line}` in\n{text}");
        }
    }
}
