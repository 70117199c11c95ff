//! `switchyard serve` over HTTP: every endpoint, authentication, validation kinds,
//! limits, faults, the CLI client, and the admin token file.

use std::process::Command;

use serde_json::{Value, json};

use switchyard_test_util::fixtures::{DEFAULT_POLICY, PROBE};
use switchyard_test_util::server::{ADMIN, Body, Client, Server, select_body, temp_dir};

fn kind(v: &Value) -> &str {
    v["error"]["kind"].as_str().unwrap_or_else(|| panic!("an error answer: {v}"))
}

#[test]
fn service_endpoints_end_to_end() {
    let dir = temp_dir("service-endpoints");
    let server = Server::start(&dir, None, Some(ADMIN));
    let c = Client::new(&server);

    let (status, body) = c.call("GET", "/healthz", None, Body::None);
    assert_eq!((status, body), (200, Value::String("ok\n".into())));

    // Tenants: admin only.
    let acme = json!({ "name": "acme" });
    assert_eq!(kind(&c.call("POST", "/v1/tenants", None, Body::Json(acme.clone())).1), "unauthorized");
    let (status, v) = c.call("POST", "/v1/tenants", Some("nope"), Body::Json(acme.clone()));
    assert_eq!((status, kind(&v)), (401, "unauthorized"));
    let acme_token = c.add_tenant("acme");
    let globex_token = c.add_tenant("globex");
    let (status, v) = c.call("POST", "/v1/tenants", Some(&acme_token), Body::Json(json!({ "name": "x" })));
    assert_eq!((status, kind(&v)), (403, "forbidden"));
    let (status, v) = c.call("POST", "/v1/tenants", Some(ADMIN), Body::Json(acme));
    assert_eq!((status, kind(&v)), (409, "exists"));
    let (status, v) = c.call("POST", "/v1/tenants", Some(ADMIN), Body::Json(json!({ "name": "Bad Name" })));
    assert_eq!((status, kind(&v)), (400, "invalid-name"));
    let (status, v) = c.call("POST", "/v1/routers", Some(ADMIN), Body::Json(json!({ "name": "edge" })));
    assert_eq!(status, 201, "{v}");
    let router_token = v["token"].as_str().unwrap().to_string();

    // Upload: 401 without a token, 403 with another tenant's, 201 with the version.
    let path = "/v1/tenants/acme/policies/mine";
    assert_eq!(c.call("PUT", path, None, Body::Bytes(DEFAULT_POLICY)).0, 401);
    let (status, v) = c.call("PUT", path, Some(&globex_token), Body::Bytes(DEFAULT_POLICY));
    assert_eq!((status, kind(&v)), (403, "forbidden"));
    let builtin = switchyard_builtins::find("default").unwrap().component;
    let (status, v) = c.upload(&acme_token, "acme", "mine", builtin, None);
    assert_eq!(status, 201, "{v}");
    let v1 = v["version"].as_str().unwrap().to_string();
    assert_eq!(v1.len(), 64);
    assert_eq!(v1, v["sha256"], "without parameters the version is the component's sha256");
    let check = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["select", "--policy", "default", "--guest"])
        .output()
        .unwrap();
    let local: Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_eq!(local["version"], v1, "the version is the sha256 `switchyard select` prints");

    // A second version: same bytes, parameters in the query → a distinct version.
    let (status, v) = c.call(
        "PUT",
        &format!("{path}?params=%7B%22prefill_load_scale%22%3A0%7D"),
        Some(&acme_token),
        Body::Bytes(builtin),
    );
    assert_eq!(status, 201, "{v}");
    let v2 = v["version"].as_str().unwrap().to_string();
    assert_ne!(v2, v1);

    // Select: an unassigned class is the builtin default, natively.
    let (status, v) =
        c.call("POST", "/v1/select", Some(&acme_token), Body::Json(select_body("acme", Some("latency"))));
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["policy"].as_str(), v["build"].as_str(), v["version"].clone()),
        (Some("default"), Some("native"), Value::Null)
    );
    assert_eq!((v["worker_id"].as_u64(), v["cost"].as_f64()), (Some(3), Some(376.0)));

    // Assign: follow the active version (v2, parameters: load only → cost 120).
    let assign = |class: &str, body: Value, token: &str| {
        c.call("PUT", &format!("/v1/tenants/acme/classes/{class}"), Some(token), Body::Json(body))
    };
    let (status, v) = assign("latency", json!({ "policy": "mine" }), &acme_token);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["version"], v2.as_str());
    let select = |token: &str, class: &str| {
        c.call("POST", "/v1/select", Some(token), Body::Json(select_body("acme", Some(class))))
    };
    let (status, v) = select(&router_token, "latency");
    assert_eq!(status, 200, "a router may select for any tenant: {v}");
    assert_eq!(
        (v["policy"].as_str(), v["build"].as_str(), v["version"].as_str()),
        (Some("mine"), Some("guest"), Some(v2.as_str()))
    );
    assert_eq!((v["cost"].as_f64(), &v["fallback"]), (Some(120.0), &Value::Null));
    // The pick alone: every candidate's cost only when asked for.
    assert_eq!((v["candidates"].as_u64(), v.get("costs")), (Some(9), None), "{v}");
    // Pinned to v1: the default cost again.
    assert_eq!(assign("pinned", json!({ "policy": "mine", "version": v1 }), &acme_token).0, 200);
    let (_, v) = select(&acme_token, "pinned");
    assert_eq!((v["version"].as_str(), v["cost"].as_f64()), (Some(v1.as_str()), Some(376.0)));
    // A builtin by name; unknown policies and versions are 404.
    assert_eq!(assign("builtin", json!({ "policy": "default" }), &acme_token).0, 200);
    assert_eq!(select(&acme_token, "builtin").1["build"], "native");
    let (status, v) = assign("x", json!({ "policy": "nope" }), &acme_token);
    assert_eq!((status, kind(&v)), (404, "unknown-policy"));
    let (status, v) = assign("x", json!({ "policy": "mine", "version": "ab" }), &acme_token);
    assert_eq!((status, kind(&v)), (404, "unknown-version"));
    let (status, v) = assign("x", json!({ "policy": "mine", "on_fault": "maybe" }), &acme_token);
    assert_eq!((status, kind(&v)), (400, "invalid-input"));
    assert_eq!(assign("x", json!({ "policy": "mine" }), &globex_token).0, 403);

    // Select errors: another tenant's token, an unknown tenant, a bad request.
    let (status, v) =
        c.call("POST", "/v1/select", Some(&globex_token), Body::Json(select_body("acme", None)));
    assert_eq!((status, kind(&v)), (403, "forbidden"));
    let (status, v) = c.call("POST", "/v1/select", Some(ADMIN), Body::Json(select_body("nobody", None)));
    assert_eq!((status, kind(&v)), (404, "unknown-tenant"));
    let (status, v) =
        c.call("POST", "/v1/select", Some(ADMIN), Body::Json(json!({ "tenant": "acme", "block_size": 0 })));
    assert_eq!((status, kind(&v)), (400, "invalid-input"));
    assert!(v["error"]["message"].as_str().unwrap().contains("prompt_tokens"), "{v}");
    assert_eq!(c.call("POST", "/v1/select", None, Body::Json(select_body("acme", None))).0, 401);

    // Rollback: v1 is active again, and the class that follows the policy uses it.
    let (status, v) =
        c.call("POST", "/v1/tenants/acme/policies/mine/rollback", Some(&acme_token), Body::None);
    assert_eq!(status, 200, "{v}");
    assert_eq!((v["version"].as_str(), v["replaced"].as_str()), (Some(v1.as_str()), Some(v2.as_str())));
    assert_eq!(select(&acme_token, "latency").1["version"], v1.as_str());
    let (status, v) =
        c.call("POST", "/v1/tenants/acme/policies/mine/rollback", Some(&acme_token), Body::None);
    assert_eq!((status, kind(&v)), (409, "no-previous-version"));

    // Faults: the probe always answers with its own error. Fail-open → the native
    // default decides and says why; fail-closed → 502 with the fault's kind.
    assert_eq!(c.upload(&acme_token, "acme", "probe", PROBE, None).0, 201);
    assert_eq!(assign("open", json!({ "policy": "probe", "on_fault": "open" }), &acme_token).0, 200);
    assert_eq!(assign("closed", json!({ "policy": "probe", "on_fault": "closed" }), &acme_token).0, 200);
    let (status, v) = select(&acme_token, "open");
    assert_eq!(status, 200, "{v}");
    assert_eq!((v["policy"].as_str(), v["build"].as_str()), (Some("default"), Some("native")));
    assert_eq!(v["fallback"]["kind"], "policy-error");
    assert_eq!(v["worker_id"], 3);
    let (status, v) = select(&acme_token, "closed");
    assert_eq!((status, kind(&v)), (502, "policy-error"));

    // List: names, versions, the active one, counters and classes.
    let (status, v) = c.call("GET", "/v1/tenants/acme/policies", Some(&acme_token), Body::None);
    assert_eq!(status, 200, "{v}");
    let mine = v["policies"].as_array().unwrap().iter().find(|p| p["name"] == "mine").unwrap().clone();
    assert_eq!(mine["active"], v1.as_str());
    // v2, rolled back from, is kept: a roll-forward makes it active again.
    assert_eq!(mine["versions"].as_array().unwrap().len(), 2);
    assert_eq!(mine["versions"][0]["version"], v1.as_str());
    assert_eq!(mine["next"], serde_json::json!([v2]));
    assert!(mine["selections"].as_u64().unwrap() >= 3);
    let probe = v["policies"].as_array().unwrap().iter().find(|p| p["name"] == "probe").unwrap().clone();
    assert_eq!(probe["faults"]["policy-error"], 2);
    assert_eq!(v["classes"]["pinned"]["version"], v1.as_str());
    assert_eq!(v["classes"]["pinned"]["pinned"], true);
    assert_eq!(c.call("GET", "/v1/tenants/acme/policies", Some(&globex_token), Body::None).0, 403);

    // Metrics: Prometheus text with the counters just produced.
    let (status, Value::String(text)) = c.call("GET", "/metrics", Some(ADMIN), Body::None) else {
        panic!("text")
    };
    assert_eq!(status, 200);
    assert!(
        text.contains(
            "switchyard_policy_faults_total{tenant=\"acme\",policy=\"probe\",kind=\"policy-error\"} 2"
        ),
        "{text}"
    );
    assert!(text.contains("switchyard_fallbacks_total{tenant=\"acme\",policy=\"probe\"} 1"), "{text}");
    assert!(text.contains("switchyard_policy_quarantined{tenant=\"acme\",policy=\"mine\"} 0"), "{text}");
    let line = |name: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {text}"))
    };
    assert!(line("switchyard_selections_total{tenant=\"acme\",policy=\"mine\"}") >= 3.0);
    assert!(
        line("switchyard_fuel_used_total{tenant=\"acme\",policy=\"mine\"}") > 0.0,
        "guest calls burn fuel"
    );
    assert!(line("switchyard_selection_seconds_count{tenant=\"acme\",policy=\"mine\"}") >= 3.0);
    assert!(line("switchyard_compile_seconds_count") >= 2.0, "two distinct components compiled");
    assert_eq!(c.call("GET", "/v1/nothing", None, Body::None).0, 404);
}

