//! The command line on hostile policies: `fallback` kinds, `--fail-closed` exit codes,
//! `policy check` reasons, quarantine over `--repeat`, limits from a config file and flags.

use std::process::{Command, Output};

use serde_json::Value;

use switchyard_test_util::fixtures::hostile;

fn switchyard(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_switchyard")).args(args).output().expect("runs switchyard")
}

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

/// Expects exit `code` and one stderr line `error: <kind>: …`; returns the line.
fn fails_with(args: &[&str], kind: &str, code: i32) -> String {
    let out = switchyard(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
    assert!(stderr.starts_with(&format!("error: {kind}: ")), "expected `{kind}`, got: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    stderr
}

fn temp_file(name: &str, bytes: &[u8]) -> String {
    let dir = std::env::temp_dir().join(format!("switchyard-sandbox-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.display().to_string()
}

#[test]
fn select_falls_back_with_the_fault_kind_or_fails_closed() {
    let native = json(&switchyard(&["select"]));
    for (name, bytes, params, kind) in [
        ("iloop.wasm", hostile::ILOOP, "{}", "fuel"),
        ("recursion.wasm", hostile::RECURSION, "{}", "stack"),
        ("memory-bomb.wasm", hostile::MEMORY_BOMB, "{}", "memory"),
        ("table-growth.wasm", hostile::TABLE_GROWTH, "{}", "memory"),
        ("panic.wasm", hostile::PANIC, "{}", "trap"),
        ("wrong-length.wasm", hostile::WRONG_LENGTH, "{}", "invalid-output"),
        ("bad-costs.wasm", hostile::BAD_COSTS, r#"{"value": "inf"}"#, "invalid-output"),
    ] {
        let file = temp_file(name, bytes);
        let out = json(&switchyard(&["select", "--policy", &file, "--params", params]));
        assert_eq!(out["fallback"]["kind"], kind, "{name}: {out}");
        assert!(out["fallback"]["message"].as_str().is_some_and(|m| !m.is_empty()));
        assert_eq!(out["policy"], "default", "{name}");
        assert_eq!(out["build"], "native", "{name}");
        assert_eq!(out["worker_id"], native["worker_id"], "{name}: the default policy's pick");
        assert_eq!(out["costs"], native["costs"], "{name}");
        fails_with(&["select", "--policy", &file, "--params", params, "--fail-closed"], kind, 3);
    }
}

#[test]
fn the_deadline_budget_comes_from_the_config_file_and_flags_override_it() {
    let iloop = temp_file("iloop-config.wasm", hostile::ILOOP);
    let config = temp_file("epoch.toml", b"[limits]\nbudget = \"epoch\"\ncall_deadline_ms = 5\n");
    let out = json(&switchyard(&["select", "--policy", &iloop, "--config", &config]));
    assert_eq!(out["fallback"]["kind"], "deadline");
    let out = json(&switchyard(&["select", "--policy", &iloop, "--config", &config, "--budget", "fuel"]));
    assert_eq!(out["fallback"]["kind"], "fuel");
    // A memory limit from a flag: the default policy fits in 4 MiB; 64 KiB is too small.
    let default = temp_file("default.wasm", switchyard_builtins::find("default").unwrap().component);
    let err = fails_with(&["policy", "check", &default, "--max-memory-bytes", "65536"], "too-large", 2);
    assert!(err.contains("exceeds the limit of 0x10000 bytes"), "{err}");
    let bad = temp_file("bad.toml", b"[limits]\nmax_memory = 1\n");
    let err = fails_with(&["select", "--config", &bad], "config", 2);
    assert!(err.contains("max_memory"), "{err}");
}

#[test]
fn repeated_faults_quarantine_the_policy() {
    let panic = temp_file("panic-repeat.wasm", hostile::PANIC);
    let out = json(&switchyard(&["select", "--policy", &panic, "--repeat", "5", "--quarantine-after", "3"]));
    assert_eq!(out["fallback"]["kind"], "quarantined");
    assert_eq!(out["counters"]["faults"]["trap"], 3);
    assert_eq!(out["counters"]["quarantined"], 2);
    assert_eq!(out["breaker"]["state"], "open");
    fails_with(
        &["select", "--policy", &panic, "--repeat", "5", "--quarantine-after", "3", "--fail-closed"],
        "trap",
        3,
    );
}

#[test]
fn policy_check_names_the_reason_in_one_line() {
    let mut oversized = switchyard_builtins::find("default").unwrap().component.to_vec();
    oversized.resize(5 << 20, 0);
    for (name, bytes, kind) in [
        ("start-spin.wasm", hostile::START_SPIN, "instantiate-failed: fuel: "),
        ("configure-spin.wasm", hostile::CONFIGURE_SPIN, "configure-failed: fuel: "),
        ("huge-data.wasm", hostile::HUGE_DATA, "too-large: "),
        ("wasi.wasm", hostile::WASI_IMPORT, "forbidden-import: "),
        ("core.wasm", hostile::CORE_MODULE, "core-module: "),
        ("other.wasm", hostile::OTHER_WORLD, "wrong-world: "),
        ("noise.wasm", &switchyard_test_util::fixtures::noise(4096, 1)[..], "not-wasm: "),
        ("oversized.wasm", &oversized[..], "too-large: "),
    ] {
        let file = temp_file(name, bytes);
        let out = switchyard(&["policy", "check", &file]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.starts_with(&format!("error: {kind}")), "{name}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{name}: {stderr}");
    }
}

#[test]
fn a_commit_fault_is_contained_and_select_repeat_runs_to_the_end() {
    let file = temp_file("commit-spin.wasm", hostile::COMMIT_SPIN);
    // Commit faults count towards quarantine like any other (three in a row by default).
    let out = json(&switchyard(&["select", "--policy", &file, "--repeat", "4", "--quarantine-after", "10"]));
    assert_eq!(out["fallback"], Value::Null, "the pick is the policy's: {out}");
    assert_eq!(out["policy"], "commit-spin");
    assert_eq!(out["commit_fault"]["kind"], "fuel", "{out}");
    assert_eq!(out["counters"]["commit_faults"], 4, "{out}");
    assert_eq!(out["counters"]["faults"]["fuel"], 4, "{out}");
    fails_with(&["select", "--policy", &file, "--fail-closed"], "fuel", 3);
}

#[test]
fn after_invalid_output_the_instance_is_dropped_so_nan_at_call_six_faults_every_sixth() {
    let file = temp_file("nan-once.wasm", hostile::NAN_ONCE);
    let out = json(&switchyard(&["select", "--policy", &file, "--params", r#"{"at": 6}"#, "--repeat", "60"]));
    assert_eq!(out["counters"]["faults"]["invalid-output"], 10, "{out}");
    assert_eq!(out["counters"]["fallbacks"], 10, "{out}");
}
