//! Offline replay of the real conversation trace: the native and guest builds of every
//! builtin produce byte-identical canonical reports in fresh processes; replays are
//! deterministic; bad traces are reported by line; disaggregated mode routes twice with
//! the hashes the contract promises.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use switchyard::selection::{Call, Fault, Scorer};
use switchyard::{FailMode, GuardConfig, GuardedSelector, GuestScorer};
use switchyard_guest_sdk::{Facts, PolicyInfo, Pool, WorkerRank};
use switchyard_replay::{Mode, PolicyLabel, ReplayConfig, Trace, replay};

use switchyard_test_util::fixtures::{DEFAULT_POLICY, component};

/// sha256 of the conversation trace, from the README beside it.
const TRACE_SHA256: &str = "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df";

fn trace_path() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("traces/conversation_trace.jsonl");
    assert!(
        path.is_file(),
        "the replay tests need the conversation trace at {} (shipped in traces/)",
        path.display()
    );
    path
}

fn trace(limit: usize) -> Trace {
    Trace::parse(&std::fs::read(trace_path()).unwrap(), 512, Some(limit)).expect("the trace parses")
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("switchyard-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn switchyard(args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs switchyard")
}

fn succeeded(out: Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "switchyard failed: {stderr}");
    assert!(stderr.is_empty(), "no progress bar when stderr is not a terminal: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

/// Workers for the byte-identical test: the full 16 of the benchmark fit CI's time on two
/// cores (debug build: ~2.5 s of CPU per process, four processes per builtin run at once,
/// so ~5 s per builtin on two idle cores).
const WORKERS: &str = "16";

#[test]
fn every_builtin_native_and_guest_reports_are_byte_identical_on_5000_rows() {
    let trace = trace_path().display().to_string();
    let dir = temp_dir();
    for builtin in switchyard_builtins::BUILTINS {
        // Two fresh processes per build; all four run at once.
        let runs: Vec<(PathBuf, bool, std::process::Child)> = [false, false, true, true]
            .into_iter()
            .enumerate()
            .map(|(i, guest)| {
                let report = dir.join(format!("{}-{i}.json", builtin.name));
                let report_arg = report.display().to_string();
                let mut args = vec![
                    "replay",
                    "--trace",
                    &trace,
                    "--policy",
                    builtin.name,
                    "--limit",
                    "5000",
                    "--workers",
                    WORKERS,
                    "--report",
                    &report_arg,
                ];
                if guest {
                    args.push("--guest");
                }
                (report, guest, switchyard(&args))
            })
            .collect();
        let mut reports = Vec::new();
        for (path, guest, child) in runs {
            let stdout = succeeded(child.wait_with_output().unwrap());
            let build = if guest { "guest" } else { "native" };
            assert!(stdout.contains(&format!("policy: {} ({build})", builtin.name)), "{stdout}");
            reports.push((build, std::fs::read(&path).unwrap()));
        }
        let (_, first) = &reports[0];
        for (build, bytes) in &reports[1..] {
            assert!(bytes == first, "{}: the {build} report differs from the first native one", builtin.name);
        }
        let report: Value = serde_json::from_slice(first).unwrap();
        assert_eq!(report["decisions"]["count"], 5000, "{}", builtin.name);
        assert_eq!(report["metadata"]["trace"]["sha256"], TRACE_SHA256);
        assert_eq!(report["metadata"]["trace"]["rows"], 5000);
        assert_eq!(report["metadata"]["policy"]["name"], builtin.name);
        let counts = report["summary"]["pools"]["aggregated"]["requests_per_worker"].as_array().unwrap();
        assert_eq!(counts.iter().map(|c| c.as_u64().unwrap()).sum::<u64>(), 5000);
        assert!(first.ends_with(b"\n") && !first.contains(&b' '), "compact canonical JSON");
    }
}

/// `scorer` as a replay runs it: guarded, fail-open.
fn guarded(scorer: Box<dyn Scorer>) -> GuardedSelector {
    switchyard_builtins::guarded(scorer, FailMode::Open, GuardConfig::default())
}

fn native_default() -> GuardedSelector {
    guarded(switchyard_builtins::find("default").unwrap().native("{}").unwrap())
}

fn label() -> PolicyLabel {
    PolicyLabel { name: "default".into(), parameters: serde_json::json!({}), component_sha256: None }
}

#[test]
fn replays_are_deterministic_and_the_seed_decides_ties() {
    let trace = trace(2000);
    let config = ReplayConfig { workers: 8, ..ReplayConfig::default() };
    let run = |config: &ReplayConfig, selector: &mut GuardedSelector| {
        replay(&trace, selector, &label(), config, &mut |_| {}).unwrap().canonical().unwrap()
    };
    let first = run(&config, &mut native_default());
    assert_eq!(first, run(&config, &mut native_default()), "same inputs, same bytes");
    let mut guest = guarded(Box::new(GuestScorer::new("default", component(DEFAULT_POLICY), "{}").unwrap()));
    assert_eq!(first, run(&config, &mut guest), "the guest build agrees in-process too");
    // At the start every worker is idle and cold: the costs tie and the seed picks.
    let reseeded = run(&ReplayConfig { seed: 1, ..config.clone() }, &mut native_default());
    let digest = |text: &str| serde_json::from_str::<Value>(text).unwrap()["decisions"]["sha256"].clone();
    assert_ne!(digest(&first), digest(&reseeded), "another seed breaks ties differently");
    let mut progress = Vec::new();
    replay(&trace, &mut native_default(), &label(), &config, &mut |done| progress.push(done)).unwrap();
    assert_eq!(progress, (1..=2000).collect::<Vec<_>>());
}

#[test]
fn malformed_trace_lines_are_reported_with_their_line_number() {
    let good = std::fs::read_to_string(trace_path()).unwrap();
    let good: Vec<&str> = good.lines().take(3).collect();
    let dir = temp_dir();
    let cases = [
        ("truncated", format!("{}\n{}\n{}\n{{\"timestamp\": 5, \"input_le", good[0], good[1], good[2]), 4),
        ("not-json", format!("{}\n\nhello\n", good[0]), 3),
        (
            "wrong-hashes",
            format!(
                "{}\n{{\"timestamp\": 1, \"input_length\": 2000, \"output_length\": 1, \"hash_ids\": [1]}}\n",
                good[0]
            ),
            2,
        ),
        (
            "backwards",
            format!(
                "{{\"timestamp\": 99, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [7]}}\n{}\n",
                good[0]
            ),
            2,
        ),
        (
            "negative-length",
            format!(
                "{}\n{}\n{{\"timestamp\": 1, \"input_length\": -4, \"output_length\": 1, \"hash_ids\": []}}",
                good[0], good[1]
            ),
            3,
        ),
    ];
    for (name, text, line) in cases {
        let path = dir.join(format!("{name}.jsonl"));
        std::fs::write(&path, &text).unwrap();
        let err = Trace::parse(text.as_bytes(), 512, None).unwrap_err();
        assert_eq!(err.line(), line, "{name}: {err}");
        let out = switchyard(&["replay", "--trace", &path.display().to_string()]).wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.starts_with("error: invalid-trace: "), "{name}: {stderr}");
        assert!(stderr.contains(&format!(": line {line}: ")), "{name}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{name}: {stderr}");
    }
    let out = switchyard(&["replay", "--trace", "/no/such/trace.jsonl"]).wait_with_output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: io: "));
    let out = switchyard(&["replay", "--mode", "disaggregated", "--workers", "1", "--limit", "1"])
        .wait_with_output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: invalid-config: "));
}

