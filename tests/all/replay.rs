//! Offline replay of the real conversation trace: the native and guest builds of every
//! builtin produce byte-identical canonical reports in fresh processes; replays are
//! deterministic; bad traces are reported by line; disaggregated mode routes twice with
//! the hashes the contract promises.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use switchyard::selection::{Call, Fault, Scorer};
use switchyard::{FailMode, GuardConfig, GuardedSelector, GuestScorer, Selector};
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
    Trace::parse(&std::fs::read(trace_path()).unwrap(), Some(512), Some(limit)).expect("the trace parses")
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
        let err = Trace::parse(text.as_bytes(), Some(512), None).unwrap_err();
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
    assert!(stdout.contains("default (native)") && stdout.contains("default-upload (guest)"), "{stdout}");
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
    // The legend names a policy by its name (a file's stem), not the path as typed.
    for name in ["default", "default-upload"] {
        assert!(texts.iter().any(|(_, t)| t == name), "a legend entry for {name}: {texts:?}");
    }
    assert!(texts.iter().any(|(_, t)| t.contains("lower is better")), "{texts:?}");
    // The time axis: round 1-2-5 (or 1-3) values ("1 s", not "1000 ms" or "0.0010000000000000002 ms"),
    // left to right, with room between them.
    let times: Vec<&(f64, String)> =
        texts.iter().filter(|(_, t)| t.ends_with(" ms") || t.ends_with(" s")).collect();
    assert!(times.len() >= 3, "{texts:?}");
    for (_, label) in &times {
        assert!(["1", "2", "3", "5"].iter().any(|p| label.starts_with(p)), "a round value: {label}");
    }
    assert!(times.windows(2).all(|pair| pair[1].0 - pair[0].0 >= 60.0), "{times:?}");
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
    assert!(
        stderr.starts_with(&format!("error: selection-failed: policy `{panic}`: trace row 7: ")),
        "{stderr}"
    );
    assert!(stderr.contains("trap"), "{stderr}");
}

fn replay_300(extra: &[&str]) -> Output {
    let trace = trace_path().display().to_string();
    let base = ["replay", "--trace", &trace, "--limit", "300", "--workers", "4"];
    switchyard(&[&base[..], extra].concat()).wait_with_output().unwrap()
}

/// The one-line error of a failed run, checked to be of `kind`.
fn failed(out: Output, kind: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with(&format!("error: {kind}: ")), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr
}

