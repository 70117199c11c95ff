//! Trying a policy on live traffic before it decides: shadows (run after the live answer,
//! compared with it), canaries (a sticky share, rolled back by themselves on faults) and
//! captured selections, against the real `switchyard serve`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use switchyard_test_util::fixtures::{DEFAULT_POLICY, Rng};
use switchyard_test_util::hostile;
use switchyard_test_util::server::{ADMIN, Body, Client, Server, select_body, temp_dir};

/// A shadow queue that keeps every run of these tests' sequential clients.
const SHADOWS: &str = "[service]\nshadow_queue = 1024\nmax_shadows_per_tenant = 1024\n";

fn select(c: &Client, token: &str, body: &Value) -> Value {
    let (status, v) = c.call("POST", "/v1/select", Some(token), Body::Json(body.clone()));
    assert_eq!(status, 200, "{v}");
    v
}

/// The sample request for `class`, its load and cache columns drawn from `n` (so two
/// policies disagree on some), with every cost in the answer.
fn varied(tenant: &str, class: &str, n: u64) -> Value {
    let mut rng = Rng::seeded(n);
    let mut body = select_body(tenant, Some(class));
    body["seed"] = json!(n);
    let mut column = |max: u64| (0..9).map(|_| rng.below(max)).collect::<Vec<u64>>();
    body["inputs"]["device_overlap_blocks"] = json!(column(128));
    body["inputs"]["active_prefill_tokens"] = json!(column(8192));
    body["inputs"]["decode_blocks"] = json!(column(1000));
    body["inputs"]["active_requests"] = json!(column(10));
    body["inputs"]["cached_tokens"] = json!(vec![0; 9]);
    body["inputs"]["host_overlap_blocks"] = json!(vec![0; 9]);
    body["costs"] = json!(true);
    body
}

fn rollout(
    c: &Client,
    token: &str,
    method: &str,
    tenant: &str,
    class: &str,
    what: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let path = format!("/v1/tenants/{tenant}/classes/{class}/{what}");
    let body = body.map_or(Body::None, Body::Json);
    c.call(method, &path, Some(token), body)
}

fn ok(
    c: &Client,
    token: &str,
    method: &str,
    tenant: &str,
    class: &str,
    what: &str,
    body: Option<Value>,
) -> Value {
    let (status, v) = rollout(c, token, method, tenant, class, what, body);
    assert_eq!(status, 200, "{method} {what}: {v}");
    v
}

