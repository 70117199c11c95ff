//! The C SDK: the default policy written in C (policies/default-c) decides as
//! the Rust one does, to the bit, in selections and in a replay; its component imports
//! only the policy world; bad parameters name the field; and docs/writing-policies-c.md's path
//! from an empty folder (bindings, clang, wrap, check, select) works with the real `switchyard`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use switchyard::selection::Scorer;
use switchyard::{GuestScorer, Selector};

use switchyard_test_util::fixtures::random_parameters;
use switchyard_test_util::fixtures::{DEFAULT_POLICY, Rng, component, engine, random_case};

const DEFAULT_POLICY_C: &[u8] = switchyard_test_util::DEFAULT_POLICY_C;

fn switchyard(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_switchyard")).args(args).output().expect("runs switchyard")
}

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("switchyard-c-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.display().to_string()
}

#[test]
fn c_default_policy_costs_are_bit_identical_to_rust_native_and_guest_on_10000_random_selections() {
    let mut rng = Rng::seeded(0xc_5d4);
    let (c_component, rust_component) = (component(DEFAULT_POLICY_C), component(DEFAULT_POLICY));
    let builtin = switchyard_builtins::find("default").unwrap();
    let (mut compared, mut max_candidates, mut custom_params) = (0, 0, 0);
    for _ in 0..100 {
        let params = random_parameters(&mut rng);
        custom_params += usize::from(params != "{}");
        let guest = |c: &switchyard::PolicyComponent| -> Box<dyn Scorer> {
            Box::new(GuestScorer::new("default", c.clone(), &params).unwrap())
        };
        let mut c = Selector::new(guest(&c_component));
        let mut rust = Selector::new(guest(&rust_component));
        let mut native = Selector::new(builtin.native(&params).unwrap());
        for _ in 0..100 {
            let (table, request) = random_case(&mut rng);
            let picks =
                [&mut c, &mut rust, &mut native].map(|s| s.select(&table, &request).expect("selects"));
            let bits = |s: &Selector| s.last_costs().iter().map(|c| c.to_bits()).collect::<Vec<u64>>();
            assert_eq!(bits(&c), bits(&native), "C vs native costs differ with params {params}");
            assert_eq!(bits(&c), bits(&rust), "C vs Rust guest costs differ with params {params}");
            assert_eq!(picks[0].chosen, picks[2].chosen, "picks differ with params {params}");
            assert_eq!(picks[0].chosen, picks[1].chosen);
            compared += 1;
            max_candidates = max_candidates.max(picks[0].candidates);
        }
    }
    assert_eq!(compared, 10_000);
    assert!(max_candidates > 3000, "large batches were exercised (max {max_candidates})");
    assert!(custom_params > 50, "random parameters were read by the C parser ({custom_params})");
}

