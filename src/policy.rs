//! `switchyard policy …`: list builtins, check a component, wrap a core module, write the C
//! SDK; and, against
//! a running server, upload, assign, roll back and forward and list a tenant's policies.

use std::path::PathBuf;

use clap::Subcommand;
use serde_json::json;
use switchyard::selection::wire::ErrorKind;
use switchyard::selection::wire::api::AssignBody;
use switchyard::{FailMode, GuestScorer, PolicyComponent};
use switchyard_builtins as builtin;

use super::client::{Method, ServerArgs, encode_query};
use super::config::LimitArgs;
use crate::output::{CliError, print_json, read_file, write_file};

#[derive(Subcommand)]
pub enum PolicyCommand {
    /// List the builtin policies; with --tenant, that tenant's policies on a server.
    List {
        /// List this tenant's policies, versions and assignments on --server instead.
        #[arg(long)]
        tenant: Option<String>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Upload a component to a server as a tenant's policy (a new active version).
    Upload {
        /// The component file.
        file: PathBuf,
        #[arg(long)]
        tenant: String,
        /// The policy's name; default: the file name without `.wasm`.
        #[arg(long)]
        name: Option<String>,
        /// Parameters to configure it with, a JSON object.
        #[arg(long)]
        params: Option<String>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Route a policy class of a tenant to a policy (a builtin or the tenant's own).
    Assign {
        #[arg(long)]
        tenant: String,
        /// The policy class (a request's `policy_class`).
        #[arg(long)]
        class: String,
        /// The policy's name.
        #[arg(long)]
        policy: String,
        /// Pin this version; absent: follow the policy's active version.
        #[arg(long)]
        version: Option<String>,
        /// On a policy fault: `open` (the native default decides) or `closed` (fail).
        #[arg(long, default_value = "open", value_parser = ["open", "closed"])]
        on_fault: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Make the previously active version of a tenant's policy active again.
    Rollback {
        /// The policy's name.
        name: String,
        #[arg(long)]
        tenant: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Make active again the version a rollback of a tenant's policy replaced.
    Rollforward {
        /// The policy's name.
        name: String,
        #[arg(long)]
        tenant: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Run a policy beside a class's on a share of its selections, after each is answered,
    /// and report how they compare (--report), or stop it (--off).
    Shadow(Box<crate::rollout::ShadowArgs>),
    /// Route a share of a class's selections to a policy, rolled back by itself when it
    /// faults; --status reports it.
    Canary(Box<crate::rollout::CanaryArgs>),
    /// Make a class's canary its own policy (pinned), ending the canary.
    Promote(crate::rollout::ClassArgs),
    /// End a class's canary: its own policy decides all of it again.
    Abort(crate::rollout::ClassArgs),
    /// Validate a component: world, imports, exports, size; configure it with --params.
    Check {
        /// The component file.
        file: PathBuf,
        /// Parameters to configure it with, a JSON object.
        #[arg(long, default_value = "{}")]
        params: String,
        #[command(flatten)]
        limits: Box<LimitArgs>,
    },
    /// Wrap a wasm32-unknown-unknown core module built with the guest SDK as a component.
    Wrap {
        /// The core module (`target/wasm32-unknown-unknown/release/<crate>.wasm`).
        core: PathBuf,
        /// Where to write the component.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Write the SDK of another language into a directory: for C, the bindings wit-bindgen
    /// generates from the policy world, with the SDK's header, glue and allocator.
    Bindings {
        /// The language (Rust policies use the `switchyard-guest-sdk` crate instead).
        #[arg(long, value_parser = ["c"])]
        lang: String,
        /// The directory to write into (created if missing).
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Write a builtin's component build to a file.
    Export {
        /// The builtin's name.
        name: String,
        #[arg(short, long)]
        output: PathBuf,
    },
}

pub fn run(command: PolicyCommand) -> Result<(), CliError> {
    match command {
        PolicyCommand::Shadow(args) => crate::rollout::shadow(*args),
        PolicyCommand::Canary(args) => crate::rollout::canary(*args),
        PolicyCommand::Promote(class) => crate::rollout::end_canary(class, "promote"),
        PolicyCommand::Abort(class) => crate::rollout::end_canary(class, "abort"),
        PolicyCommand::List { tenant: Some(tenant), server } => {
            print_json(&server.call(Method::Get, &format!("/v1/tenants/{tenant}/policies"), None)?);
            Ok(())
        }
        PolicyCommand::Upload { file, tenant, name, params, server } => {
            let bytes = read_file(&file)?;
            let name = match name {
                Some(n) => n,
                None => file
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .ok_or_else(|| CliError::new(ErrorKind::InvalidInput, "name the policy with --name"))?,
            };
            let mut path = format!("/v1/tenants/{tenant}/policies/{name}");
            if let Some(p) = params {
                path.push_str(&format!("?params={}", encode_query(&p)));
            }
            print_json(&server.call(Method::Put, &path, Some(&bytes))?);
            Ok(())
        }
        PolicyCommand::Assign { tenant, class, policy, version, on_fault, server } => {
            // clap allows only the two names, which are FailMode's.
            let on_fault = if on_fault == "closed" { FailMode::Closed } else { FailMode::Open };
            let body = serde_json::to_string(&AssignBody { policy, version, on_fault })
                .expect("a body always serialises");
            let path = format!("/v1/tenants/{tenant}/classes/{class}");
            print_json(&server.call(Method::Put, &path, Some(body.as_bytes()))?);
            Ok(())
        }
        PolicyCommand::Rollback { name, tenant, server } => {
            let path = format!("/v1/tenants/{tenant}/policies/{name}/rollback");
            print_json(&server.call(Method::Post, &path, None)?);
            Ok(())
        }
        PolicyCommand::Rollforward { name, tenant, server } => {
            let path = format!("/v1/tenants/{tenant}/policies/{name}/rollforward");
            print_json(&server.call(Method::Post, &path, None)?);
            Ok(())
        }
        PolicyCommand::List { tenant: None, .. } => {
            let list: Vec<_> = builtin::BUILTINS
                .iter()
                .map(
                    |b| json!({ "name": b.name, "summary": b.summary, "component_bytes": b.component.len() }),
                )
                .collect();
            print_json(&json!(list));
            Ok(())
        }
        PolicyCommand::Check { file, params, limits } => {
            let bytes = read_file(&file)?;
            let engine = limits.engine()?;
            let component = PolicyComponent::load(&engine, &bytes)?;
            let scorer = GuestScorer::new("check", component.clone(), &params)?;
            let info = switchyard::selection::Scorer::info(&scorer);
            print_json(&json!({
                "ok": true,
                "world": switchyard::component::WORLD,
                "size_bytes": component.size(),
                "sha256": component.digest(),
                "imports": component.imports(),
                "exports": component.exports(),
                "compile_ms": component.compile_time().as_secs_f64() * 1e3,
                "compiler": component.compiled_by(),
                "inputs": {
                    "cache": info.inputs.contains(switchyard_guest_sdk::InputGroups::CACHE),
                    "load": info.inputs.contains(switchyard_guest_sdk::InputGroups::LOAD),
                    "affinity": info.inputs.contains(switchyard_guest_sdk::InputGroups::AFFINITY),
                },
                "filters": info.filters,
                "wants_commits": info.wants_commits,
            }));
            Ok(())
        }
        PolicyCommand::Wrap { core, output } => {
            let bytes = read_file(&core)?;
            let component = switchyard_guest_build::componentize(&bytes)
                .map_err(|e| CliError::new(ErrorKind::Componentize, format!("{e:#}")))?;
            write(&output, &component)
        }
        PolicyCommand::Bindings { lang: _, output } => {
            // clap allows only `c`.
            use switchyard_guest_build::c;
            let written = c::write_sdk(&output)
                .map_err(|e| CliError::new(ErrorKind::Io, format!("writing the C SDK: {e:#}")))?;
            // What to build with (the flags the test guests are built with).
            let compile_flags = [c::COMPILE_FLAGS, &[c::POLICY_OPT]].concat();
            print_json(&json!({
                "written": written,
                "compile_flags": compile_flags,
                "link_flags": c::LINK_FLAGS,
            }));
            Ok(())
        }
        PolicyCommand::Export { name, output } => {
            let builtin = builtin::find(&name).ok_or_else(|| {
                CliError::new(
                    ErrorKind::UnknownPolicy,
                    format!("`{name}` is not a builtin ({})", builtin::names().join(", ")),
                )
            })?;
            write(&output, builtin.component)
        }
    }
}

/// Writes `bytes` to `path` and says so on stdout.
fn write(path: &PathBuf, bytes: &[u8]) -> Result<(), CliError> {
    write_file(path, bytes)?;
    print_json(&json!({ "written": path, "bytes": bytes.len() }));
    Ok(())
}