/// What a policy saw on one call: the pool, its hashes, and the prefill column.
type Seen = (Pool, Option<Vec<u64>>, Vec<u32>);

/// Delegates to the default policy and records what each call saw through the world.
struct Recorder {
    inner: Box<dyn Scorer>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Scorer for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }
    fn info(&self) -> PolicyInfo {
        self.inner.info()
    }
    fn score(&mut self, call: &Call<'_>, costs: &mut Vec<f64>) -> Result<(), Fault> {
        let hashes = call.facts.prefix_hashes().map(|h| h.into_owned());
        let prefill = call.columns.view().unwrap().active_prefill_tokens().to_vec();
        self.seen.lock().unwrap().push((call.request.facts().pool, hashes, prefill));
        self.inner.score(call, costs)
    }
    fn filter(&mut self, call: &Call<'_>, keep: &mut Vec<bool>) -> Result<(), Fault> {
        self.inner.filter(call, keep)
    }
    fn on_selected(&mut self, call: &Call<'_>, chosen: WorkerRank) -> Result<(), Fault> {
        self.inner.on_selected(call, chosen)
    }
}

#[test]
fn disaggregated_mode_routes_each_request_twice_with_the_contracts_hashes() {
    let trace = trace(1500);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let inner = switchyard_builtins::find("default").unwrap().native("{}").unwrap();
    let mut selector = guarded(Box::new(Recorder { inner, seen: seen.clone() }));
    let config = ReplayConfig { workers: 7, mode: Mode::Disaggregated, ..ReplayConfig::default() };
    let report = replay(&trace, &mut selector, &label(), &config, &mut |_| {}).unwrap();

    assert_eq!(report.decisions(), 3000, "one prefill and one decode decision per request");
    let pools: Vec<(Pool, usize, u64)> = report
        .pools()
        .iter()
        .map(|p| (p.pool, p.requests_per_worker.len(), p.requests_per_worker.iter().sum()))
        .collect();
    assert_eq!(pools, vec![(Pool::Prefill, 4, 1500), (Pool::Decode, 3, 1500)]);
    assert!(report.e2e().p50 > report.ttft().p50, "decode follows prefill");
    let json = report.to_json().unwrap();
    assert_eq!(json["metadata"]["topology"]["mode"], "disaggregated");
    assert_eq!(json["metadata"]["topology"]["prefill_workers"], 4);

    let seen = seen.lock().unwrap();
    let prefill: Vec<&Seen> = seen.iter().filter(|s| s.0 == Pool::Prefill).collect();
    let decode: Vec<&Seen> = seen.iter().filter(|s| s.0 == Pool::Decode).collect();
    assert_eq!((prefill.len(), decode.len()), (1500, 1500));
    assert!(prefill.iter().all(|s| s.1.is_none()), "the prefill pool tracks no blocks");
    assert!(
        prefill.iter().any(|s| s.2.iter().any(|&t| t > 0)),
        "prefill backlog is visible in the prefill pool"
    );
    assert!(decode.iter().all(|s| s.2.iter().all(|&t| t == 0)), "no prefill load in the decode pool");
    let shared: std::collections::HashSet<u64> =
        trace.rows().iter().flat_map(|r| r.hash_ids.iter().copied()).collect();
    let mut decode_ids = std::collections::HashSet::new();
    for (_, hashes, _) in &decode {
        for h in hashes.as_ref().expect("the decode pool has hashes") {
            assert!(!shared.contains(h), "decode hashes never match a shared prefix");
            assert!(decode_ids.insert(*h), "decode hashes are unique per request");
        }
    }
    // The same replay in aggregated mode shows the real, shared hashes.
    let seen_agg = Arc::new(Mutex::new(Vec::new()));
    let inner = switchyard_builtins::find("default").unwrap().native("{}").unwrap();
    let mut selector = guarded(Box::new(Recorder { inner, seen: seen_agg.clone() }));
    let config = ReplayConfig { workers: 7, ..ReplayConfig::default() };
    let aggregated = replay(&trace, &mut selector, &label(), &config, &mut |_| {}).unwrap();
    let seen_agg = seen_agg.lock().unwrap();
    assert_eq!(seen_agg[0].1.as_deref(), Some(trace.rows()[0].hash_ids.as_slice()));
    assert!(
        aggregated.cache_hit_ratio() > report.cache_hit_ratio(),
        "a router that sees the hashes reuses more cache ({} vs {})",
        aggregated.cache_hit_ratio(),
        report.cache_hit_ratio()
    );
}

