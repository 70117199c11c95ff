//! The `switchyard` command: select (native, guest, component file) and policy check,
//! and clear errors for bad input.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn switchyard(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_switchyard")).args(args).output().expect("runs switchyard")
}

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

/// Runs and expects failure with `error: <kind>:` on stderr.
fn fails_with(args: &[&str], kind: &str) -> String {
    let out = switchyard(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "expected failure for {args:?}");
    assert!(stderr.starts_with(&format!("error: {kind}:")), "expected `{kind}`, got: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    stderr
}

fn fixture() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("crates/selection/sample-request.json")
        .display()
        .to_string()
}

fn temp_file(name: &str, bytes: &[u8]) -> String {
    let dir = std::env::temp_dir().join(format!("switchyard-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.display().to_string()
}

#[test]
fn select_native_guest_and_component_file_agree_on_the_fixture() {
    let input = fixture();
    let native = json(&switchyard(&["select", "--policy", "default", "--input", &input]));
    let guest = json(&switchyard(&["select", "--policy", "default", "--guest", "--input", &input]));
    // Worker 3: no cache, pf 2048 → (2048 + 2048) / 16 = 256 + decode 120 = 376, the lowest.
    assert_eq!(native["worker_id"], 3);
    assert_eq!(native["dp_rank"], 0);
    assert_eq!(native["cost"], 376.0);
    assert_eq!(native["build"], "native");
    assert_eq!(native["fallback"], Value::Null);
    assert_eq!(guest["build"], "guest");
    assert_eq!(guest["costs"], native["costs"]);
    assert_eq!(guest["worker_id"], native["worker_id"]);
    assert_eq!(native["candidates"], 9);

    let wasm = temp_file("default.wasm", switchyard_builtins::find("default").unwrap().component);
    let file = json(&switchyard(&["select", "--policy", &wasm, "--input", &input]));
    assert_eq!(file["costs"], native["costs"]);
    assert_eq!(file["version"], guest["version"], "same component, same sha256");
}

#[test]
fn select_runs_on_the_embedded_sample_and_takes_parameters() {
    let sample = json(&switchyard(&["select"]));
    assert_eq!(sample["worker_id"], 3);
    // Without prefill cost, the lowest decode load wins: worker 3 (120) still; with a large
    // request weight, worker 3 (1 request) too; use the deprecated knob = 0 → load only.
    let load_only = json(&switchyard(&["select", "--params", r#"{"prefill_load_scale": 0}"#]));
    assert_eq!(load_only["cost"], 120.0);
    let err = fails_with(&["select", "--params", r#"{"overlap_score_credit": 2}"#], "configure-failed");
    assert!(err.contains("overlap_score_credit"), "{err}");
    let err = fails_with(&["select", "--guest", "--params", r#"{"bogus": 1}"#], "configure-failed");
    assert!(err.contains("bogus"), "{err}");
    let err =
        fails_with(&["select", "--guest", "--params", r#"{"prefill_load_scale": "x"}"#], "configure-failed");
    assert!(err.contains("prefill_load_scale"), "the type error names its field: {err}");
}

#[test]
fn bad_input_is_an_error_message_never_a_panic() {
    let malformed = temp_file("malformed.json", b"{\"prompt_tokens\": 12,");
    fails_with(&["select", "--input", &malformed], "invalid-input");
    let unequal = temp_file(
        "unequal.json",
        br#"{"prompt_tokens": 32, "block_size": 16, "workers": [{"id": 1}, {"id": 2}],
             "inputs": {"worker_id": [1, 2], "decode_blocks": [5]}}"#,
    );
    let err = fails_with(&["select", "--input", &unequal], "invalid-input");
    assert!(err.contains("decode_blocks"), "{err}");
    let unknown_worker = temp_file(
        "unknown.json",
        br#"{"prompt_tokens": 32, "block_size": 16, "workers": [{"id": 1}], "inputs": {"worker_id": [9]}}"#,
    );
    fails_with(&["select", "--input", &unknown_worker], "invalid-input");
    let zero_block =
        temp_file("zero.json", br#"{"prompt_tokens": 32, "block_size": 0, "workers": [{"id": 1}]}"#);
    fails_with(&["select", "--input", &zero_block], "invalid-input");
    let no_workers = temp_file("none.json", br#"{"prompt_tokens": 32, "block_size": 16, "workers": []}"#);
    fails_with(&["select", "--input", &no_workers], "no-eligible-worker");
    fails_with(&["select", "--policy", "no-such-policy"], "unknown-policy");
    let text = temp_file("text.wasm", b"hello, I am not wasm");
    fails_with(&["select", "--policy", &text], "not-wasm");
    fails_with(&["policy", "check", &text], "not-wasm");
    let core = temp_file("core.wasm", b"\0asm\x01\0\0\0");
    fails_with(&["policy", "check", &core], "core-module");
    fails_with(&["policy", "check", "/no/such/file.wasm"], "io");
}

#[test]
fn policy_check_prints_world_imports_exports_and_size() {
    let wasm = temp_file("check.wasm", switchyard_builtins::find("default").unwrap().component);
    let report = json(&switchyard(&["policy", "check", &wasm]));
    assert_eq!(report["world"], "switchyard:policy/selection-policy@0.2.0");
    assert_eq!(report["exports"], serde_json::json!(["switchyard:policy/policy@0.2.0"]));
    assert_eq!(
        report["size_bytes"].as_u64().unwrap() as usize,
        std::fs::metadata(&wasm).unwrap().len() as usize
    );
    for import in report["imports"].as_array().unwrap() {
        assert!(import.as_str().unwrap().starts_with("switchyard:policy/"));
    }
    fails_with(&["policy", "check", &wasm, "--params", r#"{"prefill_load_scale": -1}"#], "configure-failed");
}

/// Every builtin by name: native and guest builds agree on the fixture with `--params`,
/// and a bad parameter is a `configure-failed` error naming the field, in both builds.
#[test]
fn every_builtin_selects_by_name_with_params_and_bad_params_name_the_field() {
    let input = fixture();
    let cases = [
        ("default", r#"{"prefill_load_scale": 0.5}"#, r#"{"prefill_load_scale": -1}"#, "prefill_load_scale"),
        ("chwbl", r#"{"replication": 64, "prefix_blocks": 4}"#, r#"{"load_factor": 0}"#, "load_factor"),
        ("two-choice", r#"{"load_factor": 2}"#, r#"{"prefix_blocks": 0}"#, "prefix_blocks"),
        ("lmetric", "{}", r#"{"alpha": 1}"#, "alpha"),
        ("llmd-precise", r#"{"prefix_cache_weight": 5}"#, r#"{"queue_weight": "high"}"#, "queue_weight"),
        ("capacity-aware", r#"{"max_usage": 0.5}"#, r#"{"max_usage": -1}"#, "max_usage"),
        (
            "class-aware",
            r#"{"classes": {"latency": {"prefill_load_scale": 3}}}"#,
            r#"{"classes": {"latency": {"overlap_score_credit": 9}}}"#,
            "overlap_score_credit",
        ),
        (
            "request-limit",
            r#"{"max_in_flight_requests": 4}"#,
            r#"{"max_in_flight_requests": 0}"#,
            "max_in_flight_requests",
        ),
        ("sglang-cache-aware", r#"{"cache_threshold": 0.5}"#, r#"{"cache_threshold": 2}"#, "cache_threshold"),
    ];
    let mut names: Vec<&str> = cases.iter().map(|c| c.0).collect();
    names.sort();
    let mut builtins = switchyard_builtins::names();
    builtins.sort();
    assert_eq!(names, builtins, "every builtin is covered");
    for (name, good, bad, field) in cases {
        let args = ["select", "--policy", name, "--input", &input, "--params", good];
        let native = json(&switchyard(&args));
        let guest = json(&switchyard(&[&args[..], &["--guest"]].concat()));
        assert_eq!(native["policy"], name);
        assert_eq!(native["fallback"], Value::Null, "{name}");
        assert_eq!((native["build"].as_str(), guest["build"].as_str()), (Some("native"), Some("guest")));
        assert_eq!(guest["costs"], native["costs"], "{name}: both builds score alike");
        assert_eq!(guest["worker_id"], native["worker_id"], "{name}");
        for guest_flag in [&[][..], &["--guest"][..]] {
            let args =
                [&["select", "--policy", name, "--input", &input, "--params", bad][..], guest_flag].concat();
            let err = fails_with(&args, "configure-failed");
            assert!(err.contains(field), "{name}: the error names `{field}`: {err}");
        }
    }
    // The limit filters: at 4 requests in flight, workers 1 (9), 2 (5), 5 (7), 6 (4, 4) are out.
    let limited = json(&switchyard(&[
        "select",
        "--policy",
        "request-limit",
        "--input",
        &input,
        "--params",
        r#"{"max_in_flight_requests": 4}"#,
    ]));
    let kept: Vec<u64> =
        limited["costs"].as_array().unwrap().iter().map(|c| c["worker_id"].as_u64().unwrap()).collect();
    assert_eq!(kept, vec![0, 3, 4, 7]);
    // The class table: the fixture is a `latency` request; its row changes the costs.
    let latency = json(&switchyard(&["select", "--policy", "class-aware", "--input", &input]));
    let default = json(&switchyard(&["select", "--policy", "default", "--input", &input]));
    assert_ne!(latency["costs"], default["costs"]);
}

/// `switchyard policy list | head -1`: the reader closed the pipe, which is not the
/// command's failure. It ends with status 0 and says nothing (not `println!`'s panic,
/// with a backtrace hint and exit 101).
#[test]
fn a_closed_output_pipe_ends_the_command_quietly() {
    for args in [&["policy", "list"][..], &["select", "--policy", "default"][..]] {
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader); // closed before the command writes a byte
        let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .expect("runs switchyard");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {:?}, stderr: {stderr}", out.status);
        assert!(stderr.is_empty(), "{args:?}: nothing on stderr, got: {stderr}");
    }
}

/// `select --print-sample` prints the request `select` runs on without `--input`, byte
/// for byte, wherever it is run (not only in a checkout): a file to start from.
#[test]
fn select_prints_its_embedded_sample_to_start_a_request_file_from() {
    let elsewhere = std::env::temp_dir();
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["select", "--print-sample"])
        .current_dir(&elsewhere)
        .output()
        .expect("runs switchyard");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8(out.stdout.clone()).unwrap(),
        switchyard::selection::wire::SAMPLE_REQUEST,
        "the embedded bytes"
    );
    let request = temp_file("printed-sample.json", &out.stdout);
    let from_file = json(&switchyard(&["select", "--input", &request]));
    assert_eq!(from_file, json(&switchyard(&["select"])), "the same selection as the embedded sample");
    // Printing the sample and reading a request are two different asks.
    let both = switchyard(&["select", "--print-sample", "--input", &request]);
    assert!(!both.status.success() && both.stdout.is_empty());
    assert!(String::from_utf8_lossy(&both.stderr).contains("--input"));
}

/// A core module (not yet a component) is told to go through the command that wraps it.
#[test]
fn a_core_module_is_pointed_at_policy_wrap() {
    let core = temp_file("plain-core.wasm", b"\0asm\x01\0\0\0");
    for args in [&["policy", "check", &core][..], &["select", "--policy", &core][..]] {
        let err = fails_with(args, "core-module");
        assert!(err.contains("`switchyard policy wrap CORE.wasm -o POLICY.wasm`"), "{args:?}: {err}");
        assert!(!err.contains("wasm-tools"), "{args:?}: {err}");
    }
}

/// Every command taking `--tenant` says what it is in its help.
#[test]
fn every_tenant_flag_has_help() {
    for command in ["list", "upload", "assign", "rollback", "rollforward"] {
        let out = switchyard(&["policy", command, "-h"]);
        assert!(out.status.success());
        let help = String::from_utf8_lossy(&out.stdout);
        let line = help
            .lines()
            .find(|l| l.trim_start().starts_with("--tenant <TENANT>"))
            .unwrap_or_else(|| panic!("{help}"));
        let text = line.split_once("<TENANT>").unwrap().1.trim();
        assert!(text.len() > 10, "`policy {command}`: --tenant has no help: {line:?}");
    }
}

/// `--server host:port` is `http://host:port`; a URL that cannot be the server's is refused
/// naming where it came from, the flag or `SWITCHYARD_SERVER`, before any connection.
#[test]
fn a_server_url_without_a_scheme_is_http_and_a_bad_one_names_its_source() {
    use switchyard_test_util::server::{ADMIN, Server, temp_dir};
    let server = Server::start(&temp_dir("cli-server-url").join("data"), None, Some(ADMIN));
    let bare = server.addr();
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["tenant", "add", "acme", "--server", &bare])
        .env("SWITCHYARD_TOKEN", ADMIN)
        .env_remove("SWITCHYARD_SERVER")
        .output()
        .unwrap();
    let added = json(&out);
    assert_eq!(added["tenant"], "acme");
    let run = |flag: Option<&str>, env: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_switchyard"));
        command.args(["policy", "list", "--tenant", "acme"]).env("SWITCHYARD_TOKEN", ADMIN);
        if let Some(url) = flag {
            command.args(["--server", url]);
        }
        match env {
            Some(url) => command.env("SWITCHYARD_SERVER", url),
            None => command.env_remove("SWITCHYARD_SERVER"),
        };
        command.output().unwrap()
    };
    let listed = json(&run(None, Some(&format!("{bare}/"))));
    assert!(listed.is_object(), "{listed}");
    for (flag, env, source) in [
        (Some("ftp://127.0.0.1:1"), None, "--server `ftp://127.0.0.1:1`: the scheme `ftp` is not http"),
        (
            None,
            Some("https://127.0.0.1:1"),
            "SWITCHYARD_SERVER `https://127.0.0.1:1`: this client speaks plain HTTP",
        ),
        (Some("http://"), Some(bare.as_str()), "--server `http://`"),
    ] {
        let out = run(flag, env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag:?} {env:?}");
        assert!(stderr.starts_with(&format!("error: config: {source}")), "{flag:?} {env:?}: {stderr}");
        assert!(stderr.contains("http://HOST:PORT"), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}
