//! `dynamo-stock`: Dynamo's standalone selection service (`dynamo-kv-router` 1.6.1) as
//! Dynamo builds it, choosing by Dynamo's own reference policy and nothing else: the
//! baseline `switchyard-dynamo` is compared with, on the same API, by the differential
//! test and the HTTP bench.
//!
//! ```text
//! dynamo-stock --port 8090
//! ```

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use dynamo_kv_router::services::selection::{RouterPluginRegistry, SelectionServiceBuilder, run_server};
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
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("dynamo-stock: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let served = runtime.block_on(async move {
        // 1.6.1 ships no default policy outside its `bench` feature: this is the one its
        // own service tests install.
        let registry = RouterPluginRegistry::default().with_default_factory(Arc::new(|config, role, _| {
            WorkerSelectionPolicy::reference(config.clone(), role.default_selector_label())
        }));
        let service =
            SelectionServiceBuilder::new(KvRouterConfig::default(), WorkerType::Aggregated, registry)
                .indexer_threads(usize::from(args.indexer_threads))
                .build()
                .await?;
        eprintln!("dynamo-stock: serving Dynamo's selection API on port {}", args.port);
        run_server(args.port, service).await
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dynamo-stock: {e:#}");
            ExitCode::FAILURE
        }
    }
}
