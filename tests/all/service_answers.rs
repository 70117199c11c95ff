//! `switchyard serve` says what is true: how a selection's class routed, where rollback
//! and roll-forward can go and what was collected, whether an upload compiled, what was
//! wrong with a request, and where it could not listen.

use std::process::{Command, Stdio};

use serde_json::{Value, json};

use switchyard_test_util::fixtures::DEFAULT_POLICY;
use switchyard_test_util::server::{
    ADMIN, Body, Client, Server, binary, serve_command, serve_refused, temp_dir, write_config,
};

fn kind(v: &Value) -> &str {
    v["error"]["kind"].as_str().unwrap_or_else(|| panic!("an error answer: {v}"))
}

fn message(v: &Value) -> &str {
    v["error"]["message"].as_str().unwrap_or_else(|| panic!("an error answer: {v}"))
}

/// `{"prefill_load_scale": n}`, URL-encoded: each `n` a distinct version of the same bytes.
fn scale(n: u32) -> String {
    format!("%7B%22prefill_load_scale%22%3A{n}%7D")
}

#[test]
fn a_misspelt_class_says_it_routed_by_no_assignment_and_is_counted_by_tenant() {
    let dir = temp_dir("answers-class");
    let server = Server::with_config(&dir, "");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, None);
    c.assigned(&token, "acme", "latency", json!({ "policy": "mine" }));

    let (status, v) = c.select(&token, "acme", Some("latnecy"));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["policy"], "default", "{v}");
    assert_eq!(v["policy_class"], "latnecy");
    assert_eq!(
        v["class"],
        json!({ "requested": "latnecy", "assigned": false, "reason": "unassigned-class" })
    );

    let (_, v) = c.select(&token, "acme", Some("latency"));
    assert_eq!(v["policy"], "mine", "{v}");
    assert_eq!(v["class"], json!({ "requested": "latency", "assigned": true, "reason": null }));

    // No class: the field is there, null, and the answer says why the default ran.
    let (_, v) = c.select(&token, "acme", None);
    let answer = v.as_object().unwrap();
    assert_eq!(answer.get("policy_class"), Some(&Value::Null), "{v}");
    assert_eq!(v["class"], json!({ "requested": null, "assigned": false, "reason": "no-class" }));

    // Counted by tenant; the caller's class is never a label.
    assert_eq!(c.metric("switchyard_unassigned_class_selections_total{tenant=\"acme\"}"), 1.0);
    assert!(!c.metrics().contains("latnecy"));
}

/// Rollback / roll-forward on `policy` of acme: (status, answer).
fn step(c: &Client, token: &str, way: &str) -> (u16, Value) {
    c.call("POST", &format!("/v1/tenants/acme/policies/mine/{way}"), Some(token), Body::None)
}

#[test]
fn rollback_and_rollforward_walk_the_kept_versions_and_refuse_truthfully() {
    let dir = temp_dir("answers-rollback");
    let server = Server::with_config(&dir, "");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let v1 = c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, None);
    let v2 = c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, Some(&scale(2)));
    c.assigned(&token, "acme", "latency", json!({ "policy": "mine" }));

    let (status, v) = step(&c, &token, "rollforward");
    assert_eq!((status, kind(&v)), (409, "no-newer-version"), "{v}");
    let (status, v) = step(&c, &token, "rollback");
    assert_eq!(status, 200, "{v}");
    assert_eq!((v["version"].as_str(), v["replaced"].as_str()), (Some(v1.as_str()), Some(v2.as_str())));
    assert_eq!(v["next"], json!([v2]));
    // Nothing older than v1: said so, not "only one active version" (it had two).
    let (status, v) = step(&c, &token, "rollback");
    assert_eq!((status, kind(&v)), (409, "no-previous-version"), "{v}");
    assert!(!message(&v).contains("only one"), "{v}");
    assert!(message(&v).contains(&v1[..12]), "{v}");
    // The version rolled back from was kept: roll forward to it, and back again.
    let (status, v) = step(&c, &token, "rollforward");
    assert_eq!(status, 200, "{v}");
    assert_eq!((v["version"].as_str(), v["replaced"].as_str()), (Some(v2.as_str()), Some(v1.as_str())));
    assert_eq!(c.select(&token, "acme", Some("latency")).1["version"], v2.as_str());
    let (status, v) = step(&c, &token, "rollforward");
    assert_eq!((status, kind(&v)), (409, "no-newer-version"), "{v}");
    assert_eq!(step(&c, &token, "rollback").0, 200);
    assert_eq!(c.select(&token, "acme", Some("latency")).1["version"], v1.as_str());
    assert_eq!(c.try_metric("switchyard_versions_collected_total{tenant=\"acme\"}"), None);

    // An upload after a rollback clears what lay ahead, and says what it collected.
    let (status, v) = c.upload(&token, "acme", "mine", DEFAULT_POLICY, Some(&scale(3)));
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["collected"], json!([{ "policy": "mine", "version": v2 }]));
    assert_eq!(c.metric("switchyard_versions_collected_total{tenant=\"acme\"}"), 1.0);
    let (status, v) = step(&c, &token, "rollforward");
    assert_eq!((status, kind(&v)), (409, "no-newer-version"), "{v}");
}