#[test]
fn c_default_policy_replay_report_is_byte_identical_to_the_native_one_on_5000_rows() {
    let dir = temp_dir("replay");
    // Named like the builtin, so the report's policy name is the same.
    let wasm = write(&dir, "default.wasm", DEFAULT_POLICY_C);
    let trace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("traces/conversation_trace.jsonl");
    let trace = trace.display().to_string();
    let runs: Vec<(PathBuf, std::process::Child)> = ["default", wasm.as_str()]
        .iter()
        .enumerate()
        .map(|(i, policy)| {
            let report = dir.join(format!("report-{i}.json"));
            let args = [
                "replay",
                "--trace",
                &trace,
                "--policy",
                policy,
                "--limit",
                "5000",
                "--workers",
                "16",
                "--report",
                &report.display().to_string(),
            ]
            .map(str::to_string);
            let child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
                .args(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            (report, child)
        })
        .collect();
    let mut reports = Vec::new();
    for (path, child) in runs {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        reports.push(String::from_utf8(std::fs::read(path).unwrap()).unwrap());
    }
    let (native, c) = (&reports[0], &reports[1]);
    // The one field that must differ: a component file is named by its bytes' sha256.
    let sha = component(DEFAULT_POLICY_C).digest().to_string();
    let named = format!("\"component_sha256\":\"{sha}\"");
    assert!(c.contains(&named), "the C run names its component");
    assert!(native.contains("\"component_sha256\":null"));
    let c = c.replace(&named, "\"component_sha256\":null");
    assert!(c == *native, "the C report differs from the native one beyond the component's sha256");
    let report: Value = serde_json::from_str(native).unwrap();
    assert_eq!(report["decisions"]["count"], 5000);
    // The faults are in both reports: none in the C run, so no fallback hid a difference.
    assert_eq!(report["summary"]["faults"]["fallbacks"], 0);
}

#[test]
fn c_default_policy_imports_only_the_policy_world_and_is_printed_beside_the_rust_guest() {
    let dir = temp_dir("check");
    let mut sizes = Vec::new();
    for (name, bytes) in [("default-c", DEFAULT_POLICY_C), ("default-rust", DEFAULT_POLICY)] {
        let wasm = write(&dir, &format!("{name}.wasm"), bytes);
        let report = json(&switchyard(&["policy", "check", &wasm]));
        assert_eq!(report["world"], "switchyard:policy/selection-policy@0.2.0");
        assert_eq!(report["exports"], serde_json::json!(["switchyard:policy/policy@0.2.0"]));
        let imports = report["imports"].as_array().unwrap();
        assert!(!imports.is_empty() || name == "default-c");
        for import in imports {
            assert!(import.as_str().unwrap().starts_with("switchyard:policy/"), "{name}: {import}");
        }
        assert_eq!(report["inputs"], serde_json::json!({"cache": true, "load": true, "affinity": true}));
        let size = report["size_bytes"].as_u64().unwrap();
        let compile_ms = report["compile_ms"].as_f64().unwrap();
        // For BENCHMARKS.md, "The default policy in C" (`cargo test … c_guest -- --nocapture`);
        // not asserted: timed.
        println!("{name}: {size} bytes, compiled in {compile_ms:.2} ms");
        sizes.push(size);
    }
    assert!(sizes[0] * 4 < sizes[1], "the C component is far smaller than the Rust one: {sizes:?}");
}

#[test]
fn c_parameters_are_read_as_rust_reads_them_and_bad_ones_name_the_field() {
    let dir = temp_dir("params");
    let wasm = write(&dir, "default-c.wasm", DEFAULT_POLICY_C);
    // Numbers read by the digits-then-one-scaling rule, not always correctly rounded:
    // 17 digits, 20 digits, exponents, -0, null for the optional field.
    // Then powers of ten past 10^22 (no longer exact), near both ends of the doubles, a
    // subnormal, and an exponent past i32 downwards.
    for params in [
        r#"{ "prefill_load_scale": 0.30000000000000004, "host_cache_hit_weight": 7.5e-1,
        "disk_cache_hit_weight": 1E-17, "decode_active_request_weight": 12345678901234567890.98765432,
        "overlap_score_credit": -0, "overlap_score_weight": null }"#,
        r#"{ "prefill_load_scale": 7e23, "host_cache_hit_weight": 1.2345678901234567e-300,
        "disk_cache_hit_weight": 4.9e-324, "decode_active_request_weight": 9.87654321e300,
        "overlap_score_credit_decay": 123456789012345678901234567890e-45,
        "overlap_score_credit": 5e-99999999999 }"#,
    ] {
        let c = json(&switchyard(&["select", "--policy", &wasm, "--params", params]));
        let native = json(&switchyard(&["select", "--policy", "default", "--params", params]));
        assert_eq!(c["costs"], native["costs"], "same doubles from the same text: {params}");
        assert_eq!(c["worker_id"], native["worker_id"]);
    }
    for (bad, field, why) in [
        (r#"{"overlap_score_credit": 1.5}"#, "overlap_score_credit", "1.5 is out of range [0, 1]"),
        (r#"{"prefill_load_scale": -1}"#, "prefill_load_scale", "-1 is out of range [0, ∞)"),
        (r#"{"typo_field": 1}"#, "typo_field", "unknown field"),
        (r#"{"disk_cache_hit_weight": "high"}"#, "disk_cache_hit_weight", "expected a number"),
        (r#"{"prefill_load_scale": 1, "prefill_load_scale": 2}"#, "prefill_load_scale", "duplicate"),
        (r#"{"prefill_load_scale": null}"#, "prefill_load_scale", "expected a number"),
    ] {
        let out = switchyard(&["policy", "check", &wasm, "--params", bad]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad} accepted");
        assert!(stderr.starts_with("error: configure-failed: "), "{bad}: {stderr}");
        assert!(stderr.contains(&format!("field `{field}`: {why}")), "{bad}: {stderr}");
    }
    for bad in ["[1]", "not json", "{} x", r#"{"prefill_load_scale": 1"#] {
        let out = switchyard(&["policy", "check", &wasm, "--params", bad]);
        assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: configure-failed: "), "{bad}");
    }
}

/// The C source "Writing a policy in C" (docs/writing-policies-c.md) shows (its first ```c
/// block), so the guide's code is the code this test builds.
fn readme_policy() -> String {
    let page = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/writing-policies-c.md");
    let section = std::fs::read_to_string(page).unwrap();
    let block = &section[section.find("```c\n").expect("a C block") + 5..];
    block[..block.find("```").unwrap()].to_string()
}

/// docs/writing-policies-c.md's path to a component: `policy bindings` into `dir/sdk`, its
/// `mine.c` built by clang with the flags it printed, in one command as the page shows,
/// then `policy wrap`. Returns the component's path.
fn build_readme_policy(dir: &Path) -> String {
    let sdk = dir.join("sdk");
    let written = json(&switchyard(&["policy", "bindings", "--lang", "c", "-o", &sdk.display().to_string()]));
    for file in
        ["selection_policy.h", "selection_policy.c", "selection_policy_component_type.o", "switchyard.h"]
    {
        assert!(sdk.join(file).is_file(), "{file} written: {written}");
    }
    let flags = |key: &str| -> Vec<String> {
        written[key].as_array().unwrap().iter().map(|f| f.as_str().unwrap().to_string()).collect()
    };
    let mine = write(dir, "mine.c", readme_policy().as_bytes());
    // The toolchain the test guests were built with (clang-19, clang, or zig from PyPI).
    let toolchain = switchyard_guest_build::c::toolchain().expect("the test guests' C toolchain");
    let core = dir.join("mine.core.wasm").display().to_string();
    let sources = ["switchyard.c", "switchyard_alloc.c", "switchyard_params.c", "selection_policy.c"];
    let out = toolchain
        .clang()
        .args(flags("compile_flags"))
        .args(flags("link_flags"))
        .arg(toolchain.link_arg())
        .arg("-isystem")
        .arg(sdk.join("include"))
        .arg("-I")
        .arg(&sdk)
        .arg(&mine)
        .args(sources.iter().map(|s| sdk.join(s)))
        .arg(sdk.join("selection_policy_component_type.o"))
        .args(["-o", &core])
        .output()
        .unwrap();
    assert!(out.status.success(), "clang: {}", String::from_utf8_lossy(&out.stderr));
    let wasm = dir.join("mine.wasm").display().to_string();
    json(&switchyard(&["policy", "wrap", &core, "-o", &wasm]));
    wasm
}

/// `source`, a C policy, written into `dir` and built by the SDK's build (`build::c`).
fn build_c_policy(dir: &Path, name: &str, source: &str) -> Vec<u8> {
    let path = PathBuf::from(write(dir, &format!("{name}.c"), source.as_bytes()));
    switchyard_guest_build::c::build_c_guest(&dir.join("build"), name, &[path]).expect("builds")
}

#[test]
fn a_c_policy_from_an_empty_folder_gets_bindings_builds_wraps_checks_and_selects() {
    let dir = temp_dir("guide");
    let wasm = build_readme_policy(&dir);
    let check = json(&switchyard(&["policy", "check", &wasm, "--params", r#"{"request_weight": 2}"#]));
    assert_eq!(check["inputs"], serde_json::json!({"cache": false, "load": true, "affinity": false}));
    let picked = json(&switchyard(&["select", "--policy", &wasm, "--params", r#"{"request_weight": 2}"#]));
    // decode blocks + 2 × requests in flight over the sample's nine candidates.
    let costs = [306.0, 918.0, 510.0, 122.0, 204.0, 714.0, 408.0, 408.0, 356.0];
    let got: Vec<f64> =
        picked["costs"].as_array().unwrap().iter().map(|c| c["cost"].as_f64().unwrap()).collect();
    assert_eq!(got, costs);
    assert_eq!((picked["worker_id"].as_u64(), picked["fallback"].is_null()), (Some(3), true));
    assert_eq!(picked["policy"], "mine");
}

#[test]
fn the_c_sdk_hands_over_the_lazy_facts_once_per_call() {
    let dir = temp_dir("facts");
    let wasm = write(&dir, "facts.wasm", switchyard_test_util::C_FACTS);
    let picked = json(&switchyard(&["select", "--policy", &wasm]));
    assert!(picked["fallback"].is_null(), "{picked}");
    // The sample: hashes 11..=18 (8 of them, Σ 116), class "latency", KV blocks per worker.
    let base = 8e6 + 116.0 + 7e3;
    let blocks = [131_072.0, 131_072.0, 131_072.0, 65_536.0, 65_536.0, 0.0, 131_072.0, 131_072.0, 131_072.0];
    let want: Vec<f64> = blocks.iter().map(|b| base + b / 1024.0).collect();
    let got: Vec<f64> =
        picked["costs"].as_array().unwrap().iter().map(|c| c["cost"].as_f64().unwrap()).collect();
    assert_eq!(got, want);
    let check = json(&switchyard(&["policy", "check", &wasm]));
    assert_eq!(
        check["imports"],
        serde_json::json!(["switchyard:policy/types@0.2.0", "switchyard:policy/request@0.2.0"]),
        "the facts it reads are imports of the policy world"
    );
}

/// A C policy built by hand as docs/writing-policies-c.md shows, one instance answering
/// many batches of changing sizes: the SDK answers from one buffer it reuses, so the
/// bindings' post-returns (which would free that buffer after every call) must not be
/// exported, whoever links the guest. With them, each answer would be freed twice and
/// handed out again by the allocator while still the answer: costs read from recycled
/// memory.
#[test]
fn a_hand_built_c_policy_answers_batch_after_batch_as_the_sdk_build_does() {
    let dir = temp_dir("by-hand");
    let wasm = build_readme_policy(&dir);
    let load = |bytes: &[u8]| switchyard::PolicyComponent::load(engine(), bytes).expect("loads");
    let by_hand_component = load(&std::fs::read(&wasm).unwrap());
    let built_bytes = build_c_policy(&dir, "mine-built", &readme_policy());
    let params = r#"{"request_weight": 2}"#;
    let guest = |c: &switchyard::PolicyComponent| {
        Selector::new(Box::new(GuestScorer::new("mine", c.clone(), params).unwrap()))
    };
    let built_component = load(&built_bytes);
    let (mut by_hand, mut built) = (guest(&by_hand_component), guest(&built_component));
    let mut rng = Rng::seeded(0x4a4d);
    for i in 0..2_000 {
        let (table, request) = random_case(&mut rng);
        let (a, b) = (by_hand.select(&table, &request), built.select(&table, &request));
        let bits = |s: &Selector| s.last_costs().iter().map(|c| c.to_bits()).collect::<Vec<u64>>();
        assert_eq!(a.map(|p| p.chosen).ok(), b.map(|p| p.chosen).ok(), "selection {i}");
        assert_eq!(bits(&by_hand), bits(&built), "selection {i}: the costs differ");
    }
}

/// A range end the C reader's message cannot write exactly is not written: a fractional
/// or huge bound would come out as another number (`[0, 0]` for a range of [0, 0.5],
/// 2^63 for 1e300).
#[test]
fn an_out_of_range_message_writes_no_bound_it_cannot_write_exactly() {
    let dir = temp_dir("bounds");
    let policy = r#"#include "switchyard.h"
static double x, y, z;
bool sy_configure(const char *json, size_t len, sy_error *err) {
    const sy_number_param params[] = {{"x", &x, 0.0, 0.5, 0}, {"y", &y, -5.0, 1e300, 0}, {"z", &z, -3.0, 7.0, 0}};
    return sy_parse_numbers(json, len, params, 3, err);
}
sy_info sy_describe(void) { return (sy_info){.inputs = SY_LOAD}; }
bool sy_score(const sy_request *r, const sy_candidates *c, double *costs, sy_error *err) {
    (void)r, (void)err;
    for (size_t i = 0; i < c->len; i++) costs[i] = x + y + z + (double)c->decode_blocks[i];
    return true;
}
"#;
    let wasm = write(&dir, "bounds.wasm", &build_c_policy(&dir, "bounds", policy));
    for (params, want) in [
        (r#"{"x": 0.7}"#, "field `x`: 0.7 is out of range"),
        (r#"{"y": -6}"#, "field `y`: -6 is out of range"),
        (r#"{"z": 8}"#, "field `z`: 8 is out of range [-3, 7]"),
    ] {
        let out = switchyard(&["policy", "check", &wasm, "--params", params]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.trim_end().ends_with(want), "{params}: {stderr}");
    }
    json(&switchyard(&["policy", "check", &wasm, "--params", r#"{"x": 0.5, "y": 1e300, "z": -3}"#]));
}

/// A JSON number as a tenant might write one, or a malformed one: signs, leading zeros,
/// 1 to 40 integer digits, fractions of up to 30 digits, exponents around the ends of
/// the doubles and past i32.
fn random_number(rng: &mut Rng) -> String {
    let digits =
        |rng: &mut Rng, n: u64| (0..n).map(|_| char::from(b'0' + rng.below(10) as u8)).collect::<String>();
    let mut text = String::new();
    if rng.chance(30) {
        text.push('-');
    }
    if rng.chance(10) {
        text.push('0');
    } else {
        let n = [0, 1, 2, 5, 10, 15, 17, 19, 20, 25, 40][rng.below(11) as usize];
        text.push(char::from(b'1' + rng.below(9) as u8));
        text += &digits(rng, n);
    }
    if rng.chance(50) {
        text.push('.');
        let n = [1, 2, 5, 15, 17, 20, 30][rng.below(7) as usize];
        text += &digits(rng, n);
    }
    if rng.chance(50) {
        text.push(if rng.chance(50) { 'e' } else { 'E' });
        text += ["", "+", "-"][rng.below(3) as usize];
        let exponents =
            [0, 1, 22, 23, 100, 290, 300, 307, 308, 309, 320, 330, 400, 2_147_483_647, 2_147_483_648];
        let exponent = if rng.chance(30) { rng.below(420) } else { exponents[rng.below(15) as usize] };
        text += &exponent.to_string();
    }
    // Now and then a malformed one: both readers must refuse it.
    match rng.below(40) {
        0 => text.insert(0, '0'),
        1 => text.push('.'),
        2 => text.push('e'),
        3 => text.insert(0, '+'),
        _ => {}
    }
    text
}

/// The C reader reads the doubles the Rust SDK's reader does (and refuses what it
/// refuses), number by number: a C policy that gives its one parameter back as every
/// cost, against `parse_parameters` on the same text. (A native run over many more texts
/// of the same shapes checks a change to the reader; this keeps 20,000 of them.)
#[test]
fn the_c_reader_reads_each_number_as_the_rust_sdk_does() {
    let dir = temp_dir("numbers");
    let policy = r#"#include "switchyard.h"
static double x;
bool sy_configure(const char *json, size_t len, sy_error *err) {
    const sy_number_param params[] = {{"x", &x, -__builtin_inf(), __builtin_inf(), 0}};
    return sy_parse_numbers(json, len, params, 1, err);
}
sy_info sy_describe(void) { return (sy_info){.inputs = SY_LOAD}; }
bool sy_score(const sy_request *r, const sy_candidates *c, double *costs, sy_error *err) {
    (void)r, (void)err;
    for (size_t i = 0; i < c->len; i++) costs[i] = x;
    return true;
}
"#;
    let echo =
        switchyard::PolicyComponent::load(engine(), &build_c_policy(&dir, "echo", policy)).expect("loads");
    #[derive(serde::Deserialize)]
    struct Parameters {
        x: f64,
    }
    let (table, request) = switchyard_test_util::fixtures::sample();
    let mut rng = Rng::seeded(0x6e75_6d62);
    let (mut read, mut refused) = (0, 0);
    for _ in 0..20_000 {
        let params = format!(r#"{{"x": {}}}"#, random_number(&mut rng));
        let rust = switchyard_guest_sdk::parse_parameters::<Parameters>(&params);
        match (rust, GuestScorer::new("echo", echo.clone(), &params)) {
            (Ok(rust), Ok(c)) => {
                let mut selector = Selector::new(Box::new(c));
                selector.select(&table, &request).expect("a finite cost");
                assert_eq!(selector.last_costs()[0].to_bits(), rust.x.to_bits(), "{params}");
                read += 1;
            }
            (Err(_), Err(_)) => refused += 1,
            (rust, c) => panic!("{params}: Rust {:?}, C {:?}", rust.map(|p| p.x), c.map(|_| ())),
        }
    }
    assert!(read > 10_000 && refused > 1_000, "both kinds exercised: {read} read, {refused} refused");
}

/// The `configure-failed` message of `policy check --policy <policy> --params <params>`.
fn refusal(policy: &str, params: &str) -> String {
    let out = switchyard(&["policy", "check", policy, "--params", params]);
    let stderr = String::from_utf8_lossy(&out.stderr).trim_end().to_string();
    assert!(!out.status.success(), "{policy}: {params} accepted");
    stderr.strip_prefix("error: configure-failed: ").unwrap_or_else(|| panic!("{stderr}")).to_string()
}

/// An unknown field is answered as the Rust SDK answers it: named, with the fields
/// there are (serde's wording: `a`, `a` or `b`, one of `a`, `b`, …).
#[test]
fn an_unknown_c_parameter_lists_the_fields_there_are_as_the_rust_sdk_does() {
    let dir = temp_dir("unknown-field");
    let c = write(&dir, "default-c.wasm", DEFAULT_POLICY_C);
    let rust = write(&dir, "default-rust.wasm", DEFAULT_POLICY);
    let params = r#"{"prefill_load_scale": 1, "typo_field": 1}"#;
    let message = refusal(&c, params);
    assert_eq!(message, refusal(&rust, params), "the C and Rust builds of the default policy");
    assert!(
        message.ends_with(
            "field `typo_field`: unknown field `typo_field`, expected one of `overlap_score_credit`, \
             `overlap_score_credit_decay`, `prefill_load_scale`, `decode_active_request_weight`, \
             `host_cache_hit_weight`, `disk_cache_hit_weight`, `overlap_score_weight`"
        ),
        "{message}"
    );
    let two = write(&dir, "two.wasm", &build_c_policy(&dir, "two", TWO_PARAMETERS));
    assert!(refusal(&two, r#"{"q": 1}"#).ends_with("field `q`: unknown field `q`, expected `x` or `n`"));
}

/// A C policy with a number `x` and an integer `n`: every cost is x + n × decode blocks.
const TWO_PARAMETERS: &str = r#"#include "switchyard.h"
static double x, n;
bool sy_configure(const char *json, size_t len, sy_error *err) {
    x = 0.0, n = 1.0;
    const sy_number_param params[] = {{"x", &x, 0.0, 10.0, 0, false}, {"n", &n, 0.0, 1000.0, 0, true}};
    return sy_parse_numbers(json, len, params, 2, err);
}
sy_info sy_describe(void) { return (sy_info){.inputs = SY_LOAD}; }
bool sy_score(const sy_request *r, const sy_candidates *c, double *costs, sy_error *err) {
    (void)r, (void)err;
    for (size_t i = 0; i < c->len; i++) costs[i] = x + n * (double)c->decode_blocks[i];
    return true;
}
"#;

/// An integer parameter takes what the Rust SDK reads into an integer field, and refuses
/// a fraction (or a float that happens to be whole) naming the field, as Rust does.
#[test]
fn a_c_integer_parameter_refuses_a_fraction_naming_the_field() {
    let dir = temp_dir("integer");
    let wasm = write(&dir, "two.wasm", &build_c_policy(&dir, "two", TWO_PARAMETERS));
    for text in ["1.5", "2.0", "1e3", "-0", "18446744073709551616"] {
        let message = refusal(&wasm, &format!(r#"{{"x": 1, "n": {text}}}"#));
        assert!(
            message
                .ends_with(&format!("field `n`: invalid type: floating point `{text}`, expected an integer")),
            "{text}: {message}"
        );
    }
    // Rust's words for a builtin's integer field, but for the type's name.
    let out =
        switchyard(&["select", "--policy", "two-choice", "--guest", "--params", r#"{"prefix_blocks": 1.5}"#]);
    let rust = String::from_utf8_lossy(&out.stderr);
    assert!(
        rust.contains("field `prefix_blocks`: invalid type: floating point `1.5`, expected u32"),
        "{rust}"
    );
    // The double parameter still takes a fraction; the integer one a whole number.
    let picked = json(&switchyard(&["select", "--policy", &wasm, "--params", r#"{"x": 0.5, "n": 2}"#]));
    let got: Vec<f64> =
        picked["costs"].as_array().unwrap().iter().map(|c| c["cost"].as_f64().unwrap()).collect();
    let decode = [300.0, 900.0, 500.0, 120.0, 200.0, 700.0, 400.0, 400.0, 350.0];
    assert_eq!(got, decode.map(|d| 0.5 + 2.0 * d));
    assert!(refusal(&wasm, r#"{"n": -1}"#).ends_with("field `n`: -1 is out of range [0, 1000]"));
}
