//! What every test here runs: the binaries (`switchyard-dynamo`, `dynamo-stock`, and the
//! `switchyard` CLI for `serve`), a client of Dynamo's selection API, and engines
//! publishing KV events over ZMQ in vLLM's wire format.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_test_util::server::{Client, Server};

/// Every worker's block size, tokens.
pub const BLOCK: usize = 4;
/// The prompt every selection sends: 8 blocks.
pub const PROMPT_BLOCKS: usize = 8;

pub fn prompt() -> Vec<u32> {
    (0..(PROMPT_BLOCKS * BLOCK) as u32).map(|t| 1_000 + t).collect()
}

/// The `switchyard` CLI's binary: built beside this test by `cargo test --workspace`, or
/// built now (in the profile of the test or bench running) when this package runs alone.
pub fn switchyard_binary() -> PathBuf {
    let binary = switchyard_test_util::server::binary();
    if !binary.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut command = Command::new(cargo);
        command.args(["build", "--locked", "--bin", "switchyard"]);
        if !cfg!(debug_assertions) {
            command.arg("--release");
        }
        let status = command.status().expect("running cargo build --bin switchyard");
        assert!(status.success(), "cargo build --bin switchyard failed");
    }
    binary
}

/// A running selection service (`switchyard-dynamo` or `dynamo-stock`), killed when dropped.
pub struct Dynamo {
    child: Child,
    pub base: String,
    log: PathBuf,
}

impl Drop for Dynamo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Dynamo {
    /// `switchyard-dynamo` with `switchyard` as its config's `[switchyard]` part.
    pub fn start(dir: &Path, switchyard: &str) -> Self {
        let port = free_port();
        let config = dir.join("dynamo.toml");
        std::fs::write(&config, format!("port = {port}\nindexer_threads = 1\n\n{switchyard}")).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_switchyard-dynamo"));
        command.arg("--config").arg(&config);
        Self::spawn(command, port, dir.join("dynamo.log"))
    }

    /// `switchyard-dynamo` running the default policy's guest (written into `dir`) for
    /// every partition, temperature 0, fail-closed.
    pub fn default_guest(dir: &Path) -> Self {
        let guest = dir.join("default.wasm");
        std::fs::write(&guest, switchyard_test_util::DEFAULT_POLICY).unwrap();
        Self::start(
            dir,
            &format!(
                "[switchyard]\ntemperature = 0\non_fault = \"closed\"\n[switchyard.policy]\nfile = {guest:?}\n"
            ),
        )
    }

    /// A real `switchyard serve` in `dir` with two tenants, and `switchyard-dynamo`
    /// following it: group-a runs acme's policy, which spins on every selection
    /// (fail-closed), group-b globex's, the default policy. The server must outlive it.
    pub fn hostile_neighbours(dir: &Path) -> (Server, Self) {
        switchyard_binary();
        let server = Server::with_config(dir, "");
        let c = Client::new(&server);
        let acme = c.add_tenant("acme");
        c.uploaded(&acme, "acme", "spin", switchyard_test_util::hostile::ILOOP, None);
        c.assigned(&acme, "acme", "latency", json!({ "policy": "spin", "on_fault": "closed" }));
        let globex = c.add_tenant("globex");
        c.uploaded(&globex, "globex", "mine", switchyard_test_util::DEFAULT_POLICY, None);
        c.assigned(&globex, "globex", "latency", json!({ "policy": "mine", "on_fault": "closed" }));
        let dynamo = Self::following(dir, "group-a = \"acme\"\ngroup-b = \"globex\"\n");
        (server, dynamo)
    }

    /// `dynamo-stock`: Dynamo's service choosing by its own reference policy.
    pub fn stock(dir: &Path) -> Self {
        let port = free_port();
        let mut command = Command::new(env!("CARGO_BIN_EXE_dynamo-stock"));
        command.args(["--indexer-threads", "1", "--port", &port.to_string()]);
        Self::spawn(command, port, dir.join("stock.log"))
    }

