//! Hostile guests beside a plain one, in one run: the time one selection (select, then
//! commit; fail-open, default limits) costs when the tenant's policy is hostile and the
//! request is the tenant's own, ordinary or hostile. Prints markdown: per case and
//! request, the median time per selection, what stopped the guest, and the fuel of its
//! last call. `cargo bench --bench hostile` (about a minute).
//!
//! Also prints the calibration behind the import charges: nanoseconds per unit of fuel of
//! a plain loop (iloop) and of a loop on each import, at the same ceiling.
//!
//! `HOSTILE_COMPILER=winch` runs it all on Winch's code (`[limits] compiler = "winch"`).

use std::time::Instant;

use switchyard::{
    FailMode, GuardConfig, GuestScorer, Limits, PolicyComponent, PolicyEngine, SelectionRequest, WorkerTable,
};
use switchyard_builtins as builtin;
use switchyard_test_util::hostile;
use switchyard_test_util::requests::fleet;

/// Selections timed per (case, request); the median is printed.
const REPEATS: usize = 7;

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
    let compiler = match std::env::var("HOSTILE_COMPILER").as_deref() {
        Ok("winch") => switchyard::Compiler::Winch,
        Ok("cranelift") | Err(_) => switchyard::Compiler::Cranelift,
        Ok(other) => panic!("HOSTILE_COMPILER={other}: use cranelift or winch"),
    };
    let limits = Limits { compiler, ..Limits::default() };
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
    let mut requests = vec![("16 workers, 4K tokens", fleet(16, 4096, 16, 256))];
    requests.extend(switchyard_test_util::requests::hostile());

    println!(
        "\n### One selection (select + commit), default limits (fuel + {} ms deadline, {compiler:?}), median of {REPEATS}\n",
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
    let case = fleet(1024, 131_072, 16, 8192);
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
