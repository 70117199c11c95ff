//! Counters and histograms, rendered as Prometheus text. Lock-free on the selection path
//! (atomics); a mutex only to find or create a (tenant, policy) entry.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use switchyard::FaultKind;

/// Every fault kind, in the order counters are kept.
pub const FAULT_KINDS: [FaultKind; 8] = [
    FaultKind::Fuel,
    FaultKind::Deadline,
    FaultKind::Memory,
    FaultKind::Stack,
    FaultKind::Trap,
    FaultKind::InvalidOutput,
    FaultKind::PolicyError,
    FaultKind::Quarantined,
];

/// Upper bounds of the selection latency buckets, seconds (10 µs … 100 ms).
const LATENCY_BOUNDS: [f64; 10] = [1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 5e-3, 2.5e-2, 1e-1];
/// Upper bounds of the compile time buckets, seconds (10 ms … 10 s).
const COMPILE_BOUNDS: [f64; 8] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 10.0];

/// A histogram with fixed buckets; sums kept in nanoseconds.
struct Histogram<const N: usize> {
    bounds: &'static [f64; N],
    buckets: [AtomicU64; N],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl<const N: usize> Histogram<N> {
    fn new(bounds: &'static [f64; N]) -> Self {
        Self {
            bounds,
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
        }
    }

    fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        if let Some(i) = self.bounds.iter().position(|b| s <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Writes `_bucket` (cumulative), `_sum` and `_count` lines.
    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let braced = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
        let mut cumulative = 0;
        for (bound, bucket) in self.bounds.iter().zip(&self.buckets) {
            cumulative += bucket.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum{braced} {sum}");
        let _ = writeln!(out, "{name}_count{braced} {count}");
    }
}

/// The counters of one tenant's policy (all its versions together).
pub struct PolicyMetrics {
    selections: AtomicU64,
    fallbacks: AtomicU64,
    latency: Histogram<10>,
    faults: [AtomicU64; 8],
    fuel: AtomicU64,
    /// Selections the host had no instance for (`overloaded`): not the policy's faults.
    overloaded: AtomicU64,
}

impl PolicyMetrics {
    fn new() -> Self {
        Self {
            selections: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
            latency: Histogram::new(&LATENCY_BOUNDS),
            faults: std::array::from_fn(|_| AtomicU64::new(0)),
            fuel: AtomicU64::new(0),
            overloaded: AtomicU64::new(0),
        }
    }

    /// One answered selection (by the policy or its fallback) and how long it took.
    pub fn selected(&self, latency: Duration, fell_back: bool) {
        self.selections.fetch_add(1, Ordering::Relaxed);
        if fell_back {
            self.fallbacks.fetch_add(1, Ordering::Relaxed);
        }
        self.latency.observe(latency);
    }

    pub fn fault(&self, kind: FaultKind) {
        let i = FAULT_KINDS.iter().position(|k| *k == kind).expect("every kind is listed");
        self.faults[i].fetch_add(1, Ordering::Relaxed);
    }

    /// A selection the host had no instance for (the tenant's share or the engine's pool
    /// in use): counted apart from the policy's faults.
    pub fn overloaded(&self) {
        self.overloaded.fetch_add(1, Ordering::Relaxed);
    }

    /// Fuel a guest call consumed.
    pub fn fuel(&self, fuel: u64) {
        self.fuel.fetch_add(fuel, Ordering::Relaxed);
    }

    /// Faults so far, by kind (every kind, zeros included).
    pub fn faults(&self) -> BTreeMap<&'static str, u64> {
        FAULT_KINDS.iter().zip(&self.faults).map(|(k, n)| (k.as_str(), n.load(Ordering::Relaxed))).collect()
    }

    pub fn selections(&self) -> u64 {
        self.selections.load(Ordering::Relaxed)
    }
}

/// How many versions one tenant has: in the manifest, and loaded in memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantVersions {
    pub known: u64,
    pub loaded: u64,
}

