//! Offline replay of request traces through the real selection path.
//!
//! A [`Trace`] (Mooncake JSONL) drives a simulated cluster: N workers, each with a prefix
//! cache keyed by the chained block ids (LRU at `total_kv_blocks`), in-flight prefill and
//! decode load, and the [`TimingModel`]. Every routing decision is the real
//! [`GuardedSelector`]'s `select` then `commit`, with a native scorer or a guest, run as
//! production runs it: fail-open by default (a fault is answered by the fallback and
//! counted by kind in the report), or fail-closed, which stops at the first fault and
//! names its row. So a replay is both a what-if for an operator and an oracle that guest
//! and native builds agree: the canonical [`Report`] of the two builds of one policy is
//! byte-identical.
//!
//! A crate of its own (`switchyard-replay`): it uses only the host library's public
//! selection API, and the library a router embeds (`switchyard`) does not carry it.
//!
//! - [`trace`]: reading and checking the trace (errors carry line numbers).
//! - `cache`, `cluster`: the simulated workers and the columns the router derives.
//! - `config`: what to replay and how ([`ReplayConfig`], [`Mode`], [`PolicyLabel`]).
//! - [`timing`]: the documented timing model.
//! - `sim`: the event-driven, deterministic simulation.
//! - [`report`]: statistics and the canonical JSON.
//! - [`shadow`]: a second policy shadowing the driving one, compared pick by pick.

#![forbid(unsafe_code)]

mod cache;
mod cluster;
mod config;
pub mod report;
pub mod shadow;
mod sim;
pub mod timing;
pub mod trace;

pub use cache::PrefixCache;
pub use config::{Mode, PolicyLabel, ReplayConfig, ReplayError};
pub use report::{Distribution, Faults, PoolLoad, Report, ReportError, canonical_json};
pub use shadow::{Recorded, Shadow, ShadowReport, replay_recorded};
pub use timing::TimingModel;
pub use trace::{Captured, RecordedAnswer, Trace, TraceError, TraceRow};

use switchyard::guard::GuardedSelector;

/// Replays `trace` with `selector` (guarding the policy `policy` names). `progress` is
/// called with the number of rows routed so far.
pub fn replay(
    trace: &Trace,
    selector: &mut GuardedSelector,
    policy: &PolicyLabel,
    config: &ReplayConfig,
    progress: &mut dyn FnMut(usize),
) -> Result<Report, ReplayError> {
    config.validate()?;
    sim::Simulation::new(trace, selector, None, config)?.run(policy, progress)
}

/// [`replay`], with `shadow` asked on every routing decision as well: it selects on what
/// `selector` saw and is told its pick. The report is `selector`'s alone, the same as
/// without the shadow.
pub fn replay_shadowed(
    trace: &Trace,
    selector: &mut GuardedSelector,
    shadow: &mut Shadow,
    policy: &PolicyLabel,
    config: &ReplayConfig,
    progress: &mut dyn FnMut(usize),
) -> Result<Report, ReplayError> {
    config.validate()?;
    sim::Simulation::new(trace, selector, Some(shadow), config)?.run(policy, progress)
}