#[test]
fn compare_prints_a_table_writes_reports_and_an_svg_chart() {
    let dir = temp_dir();
    let wasm = dir.join("default-upload.wasm");
    std::fs::write(&wasm, switchyard_builtins::find("default").unwrap().component).unwrap();
    let (svg, report) = (dir.join("ttft.svg"), dir.join("compare.json"));
    let compare = format!("default,{}", wasm.display());
    let trace = trace_path().display().to_string();
    let out = switchyard(&[
        "replay",
        "--trace",
        &trace,
        "--limit",
        "300",
        "--workers",
        "4",
        "--compare",
        &compare,
        "--svg",
        &svg.display().to_string(),
        "--report",
        &report.display().to_string(),
    ])
    .wait_with_output()
    .unwrap();
    let stdout = succeeded(out);
    assert!(stdout.contains("TTFT mean"), "{stdout}");
    assert!(
        stdout.contains("default (native)") && stdout.contains("default-upload.wasm (guest)"),
        "{stdout}"
    );
    let reports: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let reports = reports["reports"].as_array().unwrap();
    assert_eq!(reports.len(), 2);
    assert_eq!(reports[0]["decisions"], reports[1]["decisions"], "same source, same decisions");
    assert_eq!(reports[1]["metadata"]["policy"]["component_sha256"].as_str().unwrap().len(), 64);
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<polyline").count(), 2, "one curve per policy");
    let texts = svg_texts(&svg);
    assert!(
        texts.iter().any(|(_, t)| t.starts_with("TTFT on conversation_trace.jsonl: 300 rows")),
        "{texts:?}"
    );
    for name in ["default (native)", "default-upload.wasm (guest)"] {
        assert!(texts.iter().any(|(_, t)| t.ends_with(name)), "a legend entry for {name}: {texts:?}");
    }
    // The time axis: round decades ("1 s", not "1000 ms" or "0.0010000000000000002 ms"),
    // left to right, evenly spaced as on log paper, with room between them.
    let times: Vec<&(f64, String)> =
        texts.iter().filter(|(_, t)| t.ends_with(" ms") || t.ends_with(" s")).collect();
    assert!(times.len() >= 3, "{texts:?}");
    for (_, label) in &times {
        assert!(["1 ", "10 ", "100 "].iter().any(|p| label.starts_with(p)), "a decade: {label}");
    }
    let gaps: Vec<f64> = times.windows(2).map(|pair| pair[1].0 - pair[0].0).collect();
    assert!(gaps.iter().all(|gap| *gap >= 60.0 && (gap - gaps[0]).abs() <= 2.0), "{times:?}");
}

