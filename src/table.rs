//! `switchyard table`: the worker tables a running server holds for a tenant's router:
//! put one whole, change it by a delta on the version it names, show it, select from it,
//! delete it.

use std::io::Read;
use std::path::{Path, PathBuf};

use clap::Subcommand;
use switchyard::selection::wire::{ErrorKind, RequestJson, TableDelta, TableJson};

use super::client::{Method, ServerArgs};
use crate::output::{CliError, print_json};

#[derive(Subcommand)]
pub enum TableCommand {
    /// Put a table whole (workers and their inputs), replacing any of that name; prints
    /// its version.
    Put {
        /// The table's name.
        name: String,
        #[arg(long)]
        tenant: String,
        /// The table, JSON (`{"workers": [...], "inputs": {...}}`); `-` reads standard input.
        #[arg(long)]
        file: PathBuf,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Change a table by a delta (`{"base_version": V, "remove": [...], "add": [...],
    /// "inputs": {...}}`), applied only on version V; prints the new version.
    Change {
        /// The table's name.
        name: String,
        #[arg(long)]
        tenant: String,
        /// The delta, JSON; `-` reads standard input.
        #[arg(long)]
        file: PathBuf,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Print a table's current version whole: its workers and a row per slot.
    Show {
        /// The table's name.
        name: String,
        #[arg(long)]
        tenant: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Select from a table: the request file without `workers` (its `inputs` are the rows
    /// it changes, its overlaps say); prints the answer.
    Select {
        /// The table's name.
        name: String,
        #[arg(long)]
        tenant: String,
        /// The request, JSON; `-` reads standard input.
        #[arg(long)]
        input: PathBuf,
        /// Only from this version of the table (refused if it is not the current one).
        #[arg(long)]
        version: Option<u64>,
        /// List every candidate's cost in the answer.
        #[arg(long)]
        costs: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Delete a table.
    Delete {
        /// The table's name.
        name: String,
        #[arg(long)]
        tenant: String,
        #[command(flatten)]
        server: ServerArgs,
    },
}

/// The file's bytes, or standard input's for `-`.
fn read(path: &Path) -> Result<Vec<u8>, CliError> {
    let mut bytes = Vec::new();
    let read = if path.as_os_str() == "-" {
        std::io::stdin().read_to_end(&mut bytes).map(|_| ())
    } else {
        std::fs::read(path).map(|b| bytes = b)
    };
    read.map_err(|e| CliError::new(ErrorKind::Io, format!("{}: {e}", path.display())))?;
    Ok(bytes)
}

/// `bytes` parsed as `T`, or an error naming the file and where the JSON is wrong, before
/// anything is sent.
fn parsed<T: serde::de::DeserializeOwned>(path: &Path, what: &str, bytes: &[u8]) -> Result<T, CliError> {
    serde_json::from_slice(bytes)
        .map_err(|e| CliError::new(ErrorKind::InvalidInput, format!("{}: {what} JSON: {e}", path.display())))
}

pub fn run(command: TableCommand) -> Result<(), CliError> {
    let path = |tenant: &str, name: &str| format!("/v1/tenants/{tenant}/tables/{name}");
    let answer = match command {
        TableCommand::Put { name, tenant, file, server } => {
            let table: TableJson = parsed(&file, "table", &read(&file)?)?;
            let body = serde_json::to_vec(&table).expect("a table serialises");
            server.call(Method::Put, &path(&tenant, &name), Some(&body))?
        }
        TableCommand::Change { name, tenant, file, server } => {
            let delta: TableDelta = parsed(&file, "delta", &read(&file)?)?;
            let body = serde_json::to_vec(&delta).expect("a delta serialises");
            server.call(Method::Post, &format!("{}/deltas", path(&tenant, &name)), Some(&body))?
        }
        TableCommand::Show { name, tenant, server } => {
            server.call(Method::Get, &path(&tenant, &name), None)?
        }
        TableCommand::Select { name, tenant, input, version, costs, server } => {
            let mut request: RequestJson = parsed(&input, "request", &read(&input)?)?;
            if !request.workers.is_empty() {
                return Err(CliError::new(
                    ErrorKind::InvalidInput,
                    format!(
                        "{}: the request lists `workers`; from a held table it names none (the table has them)",
                        input.display()
                    ),
                ));
            }
            request.tenant = Some(tenant);
            request.table = Some(name);
            request.table_version = version.or(request.table_version);
            request.costs |= costs;
            let body = serde_json::to_vec(&request).expect("a request serialises");
            server.call(Method::Post, "/v1/select", Some(&body))?
        }
        TableCommand::Delete { name, tenant, server } => {
            server.call(Method::Delete, &path(&tenant, &name), None)?
        }
    };
    print_json(&answer);
    Ok(())
}
