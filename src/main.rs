//! The `switchyard` command line. Output is JSON on stdout; errors are one line on
//! stderr starting with `error: <kind>:`, and a non-zero exit.

#![forbid(unsafe_code)]

mod chart;
mod client;
mod config;
#[macro_use]
mod output;
mod policy;
mod replay;
mod rollout;
mod select;
mod serve;
mod source;
mod table;
mod tenant;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

// The binary's heap, not the library's: a router embedding `switchyard` keeps its own.
// A version's load (the compiled component's metadata, an instance's host state) and a
// compile allocate a lot: against glibc's malloc, cold selections and compiles are faster
// and resident memory higher (docs/benchmarks-history.md, "mimalloc in the binary").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "switchyard", version, about = "Tenant worker-selection policies as sandboxed WebAssembly")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Select a worker for one request and print the decision as JSON.
    Select(Box<select::SelectArgs>),
    /// Inspect, check and build policy components; upload, assign and roll back on a server.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Run the multi-tenant policy service (HTTP).
    Serve(serve::ServeArgs),
    /// Manage tenants on a running server.
    #[command(subcommand)]
    Tenant(tenant::TenantCommand),
    /// Worker tables a running server holds for a tenant's router: put, change, show,
    /// select from, delete.
    #[command(subcommand)]
    Table(table::TableCommand),
    /// Replay a request trace through a simulated cluster: routing quality per policy.
    Replay(replay::ReplayArgs),
    /// Capture a class's last selections on a running server, and read them as a trace
    /// for `switchyard replay`.
    Capture(rollout::CaptureArgs),
    /// Compiles components for `switchyard serve`, which starts it, on standard input and
    /// output (not for people).
    #[command(hide = true)]
    CompileWorker,
}

/// `--tenant`'s help, for every command that takes it without its own: the server
/// commands take the same flag, and one sentence keeps them alike.
fn with_tenant_help(command: clap::Command) -> clap::Command {
    command
        .mut_args(|arg| match arg.get_help() {
            None if arg.get_id() == "tenant" => {
                arg.help("The tenant to act for: its name on the server (`switchyard tenant add NAME`).")
            }
            _ => arg,
        })
        .mut_subcommands(with_tenant_help)
}

fn main() -> ExitCode {
    let mut matches = with_tenant_help(Cli::command()).get_matches();
    let cli = Cli::from_arg_matches_mut(&mut matches).unwrap_or_else(|e| e.exit());
    output::init_logs();
    let result = match cli.command {
        Command::Select(args) => select::run(*args),
        Command::Policy(command) => policy::run(command),
        Command::Serve(args) => serve::run(args),
        Command::Tenant(command) => tenant::run(command),
        Command::Table(command) => table::run(command),
        Command::Replay(args) => replay::run(args),
        Command::Capture(args) => rollout::capture(args),
        Command::CompileWorker => switchyard::compile_worker_main::serve_worker().map_err(|e| {
            output::CliError::new(
                switchyard::selection::wire::ErrorKind::Serve,
                format!("compile worker: {e:#}"),
            )
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.report(),
    }
}