/// The SVG's text elements: (x, content), in document order.
fn svg_texts(svg: &str) -> Vec<(f64, String)> {
    svg.split("<text ")
        .skip(1)
        .map(|element| {
            let x = element.split("x=\"").nth(1).and_then(|v| v.split('"').next()).expect("x");
            let (_, body) = element.split_once('>').expect("an open tag");
            let (content, _) = body.split_once("</text>").expect("a closed text");
            (x.parse().expect("a number"), content.trim().to_string())
        })
        .collect()
}

#[test]
fn a_faulting_policy_replays_to_the_end_fail_open_with_its_faults_counted_and_fail_closed_names_the_row() {
    let trace = trace_path().display().to_string();
    let dir = temp_dir();
    // Panics on every 7th call of an instance (a fresh instance after each), and leaks
    // 8 MiB per commit (a memory fault every few commits).
    let panic = dir.join("panic-every-7.wasm");
    std::fs::write(&panic, switchyard_test_util::fixtures::hostile::PANIC).unwrap();
    let leak = dir.join("commit-leak.wasm");
    std::fs::write(&leak, switchyard_test_util::fixtures::hostile::COMMIT_LEAK).unwrap();
    let report = dir.join("faulting.json");
    let (panic, leak, report_arg) =
        (panic.display().to_string(), leak.display().to_string(), report.display().to_string());
    let base = ["replay", "--trace", &trace, "--limit", "500", "--workers", "4"];
    let run = |extra: &[&str]| switchyard(&[&base[..], extra].concat()).wait_with_output().unwrap();

    let stdout =
        succeeded(run(&["--policy", &panic, "--params", r#"{"every": 7}"#, "--report", &report_arg]));
    let json: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(json["decisions"]["count"], 500, "every row routed");
    let faults = &json["summary"]["faults"];
    assert_eq!(faults["fallbacks"], 500 / 7, "{faults}");
    assert_eq!(faults["fallbacks_by_kind"]["trap"], 500 / 7, "{faults}");
    assert_eq!(faults["commit_faults"], 0, "{faults}");
    assert!(
        stdout.contains("policy faults: 71 answered by the fallback (trap 71), 0 commits faulted"),
        "{stdout}"
    );

    let stdout = succeeded(run(&["--policy", &leak, "--report", &report_arg]));
    let json: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(json["decisions"]["count"], 500, "every row routed");
    let faults = &json["summary"]["faults"];
    let commits = faults["commit_faults"].as_u64().unwrap();
    assert!(commits >= 500 / 8, "a memory fault every few commits: {faults}");
    assert_eq!(faults["commit_faults_by_kind"]["memory"], commits, "{faults}");
    assert_eq!(faults["fallbacks"], 0, "the picks were the policy's: {faults}");
    assert!(stdout.contains("commits faulted (memory"), "{stdout}");

    let out = run(&["--policy", &panic, "--params", r#"{"every": 7}"#, "--fail-closed"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("error: selection-failed: trace row 7: "), "{stderr}");
    assert!(stderr.contains("trap"), "{stderr}");
}