#[test]
fn compare_gives_each_policy_its_own_parameters_and_errors_name_the_policy() {
    let dir = temp_dir();
    // chwbl's component, uploaded as a file: `load_factor` and `replication` are its
    // parameters, which the default policy refuses.
    let chwbl = dir.join("tuned-chwbl.wasm");
    std::fs::write(&chwbl, switchyard_builtins::find("chwbl").unwrap().component).unwrap();
    let chwbl = chwbl.display().to_string();
    let report = dir.join("per-policy.json");
    let tuned = r#"{"load_factor": 1.5, "replication": 64}"#;
    let stdout = succeeded(replay_300(&[
        "--compare",
        &format!("default,{chwbl}@{tuned},chwbl"),
        "--report",
        &report.display().to_string(),
    ]));
    let reports: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let policies: Vec<&Value> =
        reports["reports"].as_array().unwrap().iter().map(|r| &r["metadata"]["policy"]).collect();
    assert_eq!(policies[0]["parameters"], serde_json::json!({}));
    assert_eq!(policies[1]["name"], "tuned-chwbl");
    assert_eq!(policies[1]["parameters"], serde_json::json!({"load_factor": 1.5, "replication": 64}));
    assert_eq!(policies[2]["parameters"], serde_json::json!({}), "only the policy that was given them");
    assert!(stdout.contains(r#"tuned-chwbl {"load_factor":1.5,"replication":64} (guest)"#), "{stdout}");
    assert!(
        reports["reports"][1]["decisions"] != reports["reports"][2]["decisions"],
        "the tuned chwbl decides otherwise than the stock one"
    );

    // A parameter only chwbl knows, given to the default: the error names the default.
    let err = failed(replay_300(&["--compare", r#"default@{"load_factor":1.5},chwbl"#]), "configure-failed");
    assert!(err.starts_with("error: configure-failed: policy `default`: "), "{err}");
    assert!(err.contains("load_factor"), "{err}");
    // A component refusing its parameters is named by its path as typed.
    let err = failed(
        replay_300(&["--compare", &format!(r#"default,{chwbl}@{{"load_factor":-1}}"#)]),
        "configure-failed",
    );
    assert!(err.starts_with(&format!("error: configure-failed: policy `{chwbl}`: ")), "{err}");
    let err = failed(
        replay_300(&["--compare", &format!(r#"default,{chwbl}@{{"load_factor":1"#)]),
        "invalid-params",
    );
    assert!(err.contains(&format!("--compare policy 2 (`{chwbl}`): its parameters never close")), "{err}");
    // Every policy is configured before any replays: the last one's mistake is reported,
    // not the first one's fault at row 7 (fail-closed) after its replay.
    let panic = dir.join("panic-every-7.wasm");
    std::fs::write(&panic, switchyard_test_util::fixtures::hostile::PANIC).unwrap();
    let compare = format!(r#"{}@{{"every":7}},default@{{"load_factor":1.5}}"#, panic.display());
    let err = failed(replay_300(&["--compare", &compare, "--fail-closed"]), "configure-failed");
    assert!(err.starts_with("error: configure-failed: policy `default`: "), "{err}");
    // One --params for every compared policy is refused, naming the per-policy form.
    let err = failed(replay_300(&["--compare", "default,chwbl", "--params", tuned]), "invalid-params");
    assert!(
        err.contains("with --compare give each policy its own, as --compare default,mine.wasm@"),
        "{err}"
    );
    // --params still configures a single --policy, and its errors name it too.
    let stdout = succeeded(replay_300(&["--policy", "chwbl", "--params", tuned]));
    assert!(stdout.contains(r#"policy: chwbl {"load_factor":1.5,"replication":64} (native)"#), "{stdout}");
    let err = failed(replay_300(&["--params", r#"{"load_factor":1.5}"#]), "configure-failed");
    assert!(err.starts_with("error: configure-failed: policy `default`: "), "{err}");
}

/// A rasterised chart: its size and RGBA pixels.
struct Image {
    width: usize,
    height: usize,
    rgba: Vec<u8>,
}

impl Image {
    fn pixel(&self, x: usize, y: usize) -> [u8; 3] {
        let i = 4 * (y * self.width + x);
        [self.rgba[i], self.rgba[i + 1], self.rgba[i + 2]]
    }

    /// The bounding box (x0, y0, x1, y1) of the horizontal runs of `colour` at least `min`
    /// pixels long: a drawn rectangle's top and bottom edges, not text.
    fn outline(&self, colour: [u8; 3], min: usize) -> Option<(usize, usize, usize, usize)> {
        let mut bbox: Option<(usize, usize, usize, usize)> = None;
        let mut grow = |x: usize, y: usize| {
            let b = bbox.get_or_insert((x, y, x, y));
            *b = (b.0.min(x), b.1.min(y), b.2.max(x), b.3.max(y));
        };
        for y in 0..self.height {
            let mut run = 0;
            for x in 0..self.width {
                run = if self.pixel(x, y) == colour { run + 1 } else { 0 };
                if run >= min {
                    grow(x + 1 - min, y);
                    grow(x, y);
                }
            }
        }
        bbox
    }
}

/// `svg` drawn at twice its size (a 1 px line then covers whole pixels, so outlines keep
/// their exact colour), written to `png` and read back from it.
fn rasterise(svg: &str, png: &std::path::Path) -> Image {
    let mut options = resvg::usvg::Options::default();
    let fonts = options.fontdb_mut();
    fonts.load_system_fonts();
    // The chart asks for "sans-serif", which fontdb maps to Arial unless told otherwise: any
    // sans face the machine has (text only helps a person looking; the checks read colours).
    let sans = fonts
        .faces()
        .flat_map(|f| f.families.iter().map(|(name, _)| name.clone()))
        .find(|n| n.contains("Sans"));
    if let Some(sans) = sans {
        fonts.set_sans_serif_family(sans);
    }
    let tree = resvg::usvg::Tree::from_str(svg, &options).expect("the chart is valid SVG");
    let size = tree.size().to_int_size().scale_by(2.0).expect("a non-empty chart");
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height()).unwrap();
    resvg::render(&tree, resvg::tiny_skia::Transform::from_scale(2.0, 2.0), &mut pixmap.as_mut());
    pixmap.save_png(png).unwrap();
    let read = resvg::tiny_skia::Pixmap::load_png(png).unwrap();
    // The chart paints its background opaque white: premultiplied pixels are the plain ones.
    Image { width: read.width() as usize, height: read.height() as usize, rgba: read.data().to_vec() }
}

#[test]
fn a_ten_policy_chart_has_ten_distinct_colours_a_legend_clear_of_the_curves_and_a_fitted_axis() {
    let dir = temp_dir();
    let svg_path = dir.join("ten.svg");
    let report = dir.join("ten.json");
    // The nine builtins and the default tuned: ten curves.
    let mut compare: Vec<String> = switchyard_builtins::BUILTINS.iter().map(|b| b.name.to_string()).collect();
    compare.push(r#"default@{"overlap_score_credit":0}"#.into());
    assert_eq!(compare.len(), 10);
    let trace = trace_path().display().to_string();
    succeeded(
        switchyard(&[
            "replay",
            "--trace",
            &trace,
            "--limit",
            "2000",
            "--workers",
            "8",
            "--compare",
            &compare.join(","),
            "--svg",
            &svg_path.display().to_string(),
            "--report",
            &report.display().to_string(),
        ])
        .wait_with_output()
        .unwrap(),
    );
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert_eq!(svg.matches("<polyline").count(), 10, "one curve per policy");
    let texts = svg_texts(&svg);
    for name in ["default", "chwbl", "sglang-cache-aware", r#"default {&quot;overlap_score_credit&quot;:0}"#]
    {
        assert!(texts.iter().any(|(_, t)| t == name), "a legend entry {name}: {texts:?}");
    }
    // Fitted: the last time label is within a 1-2-5 step of the slowest TTFT, not a decade on.
    let reports: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let slowest = reports["reports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["summary"]["ttft_ms"]["max"].as_f64().unwrap())
        .fold(0.0, f64::max);
    let last = texts
        .iter()
        .filter_map(|(x, t)| {
            let ms = if let Some(v) = t.strip_suffix(" ms") {
                v.parse::<f64>().ok()?
            } else {
                t.strip_suffix(" s")?.parse::<f64>().ok()? * 1e3
            };
            Some((*x, ms))
        })
        .fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a })
        .1;
    assert!(last > 0.0 && last <= slowest * 2.5, "last label {last} ms, slowest TTFT {slowest} ms");

    // What a person sees: the chart rasterised to PNG, which stays beside the test's target
    // for a look (target/tmp).
    let png = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("replay-ten-policies.png");
    let image = rasterise(&svg, &png);
    let frame = image.outline([0, 0, 0], image.width / 3).expect("the plot's black frame");
    let legend = image.outline([0x99, 0x99, 0x99], 80).expect("the legend's grey box");
    let apart = legend.0 > frame.2 || legend.2 < frame.0 || legend.1 > frame.3 || legend.3 < frame.1;
    assert!(apart, "the legend {legend:?} overlaps the plot {frame:?}");

    // The swatches: the legend's colours that are not grey (text, border and background are),
    // each over a swatch's area.
    let mut counts = std::collections::BTreeMap::<[u8; 3], usize>::new();
    for y in legend.1..=legend.3 {
        for x in legend.0..=legend.2 {
            let p = image.pixel(x, y);
            if !(p[0] == p[1] && p[1] == p[2]) {
                *counts.entry(p).or_default() += 1;
            }
        }
    }
    let swatches: Vec<[u8; 3]> = counts.into_iter().filter(|(_, n)| *n >= 200).map(|(c, _)| c).collect();
    assert_eq!(swatches.len(), 10, "ten colours in the legend: {swatches:?}");
    for (i, a) in swatches.iter().enumerate() {
        for b in &swatches[i + 1..] {
            let d2: i32 = a.iter().zip(b).map(|(a, b)| (i32::from(*a) - i32::from(*b)).pow(2)).sum();
            assert!(d2 >= 50 * 50, "{a:?} and {b:?} are too alike to tell apart");
        }
    }
    // No curve runs under the legend: every pixel of a series' colour outside the legend is
    // inside the plot's frame, and there are curves.
    let mut in_plot = 0;
    for y in 0..image.height {
        for x in 0..image.width {
            let inside = |b: (usize, usize, usize, usize)| x >= b.0 && x <= b.2 && y >= b.1 && y <= b.3;
            if inside(legend) || !swatches.contains(&image.pixel(x, y)) {
                continue;
            }
            // A curve along the frame is 2 px wide (4 px here), the frame 1 px (2 px here).
            let around_frame = (frame.0 - 2, frame.1 - 2, frame.2 + 2, frame.3 + 2);
            assert!(inside(around_frame), "a curve's pixel at ({x}, {y}) outside the plot {frame:?}");
            in_plot += 1;
        }
    }
    assert!(in_plot > 10 * 500, "the curves are drawn: {in_plot} pixels");
}

/// The `against` part of a `--report` written by `extra` (with `--report` appended).
fn against_report(name: &str, extra: &[&str]) -> (String, Value) {
    let report = temp_dir().join(format!("{name}.json"));
    let report_arg = report.display().to_string();
    let stdout = succeeded(replay_300(&[extra, &["--report", &report_arg]].concat()));
    (stdout, serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap())
}

/// The agreement's counts agree with each other: every comparison either agreed, has a
/// regret, or was unscored; and `agreement` is `agreed / compared`.
fn consistent(agreement: &Value) {
    let n = |key: &str| agreement[key].as_u64().unwrap();
    let over = agreement["regret"]["over"].as_u64().unwrap_or(0);
    assert_eq!(over + n("unscored"), n("compared"), "{agreement}");
    assert!(n("agreed") <= over, "an agreement is a regret of 0: {agreement}");
    let share = n("agreed") as f64 / n("compared") as f64;
    assert_eq!(agreement["agreement"].as_f64().unwrap(), share, "{agreement}");
}

#[test]
fn against_shadows_every_selection_and_reports_agreement_and_regret_beside_both_replays() {
    // A policy shadowing itself agrees on every pick.
    let (stdout, same) = against_report("against-self", &["--policy", "default", "--against", "default"]);
    let against = &same["against"];
    assert_eq!(against["source"], "simulated");
    assert_eq!(against["policy"]["name"], "default");
    let agreement = &against["agreement"];
    assert_eq!((agreement["compared"].as_u64(), agreement["agreed"].as_u64()), (Some(300), Some(300)));
    assert_eq!(agreement["agreement"], 1.0);
    assert_eq!(agreement["regret"], serde_json::json!({"over": 300, "p50": 0.0, "p99": 0.0, "max": 0.0}));
    assert_eq!(against["faults"]["fallbacks"], 0);
    assert!(stdout.contains("default shadowing default on the simulated cluster:"), "{stdout}");
    assert!(stdout.contains("agreement with default  1.000 (300/300)"), "{stdout}");
    assert!(stdout.contains("regret (default's cost)  p50 0.000  p99 0.000  max 0.000"), "{stdout}");
    // Both replays, side by side as --compare shows them, each the policy's own report.
    assert!(stdout.contains("TTFT mean"), "{stdout}");
    let reports = same["reports"].as_array().unwrap();
    assert_eq!(reports.len(), 2);
    assert_eq!(reports[0], reports[1]);

    // Two policies: they part ways, and the shadow pass never changes the driver's replay.
    let (stdout, other) = against_report("against-chwbl", &["--policy", "default", "--against", "chwbl"]);
    let (_, alone) = against_report("against-none", &["--compare", "default,chwbl"]);
    assert_eq!(other["reports"], alone["reports"], "each policy's replay as --compare runs it");
    let agreement = &other["against"]["agreement"];
    assert_eq!(agreement["compared"], 300, "every decision compared");
    assert!(agreement["agreement"].as_f64().unwrap() < 1.0, "{agreement}");
    assert!(agreement["regret"]["max"].as_f64().unwrap() > 0.0, "{agreement}");
    consistent(agreement);
    assert_eq!(other["against"]["policy"]["name"], "chwbl");
    let line = format!("agreement with default  {:.3} (", agreement["agreement"].as_f64().unwrap());
    assert!(stdout.contains(&line), "{stdout}");
    assert!(stdout.contains("chwbl (native)") && stdout.contains("default (native)"), "{stdout}");

    // Disaggregated: both decisions of every request compared.
    let (_, disaggregated) =
        against_report("against-disaggregated", &["--mode", "disaggregated", "--against", "chwbl"]);
    assert_eq!(disaggregated["against"]["agreement"]["compared"], 600);

    // Parameters as --compare takes them; --against excludes --compare; one policy only.
    let (_, tuned) = against_report("against-tuned", &["--against", r#"chwbl@{"load_factor":1.5}"#]);
    assert_eq!(tuned["against"]["policy"]["parameters"], serde_json::json!({"load_factor": 1.5}));
    assert_eq!(
        tuned["reports"][1]["metadata"]["policy"]["parameters"],
        serde_json::json!({"load_factor": 1.5})
    );
    let err = failed(replay_300(&["--against", "default,chwbl"]), "invalid-params");
    assert!(err.contains("--against takes one policy, got 2"), "{err}");
    let err = failed(replay_300(&["--against", r#"chwbl@{"load_factor":1.5"#]), "invalid-params");
    assert!(err.contains("--against policy 1 (`chwbl`): its parameters never close"), "{err}");
    let out = replay_300(&["--against", "chwbl", "--compare", "default,chwbl"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"), "{out:?}");

    // A faulting shadow is counted by kind, never changes the driver's run, and is not compared.
    let panic = temp_dir().join("shadow-panic-every-7.wasm");
    std::fs::write(&panic, switchyard_test_util::fixtures::hostile::PANIC).unwrap();
    let spec = format!(r#"{}@{{"every":7}}"#, panic.display());
    let (stdout, faulty) = against_report("against-faulty", &["--against", &spec]);
    assert_eq!(faulty["reports"][0], same["reports"][0], "the driver's replay, untouched");
    let faults = &faulty["against"]["faults"];
    assert_eq!(faults["fallbacks"], 300 / 7, "{faults}");
    assert_eq!(faults["fallbacks_by_kind"]["trap"], 300 / 7, "{faults}");
    assert_eq!(faulty["against"]["agreement"]["compared"], 300 - 300 / 7);
    assert!(stdout.contains("shadow faults: 42 answered by the fallback (trap 42)"), "{stdout}");
}

/// `count` variations of the sample request (seeds, temperatures, loads), each answered
/// by `switchyard select --policy default`, as the service's capture writes them.
fn captured_trace(count: u64) -> String {
    let dir = temp_dir().join("captured");
    std::fs::create_dir_all(&dir).unwrap();
    let sample = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crates/selection/sample-request.json"),
    )
    .unwrap();
    let requests: Vec<Value> = (0..count)
        .map(|i| {
            let mut request: Value = serde_json::from_str(&sample).unwrap();
            request["tenant"] = "acme".into();
            request["seed"] = i.into();
            request["temperature"] = if i % 3 == 0 { 0.5 } else { 0.0 }.into();
            let row = (i % 9) as usize;
            let load = &mut request["inputs"]["active_prefill_tokens"][row];
            *load = (load.as_u64().unwrap() + 500 * (i % 7)).into();
            request["inputs"]["device_overlap_blocks"][(row + 4) % 9] = (i % 40).into();
            request["prefix_hashes"] = (0..8 + i % 5).map(|h| h + 100 * i).collect::<Vec<u64>>().into();
            request
        })
        .collect();
    let children: Vec<std::process::Child> = requests
        .iter()
        .enumerate()
        .map(|(i, request)| {
            let path = dir.join(format!("request-{i}.json"));
            std::fs::write(&path, request.to_string()).unwrap();
            switchyard(&["select", "--policy", "default", "--input", &path.display().to_string()])
        })
        .collect();
    let mut lines = String::new();
    for (i, (request, child)) in requests.iter().zip(children).enumerate() {
        let answer: Value = serde_json::from_str(&succeeded(child.wait_with_output().unwrap())).unwrap();
        let line = serde_json::json!({
            "timestamp": 25 * i,
            "input_length": request["prompt_tokens"],
            "output_length": request["expected_output_tokens"],
            "hash_ids": request["prefix_hashes"],
            "request": request,
            "answer": {
                "worker_id": answer["worker_id"],
                "dp_rank": answer["dp_rank"],
                "policy": answer["policy"],
                "version": answer["version"],
                "fallback": !answer["fallback"].is_null(),
            },
        });
        lines.push_str(&format!("{line}\n"));
    }
    lines
}

/// Agreement and regret recounted on a captured trace's requests, outside the replay: each
/// built from its line, `first` and `other` (native builtins) select, `other` is told
/// `first`'s pick, and [`compare`] tallies.
fn recount(captured: &str, first: &str, other: &str) -> Value {
    use switchyard::selection::compare::{Tally, compare};
    use switchyard::selection::wire::RequestJson;
    let selector = |name: &str| Selector::new(switchyard_builtins::find(name).unwrap().native("{}").unwrap());
    let (mut a, mut b) = (selector(first), selector(other));
    let mut tally = Tally::new(usize::MAX);
    for line in captured.lines() {
        let line: Value = serde_json::from_str(line).unwrap();
        let request: RequestJson = serde_json::from_value(line["request"].clone()).unwrap();
        let (table, request) = request.into_parts().unwrap();
        let first_pick = a.select(&table, &request).unwrap().chosen;
        a.commit(&table, &request, first_pick).unwrap();
        let other_pick = b.select(&table, &request).unwrap().chosen;
        b.commit(&table, &request, first_pick).unwrap();
        let costs = a.last_candidates().zip(a.last_costs().iter().copied());
        tally.add(compare(costs, first_pick, other_pick));
    }
    serde_json::to_value(tally.summary()).unwrap()
}

#[test]
fn a_captured_trace_replays_plainly_and_against_runs_its_recorded_requests() {
    let text = captured_trace(50);
    let dir = temp_dir();
    let path = dir.join("captured.jsonl");
    std::fs::write(&path, &text).unwrap();
    let trace = path.display().to_string();
    let run = |extra: &[&str]| {
        switchyard(&[&["replay", "--trace", &trace, "--workers", "4"][..], extra].concat())
            .wait_with_output()
            .unwrap()
    };

    // Plainly: the simulation reads the Mooncake keys, the block size the requests'.
    let report = dir.join("captured-plain.json");
    let stdout = succeeded(run(&["--report", &report.display().to_string()]));
    assert!(stdout.contains("replay of captured.jsonl: 50 requests"), "{stdout}");
    let plain: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(plain["metadata"]["trace"]["block_size"], 16);
    assert_eq!(plain["decisions"]["count"], 50);

    // Against: the recorded requests, selected again; default was the live policy.
    for other in ["chwbl", "default", "two-choice"] {
        let report = dir.join(format!("captured-against-{other}.json"));
        let stdout = succeeded(run(&["--against", other, "--report", &report.display().to_string()]));
        let json: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        let against = &json["against"];
        assert_eq!(against["source"], "recorded", "{other}");
        assert_eq!(
            against["recorded_answers"],
            serde_json::json!({"compared": 50, "matched": 50}),
            "{other}"
        );
        assert!(stdout.contains("default matches the recorded answers: 50/50"), "{other}: {stdout}");
        assert!(stdout.contains(&format!("{other} shadowing default on the recorded requests:")), "{stdout}");
        assert_eq!(against["agreement"], recount(&text, "default", other), "{other}");
        if other == "default" {
            assert_eq!(against["agreement"]["agreement"], 1.0);
        } else {
            assert!(against["agreement"]["agreement"].as_f64().unwrap() < 1.0, "{other}: {against}");
        }
        // Each policy's own replay too, as plainly.
        assert_eq!(json["reports"][0], plain, "{other}");
    }
    // Another policy than the live one does not match the answers.
    let stdout = succeeded(run(&["--policy", "chwbl", "--against", "default"]));
    assert!(!stdout.contains("matches the recorded answers: 50/50"), "{stdout}");
    assert!(stdout.contains("chwbl matches the recorded answers: "), "{stdout}");

    // A block size other than the requests' is refused, naming the line.
    let err = failed(run(&["--block-size", "512"]), "invalid-trace");
    assert!(err.contains("captured.jsonl: line 1: the request's block_size 16 differs"), "{err}");
}

#[test]
fn malformed_captured_lines_fail_naming_the_line() {
    let text = captured_trace(4);
    let lines: Vec<&str> = text.lines().collect();
    let dir = temp_dir();
    let third: Value = serde_json::from_str(lines[2]).unwrap();
    let edit = |change: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        let mut line = third.clone();
        change(line.as_object_mut().unwrap());
        line.to_string()
    };
    let cases = [
        (
            "bad-request",
            edit(&|l| l["request"]["prompt_tokenz"] = 1.into()),
            "line 3: request: unknown field",
        ),
        (
            "held-table",
            edit(&|l| l["request"]["table"] = "t".into()),
            "line 3: request: the request names a held table",
        ),
        ("bad-answer", edit(&|l| l["answer"]["fallback"] = "no".into()), "line 3: answer: "),
        ("wrong-length", edit(&|l| l["input_length"] = 2047.into()), "line 3: input_length 2047"),
        (
            "unanswered",
            edit(&|l| {
                l.remove("answer");
            }),
            "line 3: a `request` without its `answer`",
        ),
        ("not-json", "{\"timestamp\": 3, \"request\": {".into(), "line 3: "),
    ];
    let request_less = edit(&|l| {
        l.remove("request");
        l.remove("answer");
        l.insert("hash_ids".into(), (0..128).collect::<Vec<u64>>().into());
    });
    for (name, third, needle) in cases {
        let path = dir.join(format!("captured-{name}.jsonl"));
        std::fs::write(&path, format!("{}\n{}\n{third}\n{}\n", lines[0], lines[1], lines[3])).unwrap();
        let out = switchyard(&["replay", "--trace", &path.display().to_string(), "--workers", "4"])
            .wait_with_output()
            .unwrap();
        let err = failed(out, "invalid-trace");
        assert!(err.contains(needle), "{name}: {err}");
    }
    // A plain row among captured ones replays, but cannot be shadowed on recorded requests.
    let path = dir.join("captured-mixed.jsonl");
    std::fs::write(&path, format!("{}\n{}\n{request_less}\n{}\n", lines[0], lines[1], lines[3])).unwrap();
    let trace = path.display().to_string();
    let base = ["replay", "--trace", &trace, "--workers", "4"];
    succeeded(switchyard(&base).wait_with_output().unwrap());
    let out = switchyard(&[&base[..], &["--against", "chwbl"]].concat()).wait_with_output().unwrap();
    let err = failed(out, "invalid-trace");
    assert!(err.contains("line 3: carries no recorded request, unlike line 1"), "{err}");
}
