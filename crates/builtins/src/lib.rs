//! The policies shipped with Switchyard. Each is one source built twice: linked here
//! natively, and embedded as the component `build.rs` produced from the same crate.
//!
//! A crate of its own, so the host library a router embeds (`switchyard`) depends on no
//! policy: it takes its fallback from outside ([`guarded`] gives the usual one, the native
//! default policy).

#![forbid(unsafe_code)]

use switchyard::selection::{NativeScorer, Scorer};
use switchyard::{
    FailMode, GuardConfig, GuardedSelector, GuestScorer, LoadError, PolicyComponent, PolicyEngine,
};
use switchyard_guest_sdk::{Policy, PolicyError};

/// Guards `policy` with the native default policy (default parameters) as its fallback:
/// the containment `switchyard select`, `switchyard replay` and the service use.
pub fn guarded(policy: Box<dyn Scorer>, mode: FailMode, config: GuardConfig) -> GuardedSelector {
    let fallback = find("default")
        .expect("the default builtin exists")
        .native("{}")
        .expect("the default policy's defaults are valid");
    GuardedSelector::new(policy, fallback, mode, config)
}

/// Builds a builtin's native scorer from its name and JSON parameters.
type NativeConstructor = fn(&'static str, &str) -> Result<Box<dyn Scorer>, PolicyError>;

/// A builtin policy.
pub struct Builtin {
    /// The name `--policy` takes.
    pub name: &'static str,
    /// One line on what it does.
    pub summary: &'static str,
    native: NativeConstructor,
    /// The component build of the same source.
    pub component: &'static [u8],
}

impl Builtin {
    /// The native build, configured with JSON `parameters`.
    pub fn native(&self, parameters: &str) -> Result<Box<dyn Scorer>, PolicyError> {
        (self.native)(self.name, parameters)
    }

    /// The guest build, compiled by `engine` and configured with `parameters`.
    pub fn guest(&self, engine: &PolicyEngine, parameters: &str) -> Result<GuestScorer, LoadError> {
        let component = PolicyComponent::load(engine, self.component)?;
        GuestScorer::new(self.name, component, parameters)
    }
}

fn native<P: Policy + Send>(name: &'static str, parameters: &str) -> Result<Box<dyn Scorer>, PolicyError> {
    Ok(Box::new(NativeScorer::<P>::configure(name, parameters)?))
}

macro_rules! component {
    ($lib:literal) => {
        include_bytes!(concat!(env!("OUT_DIR"), "/", $lib, ".component.wasm"))
    };
}

/// Every builtin, by name.
pub static BUILTINS: &[Builtin] = &[
    Builtin {
        name: "default",
        summary: "Dynamo's default cost: uncredited prefill blocks + decode blocks (+ request weight)",
        native: native::<switchyard_policy_default::DefaultPolicy>,
        component: component!("switchyard_policy_default"),
    },
    Builtin {
        name: "chwbl",
        summary: "consistent hashing with bounded loads on the prompt's prefix hash (KubeAI, SODA'18)",
        native: native::<switchyard_policy_chwbl::Chwbl>,
        component: component!("switchyard_policy_chwbl"),
    },
    Builtin {
        name: "two-choice",
        summary: "two hashed choices per prefix, affinity kept under a load bound (DualMap-style)",
        native: native::<switchyard_policy_two_choice::TwoChoice>,
        component: component!("switchyard_policy_two_choice"),
    },
    Builtin {
        name: "lmetric",
        summary: "LMetric: uncached prefill tokens x requests in flight, no tunables",
        native: native::<switchyard_policy_lmetric::LMetric>,
        component: component!("switchyard_policy_lmetric"),
    },
    Builtin {
        name: "llmd-precise",
        summary: "llm-d precise-prefix profile: prefix 2, KV utilisation 1, queue 1",
        native: native::<switchyard_policy_llmd_precise::LlmdPrecise>,
        component: component!("switchyard_policy_llmd_precise"),
    },
    Builtin {
        name: "capacity-aware",
        summary: "KV-capacity-aware decode: decode blocks / total KV blocks, overfull workers last",
        native: native::<switchyard_policy_capacity_aware::CapacityAware>,
        component: component!("switchyard_policy_capacity_aware"),
    },
    Builtin {
        name: "class-aware",
        summary: "policy class -> Dynamo-cost parameter table (latency: cache affinity, batch: load)",
        native: native::<switchyard_policy_class_aware::ClassAware>,
        component: component!("switchyard_policy_class_aware"),
    },
    Builtin {
        name: "request-limit",
        summary: "filter out workers at their in-flight request limit, then Dynamo's cost",
        native: native::<switchyard_policy_request_limit::RequestLimit>,
        component: component!("switchyard_policy_request_limit"),
    },
    Builtin {
        name: "sglang-cache-aware",
        summary: "SGLang cache_aware: approximate per-worker prefix tree, updated on commit (stateful)",
        native: native::<switchyard_policy_sglang_cache_aware::SglangCacheAware>,
        component: component!("switchyard_policy_sglang_cache_aware"),
    },
];

/// The builtin called `name`.
pub fn find(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}

/// The builtin names, for error messages.
pub fn names() -> Vec<&'static str> {
    BUILTINS.iter().map(|b| b.name).collect()
}