/// Waits for the shadow report of `class` to have compared or faulted on `n` runs.
fn report_after(c: &Client, token: &str, tenant: &str, class: &str, n: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = ok(c, token, "GET", tenant, class, "shadow", None);
        let faults: u64 = v["faults"].as_object().map_or(0, |f| f.values().filter_map(Value::as_u64).sum());
        let dropped: u64 = v["dropped"].as_object().map_or(0, |f| f.values().filter_map(Value::as_u64).sum());
        if v["comparison"]["compared"].as_u64().unwrap_or(0) + faults + dropped >= n {
            return v;
        }
        assert!(Instant::now() < deadline, "the shadow did not run {n} times: {v}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn pick(v: &Value) -> (Value, Value) {
    (v["worker_id"].clone(), v["dp_rank"].clone())
}

#[test]
fn a_shadow_never_changes_a_live_answer_and_its_report_is_the_comparison_of_the_two() {
    let dir = temp_dir("rollout-shadow");
    // Room for every run: a sequential client outpaces one shadow thread at the lowest
    // priority beside a parallel test suite.
    let server = Server::with_config(&dir, SHADOWS);
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let mine = c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, None);
    c.assigned(&token, "acme", "live", json!({ "policy": "mine" }));
    const N: u64 = 40;
    let baseline: Vec<Value> = (0..N).map(|n| select(&c, &token, &varied("acme", "live", n))).collect();

    let set =
        ok(&c, &token, "PUT", "acme", "live", "shadow", Some(json!({ "policy": "lmetric", "rate": 1.0 })));
    assert_eq!(set["shadow"], json!({ "policy": "lmetric", "version": null, "rate": 1.0 }), "{set}");
    assert_eq!(set["live"], json!({ "policy": "mine", "version": mine }), "{set}");
    let shadowed: Vec<Value> = (0..N).map(|n| select(&c, &token, &varied("acme", "live", n))).collect();
    for (before, after) in baseline.iter().zip(&shadowed) {
        assert_eq!(before, after, "a shadow changed a live answer");
    }
    let report = report_after(&c, &token, "acme", "live", N);
    assert_eq!(report["sampled"], json!(N), "{report}");
    assert_eq!(report["comparison"]["compared"], json!(N), "{report}");

    // The comparison recounted: lmetric's own pick of each request (switchyard select),
    // and the live policy's cost of it less its own.
    let (mut agreed, mut regrets) = (0, Vec::new());
    for (n, live) in shadowed.iter().enumerate() {
        let request = dir.join("request.json");
        std::fs::write(&request, varied("acme", "live", n as u64).to_string()).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["select", "--policy", "lmetric", "--input", request.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let shadow: Value = serde_json::from_slice(&out.stdout).unwrap();
        if pick(&shadow) == pick(live) {
            agreed += 1;
        } else {
            let cost_of = |w: &(Value, Value)| {
                live["costs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|c| (c["worker_id"].clone(), c["dp_rank"].clone()) == *w)
                    .map(|c| c["cost"].as_f64().unwrap())
            };
            regrets.push(cost_of(&pick(&shadow)).unwrap() - live["cost"].as_f64().unwrap());
        }
    }
    assert!(agreed > 0 && agreed < N, "the two policies should agree on some and not all: {agreed}");
    assert_eq!(report["comparison"]["agreed"], json!(agreed), "{report}");
    assert_eq!(report["comparison"]["agreement"].as_f64(), Some(agreed as f64 / N as f64));
    let listed: Vec<f64> =
        report["disagreements"].as_array().unwrap().iter().map(|d| d["regret"].as_f64().unwrap()).collect();
    let last: Vec<f64> = regrets[regrets.len().saturating_sub(16)..].to_vec();
    assert_eq!(
        listed, last,
        "each disagreement's regret is the live policy's cost of the shadow's pick less its own"
    );
    assert!(report["comparison"]["regret"]["p50"].as_f64().unwrap() >= 0.0, "{report}");
    let d = &report["disagreements"][0];
    assert!(
        d["live_top"].as_array().is_some_and(|t| t.len() == 3)
            && d["shadow_top"].as_array().is_some_and(|t| t.len() == 3),
        "{d}"
    );
    assert!(
        report["latency"]["live"]["p99_us"].as_f64() > Some(0.0)
            && report["latency"]["shadow"]["p50_us"].as_f64() > Some(0.0),
        "{report}"
    );

    // Per class in Prometheus; sampled at 10 %: every tenth.
    let metrics = c.metrics();
    let agree = format!(
        "switchyard_shadow_selections_total{{tenant=\"acme\",class=\"live\",outcome=\"agree\"}} {agreed}"
    );
    assert!(metrics.contains(&agree), "{agree} in\n{metrics}");
    ok(&c, &token, "PUT", "acme", "live", "shadow", Some(json!({ "policy": "lmetric", "rate": 0.1 })));
    for n in 0..N {
        select(&c, &token, &varied("acme", "live", n));
    }
    let report = report_after(&c, &token, "acme", "live", N + N / 10);
    assert_eq!(report["sampled"], json!(N + N / 10), "a new rate goes on counting: {report}");

    // Off: no more runs; the report of the last one stays.
    ok(&c, &token, "DELETE", "acme", "live", "shadow", None);
    for n in 0..N {
        select(&c, &token, &varied("acme", "live", n));
    }
    let report = ok(&c, &token, "GET", "acme", "live", "shadow", None);
    assert_eq!(report["sampled"], json!(N + N / 10), "{report}");
    assert_eq!(report["shadow"]["policy"], "lmetric", "{report}");
}

#[test]
fn a_shadow_that_traps_spins_or_leaks_leaves_the_live_class_untouched() {
    let dir = temp_dir("rollout-hostile-shadow");
    let server = Server::with_config(&dir, SHADOWS);
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, None);
    c.assigned(&token, "acme", "live", json!({ "policy": "mine", "on_fault": "closed" }));
    const N: u64 = 12;
    let baseline: Vec<Value> = (0..N).map(|n| select(&c, &token, &varied("acme", "live", n))).collect();
    for (name, bytes, kinds) in [
        ("panics", hostile::PANIC, &["trap", "quarantined"][..]),
        ("spins", hostile::ILOOP, &["fuel", "deadline", "quarantined"][..]),
        ("leaks", hostile::MEMORY_BOMB, &["memory", "trap", "quarantined"][..]),
    ] {
        c.uploaded(&token, "acme", name, bytes, None);
        ok(&c, &token, "PUT", "acme", "live", "shadow", Some(json!({ "policy": name, "rate": 1.0 })));
        for (n, before) in baseline.iter().enumerate() {
            let after = select(&c, &token, &varied("acme", "live", n as u64));
            assert_eq!(&after, before, "the shadow `{name}` changed a live answer");
        }
        let report = report_after(&c, &token, "acme", "live", N);
        let faults = report["faults"].as_object().unwrap();
        assert!(!faults.is_empty() && faults.keys().all(|k| kinds.contains(&k.as_str())), "{name}: {report}");
        assert_eq!(report["comparison"]["compared"], json!(0), "a faulted run is not compared: {report}");
    }
    // The live policy saw none of it: no fault, no fallback.
    let listing = c.call("GET", "/v1/tenants/acme/policies", Some(&token), Body::None).1;
    let live = listing["policies"].as_array().unwrap().iter().find(|p| p["name"] == "mine").unwrap().clone();
    assert!(live["faults"].as_object().unwrap().values().all(|n| n == 0), "{live}");
    assert_eq!(live["versions"][0]["breaker"]["state"], "closed", "{live}");
    let m = c.metrics();
    assert!(m.contains("switchyard_fallbacks_total{tenant=\"acme\",policy=\"mine\"} 0"), "{m}");
}

/// The canary status of `class`, once its canary has ended.
fn ended(c: &Client, token: &str, tenant: &str, class: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = ok(c, token, "GET", tenant, class, "canary", None);
        if v["canary"].is_null() {
            return v;
        }
        assert!(Instant::now() < deadline, "the canary did not end: {v}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_faulting_canary_rolls_back_by_itself_within_its_window_and_no_selection_fails() {
    // By its fault rate (a breaker that never opens first), then by its breaker (opened
    // after 3 faults in a row, the default).
    for (guard, faults, reason) in [
        (
            "[guard]\nquarantine_after = 1000\n",
            5,
            "5 faults in its last 5 selections: a fault rate of 1.000 is over max_fault_rate 0.2",
        ),
        ("", 3, "its breaker opened"),
    ] {
        let dir = temp_dir("rollout-canary-faults");
        let server = Server::with_config(&dir, guard);
        let c = Client::new(&server);
        let token = c.add_tenant("acme");
        let mine = c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, None);
        // Fail-closed: a fault of the class's policy would fail the selection.
        c.assigned(&token, "acme", "live", json!({ "policy": "mine", "on_fault": "closed" }));
        c.uploaded(&token, "acme", "broken", hostile::PANIC, None);
        let canary = json!({ "policy": "broken", "weight": 50, "max_fault_rate": 0.2, "min_selections": 5, "window": 10 });
        let set = ok(&c, &token, "PUT", "acme", "live", "canary", Some(canary));
        assert_eq!(set["canary"]["weight"], json!(50.0), "{set}");
        for n in 0..60 {
            let v = select(&c, &token, &varied("acme", "live", n));
            assert_eq!(
                (v["policy"].as_str(), v["version"].as_str()),
                (Some("mine"), Some(mine.as_str())),
                "{v}"
            );
        }
        let status = ended(&c, &token, "acme", "live");
        let last = &status["last_canary"];
        assert_eq!(
            (last["outcome"].as_str(), last["reason"].as_str()),
            (Some("rolled-back"), Some(reason)),
            "{status}"
        );
        assert!(last["at"].as_u64() > Some(0), "{status}");
        // Within its window: the selections that judged it, and not one more.
        assert_eq!(
            (status["selections"].as_u64(), status["faults"].as_u64()),
            (Some(faults), Some(faults)),
            "{status}"
        );
        let m = c.metrics();
        let series = format!(
            "switchyard_canary_selections_total{{tenant=\"acme\",class=\"live\",outcome=\"fault\"}} {faults}"
        );
        assert!(m.contains(&series), "{series} in\n{m}");
        assert!(m.contains("switchyard_canary_rollbacks_total{tenant=\"acme\",class=\"live\"} 1"), "{m}");
        // Committed: the class routes to its own version, and there is nothing to promote.
        let listing = c.call("GET", "/v1/tenants/acme/policies", Some(&token), Body::None).1;
        assert_eq!(listing["classes"]["live"]["version"], json!(mine), "{listing}");
        let (status, v) = rollout(&c, &token, "POST", "acme", "live", "canary/promote", None);
        assert_eq!((status, v["error"]["kind"].as_str()), (409, Some("no-canary")), "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("rolled-back"), "{v}");
    }
}

#[test]
fn a_canary_keeps_a_key_on_one_version_and_is_promoted_or_aborted_from_the_cli() {
    let dir = temp_dir("rollout-canary-sticky");
    let server = Server::with_config(&dir, "");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, None);
    c.assigned(&token, "acme", "live", json!({ "policy": "mine" }));
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(args)
            .args(["--tenant", "acme", "--class", "live", "--server", server.url(), "--token", &token])
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let set = cli(&["policy", "canary", "--policy", "lmetric", "--weight", "30"]);
    assert_eq!(set["canary"]["policy"], "lmetric", "{set}");
    // One seed, one version; about 30 % of seeds on the canary.
    let by = |v: &Value| v["policy"].as_str().unwrap().to_string();
    let mut on_canary = 0;
    for seed in 0..200 {
        let mut body = select_body("acme", Some("live"));
        body["seed"] = json!(seed);
        let first = by(&select(&c, &token, &body));
        for _ in 0..2 {
            assert_eq!(by(&select(&c, &token, &body)), first, "seed {seed} changed version");
        }
        on_canary += usize::from(first == "lmetric");
    }
    assert!((30..100).contains(&on_canary), "{on_canary} of 200 seeds on a 30 % canary");
    // A session keeps a conversation on one version whatever its seeds.
    for session in ["a", "b", "c", "d"] {
        let versions: std::collections::BTreeSet<String> = (0..10)
            .map(|seed| {
                let mut body = select_body("acme", Some("live"));
                (body["seed"], body["session"]) = (json!(seed), json!(session));
                by(&select(&c, &token, &body))
            })
            .collect();
        assert_eq!(versions.len(), 1, "session {session}: {versions:?}");
    }
    let status = cli(&["policy", "canary", "--status"]);
    let selections = status["selections"].as_u64().unwrap();
    assert!(selections >= on_canary as u64 * 3 && status["faults"] == json!(0), "{status}");

    // Aborted: the class's own policy decides everything again.
    let aborted = cli(&["policy", "abort"]);
    assert_eq!(aborted["last_canary"]["outcome"], "aborted", "{aborted}");
    assert_eq!(aborted["last_canary"]["reason"], "aborted by tenant acme", "{aborted}");
    for seed in 0..50 {
        let mut body = select_body("acme", Some("live"));
        body["seed"] = json!(seed);
        assert_eq!(by(&select(&c, &token, &body)), "mine");
    }
    // Promoted: the canary's policy is the class's.
    cli(&["policy", "canary", "--policy", "lmetric", "--weight", "5"]);
    let promoted = cli(&["policy", "promote"]);
    assert_eq!(
        (promoted["live"]["policy"].as_str(), promoted["canary"].as_null()),
        (Some("lmetric"), Some(())),
        "{promoted}"
    );
    assert_eq!(promoted["last_canary"]["outcome"], "promoted", "{promoted}");
    for seed in 0..50 {
        let mut body = select_body("acme", Some("live"));
        body["seed"] = json!(seed);
        assert_eq!(by(&select(&c, &token, &body)), "lmetric");
    }
}

#[test]
fn another_tenant_can_neither_read_nor_change_a_class_rollout() {
    let dir = temp_dir("rollout-tenants");
    let server = Server::with_config(&dir, "");
    let c = Client::new(&server);
    let a = c.add_tenant("acme");
    let b = c.add_tenant("bolt");
    c.assigned(&a, "acme", "live", json!({ "policy": "default" }));
    ok(&c, &a, "PUT", "acme", "live", "capture", Some(json!({ "selections": 10 })));
    ok(&c, &a, "PUT", "acme", "live", "shadow", Some(json!({ "policy": "lmetric", "rate": 1.0 })));
    for n in 0..5 {
        select(&c, &a, &varied("acme", "live", n));
    }
    let (_, router) = c.call("POST", "/v1/routers", Some(ADMIN), Body::Json(json!({ "name": "edge" })));
    let router = router["token"].as_str().unwrap().to_string();
    // The same refusal whether the class exists or not: nothing to infer from it.
    for token in [&b, &router] {
        let mut refusals = Vec::new();
        for class in ["live", "nothing"] {
            for (method, what) in [
                ("GET", "shadow"),
                ("GET", "canary"),
                ("GET", "capture"),
                ("DELETE", "shadow"),
                ("DELETE", "capture"),
                ("POST", "canary/abort"),
            ] {
                let (status, v) = rollout(&c, token, method, "acme", class, what, None);
                assert_eq!(status, 403, "{method} {what}: {v}");
                refusals.push((class, v["error"]["message"].clone()));
            }
            let (status, v) = rollout(
                &c,
                token,
                "PUT",
                "acme",
                class,
                "shadow",
                Some(json!({ "policy": "default", "rate": 1.0 })),
            );
            assert_eq!(status, 403, "{v}");
        }
        let (live, nothing): (Vec<_>, Vec<_>) = refusals.into_iter().partition(|(class, _)| *class == "live");
        assert_eq!(
            live.into_iter().map(|r| r.1).collect::<Vec<_>>(),
            nothing.into_iter().map(|r| r.1).collect::<Vec<_>>()
        );
    }
    // The tenant, and the admin, read them.
    assert_eq!(captured(&c, ADMIN, "acme", "live").lines().count(), 5);
    assert_eq!(captured(&c, &a, "acme", "live").lines().count(), 5);
    // Tenant b's own class of the same name is its own.
    c.assigned(&b, "bolt", "live", json!({ "policy": "default" }));
    let report = ok(&c, &b, "GET", "bolt", "live", "shadow", None);
    assert_eq!((report["sampled"].as_u64(), report["shadow"].is_null()), (Some(0), true), "{report}");
    assert_eq!(captured(&c, &b, "bolt", "live"), "");
}

/// A class's captured selections, as the JSON Lines served.
fn captured(c: &Client, token: &str, tenant: &str, class: &str) -> String {
    match ok(c, token, "GET", tenant, class, "capture", None) {
        Value::String(lines) => lines,
        // One line alone parses as JSON.
        line => format!("{line}\n"),
    }
}

#[test]
fn a_captured_trace_replays_and_the_comparisons_agreement_is_the_shadows() {
    let dir = temp_dir("rollout-capture");
    let server = Server::with_config(&dir, SHADOWS);
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    c.assigned(&token, "acme", "live", json!({ "policy": "default" }));
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard")).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let class = ["--tenant", "acme", "--class", "live", "--server", server.url(), "--token", token.as_str()];
    cli(&[&["capture", "--keep", "1000"][..], &class].concat());
    cli(&[&["policy", "shadow", "--policy", "chwbl", "--rate", "1"][..], &class].concat());
    const N: u64 = 60;
    let answers: Vec<Value> = (0..N)
        .map(|n| {
            let mut body = varied("acme", "live", n);
            // Prompts of their own: chwbl hashes the prefix.
            body["prefix_hashes"] = json!((0..8).map(|b| n * 100 + b).collect::<Vec<u64>>());
            select(&c, &token, &body)
        })
        .collect();
    let report = report_after(&c, &token, "acme", "live", N);
    assert_eq!(report["comparison"]["compared"], json!(N), "{report}");

    let trace = dir.join("live.jsonl");
    cli(&[&["capture", "-o", trace.to_str().unwrap()][..], &class].concat());
    let lines: Vec<Value> =
        std::fs::read_to_string(&trace).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), N as usize);
    for (line, answer) in lines.iter().zip(&answers) {
        assert_eq!(pick(&line["answer"]), pick(answer), "{line}");
        assert_eq!(line["request"]["workers"].as_array().map(Vec::len), Some(8), "the whole request: {line}");
    }
    // Plainly, as any trace; and against the shadow's policy on exactly these requests.
    cli(&["replay", "--trace", trace.to_str().unwrap(), "--workers", "4"]);
    let out = dir.join("against.json");
    let stdout = cli(&[
        "replay",
        "--trace",
        trace.to_str().unwrap(),
        "--workers",
        "4",
        "--policy",
        "default",
        "--against",
        "chwbl",
        "--report",
        out.to_str().unwrap(),
    ]);
    assert!(stdout.contains(&format!("matches the recorded answers: {N}/{N}")), "{stdout}");
    let replayed: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(
        replayed["against"]["agreement"], report["comparison"],
        "replay: {replayed}\nshadow: {report}"
    );
    let agreement = report["comparison"]["agreement"].as_f64().unwrap();
    assert!(agreement > 0.0 && agreement < 1.0, "two policies that sometimes differ: {report}");

    // Off: forgotten.
    cli(&[&["capture", "--off"][..], &class].concat());
    assert_eq!(cli(&[&["capture"][..], &class].concat()), "");
}
