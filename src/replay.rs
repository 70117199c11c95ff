//! `switchyard replay`: route a trace through a simulated cluster with one or more
//! policies; a human summary on stdout, the canonical report with `--report`, a chart
//! with `--svg`. Progress goes to stderr, only when it is a terminal.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{Value, json};
use switchyard::selection::wire::ErrorKind;
use switchyard::{FailMode, PolicyEngine};
use switchyard_replay::{Mode, PolicyLabel, ReplayConfig, ReplayError, Report, Trace, canonical_json};

use super::chart;
use super::config::LimitArgs;
use crate::output::{CliError, read_file, write_file};
use crate::source::load_policy;

/// The conversation trace the project ships (`traces/`, see its README).
const DEFAULT_TRACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/traces/conversation_trace.jsonl");

#[derive(Args)]
pub struct ReplayArgs {
    /// A Mooncake-format JSONL trace [default: the shipped
    /// traces/conversation_trace.jsonl].
    #[arg(long)]
    trace: Option<PathBuf>,
    /// A builtin policy name or a component file (.wasm).
    #[arg(long, default_value = "default")]
    policy: String,
    /// Run builtins' component builds instead of their native builds.
    #[arg(long)]
    guest: bool,
    /// The policy's parameters, a JSON object (for every policy of --compare too).
    #[arg(long, default_value = "{}")]
    params: String,
    /// Workers in all (disaggregated: ceil(N/2) prefill, floor(N/2) decode).
    #[arg(long, default_value_t = 16)]
    workers: u32,
    /// Replay only the first ROWS rows.
    #[arg(long, value_name = "ROWS")]
    limit: Option<usize>,
    /// aggregated or disaggregated.
    #[arg(long, default_value = "aggregated", value_parser = parse_mode)]
    mode: Mode,
    /// The run's seed (ties and sampling of every request derive from it).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Replay arrivals this many times faster than the trace's timestamps.
    #[arg(long, default_value_t = 1.0)]
    speedup: f64,
    /// KV blocks per worker (of --block-size tokens): the prefix cache's capacity.
    #[arg(long, default_value_t = 2048)]
    kv_blocks: u32,
    /// Tokens per hash_ids block in the trace (Mooncake: 512).
    #[arg(long, default_value_t = 512)]
    block_size: u32,
    /// Write the canonical JSON report here (with --compare: {"reports": [...]}).
    #[arg(long)]
    report: Option<PathBuf>,
    /// Several policies side by side, comma-separated (replaces --policy).
    #[arg(long, value_delimiter = ',')]
    compare: Vec<String>,
    /// Write an SVG chart of the TTFT distribution (CDF) per policy here.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Stop at the first policy fault (naming its row) instead of falling back to the
    /// native default policy and counting the fault in the report.
    #[arg(long)]
    fail_closed: bool,
    #[command(flatten)]
    limits: LimitArgs,
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    Mode::parse(s).ok_or_else(|| format!("`{s}` is not a mode; use aggregated or disaggregated"))
}

/// One finished run.
struct Run {
    label: String,
    report: Report,
    wall_s: f64,
}

