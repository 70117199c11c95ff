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
use switchyard_replay::{
    Mode, PolicyLabel, ReplayConfig, ReplayError, Report, Shadow, ShadowReport, Trace, canonical_json,
};

use super::chart;
use super::config::LimitArgs;
use crate::output::{CliError, read_file, write_file};
use crate::source::{Loaded, load_policy};

/// The conversation trace the project ships (`traces/`, see its README).
const DEFAULT_TRACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/traces/conversation_trace.jsonl");

#[derive(Args)]
pub struct ReplayArgs {
    /// A Mooncake-format JSONL trace, or one the service captured [default: the shipped
    /// traces/conversation_trace.jsonl].
    #[arg(long)]
    trace: Option<PathBuf>,
    /// A builtin policy name or a component file (.wasm).
    #[arg(long, default_value = "default", conflicts_with = "compare")]
    policy: String,
    /// Run builtins' component builds instead of their native builds.
    #[arg(long)]
    guest: bool,
    /// The --policy's parameters, a JSON object [default: {}]. With --compare each policy
    /// takes its own: POLICY@{JSON}.
    #[arg(long)]
    params: Option<String>,
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
    /// Tokens per hash_ids block in the trace [default: a captured trace's requests' block
    /// size, else Mooncake's 512].
    #[arg(long)]
    block_size: Option<u32>,
    /// Write the canonical JSON report here (with --compare: {"reports": [...]}).
    #[arg(long)]
    report: Option<PathBuf>,
    /// Several policies side by side, comma-separated (replaces --policy), each with its own
    /// parameters if any: default,chwbl@{"load_factor":1.5},mine.wasm@{"a":1,"b":2}.
    #[arg(long, value_name = "POLICY[@{JSON}],...")]
    compare: Option<String>,
    /// Another policy shadowing --policy, with its own parameters if any (POLICY[@{JSON}]):
    /// both replayed, and on every selection --policy makes this one is asked too and told
    /// --policy's pick; their agreement and --policy's regret are reported. On a captured
    /// trace the shadow pass runs the recorded requests instead of the simulated cluster.
    #[arg(long, value_name = "POLICY[@{JSON}]", conflicts_with = "compare")]
    against: Option<String>,
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
    /// The policy's name (builtin name or file stem) and its parameters when given.
    label: String,
    /// `native` or `guest`.
    build: &'static str,
    /// What the report names.
    policy: PolicyLabel,
    report: Report,
    wall_s: f64,
}

/// One policy to run: as named on the command line, with its own parameters (JSON text).
#[derive(Debug, PartialEq)]
struct Entry {
    spec: String,
    params: Option<String>,
}

/// Splits `--compare`'s value into its policies: comma-separated, each `POLICY` or
/// `POLICY@{JSON}`. Parameters start at the first `@{` and run to the `}` that closes it
/// (nesting and strings followed), so their commas stay theirs; a path containing `@{` cannot
/// be compared (give it another name).
fn parse_compare(list: &str) -> Result<Vec<Entry>, String> {
    parse_policies("--compare", list)
}

/// `--against`'s one policy, `POLICY` or `POLICY@{JSON}` as in `--compare`.
fn parse_against(value: &str) -> Result<Entry, String> {
    let mut entries = parse_policies("--against", value)?;
    if entries.len() > 1 {
        return Err(format!(
            "--against takes one policy, got {}; compare several with --compare",
            entries.len()
        ));
    }
    Ok(entries.remove(0))
}

/// [`parse_compare`] for the flag `flag` (which its errors name).
fn parse_policies(flag: &str, list: &str) -> Result<Vec<Entry>, String> {
    let mut entries = Vec::new();
    let mut rest = list;
    loop {
        let n = entries.len() + 1;
        let end = rest.find(',').unwrap_or(rest.len());
        let (spec, params, after) = match rest.find("@{") {
            Some(at) if at < end => {
                let json = &rest[at + 1..];
                let close = object_end(json).ok_or_else(|| {
                    format!(
                        "{flag} policy {n} (`{}`): its parameters never close (a `}}` is missing)",
                        &rest[..at]
                    )
                })?;
                (&rest[..at], Some(json[..close].to_string()), &json[close..])
            }
            _ => (&rest[..end], None, &rest[end..]),
        };
        if spec.trim().is_empty() {
            return Err(format!(
                "{flag} policy {n} is empty: give POLICY or POLICY@{{JSON}}, comma-separated"
            ));
        }
        entries.push(Entry { spec: spec.trim().to_string(), params });
        match after.strip_prefix(',') {
            Some(next) => rest = next,
            None if after.is_empty() => return Ok(entries),
            None => {
                return Err(format!(
                    "{flag} policy {n} (`{}`): `{after}` follows its parameters; separate policies with commas",
                    spec.trim()
                ));
            }
        }
    }
}

