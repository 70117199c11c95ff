//! The policies shipped with Switchyard. Each is one source built twice: linked here
//! natively, and embedded as the component `build.rs` produced from the same crate.

use switchyard_guest_sdk::{Policy, PolicyError};

use crate::component::{LoadError, PolicyComponent};
use crate::engine::PolicyEngine;
use crate::guest::GuestScorer;
use crate::selection::{NativeScorer, Scorer};

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
pub static BUILTINS: &[Builtin] = &[Builtin {
    name: "default",
    summary: "Dynamo's default cost: uncredited prefill blocks + decode blocks (+ request weight)",
    native: native::<switchyard_policy_default::DefaultPolicy>,
    component: component!("switchyard_policy_default"),
}];

/// The builtin called `name`.
pub fn find(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}

/// The builtin names, for error messages.
pub fn names() -> Vec<&'static str> {
    BUILTINS.iter().map(|b| b.name).collect()
}