pub fn run(args: ReplayArgs) -> Result<(), CliError> {
    let path = match &args.trace {
        Some(path) => path.clone(),
        None => {
            let path = PathBuf::from(DEFAULT_TRACE);
            if !path.is_file() {
                return Err(CliError::new(
                    ErrorKind::Io,
                    format!("no --trace given and the default trace {} is absent", path.display()),
                ));
            }
            path
        }
    };
    let bytes = read_file(&path)?;
    let trace = Trace::parse(&bytes, args.block_size, args.limit)
        .map_err(|e| CliError::new(ErrorKind::InvalidTrace, format!("{}: {e}", path.display())))?;
    let parameters: Value = serde_json::from_str(&args.params)
        .map_err(|e| CliError::new(ErrorKind::ConfigureFailed, format!("--params is not JSON: {e}")))?;
    let config = ReplayConfig {
        workers: args.workers,
        mode: args.mode,
        seed: args.seed,
        speedup: args.speedup,
        total_kv_blocks: args.kv_blocks,
        ..ReplayConfig::default()
    };
    config.validate().map_err(|e| CliError::new(ErrorKind::InvalidConfig, e.to_string()))?;
    let policies = if args.compare.is_empty() { vec![args.policy.clone()] } else { args.compare.clone() };
    let guard = args.limits.guard()?;
    let mut engine: Option<PolicyEngine> = None;
    let mut runs = Vec::new();
    for policy in &policies {
        // One engine for every policy compared, made when a component first needs it.
        let mut shared_engine = || -> Result<PolicyEngine, CliError> {
            if engine.is_none() {
                engine = Some(args.limits.engine()?);
            }
            Ok(engine.clone().expect("just set"))
        };
        let loaded = load_policy(policy, args.guest, &args.params, &mut shared_engine)?;
        let label = PolicyLabel {
            name: loaded.name,
            parameters: parameters.clone(),
            // A builtin is named by its source; an uploaded component by its bytes.
            component_sha256: loaded.sha256.filter(|_| loaded.from_file),
        };
        let build = loaded.build;
        let mode = if args.fail_closed { FailMode::Closed } else { FailMode::Open };
        // As production runs it: faults contained by the runtime's guard.
        let mut selector = switchyard_builtins::guarded(loaded.scorer, mode, guard.clone());
        let bar = progress(format!("{policy} ({build})"), trace.rows().len());
        let started = Instant::now();
        let report = switchyard_replay::replay(&trace, &mut selector, &label, &config, &mut |done| {
            bar.set_position(done as u64)
        })
        .map_err(replay_error)?;
        bar.finish();
        runs.push(Run {
            label: format!("{policy} ({build})"),
            report,
            wall_s: started.elapsed().as_secs_f64(),
        });
    }
    let name =
        path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    if runs.len() == 1 {
        print_summary(&runs[0], &name, &config);
    } else {
        print_table(&runs, &name, &config);
    }
    if let Some(out) = &args.report {
        let text = if runs.len() == 1 {
            runs[0].report.canonical()
        } else {
            runs.iter()
                .map(|r| r.report.to_json())
                .collect::<Result<Vec<_>, _>>()
                .and_then(|reports| canonical_json(&json!({ "reports": reports })))
        }
        .map_err(|e| CliError::new(ErrorKind::Report, e.to_string()))?;
        write_file(out, text.as_bytes())?;
        outln!("report: {}", out.display());
    }
    if let Some(out) = &args.svg {
        let series: Vec<(&str, &[f64])> =
            runs.iter().map(|r| (r.label.as_str(), r.report.ttft_ms())).collect();
        let title = format!(
            "TTFT on {name}: {} rows, {} workers, {}",
            trace.rows().len(),
            config.workers,
            config.mode.as_str()
        );
        // Drawing writes to a string: a failure is a bug of ours, not of the input.
        let svg = chart::ttft_cdf(&title, &series)
            .map_err(|e| CliError::new(ErrorKind::Internal, format!("drawing the chart: {e}")))?;
        write_file(out, svg.as_bytes())?;
        outln!("chart: {}", out.display());
    }
    Ok(())
}

fn replay_error(e: ReplayError) -> CliError {
    match e {
        ReplayError::Config(m) => CliError::new(ErrorKind::InvalidConfig, m),
        e @ ReplayError::Selection { .. } => CliError::new(ErrorKind::SelectionFailed, e.to_string()),
    }
}

