//! `switchyard serve`: the multi-tenant policy service (see the `switchyard-service` crate).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use switchyard::selection::wire::ErrorKind;

use super::config::LimitArgs;
use crate::output::CliError;

#[derive(Args)]
pub struct ServeArgs {
    /// Address to listen on; port 0 picks a free port (printed on stdout).
    #[arg(long, default_value = "127.0.0.1:7700")]
    listen: SocketAddr,
    /// Where tenants, policies and the admin token are kept.
    #[arg(long, default_value = "./switchyard-data")]
    data_dir: PathBuf,
    /// A fleet's registry (`nats://HOST:PORT`, NATS with JetStream) shared by every
    /// replica, instead of the data dir's manifest and blobs (or `[registry] url`).
    #[arg(long)]
    registry: Option<String>,
    /// Sandbox limits (`[limits]`), service limits (`[service]`) and the quarantine
    /// breaker (`[guard]`, or --quarantine-after etc.); see --config.
    #[command(flatten)]
    limits: LimitArgs,
}

pub fn run(args: ServeArgs) -> Result<(), CliError> {
    // Every component loaded from the compiled cache holds its mapped file open.
    switchyard::artifact_cache::raise_descriptor_limit();
    let limits = args.limits.service_limits()?;
    let engine_limits = args.limits.serve_limits(&limits)?;
    let options = switchyard_service::ServeOptions {
        listen: args.listen,
        data_dir: args.data_dir,
        registry: args.limits.registry(args.registry)?,
        limits,
        guard: args.limits.guard()?,
        engine_limits,
        cache_dir: args.limits.cache_dir()?,
        // Every compile in a worker process (this binary), killed at its deadline.
        compile_workers: Some(switchyard::WorkerCommand::current_exe(["compile-worker"]).map_err(|e| {
            CliError::new(ErrorKind::Serve, format!("finding this executable for its compile workers: {e}"))
        })?),
    };
    switchyard_service::run(options).map_err(|e| CliError::new(ErrorKind::Serve, format!("{e:#}")))
}