/// A hand-assembled component that imports a WASI interface (an empty instance type)
/// and exports nothing: valid wasm, compiles, and asks for a capability no policy gets.
fn wasi_importer() -> Vec<u8> {
    let name = b"wasi:cli/environment@0.2.0";
    // Type section (7): one instance type (0x42) with no declarations.
    let types = [1u8, 0x42, 0x00];
    // Import section (10): one import, plain name (0x00), of instance type 0 (0x05 0x00).
    let mut import = vec![1u8, 0x00, name.len() as u8];
    import.extend_from_slice(name);
    import.extend_from_slice(&[0x05, 0x00]);
    let mut bytes = b"\0asm\x0d\0\x01\0".to_vec();
    bytes.extend_from_slice(&[7, types.len() as u8]);
    bytes.extend_from_slice(&types);
    bytes.extend_from_slice(&[10, import.len() as u8]);
    bytes.extend_from_slice(&import);
    bytes
}

#[test]
fn uploads_are_refused_with_the_validation_kind_and_limits_are_clear_errors() {
    let dir = temp_dir("service-refusals");
    // Components up to 200,000 bytes (the default policy fits); bodies up to 300,000.
    let server = Server::with_config(
        &dir,
        "[limits]\nmax_component_bytes = 200000\n[service]\nmax_body_bytes = 300000\nuploads_per_minute = 12\nmax_policies_per_tenant = 1\n",
    );
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let empty_component: &[u8] = b"\0asm\x0d\0\x01\0";
    let cases: [(&str, &[u8], &str); 6] = [
        ("json", b"{\"not\": \"wasm\"}", "not-wasm"),
        ("core", b"\0asm\x01\0\0\0", "core-module"),
        ("empty", empty_component, "wrong-world"),
        ("wasi", &wasi_importer(), "forbidden-import"),
        ("garbage", b"\0asm\x0d\0\x01\0\xff\xff\xff", "compile-failed"),
        ("huge", &[0u8; 250_000], "too-large"),
    ];
    for (name, bytes, expected) in cases {
        let (status, v) = c.upload(&token, "acme", name, bytes, None);
        assert_eq!((status, kind(&v)), (400, expected), "{name}: {v}");
    }
    let (status, v) = c.upload(&token, "acme", "p", DEFAULT_POLICY, Some("%7B%22bogus%22%3A1%7D"));
    assert_eq!((status, kind(&v)), (400, "configure-failed"), "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("bogus"), "names the field: {v}");
    let (status, v) = c.upload(&token, "acme", "p", DEFAULT_POLICY, Some("%5B1%5D"));
    assert_eq!((status, kind(&v)), (400, "invalid-params"));
    let (status, v) = c.upload(&token, "acme", "default", DEFAULT_POLICY, None);
    assert_eq!((status, kind(&v)), (400, "invalid-name"), "a builtin's name is reserved");

    // Over the body limit: 413, and the connection is answered, not reset.
    let (status, v) = c.upload(&token, "acme", "p", &[0u8; 400_000], None);
    assert_eq!((status, kind(&v)), (413, "body-too-large"));
    assert!(v["error"]["message"].as_str().unwrap().contains("max_body_bytes"), "{v}");

    // Policies per tenant: one.
    assert_eq!(c.upload(&token, "acme", "one", DEFAULT_POLICY, None).0, 201);
    let (status, v) = c.upload(&token, "acme", "two", DEFAULT_POLICY, None);
    assert_eq!((status, kind(&v)), (409, "too-many-policies"));
    assert!(v["error"]["message"].as_str().unwrap().contains("max_policies_per_tenant"), "{v}");

    // Uploads per minute: 12. Ten counted so far for acme: every attempt that got past
    // authentication, the name, the parameters' size and the policy count is charged
    // before its body is read (it may cost a compile), the one whose parameters are no
    // object and the one over `max_body_bytes` included. So two more are taken and the
    // third is refused.
    for _ in 0..2 {
        assert_eq!(kind(&c.upload(&token, "acme", "one", b"x", None).1), "not-wasm");
    }
    let (status, v) = c.upload(&token, "acme", "one", b"x", None);
    assert_eq!((status, kind(&v)), (429, "rate-limited"));
    assert!(v["error"]["message"].as_str().unwrap().contains("uploads_per_minute"), "{v}");
    // Another tenant has its own allowance.
    let other = c.add_tenant("other");
    assert_eq!(kind(&c.upload(&other, "other", "x", b"x", None).1), "not-wasm");

    // A compile that takes longer than allowed (1 ms here) is refused as such.
    let dir2 = temp_dir("service-compile-timeout");
    let slow = Server::with_config(&dir2, "[limits]\ncompile_timeout_ms = 1\n");
    let c = Client::new(&slow);
    let token = c.add_tenant("acme");
    let (status, v) = c.upload(&token, "acme", "p", DEFAULT_POLICY, None);
    assert_eq!((status, kind(&v)), (400, "compile-timeout"), "{v}");
}

#[test]
fn cli_client_adds_tenants_uploads_assigns_lists_and_rolls_back() {
    let dir = temp_dir("service-cli");
    let server = Server::start(&dir.join("data"), None, Some(ADMIN));
    let run = |args: &[&str], token: &str| -> Value {
        let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(args)
            .args(["--server", server.url()])
            .env("SWITCHYARD_TOKEN", token)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let tenant = run(&["tenant", "add", "acme"], ADMIN);
    let token = tenant["token"].as_str().unwrap().to_string();
    let file = dir.join("least.wasm");
    std::fs::write(&file, DEFAULT_POLICY).unwrap();
    let file = file.to_str().unwrap();
    let first = run(&["policy", "upload", file, "--tenant", "acme"], &token);
    assert_eq!(first["policy"], "least", "named after the file");
    let second = run(
        &["policy", "upload", file, "--tenant", "acme", "--params", r#"{"prefill_load_scale": 0}"#],
        &token,
    );
    assert_ne!(first["version"], second["version"]);
    let assigned = run(
        &[
            "policy",
            "assign",
            "--tenant",
            "acme",
            "--class",
            "latency",
            "--policy",
            "least",
            "--on-fault",
            "closed",
        ],
        &token,
    );
    assert_eq!(
        (assigned["version"].clone(), assigned["on_fault"].clone()),
        (second["version"].clone(), json!("closed"))
    );
    let back = run(&["policy", "rollback", "least", "--tenant", "acme"], &token);
    assert_eq!(back["version"], first["version"]);
    // The version rolled back from is kept: forward to it, and back again.
    let forward = run(&["policy", "rollforward", "least", "--tenant", "acme"], &token);
    assert_eq!(forward["version"], second["version"]);
    let back = run(&["policy", "rollback", "least", "--tenant", "acme"], &token);
    assert_eq!(back["version"], first["version"]);
    let listed = run(&["policy", "list", "--tenant", "acme"], &token);
    assert_eq!(listed["policies"][0]["active"], first["version"]);
    assert_eq!(listed["classes"]["latency"]["version"], first["version"]);
    // Without --tenant, `policy list` still lists the builtins, offline.
    let builtins = run(&["policy", "list"], "");
    assert_eq!(builtins[0]["name"], "default");

    // An error answer is one `error: <kind>:` line and a non-zero exit.
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["policy", "upload", file, "--tenant", "acme", "--server", server.url(), "--token", "wrong"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("error: unauthorized:") && stderr.contains("401"), "{stderr}");
    assert!(stderr.contains("the token given (--token or SWITCHYARD_TOKEN) was refused"), "{stderr}");
    // No token at all: the CLI says how to give one (the server names only its header).
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["policy", "list", "--tenant", "acme", "--server", server.url()])
        .env_remove("SWITCHYARD_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no token was given: pass --token or set SWITCHYARD_TOKEN"), "{stderr}");
}

#[test]
fn admin_token_is_written_once_with_mode_0600_and_kept_across_restarts() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("service-admin-token");
    let mut server = Server::start(&dir, None, None);
    let path = dir.join("admin.token");
    let token = std::fs::read_to_string(&path).expect("admin.token written").trim().to_string();
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(token.len() >= 32);
    let body = || Body::Json(json!({ "name": "acme" }));
    assert_eq!(Client::new(&server).call("POST", "/v1/tenants", Some(&token), body()).0, 201);
    server.kill();
    let server = Server::start(&dir, None, None);
    assert_eq!(std::fs::read_to_string(&path).unwrap().trim(), token, "not rewritten");
    let c = Client::new(&server);
    assert_eq!(c.call("POST", "/v1/tenants", Some(&token), body()).0, 409, "the tenant survived");
    // Only hashes of tokens are stored.
    let record = std::fs::read_to_string(dir.join("tenants/acme.json")).unwrap();
    assert!(!record.contains(&token) && record.contains("token_sha256"), "{record}");
    // With SWITCHYARD_ADMIN_TOKEN set, that token is the admin's.
    drop(server);
    let server = Server::start(&dir, None, Some(ADMIN));
    assert_eq!(
        Client::new(&server).call("POST", "/v1/tenants", Some(ADMIN), Body::Json(json!({ "name": "b" }))).0,
        201
    );
}
