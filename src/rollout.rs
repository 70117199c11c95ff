//! A class's rollout on a running server: `switchyard policy shadow|canary|promote|abort`
//! and `switchyard capture`.

use std::path::PathBuf;

use clap::Args;
use switchyard::selection::wire::api::{CanaryBody, CaptureBody, ShadowBody};

use super::client::{Method, ServerArgs};
use crate::output::{CliError, print_json, write_file};

/// The class a rollout command acts on.
#[derive(Args, Debug)]
pub struct ClassArgs {
    #[arg(long)]
    tenant: String,
    /// The policy class (assigned already).
    #[arg(long)]
    class: String,
    #[command(flatten)]
    server: ServerArgs,
}

impl ClassArgs {
    fn path(&self, what: &str) -> String {
        format!("/v1/tenants/{}/classes/{}/{what}", self.tenant, self.class)
    }
}

/// `switchyard policy shadow`.
#[derive(Args, Debug)]
pub struct ShadowArgs {
    #[command(flatten)]
    class: ClassArgs,
    /// Run this policy (a builtin or the tenant's) beside the class's.
    #[arg(long, conflicts_with_all = ["off", "report"], required_unless_present_any = ["off", "report"])]
    policy: Option<String>,
    /// That version; absent: the policy's active one, pinned now.
    #[arg(long, requires = "policy")]
    version: Option<String>,
    /// The share of the class's selections it runs on, 0 to 1.
    #[arg(long, requires = "policy", default_value_t = 1.0)]
    rate: f64,
    /// Stop the class's shadow (its report stays readable).
    #[arg(long, conflicts_with = "report")]
    off: bool,
    /// Print this server's report of the shadow: agreement, regret, faults, latencies,
    /// the last disagreements.
    #[arg(long)]
    report: bool,
}

/// `switchyard policy canary`.
#[derive(Args, Debug)]
pub struct CanaryArgs {
    #[command(flatten)]
    class: ClassArgs,
    /// Route a share of the class to this policy (a builtin or the tenant's).
    #[arg(long, conflicts_with = "status", required_unless_present = "status")]
    policy: Option<String>,
    /// That version; absent: the policy's active one, pinned now.
    #[arg(long, requires = "policy")]
    version: Option<String>,
    /// Percent of the class's request keys (`session`, else `seed`) it decides.
    #[arg(long, requires = "policy", default_value_t = 10.0)]
    weight: f64,
    /// Roll back by itself past this fault rate [server default: 0.05].
    #[arg(long, requires = "policy")]
    max_fault_rate: Option<f64>,
    /// Canary selections before its fault rate is judged [server default: 20].
    #[arg(long, requires = "policy")]
    min_selections: Option<u32>,
    /// The most recent canary selections the fault rate is over [server default: 100].
    #[arg(long, requires = "policy")]
    window: Option<u32>,
    /// Print the canary, this server's count of its selections and faults, and how the
    /// last one ended.
    #[arg(long)]
    status: bool,
}

/// `switchyard capture`.
#[derive(Args, Debug)]
pub struct CaptureArgs {
    #[command(flatten)]
    class: ClassArgs,
    /// Start keeping the class's last N selections (each server its own).
    #[arg(long, value_name = "N", conflicts_with_all = ["off", "output"])]
    keep: Option<u32>,
    /// Stop capturing and forget what was captured.
    #[arg(long, conflicts_with = "output")]
    off: bool,
    /// Write the captured selections here (a trace for `switchyard replay`); without
    /// --keep, --off or this, they go to standard output.
    #[arg(short, long)]
    output: Option<PathBuf>,
}

fn body(value: &impl serde::Serialize) -> Vec<u8> {
    serde_json::to_vec(value).expect("a body always serialises")
}

pub fn shadow(args: ShadowArgs) -> Result<(), CliError> {
    let ShadowArgs { class, policy, version, rate, off, report } = args;
    let path = class.path("shadow");
    let answer = match (policy, off, report) {
        (Some(policy), _, _) => {
            class.server.call(Method::Put, &path, Some(&body(&ShadowBody { policy, version, rate })))?
        }
        (None, true, _) => class.server.call(Method::Delete, &path, None)?,
        (None, false, _) => class.server.call(Method::Get, &path, None)?,
    };
    print_json(&answer);
    Ok(())
}

pub fn canary(args: CanaryArgs) -> Result<(), CliError> {
    let CanaryArgs { class, policy, version, weight, max_fault_rate, min_selections, window, status: _ } =
        args;
    let path = class.path("canary");
    let answer = match policy {
        Some(policy) => {
            let canary = CanaryBody { policy, version, weight, max_fault_rate, min_selections, window };
            class.server.call(Method::Put, &path, Some(&body(&canary)))?
        }
        None => class.server.call(Method::Get, &path, None)?,
    };
    print_json(&answer);
    Ok(())
}

/// `switchyard policy promote` (`end` = "promote") or `abort`.
pub fn end_canary(class: ClassArgs, end: &str) -> Result<(), CliError> {
    print_json(&class.server.call(Method::Post, &class.path(&format!("canary/{end}")), None)?);
    Ok(())
}

pub fn capture(args: CaptureArgs) -> Result<(), CliError> {
    let CaptureArgs { class, keep, off, output } = args;
    let path = class.path("capture");
    if let Some(selections) = keep {
        print_json(&class.server.call(Method::Put, &path, Some(&body(&CaptureBody { selections })))?);
    } else if off {
        print_json(&class.server.call(Method::Delete, &path, None)?);
    } else {
        let lines = class.server.get_text(&path)?;
        match output {
            Some(file) => write_file(&file, lines.as_bytes())?,
            None if lines.is_empty() => {}
            None => outln!("{}", lines.trim_end_matches('\n')),
        }
    }
    Ok(())
}
