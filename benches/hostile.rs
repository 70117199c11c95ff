//! Hostile guests beside a plain one, in one run: the time one selection (select, then
//! commit; fail-open, default limits) costs when the tenant's policy is hostile and the
//! request is the tenant's own, ordinary or hostile. Prints markdown: per case and
//! request, the median time per selection, what stopped the guest, and the fuel of its
//! last call. `cargo bench -p switchyard-benches --bench hostile` (about a minute).
//!
//! Also prints the calibration behind the import charges: nanoseconds per unit of fuel of
//! a plain loop (iloop) and of a loop on each import, at the same ceiling.

use std::time::Instant;
use switchyard_guest_sdk::Column;

use switchyard::selection::{RequestOptions, Worker, WorkerInputs};
use switchyard::{
    FailMode, GuardConfig, GuestScorer, Limits, PolicyComponent, PolicyEngine, SelectionRequest, WorkerTable,
};
use switchyard_builtins as builtin;
use switchyard_guest_sdk::{Pool, RequestFacts};
use switchyard_test_guests::hostile;

/// Selections timed per (case, request); the median is printed.
const REPEATS: usize = 7;

/// A fleet of `workers` (capacities advertised, every slot a row) and a prompt of
/// `prompt_tokens` in `block_size` blocks carrying `hashes` prefix hashes.
fn request(
    workers: u64,
    prompt_tokens: u32,
    block_size: u32,
    hashes: u64,
) -> (WorkerTable, SelectionRequest) {
    let table = WorkerTable::new(
        (0..workers).map(|id| Worker::new(id, 1, 100_000 + id as u32, Some(8192))).collect(),
    )
    .expect("unique ids");
    let n = workers as usize;
    let inputs = WorkerInputs::new((0..workers).collect())
        .with(Column::DeviceOverlapBlocks, (0..n).map(|i| (i % 97) as u32).collect())
        .with(Column::DecodeBlocks, (0..n).map(|i| (i * 7 % 1000) as u32).collect())
        .with(Column::ActiveRequests, (0..n).map(|i| (i % 5) as u32).collect());
    let facts = RequestFacts {
        prompt_tokens,
        block_size,
        request_blocks: prompt_tokens.div_ceil(block_size),
        expected_output_tokens: None,
        pinned: None,
        pool: Pool::Aggregated,
        seed: 7,
    };
    let options = RequestOptions {
        prefix_hashes: Some((0..hashes).map(|h| h.wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect()),
        policy_class: Some("gold".into()),
        ..RequestOptions::default()
    };
    (table.clone(), SelectionRequest::new(&table, facts, options, inputs).expect("valid request"))
}

struct Outcome {
    median_ms: f64,
    stopped_by: String,
    fuel: u64,
}

/// `REPEATS` selections (and commits) of a fresh guarded instance of `component`.
fn run(
    component: &PolicyComponent,
    params: &str,
    (table, request): &(WorkerTable, SelectionRequest),
) -> Outcome {
    let guest = GuestScorer::new("case", component.clone(), params).expect("instantiates");
    let stats = guest.stats();
    let mut selector = switchyard_builtins::guarded(
        Box::new(guest),
        FailMode::Open,
        GuardConfig {
            // Never quarantined: every selection calls the guest.
            quarantine_after: u32::MAX,
            ..GuardConfig::default()
        },
    );
    let mut times = Vec::with_capacity(REPEATS);
    let mut stopped_by = String::from("answered");
    let mut fuel = 0;
    for _ in 0..REPEATS {
        let started = Instant::now();
        let decision = selector.select(table, request).expect("answered (fail-open)");
        let select_fuel = stats.last_fuel();
        let commit = selector.commit(table, request, decision.selection.chosen).expect("fail-open");
        times.push(started.elapsed().as_secs_f64() * 1e3);
        stopped_by = match (&decision.fallback, &commit) {
            (Some(f), _) => f.kind.to_string(),
            (None, Some(f)) => format!("commit: {}", f.kind),
            (None, None) => "answered".into(),
        };
        fuel = select_fuel.max(stats.last_fuel());
    }
    times.sort_by(f64::total_cmp);
    Outcome { median_ms: times[REPEATS / 2], stopped_by, fuel }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to filter.
    let limits = Limits::default();
    let engine = PolicyEngine::new(limits.clone()).expect("engine");
    let load = |bytes: &[u8]| PolicyComponent::load(&engine, bytes).expect("compiles");
    let default = load(builtin::find("default").expect("default builtin").component);
    let iloop = load(hostile::ILOOP);
    let import_loop = load(hostile::IMPORT_LOOP);
    let cases: Vec<(&str, PolicyComponent, &str)> = vec![
        ("plain: default policy", default, "{}"),
        ("spin in score (iloop)", iloop.clone(), "{}"),
        ("loop on prefix-hashes", import_loop.clone(), r#"{"import": "prefix-hashes"}"#),
        ("loop on policy-class", import_loop.clone(), r#"{"import": "policy-class"}"#),
        ("loop on worker-capacity", import_loop.clone(), r#"{"import": "worker-capacity"}"#),
        ("loop on candidate-capacities", import_loop.clone(), r#"{"import": "candidate-capacities"}"#),
        ("spin in on-selected", load(hostile::COMMIT_SPIN), "{}"),
        ("leak 8 MiB per on-selected", load(hostile::COMMIT_LEAK), "{}"),
        ("40 MB error message", load(hostile::HUGE_ERROR), "{}"),
        ("5M-entry cost list", load(hostile::HUGE_RESULT), "{}"),
        ("NaN on every 6th call", load(hostile::NAN_ONCE), r#"{"at": 6}"#),
    ];
    let requests: Vec<(&str, (WorkerTable, SelectionRequest))> = vec![
        ("16 workers, 4K tokens", request(16, 4096, 16, 256)),
        ("1,024 w, 128K tok, 8,192 hashes", request(1024, 131_072, 16, 8192)),
        ("16 w, u32::MAX tokens, block 1", request(16, u32::MAX, 1, 0)),
        ("16 w, 50,000 hashes", request(16, 800_000, 16, 50_000)),
        ("10,000 w, 8,192 hashes", request(10_000, 131_072, 16, 8192)),
    ];

    println!(
        "\n### One selection (select + commit), default limits (fuel + {} ms deadline), median of {REPEATS}\n",
        limits.call_deadline_ms
    );
    print!("| guest |");
    for (name, _) in &requests {
        print!(" {name} |");
    }
    println!();
    print!("| --- |");
    for _ in &requests {
        print!(" ---: |");
    }
    println!();
    for (name, component, params) in &cases {
        print!("| {name} |");
        for (_, case) in &requests {
            let o = run(component, params, case);
            print!(" {:.2} ms, {} ({:.0}M fuel) |", o.median_ms, o.stopped_by, o.fuel as f64 / 1e6);
        }
        println!();
    }

    // Calibration: every loop run to the same fuel ceiling over the same request, fuel
    // alone (no deadline), so ns per unit of fuel compare like for like.
    let fuel_only =
        PolicyEngine::new(Limits { budget: switchyard::Budget::Fuel, ..limits.clone() }).expect("engine");
    let fuel_load = |bytes: &[u8]| PolicyComponent::load(&fuel_only, bytes).expect("compiles");
    let iloop = fuel_load(hostile::ILOOP);
    let import_loop = fuel_load(hostile::IMPORT_LOOP);
    let case = request(1024, 131_072, 16, 8192);
    println!(
        "\n### Nanoseconds per unit of fuel, fuel alone, 1,024 workers, 8,192 hashes (median of {REPEATS})\n"
    );
    println!("| loop | ms per call | fuel | ns per fuel | vs plain loop |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    let plain = run(&iloop, "{}", &case);
    let plain_rate = plain.median_ms * 1e6 / plain.fuel as f64;
    println!(
        "| plain loop (iloop) | {:.2} | {:.0}M | {plain_rate:.3} | 1.00 |",
        plain.median_ms,
        plain.fuel as f64 / 1e6
    );
    for import in ["prefix-hashes", "policy-class", "worker-capacity", "candidate-capacities"] {
        let o = run(&import_loop, &format!(r#"{{"import": "{import}"}}"#), &case);
        let rate = o.median_ms * 1e6 / o.fuel as f64;
        println!(
            "| loop on {import} | {:.2} | {:.0}M | {rate:.3} | {:.2} |",
            o.median_ms,
            o.fuel as f64 / 1e6,
            rate / plain_rate
        );
    }
}