    fn spawn(mut command: Command, port: u16, log: PathBuf) -> Self {
        let child = command
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting the selection service");
        let dynamo = Self { child, base: format!("http://127.0.0.1:{port}"), log };
        let deadline = Instant::now() + Duration::from_secs(60);
        while dynamo.try_call("GET", "/health", None).is_err() {
            assert!(Instant::now() < deadline, "never healthy: {}", dynamo.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        dynamo
    }

    /// `switchyard-dynamo` following `dir`'s data dir, routing groups mapped to tenants by
    /// `tenants` (`group = "tenant"` lines).
    pub fn following(dir: &Path, tenants: &str) -> Self {
        let data = dir.join("data");
        Self::start(
            dir,
            &format!(
                "[switchyard]\ntemperature = 0\n[switchyard.policy.store]\ndata_dir = {data:?}\ntenant_from = \"routing_group\"\nclass = \"latency\"\npoll_ms = 20\n[switchyard.policy.store.tenants]\n{tenants}"
            ),
        )
    }

    /// Registers worker `id` of `group` (block size [`BLOCK`], one rank) with its engine's
    /// endpoint and `total_kv_blocks`.
    pub fn register(&self, group: &str, id: u64, engine: &Engine, total_kv_blocks: u64) {
        let worker = json!({
            "worker_id": id, "routing_group": group, "endpoint": format!("http://worker-{id}"),
            "block_size": BLOCK, "kv_events_endpoint": engine.endpoint, "total_kv_blocks": total_kv_blocks,
        });
        let (status, v) = self.call("POST", "/workers", Some(&worker));
        assert_eq!(status, 201, "{v}");
        assert_eq!(v["lifecycle"], "schedulable", "{v}");
    }

    /// Books a two-block request on worker `id` of `group`, `prefill` of its tokens still to run.
    pub fn book(&self, group: &str, id: u64, prefill: Option<usize>) {
        let mut booking = json!({
            "routing_group": group, "selection_id": format!("booked-{id}"), "worker_id": id, "dp_rank": 0,
            "token_ids": [9_000, 9_001, 9_002, 9_003, 9_004, 9_005, 9_006, 9_007],
        });
        if let Some(prefill) = prefill {
            booking["effective_prefill_tokens"] = json!(prefill);
        }
        let (status, v) = self.call("POST", "/reservations", Some(&booking));
        assert_eq!(status, 201, "{v}");
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn try_call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<(u16, Value), String> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build()
            .into();
        let url = format!("{}{path}", self.base);
        let response = match (method, body) {
            ("GET", _) => agent.get(&url).call(),
            ("DELETE", _) => agent.delete(&url).call(),
            ("POST", Some(body)) => {
                agent.post(&url).header("content-type", "application/json").send(body.to_string().as_bytes())
            }
            _ => unreachable!("no such call here"),
        };
        let mut response = response.map_err(|e| format!("{method} {path}: {e}"))?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().map_err(|e| e.to_string())?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::String(text))))
    }

    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        self.try_call(method, path, body).unwrap_or_else(|e| panic!("{e}\n{}", self.log()))
    }
}

/// An engine's KV-event publisher: a ZMQ PUB socket the service subscribes to.
pub struct Engine {
    socket: zmq::Socket,
    pub endpoint: String,
    seq: u64,
}

impl Engine {
    pub fn new(context: &zmq::Context) -> Self {
        let socket = context.socket(zmq::PUB).unwrap();
        socket.set_linger(0).unwrap();
        socket.bind("tcp://127.0.0.1:*").unwrap();
        let endpoint = socket.get_last_endpoint().unwrap().unwrap();
        Self { socket, endpoint, seq: 0 }
    }

    /// Publishes that this engine stored the first `blocks` blocks of `tokens`, as one
    /// chain from the root, hashes `hash_base`, `hash_base + 1`, ….
    pub fn stored(&mut self, tokens: &[u32], blocks: usize, hash_base: u64) {
        let hashes: Vec<u64> = (0..blocks as u64).map(|b| hash_base + b).collect();
        self.stored_blocks(None, &hashes, &tokens[..blocks * BLOCK]);
    }

    /// Publishes that this engine stored the blocks `hashes` (one per [`BLOCK`] tokens of
    /// `tokens`) after block `parent`.
    pub fn stored_blocks(&mut self, parent: Option<u64>, hashes: &[u64], tokens: &[u32]) {
        self.publish(&[KvEvent::stored(parent, hashes, tokens)]);
    }

    /// Publishes `events` as one batch, as vLLM does: frames (topic, sequence number,
    /// msgpack batch `[ts, events, dp_rank]`).
    pub fn publish(&mut self, events: &[KvEvent]) {
        let payload = rmp_serde::to_vec(&(0.0f64, events, None::<i32>)).unwrap();
        let frames: [&[u8]; 3] = [b"", &self.seq.to_be_bytes(), &payload];
        self.socket.send_multipart(frames, 0).unwrap();
        self.seq += 1;
    }
}

/// An engine's KV event in vLLM's positional (msgspec `array_like`) encoding.
#[derive(serde::Serialize)]
#[serde(untagged)]
pub enum KvEvent {
    /// `["BlockStored", block_hashes, parent, token_ids, block_size, lora_id, medium]`.
    Stored(&'static str, Vec<u64>, Option<u64>, Vec<u32>, u32, Option<u32>, &'static str),
    /// `["BlockRemoved", block_hashes, medium]`.
    Removed(&'static str, Vec<u64>, &'static str),
}

impl KvEvent {
    /// The blocks `hashes` (one per [`BLOCK`] tokens of `tokens`) stored after `parent`.
    pub fn stored(parent: Option<u64>, hashes: &[u64], tokens: &[u32]) -> Self {
        Self::Stored("BlockStored", hashes.to_vec(), parent, tokens.to_vec(), BLOCK as u32, None, "GPU")
    }

    /// The blocks `hashes` evicted.
    pub fn removed(hashes: &[u64]) -> Self {
        Self::Removed("BlockRemoved", hashes.to_vec(), "GPU")
    }
}

/// A port nobody listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}
