//! What both binaries do around Dynamo's selection service: their log, the runtime, and
//! serving on a port until the process ends.

use std::future::Future;
use std::io::IsTerminal;
use std::process::ExitCode;

use dynamo_kv_router::services::selection::{SelectionService, run_server};

/// Logs to stderr (`RUST_LOG`, default `info`), coloured only on a terminal.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}

/// Builds the service with `build` (on the runtime: Dynamo's builder spawns tasks) and
/// serves it on `port`; `name` prefixes what it says.
pub fn serve(
    name: &str,
    port: u16,
    build: impl Future<Output = anyhow::Result<SelectionService>>,
) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("{name}: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let served = runtime.block_on(async move {
        let service = build.await?;
        eprintln!("{name}: serving Dynamo's selection API on port {port}");
        run_server(port, service).await
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e:#}");
            ExitCode::FAILURE
        }
    }
}
