//! `switchyard select`: one selection, printed as JSON.

use std::path::PathBuf;

use clap::Args;
use serde_json::json;
use switchyard::selection::wire::ErrorKind;
use switchyard::selection::wire::{DecidedBy, Receipt, RequestJson, SAMPLE_REQUEST, SelectionAnswer};
use switchyard::{Decider, FailMode, SelectError};

use super::config::LimitArgs;
use crate::output::{CliError, print_json};
use crate::source::load_policy;

#[derive(Args)]
pub struct SelectArgs {
    /// A builtin policy name (see `switchyard policy list`) or a component file (.wasm).
    #[arg(long, default_value = "default")]
    policy: String,
    /// Run the builtin's component build (the same source) instead of its native build.
    #[arg(long)]
    guest: bool,
    /// The request JSON; absent: the embedded sample (`--print-sample` prints it).
    #[arg(long)]
    input: Option<PathBuf>,
    /// Print the embedded sample request and exit, to start a request file from
    /// (`switchyard select --print-sample > req.json`).
    #[arg(long, conflicts_with = "input")]
    print_sample: bool,
    /// The policy's parameters, a JSON object.
    #[arg(long, default_value = "{}")]
    params: String,
    /// On a policy fault, fail (exit 3, the fault's kind) instead of falling back to the
    /// native default policy.
    #[arg(long)]
    fail_closed: bool,
    /// Run the selection this many times on one instance (shows quarantine; prints the
    /// last decision plus the guard's counters and breaker state).
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    #[command(flatten)]
    limits: LimitArgs,
}

/// No eligible worker (exit 2), or a fail-closed fault (exit 3, named by its kind).
fn select_error(e: SelectError) -> CliError {
    match e {
        SelectError::NoEligibleWorker => {
            CliError::new(ErrorKind::NoEligibleWorker, "no worker is eligible for this request")
        }
        SelectError::Fault { fault, .. } => {
            CliError { kind: fault.kind.into(), message: fault.message, code: 3 }
        }
    }
}

pub fn run(args: SelectArgs) -> Result<(), CliError> {
    if args.print_sample {
        // Exactly the embedded bytes: what `select` runs on without `--input`.
        outln!("{}", SAMPLE_REQUEST.trim_end_matches('\n'));
        return Ok(());
    }
    let text = match &args.input {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| CliError::new(ErrorKind::Io, format!("reading {}: {e}", path.display())))?,
        None => SAMPLE_REQUEST.to_string(),
    };
    let parsed =
        RequestJson::parse(&text).map_err(|e| CliError::new(ErrorKind::InvalidInput, e.to_string()))?;
    let receipt = parsed.receipt;
    let (table, request) =
        parsed.into_parts().map_err(|e| CliError::new(ErrorKind::InvalidInput, e.to_string()))?;
    let guard = args.limits.guard()?;
    let built = load_policy(&args.policy, args.guest, &args.params, &mut || args.limits.engine())?;
    let mode = if args.fail_closed { FailMode::Closed } else { FailMode::Open };
    // Faults are contained by the guard: fail-open, the native default policy decides.
    let mut selector = switchyard_builtins::guarded(built.scorer, mode, guard);
    let mut last = None;
    for _ in 0..args.repeat.max(1) {
        let decision = selector.select(&table, &request).map_err(select_error)?;
        // What the scoring spent and read, before the commit's call replaces it.
        let call = (receipt.is_some() && decision.decided_by == Decider::Policy)
            .then(|| selector.policy().scorers().find_map(|s| s.last_call()))
            .flatten();
        // A commit fault is contained like any other: fail-open keeps the pick.
        let commit_fault =
            selector.commit(&table, &request, decision.selection.chosen).map_err(select_error)?;
        last = Some((decision, commit_fault, call));
    }
    let (decision, commit_fault, call) = last.expect("at least one selection ran");
    let by = match decision.fallback {
        None => DecidedBy { policy: selector.name().to_string(), build: built.build, version: built.sha256 },
        Some(_) => DecidedBy { policy: selector.fallback_name().to_string(), build: "native", version: None },
    };
    let costs = || selector.last_candidates().zip(selector.last_costs().iter().copied());
    let mut answer = SelectionAnswer::new(decision.selection, by, costs(), decision.fallback, commit_fault);
    answer.receipt = receipt.map(|ask| Receipt::new(&table, &request, costs(), ask.top, call));
    let mut out = serde_json::to_value(answer).expect("an answer always serialises");
    if args.repeat > 1 {
        out["counters"] = json!(selector.counters());
        out["breaker"] = json!(selector.breaker());
    }
    print_json(&out);
    Ok(())
}
