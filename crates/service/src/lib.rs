//! The multi-tenant policy service behind `switchyard serve`: tenants upload policy
//! components over HTTP, assign them to policy classes, and routers ask it to select.
//!
//! A crate of its own so the runtime library stays free of tokio and HTTP for routers
//! that embed it; this crate adds only the service around it.
//!
//! - [`store`]: the data directory (content-addressed blobs, one atomically written
//!   record per tenant), from `switchyard-store`.
//! - [`state`]: the writer's state and commits, the background load and eviction; the
//!   versions it holds (`version`: each loaded when first needed, with its idle
//!   instances and breaker; `loader`: the components they share; `idle`: the idle slots,
//!   kept for the most recently used) and the snapshot swapped on every change
//!   (`snapshot`), re-exported there.
//! - [`manage`]: tenants, uploads, assignments, rollback, listing; `rates`: their
//!   per-tenant write rate limits.
//! - [`select`]: one selection, its policy guarded by the runtime's containment
//!   (`switchyard::GuardedSelector`) behind each version's shared quarantine breaker.
//! - [`registry`]: the data dir's store or a fleet's NATS registry, behind one type;
//!   [`fleet`]: a replica following the others' changes.
//! - [`tables`]: the worker tables held for routers, changed by versioned deltas.
//! - [`auth`]: tokens; [`metrics`]: Prometheus text; [`http`]: the routes.

#![forbid(unsafe_code)]

pub mod auth;
pub mod config;
pub mod error;
pub mod fleet;
pub mod http;
mod idle;
mod loader;
pub mod manage;
pub mod metrics;
mod params;
mod rates;
pub mod registry;
pub mod rollout;
pub mod select;
mod share;
mod snapshot;
pub mod state;
pub mod tables;
mod trials;
mod version;
/// The data directory, a crate of its own (`switchyard-store`) so that a router's
/// adapter can follow it without the service.
pub use switchyard_store as store;

use std::io::Write;

use anyhow::Context;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

pub use config::{ServiceConfig, ServiceLimits};
pub use error::ApiError;
pub use registry::RegistryOptions;
pub use state::{EngineOptions, Service};
use switchyard::{GuardConfig, Limits};

/// What `switchyard serve` was asked for.
pub struct ServeOptions {
    /// Address to listen on (`--listen`); port 0 picks a free port.
    pub listen: SocketAddr,
    /// The data directory (`--data-dir`): manifest, blobs, admin token.
    pub data_dir: PathBuf,
    /// A fleet's registry on NATS (`--registry nats://…`, `[registry]`) instead of the
    /// data dir's manifest and blobs; the data dir then keeps only this replica's admin
    /// token, compiled cache and artifact key.
    pub registry: Option<RegistryOptions>,
    /// What clients may ask of the service (`[service]`).
    pub limits: ServiceLimits,
    /// The quarantine breaker's settings for every tenant policy version (`[guard]`).
    pub guard: GuardConfig,
    /// The sandbox's limits for every guest (`[limits]`).
    pub engine_limits: Limits,
    /// Where our compiled output is cached (`--cache-dir`, `[cache] dir`); absent:
    /// `<data-dir>/compiled`, so a restart reloads every version without Cranelift.
    /// Either way the key that seals it is `<data-dir>/artifact.key` (or
    /// `SWITCHYARD_ARTIFACT_KEY`).
    pub cache_dir: Option<PathBuf>,
    /// How to start a compile worker (`switchyard compile-worker`): every compile then
    /// runs in a process killed at its deadline. `None` compiles on threads of this
    /// process, where a compile past its deadline runs on until Cranelift returns.
    pub compile_workers: Option<switchyard::WorkerCommand>,
}

/// Binds, opens the data directory, prints `listening on http://ADDR` on stdout (tests
/// and scripts read the port from it when listening on port 0), and serves until
/// interrupted.
pub fn run(options: ServeOptions) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let admin_env = std::env::var("SWITCHYARD_ADMIN_TOKEN").ok();
        let ServeOptions {
            listen,
            data_dir,
            registry,
            limits,
            guard,
            engine_limits,
            cache_dir,
            compile_workers,
        } = options;
        // Bound before the data dir is touched: a port in use fails here, having written
        // no directory, admin token or key.
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("listening on {listen} (`--listen`)"))?;
        let addr = listener.local_addr()?;
        let dir = data_dir.clone();
        let cache = cache_dir.unwrap_or_else(|| data_dir.join("compiled"));
        let service = tokio::task::spawn_blocking(move || {
            let engine = state::EngineOptions { limits: engine_limits, compile_workers };
            Service::open(&dir, registry.as_ref(), &cache, limits, guard, engine, admin_env)
        })
        .await??;
        // Every stored version loads in the background while the server answers (a
        // selection that reaches a cold version first loads it itself).
        tokio::spawn(state::warm(Arc::clone(&service)));
        // And versions unused for `evict_after_secs` are dropped again.
        tokio::spawn(state::evict(Arc::clone(&service)));
        // A fleet's replica follows the shared registry from here on, and sweeps its blobs.
        tokio::spawn(fleet::follow(Arc::clone(&service)));
        tokio::spawn(fleet::sweep(Arc::clone(&service)));
        if std::env::var_os("SWITCHYARD_ADMIN_TOKEN").is_none() {
            tracing::info!(path = %data_dir.join("admin.token").display(), "admin token");
        }
        println!("listening on http://{addr}");
        std::io::stdout().flush()?;
        http::serve(listener, service, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
        Ok(())
    })
}