fn print_summary(run: &Run, trace: &str, config: &ReplayConfig) {
    let r = &run.report;
    outln!(
        "replay of {trace}: {} requests, {} workers, {}, seed {}, speedup {}",
        r.requests(),
        config.workers,
        config.mode.as_str(),
        config.seed,
        config.speedup
    );
    outln!("policy: {}", run.label);
    for (what, d) in [("TTFT", r.ttft()), ("end-to-end", r.e2e())] {
        outln!(
            "  {what:<11} ms  mean {:>9.1}  p50 {:>9.1}  p90 {:>9.1}  p99 {:>9.1}",
            d.mean,
            d.p50,
            d.p90,
            d.p99
        );
    }
    outln!("  cache hit ratio  {:.3}", r.cache_hit_ratio());
    for load in r.pools() {
        let counts = &load.requests_per_worker;
        outln!(
            "  {:?} pool: requests per worker min {} max {}, imbalance (max/mean) {:.3}",
            load.pool,
            counts.iter().min().unwrap_or(&0),
            counts.iter().max().unwrap_or(&0),
            load.imbalance()
        );
    }
    outln!("  decisions {} (sha256 {})", r.decisions(), r.decisions_sha256());
    let faults = r.faults();
    outln!(
        "  policy faults: {} answered by the fallback{}, {} commits faulted{}",
        faults.fallback_count(),
        by_kind(&faults.fallbacks),
        faults.commit_count(),
        by_kind(&faults.commits)
    );
    outln!(
        "  wall clock {:.3} s ({:.0} decisions/s; not part of the report)",
        run.wall_s,
        r.decisions() as f64 / run.wall_s.max(1e-9)
    );
}

/// ` (fuel 3, trap 1)`, or nothing when there are none.
fn by_kind(counts: &std::collections::BTreeMap<switchyard::FaultKind, u64>) -> String {
    if counts.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
    format!(" ({})", parts.join(", "))
}

fn print_table(runs: &[Run], trace: &str, config: &ReplayConfig) {
    outln!(
        "replay of {trace}: {} requests, {} workers, {}, seed {}, speedup {}",
        runs[0].report.requests(),
        config.workers,
        config.mode.as_str(),
        config.seed,
        config.speedup
    );
    let width = runs.iter().map(|r| r.label.len()).max().unwrap_or(6).max(6);
    outln!(
        "{:<width$}  {:>9} {:>9} {:>9} {:>9}  {:>9} {:>9}  {:>6}  {:>9}  {:>12}  {:>6}  {:>7}",
        "policy",
        "TTFT mean",
        "p50",
        "p90",
        "p99",
        "E2E mean",
        "p99",
        "hit",
        "imbalance",
        "decisions",
        "faults",
        "wall s"
    );
    for run in runs {
        let r = &run.report;
        let (t, e) = (r.ttft(), r.e2e());
        let imbalance = r.pools().iter().map(|p| p.imbalance()).fold(0.0, f64::max);
        outln!(
            "{:<width$}  {:>9.1} {:>9.1} {:>9.1} {:>9.1}  {:>9.1} {:>9.1}  {:>6.3}  {:>9.3}  {:>12}  {:>6}  {:>7.2}",
            run.label,
            t.mean,
            t.p50,
            t.p90,
            t.p99,
            e.mean,
            e.p99,
            r.cache_hit_ratio(),
            imbalance,
            &r.decisions_sha256()[..12],
            r.faults().fallback_count() + r.faults().commit_count(),
            run.wall_s
        );
    }
}

/// The progress bar of one policy's run, on stderr; hidden unless stderr is a terminal, so
/// scripts and tests that capture stderr see only errors there. (indicatif hides itself off a
/// terminal too; asking first states the contract here rather than relying on its detection.)
fn progress(label: String, rows: usize) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    // The template is a constant: a parse failure is a bug caught by the first run on a terminal.
    let style = ProgressStyle::with_template("{prefix} [{bar:30}] {percent:>3}% {pos}/{len} rows, eta {eta}")
        .expect("the progress template parses")
        .progress_chars("#> ");
    ProgressBar::with_draw_target(Some(rows as u64), ProgressDrawTarget::stderr())
        .with_style(style)
        .with_prefix(label)
}
