//! `switchyard tenant add NAME`: create a tenant on a running server (admin token).

use clap::Subcommand;
use switchyard::selection::wire::api::NameBody;

use super::client::{Method, ServerArgs};
use crate::output::{CliError, print_json};

#[derive(Subcommand)]
pub enum TenantCommand {
    /// Create a tenant; prints its token (shown once).
    Add {
        /// The tenant's name: a-z, 0-9, `-`, `_`.
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
}

pub fn run(command: TenantCommand) -> Result<(), CliError> {
    match command {
        TenantCommand::Add { name, server } => {
            let body = serde_json::to_string(&NameBody { name }).expect("a body always serialises");
            print_json(&server.call(Method::Post, "/v1/tenants", Some(body.as_bytes()))?);
            Ok(())
        }
    }
}
