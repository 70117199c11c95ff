//! `dynamo-stock`: Dynamo's standalone selection service (`dynamo-kv-router` 1.6.1) as
//! Dynamo builds it, choosing by Dynamo's own reference policy and nothing else: the
//! baseline `switchyard-dynamo` is compared with, on the same API, by the differential
//! test and the HTTP bench.
//!
//! ```text
//! dynamo-stock --port 8090
//! ```

use std::process::ExitCode;
use std::sync::Arc;

mod serve;

use clap::Parser;
use dynamo_kv_router::services::selection::{RouterPluginRegistry, SelectionServiceBuilder};
use dynamo_kv_router::{KvRouterConfig, WorkerSelectionPolicy, WorkerType};

/// Dynamo's standalone selection service with Dynamo's reference policy (its default
/// cost, temperature 0, ties broken at random).
#[derive(Parser)]
#[command(name = "dynamo-stock", version)]
struct Args {
    /// The port the server listens on (every address).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    port: u16,
    /// Threads of each partition's KV-event indexer (as `switchyard-dynamo`'s
    /// `indexer_threads`).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    indexer_threads: u16,
}

fn main() -> ExitCode {
    let args = Args::parse();
    serve::init_logging();
    serve::serve("dynamo-stock", args.port, async move {
        // 1.6.1 ships no default policy outside its `bench` feature: this is the one its
        // own service tests install.
        let registry = RouterPluginRegistry::default().with_default_factory(Arc::new(|config, role, _| {
            WorkerSelectionPolicy::reference(config.clone(), role.default_selector_label())
        }));
        SelectionServiceBuilder::new(KvRouterConfig::default(), WorkerType::Aggregated, registry)
            .indexer_threads(usize::from(args.indexer_threads))
            .build()
            .await
    })
}
