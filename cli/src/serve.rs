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
    /// Sandbox limits (`[limits]`), service limits (`[service]`) and the quarantine
    /// breaker (`[guard]`, or --quarantine-after etc.); see --config.
    #[command(flatten)]
    limits: LimitArgs,
}

pub fn run(args: ServeArgs) -> Result<(), CliError> {
    // Structured logs on stderr (stdout carries the `listening on` line scripts read):
    // `RUST_LOG` filters, `info` by default.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
    let options = switchyard_service::ServeOptions {
        listen: args.listen,
        data_dir: args.data_dir,
        limits: args.limits.service_limits()?,
        guard: args.limits.guard()?,
        engine_limits: args.limits.limits()?,
        cache_dir: args.limits.cache_dir()?,
    };
    switchyard_service::run(options).map_err(|e| CliError::new(ErrorKind::Serve, format!("{e:#}")))
}