/// The per-tenant state gauges and garbage-collection counters.
#[derive(Default)]
struct StateMetrics {
    /// tenant → versions known and loaded, as of the last commit.
    versions: BTreeMap<String, TenantVersions>,
    /// tenant → versions collected so far.
    collected: BTreeMap<String, u64>,
    /// Compiled components held for loaded versions.
    components: u64,
}

/// All the service's metrics.
pub struct Metrics {
    policies: Mutex<BTreeMap<(String, String), Arc<PolicyMetrics>>>,
    compile: Histogram<8>,
    /// Components loaded from our artifact cache instead of compiled.
    from_cache: AtomicU64,
    state: Mutex<StateMetrics>,
    /// Compiles whose upload was answered `compile-timeout` while Cranelift still runs
    /// (each holds a compile permit until it ends).
    compiles_abandoned: AtomicU64,
    /// Uploads refused with `compile-busy`: no compile permit freed up in time.
    compile_busy: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            policies: Mutex::default(),
            compile: Histogram::new(&COMPILE_BOUNDS),
            from_cache: AtomicU64::new(0),
            state: Mutex::default(),
            compiles_abandoned: AtomicU64::new(0),
            compile_busy: AtomicU64::new(0),
        }
    }
}

impl Metrics {
    /// The counters of `policy` of `tenant`, created on first use.
    pub fn policy(&self, tenant: &str, policy: &str) -> Arc<PolicyMetrics> {
        let mut map = self.policies.lock().unwrap_or_else(|p| p.into_inner());
        map.entry((tenant.to_string(), policy.to_string()))
            .or_insert_with(|| Arc::new(PolicyMetrics::new()))
            .clone()
    }

    /// A component became loadable: loaded from the artifact cache, or compiled.
    pub fn loaded(&self, component: &switchyard::PolicyComponent) {
        if component.from_cache() {
            self.from_cache.fetch_add(1, Ordering::Relaxed);
        } else {
            self.compiled(component.compile_time());
        }
    }

    /// A compile that took `took`.
    fn compiled(&self, took: Duration) {
        self.compile.observe(took);
    }