/// The length of the JSON object `text` starts with (through its closing brace), if it closes.
fn object_end(text: &str) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0u32, false, false);
    for (i, c) in text.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// `error` with the policy it comes from named first.
fn from_policy(spec: &str, error: CliError) -> CliError {
    CliError { message: format!("policy `{spec}`: {}", error.message), ..error }
}

/// How a run is named in the table and the chart: the policy's name, and its parameters
/// when it has any (compact JSON).
fn run_label(name: &str, parameters: &Value) -> String {
    match parameters.as_object() {
        Some(map) if map.is_empty() => name.to_string(),
        _ => format!("{name} {parameters}"),
    }
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
    let invalid_trace = |e: switchyard_replay::TraceError| {
        CliError::new(ErrorKind::InvalidTrace, format!("{}: {e}", path.display()))
    };
    let trace = Trace::parse(&bytes, args.block_size, args.limit).map_err(invalid_trace)?;
    let entries = match (&args.compare, &args.against) {
        (None, None) => vec![Entry { spec: args.policy.clone(), params: args.params.clone() }],
        // One set of parameters rarely suits several policies (another's unknown field fails
        // it), so each gives its own.
        (Some(_), _) if args.params.is_some() => {
            return Err(CliError::new(
                ErrorKind::InvalidParams,
                "--params configures --policy; with --compare give each policy its own, as \
                 --compare default,mine.wasm@'{\"overlap_bonus\":2}'",
            ));
        }
        (Some(list), _) => parse_compare(list).map_err(|m| CliError::new(ErrorKind::InvalidParams, m))?,
        (None, Some(against)) => vec![
            Entry { spec: args.policy.clone(), params: args.params.clone() },
            parse_against(against).map_err(|m| CliError::new(ErrorKind::InvalidParams, m))?,
        ],
    };
    // With --against on a captured trace the shadow pass runs the recorded requests.
    let recorded = args.against.is_some() && trace.is_captured().map_err(invalid_trace)?;
    let config = ReplayConfig {
        workers: args.workers,
        mode: args.mode,
        seed: args.seed,
        speedup: args.speedup,
        total_kv_blocks: args.kv_blocks,
        ..ReplayConfig::default()
    };
    config.validate().map_err(|e| CliError::new(ErrorKind::InvalidConfig, e.to_string()))?;
    let guard = args.limits.guard()?;
    let mode = if args.fail_closed { FailMode::Closed } else { FailMode::Open };
    let mut engine: Option<PolicyEngine> = None;
    // One engine for every policy, made when a component first needs it.
    let mut load = |entry: &Entry| -> Result<(Value, Loaded), CliError> {
        let mut shared_engine = || -> Result<PolicyEngine, CliError> {
            if engine.is_none() {
                engine = Some(args.limits.engine()?);
            }
            Ok(engine.clone().expect("just set"))
        };
        let params = entry.params.as_deref().unwrap_or("{}");
        let parameters: Value = serde_json::from_str(params).map_err(|e| {
            from_policy(
                &entry.spec,
                CliError::new(ErrorKind::InvalidParams, format!("parameters are not JSON: {e}")),
            )
        })?;
        let policy = load_policy(&entry.spec, args.guest, params, &mut shared_engine)
            .map_err(|e| from_policy(&entry.spec, e))?;
        Ok((parameters, policy))
    };
    // Every policy is loaded and configured before any runs, so a mistake in the last of
    // several is reported at once, not after the others' replays.
    let mut loaded = Vec::new();
    for entry in &entries {
        loaded.push((entry, load(entry)?));
    }
    // The shadow pass's instances are their own: the shadow's state must not come from
    // its own replay, nor (on recorded requests) the driver's from the simulation.
    let shadow_pass = match &args.against {
        None => None,
        Some(_) => {
            let (driver, shadow) = (&entries[0], &entries[1]);
            let shadow = load(shadow).map(|(_, l)| {
                Shadow::new(switchyard_builtins::guarded(l.scorer, FailMode::Open, guard.clone()))
            })?;
            let driver = if recorded {
                Some(switchyard_builtins::guarded(load(driver)?.1.scorer, mode, guard.clone()))
            } else {
                None
            };
            Some((shadow, driver))
        }
    };
    let (mut shadow, recorded_driver) = shadow_pass.unzip();
    let recorded_driver = recorded_driver.flatten();
    let mut runs = Vec::new();
    for (index, (entry, (parameters, loaded))) in loaded.into_iter().enumerate() {
        let run_label = run_label(&loaded.name, &parameters);
        let label = PolicyLabel {
            name: loaded.name,
            parameters,
            // A builtin is named by its source; an uploaded component by its bytes.
            component_sha256: loaded.sha256.filter(|_| loaded.from_file),
        };
        let build = loaded.build;
        // As production runs it: faults contained by the runtime's guard.
        let mut selector = switchyard_builtins::guarded(loaded.scorer, mode, guard.clone());
        let bar = progress(format!("{run_label} ({build})"), trace.rows().len());
        let started = Instant::now();
        let mut tick = |done: usize| bar.set_position(done as u64);
        let report = match shadow.as_mut() {
            // The driver of a simulated shadow pass: its own replay, the shadow asked alongside.
            Some(shadow) if index == 0 && !recorded => {
                switchyard_replay::replay_shadowed(&trace, &mut selector, shadow, &label, &config, &mut tick)
            }
            _ => switchyard_replay::replay(&trace, &mut selector, &label, &config, &mut tick),
        }
        .map_err(|e| from_policy(&entry.spec, replay_error(e)))?;
        bar.finish();
        runs.push(Run {
            label: run_label,
            build,
            policy: label,
            report,
            wall_s: started.elapsed().as_secs_f64(),
        });
    }
    if let (Some(shadow), Some(mut driver)) = (shadow.as_mut(), recorded_driver) {
        let bar = progress(
            format!("{} shadowing {} on the recorded requests", runs[1].label, runs[0].label),
            trace.rows().len(),
        );
        switchyard_replay::replay_recorded(&trace, &mut driver, shadow, &mut |done| {
            bar.set_position(done as u64)
        })
        .map_err(|e| from_policy(&entries[0].spec, replay_error(e)))?;
        bar.finish();
    }
    let against = shadow.map(Shadow::finish);
    let name =
        path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    if runs.len() == 1 {
        print_summary(&runs[0], &name, &config);
    } else {
        print_table(&runs, &name, &config);
    }
    if let Some(against) = &against {
        print_against(&runs[0], &runs[1], against);
    }
    if let Some(out) = &args.report {
        let text = if runs.len() == 1 {
            runs[0].report.canonical()
        } else {
            runs.iter().map(|r| r.report.to_json()).collect::<Result<Vec<_>, _>>().and_then(|reports| {
                let mut doc = json!({ "reports": reports });
                if let Some(against) = &against {
                    doc["against"] = against_json(&runs[1].policy, against);
                }
                canonical_json(&doc)
            })
        }
        .map_err(|e| CliError::new(ErrorKind::Report, e.to_string()))?;
        write_file(out, text.as_bytes())?;
        outln!("report: {}", out.display());
    }
    if let Some(out) = &args.svg {
        let labels = legend_labels(&runs);
        let series: Vec<(&str, &[f64])> =
            labels.iter().zip(&runs).map(|(label, r)| (label.as_str(), r.report.ttft_ms())).collect();
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

/// The chart's names of `runs`: their labels, numbered by their place in --compare where two
/// would read alike.
fn legend_labels(runs: &[Run]) -> Vec<String> {
    let alike = |label: &str| runs.iter().filter(|r| r.label == label).count() > 1;
    runs.iter()
        .enumerate()
        .map(|(i, r)| if alike(&r.label) { format!("{} #{}", r.label, i + 1) } else { r.label.clone() })
        .collect()
}

fn replay_error(e: ReplayError) -> CliError {
    match e {
        ReplayError::Config(m) => CliError::new(ErrorKind::InvalidConfig, m),
        e @ (ReplayError::Selection { .. } | ReplayError::Recorded { .. }) => {
            CliError::new(ErrorKind::SelectionFailed, e.to_string())
        }
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
    outln!("policy: {} ({})", run.label, run.build);
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
    let names: Vec<String> = runs.iter().map(|r| format!("{} ({})", r.label, r.build)).collect();
    let width = names.iter().map(|n| n.chars().count()).max().unwrap_or(6).max(6);
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
    for (run, name) in runs.iter().zip(&names) {
        let r = &run.report;
        let (t, e) = (r.ttft(), r.e2e());
        let imbalance = r.pools().iter().map(|p| p.imbalance()).fold(0.0, f64::max);
        outln!(
            "{:<width$}  {:>9.1} {:>9.1} {:>9.1} {:>9.1}  {:>9.1} {:>9.1}  {:>6.3}  {:>9.3}  {:>12}  {:>6}  {:>7.2}",
            name,
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

/// The shadow pass's lines under the table: `driver` drove, `shadow` shadowed.
fn print_against(driver: &Run, shadow: &Run, against: &ShadowReport) {
    let a = &against.agreement;
    let source = if against.recorded.is_some() { "the recorded requests" } else { "the simulated cluster" };
    outln!("{} shadowing {} on {source}:", shadow.label, driver.label);
    match a.agreement {
        Some(share) => outln!("  agreement with {}  {share:.3} ({}/{})", driver.label, a.agreed, a.compared),
        None => outln!("  agreement with {}  - (nothing compared)", driver.label),
    }
    match &a.regret {
        Some(r) => outln!(
            "  regret ({}'s cost)  p50 {:.3}  p99 {:.3}  max {:.3}  over {}, {} unscored",
            driver.label,
            r.p50,
            r.p99,
            r.max,
            r.over,
            a.unscored
        ),
        None => outln!("  regret ({}'s cost)  - ({} unscored)", driver.label, a.unscored),
    }
    let faults = &against.faults;
    outln!(
        "  shadow faults: {} answered by the fallback{}, {} commits faulted{}; {} with no eligible worker (neither compared)",
        faults.fallback_count(),
        by_kind(&faults.fallbacks),
        faults.commit_count(),
        by_kind(&faults.commits),
        against.no_eligible
    );
    if let Some(recorded) = against.recorded {
        outln!("  {} matches the recorded answers: {}/{}", driver.label, recorded.matched, recorded.compared);
    }
}

/// The report's `against`: the shadowing policy as a report names one, and the pass.
fn against_json(shadow: &PolicyLabel, against: &ShadowReport) -> Value {
    let mut value = against.to_json();
    value["policy"] = json!({
        "name": shadow.name,
        "parameters": shadow.parameters,
        "component_sha256": shadow.component_sha256,
    });
    value["source"] = json!(if against.recorded.is_some() { "recorded" } else { "simulated" });
    value
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(spec: &str, params: Option<&str>) -> Entry {
        Entry { spec: spec.into(), params: params.map(Into::into) }
    }

    #[test]
    fn compare_entries_keep_the_commas_of_their_parameters() {
        assert_eq!(
            parse_compare(r#"default,dir/mine.wasm@{"a":1,"b":[2,3],"c":"x,}@{"},chwbl"#).unwrap(),
            [
                entry("default", None),
                entry("dir/mine.wasm", Some(r#"{"a":1,"b":[2,3],"c":"x,}@{"}"#)),
                entry("chwbl", None)
            ]
        );
        assert_eq!(parse_compare("a@b.wasm").unwrap(), [entry("a@b.wasm", None)], "`@` alone is a path's");
        assert_eq!(parse_compare(r#"x@{"s":"\"}"}"#).unwrap(), [entry("x", Some(r#"{"s":"\"}"}"#))]);
    }

    #[test]
    fn malformed_compare_lists_name_the_policy() {
        for (list, needle) in [
            (r#"default,mine.wasm@{"a":1"#, "policy 2 (`mine.wasm`): its parameters never close"),
            ("default,,chwbl", "policy 2 is empty"),
            (r#"chwbl@{"a":1}x,default"#, "policy 1 (`chwbl`): `x,default` follows"),
            ("", "policy 1 is empty"),
        ] {
            let err = parse_compare(list).unwrap_err();
            assert!(err.contains(needle), "{list}: {err}");
        }
    }

    #[test]
    fn against_takes_one_policy_with_its_parameters() {
        assert_eq!(
            parse_against(r#"chwbl@{"a":1,"b":2}"#).unwrap(),
            entry("chwbl", Some(r#"{"a":1,"b":2}"#))
        );
        assert_eq!(parse_against("dir/mine.wasm").unwrap(), entry("dir/mine.wasm", None));
        assert!(parse_against("default,chwbl").unwrap_err().contains("--against takes one policy, got 2"));
        assert!(parse_against("").unwrap_err().contains("--against policy 1 is empty"));
    }
}
