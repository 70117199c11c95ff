//! `switchyard-dynamo`: Dynamo's standalone selection service (`dynamo-kv-router` 1.6.1,
//! `services::selection`), its HTTP API unchanged, with Switchyard choosing the worker:
//! every routing partition runs its own tenant's policy component, sandboxed, followed
//! in the data directory of a running `switchyard serve` (see `docs/dynamo.md`).
//!
//! ```text
//! switchyard-dynamo --config /etc/switchyard/dynamo.toml
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, OnceLock, Weak};

mod serve;

use clap::Parser;
use dynamo_kv_router::services::selection::{RouterPluginRegistry, SelectionCore, SelectionServiceBuilder};
use dynamo_kv_router::{KvRouterConfig, WorkerType};
use serde::Deserialize;
use switchyard_dynamo::{Capacities, SwitchyardConfig, WorkerCapacity};

/// The workers' capacities from the service's own catalog (what `POST /workers` registered),
/// for the policies' capacity imports. Set once the service is built (the factory is made
/// before it; Dynamo calls the factory only when a partition's first worker registers).
/// Weak: the core owns the partitions, whose pickers hold this.
#[derive(Default)]
struct Catalog(OnceLock<Weak<SelectionCore>>);

impl Capacities for Catalog {
    fn capacities(&self, model_name: &str, routing_group: &str) -> Vec<WorkerCapacity> {
        let Some(core) = self.0.get().and_then(Weak::upgrade) else { return Vec::new() };
        core.list_workers(Some(model_name), Some(routing_group))
            .into_iter()
            .filter_map(|w| {
                Some(WorkerCapacity {
                    worker_id: w.worker_id,
                    total_kv_blocks: w.total_kv_blocks?,
                    max_num_batched_tokens: w.max_num_batched_tokens,
                })
            })
            .collect()
    }
}

/// Dynamo's standalone selection service with Switchyard in it: each routing partition's
/// worker is picked by its own tenant's policy component.
#[derive(Parser)]
#[command(name = "switchyard-dynamo", version)]
struct Args {
    /// The service's configuration (TOML; see docs/dynamo.md, "Running Dynamo's selection
    /// service with tenant policies").
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Check the configuration, load every tenant's policy, and exit without serving.
    #[arg(long)]
    check: bool,
}

/// The configuration file, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    /// The port Dynamo's server listens on (it binds every address).
    port: u16,
    /// The pool this service selects for.
    #[serde(default)]
    worker_type: Option<Pool>,
    /// Threads of each partition's KV-event indexer.
    #[serde(default)]
    indexer_threads: Option<usize>,
    /// The `parameters` of a `switchyard` worker-selection instance.
    switchyard: toml::Value,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum Pool {
    Aggregated,
    Prefill,
    Decode,
}

/// A checked configuration.
struct Config {
    port: u16,
    worker_type: WorkerType,
    indexer_threads: usize,
    switchyard: SwitchyardConfig,
}

/// The default of `indexer_threads`: Dynamo's own default is 4 per partition, which a
/// small machine with many partitions cannot afford.
const DEFAULT_INDEXER_THREADS: usize = 2;

impl Config {
    /// Reads and checks `path`; an error names the field (`switchyard.policy.store.class: empty`).
    fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
        let raw: RawConfig = toml::from_str(&text).map_err(|e| {
            // toml's message holds the line, the column and the key.
            e.to_string().trim_end().to_string()
        })?;
        if raw.port == 0 {
            return Err("port: must be 1 to 65535 (Dynamo's server does not report a port it picked)".into());
        }
        let indexer_threads = raw.indexer_threads.unwrap_or(DEFAULT_INDEXER_THREADS);
        if !(1..=64).contains(&indexer_threads) {
            return Err(format!("indexer_threads: must be 1 to 64, got {indexer_threads}"));
        }
        let worker_type = match raw.worker_type.unwrap_or(Pool::Aggregated) {
            Pool::Aggregated => WorkerType::Aggregated,
            Pool::Prefill => WorkerType::Prefill,
            Pool::Decode => WorkerType::Decode,
        };
        let parameters =
            serde_json::to_value(&raw.switchyard).map_err(|e| format!("switchyard: not a table: {e}"))?;
        let switchyard = SwitchyardConfig::from_json(parameters).map_err(|e| format!("switchyard.{e}"))?;
        Ok(Self { port: raw.port, worker_type, indexer_threads, switchyard })
    }
}

/// The argument a compile worker is started with: this binary, serving one compile at a
/// time on stdin/stdout for the service that started it (killed at the deadline).
const COMPILE_WORKER: &str = "compile-worker";

fn main() -> ExitCode {
    // Before the CLI: a worker's command line is this program's own, not a user's.
    let mut argv = std::env::args_os().skip(1);
    if let (Some(first), None) = (argv.next(), argv.next())
        && first == COMPILE_WORKER
    {
        return match switchyard::compile_worker_main::serve_worker() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("switchyard-dynamo {COMPILE_WORKER}: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let args = Args::parse();
    serve::init_logging();
    let mut config = match Config::read(&args.config) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("switchyard-dynamo: {}: {e}", args.config.display());
            return ExitCode::from(2);
        }
    };
    // Compiles in processes of this binary unless the config names another: killed at
    // `limits.compile_timeout_ms`, where a compile on a thread here would run on.
    match switchyard::WorkerCommand::current_exe([COMPILE_WORKER]) {
        Ok(command) => config.switchyard = config.switchyard.or_compile_workers(command),
        Err(e) => {
            eprintln!("switchyard-dynamo: cannot find its own executable for compile workers: {e}");
            return ExitCode::FAILURE;
        }
    }
    // Loads (and compiles) every tenant's policy now: a refusal names its field.
    let catalog = Arc::new(Catalog::default());
    let capacities: Arc<dyn Capacities> = Arc::clone(&catalog) as _;
    let factory = match switchyard_dynamo::factory_with_capacities(&config.switchyard, Some(capacities)) {
        Ok(factory) => factory,
        Err(e) => {
            eprintln!("switchyard-dynamo: {}: switchyard.{e}", args.config.display());
            return ExitCode::from(2);
        }
    };
    if args.check {
        println!("{}: ok", args.config.display());
        return ExitCode::SUCCESS;
    }
    serve::serve("switchyard-dynamo", config.port, async move {
        let mut registry = RouterPluginRegistry::default();
        switchyard_dynamo::register(&mut registry)?;
        let service = SelectionServiceBuilder::new(KvRouterConfig::default(), config.worker_type, registry)
            .worker_selection_policy_factory(factory)
            .indexer_threads(config.indexer_threads)
            .build()
            .await?;
        let _ = catalog.0.set(Arc::downgrade(service.core()));
        Ok(service)
    })
}