    /// The state after a commit (or at start): versions per tenant, compiled components.
    pub fn set_state(&self, versions: BTreeMap<String, TenantVersions>, components: usize) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.versions = versions;
        state.components = components as u64;
    }

    /// `n` versions of `tenant` were garbage-collected.
    pub fn collected(&self, tenant: &str, n: u64) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        *state.collected.entry(tenant.to_string()).or_default() += n;
    }

    /// A compile outlived its upload (answered `compile-timeout`); see [`Self::abandoned_compile_ended`].
    pub fn compile_abandoned(&self) {
        self.compiles_abandoned.fetch_add(1, Ordering::Relaxed);
    }

    /// An abandoned compile's Cranelift returned; its permit is free again.
    pub fn abandoned_compile_ended(&self) {
        self.compiles_abandoned.fetch_sub(1, Ordering::Relaxed);
    }

    /// Abandoned compiles still running.
    pub fn compiles_abandoned(&self) -> u64 {
        self.compiles_abandoned.load(Ordering::Relaxed)
    }

    /// An upload was refused `compile-busy`.
    pub fn compile_busy(&self) {
        self.compile_busy.fetch_add(1, Ordering::Relaxed);
    }

    /// Prometheus text exposition; `quarantined` lists the (tenant, policy) pairs whose
    /// breaker is open now (the breakers live with the versions, not here). Tenant and
    /// policy names are `[a-z0-9_-]`, so labels need no escaping.
    pub fn render(&self, quarantined: &BTreeSet<(String, String)>, unavailable_versions: usize) -> String {
        let map = self.policies.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut out = String::new();
        let mut family =
            |name: &str, kind: &str, help: &str, f: &mut dyn FnMut(&mut String, &str, &PolicyMetrics)| {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
                for ((tenant, policy), m) in &map {
                    f(&mut out, &format!("tenant=\"{tenant}\",policy=\"{policy}\""), m);
                }
            };
        family(
            "switchyard_selections_total",
            "counter",
            "Selections answered, by tenant and assigned policy.",
            &mut |o, l, m| {
                let _ = writeln!(
                    o,
                    "switchyard_selections_total{{{l}}} {}",
                    m.selections.load(Ordering::Relaxed)
                );
            },
        );
        family(
            "switchyard_fallbacks_total",
            "counter",
            "Selections the native default decided after a fault or quarantine (fail-open).",
            &mut |o, l, m| {
                let _ =
                    writeln!(o, "switchyard_fallbacks_total{{{l}}} {}", m.fallbacks.load(Ordering::Relaxed));
            },
        );
        family(
            "switchyard_selection_seconds",
            "histogram",
            "Selection latency inside the service.",
            &mut |o, l, m| {
                m.latency.render(o, "switchyard_selection_seconds", l);
            },
        );
        family(
            "switchyard_policy_faults_total",
            "counter",
            "Guest faults by kind; kind=\"quarantined\": selections that skipped a quarantined guest.",
            &mut |o, l, m| {
                for (kind, n) in m.faults() {
                    let _ = writeln!(o, "switchyard_policy_faults_total{{{l},kind=\"{kind}\"}} {n}");
                }
            },
        );
        family(
            "switchyard_fuel_used_total",
            "counter",
            "Fuel consumed by guest calls (0 without a fuel budget).",
            &mut |o, l, m| {
                let _ = writeln!(o, "switchyard_fuel_used_total{{{l}}} {}", m.fuel.load(Ordering::Relaxed));
            },
        );
        family(
            "switchyard_policy_overloaded_total",
            "counter",
            "Selections the host had no guest instance for (the engine's pool was full); not policy faults.",
            &mut |o, l, m| {
                let n = m.overloaded.load(Ordering::Relaxed);
                let _ = writeln!(o, "switchyard_policy_overloaded_total{{{l}}} {n}");
            },
        );
        let _ = writeln!(
            out,
            "# HELP switchyard_policy_quarantined 1 while a routed version of the policy is quarantined (breaker open or half-open).\n# TYPE switchyard_policy_quarantined gauge"
        );
        for (tenant, policy) in map.keys() {
            let on = quarantined.contains(&(tenant.clone(), policy.clone()));
            let _ = writeln!(
                out,
                "switchyard_policy_quarantined{{tenant=\"{tenant}\",policy=\"{policy}\"}} {}",
                u8::from(on)
            );
        }
        let _ = writeln!(
            out,
            "# HELP switchyard_versions_unavailable Stored versions that did not load at start-up (listed with their reason).\n# TYPE switchyard_versions_unavailable gauge\nswitchyard_versions_unavailable {unavailable_versions}"
        );
        let _ = writeln!(
            out,
            "# HELP switchyard_compile_seconds Compile time of uploaded components.\n# TYPE switchyard_compile_seconds histogram"
        );
        self.compile.render(&mut out, "switchyard_compile_seconds", "");
        let _ = writeln!(
            out,
            "# HELP switchyard_components_from_cache_total Components loaded from the compiled-artifact cache instead of compiled.\n# TYPE switchyard_components_from_cache_total counter\nswitchyard_components_from_cache_total {}",
            self.from_cache.load(Ordering::Relaxed)
        );
        self.render_state(&mut out);
        out
    }

    /// The state gauges: versions known, loaded and collected per tenant, compiled
    /// components, abandoned compiles, compile-busy refusals.
    fn render_state(&self, out: &mut String) {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut per_tenant = |name: &str, kind: &str, help: &str, values: Vec<(&String, u64)>| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (tenant, n) in values {
                let _ = writeln!(out, "{name}{{tenant=\"{tenant}\"}} {n}");
            }
        };
        per_tenant(
            "switchyard_versions",
            "gauge",
            "Policy versions in the manifest (active, pinned by a class, or a rollback target), by tenant.",
            state.versions.iter().map(|(t, v)| (t, v.known)).collect(),
        );
        per_tenant(
            "switchyard_versions_loaded",
            "gauge",
            "Policy versions loaded in memory (compiled and configured), by tenant.",
            state.versions.iter().map(|(t, v)| (t, v.loaded)).collect(),
        );
        per_tenant(
            "switchyard_versions_collected_total",
            "counter",
            "Versions garbage-collected: neither routed, active nor a rollback target.",
            state.collected.iter().map(|(t, n)| (t, *n)).collect(),
        );
        let _ = writeln!(
            out,
            "# HELP switchyard_components_loaded Compiled components held in memory (versions with the same bytes share one).\n# TYPE switchyard_components_loaded gauge\nswitchyard_components_loaded {}",
            state.components
        );
        let _ = writeln!(
            out,
            "# HELP switchyard_compiles_abandoned Compiles whose upload was answered compile-timeout and that still run (each holds a compile permit).\n# TYPE switchyard_compiles_abandoned gauge\nswitchyard_compiles_abandoned {}",
            self.compiles_abandoned.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP switchyard_compile_busy_total Uploads refused with compile-busy: no compile permit freed up within compile_timeout_ms.\n# TYPE switchyard_compile_busy_total counter\nswitchyard_compile_busy_total {}",
            self.compile_busy.load(Ordering::Relaxed)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_text_has_cumulative_buckets_every_fault_kind_and_the_quarantine_state() {
        let metrics = Metrics::default();
        let p = metrics.policy("acme", "mine");
        p.selected(Duration::from_micros(30), false);
        p.selected(Duration::from_millis(2), true);
        p.fault(FaultKind::Fuel);
        p.fuel(1234);
        metrics.compiled(Duration::from_millis(300));
        metrics.policy("acme", "broken").fault(FaultKind::Quarantined);
        let quarantined = BTreeSet::from([("acme".to_string(), "broken".to_string())]);
        let text = metrics.render(&quarantined, 0);
        let l = "tenant=\"acme\",policy=\"mine\"";
        for line in [
            format!("switchyard_selections_total{{{l}}} 2"),
            format!("switchyard_fallbacks_total{{{l}}} 1"),
            format!("switchyard_selection_seconds_bucket{{{l},le=\"0.00005\"}} 1"),
            format!("switchyard_selection_seconds_bucket{{{l},le=\"0.005\"}} 2"),
            format!("switchyard_selection_seconds_bucket{{{l},le=\"+Inf\"}} 2"),
            format!("switchyard_selection_seconds_count{{{l}}} 2"),
            format!("switchyard_policy_faults_total{{{l},kind=\"fuel\"}} 1"),
            format!("switchyard_policy_faults_total{{{l},kind=\"quarantined\"}} 0"),
            format!("switchyard_fuel_used_total{{{l}}} 1234"),
            format!("switchyard_policy_quarantined{{{l}}} 0"),
            "switchyard_policy_quarantined{tenant=\"acme\",policy=\"broken\"} 1".to_string(),
            "switchyard_policy_faults_total{tenant=\"acme\",policy=\"broken\",kind=\"quarantined\"} 1"
                .to_string(),
            "switchyard_compile_seconds_bucket{le=\"0.25\"} 0".to_string(),
            "switchyard_compile_seconds_bucket{le=\"0.5\"} 1".to_string(),
            "switchyard_compile_seconds_count 1".to_string(),
        ] {
            assert!(text.lines().any(|x| x == line), "missing `{line}` in\n{text}");
        }
    }

    #[test]
    fn state_gauges_and_counters_are_rendered_per_tenant() {
        let metrics = Metrics::default();
        let versions = BTreeMap::from([("acme".to_string(), TenantVersions { known: 3, loaded: 2 })]);
        metrics.set_state(versions, 2);
        metrics.collected("acme", 2);
        metrics.collected("acme", 1);
        metrics.compile_abandoned();
        metrics.compile_abandoned();
        metrics.abandoned_compile_ended();
        metrics.compile_busy();
        let text = metrics.render(&BTreeSet::new(), 0);
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