#[test]
fn a_rollback_to_a_version_trimmed_by_the_limit_says_it_was_collected() {
    let dir = temp_dir("answers-collected");
    let server = Server::with_config(&dir, "[service]\nmax_versions_per_policy = 2\n");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let v1 = c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, None);
    let v2 = c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, Some(&scale(2)));
    let (status, v) = c.upload(&token, "acme", "mine", DEFAULT_POLICY, Some(&scale(3)));
    assert_eq!(status, 201, "{v}");
    // The third version trimmed the first: the upload says so, and the metric counts it.
    assert_eq!(v["collected"], json!([{ "policy": "mine", "version": v1 }]));
    assert_eq!(c.metric("switchyard_versions_collected_total{tenant=\"acme\"}"), 1.0);
    let (status, v) = step(&c, &token, "rollback");
    assert_eq!((status, v["version"].as_str()), (200, Some(v2.as_str())), "{v}");
    let (status, v) = step(&c, &token, "rollback");
    assert_eq!((status, kind(&v)), (409, "version-collected"), "{v}");
    assert!(message(&v).contains(&v1[..12]) && message(&v).contains("max_versions_per_policy"), "{v}");
    // The listing shows the history, with the collected name in it.
    let (_, v) = c.call("GET", "/v1/tenants/acme/policies", Some(&token), Body::None);
    let mine = &v["policies"][0];
    assert_eq!(mine["previous"], json!([v1]), "{v}");
    assert_eq!(mine["versions"].as_array().unwrap().len(), 2, "{v}");
}

#[test]
fn a_reupload_of_the_same_bytes_says_it_reused_the_compile() {
    let dir = temp_dir("answers-reuse");
    let server = Server::with_config(&dir, "");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    let (status, first) = c.upload(&token, "acme", "mine", DEFAULT_POLICY, None);
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["compile"], "compiled");
    assert!(first["compile_ms"].as_f64().unwrap() > 0.0, "{first}");
    let compiles = c.metric("switchyard_compile_seconds_count{tenant=\"acme\"}");
    let (status, again) = c.upload(&token, "acme", "mine", DEFAULT_POLICY, None);
    assert_eq!(status, 201, "{again}");
    assert_eq!(
        (again["compile"].as_str(), again["compile_ms"].as_f64()),
        (Some("reused"), Some(0.0)),
        "{again}"
    );
    assert_eq!(c.metric("switchyard_compile_seconds_count{tenant=\"acme\"}"), compiles, "nothing compiled");
}

#[test]
fn refusals_say_what_to_send_and_where_params_went_wrong() {
    let dir = temp_dir("answers-messages");
    let server = Server::with_config(&dir, "");
    let c = Client::new(&server);
    let token = c.add_tenant("acme");

    let (status, v) = c.call("GET", "/v1/tenants/acme/policies", None, Body::None);
    assert_eq!((status, kind(&v)), (401, "unauthorized"));
    assert!(message(&v).contains("send `Authorization: Bearer <token>`"), "{v}");

    // {"a": 1,} — a syntax error: not valid JSON, and where.
    let (status, v) = c.upload(&token, "acme", "mine", DEFAULT_POLICY, Some("%7B%22a%22%3A%201%2C%7D"));
    assert_eq!((status, kind(&v)), (400, "invalid-params"), "{v}");
    assert!(message(&v).contains("not valid JSON") && message(&v).contains("line 1 column"), "{v}");
    // [1] — valid JSON, not an object.
    let (status, v) = c.upload(&token, "acme", "mine", DEFAULT_POLICY, Some("%5B1%5D"));
    assert_eq!((status, kind(&v)), (400, "invalid-params"), "{v}");
    assert!(message(&v).contains("must be a JSON object, not an array"), "{v}");
}

#[test]
fn serve_on_a_port_in_use_names_the_address_and_writes_no_data_dir() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let data = temp_dir("answers-port").join("data");
    let mut command = Command::new(binary());
    command.args(["serve", "--listen", &addr, "--data-dir"]).arg(&data).env_remove("SWITCHYARD_ADMIN_TOKEN");
    let (code, stderr) = serve_refused(command);
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains(&addr), "{stderr}");
    assert!(!data.exists(), "the data dir was written before the bind failed");
    drop(taken);
}

#[test]
fn a_redirected_log_has_no_colour_codes() {
    let dir = temp_dir("answers-log");
    let log = dir.join("serve.log");
    std::fs::create_dir_all(&dir).unwrap();
    let config = write_config(&dir, "");
    let mut server = Server::spawn(
        serve_command(&dir.join("data"), Some(&config), Some(ADMIN)),
        Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    let c = Client::new(&server);
    let token = c.add_tenant("acme");
    c.uploaded(&token, "acme", "mine", DEFAULT_POLICY, None);
    server.kill();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("uploaded"), "{text}");
    assert!(!text.contains('\x1b'), "ANSI escapes in a redirected log:\n{text:?}");
}

#[test]
fn metrics_list_fault_kinds_sorted_and_compiles_by_tenant() {
    let dir = temp_dir("answers-metrics");
    let server = Server::with_config(&dir, "");
    let c = Client::new(&server);
    for tenant in ["globex", "acme"] {
        let token = c.add_tenant(tenant);
        c.uploaded(
            &token,
            tenant,
            "mine",
            DEFAULT_POLICY,
            Some(&scale(if tenant == "acme" { 1 } else { 2 })),
        );
        c.uploaded(&token, tenant, "other", DEFAULT_POLICY, None);
    }
    let text = c.metrics();
    let faults: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("switchyard_policy_faults_total{"))
        .map(|l| l.rsplit_once(' ').unwrap().0)
        .collect();
    assert_eq!(faults.len(), 4 * 8, "{text}");
    let mut sorted = faults.clone();
    sorted.sort();
    assert_eq!(faults, sorted, "fault lines in order of their labels");
    // Compiles are the uploading tenant's: the first upload of the bytes compiled them.
    let compiles = |t: &str| c.try_metric(&format!("switchyard_compile_seconds_count{{tenant=\"{t}\"}}"));
    assert_eq!((compiles("globex"), compiles("acme")), (Some(1.0), None), "{text}");
}
